//! install_package against an index that serves no metadata files (as the
//! public one does for most wheels): the resolver reads METADATA by range
//! requests while it goes back through versions, downloads whole only what
//! it installs, and refuses a wheel whose own METADATA is not what its
//! ranges said.

use serde_json::{Value, json};

use crate::support::Server;
use crate::support::index::{IndexServer, Listed};
use crate::wheels::{Wheel, sha256_hex};

/// Publishes `wheel` with no PEP 658 metadata file.
fn publish_bare(index: &IndexServer, wheel: &Wheel) -> Vec<u8> {
    let bytes = wheel.build();
    index.add_file(
        &wheel.name,
        Listed {
            filename: wheel.filename(),
            sha256: sha256_hex(&bytes),
            requires_python: None,
            yanked: None,
            metadata: None,
        },
        bytes.clone(),
    );
    bytes
}

/// 200 KiB that does not compress, so a whole download is worth avoiding.
fn ballast() -> Vec<u8> {
    let mut x: u32 = 3;
    (0..200 * 1024)
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (x >> 24) as u8
        })
        .collect()
}

/// `svc` 1.0 to 30.0; from 6.0 on each needs `native`, which has no pure
/// wheel (as openai's releases came to need jiter).
fn long_history(index: &IndexServer) {
    for i in 1..=30 {
        let mut wheel = Wheel::module("svc", &format!("{i}.0"), &format!("RELEASE = {i}\n"))
            .file("svc/ballast.bin", ballast());
        if i >= 6 {
            wheel = wheel.requires("native>=1");
        }
        publish_bare(index, &wheel);
    }
    publish_bare(
        index,
        &Wheel::new("native", "1.0").tag("cp312-cp312-manylinux_2_17_x86_64"),
    );
}

/// A server using only `index`.
async fn start(index: &IndexServer) -> Server {
    Server::start_on_index(&index.url).await
}

async fn install(server: &Server, id: &str, what: &str) -> Result<Value, String> {
    let args = json!({"session_id": id, "package_name": what});
    let result = server.call("install_package", args).await;
    if result.is_error == Some(true) {
        return Err(crate::support::text(&result));
    }
    Ok(result.structured_content.unwrap_or_default())
}

/// Whole (not range) requests of each `/files/svc-*` path.
fn whole_downloads(index: &IndexServer) -> Vec<String> {
    let ranged = index.range_requests();
    let mut whole: Vec<String> = index
        .requests()
        .into_iter()
        .filter(|p| p.starts_with("/files/svc-"))
        .collect();
    for (path, _) in ranged {
        if let Some(at) = whole.iter().position(|p| *p == path) {
            whole.remove(at);
        }
    }
    whole
}

#[tokio::test]
async fn going_back_through_versions_reads_metadata_by_ranges_and_downloads_one_wheel() {
    let index = IndexServer::start().await;
    index.serve_ranges();
    long_history(&index);
    let server = start(&index).await;
    let id = server.create().await;

    let result = install(&server, &id, "svc").await.unwrap();
    let installed: Vec<&str> = result["installed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["version"].as_str().unwrap())
        .collect();
    assert_eq!(
        installed,
        ["5.0"],
        "the newest without the compiled dependency: {result}"
    );
    assert_eq!(
        server.run(&id, "import svc\nsvc.RELEASE").await["value"],
        "5"
    );
    assert_eq!(
        whole_downloads(&index),
        ["/files/svc-5.0-py3-none-any.whl"],
        "only what is installed is downloaded whole"
    );
    let read: std::collections::BTreeSet<String> =
        index.range_requests().into_iter().map(|(p, _)| p).collect();
    assert!(
        read.contains("/files/svc-30.0-py3-none-any.whl")
            && read.contains("/files/svc-6.0-py3-none-any.whl"),
        "{read:?}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_host_without_ranges_is_asked_once_and_wheels_come_whole() {
    let index = IndexServer::start().await;
    long_history(&index);
    let server = start(&index).await;
    let id = server.create().await;

    let result = install(&server, &id, "svc").await.unwrap();
    assert_eq!(result["installed"][0]["version"], "5.0", "{result}");
    let ranges = index.range_requests();
    assert_eq!(
        ranges.len(),
        2,
        "the first wheel's end and start only: {ranges:?}"
    );
    assert!(
        ranges
            .iter()
            .all(|(p, _)| p == "/files/svc-30.0-py3-none-any.whl")
    );
    server.stop().await;
}

#[tokio::test]
async fn a_wheel_whose_metadata_differs_from_its_ranges_is_refused_and_nothing_is_installed() {
    let index = IndexServer::start().await;
    index.serve_ranges();
    let honest = Wheel::module("svc", "1.0", "RELEASE = 1\n").requires("helper");
    publish_bare(&index, &honest);
    publish_bare(&index, &Wheel::module("helper", "1.0", "X = 1\n"));
    // Its ranges say it needs nothing.
    let liar = Wheel::module("svc", "1.0", "RELEASE = 1\n").build();
    index.lie_in_ranges("/files/svc-1.0-py3-none-any.whl", liar);
    let server = start(&index).await;
    let id = server.create().await;

    let err = install(&server, &id, "svc").await.unwrap_err();
    assert!(
        err.contains("svc-1.0-py3-none-any.whl") && err.contains("differs"),
        "{err}"
    );
    let r = server.exec(&id, "import svc").await;
    assert_eq!(r.is_error, Some(true), "nothing was installed");
    server.stop().await;
}

/// The first 4 KiB and last 96 KiB of a made-up zip that says it is
/// `total` bytes long, with a zip64 end record claiming to be 2^62 bytes.
fn zip64_claims(total: u64) -> (Vec<u8>, Vec<u8>) {
    let mut head = vec![0u8; 4096];
    head[..4].copy_from_slice(b"PK\x03\x04");
    let mut record = b"PK\x06\x06".to_vec();
    record.extend_from_slice(&(1u64 << 62).to_le_bytes());
    record.extend_from_slice(&[45, 0, 45, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    for field in [1u64, 1, 46, 0] {
        record.extend_from_slice(&field.to_le_bytes());
    }
    head[64..64 + record.len()].copy_from_slice(&record);
    let mut end = b"PK\x06\x07".to_vec();
    end.extend_from_slice(&0u32.to_le_bytes());
    end.extend_from_slice(&64u64.to_le_bytes());
    end.extend_from_slice(&1u32.to_le_bytes());
    end.extend_from_slice(b"PK\x05\x06");
    end.extend_from_slice(&[0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF]);
    end.extend_from_slice(&[0xFF; 8]);
    end.extend_from_slice(&[0, 0]);
    let mut tail = vec![0u8; 96 * 1024 - end.len()];
    tail.extend_from_slice(&end);
    assert!(total > (96 * 1024) as u64);
    (head, tail)
}

#[tokio::test]
async fn ranges_of_a_wheel_said_to_be_enormous_are_not_read_and_the_server_lives() {
    // Found by the hostile review: a zip64 record in ranges of a "2^62-byte"
    // wheel made the zip reader allocate that much, aborting the server.
    let index = IndexServer::start().await;
    index.serve_ranges();
    publish_bare(&index, &Wheel::module("huge", "1.0", "X = 1\n"));
    for total in [1u64 << 62, 64 << 30] {
        let (head, tail) = zip64_claims(total);
        index.make_up_ranges("/files/huge-1.0-py3-none-any.whl", total, head, tail);
        let server = start(&index).await;
        let bystander = server.create().await;
        server.run(&bystander, "kept = 7").await;
        let id = server.create().await;
        let result = install(&server, &id, "huge").await.unwrap();
        assert_eq!(result["installed"][0]["version"], "1.0", "{result}");
        assert_eq!(server.run(&bystander, "kept").await["value"], "7");
        server.stop().await;
    }
}

#[tokio::test]
async fn ranges_that_make_a_release_look_broken_do_not_pass_it_over() {
    // Found by the hostile review: a file host lying in ranges (no hash
    // vouches for them) could steer the install to an older release.
    let index = IndexServer::start().await;
    index.serve_ranges();
    publish_bare(&index, &Wheel::module("svc", "1.0", "RELEASE = 1\n"));
    publish_bare(&index, &Wheel::module("svc", "2.0", "RELEASE = 2\n"));
    for lie in [
        Wheel::module("svc", "2.0", "").requires("tornado (>=5.0<6.0)"),
        Wheel::module("other", "2.0", ""),
    ] {
        index.lie_in_ranges("/files/svc-2.0-py3-none-any.whl", lie.build());
        let server = start(&index).await;
        let id = server.create().await;
        let result = install(&server, &id, "svc").await.unwrap();
        assert_eq!(result["installed"][0]["version"], "2.0", "{result}");
        server.stop().await;
    }
}

const MIB: usize = 1 << 20;

/// `n` bytes that do not compress.
fn incompressible(n: usize) -> Vec<u8> {
    let mut x: u32 = 5;
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (x >> 24) as u8
        })
        .collect()
}

/// Publishes `native` (compiled only), installs `what`, whose every release
/// needs it, and checks the install is refused at the 256 MiB download
/// budget with no more than one 21 MiB wheel past it served.
async fn refused_within_the_download_budget(index: &IndexServer, what: &str) {
    publish_bare(
        index,
        &Wheel::new("native", "1.0").tag("cp312-cp312-manylinux_2_17_x86_64"),
    );
    let server = start(index).await;
    let id = server.create().await;
    let err = install(&server, &id, what).await.unwrap_err();
    assert!(err.contains("more than 256 MiB"), "{err}");
    let served = index.bytes_served();
    assert!(
        served <= (256 + 21) as u64 * MIB as u64,
        "{} MiB served",
        served / MIB as u64
    );
    server.stop().await;
}

#[tokio::test]
async fn going_back_through_whole_downloads_stays_within_the_download_budget() {
    // Found by the hostile review: read-ahead of whole downloads let each
    // concurrent download see the whole 256 MiB budget.
    let index = IndexServer::start().await;
    let ballast = incompressible(20 * MIB);
    for i in 1..=16 {
        let wheel = Wheel::module("heavy", &format!("{i}.0"), "")
            .file("heavy/ballast.bin", ballast.clone())
            .requires("native");
        publish_bare(&index, &wheel);
    }
    refused_within_the_download_budget(&index, "heavy").await;
}

#[tokio::test]
async fn reading_ahead_never_downloads_whole_wheels_even_where_ranges_fail() {
    // Found by the second hostile review: on a host serving ranges for some
    // wheels only, read-ahead fell back to whole downloads, each seeing the
    // whole budget.
    let index = IndexServer::start().await;
    index.serve_ranges();
    let ballast = incompressible(20 * MIB);
    for i in 1..=16 {
        let wheel = Wheel::module("mixed", &format!("{i}.0"), "")
            .file("mixed/ballast.bin", ballast.clone())
            .requires("native");
        publish_bare(&index, &wheel);
        // Their ranges claim a size no wheel may have: read whole, or not.
        let (head, tail) = zip64_claims(1 << 40);
        index.make_up_ranges(&format!("/files/{}", wheel.filename()), 1 << 40, head, tail);
    }
    for i in 17..=30 {
        let wheel = Wheel::module("mixed", &format!("{i}.0"), "").requires("native");
        publish_bare(&index, &wheel);
    }
    refused_within_the_download_budget(&index, "mixed").await;
}
