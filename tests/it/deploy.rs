//! The deployment files the project ships: the systemd unit passes
//! `systemd-analyze verify` without a warning (with `ExecStart` pointing at
//! the built binary, as it would once installed), and its hardening scores
//! as systemd's own assessment calls OK.

use std::path::Path;
use std::process::Command;

use crate::support::binary;

/// How the unit starts the binary once installed.
const INSTALLED: &str = "ExecStart=/usr/local/bin/mcp-code-sandbox ";

#[test]
fn the_systemd_unit_verifies_cleanly() {
    let unit = installed_unit();
    let out = systemd_analyze(&["verify", unit.path.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "systemd-analyze verify failed:\n{stderr}"
    );
    assert!(
        stderr.trim().is_empty(),
        "systemd-analyze verify warned:\n{stderr}"
    );
}

#[test]
fn the_systemd_unit_is_hardened() {
    let unit = installed_unit();
    let out = systemd_analyze(&[
        "security",
        "--offline=true",
        "--threshold=30",
        unit.path.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The threshold is on systemd's 0-100 scale (10 = exposure level 1.0);
    // our unit scores about 1.5, "OK". wasmtime needs executable mappings,
    // so MemoryDenyWriteExecute stays off and the score cannot reach 1.0.
    assert!(out.status.success(), "exposure above 3.0:\n{stdout}");
    assert!(stdout.contains("Overall exposure level"), "{stdout}");
    assert!(
        stdout.contains("MemoryDenyWriteExecute="),
        "the assessment lists the setting wasmtime needs off:\n{stdout}"
    );
}

/// The shipped unit in a temporary directory, its `ExecStart` pointing at
/// the built binary.
struct Unit {
    path: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

fn installed_unit() -> Unit {
    let shipped =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/systemd/mcp-code-sandbox.service");
    let text = std::fs::read_to_string(&shipped).unwrap();
    assert_eq!(
        text.matches(INSTALLED).count(),
        1,
        "the unit has `{INSTALLED}` once"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mcp-code-sandbox.service");
    let built = std::fs::canonicalize(binary()).unwrap();
    let exec_start = format!("ExecStart={} ", built.display());
    std::fs::write(&path, text.replace(INSTALLED, &exec_start)).unwrap();
    Unit { path, _dir: dir }
}

/// Runs systemd-analyze; panics, saying how to install it, when missing.
fn systemd_analyze(args: &[&str]) -> std::process::Output {
    Command::new("systemd-analyze")
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "systemd-analyze could not run ({e}): install Debian's systemd package \
                 (apt-get install -y systemd); tests/install-tools.sh installs it"
            )
        })
}
