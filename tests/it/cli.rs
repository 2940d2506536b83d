//! The command line: `exec`, `--help`, and a missing runtime.

use std::process::Command;

use serde_json::json;

use crate::support::{Server, binary, shared_cache};

fn command() -> Command {
    let mut c = Command::new(binary());
    let tmp = std::env::temp_dir().join(format!("mcp-cli-{}", std::process::id()));
    c.env("SANDBOX_CACHE_DIR", shared_cache())
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
