//! Upstream MCP servers' tools called from guest Python (`SANDBOX_UPSTREAMS`):
//! a small stdio MCP server (tests/fixtures/upstream/server.py) and this
//! binary itself over HTTP with a bearer token, reached with
//! `from host import tools`; values, errors, caps, restarts and time limits.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::response::IntoResponse;

use serde_json::{Value, json};

use crate::auth::mint_token;
use crate::network::{run, start};
use crate::support::http::HttpServer;
use crate::support::{Server, binary, shared_cache, structured};

/// The fixture's tools that are offered (not `secret`).
const OFFERED: &str =
    r#"["add", "env_names", "image", "fail", "sleep", "crash", "big", "pid", "list-things"]"#;

/// The fixture server's path.
fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upstream/server.py")
}

/// An upstreams file in `dir` naming the fixture server, run by `command`
/// (a TOML list), and `extra` entries.
fn write_upstreams(dir: &Path, command: &str, extra: &str) -> PathBuf {
    let text = format!(
        "[[upstream]]\nname = \"fixture\"\ncommand = {command}\n\
         env = {{ GIVEN = \"yes\" }}\ntools = {OFFERED}\nmax_result_bytes = 100000\n\n{extra}"
    );
    let path = dir.join("upstreams.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// An upstreams file in `dir` naming the fixture server, and `extra` entries.
fn upstreams_file(dir: &Path, extra: &str) -> PathBuf {
    write_upstreams(dir, &format!("[\"python3\", {:?}]", fixture()), extra)
}

/// What a cell prints for each of `calls` (Python expressions): the value's
/// repr, or the exception's class and message.
fn each(calls: &[&str]) -> String {
    let mut code = String::from("from host import tools\n");
    for call in calls {
        code.push_str(&format!(
            "try:\n    print(repr({call}))\nexcept Exception as e:\n    print(type(e).__name__, '|', e)\n"
        ));
    }
    code
}

fn stdout(result: &Value) -> Vec<String> {
    let text = result["stdout"]["text"].as_str().unwrap_or_default();
    text.lines().map(str::to_owned).collect()
}

#[tokio::test]
async fn upstream_tools_are_python_functions_with_their_signatures_values_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let file = upstreams_file(dir.path(), "");
    let server = start(&[
        ("SANDBOX_UPSTREAMS", file.to_str().unwrap()),
        ("UPSTREAM_TEST_SECRET", "hunter2"),
    ])
    .await;
    let id = server.create_with(json!({})).await;

    // help(tools) tells a model how to call them.
    let help = run(
        &server,
        &id,
        "from host import tools\nimport io, contextlib\nout = io.StringIO()\n\
         with contextlib.redirect_stdout(out):\n    help(tools)\nprint(out.getvalue())\n\
         print('secret offered:', hasattr(tools, 'fixture_secret'))",
    )
    .await;
    let help = help["stdout"]["text"].as_str().unwrap();
    assert!(help.contains("fixture_add(a: int, b: int)"), "{help}");
    assert!(help.contains("Add two integers."), "{help}");
    assert!(help.contains("a: the first"), "{help}");
    assert!(help.contains("fixture_list_things("), "{help}");
    assert!(help.contains("secret offered: False"), "{help}");

    // Values: structured content, one text, images as bytes.
    let values = run(
        &server,
        &id,
        &each(&[
            "tools.fixture_add(a=2, b=3)",
            "tools.fixture_list_things()",
            "tools.fixture_image()[1]['data']",
            "[n for n in tools.fixture_env_names()['names'] if n in ('GIVEN', 'PATH', 'UPSTREAM_TEST_SECRET', 'SANDBOX_ROOT')]",
        ]),
    )
    .await;
    assert_eq!(
        stdout(&values),
        [
            "{'sum': 5}",
            "'things'",
            "b'\\x89PNG\\r'",
            "['GIVEN', 'PATH']"
        ],
        "{values}"
    );

    // Errors: an error result, a result over its cap, arguments that do not
    // fit, and a hand-made frame naming a tool that is not offered.
    let errors = run(
        &server,
        &id,
        &each(&[
            "tools.fixture_fail(message='no such city')",
            "tools.fixture_big(n=200000)",
            "tools.fixture_add(a=1)",
            "__import__('json').loads(__import__('_host').call(b'{\"v\": 1, \"id\": 9, \"op\": \"call\", \"tool\": \"fixture_secret\", \"args\": {}}'))['error']['kind']",
        ]),
    )
    .await;
    let lines = stdout(&errors);
    assert_eq!(lines[0], "ToolError | fixture: no such city", "{errors}");
    assert!(
        lines[1].starts_with("ToolTooLarge |") && lines[1].contains("max_result_bytes"),
        "{errors}"
    );
    assert!(lines[2].starts_with("ToolArgumentError |"), "{errors}");
    assert_eq!(lines[3], "'unknown_tool'", "{errors}");

    // The calls that reached the host are in the execution's usage.
    let calls: Vec<(String, Value)> = errors["usage"]["door"]["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["tool"].as_str().unwrap().to_owned(), c["failed"].clone()))
        .collect();
    assert_eq!(
        calls,
        [
            ("fixture_fail".into(), json!("tool_error")),
            ("fixture_big".into(), json!("too_large")),
            ("fixture_secret".into(), json!("unknown_tool")),
        ],
        "{errors}"
    );
    server.stop().await;
}

/// An upstream file whose server runs under `sh`, which first starts a
/// child that outlives the server and keeps its stdout open, its pid written
/// to `pid_file`.
fn wrapped_upstreams_file(dir: &Path, pid_file: &Path) -> PathBuf {
    let script = format!(
        "sleep 300 & echo $! >> {}; exec python3 {}",
        pid_file.display(),
        fixture().display()
    );
    write_upstreams(dir, &format!("[\"sh\", \"-c\", {script:?}]"), "")
}

/// Whether process `pid` is gone (or a zombie nobody has reaped yet).
fn is_gone(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

#[tokio::test]
async fn an_upstream_that_dies_is_started_again_and_one_that_hangs_is_stopped_by_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("sleepers");
    let file = wrapped_upstreams_file(dir.path(), &pids);
    let server = start(&[("SANDBOX_UPSTREAMS", file.to_str().unwrap())]).await;
    let id = server.create_with(json!({})).await;

    // It dies in a call, though a child of it holds its stdout: the call
    // fails at once, the next one gets a new process, and the old one's
    // whole process group is gone.
    let restarted = run(
        &server,
        &id,
        &each(&[
            "tools.fixture_pid()['pid']",
            "tools.fixture_crash()",
            "tools.fixture_pid()['pid']",
        ]),
    )
    .await;
    let lines = stdout(&restarted);
    assert!(
        lines[1].starts_with("ToolError |") && lines[1].contains("stopped during the call"),
        "{restarted}"
    );
    assert_ne!(lines[0], lines[2], "a new process answers: {restarted}");
    assert!(lines[2].parse::<u32>().is_ok(), "{restarted}");
    let call_ms = restarted["usage"]["door"]["tool_calls"][1]["ms"]
        .as_f64()
        .unwrap();
    assert!(call_ms < 20_000.0, "the dying call waited {call_ms} ms");
    let sleepers = std::fs::read_to_string(&pids).unwrap();
    let first = sleepers.lines().next().unwrap().to_owned();
    assert!(
        is_gone(&first),
        "the first server's child {first} was left running"
    );

    // A guest blocked in a call that never answers is stopped by its own
    // timeout; the sandbox and the upstream go on serving.
    let hung = server
        .call(
            "execute_code",
            json!({"session_id": id, "code": "from host import tools\ntools.fixture_sleep(seconds=600)", "timeout_seconds": 3}),
        )
        .await;
    let hung = structured(&hung);
    assert_eq!(hung["limit"]["kind"], "timeout", "{hung}");
    assert_eq!(
        hung["usage"]["door"]["tool_calls"][0]["failed"], "cut",
        "{hung}"
    );
    // The upstream was told the call is abandoned (its stderr is in the log).
    let mut told = false;
    for _ in 0..50 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        told = server
            .logs()
            .contains("fixture saw notifications/cancelled");
        if told {
            break;
        }
    }
    assert!(told, "{}", server.logs());
    let after = run(
        &server,
        &id,
        &each(&["tools.fixture_add(a=20, b=22)['sum']"]),
    )
    .await;
    assert_eq!(stdout(&after), ["42"], "{after}");
    server.stop().await;
    let last = std::fs::read_to_string(&pids).unwrap();
    let last = last.lines().last().unwrap().to_owned();
    let stopped = (0..50).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        is_gone(&last)
    });
    assert!(
        stopped,
        "the last server's child {last} outlived the MCP server"
    );
}

#[tokio::test]
async fn a_guest_that_keeps_crashing_an_upstream_gets_a_few_starts_a_minute() {
    let dir = tempfile::tempdir().unwrap();
    let file = upstreams_file(dir.path(), "");
    let server = start(&[("SANDBOX_UPSTREAMS", file.to_str().unwrap())]).await;
    let id = server.create_with(json!({})).await;
    let crashes = ["tools.fixture_crash()"; 8];
    let storm = run(&server, &id, &each(&crashes)).await;
    let lines = stdout(&storm);
    assert!(
        lines[..4]
            .iter()
            .all(|l| l.contains("stopped during the call")),
        "{storm}"
    );
    assert!(
        lines[7].contains("started 5 times in the last 60 s"),
        "{storm}"
    );
    server.stop().await;
}

#[tokio::test]
async fn door_caps_count_upstream_calls_and_a_broken_upstream_leaves_the_rest_working() {
    let dir = tempfile::tempdir().unwrap();
    let broken = "[[upstream]]\nname = \"broken\"\ncommand = [\"/nonexistent/mcp-server\"]\ntools = [\"*\"]\n";
    let file = upstreams_file(dir.path(), broken);
    let server = start(&[
        ("SANDBOX_UPSTREAMS", file.to_str().unwrap()),
        ("SANDBOX_DOOR_MAX_CALLS", "4"),
    ])
    .await;
    let id = server.create_with(json!({})).await;
    // The list is frame 1; three calls fit, the fourth is over the cap.
    let capped = run(
        &server,
        &id,
        &each(&[
            "sorted(n for n in dir(tools) if not n.startswith('_'))[:2]",
            "tools.fixture_add(a=1, b=1)['sum']",
            "tools.fixture_add(a=1, b=2)['sum']",
            "tools.fixture_add(a=1, b=3)['sum']",
            "tools.fixture_add(a=1, b=4)['sum']",
        ]),
    )
    .await;
    let lines = stdout(&capped);
    assert_eq!(
        lines[0], "['fixture_add', 'fixture_big']",
        "no broken_ tools: {capped}"
    );
    assert_eq!(lines[1..4], ["2", "3", "4"], "{capped}");
    assert!(
        lines[4].starts_with("ToolBudgetExceeded |") && lines[4].contains("SANDBOX_DOOR_MAX_CALLS"),
        "{capped}"
    );
    assert!(server.logs().contains("cannot run"), "{}", server.logs());
    server.stop().await;
}

#[tokio::test]
async fn this_server_over_http_with_a_bearer_token_is_an_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let (entry, token) = mint_token("analyst", &[]);
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(&tokens, entry).unwrap();
    let inner = HttpServer::start(&[("SANDBOX_AUTH_TOKENS_FILE", tokens.to_str().unwrap())]).await;
    let upstream = format!(
        "[[upstream]]\nname = \"inner\"\nurl = \"{}\"\nbearer_token_env = \"INNER_TOKEN\"\ntools = [\"create_sandbox\", \"execute_code\"]\n",
        inner.url()
    );
    let file = dir.path().join("upstreams.toml");
    std::fs::write(&file, upstream).unwrap();
    let server = start(&[
        ("SANDBOX_UPSTREAMS", file.to_str().unwrap()),
        ("INNER_TOKEN", &token),
    ])
    .await;
    let id = server.create_with(json!({})).await;
    let ran = run(
        &server,
        &id,
        "from host import tools\n\
         tools.inner_create_sandbox(session_id='inside')\n\
         r = tools.inner_execute_code(code='print(6 * 7)', session_id='inside')\n\
         r['stdout']['text']",
    )
    .await;
    assert_eq!(ran["value"], "'42\\n'", "{ran}");
    assert!(!server.logs().contains(&token), "the token was logged");
    server.stop().await;
}

#[tokio::test]
async fn a_runtime_without_a_door_says_so_and_a_bad_upstreams_file_stops_the_server() {
    let server = Server::start().await;
    let id = server.create().await;
    let refused = structured(&server.exec(&id, "from host import tools").await);
    let message = refused["error"]["value"].as_str().unwrap_or_default();
    assert!(
        message.contains("no door to the host") && message.contains("scientific"),
        "{refused}"
    );
    server.stop().await;

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("upstreams.toml");
    std::fs::write(
        &file,
        "[[upstream]]\nname = \"x\"\ncommand = [\"x\"]\ntools = []\n",
    )
    .unwrap();
    let out = std::process::Command::new(binary())
        .args(["exec", "1"])
        .env("SANDBOX_CACHE_DIR", shared_cache())
        .env("SANDBOX_UPSTREAMS", &file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("SANDBOX_UPSTREAMS") && stderr.contains("tools is empty"),
        "{stderr}"
    );
}

/// A Streamable HTTP MCP server on loopback whose one tool, `once`, counts
/// its calls and answers each with a 500; its URL and the count.
async fn failing_http_upstream() -> (String, Arc<AtomicUsize>) {
    use axum::http::StatusCode;
    use axum::routing::post;
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let app = axum::Router::new().route(
        "/mcp",
        post(move |body: axum::Json<Value>| {
            let counted = counted.clone();
            async move {
                let id = body["id"].clone();
                let reply = |result: Value| {
                    let body = json!({"jsonrpc": "2.0", "id": id, "result": result});
                    (StatusCode::OK, axum::Json(body)).into_response()
                };
                match body["method"].as_str().unwrap_or_default() {
                    "initialize" => reply(json!({
                        "protocolVersion": "2025-06-18",
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "failing", "version": "1"}
                    })),
                    "tools/list" => reply(json!({"tools": [
                        {"name": "once", "inputSchema": {"type": "object", "properties": {}}}
                    ]})),
                    "tools/call" => {
                        counted.fetch_add(1, Ordering::SeqCst);
                        (StatusCode::INTERNAL_SERVER_ERROR, "boom").into_response()
                    }
                    _ if id.is_null() => StatusCode::ACCEPTED.into_response(),
                    _ => reply(json!({})),
                }
            }
        })
        .get(|| async { StatusCode::METHOD_NOT_ALLOWED }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/mcp"), calls)
}

#[tokio::test]
async fn a_failed_call_over_http_is_never_sent_twice() {
    let (url, calls) = failing_http_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("upstreams.toml");
    let entry = format!("[[upstream]]\nname = \"remote\"\nurl = \"{url}\"\ntools = [\"once\"]\n");
    std::fs::write(&file, entry).unwrap();
    let server = start(&[("SANDBOX_UPSTREAMS", file.to_str().unwrap())]).await;
    let id = server.create_with(json!({})).await;
    let failed = run(
        &server,
        &id,
        &each(&["tools.remote_once()", "tools.remote_once()"]),
    )
    .await;
    let lines = stdout(&failed);
    assert!(
        lines
            .iter()
            .all(|l| l == "ToolError | remote: once: the request to the server failed: HTTP 500"),
        "{failed}"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "each call reached it once: {failed}"
    );
    server.stop().await;
}

/// A process's resident memory (`VmRSS`) or its peak (`VmHWM`), in bytes.
fn resident(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb << 10
}

#[tokio::test]
async fn an_upstreams_endless_stderr_line_costs_the_server_no_memory() {
    let dir = tempfile::tempdir().unwrap();
    // 200 MiB on stderr with no newline, then the fixture server.
    let script = format!(
        "head -c 209715200 /dev/zero | tr '\\0' e >&2; echo >&2; echo after the flood >&2; exec python3 {}",
        fixture().display()
    );
    let file = write_upstreams(dir.path(), &format!("[\"sh\", \"-c\", {script:?}]"), "");
    let server = start(&[("SANDBOX_UPSTREAMS", file.to_str().unwrap())]).await;
    let id = server.create_with(json!({})).await;
    run(&server, &id, "1").await;
    let before = resident(server.pid, "VmRSS:");
    // Resets the peak, so what follows is measured from here.
    std::fs::write(format!("/proc/{}/clear_refs", server.pid), "5").unwrap();
    let added = run(
        &server,
        &id,
        &each(&["tools.fixture_add(a=20, b=22)['sum']"]),
    )
    .await;
    assert_eq!(stdout(&added), ["42"], "{added}");
    let peak = resident(server.pid, "VmHWM:");
    let grew = peak.saturating_sub(before);
    eprintln!(
        "server resident memory: {} MiB before, peak {} MiB while a 200 MiB stderr line was read",
        before >> 20,
        peak >> 20
    );
    assert!(
        grew < 48 << 20,
        "the server grew by {} MiB reading the upstream's stderr",
        grew >> 20
    );
    let logs = server.logs();
    let cut = logs
        .lines()
        .find(|l| l.contains("eeee"))
        .expect("the line's head is logged");
    assert!(cut.len() < 2000, "logged cut: {} bytes", cut.len());
    assert!(cut.contains("left out"), "{cut}");
    assert!(logs.contains("after the flood"), "the next line is logged");
    server.stop().await;
}
