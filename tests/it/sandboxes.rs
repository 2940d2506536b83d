//! Sandbox lifecycle: ids, status, isolation, parallelism, ordering, cleanup.

use std::time::Duration;

use serde_json::json;

use crate::support::{Server, structured};

#[tokio::test]
async fn ids_are_generated_or_chosen_and_existing_ones_are_reported() {
    let server = Server::start().await;
    let generated = server.create().await;
    assert!(generated.starts_with("sb-"));
    let created = server
        .ok("create_sandbox", json!({"session_id": "my-session"}))
        .await;
    assert_eq!(created["created"], true);
    assert_eq!(created["backend"], "wasm");
    assert_eq!(created["runtime"], "python-3.12");
    server.run("my-session", "marker = 'original'").await;
    let again = server
        .ok("create_sandbox", json!({"session_id": "my-session"}))
        .await;
    assert_eq!(again["created"], false);
    assert_eq!(
        server.run("my-session", "marker").await["value"],
        "'original'"
    );
    for bad in ["../x", "a/b", "", &"x".repeat(65)] {
        let msg = server
            .err("create_sandbox", json!({"session_id": bad}))
            .await;
        assert!(msg.contains("invalid sandbox id"), "{msg}");
    }
    let msg = server
        .err(
            "execute_code",
            json!({"session_id": "../../etc", "code": "1"}),
        )
        .await;
    assert!(msg.contains("invalid sandbox id"), "{msg}");
    let msg = server
        .err("create_sandbox", json!({"backend": "docker"}))
        .await;
    assert!(msg.contains("unknown backend"), "{msg}");
    server.stop().await;
}

#[tokio::test]
async fn status_reports_each_sandbox_and_close_removes_it() {
    let server = Server::start_with(&[("SANDBOX_POOL_SIZE", "0")]).await;
    let a = server.create().await;
    let b = server
        .create_with(json!({"timeout_seconds": 5, "memory_mb": 128}))
        .await;
    server.run(&a, "open('f.txt', 'w').write('x' * 100)").await;
    let all = server.ok("get_sandbox_status", json!({})).await;
    assert_eq!(all["count"], 2);
    let one = server
        .ok("get_sandbox_status", json!({"session_id": a}))
        .await;
    let s = &one["sandboxes"][0];
    assert_eq!(s["session_id"], a.as_str());
    assert_eq!(s["executions"], 1);
    assert_eq!(s["backend"], "wasm");
    assert!(s["usage"]["disk_bytes"].as_u64().unwrap() >= 100);
    assert!(s["usage"]["memory_bytes"].as_u64().unwrap() > 1 << 20);
    assert!(s["expires_at"].is_string());
    assert!(s["created_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(s["limits"]["timeout_seconds"], 30.0);
    let sb = server
        .ok("get_sandbox_status", json!({"session_id": b}))
        .await;
    assert_eq!(sb["count"], 1, "asked about one sandbox: {sb}");
    assert_eq!(sb["sandbox_ids"], json!([b]), "no other sandbox's id: {sb}");
    assert_eq!(sb["sandboxes"][0]["limits"]["timeout_seconds"], 5.0);
    assert_eq!(sb["sandboxes"][0]["limits"]["memory_bytes"], 128u64 << 20);

    assert_eq!(server.sandbox_dirs().len(), 2);
    let closed = server.ok("close_sandbox", json!({"session_id": a})).await;
    assert_eq!(closed["closed"], true);
    assert_eq!(server.sandbox_dirs().len(), 1, "its directory is gone");
    let again = server.ok("close_sandbox", json!({"session_id": a})).await;
    assert_eq!(
        again["closed"], false,
        "closing an unknown id is not an error"
    );
    let msg = server
        .err("execute_code", json!({"session_id": a, "code": "1"}))
        .await;
    assert!(msg.contains("no sandbox"), "{msg}");
    server.stop().await;
}

#[tokio::test]
async fn sandboxes_are_isolated_from_each_other() {
    let server = Server::start().await;
    let a = server.create().await;
    let b = server.create().await;
    server
        .run(&a, "secret = 'a'\nopen('/only-a.txt', 'w').write('a')")
        .await;
    let r = server.exec(&b, "secret").await;
    assert_eq!(structured(&r)["error"]["name"], "NameError");
    let r = server.run(&b, "import os\nos.listdir('/')").await;
    assert_eq!(r["value"], "['tmp']");
    let r = server.exec(&b, "open('../only-a.txt').read()").await;
    let name = structured(&r)["error"]["name"].clone();
    assert!(
        name == "PermissionError" || name == "FileNotFoundError",
        "{name}"
    );
    server
        .err(
            "read_file",
            json!({"session_id": b, "file_path": "only-a.txt"}),
        )
        .await;
    server.stop().await;
}

#[tokio::test]
async fn a_runaway_sandbox_does_not_hold_up_another() {
    let server = Server::start().await;
    let slow = server.create().await;
    let fast = server.create().await;
    let slow_call = async {
        let r = server
            .call(
                "execute_code",
                json!({"session_id": slow, "code": "n = 0\nwhile n < 10**9: n += 1", "timeout_seconds": 8}),
            )
            .await;
        (r, std::time::Instant::now())
    };
    let fast_call = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let r = server.run(&fast, "sum(range(10))").await;
        (r, std::time::Instant::now())
    };
    let ((slow_result, slow_done), (fast_result, fast_done)) = tokio::join!(slow_call, fast_call);
    assert_eq!(fast_result["value"], "45");
    assert!(
        fast_done < slow_done,
        "the quick call finished while the busy one ran"
    );
    assert_eq!(structured(&slow_result)["limit"]["kind"], "timeout");
    server.stop().await;
}

#[tokio::test]
async fn calls_to_one_sandbox_run_one_at_a_time_in_arrival_order() {
    let server = Server::start().await;
    let id = server.create().await;
    let write = server.call(
        "execute_code",
        json!({"session_id": id, "code": "import time\ntime.sleep(0.5)\nopen('/late.txt', 'w').write('written')"}),
    );
    let read = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        server
            .call(
                "read_file",
                json!({"session_id": id, "file_path": "/late.txt"}),
            )
            .await
    };
    let (_, read) = tokio::join!(write, read);
    assert_eq!(
        structured(&read)["content"],
        "written",
        "the read waited for the execution"
    );
    server.stop().await;
}

#[tokio::test]
async fn clean_shutdown_removes_everything_and_a_killed_servers_leftovers_go_at_next_start() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    // Saving sandboxes for the next start is off here (see snapshots.rs).
    let no_pool = [
        ("SANDBOX_POOL_SIZE", "0"),
        ("SANDBOX_KEEP_SAVED_SECONDS", "0"),
    ];
    let first = Server::start_in(tempfile::tempdir().unwrap(), root.clone(), &no_pool).await;
    first.create().await;
    assert_eq!(first.sandbox_dirs().len(), 1);
    first.stop().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        std::fs::read_dir(&root).unwrap().count(),
        0,
        "stdin EOF removes the sandboxes"
    );

    // A server killed outright leaves its directory behind.
    let mut child = std::process::Command::new(crate::support::binary())
        .env("SANDBOX_ROOT", &root)
        .env("SANDBOX_RUNTIME", "python-3.12")
        .env("SANDBOX_CACHE_DIR", crate::support::shared_cache())
        .env("SANDBOX_LOG", "warn")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Killed once its directory is claimed (lock and lease written): a
    // directory killed halfway through being made is not yet a server's,
    // and waits out a lease's time before it is taken as abandoned.
    for _ in 0..200 {
        let claimed = std::fs::read_dir(&root)
            .unwrap()
            .flatten()
            .any(|entry| entry.path().join("lease").exists());
        if claimed {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        std::fs::read_dir(&root).unwrap().count(),
        1,
        "the killed server left its directory"
    );

    let second = Server::start_in(tempfile::tempdir().unwrap(), root.clone(), &no_pool).await;
    second.create().await;
    assert_eq!(
        std::fs::read_dir(&root).unwrap().count(),
        1,
        "only the live server's directory remains"
    );
    assert!(
        second.logs().contains("left by a server"),
        "{}",
        second.logs()
    );
    second.stop().await;
}

/// Whether the sandbox `id`'s interpreter came from the warm pool, as its
/// status says.
async fn from_warm_pool(server: &Server, id: &str) -> bool {
    let status = server
        .ok("get_sandbox_status", json!({"session_id": id}))
        .await;
    let usage = &status["sandboxes"][0]["usage"];
    usage["from_warm_pool"]
        .as_bool()
        .unwrap_or_else(|| panic!("a local sandbox's status says where it came from: {status}"))
}

/// Creates a sandbox with `args` from the warm pool, waiting for the pool to
/// fill (sandboxes created while it is empty start cold and are closed).
async fn create_from_pool(server: &Server, args: serde_json::Value) -> String {
    for _ in 0..240 {
        let id = server.create_with(args.clone()).await;
        if from_warm_pool(server, &id).await {
            return id;
        }
        server.ok("close_sandbox", json!({"session_id": id})).await;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("the warm pool never served a sandbox: {}", server.logs());
}

#[tokio::test]
async fn sandboxes_from_the_warm_pool_get_their_own_limits_and_empty_directories() {
    let server = Server::start_with(&[("SANDBOX_POOL_SIZE", "3")]).await;
    let first = create_from_pool(&server, json!({})).await;
    server
        .run(&first, "open('/mine.txt', 'w').write('x')\nleft_behind = 1")
        .await;
    let small = create_from_pool(&server, json!({"memory_mb": 48})).await;
    let r = server
        .exec(&small, "x = bytearray(100 * 1024 * 1024)")
        .await;
    assert_eq!(
        structured(&r)["limit"]["kind"],
        "memory",
        "the sandbox's own cap applies"
    );
    let r = server
        .run(
            &small,
            "import os\n(os.listdir('/'), 'left_behind' in globals())",
        )
        .await;
    assert_eq!(
        r["value"], "(['tmp'], False)",
        "a pooled sandbox starts empty"
    );
    let big = create_from_pool(&server, json!({"memory_mb": 256})).await;
    let r = server.run(&big, "len(bytearray(100 * 1024 * 1024))").await;
    assert_eq!(r["value"], "104857600");
    // Without a pool, every sandbox starts its own interpreter.
    let cold = Server::start_with(&[("SANDBOX_POOL_SIZE", "0")]).await;
    let id = cold.create().await;
    assert!(!from_warm_pool(&cold, &id).await);
    cold.stop().await;
    server.stop().await;
}

#[tokio::test]
async fn the_number_of_sandboxes_is_capped_and_idle_ones_expire() {
    // Without saving, an idle sandbox is gone (snapshots.rs: with it, saved).
    let server = Server::start_with(&[
        ("SANDBOX_MAX_SANDBOXES", "3"),
        ("SANDBOX_IDLE_TIMEOUT_SECONDS", "2"),
        ("SANDBOX_KEEP_SAVED_SECONDS", "0"),
    ])
    .await;
    let ids = [
        server.create().await,
        server.create().await,
        server.create().await,
    ];
    let msg = server.err("create_sandbox", json!({})).await;
    assert!(msg.contains("maximum of 3 sandboxes"), "{msg}");
    let status = server
        .ok("get_sandbox_status", json!({"session_id": ids[0]}))
        .await;
    assert!(status["sandboxes"][0]["expires_at"].is_string());
    server
        .ok("close_sandbox", json!({"session_id": ids[0]}))
        .await;
    let fourth = server.create().await;

    // Keep one sandbox busy past the idle timeout: it stays; the others go.
    let busy = server.call(
        "execute_code",
        json!({"session_id": fourth, "code": "import time\ntime.sleep(4)\n'done'"}),
    );
    let (busy, _) = tokio::join!(busy, tokio::time::sleep(Duration::from_secs(4)));
    assert_eq!(structured(&busy)["value"], "'done'");
    let status = server.ok("get_sandbox_status", json!({})).await;
    assert_eq!(
        status["sandbox_ids"],
        json!([fourth]),
        "idle sandboxes were closed"
    );
    let msg = server
        .err("execute_code", json!({"session_id": ids[1], "code": "1"}))
        .await;
    assert!(msg.contains("no sandbox"), "{msg}");
    server.stop().await;
}

#[tokio::test]
async fn a_server_killed_in_the_middle_of_an_execution_leaves_nothing_that_breaks_the_next() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let first = Server::start_in(tempfile::tempdir().unwrap(), root.clone(), &[]).await;
    let id = first.create().await;
    first
        .run(&id, "open('/state.txt', 'w').write('x' * 1000)")
        .await;
    let pid = first.pid;
    // The call never gets an answer: the server dies under it.
    let running = first.client.call_tool(
        rmcp::model::CallToolRequestParams::new("execute_code").with_arguments(
            json!({"session_id": id, "code": "f = open('/half.bin', 'wb')\nwhile True: f.write(b'y' * 4096)"})
                .as_object()
                .unwrap()
                .clone(),
        ),
    );
    let kill = async {
        tokio::time::sleep(Duration::from_millis(800)).await;
        std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap();
    };
    let (_, ()) = tokio::join!(tokio::time::timeout(Duration::from_secs(30), running), kill);
    assert!(
        std::fs::read_dir(&root).unwrap().count() >= 1,
        "the killed server left its directory"
    );

    let second = Server::start_in(tempfile::tempdir().unwrap(), root.clone(), &[]).await;
    let fresh = second.create().await;
    assert_eq!(
        second.run(&fresh, "import os\nos.listdir('/')").await["value"],
        "['tmp']"
    );
    let mut left: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name != "saved")
        .collect();
    left.retain(|name| {
        !second
            .sandbox_dirs()
            .iter()
            .any(|d| d.starts_with(root.join(name)))
    });
    assert!(left.is_empty(), "the leftovers are gone: {left:?}");
    // The killed server's sandbox was taken in: its files come back when named.
    assert_eq!(
        second.run(&id, "len(open('/state.txt').read())").await["value"],
        "1000"
    );
    second.stop().await;
    drop(first);
}

/// A server started as a plain child process that this test answers for
/// (so nothing reaps it when it dies), spoken to line by line.
struct PlainChild {
    child: std::process::Child,
    input: std::process::ChildStdin,
    output: std::io::BufReader<std::process::ChildStdout>,
    next_id: u64,
}

impl PlainChild {
    fn start(root: &std::path::Path) -> Self {
        use std::process::{Command, Stdio};
        let mut child = Command::new(crate::support::binary())
            .env("SANDBOX_ROOT", root)
            .env("SANDBOX_RUNTIME", "python-3.12")
            .env("SANDBOX_CACHE_DIR", crate::support::shared_cache())
            .env("SANDBOX_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let input = child.stdin.take().unwrap();
        let output = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut plain = Self {
            child,
            input,
            output,
            next_id: 0,
        };
        plain.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
        );
        plain.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        plain
    }

    fn send(&mut self, message: serde_json::Value) {
        use std::io::Write;
        writeln!(self.input, "{message}").unwrap();
    }

    fn request(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        use std::io::BufRead;
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let mut line = String::new();
        loop {
            line.clear();
            assert!(
                self.output.read_line(&mut line).unwrap() > 0,
                "the server closed"
            );
            let message: serde_json::Value = serde_json::from_str(&line).unwrap();
            if message["id"] == id {
                return message["result"]["structuredContent"].clone();
            }
        }
    }

    fn tool(&mut self, name: &str, arguments: serde_json::Value) -> serde_json::Value {
        self.request("tools/call", json!({"name": name, "arguments": arguments}))
    }
}

#[tokio::test]
async fn a_killed_server_not_yet_waited_for_hands_its_sandboxes_to_the_next_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let mut first = PlainChild::start(&root);
    let created = first.tool("create_sandbox", json!({}));
    let id = created["session_id"].as_str().unwrap().to_owned();
    let wrote = first.tool(
        "execute_code",
        json!({"session_id": id, "code": "open('/state.txt', 'w').write('kept')"}),
    );
    assert!(wrote["error"].is_null(), "{wrote}");
    first.child.kill().unwrap();
    // Not waited for (as a client that starts the next server at once
    // leaves it): on Linux a zombie, which holds no lock and renews nothing.
    let stat = format!("/proc/{}/stat", first.child.id());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(&stat).is_ok_and(|s| !s.contains(") Z "))
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let second = Server::start_in(tempfile::tempdir().unwrap(), root.clone(), &[]).await;
    assert_eq!(
        second.run(&id, "open('/state.txt').read()").await["value"],
        "'kept'"
    );
    second.stop().await;
    first.child.wait().unwrap();
}

#[tokio::test]
async fn closing_a_sandbox_during_an_execution_says_so_and_starts_nothing_new() {
    let server = std::sync::Arc::new(Server::start_with(&[("SANDBOX_POOL_SIZE", "0")]).await);
    let id = server.create().await;
    let running = {
        let (server, id) = (server.clone(), id.clone());
        tokio::spawn(async move { server.exec(&id, "while True: pass").await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    server.ok("close_sandbox", json!({"session_id": id})).await;
    let result = running.await.unwrap();
    let s = structured(&result);
    let said = s["error"]["value"].as_str().unwrap_or_default();
    assert!(said.contains("sandbox was closed"), "{s}");
    assert!(!said.contains("cancelled by the client"), "{s}");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(
        server.sandbox_dirs().is_empty(),
        "no interpreter restarted in a closed sandbox: {:?}",
        server.sandbox_dirs()
    );
    std::sync::Arc::try_unwrap(server)
        .ok()
        .expect("the only owner")
        .stop()
        .await;
}

/// A guest waiting in select() or poll() (a relative wait, which wasmtime
/// would sleep through on the guest's thread) is stopped by its time limit
/// and holds up no other sandbox, even with every guest thread taken.
#[tokio::test]
async fn guests_waiting_in_select_stall_no_one_and_stop_at_their_time_limit() {
    let server = std::sync::Arc::new(Server::start_with(&[("SANDBOX_THREADS", "2")]).await);
    let mut waiting = Vec::new();
    for code in [
        "import select\nselect.select([], [], [], 120)",
        "import select\nselect.poll().poll(120_000)",
    ] {
        let id = server.create().await;
        let server = server.clone();
        waiting.push(tokio::spawn(async move {
            let started = std::time::Instant::now();
            let r = server
                .call(
                    "execute_code",
                    json!({"session_id": id, "code": code, "timeout_seconds": 2}),
                )
                .await;
            (started.elapsed(), structured(&r)["limit"]["kind"].clone())
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let other = server.create().await;
    let started = std::time::Instant::now();
    assert_eq!(server.run(&other, "1 + 1").await["value"], "2");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "another sandbox answered in {:?}",
        started.elapsed()
    );
    for task in waiting {
        let (took, kind) = task.await.unwrap();
        assert_eq!(kind, "timeout");
        assert!(took < Duration::from_secs(10), "stopped after {took:?}");
    }
    let (a, b) = (server.create().await, server.create().await);
    assert_eq!(server.run(&a, "2 + 2").await["value"], "4");
    assert_eq!(server.run(&b, "3 + 3").await["value"], "6");
}
