//! Hostile Python: code that tries to get out of its sandbox, reach the host,
//! or break the server. Every case checks that nothing outside the sandbox
//! changed and that the server still answers.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::support::{FORGE_PREAMBLE, Server, scientific_cache, structured, text};

/// A directory beside the sandbox root with files the guest must never touch.
struct Canary {
    dir: PathBuf,
}

impl Canary {
    fn plant(server: &Server) -> Self {
        let dir = server.root.parent().unwrap().join("canary");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("keep.txt"), "untouched").unwrap();
        Self { dir }
    }

    fn path(&self) -> &Path {
        &self.dir
    }

    /// The canary directory and everything around the sandbox root is as planted.
    fn assert_untouched(&self, server: &Server) {
        let entries: Vec<String> = std::fs::read_dir(&self.dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(entries, ["keep.txt"], "nothing new next to the canary");
        assert_eq!(
            std::fs::read_to_string(self.dir.join("keep.txt")).unwrap(),
            "untouched"
        );
        let around: Vec<String> = std::fs::read_dir(server.root.parent().unwrap())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        let mut around = around;
        around.sort();
        assert!(
            around
                .iter()
                .all(|n| ["canary", "root"].contains(&n.as_str())),
            "nothing new around the sandbox root: {around:?}"
        );
    }
}

/// Runs hostile code; it may fail, but the server must answer and keep working.
async fn attempt(server: &Server, id: &str, code: &str) -> serde_json::Value {
    let result = server.exec(id, code).await;
    let value = result
        .structured_content
        .clone()
        .unwrap_or_else(|| panic!("no result for {code:?}: {}", text(&result)));
    let alive = server.run(id, "'alive'").await;
    assert_eq!(alive["value"], "'alive'", "after {code:?}");
    value
}

#[tokio::test]
async fn host_paths_and_dot_dot_lead_nowhere() {
    let server = Server::start().await;
    let canary = Canary::plant(&server);
    let id = server.create().await;
    let target = canary.path().join("keep.txt");
    let target = target.to_str().unwrap();
    let cases = [
        format!("open({target:?}).read()"),
        format!("open({target:?}, 'w').write('pwned')"),
        "open('/etc/passwd').read()".to_owned(),
        "open('../../../../../../etc/passwd').read()".to_owned(),
        "open('/../../canary/keep.txt', 'w').write('pwned')".to_owned(),
        "import os\nos.chdir('..')\nos.getcwd()".to_owned(),
        "import os\nos.chdir('/tmp')\nopen('../../canary/keep.txt').read()".to_owned(),
        "import os\nos.listdir('/..')".to_owned(),
        "import os\nos.rename('/tmp', '../escaped')".to_owned(),
        "import os\nopen('f', 'w').close()\nos.rename('f', '/../f')".to_owned(),
        format!("import os\nos.link({target:?}, 'hard')"),
        "import os\nos.link('../canary/keep.txt', 'hard')".to_owned(),
        "import shutil\nshutil.copy('/../canary/keep.txt', 'copy')".to_owned(),
    ];
    for code in &cases {
        let r = attempt(&server, &id, code).await;
        let value = r["value"].as_str().unwrap_or_default();
        assert!(
            !value.contains("untouched") && !value.contains("root:"),
            "{code:?} read something from the host: {r}"
        );
    }
    let up = server
        .exec(&id, "import os\nos.chdir('/')\nos.chdir('..')")
        .await;
    assert_eq!(
        structured(&up)["error"]["name"],
        "PermissionError",
        "'..' stops at the root"
    );
    let cwd = server.run(&id, "import os\nos.getcwd()").await;
    assert_eq!(cwd["value"], "'/'");
    canary.assert_untouched(&server);
    server.stop().await;
}

#[tokio::test]
async fn symbolic_link_tricks_do_not_leave_the_sandbox() {
    let server = Server::start().await;
    let canary = Canary::plant(&server);
    let id = server.create().await;
    let target = canary.path().join("keep.txt");
    let abs = attempt(
        &server,
        &id,
        &format!(
            "import os\nos.symlink({:?}, 'abs')",
            target.to_str().unwrap()
        ),
    )
    .await;
    assert_eq!(
        abs["error"]["name"], "PermissionError",
        "absolute link targets are refused"
    );
    // Relative links that climb out can be made, but never followed out.
    server
        .run(&id, "import os\nos.symlink('../../..', 'up')\nos.symlink('up', 'chain1')\nos.symlink('chain1/', 'chain2')\nos.mkdir('a')\nos.symlink('../a/../..', 'a/back')")
        .await;
    for code in [
        "open('up/canary/keep.txt').read()",
        "open('chain2/canary/keep.txt', 'w').write('pwned')",
        "import os\nos.listdir('chain1')",
        "open('a/back/canary/keep.txt').read()",
        "import os\nos.chdir('up')",
    ] {
        let r = attempt(&server, &id, code).await;
        assert!(r["error"].is_object(), "{code}: {r}");
    }
    for path in [
        "up/canary/keep.txt",
        "chain2/canary/keep.txt",
        "a/back/canary/keep.txt",
    ] {
        server
            .err("read_file", json!({"session_id": id, "file_path": path}))
            .await;
        server
            .err(
                "write_file",
                json!({"session_id": id, "file_path": path, "content": "pwned"}),
            )
            .await;
    }
    canary.assert_untouched(&server);
    server.stop().await;
}

#[tokio::test]
async fn a_link_swapped_in_between_two_file_tool_calls_is_not_followed() {
    let server = Server::start().await;
    let canary = Canary::plant(&server);
    let id = server.create().await;
    server
        .run(
            &id,
            "import os\nos.mkdir('d')\nopen('d/x', 'w').write('inside')",
        )
        .await;
    let before = server
        .ok("read_file", json!({"session_id": id, "file_path": "d/x"}))
        .await;
    assert_eq!(before["content"], "inside");
    // A second execution swaps the directory for a link that leads out.
    server
        .run(
            &id,
            "import os, shutil\nshutil.rmtree('d')\nos.symlink('../../canary', 'd')",
        )
        .await;
    server
        .err(
            "read_file",
            json!({"session_id": id, "file_path": "d/keep.txt"}),
        )
        .await;
    server
        .err(
            "write_file",
            json!({"session_id": id, "file_path": "d/keep.txt", "content": "pwned"}),
        )
        .await;
    server
        .err("list_files", json!({"session_id": id, "path": "d"}))
        .await;
    // And back and forth many times, with the tools in between.
    for round in 0..20 {
        let swap = if round % 2 == 0 {
            "import os\nos.remove('d')\nos.mkdir('d')\nopen('d/keep.txt', 'w').write('mine')"
        } else {
            "import os, shutil\nshutil.rmtree('d')\nos.symlink('../../canary', 'd')"
        };
        server.run(&id, swap).await;
        let r = server
            .call(
                "read_file",
                json!({"session_id": id, "file_path": "d/keep.txt"}),
            )
            .await;
        if round % 2 == 0 {
            assert_eq!(structured(&r)["content"], "mine");
        } else {
            assert_eq!(r.is_error, Some(true));
        }
    }
    canary.assert_untouched(&server);
    server.stop().await;
}

#[tokio::test]
async fn processes_native_code_and_the_network_are_refused_clearly() {
    let server = Server::start().await;
    let id = server.create().await;
    for (code, expected) in [
        ("import ctypes", "ModuleNotFoundError"),
        // No program runs: the error is CPython's for a program that is not
        // there, saying why (pip alone goes to the host's installer).
        (
            "import subprocess\nsubprocess.run(['id'])",
            "FileNotFoundError",
        ),
        ("import os\nos.fork()", "AttributeError"),
        ("import os\nos.execv('/bin/sh', ['sh'])", "AttributeError"),
        (
            "import socket\nsocket.socket().connect(('127.0.0.1', 22))",
            "OSError",
        ),
        // python-3.12 has no door to the host: urllib says so (see network.rs).
        (
            "import urllib.request\nurllib.request.urlopen('http://169.254.169.254/')",
            "URLError",
        ),
    ] {
        let r = attempt(&server, &id, code).await;
        let name = r["error"]["name"].as_str().unwrap_or_default();
        assert!(
            name == expected
                || (expected == "OSError"
                    && ["PermissionError", "ConnectionRefusedError"].contains(&name)),
            "{code:?} should raise {expected}, got {r}"
        );
        if code.contains("subprocess") {
            let message = r["error"]["value"].as_str().unwrap_or_default();
            assert!(
                message.contains(
                    "there are no processes or shell in this sandbox, so `id` cannot run"
                ),
                "{message}"
            );
        }
    }
    // os.system answers as a shell does for a command it cannot find: status
    // 127, a line on stderr, nothing run.
    let r = attempt(&server, &id, "import os\nos.system('id')").await;
    assert!(r["error"].is_null(), "{r}");
    assert_eq!(r["value"], "32512", "{r}");
    let stderr = r["stderr"]["text"].as_str().unwrap_or_default();
    assert!(
        stderr.contains("there are no processes or shell in this sandbox, so `id` cannot run"),
        "{stderr}"
    );
    server.stop().await;
}

#[tokio::test]
async fn the_guest_sees_no_host_environment_and_sane_clocks_and_randomness() {
    let server =
        Server::start_with(&[("SECRET_TOKEN", "hunter2"), ("E2B_API_KEY", "e2b_secret")]).await;
    let a = server.create().await;
    let b = server.create().await;
    let env = server.run(&a, "import os\nsorted(os.environ)").await;
    assert_eq!(
        env["value"],
        "['HOME', 'MPLBACKEND', 'PYTHONDONTWRITEBYTECODE', 'PYTHONUTF8', 'TMPDIR']"
    );
    let r = server
        .run(&a, "import time\nt0 = time.monotonic(); w = time.time()\nsum(range(10000))\n(time.monotonic() >= t0, w)")
        .await;
    let value = r["value"].as_str().unwrap();
    assert!(value.starts_with("(True, "), "{value}");
    let guest_now: f64 = value
        .trim_start_matches("(True, ")
        .trim_end_matches(')')
        .parse()
        .unwrap();
    let host_now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        (guest_now - host_now).abs() < 60.0,
        "the guest's clock is the real time"
    );
    let ra = server.run(&a, "import os\nos.urandom(16).hex()").await;
    let rb = server.run(&b, "import os\nos.urandom(16).hex()").await;
    assert_ne!(
        ra["value"], rb["value"],
        "sandboxes get independent randomness"
    );
    server.stop().await;
}

#[tokio::test]
async fn file_descriptor_games_cannot_break_the_server() {
    let server = Server::start().await;
    let id = server.create().await;
    for code in [
        "import os\nos.dup2(0, 0)",
        "import os\nos.dup2(1, 2)\nprint('to stdout twice')",
        "import os\n[os.open('/tmp', os.O_RDONLY) for _ in range(50)]",
        "import os\nos.close(3)",
    ] {
        attempt(&server, &id, code).await;
    }
    // Closing the driver's own channels ends this interpreter, not the server.
    let r = server.exec(&id, "import os\nos.closerange(0, 64)").await;
    assert_eq!(r.is_error, Some(true));
    assert!(structured(&r)["state_lost"].is_string(), "{}", text(&r));
    assert_eq!(server.run(&id, "1 + 1").await["value"], "2");
    server.stop().await;
}

#[tokio::test]
async fn huge_paths_names_and_deep_trees_fail_cleanly() {
    let server = Server::start().await;
    let id = server.create().await;
    let r = attempt(&server, &id, "open('a' * 10000, 'w')").await;
    assert_eq!(r["error"]["name"], "OSError", "{r}");
    attempt(
        &server,
        &id,
        "import os\nos.makedirs('/'.join(['d'] * 400), exist_ok=True)",
    )
    .await;
    let deep = format!("/{}", vec!["d"; 100].join("/"));
    let listing = server
        .ok("list_files", json!({"session_id": id, "path": deep}))
        .await;
    assert_eq!(listing["files"][0]["name"], "d");
    let msg = server
        .err(
            "read_file",
            json!({"session_id": id, "file_path": "x".repeat(5000)}),
        )
        .await;
    assert!(msg.contains("4096 bytes"), "{msg}");
    server.stop().await;
}

#[tokio::test]
async fn resource_bombs_end_in_limits_and_the_sandbox_recovers() {
    let server = Server::start_with(&[("SANDBOX_OUTPUT_LIMIT_BYTES", "65536")]).await;
    let id = server
        .create_with(json!({"memory_mb": 128, "timeout_seconds": 3}))
        .await;
    let cases = [
        ("while True: pass", "timeout"),
        (
            "try:\n    while True: pass\nexcept BaseException:\n    while True: pass",
            "timeout",
        ),
        ("import re\nre.match(r'(a+)+$', 'a' * 40 + 'b')", "timeout"),
        (
            "x = []\nwhile True: x.append(bytearray(16 << 20))",
            "memory",
        ),
        (
            "import sys\nwhile True: sys.stdout.write('A' * 65536)",
            "timeout",
        ),
        ("import sys\nsys.stdout.write('B' * 10_000_000)", "output"),
        ("s = 'x'\nwhile True: s = s * 2", "memory"),
    ];
    for (code, kind) in cases {
        let r = server.exec(&id, code).await;
        // Output cut short is reported, but the code ran to the end: not an error.
        assert_eq!(r.is_error, Some(kind != "output"), "{code}");
        assert_eq!(
            structured(&r)["limit"]["kind"],
            kind,
            "{code}: {}",
            text(&r)
        );
        assert_eq!(
            server.run(&id, "'recovered'").await["value"],
            "'recovered'",
            "after {code}"
        );
    }
    server.stop().await;
}

/// Guest code that finds the driver's reply token in its own memory and writes
/// a reply of its own must not end the execution: it ends only when the
/// driver waits for its next request, and the time limit stays armed until
/// then.
#[tokio::test]
async fn a_forged_reply_neither_ends_the_execution_nor_disarms_its_limits() {
    scientific_cache();
    let server = Server::start_with(&[("SANDBOX_POOL_SIZE", "0")]).await;
    let forge = format!(
        "{FORGE_PREAMBLE}{}",
        r#"assert token, "the driver's token was found"
value = b"'forged'"
body = b"v" + len(value).to_bytes(4, "big") + value
posix.write(1, token + len(body).to_bytes(4, "big") + body)
"#
    );
    // Spinning at once, or after asking whether stdin is readable (a poll
    // that waits on stdin, which is not a read).
    // A loop of the driver (python-3.12) and turns (scientific) alike.
    for runtime in ["python-3.12", "scientific"] {
        let id = server.create_with(json!({"runtime": runtime})).await;
        for then in [
            "while True:
    pass
",
            "import select
select.select([0], [], [], 0.2)
while True:
    pass
",
            "import select
select.poll().register(0)
while True:
    pass
",
            // A read of no bytes returns at once: it is not the driver waiting.
            "posix.read(0, 0)
while True:
    pass
",
        ] {
            let code = format!("{forge}{then}");
            let result = server
                .call(
                    "execute_code",
                    json!({"session_id": id, "code": code, "timeout_seconds": 2}),
                )
                .await;
            let s = structured(&result);
            assert_ne!(
                s["value"], "'forged'",
                "the forged reply was taken: {runtime}: {then}: {s}"
            );
            assert_eq!(s["limit"]["kind"], "timeout", "{runtime}: {then}: {s}");
        }
        let status = server
            .ok("get_sandbox_status", json!({"session_id": id}))
            .await;
        assert_eq!(status["sandboxes"][0]["busy"], false);
        assert_eq!(server.run(&id, "6 * 7").await["value"], "42");
    }
    server.stop().await;
}

#[tokio::test]
async fn a_writev_of_one_buffer_many_times_and_a_poll_of_many_files_are_bounded() {
    let server = Server::start().await;
    let id = server.create().await;
    // 1024 iovecs that all point at one 64 MiB buffer: 64 GiB offered at once.
    let result = server
        .call(
            "execute_code",
            json!({"session_id": id, "code": "import os\nbuf = b'x' * (64 << 20)\nn = os.writev(1, [buf] * 1024)\nn > 0", "timeout_seconds": 60}),
        )
        .await;
    let s = structured(&result);
    assert_eq!(s["value"], "True", "{}", text(&result));
    assert!(text(&result).len() < 64 << 10, "the answer stays bounded");
    // Waiting on a hundred open files at once is not "too many open files".
    let polled = server
        .run(
            &id,
            "import select\nfiles = [open(f'/f{i}', 'w') for i in range(100)]\np = select.poll()\nfor f in files: p.register(f)\nlen(p.poll(0))",
        )
        .await;
    assert_eq!(polled["value"], "100", "{polled}");
    assert_eq!(
        server.run(&id, "len(files)").await["value"],
        "100",
        "the state is kept"
    );
    server.stop().await;
}
