//! Hostile requests: malformed JSON-RPC, oversized lines, invalid UTF-8,
//! giant arguments and many calls in flight. Each gets an answer, and the
//! server keeps serving.

use serde_json::json;

use crate::support::{RawClient, Server, structured};

#[tokio::test]
async fn malformed_lines_get_json_rpc_errors_and_the_session_goes_on() {
    let mut client = RawClient::start(&[]).await;
    client.send_line(b"{this is not json").await;
    let reply = client.recv().await;
    assert_eq!(reply["error"]["code"], -32700, "{reply}");
    assert!(reply["id"].is_null());
    client.send_line(b"\xff\xfe\x00 invalid utf-8").await;
    assert_eq!(client.recv().await["error"]["code"], -32700);
    client.send_line(b"[1, 2, 3]").await;
    assert_eq!(client.recv().await["error"]["code"], -32600);
    client
        .send_json(json!({"jsonrpc": "2.0", "id": 9, "method": "no/such/method"}))
        .await;
    let reply = client.recv().await;
    assert_eq!(reply["id"], 9);
    assert_eq!(reply["error"]["code"], -32601);
    let reply = client.call(10, "no_such_tool", json!({})).await;
    assert_eq!(reply["id"], 10);
    assert!(reply["error"].is_object(), "{reply}");
    let reply = client
        .call(11, "create_sandbox", json!({"memory_mb": "lots"}))
        .await;
    assert_eq!(reply["result"]["isError"], true, "{reply}");
    let reply = client.call(12, "get_sandbox_status", json!({})).await;
    assert_eq!(reply["result"]["structuredContent"]["count"], 0);
    // JSON objects that are not JSON-RPC messages get an answer too.
    for (line, id) in [
        (json!({"foo": 1}), serde_json::Value::Null),
        (json!({"jsonrpc": "2.0", "id": 13}), json!(13)),
        (
            json!({"jsonrpc": "1.0", "id": 14, "method": "ping"}),
            json!(14),
        ),
        (json!({"jsonrpc": "2.0", "id": 15, "method": 42}), json!(15)),
    ] {
        client.send_json(line.clone()).await;
        let reply = client.recv().await;
        assert_eq!(reply["error"]["code"], -32600, "{line} -> {reply}");
        assert_eq!(reply["id"], id, "{line}");
    }
    let reply = client.call(16, "get_sandbox_status", json!({})).await;
    assert_eq!(reply["id"], 16, "the session goes on");
    assert!(client.finish().await, "the server exits cleanly at EOF");
}

#[tokio::test]
async fn notifications_are_not_logged_one_by_one() {
    let server = Server::start_with(&[("SANDBOX_LOG", "info")]).await;
    let before = server.logs().len();
    for _ in 0..500 {
        server
            .client
            .notify_roots_list_changed()
            .await
            .expect("send a notification");
    }
    // A request after them, answered in order, shows they were all read.
    server.ok("get_sandbox_status", json!({})).await;
    let grown = server.logs().len() - before;
    assert!(grown < 20_000, "{grown} bytes of log for 500 notifications");
    assert!(
        !server.logs().contains('\u{1b}'),
        "no colour codes in a log file"
    );
    server.stop().await;
}

#[tokio::test]
async fn an_oversized_request_is_refused_with_its_id_without_being_buffered() {
    let mut client = RawClient::start(&[("SANDBOX_MAX_REQUEST_BYTES", "1048576")]).await;
    let huge = "x".repeat(3 << 20);
    let reply = client
        .call(
            21,
            "write_file",
            json!({"session_id": "a", "file_path": "big", "content": huge}),
        )
        .await;
    assert_eq!(reply["id"], 21, "{reply}");
    assert_eq!(reply["error"]["code"], -32600);
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("over this server's limit")
    );
    let reply = client.call(22, "get_sandbox_status", json!({})).await;
    assert_eq!(reply["id"], 22);
    assert!(client.finish().await);
}

#[tokio::test]
async fn giant_arguments_within_the_line_limit_get_tool_errors() {
    let server = Server::start().await;
    let id = server.create().await;
    let fifty_mib = "#".repeat(50 << 20);
    let msg = server
        .err("execute_code", json!({"session_id": id, "code": fifty_mib}))
        .await;
    assert!(
        msg.contains("over the limit"),
        "{}",
        &msg[..msg.len().min(300)]
    );
    let msg = server
        .err(
            "write_file",
            json!({"session_id": id, "file_path": "big.txt", "content": "y".repeat(40 << 20)}),
        )
        .await;
    assert!(
        msg.contains("over the limit"),
        "{}",
        &msg[..msg.len().min(300)]
    );
    let listing = server.ok("list_files", json!({"session_id": id})).await;
    let names: Vec<&str> = listing["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert!(
        !names.contains(&"big.txt"),
        "nothing half-written: {names:?}"
    );
    assert_eq!(
        server.run(&id, "'still fine'").await["value"],
        "'still fine'"
    );
    server.stop().await;
}

#[tokio::test]
async fn hundreds_of_calls_in_flight_are_all_answered() {
    let server = Server::start().await;
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(server.create().await);
    }
    let calls = (0..300).map(|i| {
        let id = ids[i % ids.len()].clone();
        let server = &server;
        async move {
            match i % 3 {
                0 => structured(
                    &server
                        .call(
                            "execute_code",
                            json!({"session_id": id, "code": format!("{i} * 2")}),
                        )
                        .await,
                )["value"]
                    .as_str()
                    .map(str::to_owned),
                1 => server
                    .ok(
                        "write_file",
                        json!({"session_id": id, "file_path": format!("f{i}"), "content": "x"}),
                    )
                    .await["path"]
                    .as_str()
                    .map(str::to_owned),
                _ => server
                    .call("get_sandbox_status", json!({}))
                    .await
                    .structured_content
                    .map(|s| s["count"].to_string()),
            }
        }
    });
    let results = futures::future::join_all(calls).await;
    for (i, r) in results.iter().enumerate() {
        let r = r
            .as_deref()
            .unwrap_or_else(|| panic!("call {i} had no answer"));
        match i % 3 {
            0 => assert_eq!(r, (i * 2).to_string()),
            1 => assert_eq!(r, format!("/f{i}")),
            _ => assert_eq!(r, "4"),
        }
    }
    server.stop().await;
}

/// Every argument that names something on the host is looked up among what
/// the server knows: a runtime name never becomes a path, and the error
/// neither quotes a file nor tells a file that exists from one that does not.
#[tokio::test]
async fn names_in_arguments_never_reach_host_paths() {
    let server = Server::start().await;
    let outside = server.root.parent().unwrap().join("elsewhere");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("a.toml"), "top secret first line\n").unwrap();
    let existing = outside.join("a");
    let missing = outside.join("b");
    let mut answers = Vec::new();
    for runtime in [
        existing.to_str().unwrap(),
        missing.to_str().unwrap(),
        "../../../elsewhere/a",
        "../../../elsewhere/b",
        "python-3.12\u{0}",
        "python-3.12/../python-3.12",
        &"r".repeat(100_000),
    ] {
        for tool in ["create_sandbox", "create_run_close"] {
            let mut args = json!({"runtime": runtime});
            if tool == "create_run_close" {
                args["code"] = json!("1");
            }
            let msg = server.err(tool, args).await;
            assert!(msg.contains("unknown runtime"), "{msg}");
            assert!(!msg.contains("top secret"), "file content quoted: {msg}");
            assert!(msg.len() < 1000, "the name is cut short: {}", msg.len());
            answers.push(msg.replace(runtime, "NAME"));
        }
    }
    assert_eq!(
        answers[0], answers[2],
        "an existing file and a missing one get the same answer"
    );
    for backend in ["../wasm", "/etc/passwd", "wasm\u{0}"] {
        let msg = server
            .err("create_sandbox", json!({"backend": backend}))
            .await;
        assert!(msg.contains("unknown backend"), "{msg}");
    }
    server.stop().await;
}
