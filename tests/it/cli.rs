//! The command line: `exec`, `--help`, and a missing runtime.

use std::process::Command;

use serde_json::json;

use crate::support::{Server, binary, shared_cache};

fn command() -> Command {
    let mut c = Command::new(binary());
    let tmp = std::env::temp_dir().join(format!("mcp-cli-{}", std::process::id()));
    c.env("SANDBOX_CACHE_DIR", shared_cache())
        .env("SANDBOX_RUNTIME", "python-3.12")
        .env("SANDBOX_ROOT", tmp)
        .env("SANDBOX_LOG", "warn");
    c
}

#[test]
fn exec_prints_the_output_and_the_value() {
    let out = command()
        .args(["exec", "print('hello'); 6 * 7"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n42\n");
}

#[test]
fn exec_fails_with_the_traceback_when_the_code_raises() {
    let out = command().args(["exec", "1/0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ZeroDivisionError"));
}

/// A sandbox root other local users may write (a shared /tmp-like
/// directory) is refused at start, with what to do: anyone who can write it
/// could plant or swap directories and take or destroy sandboxes.
#[cfg(unix)]
#[test]
fn a_sandbox_root_others_can_write_is_refused_at_start() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let shared = tmp.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let out = command()
        .env("SANDBOX_ROOT", &shared)
        .args(["exec", "print(1)"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("refusing the sandbox directory"), "{said}");
    assert!(
        said.contains("mode 1777") && said.contains("chmod 700"),
        "{said}"
    );
    assert!(!said.contains("panicked"), "{said}");
    assert_eq!(std::fs::read_dir(&shared).unwrap().count(), 0);
}

#[test]
fn help_documents_every_flag_with_its_variable() {
    let out = command().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for var in [
        "INTERPRETER_TYPE",
        "SANDBOX_ROOT",
        "SANDBOX_RUNTIME_DIR",
        "SANDBOX_TIMEOUT_SECONDS",
        "SANDBOX_MEMORY_MB",
        "SANDBOX_FUEL",
        "SANDBOX_OUTPUT_LIMIT_BYTES",
    ] {
        assert!(help.contains(var), "--help lacks {var}");
    }
}

#[tokio::test]
async fn a_missing_runtime_is_reported_with_the_fix() {
    let empty = tempfile::tempdir().unwrap();
    let server =
        Server::start_with(&[("SANDBOX_RUNTIME_DIR", empty.path().to_str().unwrap())]).await;
    let msg = server.err("create_sandbox", json!({})).await;
    assert!(msg.contains("runtime is missing"), "{msg}");
    assert!(msg.contains("fetch-python.sh"), "{msg}");
    std::fs::write(empty.path().join("python-3.12.0.wasm"), b"\0asm garbage").unwrap();
    let msg = server.err("create_sandbox", json!({})).await;
    assert!(msg.contains("corrupt"), "{msg}");
    server.stop().await;
}

#[tokio::test]
async fn sigterm_and_sigint_shut_down_cleanly_and_remove_the_sandboxes() {
    for signal in ["-TERM", "-INT"] {
        let server = Server::start_with(&[
            ("SANDBOX_POOL_SIZE", "0"),
            ("SANDBOX_KEEP_SAVED_SECONDS", "0"),
        ])
        .await;
        server.create().await;
        assert_eq!(server.sandbox_dirs().len(), 1);
        let status = Command::new("kill")
            .args([signal, &server.pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let mut gone = false;
        for _ in 0..100 {
            if !std::path::Path::new(&format!("/proc/{}", server.pid)).exists()
                || std::fs::read_to_string(format!("/proc/{}/stat", server.pid))
                    .is_ok_and(|s| s.contains(") Z "))
            {
                gone = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert!(gone, "the server exited on {signal}");
        assert!(
            server.sandbox_dirs().is_empty()
                && std::fs::read_dir(&server.root).unwrap().count() == 0,
            "{signal} removed this server's directory"
        );
    }
}

#[test]
fn settings_come_from_the_dot_env_file_of_the_working_directory_only() {
    let dir = tempfile::tempdir().unwrap();
    let child = dir.path().join("child");
    std::fs::create_dir(&child).unwrap();
    let env = "# settings\nSANDBOX_MEMORY_MB=40\n";
    std::fs::write(dir.path().join(".env"), env).unwrap();
    let code = "x = bytearray(64 << 20)";
    let here = command()
        .current_dir(dir.path())
        .args(["exec", code])
        .output()
        .unwrap();
    assert_eq!(
        here.status.code(),
        Some(1),
        "the memory cap from .env was hit"
    );
    assert!(String::from_utf8_lossy(&here.stderr).contains("MemoryError"));
    let below = command()
        .current_dir(&child)
        .args(["exec", code])
        .output()
        .unwrap();
    assert!(
        below.status.success(),
        "a parent directory's .env is not read: {}",
        String::from_utf8_lossy(&below.stderr)
    );
}

#[test]
fn an_unknown_default_runtime_stops_the_server_at_start() {
    let out = command()
        .env("SANDBOX_RUNTIME", "no-such-runtime")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("SANDBOX_RUNTIME") && err.contains("python-3.12"),
        "{err}"
    );
}

#[test]
fn exec_prints_whole_output_keeps_the_value_on_its_own_line_and_saves_figures_here() {
    let out = command()
        .args(["exec", "print('x' * 100_000)\nprint('tail', end='')\n6 * 7"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        stdout.len(),
        100_001 + 4 + 1 + 3,
        "the whole stream: {}",
        &stdout[..80]
    );
    assert!(
        stdout.ends_with("tail\n42\n"),
        "{}",
        &stdout[stdout.len() - 40..]
    );
    assert!(!stdout.contains("left out") && !stdout.contains("/.outputs/"));

    let here = tempfile::tempdir().unwrap();
    let out = command()
        .current_dir(here.path())
        .env("SANDBOX_CACHE_DIR", crate::support::scientific_cache())
        .args([
            "--runtime",
            "scientific",
            "exec",
            "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("figure 1 saved as ./figure-1.png"),
        "{stderr}"
    );
    let png = std::fs::read(here.path().join("figure-1.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG"));
}

#[test]
fn the_default_runtime_is_the_scientific_one_with_its_libraries_imported() {
    crate::support::scientific_cache();
    let out = command()
        .env_remove("SANDBOX_RUNTIME")
        .args([
            "exec",
            "import sys\n(sys.version_info[:2], 'pandas' in sys.modules)",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "((3, 15), True)\n");
}
