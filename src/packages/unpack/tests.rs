//! Tests of the wheel unpacker: the refusals its documentation lists,
//! on wheels built here.

use super::*;
use crate::packages::test_wheel::{TestWheel, Tweak};
use cap_std::ambient_authority;
use std::io::Cursor;

fn limits() -> UnpackLimits {
    UnpackLimits {
        max_members: 100,
        max_total_bytes: 2 << 20,
        max_member_bytes: 1 << 20,
        max_metadata_bytes: 1 << 20,
    }
}

/// Unpacks into `<tmp>/staging`; returns the result and every path under
/// the temp root afterwards, so tests can check nothing escaped.
fn unpack(bytes: Vec<u8>, filename: &str) -> (Result<Unpacked, WheelError>, Vec<String>) {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("staging")).unwrap();
    let dir = Dir::open_ambient_dir(tmp.path().join("staging"), ambient_authority()).unwrap();
    let wheel: WheelFilename = filename.parse().unwrap();
    let result = unpack_wheel(
        Cursor::new(bytes),
        &wheel,
        &dir,
        &limits(),
        &mut StagingRoom::unlimited(),
    );
    let mut paths = Vec::new();
    let mut stack = vec![tmp.path().to_path_buf()];
    while let Some(p) = stack.pop() {
        for e in std::fs::read_dir(&p).unwrap() {
            let e = e.unwrap();
            let rel = e
                .path()
                .strip_prefix(tmp.path())
                .unwrap()
                .display()
                .to_string();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            }
            paths.push(rel);
        }
    }
    paths.sort();
    (result, paths)
}

fn outside(paths: &[String]) -> Vec<&String> {
    paths.iter().filter(|p| !p.starts_with("staging")).collect()
}

#[test]
fn a_good_wheel_unpacks_and_purelib_data_is_merged() {
    let w = TestWheel::new("demo", "1.0")
        .file("demo/__init__.py", "VALUE = 1\n")
        .file("demo-1.0.data/purelib/extra_mod.py", "X = 2\n")
        .file("demo.pth", "import sys\n");
    let (result, paths) = unpack(w.build(), "demo-1.0-py3-none-any.whl");
    let unpacked = result.unwrap();
    assert_eq!(unpacked.dist_info, "demo-1.0.dist-info");
    assert!(
        paths.contains(&"staging/demo/__init__.py".to_owned()),
        "{paths:?}"
    );
    assert!(
        paths.contains(&"staging/extra_mod.py".to_owned()),
        "{paths:?}"
    );
    assert!(!paths.iter().any(|p| p.contains(".data")), "{paths:?}");
    assert_eq!(unpacked.startup_files, ["demo.pth"]);
    assert!(outside(&paths).is_empty());
}

#[test]
fn scripts_headers_and_data_are_checked_but_not_written() {
    let w = TestWheel::new("demo", "1.0")
        .file("demo/__init__.py", "")
        .file("demo-1.0.data/scripts/tool", "#!/bin/sh\n")
        .file("demo-1.0.data/headers/demo.h", "")
        .file("demo-1.0.data/data/share/man/man1/demo.1", "");
    let (result, paths) = unpack(w.build(), "demo-1.0-py3-none-any.whl");
    let unpacked = result.unwrap();
    assert_eq!(unpacked.dropped.len(), 3, "{:?}", unpacked.dropped);
    assert!(
        unpacked
            .dropped
            .iter()
            .any(|d| d.contains("scripts/tool (scripts)"))
    );
    assert!(
        !paths
            .iter()
            .any(|p| p.contains("tool") || p.contains("man1") || p.contains(".h")),
        "{paths:?}"
    );
    assert!(!unpacked.files.iter().any(|f| f.path.contains(".data")));
}

#[test]
fn installed_record_lists_the_installed_paths() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = Dir::open_ambient_dir(tmp.path(), ambient_authority()).unwrap();
    let w = TestWheel::new("demo", "1.0").file("demo-1.0.data/purelib/m.py", "X = 2\n");
    let wheel: WheelFilename = "demo-1.0-py3-none-any.whl".parse().unwrap();
    let mut room = StagingRoom::unlimited();
    let unpacked =
        unpack_wheel(Cursor::new(w.build()), &wheel, &dir, &limits(), &mut room).unwrap();
    write_installed_record(&dir, &unpacked, "mcp-code-sandbox", &mut room).unwrap();
    let record = std::fs::read_to_string(tmp.path().join("demo-1.0.dist-info/RECORD")).unwrap();
    assert!(record.contains("\nm.py,sha256="), "{record}");
    assert!(
        record.contains("demo-1.0.dist-info/INSTALLER,sha256="),
        "{record}"
    );
    assert!(record.contains("demo-1.0.dist-info/RECORD,,"), "{record}");
    assert!(!record.contains(".data"), "{record}");
    Record::parse(&record).unwrap();
}

/// Each malicious form, the error it must give, and nothing outside staging.
#[test]
fn malicious_wheels_are_refused_and_nothing_escapes() {
    let base = || TestWheel::new("demo", "1.0").file("demo/__init__.py", "ok = 1\n");
    type Expect = fn(&WheelError) -> bool;
    let cases: Vec<(&str, TestWheel, Expect)> = vec![
        ("dot-dot", base().file("../evil.py", "x"), |e| {
            matches!(e, WheelError::BadMemberName { .. })
        }),
        (
            "nested dot-dot",
            base().file("demo/../../evil.py", "x"),
            |e| matches!(e, WheelError::BadMemberName { .. }),
        ),
        ("absolute", base().file("/tmp/evil.py", "x"), |e| {
            matches!(e, WheelError::BadMemberName { .. })
        }),
        ("drive", base().file("C:/evil.py", "x"), |e| {
            matches!(e, WheelError::BadMemberName { .. })
        }),
        ("backslash", base().file("..\\evil.py", "x"), |e| {
            matches!(e, WheelError::BadMemberName { .. })
        }),
        ("control", base().file("demo/a\u{1}b.py", "x"), |e| {
            matches!(e, WheelError::BadMemberName { .. })
        }),
        ("empty component", base().file("demo//x.py", "x"), |e| {
            matches!(e, WheelError::BadMemberName { .. })
        }),
        ("symlink", base().symlink("demo/link", "/etc/passwd"), |e| {
            matches!(e, WheelError::Link { .. })
        }),
        (
            "duplicate",
            base()
                .file("demo/__init__.pX", "again")
                .tweak(Tweak::RenameMember(
                    "demo/__init__.pX".into(),
                    "demo/__init__.py".into(),
                )),
            |e| matches!(e, WheelError::Corrupt(m) if m.contains("twice")),
        ),
        (
            "case duplicate",
            base().file("Demo/__init__.py", "x"),
            |e| matches!(e, WheelError::Duplicate { .. }),
        ),
        (
            "purelib over root",
            base().file("demo-1.0.data/purelib/demo/__init__.py", "x"),
            |e| matches!(e, WheelError::Duplicate { .. }),
        ),
        (
            "platlib",
            base().file("demo-1.0.data/platlib/x.so", "x"),
            |e| matches!(e, WheelError::DataDir { .. }),
        ),
        (
            "scripts",
            base().file("demo-1.0.data/scripts/../../x", "x"),
            |e| matches!(e, WheelError::BadMemberName { .. }),
        ),
        (
            "unknown data dir",
            base().file("demo-1.0.data/elsewhere/x", "x"),
            |e| matches!(e, WheelError::DataDir { .. }),
        ),
        (
            "dropped but unlisted",
            base()
                .file("demo-1.0.data/scripts/tool", "x")
                .tweak(Tweak::Unlisted("demo-1.0.data/scripts/tool".into())),
            |e| matches!(e, WheelError::NotInRecord { .. }),
        ),
        (
            "foreign data",
            base().file("other-1.0.data/purelib/x.py", "x"),
            |e| matches!(e, WheelError::ForeignDataDir { .. }),
        ),
        (
            "two dist-infos",
            base().file(
                "other-2.0.dist-info/METADATA",
                "Name: other\nVersion: 2.0\n",
            ),
            |e| matches!(e, WheelError::DistInfoCount { .. }),
        ),
        (
            "dist-info mismatch",
            base().tweak(Tweak::DistInfoName("evil-1.0".into())),
            |e| matches!(e, WheelError::NameMismatch { .. }),
        ),
        (
            "metadata mismatch",
            base().tweak(Tweak::MetadataVersion("9.9".into())),
            |e| matches!(e, WheelError::NameMismatch { .. }),
        ),
        (
            "not purelib",
            base().tweak(Tweak::RootIsPurelib(false)),
            |e| matches!(e, WheelError::BadWheelInfo(MetadataError::NotPurelib)),
        ),
        ("no record", base().tweak(Tweak::NoRecord), |e| {
            matches!(e, WheelError::Missing(_))
        }),
        (
            "unlisted file",
            base().tweak(Tweak::Unlisted("demo/hidden.py".into())),
            |e| matches!(e, WheelError::NotInRecord { .. }),
        ),
        (
            "wrong hash",
            base().tweak(Tweak::WrongHash("demo/__init__.py".into())),
            |e| matches!(e, WheelError::RecordMismatch { .. }),
        ),
        (
            "wrong size",
            base().tweak(Tweak::WrongSize("demo/__init__.py".into())),
            |e| matches!(e, WheelError::RecordMismatch { .. }),
        ),
        (
            "record path outside",
            base().tweak(Tweak::RecordExtra("../../etc/passwd".into())),
            |e| matches!(e, WheelError::RecordPathOutside { .. }),
        ),
        (
            "record lists missing",
            base().tweak(Tweak::RecordExtra("demo/ghost.py".into())),
            |e| matches!(e, WheelError::RecordMissingFile { .. }),
        ),
        (
            "member too large",
            base().file("demo/big.bin", vec![0u8; (1 << 20) + 1]),
            |e| matches!(e, WheelError::MemberTooLarge { .. }),
        ),
        (
            "wheel too large",
            base()
                .file("demo/a.bin", vec![0u8; 900 << 10])
                .file("demo/b.bin", vec![0u8; 900 << 10])
                .file("demo/c.bin", vec![0u8; 900 << 10]),
            |e| matches!(e, WheelError::TooLarge { .. }),
        ),
        (
            "lying sizes",
            base()
                .file("demo/bomb.bin", vec![0u8; 3 << 20])
                .tweak(Tweak::LieAboutSizes),
            |e| {
                matches!(
                    e,
                    WheelError::MemberTooLarge { .. }
                        | WheelError::TooLarge { .. }
                        | WheelError::Corrupt(_)
                )
            },
        ),
        (
            "too many members",
            (0..120).fold(base(), |w, i| w.file(&format!("demo/m{i}.py"), "")),
            |e| matches!(e, WheelError::TooManyMembers { .. }),
        ),
        (
            "trailing data",
            base().tweak(Tweak::Append(b"junk".to_vec())),
            |e| matches!(e, WheelError::Corrupt(_)),
        ),
        (
            "prepended data",
            base().tweak(Tweak::Prepend(b"MZjunk".to_vec())),
            |e| matches!(e, WheelError::Corrupt(_)),
        ),
        (
            "bad crc",
            base()
                .file("demo/data.txt", "crc me")
                .tweak(Tweak::CorruptStored("crc me".into())),
            |e| {
                matches!(
                    e,
                    WheelError::Corrupt(_) | WheelError::RecordMismatch { .. }
                )
            },
        ),
        (
            "not a zip",
            base().tweak(Tweak::Replace(b"not a zip at all, just text".to_vec())),
            |e| matches!(e, WheelError::Corrupt(_)),
        ),
    ];
    for (label, wheel, expected) in cases {
        let (result, paths) = unpack(wheel.build(), "demo-1.0-py3-none-any.whl");
        match result {
            Ok(_) => panic!("{label}: accepted"),
            Err(e) => {
                eprintln!("{label}: {e}");
                assert!(expected(&e), "{label}: wrong error: {e}")
            }
        }
        assert!(
            outside(&paths).is_empty(),
            "{label}: wrote outside staging: {paths:?}"
        );
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Arbitrary bytes never panic the unpacker nor write outside staging.
    #[test]
    fn arbitrary_bytes_are_refused_quietly(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..4096)) {
        let (result, paths) = unpack(bytes, "demo-1.0-py3-none-any.whl");
        proptest::prop_assert!(result.is_err());
        proptest::prop_assert!(outside(&paths).is_empty());
    }

    /// A good wheel with bytes flipped never panics the unpacker, and
    /// whatever happens stays beneath staging.
    #[test]
    fn damaged_wheels_stay_inside(flips in proptest::collection::vec((proptest::prelude::any::<usize>(), 1u8..=255), 1..8)) {
        let mut bytes = TestWheel::new("demo", "1.0")
            .file("demo/__init__.py", "VALUE = 1\n")
            .file("demo/sub/mod.py", "X = 2\n")
            .build();
        for (at, mask) in flips {
            let len = bytes.len();
            bytes[at % len] ^= mask;
        }
        let (_, paths) = unpack(bytes, "demo-1.0-py3-none-any.whl");
        proptest::prop_assert!(outside(&paths).is_empty());
    }
}

#[test]
fn files_that_run_at_interpreter_start_are_listed() {
    let w = TestWheel::new("demo", "1.0")
        .file("demo/__init__.py", "")
        .file("demo/sitecustomize.py", "nested: not imported at start")
        .file("sitecustomize.py", "import os\n")
        .file("usercustomize.pyc", "compiled")
        .file("usercustomize/__init__.py", "")
        .file("usercustomize/more.py", "")
        .file("sitecustomize_helpers.py", "")
        .file("demo-1.0.data/purelib/late.pth", "import demo\n");
    let (result, _) = unpack(w.build(), "demo-1.0-py3-none-any.whl");
    let mut listed = result.unwrap().startup_files;
    listed.sort();
    assert_eq!(
        listed,
        [
            "late.pth",
            "sitecustomize.py",
            "usercustomize.pyc",
            "usercustomize/"
        ]
    );
}

/// Unpacks into a fresh staging directory with `room`; returns the
/// result and the bytes written.
fn unpack_in(bytes: Vec<u8>, room: &mut StagingRoom) -> (Result<Unpacked, WheelError>, u64) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = Dir::open_ambient_dir(tmp.path(), ambient_authority()).unwrap();
    let wheel: WheelFilename = "demo-1.0-py3-none-any.whl".parse().unwrap();
    let result = unpack_wheel(Cursor::new(bytes), &wheel, &dir, &limits(), room);
    let mut written = 0;
    let mut stack = vec![tmp.path().to_path_buf()];
    while let Some(p) = stack.pop() {
        for e in std::fs::read_dir(&p).unwrap().flatten() {
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                stack.push(e.path());
            } else {
                written += meta.len();
            }
        }
    }
    (result, written)
}

#[test]
fn unpacking_stops_at_the_first_chunk_over_the_room_left() {
    use crate::packages::staging::Free;
    use crate::packages::stop::InstallStop;
    let w = TestWheel::new("demo", "1.0")
        .file("demo/a.bin", vec![0u8; 900 << 10])
        .file("demo/b.bin", vec![0u8; 900 << 10]);
    let free = |bytes, entries| Free {
        bytes,
        entries,
        quota_bytes: bytes,
        quota_entries: entries,
        block: 4096,
    };
    let mut room = StagingRoom::new(free(300 << 10, 100), u64::MAX, InstallStop::never());
    let (result, written) = unpack_in(w.build(), &mut room);
    let err = result.unwrap_err();
    assert!(
        matches!(err, WheelError::NoRoom(NoRoom::Quota { .. })),
        "{err}"
    );
    assert!(written <= 300 << 10, "{written} bytes were written");

    let mut room = StagingRoom::new(free(u64::MAX, 3), u64::MAX, InstallStop::never());
    let (result, _) = unpack_in(w.build(), &mut room);
    assert!(
        matches!(result, Err(WheelError::NoRoom(NoRoom::Entries { .. }))),
        "the directory, a.bin and b.bin need 3 entries, and the dist-info more"
    );

    let token = tokio_util::sync::CancellationToken::new();
    token.cancel();
    let stop = InstallStop::new(token, std::time::Duration::from_secs(60));
    let mut room = StagingRoom::new(free(u64::MAX, u64::MAX), u64::MAX, stop);
    let (result, written) = unpack_in(w.build(), &mut room);
    assert!(matches!(result, Err(WheelError::NoRoom(NoRoom::Stopped))));
    assert_eq!(written, 0, "a stopped install writes nothing");
}

#[test]
fn thousands_of_dist_info_directories_are_refused_quickly_and_briefly() {
    let mut w = TestWheel::new("demo", "1.0");
    for i in 0..5000 {
        w = w.file(&format!("x{i}-1.0.dist-info/METADATA"), "");
    }
    let limits = UnpackLimits {
        max_members: 20_000,
        ..limits()
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = Dir::open_ambient_dir(tmp.path(), ambient_authority()).unwrap();
    let wheel: WheelFilename = "demo-1.0-py3-none-any.whl".parse().unwrap();
    let bytes = w.build();
    let started = std::time::Instant::now();
    let err = unpack_wheel(
        Cursor::new(bytes.clone()),
        &wheel,
        &dir,
        &limits,
        &mut StagingRoom::unlimited(),
    )
    .unwrap_err();
    assert!(matches!(err, WheelError::DistInfoCount { .. }), "{err}");
    assert!(
        err.to_string().len() < 1000,
        "{} bytes",
        err.to_string().len()
    );
    let err = read_metadata(Cursor::new(bytes), &limits).unwrap_err();
    assert!(
        err.to_string().len() < 1000,
        "{} bytes",
        err.to_string().len()
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
}

#[test]
fn member_names_are_decided_by_one_function() {
    assert_eq!(
        member_components("a/b.py").unwrap(),
        (vec!["a", "b.py"], false)
    );
    assert_eq!(member_components("a/").unwrap(), (vec!["a"], true));
    for bad in [
        "", "/a", "a/../b", "..", "./a", "a//b", "a\\b", "C:x", "a\0b", "a/\n",
    ] {
        assert!(member_components(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn metadata_is_read_from_the_sole_dist_info() {
    let w = TestWheel::new("demo", "1.0").requires("six>=1");
    let text = read_metadata(Cursor::new(w.build()), &limits()).unwrap();
    assert!(text.contains("Requires-Dist: six>=1"), "{text}");
    let two = TestWheel::new("demo", "1.0").file("x-1.dist-info/METADATA", "Name: x\n");
    assert!(matches!(
        read_metadata(Cursor::new(two.build()), &limits()),
        Err(WheelError::DistInfoCount { .. })
    ));
}
