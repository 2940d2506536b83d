//! Air-gapped deployment end to end: `mcp-code-sandbox bundle` on this
//! (connected) machine, then the server, `exec` and `fetch-python.sh --from`
//! run from the bundle inside a network namespace of their own
//! (`unshare -n`), where the only interface is a loopback that is down: any
//! attempt to reach a network fails there. The server's own
//! `/proc/PID/net/dev` is read to check it really ran in that namespace.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use crate::support::{Server, binary};
use crate::wheels::Wheel;

/// The command prefix that runs a program with no network, or a panic that
/// says what the test needs (it never passes without isolation).
fn no_network() -> Vec<&'static str> {
    for prefix in [vec!["unshare", "-n"], vec!["unshare", "-r", "-n"]] {
        let works = Command::new(prefix[0])
            .args(&prefix[1..])
            .arg("true")
            .status()
            .is_ok_and(|s| s.success());
        if works {
            return prefix;
        }
    }
    panic!(
        "this test runs the server without network through `unshare -n` (root) or `unshare -r -n` (user namespaces); neither works here"
    );
}

/// Runs `program args` without network, with only `env` set; returns
/// (success, stdout, stderr).
fn offline(program: &Path, args: &[&str], env: &[(&str, &Path)]) -> (bool, String, String) {
    let prefix = no_network();
    let mut cmd = Command::new(prefix[0]);
    cmd.args(&prefix[1..]).arg(program).args(args).env_clear();
    cmd.env("PATH", "/usr/bin:/bin");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run offline");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Makes a bundle of python-3.12 with a one-wheel wheelhouse in `tmp/bundle`.
fn make_bundle(tmp: &Path) -> PathBuf {
    let house = tmp.join("house");
    std::fs::create_dir_all(&house).unwrap();
    let wheel = Wheel::module("carried", "1.0", "WHERE = 'from the bundle'\n");
    std::fs::write(house.join(wheel.filename()), wheel.build()).unwrap();
    let dir = tmp.join("bundle");
    let out = Command::new(binary())
        .args(["bundle", "--runtime", "python-3.12", "--out"])
        .arg(&dir)
        .env_clear()
        .env("HOME", tmp)
        .env("SANDBOX_CACHE_DIR", tmp.join("cache"))
        .env("SANDBOX_ROOT", tmp.join("root"))
        .env("SANDBOX_WHEELHOUSE", &house)
        .env("SANDBOX_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("bundle of the runtime 'python-3.12'"),
        "{stdout}"
    );
    dir
}

/// The names of the files of `dir` (recursively), relative to it.
fn files(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("SHA256SUMS")).unwrap();
    text.lines()
        .map(|l| l.split_once("  ").unwrap().1.to_owned())
        .collect()
}

#[tokio::test]
async fn a_bundle_runs_the_server_with_no_network_and_refuses_tampering() {
    let tmp = tempfile::tempdir().unwrap();
    let bundle = make_bundle(tmp.path());
    let listed = files(&bundle);
    for expected in [
        "bundle.toml",
        "bin/mcp-code-sandbox",
        "fetch-python.sh",
        "runtime/python-3.12.toml",
        "runtime/python-3.12.0.wasm",
        "wheelhouse/carried-1.0-py3-none-any.whl",
    ] {
        assert!(
            listed.iter().any(|f| f == expected),
            "{expected}: {listed:?}"
        );
    }
    assert!(
        listed
            .iter()
            .any(|f| f.starts_with("modules/") && f.ends_with(".cwasm")),
        "the compiled runtime is in it: {listed:?}"
    );
    let server_binary = bundle.join("bin").join("mcp-code-sandbox");

    // The server, from the bundle, in a namespace with no network.
    let prefix = no_network();
    let home = tmp.path().join("offline-home");
    let root = tmp.path().join("offline-root");
    let mut cmd = tokio::process::Command::new(prefix[0]);
    cmd.args(&prefix[1..])
        .arg(&server_binary)
        .args(["serve", "--bundle"])
        .arg(&bundle)
        .env_clear()
        .env("HOME", &home)
        .env("SANDBOX_ROOT", &root)
        .env("SANDBOX_POOL_SIZE", "0")
        .env("SANDBOX_LOG", "info");
    let server = Server::start_command((), cmd, tempfile::tempdir().unwrap(), root.clone()).await;
    let interfaces = std::fs::read_to_string(format!("/proc/{}/net/dev", server.pid)).unwrap();
    let names: Vec<&str> = interfaces
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(str::trim)
        .collect();
    assert_eq!(names, ["lo"], "the server has no network: {interfaces}");
    let id = server.create().await;
    assert_eq!(server.run(&id, "6 * 7").await["value"], "42");
    let installed = server
        .ok(
            "install_package",
            json!({"session_id": id, "package_name": "carried"}),
        )
        .await;
    assert_eq!(
        installed["installed"][0]["source"], "wheelhouse",
        "{installed}"
    );
    assert_eq!(
        server.run(&id, "import carried; carried.WHERE").await["value"],
        "'from the bundle'"
    );
    let logs = server.logs();
    assert!(
        !logs.contains("compiled the Python runtime"),
        "the bundle's compiled module was used: {logs}"
    );
    server.stop().await;

    // fetch-python.sh installs the runtime and its compiled module from it.
    let script = bundle.join("fetch-python.sh");
    let from = bundle.to_str().unwrap();
    let rt = tmp.path().join("installed-runtime");
    let cache = tmp.path().join("installed-cache");
    let (ok, stdout, stderr) = install_from(&script, from, &rt, &home, &cache);
    assert!(ok, "{stdout}\n{stderr}");
    assert_eq!(
        std::fs::read(rt.join("python-3.12.0.wasm")).unwrap(),
        std::fs::read(bundle.join("runtime/python-3.12.0.wasm")).unwrap()
    );
    let (ok, stdout, stderr) = offline(
        &server_binary,
        &["--runtime", "python-3.12", "exec", "print(6 * 7)"],
        &[
            ("HOME", &home),
            ("SANDBOX_ROOT", &root),
            ("SANDBOX_RUNTIME_DIR", &rt),
            ("SANDBOX_CACHE_DIR", &cache),
        ],
    );
    assert!(ok && stdout.contains("42"), "{stdout}\n{stderr}");
    assert!(
        !stderr.contains("compiled the Python runtime"),
        "the installed compiled module was used: {stderr}"
    );

    // One changed byte, and neither the server nor the script uses it.
    let module = bundle.join("runtime/python-3.12.0.wasm");
    let mut bytes = std::fs::read(&module).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&module, bytes).unwrap();
    let (ok, _, stderr) = offline(
        &server_binary,
        &["--bundle", from, "exec", "1"],
        &[("HOME", &home), ("SANDBOX_ROOT", &root)],
    );
    assert!(!ok, "a tampered bundle is refused");
    assert!(
        stderr.contains("does not match its SHA256SUMS")
            && stderr.contains("runtime/python-3.12.0.wasm has sha256"),
        "{stderr}"
    );
    let (ok, stdout, stderr) = install_from(&script, from, &rt, &home, &cache);
    assert!(!ok, "{stdout}");
    assert!(stderr.contains("does not match its SHA256SUMS"), "{stderr}");

    // Put the byte back; a wheel slipped in beside the listed ones is refused
    // (its code would run on import, unchecked).
    let mut bytes = std::fs::read(&module).unwrap();
    bytes[last] ^= 1;
    std::fs::write(&module, bytes).unwrap();
    std::fs::create_dir_all(bundle.join("wheelhouse")).unwrap();
    std::fs::write(bundle.join("wheelhouse/evil-1.0-py3-none-any.whl"), b"PK").unwrap();
    let (ok, _, stderr) = offline(
        &server_binary,
        &["--bundle", from, "exec", "1"],
        &[("HOME", &home), ("SANDBOX_ROOT", &root)],
    );
    assert!(!ok, "an unlisted wheel is refused");
    assert!(
        stderr.contains("wheelhouse/evil-1.0-py3-none-any.whl") && stderr.contains("does not list"),
        "{stderr}"
    );
    std::fs::remove_file(bundle.join("wheelhouse/evil-1.0-py3-none-any.whl")).unwrap();

    // A SHA256SUMS naming a file outside the bundle is refused by the script.
    let sums = bundle.join("SHA256SUMS");
    let listed = std::fs::read_to_string(&sums).unwrap();
    for outside in ["  ../outside", " */etc/hostname", "\t../x", "  a/../../x"] {
        std::fs::write(&sums, format!("{listed}{}{outside}\n", "0".repeat(64))).unwrap();
        let (ok, stdout, stderr) = install_from(&script, from, &rt, &home, &cache);
        assert!(!ok, "{outside}: {stdout}");
        assert!(stderr.contains("outside the bundle"), "{outside}: {stderr}");
    }
}

/// Runs the bundle's `fetch-python.sh --from BUNDLE --dir RT` offline, with
/// only `HOME` and the module cache set; returns (success, stdout, stderr).
fn install_from(
    script: &Path,
    bundle: &str,
    rt: &Path,
    home: &Path,
    cache: &Path,
) -> (bool, String, String) {
    offline(
        Path::new("/bin/bash"),
        &[
            script.to_str().unwrap(),
            "--from",
            bundle,
            "--dir",
            rt.to_str().unwrap(),
            "--no-prepare",
        ],
        &[("HOME", home), ("SANDBOX_CACHE_DIR", cache)],
    )
}
