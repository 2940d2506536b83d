//! What only the E2B backend does, against the loopback fake: the wire
//! format, images, pip, errors (401, 404, 429, 5xx, the network down, an
//! expired sandbox), the key kept out of logs, lifetime refreshes, mixing
//! backends, and no sandbox left alive at shutdown.

use std::time::Duration;

use axum::http::Method;
use serde_json::json;

use crate::behaviour::wait_until_none_alive;
use crate::e2b_fake::{FakeE2b, Fault};
use crate::support::{Server, binary, structured, text};

mod as_e2b_behaves;
mod black_hole;
mod hostile;

/// A server pointed at `fake` (E2B as default backend), with extra settings.
async fn server(fake: &FakeE2b, extra: &[(&str, &str)]) -> Server {
    let mut env = fake.env();
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Server::start_with(&env).await
}

#[tokio::test]
async fn requests_follow_e2bs_wire_format() {
    let fake = FakeE2b::start().await;
    let server = server(&fake, &[]).await;
    let id = server.create_with(json!({"session_id": "wire"})).await;
    server.run(&id, "1").await;
    server
        .ok(
            "write_file",
            json!({"session_id": id, "file_path": "d/a.txt", "content": "x"}),
        )
        .await;
    server
        .ok(
            "read_file",
            json!({"session_id": id, "file_path": "d/a.txt"}),
        )
        .await;
    server
        .ok("list_files", json!({"session_id": id, "path": "d"}))
        .await;
    let requests = fake.requests();

    let create = requests
        .iter()
        .find(|r| r.method == "POST" && r.path == "/sandboxes")
        .unwrap();
    assert_eq!(create.header("x-api-key"), Some(fake.key()));
    let body = create.json();
    assert_eq!(body["templateID"], "code-interpreter-v1");
    assert_eq!(body["secure"], true);
    assert_eq!(body["timeout"], 300);
    assert_eq!(body["allow_internet_access"], true);
    assert_eq!(body["metadata"]["session"], "wire");
    let e2b_id = fake.live().pop().unwrap();
    assert_eq!(fake.metadata(&e2b_id)["session"], "wire");

    let sandbox: Vec<_> = requests.iter().filter(|r| r.service == "sandbox").collect();
    assert!(sandbox.len() >= 4);
    for r in &sandbox {
        assert_eq!(r.header("e2b-sandbox-id"), Some(e2b_id.as_str()), "{r:?}");
        assert!(
            r.header("x-access-token").is_some_and(|t| !t.is_empty()),
            "{r:?}"
        );
        assert!(
            r.header("x-api-key").is_none(),
            "the API key stays with the API"
        );
        let port = if r.path == "/execute" {
            "49999"
        } else {
            "49983"
        };
        assert_eq!(r.header("e2b-sandbox-port"), Some(port), "{r:?}");
    }
    for r in &requests {
        assert_ne!(r.header("user-agent"), Some("connect-python"));
    }
    let executes: Vec<_> = sandbox.iter().filter(|r| r.path == "/execute").collect();
    assert_eq!(
        executes[0].json()["code"],
        "__import__(\"os\").chdir(\"/\")",
        "the first execution makes / the working directory"
    );
    assert_eq!(executes[1].json()["code"], "1");
    assert_eq!(executes.len(), 2);
    let upload = sandbox
        .iter()
        .find(|r| r.method == "POST" && r.path == "/files")
        .unwrap();
    assert!(
        upload.query.contains("path=%2Fd%2Fa.txt") && upload.query.contains("username=root"),
        "{}",
        upload.query
    );
    assert!(
        upload
            .header("content-type")
            .unwrap()
            .starts_with("multipart/form-data")
    );
    let part = String::from_utf8_lossy(&upload.body);
    assert!(part.contains("name=\"file\""), "{part}");
    assert!(part.contains("filename=\"/d/a.txt\""), "{part}");
    let list = sandbox
        .iter()
        .find(|r| r.path == "/filesystem.Filesystem/ListDir")
        .unwrap();
    assert_eq!(list.header("content-type"), Some("application/json"));
    assert_eq!(list.json(), json!({"path": "/d", "depth": 1}));
    assert_eq!(list.header("authorization"), Some("Basic cm9vdDo="));
    server.stop().await;
    wait_until_none_alive(&fake).await;
}

#[tokio::test]
async fn images_come_back_as_image_content() {
    let fake = FakeE2b::start().await;
    let server = server(&fake, &[]).await;
    let id = server.create().await;
    let result = server.exec(&id, "show_png()\n'done'").await;
    assert_ne!(result.is_error, Some(true), "{}", text(&result));
    let s = structured(&result);
    assert_eq!(s["value"], "done", "E2B strips the quotes of a str repr");
    assert_eq!(s["images"][0]["mime_type"], "image/png");
    let image = result
        .content
        .iter()
        .find_map(|c| c.as_image())
        .expect("an image block");
    assert_eq!(image.mime_type, "image/png");
    assert!(image.data.starts_with("iVBORw0KGgo"));
    server.stop().await;
}

#[tokio::test]
async fn install_package_runs_pip_inside_the_sandbox() {
    let fake = FakeE2b::start().await;
    let server = server(&fake, &[]).await;
    let id = server.create().await;
    let report = server
        .ok(
            "install_package",
            json!({"session_id": id, "package_name": "cowsay"}),
        )
        .await;
    assert_eq!(
        report["installed"],
        json!([{"name": "cowsay", "version": "1.0.0", "source": "remote"}])
    );
    assert!(
        report["output"]
            .as_str()
            .unwrap()
            .contains("Successfully installed cowsay-1.0.0")
    );
    let r = server.run(&id, "import cowsay\ncowsay.__version__").await;
    assert_eq!(r["value"], "1.0.0", "importable right away");
    let present = server
        .ok(
            "install_package",
            json!({"session_id": id, "package_name": "six"}),
        )
        .await;
    assert_eq!(present["already_present"][0]["name"], "six");
    assert_eq!(present["installed"], json!([]));
    let failed = server
        .err(
            "install_package",
            json!({"session_id": id, "package_name": "no-such-package"}),
        )
        .await;
    assert!(failed.contains("No matching distribution"), "{failed}");
    let refused = server
        .err(
            "install_package",
            json!({"session_id": id, "package_name": "--index-url=http://evil.invalid/"}),
        )
        .await;
    assert!(
        refused.contains("options such as --index-url are not accepted"),
        "{refused}"
    );
    let cell = fake
        .requests()
        .into_iter()
        .find(|r| r.path == "/execute" && r.body.windows(6).any(|w| w == b"cowsay"))
        .unwrap()
        .json();
    assert!(cell["code"].as_str().unwrap().contains(r#"(["cowsay"])"#));
    assert_eq!(
        server.run(&id, "'_mcp_pip_install' in globals()").await["value"],
        "False",
        "the helper leaves nothing in the namespace"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_rejected_key_is_reported_and_never_shown() {
    let fake = FakeE2b::start().await;
    let wrong = "e2b_0000aaaa1111bbbb2222cccc3333dddd";
    let mut env = fake.env();
    env.retain(|(k, _)| k != "E2B_API_KEY");
    env.push(("E2B_API_KEY".into(), wrong.into()));
    env.push(("SANDBOX_LOG".into(), "debug".into()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let server = Server::start_with(&env).await;
    let msg = server.err("create_sandbox", json!({})).await;
    assert!(msg.contains("rejected the API key"), "{msg}");
    assert!(msg.contains("E2B_API_KEY"), "{msg}");
    assert!(!msg.contains("0000aaaa"), "{msg}");
    assert!(!server.logs().contains("0000aaaa"), "{}", server.logs());
    server.stop().await;

    // With the right key, nothing the server says or logs holds the key or
    // a sandbox's access token.
    let server = server_with_debug_logs(&fake).await;
    let id = server.create().await;
    let mut said = String::new();
    said.push_str(&text(&server.exec(&id, "print('x')").await));
    said.push_str(&text(&server.call("get_sandbox_status", json!({})).await));
    said.push_str(&text(
        &server.call("list_files", json!({"session_id": id})).await,
    ));
    server.ok("close_sandbox", json!({"session_id": id})).await;
    let logs = server.logs();
    let tokens: Vec<String> = fake
        .requests()
        .iter()
        .filter_map(|r| r.header("x-access-token").map(str::to_owned))
        .collect();
    assert!(!tokens.is_empty());
    for secret in tokens.iter().map(String::as_str).chain([fake.key()]) {
        assert!(!logs.contains(secret), "a secret is in the logs:\n{logs}");
        assert!(!said.contains(secret), "a secret is in a result:\n{said}");
    }
    assert!(logs.contains("created an E2B sandbox"), "{logs}");
    server.stop().await;
}

async fn server_with_debug_logs(fake: &FakeE2b) -> Server {
    server(fake, &[("SANDBOX_LOG", "debug")]).await
}

#[test]
fn e2b_as_default_without_a_key_is_refused_at_start() {
    let out = std::process::Command::new(binary())
        .env_clear()
        .env("INTERPRETER_TYPE", "e2b")
        .env("HOME", std::env::temp_dir())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("E2B_API_KEY"), "{stderr}");
}

/// Creates answered 429 with `Retry-After: seconds`, `times` times.
fn rate_limited_creates(seconds: u64, times: usize) -> Fault {
    Fault {
        method: Some(Method::POST),
        path_prefix: "/sandboxes".into(),
        status: 429,
        retry_after: Some(seconds),
        times,
        ..Fault::default()
    }
}

/// How many creates the fake has seen.
fn creates(fake: &FakeE2b) -> usize {
    fake.requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path == "/sandboxes")
        .count()
}

#[tokio::test]
async fn rate_limits_are_retried_honouring_retry_after() {
    let fake = FakeE2b::start().await;
    let server = server(&fake, &[]).await;
    fake.fail(rate_limited_creates(1, 2));
    let id = server.create().await;
    assert_eq!(creates(&fake), 3, "two 429s, then the sandbox");
    assert_eq!(server.run(&id, "1 + 1").await["value"], "2");

    fake.fail(rate_limited_creates(1, 100));
    let msg = server.err("create_sandbox", json!({})).await;
    assert!(msg.contains("rate-limiting"), "{msg}");
    assert!(msg.contains("retry after 1 s"), "{msg}");
    server.stop().await;
    wait_until_none_alive(&fake).await;
}

#[tokio::test]
async fn shutdown_stops_a_create_that_is_waiting_out_rate_limits() {
    let fake = FakeE2b::start().await;
    let server = server(&fake, &[]).await;
    fake.fail(rate_limited_creates(5, 1000));
    let peer = server.client.peer().clone();
    let create = tokio::spawn(async move {
        peer.call_tool(rmcp::model::CallToolRequestParams::new("create_sandbox"))
            .await
    });
    while creates(&fake) == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    std::process::Command::new("kill")
        .args(["-TERM", &server.pid.to_string()])
        .status()
        .unwrap();
    // The server exits without trying again: before, it waited out the
    // rate limit (and kept trying) for up to a minute, with a sandbox made
    // at the end nobody would use.
    let exited = std::path::PathBuf::from(format!("/proc/{}", server.pid));
    for _ in 0..1500 {
        let zombie =
            std::fs::read_to_string(exited.join("stat")).map_or(true, |stat| stat.contains(") Z "));
        if zombie {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(
        creates(&fake),
        1,
        "no create was tried after the shutdown began"
    );
    create.abort();
    wait_until_none_alive(&fake).await;
}

#[tokio::test]
async fn the_concurrency_cap_is_reported() {
    let fake = FakeE2b::start().await;
    fake.set_max_concurrent(1);
    let server = server(&fake, &[]).await;
    server.create().await;
    let msg = server.err("create_sandbox", json!({})).await;
    assert!(msg.contains("HTTP 429"), "{msg}");
    assert!(msg.contains("maximum number of concurrent"), "{msg}");
    assert!(msg.contains("close those you no longer need"), "{msg}");
    server.stop().await;
    wait_until_none_alive(&fake).await;
}

#[tokio::test]
async fn server_errors_are_retried_only_where_it_is_safe() {
    let fake = FakeE2b::start().await;
    let server = server(&fake, &[]).await;
    fake.fail(Fault {
        method: Some(Method::POST),
        path_prefix: "/sandboxes".into(),
        status: 503,
        retry_after: None,
        times: 1,
        ..Fault::default()
    });
    let msg = server.err("create_sandbox", json!({})).await;
    assert!(msg.contains("HTTP 503"), "{msg}");
    assert!(msg.contains("try again"), "{msg}");
    assert_eq!(fake.created(), 0, "a create is not repeated after a 5xx");

    let id = server.create().await;
    server
        .ok(
            "write_file",
            json!({"session_id": id, "file_path": "f", "content": "x"}),
        )
        .await;
    for (method, path) in [
        (Method::POST, "/filesystem.Filesystem/ListDir"),
        (Method::GET, "/files"),
    ] {
        fake.fail(Fault {
            method: Some(method),
            path_prefix: path.into(),
            status: 503,
            retry_after: None,
            times: 2,
            ..Fault::default()
        });
    }
    server.ok("list_files", json!({"session_id": id})).await;
    let read = server
        .ok("read_file", json!({"session_id": id, "file_path": "f"}))
        .await;
    assert_eq!(read["content"], "x");
    fake.fail(Fault {
        method: Some(Method::DELETE),
        path_prefix: "/sandboxes/".into(),
        status: 500,
        retry_after: None,
        times: 1,
        ..Fault::default()
    });
    server.ok("close_sandbox", json!({"session_id": id})).await;
    assert!(fake.live().is_empty(), "the kill was retried");
    server.stop().await;
}

#[tokio::test]
async fn an_expired_sandbox_is_reported_as_gone() {
    let fake = FakeE2b::start().await;
    let server = server(&fake, &[]).await;
    let id = server.create().await;
    server.run(&id, "1").await;
    let e2b_id = fake.live().pop().unwrap();
    fake.expire(&e2b_id);
    let msg = server
        .err("execute_code", json!({"session_id": id, "code": "1"}))
        .await;
    assert!(msg.contains("no longer exists on E2B"), "{msg}");
    assert!(msg.contains("create a new one"), "{msg}");
    let msg = server
        .err("read_file", json!({"session_id": id, "file_path": "x"}))
        .await;
    assert!(msg.contains("no longer exists on E2B"), "{msg}");
    let closed = server.ok("close_sandbox", json!({"session_id": id})).await;
    assert_eq!(closed["closed"], true);
    server.stop().await;
}

#[tokio::test]
async fn a_stream_cut_short_is_reported_with_what_came_before() {
    let fake = FakeE2b::start().await;
    let server = server(&fake, &[]).await;
    let id = server.create().await;
    let result = server.exec(&id, "print('partial')\n#fake:cut").await;
    assert_eq!(result.is_error, Some(true));
    let s = structured(&result);
    assert_eq!(s["error"]["name"], "ConnectionLost", "{}", text(&result));
    assert_eq!(s["stdout"]["text"], "partial\n");
    assert_eq!(
        server.run(&id, "1").await["value"],
        "1",
        "the sandbox goes on"
    );

    // A sandbox that expires mid-stream is reported as gone.
    let result = server.exec(&id, "print('last words')\n#fake:expire").await;
    let s = structured(&result);
    assert_eq!(s["error"]["name"], "SandboxGone", "{}", text(&result));
    assert!(
        text(&result).contains("no longer exists on E2B"),
        "{}",
        text(&result)
    );
    assert_eq!(s["stdout"]["text"], "last words\n");
    let msg = server
        .err("execute_code", json!({"session_id": id, "code": "1"}))
        .await;
    assert!(msg.contains("close it with close_sandbox"), "{msg}");
    server.stop().await;
    wait_until_none_alive(&fake).await;
}

#[tokio::test]
async fn an_unknown_template_and_an_unreachable_e2b_are_explained() {
    let fake = FakeE2b::start().await;
    let server = server(&fake, &[]).await;
    let msg = server
        .err("create_sandbox", json!({"runtime": "no-such-template"}))
        .await;
    assert!(
        msg.contains("E2B has no template 'no-such-template'"),
        "{msg}"
    );
    let msg = server
        .err("create_sandbox", json!({"runtime": "python-3.12"}))
        .await;
    assert!(
        msg.contains("is a runtime of local sandboxes") && msg.contains("backend \"wasm\""),
        "{msg}"
    );
    server.stop().await;

    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let server = Server::start_with(&[
        ("INTERPRETER_TYPE", "e2b"),
        ("E2B_API_KEY", "e2b_1234"),
        ("E2B_API_URL", &closed),
        ("E2B_SANDBOX_URL", &closed),
    ])
    .await;
    let msg = server.err("create_sandbox", json!({})).await;
    assert!(
        msg.contains(&format!("cannot reach E2B at {closed}")),
        "{msg}"
    );
    assert!(msg.contains("network"), "{msg}");
    server.stop().await;
}

#[tokio::test]
async fn the_lifetime_is_kept_extended_while_the_sandbox_is_open() {
    let fake = FakeE2b::start().await;
    let server = server(&fake, &[("SANDBOX_E2B_LIFETIME_SECONDS", "2")]).await;
    let id = server.create().await;
    let e2b_id = fake.live().pop().unwrap();
    let create = fake
        .requests()
        .into_iter()
        .find(|r| r.path == "/sandboxes")
        .unwrap();
    assert_eq!(create.json()["timeout"], 2);
    // Three lifetimes pass; the refreshes keep the sandbox alive.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(server.run(&id, "3 * 3").await["value"], "9");
    let refreshes: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.path == format!("/sandboxes/{e2b_id}/timeout"))
        .collect();
    assert!(refreshes.len() >= 3, "{} refreshes", refreshes.len());
    assert_eq!(refreshes[0].json(), json!({"timeout": 2}));
    assert_eq!(refreshes[0].header("x-api-key"), Some(fake.key()));
    server.ok("close_sandbox", json!({"session_id": id})).await;
    let after_close = fake.requests().len();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let later = fake.requests()[after_close..]
        .iter()
        .filter(|r| r.path.ends_with("/timeout"))
        .count();
    assert_eq!(later, 0, "refreshing stops at close");
    server.stop().await;
}

#[tokio::test]
async fn one_server_holds_wasm_and_e2b_sandboxes_side_by_side() {
    let fake = FakeE2b::start().await;
    let mut env = fake.env();
    env.retain(|(k, _)| k != "INTERPRETER_TYPE");
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let server = Server::start_with(&env).await;
    let local = server.create().await;
    let remote = server.create_with(json!({"backend": "e2b"})).await;
    server.run(&local, "where = 'here'").await;
    server.run(&remote, "where = 'there'").await;
    assert_eq!(server.run(&local, "where").await["value"], "'here'");
    assert_eq!(server.run(&remote, "where").await["value"], "there");
    let status = server.ok("get_sandbox_status", json!({})).await;
    assert_eq!(status["count"], 2);
    let backend_of = |id: &str| {
        status["sandboxes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["session_id"] == id)
            .unwrap()["backend"]
            .clone()
    };
    assert_eq!(backend_of(&local), "wasm");
    assert_eq!(backend_of(&remote), "e2b");
    let remote_status = status["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["session_id"] == remote.as_str())
        .unwrap();
    assert_eq!(remote_status["runtime"], "code-interpreter-v1");
    assert_eq!(remote_status["usage"]["memory_bytes"], 123456789);
    assert!(
        remote_status["limits"]["memory_bytes"].is_null()
            && remote_status["limits"]["disk_bytes"].is_null(),
        "a remote VM's memory and disk limits are E2B's, not shown as ours"
    );
    assert_eq!(fake.created(), 1, "only the e2b sandbox went to E2B");
    let r = server
        .ok(
            "create_run_close",
            json!({"code": "6 * 7", "backend": "e2b"}),
        )
        .await;
    assert_eq!(r["value"], "42");
    assert_eq!(fake.live().len(), 1);
    server.stop().await;
    wait_until_none_alive(&fake).await;
}

#[tokio::test]
async fn shutdown_kills_every_e2b_sandbox_this_server_created() {
    let fake = FakeE2b::start().await;
    let server = server(&fake, &[]).await;
    server.create().await;
    let busy = server.create().await;
    server.create_with(json!({"backend": "wasm"})).await;
    assert_eq!(fake.live().len(), 2);
    // One of them is busy running code when the client goes away.
    let running = server.call(
        "execute_code",
        json!({"session_id": busy, "code": "import time\ntime.sleep(60)", "timeout_seconds": 120}),
    );
    let _ = tokio::time::timeout(Duration::from_millis(500), running).await;
    server.stop().await;
    wait_until_none_alive(&fake).await;
    let kills = fake
        .requests()
        .iter()
        .filter(|r| r.method == "DELETE")
        .count();
    assert!(kills >= 2, "{kills} kills");
}

#[tokio::test]
async fn allow_hosts_is_refused_for_an_e2b_sandbox_which_has_its_own_network() {
    let fake = FakeE2b::start().await;
    let env = fake.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let server = Server::start_with(&env).await;
    let refused = server
        .err(
            "create_sandbox",
            json!({"backend": "e2b", "allow_hosts": ["https://data.example.org"]}),
        )
        .await;
    assert!(refused.contains("E2B's own network"), "{refused}");
    assert_eq!(fake.created(), 0, "no sandbox was created at E2B");
    server.stop().await;
}
