//! A hostile E2B (or something posing as it on the network) and hostile
//! arguments, against the E2B backend: credentials must not follow a
//! redirect, answers of any size must stay bounded, a slow or silent endpoint
//! must not hold a sandbox, a cancelled install must stop, and no argument
//! may change where a request goes or what its headers say.

use std::time::{Duration, Instant};

use axum::http::Method;
use serde_json::{Value, json};

use super::server;
use crate::behaviour::wait_until_none_alive;
use crate::e2b_fake::{Act, FakeE2b, Fault};
use crate::support::{structured, text};

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

/// The peak resident memory of a process, in bytes (`VmHWM`).
fn peak_memory(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kib << 10
}

/// The total length of a result's text and image blocks.
fn answer_bytes(result: &rmcp::model::CallToolResult) -> usize {
    result
        .content
        .iter()
        .map(|c| c.as_text().map_or(0, |t| t.text.len()) + c.as_image().map_or(0, |i| i.data.len()))
        .sum::<usize>()
        + result
            .structured_content
            .as_ref()
            .map_or(0, |s| s.to_string().len())
}

#[tokio::test]
async fn redirects_are_refused_and_credentials_never_leave_the_origin() {
    let fake = FakeE2b::start().await;
    let server = server(&fake, &[]).await;
    let elsewhere = fake.elsewhere_url.trim_start_matches("http://").to_owned();

    fake.fail(fault(
        Method::POST,
        "/sandboxes",
        307,
        Act::Redirect(format!("{}/sandboxes", fake.elsewhere_url)),
    ));
    let msg = server.err("create_sandbox", json!({})).await;
    assert!(msg.contains("HTTP 307"), "{msg}");
    assert!(msg.contains("redirect"), "{msg}");
    assert!(
        msg.contains(&elsewhere),
        "the target's origin is named: {msg}"
    );

    let id = server.create().await;
    for (method, path, status, tool, args) in [
        (
            Method::POST,
            "/execute",
            307,
            "execute_code",
            json!({"session_id": id, "code": "1"}),
        ),
        (
            Method::GET,
            "/files",
            302,
            "read_file",
            json!({"session_id": id, "file_path": "f"}),
        ),
        (
            Method::POST,
            "/filesystem.Filesystem/ListDir",
            308,
            "list_files",
            json!({"session_id": id}),
        ),
    ] {
        fake.fail(fault(
            method,
            path,
            status,
            Act::Redirect(format!("{}{path}", fake.elsewhere_url)),
        ));
        let msg = server.err(tool, args).await;
        assert!(msg.contains(&format!("HTTP {status}")), "{tool}: {msg}");
        assert!(msg.contains(&elsewhere), "{tool}: {msg}");
    }
    // A redirect to the same origin is not followed either.
    fake.fail(fault(
        Method::POST,
        "/execute",
        307,
        Act::Redirect(format!("{}/execute", fake.sandbox_url)),
    ));
    let msg = server
        .err("execute_code", json!({"session_id": id, "code": "1"}))
        .await;
    assert!(msg.contains("HTTP 307"), "{msg}");
    assert_eq!(server.run(&id, "1 + 1").await["value"], "2");

    let leaked: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.service == "elsewhere")
        .collect();
    assert!(leaked.is_empty(), "requests went elsewhere: {leaked:?}");
    let executes = fake
        .requests()
        .iter()
        .filter(|r| r.service == "sandbox" && r.path == "/execute")
        .count();
    assert_eq!(
        executes, 4,
        "two refused redirects, then the working directory set and one run, nothing followed"
    );
    server.stop().await;
    wait_until_none_alive(&fake).await;
}

#[tokio::test]
async fn images_are_bounded_in_count_and_size_and_returned_once() {
    let fake = FakeE2b::start().await;
    let server = server(&fake, &[]).await;
    let id = server.create().await;

    let result = server.exec(&id, "for _ in range(30): show_png()").await;
    let s = structured(&result);
    assert_eq!(
        s["images"].as_array().unwrap().len(),
        8,
        "{}",
        text(&result)
    );
    let images = result.content.iter().filter(|c| c.as_image().is_some());
    assert_eq!(images.count(), 8);
    let stderr = s["stderr"]["text"].as_str().unwrap();
    assert!(stderr.contains("22 images not returned"), "{stderr}");
    assert!(stderr.contains("at most 8"), "{stderr}");

    // Images over the size limit are left out; those too large for a line
    // of the stream are not even read.
    for (code, note) in [
        (
            "for _ in range(5): show_image(2 << 20)\n'drawn'",
            "5 images not returned: over the image limit of 512 KiB",
        ),
        (
            "for _ in range(5): show_image(10 << 20)\n'drawn'",
            "skipped a line of E2B's answer (5 in all",
        ),
    ] {
        let result = server.exec(&id, code).await;
        let s = structured(&result);
        assert_eq!(s["value"], "drawn");
        assert!(s["images"].as_array().is_none_or(Vec::is_empty), "{s}");
        let stderr = s["stderr"]["text"].as_str().unwrap();
        assert!(stderr.contains(note), "{stderr}");
        assert!(
            answer_bytes(&result) < 64 << 10,
            "the answer holds {} bytes",
            answer_bytes(&result)
        );
    }

    let result = server.exec(&id, "show_png(jpeg=True)").await;
    let s = structured(&result);
    assert_eq!(s["images"].as_array().unwrap().len(), 1, "{s}");
    assert_eq!(s["images"][0]["mime_type"], "image/png");
    let blocks: Vec<_> = result.content.iter().filter_map(|c| c.as_image()).collect();
    assert_eq!(
        blocks.len(),
        1,
        "one image block for a figure in PNG and JPEG"
    );
    assert_eq!(blocks[0].mime_type, "image/png");
    server.stop().await;
    wait_until_none_alive(&fake).await;
}

#[tokio::test]
async fn an_exceptions_text_and_traceback_are_capped_like_the_output() {
    let fake = FakeE2b::start().await;
    let server = server(&fake, &[("SANDBOX_OUTPUT_LIMIT_BYTES", "2000")]).await;
    let id = server.create().await;
    let result = server.exec(&id, "raise ValueError('x' * 3_000_000)").await;
    assert_eq!(result.is_error, Some(true));
    let s = structured(&result);
    assert_eq!(s["error"]["name"], "ValueError");
    let value = s["error"]["value"].as_str().unwrap();
    let traceback = s["error"]["traceback"].as_str().unwrap();
    assert!(value.len() <= 2000, "{} bytes of message", value.len());
    assert!(value.contains("left out"), "the cut is marked: {value}");
    assert!(
        traceback.len() <= 2000,
        "{} bytes of traceback",
        traceback.len()
    );
    assert!(
        answer_bytes(&result) < 16 << 10,
        "{}",
        answer_bytes(&result)
    );
    server.stop().await;
    wait_until_none_alive(&fake).await;
}

#[tokio::test]
async fn an_overlong_line_is_skipped_and_said() {
    let fake = FakeE2b::start().await;
    let server = server(&fake, &[]).await;
    let id = server.create().await;
    let result = server
        .exec(&id, "print('before')\nshow_image(12 << 20)\nprint('after')")
        .await;
    let s = structured(&result);
    assert_eq!(s["stdout"]["text"], "before\nafter\n", "{}", text(&result));
    let stderr = s["stderr"]["text"].as_str().unwrap();
    assert!(stderr.contains("skipped a line"), "{stderr}");
    assert!(stderr.contains("8 MiB"), "{stderr}");
    assert!(
        answer_bytes(&result) < 64 << 10,
        "{}",
        answer_bytes(&result)
    );
    server.stop().await;
    wait_until_none_alive(&fake).await;
}

#[tokio::test]
async fn an_endless_stream_is_cut_at_its_total_cap() {
    let fake = FakeE2b::start().await;
    let server = server(&fake, &[("SANDBOX_OUTPUT_FILE_LIMIT_BYTES", "65536")]).await;
    let id = server.create().await;
    let started = Instant::now();
    let result = server
        .call(
            "execute_code",
            json!({"session_id": id, "code": "while True: print('x' * 65535)", "timeout_seconds": 120}),
        )
        .await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(40), "took {took:?}");
    let s = structured(&result);
    assert_eq!(s["limit"]["kind"], "output", "{}", text(&result));
    let message = s["limit"]["message"].as_str().unwrap();
    assert!(message.contains("32 MiB"), "{message}");
    assert!(message.contains("interrupt"), "{message}");
    assert_eq!(server.run(&id, "6 * 7").await["value"], "42");
    assert!(fake.disconnects() >= 1, "the connection was dropped");
    server.stop().await;
    wait_until_none_alive(&fake).await;
}

#[tokio::test]
async fn huge_answers_from_the_api_and_envd_are_refused_without_being_held() {
    let fake = FakeE2b::start().await;
    let server = server(&fake, &[("SANDBOX_POOL_SIZE", "0")]).await;
    let id = server.create().await;
    let before = peak_memory(server.pid);

    fake.fail(fault(Method::POST, "/sandboxes", 201, Act::Huge(400 << 20)));
    let msg = server.err("create_sandbox", json!({})).await;
    assert!(msg.contains("creating a sandbox"), "{msg}");
    assert!(msg.contains("larger than 1 MiB"), "{msg}");

    fake.fail(fault(
        Method::POST,
        "/filesystem.Filesystem/ListDir",
        200,
        Act::Listing(2_000_000),
    ));
    let msg = server
        .err("list_files", json!({"session_id": id, "path": "big"}))
        .await;
    assert!(msg.contains("listing '/big'"), "{msg}");
    assert!(msg.contains("larger than 32 MiB"), "{msg}");

    fake.fail(fault(Method::GET, "/metrics", 200, Act::Huge(100 << 20)));
    let status = server
        .ok("get_sandbox_status", json!({"session_id": id}))
        .await;
    assert!(status.to_string().len() < 16 << 10);

    let grown = peak_memory(server.pid).saturating_sub(before);
    assert!(
        grown < 100 << 20,
        "the peak memory grew by {} MiB",
        grown >> 20
    );
    // A listing that fits is still cut at the entry cap, not refused.
    fake.fail(fault(
        Method::POST,
        "/filesystem.Filesystem/ListDir",
        200,
        Act::Listing(20_000),
    ));
    let listed = server
        .ok("list_files", json!({"session_id": id, "path": "big"}))
        .await;
    assert_eq!(listed["truncated"], true, "{}", listed["truncated"]);
    let entries = listed["files"].as_array().unwrap();
    assert!(!entries.is_empty() && entries.len() < 20_000);
    assert_eq!(entries[0]["name"], "f00000000");
    server.stop().await;
    wait_until_none_alive(&fake).await;
}

#[tokio::test]
async fn a_cancelled_or_closed_install_stops_pip() {
    use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest};
    use rmcp::service::PeerRequestOptions;

    let fake = FakeE2b::start().await;
    let server = server(&fake, &[]).await;
    let id = server.create().await;
    let params = CallToolRequestParams::new("install_package").with_arguments(
        json!({"session_id": id, "package_name": "slow-package"})
            .as_object()
            .unwrap()
            .clone(),
    );
    let handle = server
        .client
        .send_cancellable_request(
            ClientRequest::CallToolRequest(CallToolRequest::new(params)),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    handle.cancel(Some("test".into())).await.unwrap();
    // The next call waits its turn behind the install, which must stop.
    let next = tokio::time::timeout(Duration::from_secs(20), server.exec(&id, "6 * 7"))
        .await
        .expect("the cancelled install stopped");
    assert_eq!(structured(&next)["value"], "42", "{}", text(&next));
    assert!(fake.disconnects() >= 1, "the connection was dropped");
    let installed = server
        .run(
            &id,
            "import importlib.util\nimportlib.util.find_spec('slow_package') is None",
        )
        .await;
    assert_eq!(
        installed["value"], "True",
        "pip was stopped before installing"
    );

    // Closing the sandbox stops an install too.
    let started = Instant::now();
    let install = server.call(
        "install_package",
        json!({"session_id": id, "package_name": "slow-other"}),
    );
    let close = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        server.ok("close_sandbox", json!({"session_id": id})).await
    };
    let (install, closed) = tokio::join!(install, close);
    assert_eq!(closed["closed"], true);
    assert_eq!(install.is_error, Some(true));
    assert!(text(&install).contains("closed"), "{}", text(&install));
    assert!(started.elapsed() < Duration::from_secs(20));
    server.stop().await;
    wait_until_none_alive(&fake).await;
}

#[tokio::test]
async fn a_slow_or_silent_e2b_cannot_hold_a_sandbox() {
    let fake = FakeE2b::start().await;
    let server = server(&fake, &[("SANDBOX_E2B_REQUEST_TIMEOUT_SECONDS", "2")]).await;
    let a = server.create().await;
    let b = server.create().await;
    server
        .ok(
            "write_file",
            json!({"session_id": a, "file_path": "f", "content": "x"}),
        )
        .await;
    let bound = Duration::from_secs(6);

    // A silent file read fails in time, and another sandbox is not delayed.
    fake.fail(Fault {
        times: 10,
        ..fault(
            Method::GET,
            "/files",
            0,
            Act::Stall(Duration::from_secs(3600)),
        )
    });
    let started = Instant::now();
    let read = server.call("read_file", json!({"session_id": a, "file_path": "f"}));
    let other = async {
        let value = server.run(&b, "6 * 7").await;
        (value, started.elapsed())
    };
    let (read, (value, other_took)) = tokio::join!(read, other);
    assert!(started.elapsed() < bound, "took {:?}", started.elapsed());
    assert_eq!(read.is_error, Some(true));
    assert!(text(&read).contains("within 2 s"), "{}", text(&read));
    assert_eq!(value["value"], "42");
    assert!(other_took < Duration::from_secs(2), "{other_took:?}");

    // A body that trickles forever is cut at the same bound.
    fake.fail(Fault {
        times: 10,
        ..fault(
            Method::POST,
            "/filesystem.Filesystem/ListDir",
            200,
            Act::Trickle,
        )
    });
    let started = Instant::now();
    let msg = server.err("list_files", json!({"session_id": a})).await;
    assert!(started.elapsed() < bound, "took {:?}", started.elapsed());
    assert!(msg.contains("within 2 s"), "{msg}");

    // An error answer whose body never ends does not outlive the execution.
    fake.fail(fault(Method::POST, "/execute", 500, Act::Trickle));
    let started = Instant::now();
    let result = server
        .call(
            "execute_code",
            json!({"session_id": a, "code": "1", "timeout_seconds": 3}),
        )
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(result.is_error, Some(true));
    assert!(text(&result).contains("HTTP 500"), "{}", text(&result));

    // Retries of a silent kill stay within the bound.
    fake.fail(Fault {
        times: 10,
        ..fault(
            Method::DELETE,
            "/sandboxes/",
            0,
            Act::Stall(Duration::from_secs(3600)),
        )
    });
    let started = Instant::now();
    server.ok("close_sandbox", json!({"session_id": a})).await;
    assert!(started.elapsed() < bound, "took {:?}", started.elapsed());

    // A silent create fails in time.
    fake.fail(fault(
        Method::POST,
        "/sandboxes",
        0,
        Act::Stall(Duration::from_secs(3600)),
    ));
    let started = Instant::now();
    let msg = server.err("create_sandbox", json!({})).await;
    assert!(started.elapsed() < bound, "took {:?}", started.elapsed());
    assert!(msg.contains("within 2 s"), "{msg}");
    server.stop().await;
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
    let root = server.ok("list_files", json!({"session_id": id})).await;
    let mut top: Vec<&str> = root["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    top.sort_unstable();
    assert_eq!(top, ["d", "home"], "{root}");

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
