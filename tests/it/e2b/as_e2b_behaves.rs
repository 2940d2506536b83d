//! E2B as it really behaves (checked against its SDKs' and servers' sources),
//! each answer played by the fake: plan limits on a sandbox's life, a single
//! 502 that is not the end, envd's 500 for a path under a file, the edge's
//! 409, 429 and 403, envd before 0.4.0 needing a user, and results in SVG,
//! HTML and markdown.

use std::time::Duration;

use axum::http::Method;
use base64::Engine as _;
use serde_json::json;

use super::server;
use crate::behaviour::wait_until_none_alive;
use crate::e2b_fake::{Act, FakeE2b, Fault};
use crate::support::{binary, structured};

fn on_execute(status: u16, message: &'static str) -> Fault {
    Fault {
        method: Some(Method::POST),
        path_prefix: "/execute".into(),
        status,
        times: 1,
        act: Act::Proxy(message),
        ..Fault::default()
    }
}

#[test]
fn a_lifetime_longer_than_the_plan_allows_is_refused_at_start() {
    let out = std::process::Command::new(binary())
        .env_clear()
        .env("HOME", std::env::temp_dir())
        .env("E2B_API_KEY", "e2b_test")
        .env("E2B_API_URL", "http://127.0.0.1:9")
        .env("SANDBOX_E2B_LIFETIME_SECONDS", "7200")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("SANDBOX_E2B_LIFETIME_SECONDS")
            && stderr.contains("SANDBOX_E2B_MAX_LIFETIME_SECONDS")
            && stderr
                .contains("7200 s is longer than E2B lets a sandbox live on your plan (3600 s"),
        "{stderr}"
    );
}

#[tokio::test]
async fn reaching_the_plans_longest_life_is_reported_as_such() {
    let fake = FakeE2b::start().await;
    fake.set_max_lifetime(Duration::from_secs(4));
    let server = server(
        &fake,
        &[
            ("SANDBOX_E2B_LIFETIME_SECONDS", "3"),
            ("SANDBOX_E2B_MAX_LIFETIME_SECONDS", "4"),
        ],
    )
    .await;
    let id = server.create().await;
    assert_eq!(server.run(&id, "1 + 1").await["value"], "2");
    // The keep-alive is capped, then refused; the sandbox ends at 4 s.
    wait_until_none_alive(&fake).await;
    let refreshes = fake
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/timeout"))
        .count();
    assert!(refreshes >= 2, "{refreshes} refreshes");
    let msg = server
        .err("execute_code", json!({"session_id": id, "code": "1"}))
        .await;
    assert!(
        msg.contains("reached the longest life E2B allows on this plan (4 s, SANDBOX_E2B_MAX_LIFETIME_SECONDS)"),
        "{msg}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_single_502_does_not_end_the_sandbox() {
    let fake = FakeE2b::start().await;
    let server = server(&fake, &[]).await;
    let id = server.create().await;
    fake.fail(on_execute(502, "The sandbox was not found"));
    let msg = server
        .err("execute_code", json!({"session_id": id, "code": "1"}))
        .await;
    assert!(msg.contains("this time (HTTP 502)"), "{msg}");
    assert_eq!(server.run(&id, "1 + 1").await["value"], "2");
    // A sandbox that is really gone is reported as gone, for good.
    fake.expire(&fake.live().pop().unwrap());
    for _ in 0..2 {
        let msg = server
            .err("execute_code", json!({"session_id": id, "code": "1"}))
            .await;
        assert!(msg.contains("no longer exists on E2B"), "{msg}");
    }
    server.stop().await;
}

#[tokio::test]
async fn the_edges_409_429_and_403_are_each_explained() {
    let fake = FakeE2b::start().await;
    let server = server(&fake, &[]).await;
    let id = server.create().await;
    assert_eq!(server.run(&id, "1 + 1").await["value"], "2");
    for (status, message, said) in [
        (
            409,
            "sandbox is still transitioning",
            "is pausing or resuming (HTTP 409",
        ),
        (
            429,
            "too many concurrent connections",
            "too many connections to it at once, or the team's limit",
        ),
        (
            403,
            "invalid traffic access token",
            "its traffic access token was not accepted",
        ),
    ] {
        fake.fail(on_execute(status, message));
        let msg = server
            .err("execute_code", json!({"session_id": id, "code": "1"}))
            .await;
        assert!(
            msg.contains(said) && msg.contains(message),
            "{status}: {msg}"
        );
    }
    assert_eq!(server.run(&id, "2 + 2").await["value"], "4");
    server.stop().await;
    wait_until_none_alive(&fake).await;
}

#[tokio::test]
async fn writing_under_a_file_is_refused_once_and_explained() {
    let fake = FakeE2b::start().await;
    let server = server(&fake, &[]).await;
    let id = server.create().await;
    server
        .ok(
            "write_file",
            json!({"session_id": id, "file_path": "/f.txt", "content": "x"}),
        )
        .await;
    let msg = server
        .err(
            "write_file",
            json!({"session_id": id, "file_path": "/f.txt/inner.txt", "content": "y"}),
        )
        .await;
    assert!(msg.contains("a file is in the way"), "{msg}");
    let tries = fake
        .requests()
        .iter()
        .filter(|r| r.path == "/files" && r.query.contains("inner.txt"))
        .count();
    assert_eq!(
        tries, 1,
        "envd's 500 for a path under a file is not retried"
    );
    server.stop().await;
    wait_until_none_alive(&fake).await;
}

#[tokio::test]
async fn envd_before_0_4_0_is_told_the_user() {
    let fake = FakeE2b::start().await;
    fake.fail(Fault {
        method: Some(Method::POST),
        path_prefix: "/sandboxes".into(),
        times: 1,
        act: Act::Patch(json!({"envdVersion": "0.3.9"})),
        ..Fault::default()
    });
    let server = server(&fake, &[]).await;
    let id = server.create().await;
    server
        .ok(
            "write_file",
            json!({"session_id": id, "file_path": "d/a.txt", "content": "old envd"}),
        )
        .await;
    let read = server
        .ok(
            "read_file",
            json!({"session_id": id, "file_path": "d/a.txt"}),
        )
        .await;
    assert_eq!(read["content"], "old envd");
    let listing = server
        .ok("list_files", json!({"session_id": id, "path": "d"}))
        .await;
    assert_eq!(listing["files"][0]["name"], "a.txt");
    for r in fake.requests().iter().filter(|r| r.service == "sandbox") {
        if r.path == "/files" {
            assert!(r.query.contains("username=root"), "{r:?}");
        } else if r.path.starts_with("/filesystem.") {
            assert_eq!(r.header("authorization"), Some("Basic cm9vdDo="), "{r:?}");
        }
    }
    server.stop().await;
    wait_until_none_alive(&fake).await;
}

#[tokio::test]
async fn svg_comes_back_as_an_image_and_html_and_markdown_as_text() {
    let fake = FakeE2b::start().await;
    let server = server(&fake, &[]).await;
    let id = server.create().await;
    let result = server.exec(&id, "show_svg()").await;
    let s = structured(&result);
    assert_eq!(s["images"][0]["mime_type"], "image/svg+xml", "{s}");
    let image = result
        .content
        .iter()
        .find_map(|c| c.as_image())
        .expect("an image block");
    assert_eq!(image.mime_type, "image/svg+xml");
    let svg = base64::engine::general_purpose::STANDARD
        .decode(&image.data)
        .unwrap();
    assert!(String::from_utf8(svg).unwrap().starts_with("<svg"));
    let shown = server.run(&id, "show_html()").await;
    let stdout = shown["stdout"]["text"].as_str().unwrap();
    assert!(
        stdout.contains("<b>bold</b>") && stdout.contains("**bold**"),
        "{shown}"
    );
    assert!(!stdout.contains("object>"), "{shown}");
    let value = server.run(&id, "show_html(main=True)").await;
    assert_eq!(value["value"], "<b>bold</b>", "{value}");
    server.stop().await;
    wait_until_none_alive(&fake).await;
}
