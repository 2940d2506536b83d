//! install_package end to end: a loopback index serving wheels the tests
//! build, the real binary, and imports in the sandbox's running interpreter.

use std::path::Path;

use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

use crate::support::index::{IndexServer, Listed};
use crate::support::{Server, progress_client, shared_cache, text, with_progress};
use crate::wheels::{Wheel, sha256_hex};

/// Where the runtime's site-packages is, relative to a sandbox directory.
const SITE: &str = ".local/lib/python3.12/site-packages";

/// A server using only `index`.
pub(crate) async fn start(index: &IndexServer) -> Server {
    Server::start_on_index(&index.url).await
}

/// Installs `what` into sandbox `id`, which must succeed; the result.
pub(crate) async fn install(server: &Server, id: &str, what: &str) -> Value {
    server
        .ok(
            "install_package",
            json!({"session_id": id, "package_name": what}),
        )
        .await
}

/// Installs `what` into sandbox `id`, which must fail; the error's text.
pub(crate) async fn install_err(server: &Server, id: &str, what: &str) -> String {
    server
        .err(
            "install_package",
            json!({"session_id": id, "package_name": what}),
        )
        .await
}

/// `name version source` of each installed package.
pub(crate) fn installed(result: &Value) -> Vec<String> {
    result["installed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            format!(
                "{} {} {}",
                p["name"].as_str().unwrap(),
                p["version"].as_str().unwrap(),
                p["source"].as_str().unwrap_or("-")
            )
        })
        .collect()
}

fn present(result: &Value) -> Vec<String> {
    result["already_present"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            format!(
                "{} {}",
                p["name"].as_str().unwrap(),
                p["version"].as_str().unwrap()
            )
        })
        .collect()
}

/// Every path under `root`, relative to it.
fn tree(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            out.push(path.strip_prefix(root).unwrap().display().to_string());
            if entry.file_type().unwrap().is_dir() {
                stack.push(path);
            }
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn a_dependency_chain_installs_and_imports_in_the_running_interpreter() {
    let index = IndexServer::start().await;
    index.add_wheel(
        &Wheel::module("alpha", "1.0", "import beta\nONE = beta.ONE\n").requires("beta>=1"),
    );
    index.add_wheel(&Wheel::module("beta", "0.9", "ONE = 0\n"));
    index.add_wheel(
        &Wheel::module("beta", "1.2", "import gamma\nONE = gamma.ONE\n").requires("gamma"),
    );
    index.add_wheel(&Wheel::module("gamma", "3.0", "ONE = 1\n"));
    let server = start(&index).await;
    let id = server.create().await;
    server.run(&id, "kept = 41").await;
    let failed = server.exec(&id, "import alpha").await;
    assert_eq!(failed.is_error, Some(true), "not installed yet");

    let result = install(&server, &id, "Alpha").await;
    assert_eq!(
        installed(&result),
        ["alpha 1.0 index", "beta 1.2 index", "gamma 3.0 index"]
    );
    assert!(present(&result).is_empty());
    let r = server.run(&id, "import alpha\nkept + alpha.ONE").await;
    assert_eq!(
        r["value"], "42",
        "imports work at once and the variable is still there"
    );
    assert!(r.get("state_lost").is_none(), "no restart: {r}");

    let again = install(&server, &id, "beta, gamma==3.0").await;
    assert!(installed(&again).is_empty());
    assert_eq!(present(&again), ["beta 1.2", "gamma 3.0"]);
    let site = server.sandbox_dirs()[0].join(SITE);
    assert!(site.join("alpha-1.0.dist-info/RECORD").is_file());
    assert_eq!(
        std::fs::read_to_string(site.join("alpha-1.0.dist-info/INSTALLER")).unwrap(),
        "mcp-code-sandbox\n"
    );
    assert!(
        !tree(&site).iter().any(|p| p.contains("staging")),
        "staging is gone"
    );

    let other = server.create().await;
    let isolated = server.exec(&other, "import alpha").await;
    assert_eq!(
        isolated.is_error,
        Some(true),
        "another sandbox does not see it"
    );
    assert!(text(&isolated).contains("ModuleNotFoundError"));
    server.stop().await;
}

#[tokio::test]
async fn later_installs_extend_namespace_packages_and_metadata_in_the_same_interpreter() {
    let index = IndexServer::start().await;
    index.add_wheel(&Wheel::new("ns-one", "1.0").file("nsroot/one.py", "N = 1\n"));
    index.add_wheel(&Wheel::new("ns-two", "2.0").file("nsroot/two.py", "N = 2\n"));
    let server = start(&index).await;
    let id = server.create().await;
    install(&server, &id, "ns-one").await;
    server
        .run(
            &id,
            "import importlib.metadata, nsroot.one\nfirst = importlib.metadata.version('ns-one')",
        )
        .await;
    install(&server, &id, "ns-two").await;
    let r = server
        .run(&id, "import nsroot.two\n(first, importlib.metadata.version('ns-two'), nsroot.one.N + nsroot.two.N)")
        .await;
    assert_eq!(r["value"], "('1.0', '2.0', 3)");
    server.stop().await;
}

#[tokio::test]
async fn pins_yanked_releases_and_missing_versions() {
    let index = IndexServer::start().await;
    index.add_wheel(&Wheel::module("pinned", "1.0", "V = '1.0'\n"));
    index.add_wheel(&Wheel::module("pinned", "2.0", "V = '2.0'\n"));
    let yanked = Wheel::module("pinned", "3.0", "V = '3.0'\n");
    let bytes = yanked.build();
    index.add_file(
        "pinned",
        Listed {
            filename: yanked.filename(),
            sha256: sha256_hex(&bytes),
            requires_python: None,
            yanked: Some("broken release".into()),
            metadata: None,
        },
        bytes,
    );
    let server = start(&index).await;
    let a = server.create().await;
    assert_eq!(
        installed(&install(&server, &a, "pinned == 1.0").await),
        ["pinned 1.0 index"]
    );
    assert_eq!(
        server.run(&a, "import pinned; pinned.V").await["value"],
        "'1.0'"
    );
    let b = server.create().await;
    assert_eq!(
        installed(&install(&server, &b, "pinned").await),
        ["pinned 2.0 index"],
        "yanked 3.0 skipped"
    );
    let c = server.create().await;
    assert_eq!(
        installed(&install(&server, &c, "pinned==3.0").await),
        ["pinned 3.0 index"],
        "unless pinned"
    );
    let missing = install_err(&server, &c, "pinned==9.9").await;
    assert!(missing.contains("no version matching ==9.9"), "{missing}");
    assert!(
        missing.contains("2.0") && missing.contains("1.0"),
        "{missing}"
    );
    server.stop().await;
}

#[tokio::test]
async fn markers_exclude_dependencies_and_extras_add_them() {
    let index = IndexServer::start().await;
    index.add_wheel(
        &Wheel::module("app", "1.0", "")
            .requires("winonly; sys_platform == \"win32\"")
            .requires("wasidep; sys_platform == \"wasi\" and python_version >= \"3.8\"")
            .header("Provides-Extra: speed")
            .requires("fast>=2; extra == \"speed\""),
    );
    index.add_wheel(&Wheel::module("wasidep", "1.0", ""));
    index.add_wheel(&Wheel::module("fast", "2.1", "SPEED = 'fast'\n"));
    let server = start(&index).await;
    let id = server.create().await;
    assert_eq!(
        installed(&install(&server, &id, "app").await),
        ["app 1.0 index", "wasidep 1.0 index"]
    );
    assert_eq!(
        index.count("/simple/winonly/"),
        0,
        "an excluded dependency is not even looked up"
    );
    assert_eq!(
        index.count("/simple/fast/"),
        0,
        "nor an extra nobody asked for"
    );
    let with_extra = install(&server, &id, "app[speed]").await;
    assert_eq!(installed(&with_extra), ["fast 2.1 index"]);
    assert_eq!(present(&with_extra), ["app 1.0", "wasidep 1.0"]);
    assert_eq!(
        server.run(&id, "import fast; fast.SPEED").await["value"],
        "'fast'"
    );
    server.stop().await;
}

#[tokio::test]
async fn native_and_source_only_packages_are_refused_with_the_reason() {
    let index = IndexServer::start().await;
    for tag in ["cp312-cp312-manylinux_2_17_x86_64", "cp312-cp312-win_amd64"] {
        let native = Wheel::module("nativepkg", "2.0", "").tag(tag);
        let bytes = native.build();
        index.add_file(
            "nativepkg",
            Listed {
                filename: native.filename(),
                sha256: sha256_hex(&bytes),
                requires_python: None,
                yanked: None,
                metadata: None,
            },
            bytes,
        );
    }
    for (project, filename) in [
        ("nativepkg", "nativepkg-2.0.tar.gz"),
        ("sdistonly", "sdistonly-0.6.2.tar.gz"),
    ] {
        index.add_file(
            project,
            Listed {
                filename: filename.into(),
                sha256: sha256_hex(b"sdist"),
                requires_python: None,
                yanked: None,
                metadata: None,
            },
            b"sdist".to_vec(),
        );
    }
    index.add_wheel(&Wheel::module("wantsnative", "1.0", "").requires("nativepkg"));
    let server = start(&index).await;
    let id = server.create().await;

    let native = install_err(&server, &id, "nativepkg").await;
    assert!(native.contains("only pure-Python wheels"), "{native}");
    assert!(native.contains("WASI"), "{native}");
    assert!(
        native.contains("cp312-cp312-manylinux_2_17_x86_64"),
        "a sample of the tags: {native}"
    );
    let sdist = install_err(&server, &id, "sdistonly").await;
    assert!(sdist.contains("only as a source archive"), "{sdist}");
    let unknown = install_err(&server, &id, "no-such-package").await;
    assert!(
        unknown.contains("no package named 'no-such-package'"),
        "{unknown}"
    );
    assert!(
        unknown.contains("SANDBOX_INDEX_URL"),
        "says where it looked: {unknown}"
    );
    let via_dependency = install_err(&server, &id, "wantsnative").await;
    assert!(
        via_dependency.contains("`wantsnative 1.0` requires `nativepkg`"),
        "{via_dependency}"
    );
    assert!(
        !index
            .requests()
            .iter()
            .any(|p| p.ends_with(".tar.gz") || p.contains("cp312")),
        "nothing unusable was downloaded: {:?}",
        index.requests()
    );
    let site = server.sandbox_dirs()[0].join(SITE);
    assert!(
        !tree(&site).iter().any(|p| p.contains("wantsnative")),
        "nothing half-installed"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_tampered_download_is_refused_and_nothing_is_installed() {
    let index = IndexServer::start().await;
    let wheel = Wheel::module("tampered", "1.0", "X = 1\n");
    let bytes = wheel.build();
    index.add_file(
        "tampered",
        Listed {
            filename: wheel.filename(),
            sha256: sha256_hex(b"something else"),
            requires_python: None,
            yanked: None,
            metadata: None,
        },
        bytes,
    );
    let server = start(&index).await;
    let id = server.create().await;
    let err = install_err(&server, &id, "tampered").await;
    assert!(err.contains("does not match the sha256"), "{err}");
    let site = server.sandbox_dirs()[0].join(SITE);
    assert!(
        !tree(&site).iter().any(|p| p.contains("tampered")),
        "{:?}",
        tree(&site)
    );
    assert_eq!(
        server.exec(&id, "import tampered").await.is_error,
        Some(true)
    );
    server.stop().await;
}

#[tokio::test]
async fn a_download_over_the_size_cap_is_cut_off() {
    let index = IndexServer::start().await;
    let huge = vec![7u8; (50 << 20) + 1];
    index.add_file(
        "huge",
        Listed {
            filename: "huge-1.0-py3-none-any.whl".into(),
            sha256: sha256_hex(&huge),
            requires_python: None,
            yanked: None,
            metadata: None,
        },
        huge,
    );
    let server = start(&index).await;
    let id = server.create().await;
    let err = install_err(&server, &id, "huge").await;
    assert!(
        err.contains("larger than the 50 MiB a download may be"),
        "{err}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_zip_slip_wheel_and_a_zip_bomb_are_refused_and_nothing_escapes() {
    let index = IndexServer::start().await;
    index.add_wheel(
        &Wheel::module("slip", "1.0", "").file("../../../../escaped.py", "print('out')\n"),
    );
    index.add_wheel(&Wheel::module("bomb", "1.0", "").file("bomb/zeros.bin", vec![0u8; 60 << 20]));
    let server = start(&index).await;
    let id = server.create().await;
    let before = tree(&server.root);

    let slip = install_err(&server, &id, "slip").await;
    assert!(
        slip.contains("refused to install slip-1.0-py3-none-any.whl"),
        "{slip}"
    );
    assert!(slip.contains("'..' component"), "{slip}");
    let bomb = install_err(&server, &id, "bomb").await;
    assert!(bomb.contains("inflates to more than 50 MiB"), "{bomb}");

    let after = tree(&server.root);
    let new: Vec<&String> = after.iter().filter(|p| !before.contains(p)).collect();
    assert!(new.is_empty(), "nothing was left behind: {new:?}");
    assert!(
        !tree(server.root.parent().unwrap())
            .iter()
            .any(|p| p.ends_with("escaped.py"))
    );
    server.stop().await;
}

#[tokio::test]
async fn a_second_sandbox_installs_from_the_cache_without_asking_the_index() {
    let index = IndexServer::start().await;
    let filename = index.add_wheel(&Wheel::module("cached", "1.0", "HIT = True\n"));
    let server = start(&index).await;
    let a = server.create().await;
    assert_eq!(
        installed(&install(&server, &a, "cached").await),
        ["cached 1.0 index"]
    );
    let wheel_path = format!("/files/{filename}");
    assert_eq!(index.count(&wheel_path), 1);
    let requests_after_first = index.requests().len();

    let b = server.create().await;
    assert_eq!(
        installed(&install(&server, &b, "cached").await),
        ["cached 1.0 cache"]
    );
    assert_eq!(
        server.run(&b, "import cached; cached.HIT").await["value"],
        "True"
    );
    assert_eq!(
        index.count(&wheel_path),
        1,
        "the wheel was not downloaded again"
    );
    assert_eq!(
        index.requests().len(),
        requests_after_first,
        "the second sandbox made no request at all: {:?}",
        index.requests()
    );
    server.stop().await;
}

#[tokio::test]
async fn a_newer_version_replaces_the_installed_one() {
    let index = IndexServer::start().await;
    index.add_wheel(&Wheel::module("swap", "1.0", "V = 1\n").file("swap/old_only.py", ""));
    index.add_wheel(&Wheel::module("swap", "2.0", "V = 2\n"));
    let server = start(&index).await;
    let id = server.create().await;
    install(&server, &id, "swap==1.0").await;
    let site = server.sandbox_dirs()[0].join(SITE);
    assert!(site.join("swap/old_only.py").is_file());
    let result = install(&server, &id, "swap>=2").await;
    assert_eq!(installed(&result), ["swap 2.0 index"]);
    assert!(
        result["output"]
            .as_str()
            .unwrap()
            .contains("replaced swap 1.0 with 2.0"),
        "{result}"
    );
    assert!(!site.join("swap-1.0.dist-info").exists());
    assert!(
        !site.join("swap/old_only.py").exists(),
        "the old version's files are gone"
    );
    assert!(site.join("swap-2.0.dist-info").is_dir());
    server.stop().await;
}

#[tokio::test]
async fn an_install_over_the_disk_quota_is_refused() {
    let index = IndexServer::start().await;
    let noise: Vec<u8> = (0..3u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    index.add_wheel(&Wheel::module("hefty", "1.0", "").file("hefty/blob.bin", noise));
    let server = Server::start_with(&[
        ("SANDBOX_INDEX_URL", index.url.as_str()),
        ("PIP_CONFIG_FILE", "/dev/null"),
        ("SANDBOX_DISK_QUOTA_MB", "2"),
        ("SANDBOX_POOL_SIZE", "0"),
    ])
    .await;
    let id = server.create().await;
    let err = install_err(&server, &id, "hefty").await;
    assert!(err.contains("disk quota"), "{err}");
    assert!(
        !server.sandbox_dirs()[0].join(".local").exists(),
        "nothing was left behind"
    );
    server.stop().await;
}

#[tokio::test]
async fn unusable_requirements_are_refused_before_any_request() {
    let index = IndexServer::start().await;
    let server = start(&index).await;
    let id = server.create().await;
    for (bad, expect) in [
        (
            "pkg @ file:///etc/passwd",
            "names a URL, a file or a version-control link",
        ),
        (
            "--index-url=http://evil.test/",
            "options such as --index-url",
        ),
        ("../../x", "names a URL, a file"),
        ("six>>1", "not a requirement"),
    ] {
        let err = install_err(&server, &id, bad).await;
        assert!(err.contains(expect), "{bad}: {err}");
    }
    assert!(index.requests().is_empty(), "{:?}", index.requests());
    server.stop().await;
}

#[tokio::test]
async fn a_long_install_reports_progress_to_a_client_that_asks() {
    let index = IndexServer::start().await;
    index.add_wheel(&Wheel::module("prog", "1.0", "").requires("progdep"));
    index.add_wheel(&Wheel::module("progdep", "1.0", ""));
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let cache = shared_cache();
    let (client, log) = progress_client(&[
        ("HOME", tmp.path().as_os_str()),
        ("SANDBOX_CACHE_DIR", cache.as_os_str()),
        ("SANDBOX_ROOT", root.as_os_str()),
        ("SANDBOX_RUNTIME", "python-3.12".as_ref()),
        ("SANDBOX_LOG", "warn".as_ref()),
        ("SANDBOX_INDEX_URL", index.url.as_ref()),
        ("PIP_CONFIG_FILE", "/dev/null".as_ref()),
    ])
    .await;
    let created = client
        .call_tool(
            CallToolRequestParams::new("create_sandbox")
                .with_arguments(json!({"session_id": "p"}).as_object().unwrap().clone()),
        )
        .await
        .unwrap();
    assert_ne!(created.is_error, Some(true));
    let request = with_progress(
        "install_package",
        json!({"session_id": "p", "package_name": "prog"}),
        "install-1",
    );
    let result = client.call_tool(request).await.unwrap();
    assert_ne!(result.is_error, Some(true), "{}", text(&result));
    let notes = log.notes();
    let messages = log.messages();
    assert!(!notes.is_empty(), "progress was reported");
    assert!(
        notes
            .iter()
            .all(|n| n.progress_token == notes[0].progress_token),
        "one token for the call (rmcp's client chooses it): {notes:?}"
    );
    assert!(
        notes.windows(2).all(|w| w[0].progress < w[1].progress),
        "progress increases"
    );
    for expected in [
        "resolved prog 1.0",
        "resolved progdep 1.0",
        "got prog-1.0-py3-none-any.whl from the index",
        "installed 2 package(s)",
    ] {
        assert!(
            messages.iter().any(|m| m == expected),
            "{expected} missing from {messages:?}"
        );
    }
    let _ = client.cancel().await;
}

#[tokio::test]
async fn the_marker_environment_is_what_the_runtime_reports() {
    let server = Server::start().await;
    let id = server.create().await;
    let r = server
        .run(
            &id,
            "import sys, os, platform\n(sys.platform, platform.system(), platform.machine(), os.name, sys.implementation.name, platform.python_implementation(), platform.release())",
        )
        .await;
    assert_eq!(
        r["value"], "('wasi', 'wasi', 'wasm32', 'posix', 'cpython', 'CPython', '0.0.0')",
        "src/packages/environment.rs must match the runtime"
    );
    server.stop().await;
}

#[tokio::test]
async fn closing_a_sandbox_stops_an_install_waiting_for_pip_to_answer() {
    let tmp = tempfile::tempdir().unwrap();
    let silent = tmp.path().join("silent-python");
    // A command line no other process has (pgrep looks at every process
    // on the machine): sleep's seconds end in this test process's id.
    let marker = format!("sleep 600.{}", std::process::id());
    std::fs::write(&silent, format!("#!/bin/sh\nexec {marker}\n")).unwrap();
    let mut permissions = std::fs::metadata(&silent).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&silent, permissions).unwrap();
    let server = Server::start_with(&[("SANDBOX_PIP_PYTHON", silent.to_str().unwrap())]).await;
    let asking = || {
        std::process::Command::new("pgrep")
            .args(["-f", &marker])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    // Twice: a question given up is asked again by the next install, not
    // remembered as a failure for the server's life.
    for round in 0..2 {
        let id = server.create().await;
        let peer = server.client.peer().clone();
        let args = json!({"session_id": id, "package_name": "six"});
        let install = tokio::spawn(async move {
            peer.call_tool(
                rmcp::model::CallToolRequestParams::new("install_package")
                    .with_arguments(args.as_object().unwrap().clone()),
            )
            .await
        });
        let mut asked = false;
        for _ in 0..1000 {
            asked = asking();
            if asked || install.is_finished() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(asked, "round {round}: pip was asked");
        if round == 0 {
            // A second install, waiting for the first's question, can be
            // stopped while that question is still open.
            let other = server.create().await;
            let peer = server.client.peer().clone();
            let args = json!({"session_id": other, "package_name": "attrs"});
            let waiting = tokio::spawn(async move {
                peer.call_tool(
                    rmcp::model::CallToolRequestParams::new("install_package")
                        .with_arguments(args.as_object().unwrap().clone()),
                )
                .await
            });
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            server
                .ok("close_sandbox", json!({"session_id": other}))
                .await;
            let stopped = waiting.await.unwrap().unwrap();
            assert_eq!(stopped.is_error, Some(true));
            assert!(
                asking(),
                "the second install ended while the first still asked"
            );
        }
        let closed = server.ok("close_sandbox", json!({"session_id": id})).await;
        assert_eq!(closed["closed"], true);
        let result = install.await.unwrap().unwrap();
        assert_eq!(result.is_error, Some(true));
        assert!(!asking(), "round {round}: the silent pip was left running");
    }
    server.stop().await;
}

#[tokio::test]
async fn an_install_whose_import_fails_says_so_and_the_sandbox_keeps_its_state() {
    let index = IndexServer::start().await;
    index.add_wheel(
        &Wheel::module("shaky", "1.0", "import not_in_this_sandbox\n")
            .file("shaky_helpers.py", "OK = True\n"),
    );
    let server = start(&index).await;
    let id = server.create().await;
    server.run(&id, "kept = 41").await;
    let result = server
        .call(
            "install_package",
            json!({"session_id": id, "package_name": "shaky"}),
        )
        .await;
    assert_ne!(result.is_error, Some(true), "{}", text(&result));
    let report = result.structured_content.clone().unwrap();
    assert_eq!(installed(&report), ["shaky 1.0 index"]);
    let failures = report["import_failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "{report}");
    assert_eq!(failures[0]["module"], "shaky");
    assert!(
        failures[0]["error"]
            .as_str()
            .unwrap()
            .starts_with("ModuleNotFoundError: No module named 'not_in_this_sandbox'"),
        "{report}"
    );
    let said = text(&result);
    assert!(
        said.contains(
            "importing them fails in this sandbox: `import shaky` raised ModuleNotFoundError"
        ) && !said.contains("no restart is needed"),
        "{said}"
    );
    let after = server
        .run(
            &id,
            "import sys, shaky_helpers\n(kept + 1, 'shaky' in sys.modules, shaky_helpers.OK)",
        )
        .await;
    assert_eq!(
        after["value"], "(42, False, True)",
        "checked in an interpreter of its own: {after}"
    );

    index.add_wheel(&Wheel::module("steady", "1.0", "X = 1\n"));
    let fine = install(&server, &id, "steady").await;
    assert!(fine.get("import_failures").is_none(), "{fine}");
    server.stop().await;
}
