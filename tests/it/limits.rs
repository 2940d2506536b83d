//! Every limit, obeyed and violated, and the sandbox working afterwards.

use serde_json::json;

use crate::support::{FORGE_PREAMBLE, Server, structured, text};

#[tokio::test]
async fn a_timeout_restarts_the_interpreter_and_keeps_the_files() {
    let server = Server::start().await;
    let id = server.create().await;
    server
        .run(
            &id,
            "lost = 1\nopen('/kept.txt', 'w').write('files survive')",
        )
        .await;
    let result = server
        .call(
            "execute_code",
            json!({"session_id": id, "code": "while True: pass", "timeout_seconds": 1}),
        )
        .await;
    let s = structured(&result);
    assert_eq!(s["limit"]["kind"], "timeout");
    assert!(s["state_lost"].as_str().unwrap().contains("files are kept"));
    let after = server.run(&id, "open('/kept.txt').read()").await;
    assert_eq!(after["value"], "'files survive'");
    assert!(
        after["state_lost"].is_null(),
        "said once, in the result that lost it: {after}"
    );
    let gone = server.exec(&id, "lost").await;
    assert_eq!(structured(&gone)["error"]["name"], "NameError");
    server.stop().await;
}
#[tokio::test]
async fn a_timeout_also_stops_code_blocked_in_a_host_call() {
    let server = Server::start().await;
    let id = server.create_with(json!({"timeout_seconds": 1})).await;
    let result = server.exec(&id, "import time\ntime.sleep(3600)").await;
    assert_eq!(structured(&result)["limit"]["kind"], "timeout");
    assert_eq!(server.run(&id, "2 + 2").await["value"], "4");
    server.stop().await;
}

#[tokio::test]
async fn a_timeout_over_the_server_maximum_is_refused_as_at_creation() {
    let server = Server::start_with(&[
        ("SANDBOX_TIMEOUT_SECONDS", "1"),
        ("SANDBOX_MAX_TIMEOUT_SECONDS", "1"),
    ])
    .await;
    let id = server.create_with(json!({"timeout_seconds": 1})).await;
    let refused = server
        .err(
            "execute_code",
            json!({"session_id": id, "code": "while True: pass", "timeout_seconds": 100}),
        )
        .await;
    assert!(refused.contains("maximum of 1"), "{refused}");
    let absurd = server
        .err(
            "execute_code",
            json!({"session_id": id, "code": "1", "timeout_seconds": 1e300}),
        )
        .await;
    assert!(absurd.contains("timeout_seconds"), "{absurd}");
    let over = server
        .err("create_sandbox", json!({"timeout_seconds": 100}))
        .await;
    assert!(over.contains("maximum"), "{over}");
    let greedy = server
        .err("create_sandbox", json!({"memory_mb": 1 << 20}))
        .await;
    assert!(
        greedy.contains("memory_mb") && greedy.contains("SANDBOX_MAX_MEMORY_MB"),
        "the refusal names the setting: {greedy}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_memory_bomb_gets_memory_error_and_keeps_its_state() {
    let server = Server::start().await;
    let id = server.create_with(json!({"memory_mb": 64})).await;
    server.run(&id, "survivor = [1, 2, 3]").await;
    let small = server.run(&id, "len(bytearray(8 * 1024 * 1024))").await;
    assert_eq!(small["value"], "8388608", "allocations within the cap work");
    let result = server.exec(&id, "x = bytearray(1024 * 1024 * 1024)").await;
    assert_eq!(result.is_error, Some(true));
    let s = structured(&result);
    assert_eq!(s["error"]["name"], "MemoryError");
    assert_eq!(s["limit"]["kind"], "memory");
    assert_eq!(s["limit"]["limit"], "64 MiB");
    assert_eq!(server.run(&id, "survivor").await["value"], "[1, 2, 3]");
    let status = server
        .ok("get_sandbox_status", json!({"session_id": id}))
        .await;
    let memory = status["sandboxes"][0]["usage"]["memory_bytes"]
        .as_u64()
        .unwrap();
    assert!(memory <= 64 << 20, "memory stays under the cap: {memory}");
    server.stop().await;
}

#[tokio::test]
async fn a_fuel_budget_stops_long_computations() {
    let server = Server::start_with(&[("SANDBOX_FUEL", "2000000000")]).await;
    let id = server.create().await;
    let cheap = server.run(&id, "sum(range(1000))").await;
    let fuel = cheap["usage"]["fuel"].as_u64().unwrap();
    assert!(
        fuel > 0 && fuel < 2_000_000_000,
        "fuel used is reported: {fuel}"
    );
    let result = server.exec(&id, "n = 0\nwhile True: n += 1").await;
    let s = structured(&result);
    assert_eq!(s["limit"]["kind"], "fuel", "{}", text(&result));
    assert_eq!(server.run(&id, "'again'").await["value"], "'again'");
    server.stop().await;
}

#[tokio::test]
async fn fuel_is_off_by_default_and_each_result_reports_cpu_time() {
    let server = Server::start().await;
    let id = server.create().await;
    let busy = server
        .run(&id, "n = 0\nfor i in range(3_000_000): n += i\nn")
        .await;
    assert!(busy["usage"]["fuel"].is_null(), "no fuel figure: {busy}");
    let cpu = busy["usage"]["cpu_ms"].as_f64().unwrap();
    let wall = busy["usage"]["wall_ms"].as_f64().unwrap();
    assert!(cpu > 10.0, "a busy loop burns CPU: {busy}");
    assert!(
        cpu <= wall * 1.05 + 1.0,
        "one thread: CPU within wall: {busy}"
    );
    let sleepy = server.run(&id, "import time\ntime.sleep(0.5)").await;
    let cpu = sleepy["usage"]["cpu_ms"].as_f64().unwrap();
    assert!(sleepy["usage"]["wall_ms"].as_f64().unwrap() >= 500.0);
    assert!(cpu < 100.0, "sleeping burns no CPU: {sleepy}");
    server.stop().await;
}

#[tokio::test]
async fn a_cpu_budget_stops_computation_but_not_waiting() {
    let server = Server::start_with(&[("SANDBOX_CPU_SECONDS", "0.5")]).await;
    let id = server.create().await;
    server.run(&id, "kept = 'no'").await;
    // Waiting longer than the budget is not computing.
    let slept = server
        .run(&id, "import time\ntime.sleep(1.2)\n'awake'")
        .await;
    assert_eq!(slept["value"], "'awake'", "{slept}");
    let result = server.exec(&id, "n = 0\nwhile True: n += 1").await;
    assert_eq!(result.is_error, Some(true));
    let s = structured(&result);
    assert_eq!(s["limit"]["kind"], "cpu", "{}", text(&result));
    assert_eq!(s["limit"]["limit"], "500 ms", "{s}");
    assert!(
        s["limit"]["message"]
            .as_str()
            .unwrap()
            .contains("SANDBOX_CPU_SECONDS"),
        "{s}"
    );
    let cpu = s["usage"]["cpu_ms"].as_f64().unwrap();
    assert!(
        (500.0..1500.0).contains(&cpu),
        "stopped near its budget: {s}"
    );
    assert!(s["state_lost"].is_string(), "{s}");
    assert_eq!(server.run(&id, "'again'").await["value"], "'again'");
    server.stop().await;
}

/// A loop that spends nearly all its time in host calls on its own memory
/// (reading a file into a buffer): blocking the guest's memory does not stop
/// host code, so such a guest is stopped as a call returns.
#[tokio::test]
async fn code_that_spends_its_time_in_host_calls_is_stopped_at_its_limits_too() {
    let server = Server::start_with(&[("SANDBOX_CPU_SECONDS", "1")]).await;
    let reading = "buf = bytearray(16 << 20)\nwith open('/big', 'rb') as f:\n    while True:\n        f.seek(0)\n        f.readinto(buf)";
    for (limits, kind) in [
        (json!({"timeout_seconds": 30}), "cpu"),
        (json!({"timeout_seconds": 1}), "timeout"),
    ] {
        let id = server.create_with(limits).await;
        server
            .run(&id, "open('/big', 'wb').write(bytes(16 << 20))")
            .await;
        stopped_soon_at_its_limit(&server, &id, reading, kind).await;
    }
    server.stop().await;
}

/// Runs `code` in sandbox `id`: it must hit its `kind` limit within
/// seconds, and the sandbox must answer again afterwards.
async fn stopped_soon_at_its_limit(server: &Server, id: &str, code: &str, kind: &str) {
    let started = std::time::Instant::now();
    let result = server.exec(id, code).await;
    let s = structured(&result);
    assert_eq!(s["limit"]["kind"], kind, "{s}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(8),
        "stopped soon after its limit: {:?}",
        started.elapsed()
    );
    assert_eq!(server.run(id, "'again'").await["value"], "'again'");
}

/// The server's CPU time so far (Linux's `/proc`).
fn process_cpu(pid: u32) -> std::time::Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    // utime and stime, in clock ticks of 10 ms.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    std::time::Duration::from_millis(ticks * 10)
}

/// wasmtime runs `memory.copy` as host code, which blocking the guest's
/// memory does not stop: such a guest is stopped as the copy returns to it,
/// and its thread ends (the server goes idle).
#[tokio::test]
async fn a_guest_copying_its_memory_is_stopped_at_its_limits_and_its_thread_ends() {
    let server = Server::start_with(&[("SANDBOX_CPU_SECONDS", "1")]).await;
    let copying = "a = bytearray(400 << 20)\nm = memoryview(a)\nwhile True:\n    m[0:200 << 20] = m[200 << 20:]";
    for (timeout, kind) in [(30, "cpu"), (1, "timeout")] {
        let id = server
            .create_with(
                json!({"runtime": "scientific", "timeout_seconds": timeout, "memory_mb": 1024}),
            )
            .await;
        stopped_soon_at_its_limit(&server, &id, copying, kind).await;
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let before = process_cpu(server.pid);
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let burned = process_cpu(server.pid) - before;
        assert!(
            burned < std::time::Duration::from_millis(400),
            "no stopped guest runs on: the idle server burned {burned:?} in a second"
        );
        server
            .call("close_sandbox", json!({"session_id": id}))
            .await;
    }
    server.stop().await;
}

/// The host keeps and forks a guest's memory after each call: a call that
/// ends near its CPU-time budget leaves nothing blocked for that.
#[tokio::test]
async fn a_call_that_ends_near_its_cpu_budget_is_kept_and_forked() {
    let server = Server::start_with(&[("SANDBOX_CPU_SECONDS", "1")]).await;
    let id = server.create_with(json!({"runtime": "scientific"})).await;
    for _ in 0..3 {
        let ran = server
            .run(
                &id,
                "import time\nbig = list(range(3_000_000))\nwhile time.process_time() < 0.9:\n    pass\nlen(big)",
            )
            .await;
        assert_eq!(ran["value"], "3000000", "{ran}");
        let forked = server.ok("fork_sandbox", json!({"session_id": id})).await;
        let fork = forked["session_id"].as_str().unwrap().to_owned();
        assert_eq!(server.run(&fork, "len(big)").await["value"], "3000000");
        server
            .call("close_sandbox", json!({"session_id": fork}))
            .await;
    }
    assert!(!server.logs().contains("Bad address"), "{}", server.logs());
    server.stop().await;
}

#[tokio::test]
async fn a_start_that_runs_the_guests_own_code_is_held_to_the_cpu_budget_too() {
    let server = Server::start_with(&[("SANDBOX_CPU_SECONDS", "0.5")]).await;
    let id = server.create().await;
    // A .pth file in the sandbox's own site-packages runs at every start.
    let planted = server
        .run(
            &id,
            "import os, sys\nd = '/.local/lib/python%d.%d/site-packages' % sys.version_info[:2]\n\
             os.makedirs(d, exist_ok=True)\n\
             open(d + '/spin.pth', 'w').write(\"import sys; exec('while True: pass')\\n\")\n'planted'",
        )
        .await;
    assert_eq!(planted["value"], "'planted'", "{planted}");
    let stopped = server.exec(&id, "while True: pass").await;
    assert_eq!(
        structured(&stopped)["limit"]["kind"],
        "cpu",
        "{}",
        text(&stopped)
    );
    // The next call starts an interpreter, which runs the .pth file.
    let started = std::time::Instant::now();
    let next = server.exec(&id, "1 + 1").await;
    let took = started.elapsed();
    assert_eq!(next.is_error, Some(true), "{}", text(&next));
    assert!(
        took < std::time::Duration::from_secs(55),
        "each start try is stopped at its CPU floor (5 s), well before the 60 s start timeout: {took:?}, {}",
        text(&next)
    );
    server.stop().await;
}

#[tokio::test]
async fn deep_recursion_is_a_recursion_error_and_never_crashes_the_server() {
    let server = Server::start().await;
    let id = server.create().await;
    let result = server.exec(&id, "def f(n): return f(n + 1)\nf(0)").await;
    assert_eq!(structured(&result)["error"]["name"], "RecursionError");
    let deeper = server
        .exec(
            &id,
            "import sys\nsys.setrecursionlimit(10**8)\ndef g(n): return g(n + 1)\ng(0)",
        )
        .await;
    assert_eq!(deeper.is_error, Some(true), "{}", text(&deeper));
    assert_eq!(server.run(&id, "'ok'").await["value"], "'ok'");
    server.stop().await;
}

#[tokio::test]
async fn output_without_newlines_is_capped_too() {
    let server = Server::start_with(&[("SANDBOX_OUTPUT_LIMIT_BYTES", "2000")]).await;
    let id = server.create().await;
    let flood = server
        .exec(
            &id,
            "import sys\nsys.stdout.write('x' * 5_000_000)\nsys.stderr.write('e' * 3000)",
        )
        .await;
    assert_ne!(flood.is_error, Some(true), "the code ran to the end");
    let s = structured(&flood);
    assert_eq!(s["limit"]["kind"], "output");
    assert_eq!(s["stdout"]["total_bytes"], 5_000_000);
    let inline = s["stdout"]["text"].as_str().unwrap();
    assert!(inline.len() <= 2000, "{}", inline.len());
    assert!(
        inline.starts_with("xxx") && inline.ends_with("xxx"),
        "head and tail"
    );
    assert_eq!(s["stderr"]["truncated"], true);
    assert!(s["stderr"]["full_output_path"].is_string());
    server.stop().await;
}
#[tokio::test]
async fn the_disk_quota_fails_writes_inside_python_and_the_host_disk_never_fills() {
    let server =
        Server::start_with(&[("SANDBOX_DISK_QUOTA_MB", "8"), ("SANDBOX_MAX_FILES", "50")]).await;
    let id = server.create().await;
    let within = server
        .run(&id, "open('/ok.bin', 'wb').write(b'x' * 1_000_000)")
        .await;
    assert_eq!(within["value"], "1000000", "writes within the quota work");
    assert!(within["limit"].is_null());

    let r = server
        .exec(
            &id,
            "f = open('/big.bin', 'wb')\nwhile True:\n    f.write(b'y' * 1_000_000)",
        )
        .await;
    assert_eq!(r.is_error, Some(true));
    let s = structured(&r);
    assert_eq!(s["error"]["name"], "OSError", "{}", text(&r));
    assert!(
        s["error"]["value"]
            .as_str()
            .unwrap()
            .contains("Quota exceeded")
    );
    assert_eq!(s["limit"]["kind"], "disk");
    let used: u64 = server
        .sandbox_dirs()
        .iter()
        .flat_map(|d| std::fs::read_dir(d).unwrap().flatten())
        .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
        .sum();
    assert!(
        used <= 8 << 20,
        "the sandbox never holds more than its quota: {used}"
    );

    // The error is an ordinary exception: code can catch it and go on; the
    // result still says the quota was reached.
    let caught = server
        .exec(&id, "try:\n    open('/more.bin', 'wb').write(b'z' * 9_000_000)\nexcept OSError as e:\n    err = e.errno\nerr")
        .await;
    assert_eq!(structured(&caught)["value"], "19");
    assert_eq!(structured(&caught)["limit"]["kind"], "disk");
    let tool = server
        .err(
            "write_file",
            json!({"session_id": id, "file_path": "t.txt", "content": "w".repeat(900_000)}),
        )
        .await;
    assert!(tool.contains("disk quota"), "{tool}");
    // Freeing space makes room again (a file deleted while still open keeps
    // its bytes until it is closed, so close it first).
    server
        .run(
            &id,
            "import os\nf.close()\nos.remove('/big.bin')\nos.remove('/more.bin')",
        )
        .await;
    let again = server
        .run(&id, "open('/again.bin', 'wb').write(b'a' * 2_000_000)")
        .await;
    assert_eq!(again["value"], "2000000");

    let files = server
        .exec(&id, "import os\nos.mkdir('/many')\nfor i in range(1000):\n    open(f'/many/{i}', 'w').close()")
        .await;
    assert_eq!(
        structured(&files)["limit"]["kind"],
        "disk",
        "{}",
        text(&files)
    );
    let count = server.run(&id, "import os\nlen(os.listdir('/many'))").await;
    assert!(count["value"].as_str().unwrap().parse::<u32>().unwrap() < 50);
    server.stop().await;
}

/// Values, exception messages and tracebacks are held to the output limit
/// like the streams: the middle goes, the head and the tail stay.
#[tokio::test]
async fn exceptions_and_values_are_bounded_like_output() {
    let server = Server::start().await;
    let id = server.create().await;
    let result = server.exec(&id, "raise ValueError('x' * 30_000_000)").await;
    let size = serde_json::to_vec(&result).unwrap().len();
    assert!(size < 8 << 20, "the whole answer is bounded: {size} bytes");
    let s = structured(&result);
    assert_eq!(s["error"]["name"], "ValueError");
    let value = s["error"]["value"].as_str().unwrap();
    assert!(value.len() <= 1 << 20, "{}", value.len());
    assert!(
        value.contains("of 30000000 bytes left out"),
        "{}",
        &value[..200]
    );
    let traceback = s["error"]["traceback"].as_str().unwrap();
    assert!(traceback.starts_with("Traceback"), "{}", &traceback[..100]);
    assert!(traceback.trim_end().ends_with("xxxx"), "the tail is kept");
    let result = server.exec(&id, "'y' * 30_000_000").await;
    let value = structured(&result)["value"].as_str().unwrap().to_owned();
    assert!(value.len() <= 1 << 20 && value.contains("bytes left out"));
    assert_eq!(server.run(&id, "1 + 1").await["value"], "2");
    server.stop().await;
}

/// A reply written by guest code (it can find the driver's token) is held to
/// the same limits: the host does not trust what the driver was told.
#[tokio::test]
async fn a_forged_reply_is_held_to_the_image_and_text_limits() {
    let server = Server::start().await;
    let id = server.create().await;
    let forge = format!(
        "{FORGE_PREAMBLE}{}",
        r#"body = field(b"v", b"z" * (3 << 20))
body += b"".join(field(b"i", b"\n" + b"\x89PNG" + bytes(100_000)) for _ in range(30))
posix.write(1, token + len(body).to_bytes(4, "big") + body)
posix.read(0, 1)
"#
    );
    let result = server
        .call(
            "execute_code",
            json!({"session_id": id, "code": forge, "timeout_seconds": 5}),
        )
        .await;
    let images = result
        .content
        .iter()
        .filter(|c| c.as_image().is_some())
        .count();
    assert!(images <= 8, "{images} images returned");
    let s = structured(&result);
    let value = s["value"].as_str().unwrap_or_default();
    assert!(value.len() <= 1 << 20, "value of {} bytes", value.len());
    server.ok("close_sandbox", json!({"session_id": id})).await;
    server.stop().await;
}
