//! Hostile arguments and a hostile E2B, against the E2B backend: no
//! argument and no value in E2B's answers may change where a request goes or
//! what its headers say.

use axum::http::Method;
use serde_json::{Value, json};

use super::server;
use crate::behaviour::wait_until_none_alive;
use crate::e2b_fake::{Act, FakeE2b, Fault};

/// A fault on the next `times` requests of `method` to paths under `prefix`.
fn fault(method: Method, prefix: &str, status: u16, act: Act) -> Fault {
    Fault {
        method: Some(method),
        path_prefix: prefix.into(),
        status,
        times: 1,
        act,
        ..Fault::default()
    }
}

#[tokio::test]
async fn hostile_arguments_cannot_change_a_request() {
    let fake = FakeE2b::start().await;
    let server = server(&fake, &[]).await;
    let long = "a".repeat(10_000);
    for runtime in [
        "../x",
        "a?b",
        "a#b",
        "a%2fb",
        "a\r\nX-Evil: 1",
        "a\0b",
        "/abs",
        long.as_str(),
    ] {
        let msg = server
            .err("create_sandbox", json!({"runtime": runtime}))
            .await;
        assert!(
            msg.contains("not an E2B template name"),
            "{runtime:?}: {msg}"
        );
        assert!(msg.len() < 1000, "the value is shortened: {msg}");
    }
    for session in ["../x", "a/b", "a\r\nb", "a\0b", long.as_str()] {
        server
            .err("create_sandbox", json!({"session_id": session}))
            .await;
    }
    assert!(
        !fake.requests().iter().any(|r| r.path == "/sandboxes"),
        "nothing reached E2B"
    );

    let id = server.create().await;
    for name in [
        "q?x=1#frag",
        "%2e%2e%2fup",
        "a%2fb",
        "semi;colon&and=eq",
        "quote\"d",
    ] {
        server
            .ok(
                "write_file",
                json!({"session_id": id, "file_path": format!("d/{name}"), "content": name}),
            )
            .await;
        let read = server
            .ok(
                "read_file",
                json!({"session_id": id, "file_path": format!("d/{name}")}),
            )
            .await;
        assert_eq!(read["content"], name);
    }
    let listed = server
        .ok("list_files", json!({"session_id": id, "path": "d"}))
        .await;
    let mut names: Vec<&str> = listed["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "%2e%2e%2fup",
            "a%2fb",
            "q?x=1#frag",
            "quote\"d",
            "semi;colon&and=eq"
        ],
        "each name is one file in d, nothing elsewhere"
    );
    let home = server.ok("list_files", json!({"session_id": id})).await;
    assert_eq!(home["files"].as_array().unwrap().len(), 1, "{home}");

    let executes_before = fake
        .requests()
        .iter()
        .filter(|r| r.path == "/execute")
        .count();
    for package in [
        "x\"]); import os #",
        "caf\u{e9}",
        "a\0b",
        "--index-url=http://127.0.0.1:1/",
        long.as_str(),
    ] {
        server
            .err(
                "install_package",
                json!({"session_id": id, "package_name": package}),
            )
            .await;
    }
    let executes_after = fake
        .requests()
        .iter()
        .filter(|r| r.path == "/execute")
        .count();
    assert_eq!(
        executes_before, executes_after,
        "no refused name reached E2B"
    );
    server.stop().await;
    wait_until_none_alive(&fake).await;
}

#[tokio::test]
async fn a_create_answer_that_would_redirect_traffic_is_refused_and_killed() {
    let fake = FakeE2b::start().await;
    let server = server(&fake, &[]).await;
    for patch in [
        json!({"domain": "127.0.0.1:1/x?"}),
        json!({"domain": "user@evil.invalid"}),
        json!({"envdAccessToken": "tok\r\nX-Evil: 1"}),
        json!({"envdAccessToken": "x".repeat(10_000)}),
        json!({"trafficAccessToken": "t\u{0}"}),
    ] {
        fake.fail(fault(
            Method::POST,
            "/sandboxes",
            0,
            Act::Patch(patch.clone()),
        ));
        let msg = server.err("create_sandbox", json!({})).await;
        assert!(msg.contains("unexpected answer from E2B"), "{patch}: {msg}");
        assert!(msg.len() < 1000, "{msg}");
        wait_until_none_alive(&fake).await;
    }
    let kills = fake
        .requests()
        .iter()
        .filter(|r| r.method == "DELETE")
        .count();
    assert_eq!(kills, 5, "each refused sandbox was killed");
    let value: Value = server.run(&server.create().await, "1").await;
    assert_eq!(value["value"], "1");
    server.stop().await;
    wait_until_none_alive(&fake).await;
}
