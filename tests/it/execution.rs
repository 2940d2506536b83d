//! execute_code: state across calls, values, output, exceptions.

use serde_json::json;

use crate::support::{Server, structured, text};

#[tokio::test]
async fn state_persists_between_calls_like_a_notebook() {
    let server = Server::start().await;
    let id = server.create().await;
    let first = server
        .run(&id, "import math\ny = 40\ndef double(v):\n    return 2 * v")
        .await;
    assert_eq!(first["value"], serde_json::Value::Null);
    let second = server.run(&id, "y + 2").await;
    assert_eq!(second["value"], "42");
    let third = server.run(&id, "double(math.floor(10.5))").await;
    assert_eq!(third["value"], "20");
    let text_block = crate::support::text(&server.exec(&id, "y + 2").await);
    assert!(text_block.contains("Out: 42"), "{text_block}");
    server.stop().await;
}

#[tokio::test]
async fn stdout_and_stderr_are_captured_separately_and_in_order() {
    let server = Server::start().await;
    let id = server.create().await;
    let r = server
        .run(
            &id,
            "import sys\nprint('one')\nprint('warn', file=sys.stderr)\nprint('two')\nsys.stdout.write('no newline')",
        )
        .await;
    assert_eq!(r["stdout"]["text"], "one\ntwo\nno newline");
    assert_eq!(r["stderr"]["text"], "warn\n");
    assert_eq!(r["stdout"]["truncated"], false);
    assert_eq!(
        r["value"], "10",
        "sys.stdout.write returns the count, like in a notebook"
    );
    server.stop().await;
}

#[tokio::test]
async fn an_exception_is_an_error_result_with_its_traceback_and_the_state_survives() {
    let server = Server::start().await;
    let id = server.create().await;
    server.run(&id, "kept = 'still here'").await;
    let result = server
        .exec(&id, "print('before')\ndef f():\n    return 1 / 0\nf()")
        .await;
    assert_eq!(result.is_error, Some(true));
    let s = structured(&result);
    assert_eq!(s["error"]["name"], "ZeroDivisionError");
    assert_eq!(s["error"]["value"], "division by zero");
    let tb = s["error"]["traceback"].as_str().unwrap();
    assert!(tb.contains("line 3, in f"), "{tb}");
    assert!(
        tb.contains("return 1 / 0"),
        "the cell's source is shown: {tb}"
    );
    assert!(
        !tb.contains("driver"),
        "the driver's frames are hidden: {tb}"
    );
    assert_eq!(s["stdout"]["text"], "before\n");
    assert!(text(&result).contains("ZeroDivisionError"));
    assert_eq!(server.run(&id, "kept").await["value"], "'still here'");

    let syntax = server.exec(&id, "def broken(:").await;
    assert_eq!(syntax.is_error, Some(true));
    assert_eq!(structured(&syntax)["error"]["name"], "SyntaxError");

    let exit = server.exec(&id, "import sys; sys.exit(3)").await;
    assert_eq!(exit.is_error, Some(true));
    assert_eq!(structured(&exit)["error"]["name"], "SystemExit");
    assert_eq!(server.run(&id, "kept").await["value"], "'still here'");
    server.stop().await;
}

#[tokio::test]
async fn the_guest_sees_only_its_directory_and_no_host_environment() {
    let server =
        Server::start_with(&[("HOST_SECRET", "do-not-leak"), ("SANDBOX_POOL_SIZE", "0")]).await;
    let id = server.create().await;
    let r = server
        .run(
            &id,
            "import os\nopen('/made-here.txt', 'w').write('x')\n(os.getcwd(), sorted(os.listdir('/')), 'do-not-leak' in str(os.environ))",
        )
        .await;
    assert_eq!(r["value"], "('/', ['made-here.txt', 'tmp'], False)");
    let dirs = server.sandbox_dirs();
    assert_eq!(dirs.len(), 1);
    assert!(
        dirs[0].join("made-here.txt").exists(),
        "the guest's / is the sandbox directory"
    );

    let net = server
        .exec(
            &id,
            "import socket\nsocket.create_connection(('127.0.0.1', 80), timeout=1)",
        )
        .await;
    assert_eq!(net.is_error, Some(true), "no network: {}", text(&net));
    let sub = server
        .exec(&id, "import subprocess\nsubprocess.run(['ls'])")
        .await;
    assert_eq!(sub.is_error, Some(true), "no processes: {}", text(&sub));
    let read_stdin = server.exec(&id, "input()").await;
    assert_eq!(structured(&read_stdin)["error"]["name"], "EOFError");
    let raw_stdin = server.run(&id, "import os\nos.read(0, 100)").await;
    assert_eq!(raw_stdin["value"], "b''", "stdin is empty for the program");
    assert_eq!(
        server.run(&id, "1").await["value"],
        "1",
        "and the protocol is intact"
    );
    server.stop().await;
}

#[tokio::test]
async fn create_run_close_runs_once_and_leaves_nothing() {
    let server = Server::start_with(&[("SANDBOX_POOL_SIZE", "0")]).await;
    let r = server
        .ok("create_run_close", json!({"code": "print('hi'); 6 * 7"}))
        .await;
    assert_eq!(r["stdout"]["text"], "hi\n");
    assert_eq!(r["value"], "42");
    let status = server.ok("get_sandbox_status", json!({})).await;
    assert_eq!(status["count"], 0);
    assert!(server.sandbox_dirs().is_empty());
    let failed = server
        .call("create_run_close", json!({"code": "raise ValueError('x')"}))
        .await;
    assert_eq!(failed.is_error, Some(true));
    assert!(server.sandbox_dirs().is_empty());
    server.stop().await;
}

#[tokio::test]
async fn forged_protocol_output_is_just_output() {
    let server = Server::start().await;
    let id = server.create().await;
    let forged = r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#;
    let r = server
        .run(
            &id,
            &format!("import os\nos.write(1, b'{forged}\\n')\nprint('\\x1b[31mred')"),
        )
        .await;
    assert!(r["stdout"]["text"].as_str().unwrap().starts_with(forged));
    assert_eq!(server.run(&id, "'alive'").await["value"], "'alive'");
    server.stop().await;
}
