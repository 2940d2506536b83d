//! The behaviours every backend shares, each run against the local wasm
//! backend, against E2B through the loopback fake (`e2b_fake`), and — marked
//! `#[ignore]` — against the real E2B when `E2B_API_KEY` is set
//! (`cargo test --release -- --ignored e2b_live`).
//!
//! Code in these tests names files by relative paths: the code's working
//! directory is the file tools' `/` on both backends, while an absolute path
//! in code means the VM's own root on E2B.

use base64::Engine as _;
use serde_json::{Value, json};

use crate::e2b_fake::FakeE2b;
use crate::support::{Server, structured, text};

/// Which backend a behaviour runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The local WASI backend.
    Wasm,
    /// E2B, through the loopback fake.
    E2bFake,
    /// The real E2B (needs `E2B_API_KEY` and the network).
    E2bLive,
}

/// A server whose default backend is the one under test.
pub struct Harness {
    pub server: Server,
    pub fake: Option<FakeE2b>,
    pub kind: Kind,
}

impl Harness {
    /// Starts a server for `kind` with extra settings.
    pub async fn start(kind: Kind, extra: &[(&str, &str)]) -> Self {
        let mut env: Vec<(String, String)> = Vec::new();
        let fake = match kind {
            Kind::Wasm => None,
            Kind::E2bFake => {
                let fake = FakeE2b::start().await;
                env.extend(fake.env());
                Some(fake)
            }
            Kind::E2bLive => {
                let key = std::env::var("E2B_API_KEY")
                    .expect("set E2B_API_KEY to run the tests against the real E2B");
                env.push(("INTERPRETER_TYPE".into(), "e2b".into()));
                env.push(("E2B_API_KEY".into(), key));
                for pass in [
                    "E2B_DOMAIN",
                    "E2B_API_URL",
                    "E2B_SANDBOX_URL",
                    "HTTPS_PROXY",
                    "https_proxy",
                    "NO_PROXY",
                    "SSL_CERT_FILE",
                    "SSL_CERT_DIR",
                ] {
                    if let Ok(value) = std::env::var(pass) {
                        env.push((pass.into(), value));
                    }
                }
                None
            }
        };
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let server = Server::start_with(&env).await;
        Self { server, fake, kind }
    }

    /// The backend's name in results.
    pub fn backend(&self) -> &'static str {
        match self.kind {
            Kind::Wasm => "wasm",
            Kind::E2bFake | Kind::E2bLive => "e2b",
        }
    }

    /// Ends the server and, for the fake, checks no sandbox was left alive.
    pub async fn stop(self) {
        self.server.stop().await;
        if let Some(fake) = &self.fake {
            wait_until_none_alive(fake).await;
        }
    }
}

/// Waits (a bounded time) until the fake has no live sandbox; panics if one stays.
pub async fn wait_until_none_alive(fake: &FakeE2b) {
    for _ in 0..200 {
        if fake.live().is_empty() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("E2B sandboxes were left alive: {:?}", fake.live());
}

/// A value as a notebook shows it, without the quotes E2B's bridge strips.
fn unquoted(value: &Value) -> String {
    value
        .as_str()
        .unwrap_or_default()
        .trim_matches('\'')
        .to_owned()
}

macro_rules! for_each_backend {
    ($($name:ident),* $(,)?) => {
        mod wasm {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::Kind::Wasm).await;
                }
            )*
        }
        mod e2b {
            $(
                #[tokio::test]
                async fn $name() {
                    super::$name(super::Kind::E2bFake).await;
                }
            )*
        }
        mod e2b_live {
            $(
                #[tokio::test]
                #[ignore = "runs against the real E2B: needs E2B_API_KEY and the network"]
                async fn $name() {
                    super::$name(super::Kind::E2bLive).await;
                }
            )*
        }
    };
}

for_each_backend!(
    state_persists_and_a_trailing_value_is_returned,
    stdout_and_stderr_come_back_separately,
    an_exception_is_an_error_with_its_traceback_and_state_survives,
    a_timeout_is_reported_and_the_sandbox_goes_on,
    files_round_trip_between_the_tools_and_the_code,
    a_path_names_the_same_file_for_the_tools_and_the_code,
    binary_files_round_trip_byte_exact,
    paths_that_leave_the_sandbox_are_refused,
    unknown_ids_are_refused_and_close_is_final,
    status_shows_each_sandboxs_backend,
    output_past_the_limit_is_cut_and_kept_in_a_file,
    create_run_close_leaves_nothing_behind,
    a_cancelled_execution_stops_and_the_sandbox_goes_on,
);

async fn state_persists_and_a_trailing_value_is_returned(kind: Kind) {
    let h = Harness::start(kind, &[]).await;
    let id = h.server.create().await;
    let first = h
        .server
        .run(&id, "import math\ny = 40\ndef double(v):\n    return 2 * v")
        .await;
    assert_eq!(first["value"], Value::Null);
    assert_eq!(h.server.run(&id, "y + 2").await["value"], "42");
    assert_eq!(
        h.server.run(&id, "double(math.floor(10.5))").await["value"],
        "20"
    );
    assert_eq!(h.server.run(&id, "[y, y + 1]").await["value"], "[40, 41]");
    let block = text(&h.server.exec(&id, "y + 2").await);
    assert!(block.contains("Out: 42"), "{block}");
    h.stop().await;
}

async fn stdout_and_stderr_come_back_separately(kind: Kind) {
    let h = Harness::start(kind, &[]).await;
    let id = h.server.create().await;
    let r = h
        .server
        .run(
            &id,
            "import sys\nprint('one')\nprint('warn', file=sys.stderr)\nprint('two')",
        )
        .await;
    assert_eq!(r["stdout"]["text"], "one\ntwo\n");
    assert_eq!(r["stderr"]["text"], "warn\n");
    assert_eq!(r["stdout"]["truncated"], false);
    h.stop().await;
}

async fn an_exception_is_an_error_with_its_traceback_and_state_survives(kind: Kind) {
    let h = Harness::start(kind, &[]).await;
    let id = h.server.create().await;
    h.server.run(&id, "kept = 7").await;
    let result = h
        .server
        .exec(&id, "print('before')\ndef f():\n    return 1 / 0\nf()")
        .await;
    assert_eq!(result.is_error, Some(true));
    let s = structured(&result);
    assert_eq!(s["error"]["name"], "ZeroDivisionError");
    assert_eq!(s["error"]["value"], "division by zero");
    let tb = s["error"]["traceback"].as_str().unwrap();
    assert!(tb.contains("ZeroDivisionError"), "{tb}");
    assert_eq!(s["stdout"]["text"], "before\n");
    assert!(text(&result).contains("ZeroDivisionError"));
    assert_eq!(h.server.run(&id, "kept").await["value"], "7");
    let syntax = h.server.exec(&id, "def broken(:").await;
    assert_eq!(structured(&syntax)["error"]["name"], "SyntaxError");
    h.stop().await;
}

async fn a_timeout_is_reported_and_the_sandbox_goes_on(kind: Kind) {
    let h = Harness::start(kind, &[]).await;
    let id = h.server.create().await;
    let within = h
        .server
        .ok(
            "execute_code",
            json!({"session_id": id, "code": "import time; time.sleep(0.2); 5", "timeout_seconds": 20}),
        )
        .await;
    assert_eq!(within["value"], "5", "a call within its limit is untouched");
    let result = h
        .server
        .call(
            "execute_code",
            json!({"session_id": id, "code": "print('started')\nwhile True: pass", "timeout_seconds": 1}),
        )
        .await;
    assert_eq!(result.is_error, Some(true));
    let s = structured(&result);
    assert_eq!(s["limit"]["kind"], "timeout", "{}", text(&result));
    assert_eq!(s["limit"]["limit"], "1 s");
    assert_eq!(
        s["stdout"]["text"], "started\n",
        "output before the timeout is kept"
    );
    assert!(
        text(&result).contains("time limit of 1 s"),
        "{}",
        text(&result)
    );
    assert_eq!(h.server.run(&id, "2 + 2").await["value"], "4");
    if let Some(fake) = &h.fake {
        assert!(fake.disconnects() >= 1, "the connection was dropped");
    }
    h.stop().await;
}

async fn files_round_trip_between_the_tools_and_the_code(kind: Kind) {
    let h = Harness::start(kind, &[]).await;
    let id = h.server.create().await;
    let w = h
        .server
        .ok(
            "write_file",
            json!({"session_id": id, "file_path": "/data/in.csv", "content": "a,b\n1,2\n"}),
        )
        .await;
    assert_eq!(w["path"], "/data/in.csv");
    assert_eq!(w["size"], 8);
    let r = h
        .server
        .run(
            &id,
            "import csv\nrows = list(csv.reader(open('data/in.csv')))\nopen('data/out.txt', 'w').write(str(rows))\nrows",
        )
        .await;
    assert_eq!(r["value"], "[['a', 'b'], ['1', '2']]");
    let out = h
        .server
        .ok(
            "read_file",
            json!({"session_id": id, "file_path": "data/out.txt"}),
        )
        .await;
    assert_eq!(out["content"], "[['a', 'b'], ['1', '2']]");
    assert_eq!(out["encoding"], "utf-8");
    let listing = h
        .server
        .ok("list_files", json!({"session_id": id, "path": "/data"}))
        .await;
    let names: Vec<&str> = listing["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["in.csv", "out.txt"]);
    let first = &listing["files"][0];
    assert_eq!(first["kind"], "file");
    assert_eq!(first["size"], 8);
    assert_eq!(first["path"], "/data/in.csv");
    assert!(first["modified"].as_str().unwrap().ends_with('Z'));
    let root = h.server.ok("list_files", json!({"session_id": id})).await;
    let data = root["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "data")
        .expect("the root lists data/");
    assert_eq!(data["kind"], "directory");
    let missing = h
        .server
        .err(
            "read_file",
            json!({"session_id": id, "file_path": "nope.txt"}),
        )
        .await;
    assert!(missing.contains("does not exist"), "{missing}");
    let dir = h
        .server
        .err("read_file", json!({"session_id": id, "file_path": "data"}))
        .await;
    assert!(dir.contains("directory"), "{dir}");
    let not_dir = h
        .server
        .err(
            "list_files",
            json!({"session_id": id, "path": "data/in.csv"}),
        )
        .await;
    assert!(not_dir.contains("not a directory"), "{not_dir}");
    h.stop().await;
}

/// Absolute and relative paths, each way: what a tool writes the code reads
/// by the same name, and what the code writes a tool reads by the same name;
/// the default directory of list_files is the code's working directory.
async fn a_path_names_the_same_file_for_the_tools_and_the_code(kind: Kind) {
    let h = Harness::start(kind, &[]).await;
    let id = h.server.create().await;
    for (path, content) in [("/data/in.txt", "absolute"), ("rel/in.txt", "relative")] {
        h.server
            .ok(
                "write_file",
                json!({"session_id": id, "file_path": path, "content": content}),
            )
            .await;
        let r = h.server.run(&id, &format!("open({path:?}).read()")).await;
        assert_eq!(unquoted(&r["value"]), content, "{path}: {r}");
    }
    let r = h
        .server
        .run(
            &id,
            "import os\nos.makedirs('/data/out', exist_ok=True)\nopen('/data/out/abs.txt', 'w').write('from code, absolute')\nos.makedirs('relout', exist_ok=True)\nopen('relout/rel.txt', 'w').write('from code, relative')\nos.getcwd()",
        )
        .await;
    assert_eq!(
        unquoted(&r["value"]),
        "/",
        "the code's working directory: {r}"
    );
    for (path, content) in [
        ("/data/out/abs.txt", "from code, absolute"),
        ("relout/rel.txt", "from code, relative"),
        ("/relout/rel.txt", "from code, relative"),
    ] {
        let read = h
            .server
            .ok("read_file", json!({"session_id": id, "file_path": path}))
            .await;
        assert_eq!(read["content"], content, "{path}");
    }
    let root = h.server.ok("list_files", json!({"session_id": id})).await;
    let entry = root["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "relout")
        .expect("the default directory is where relative paths start");
    assert_eq!(entry["path"], "/relout");
    h.stop().await;
}

async fn binary_files_round_trip_byte_exact(kind: Kind) {
    let h = Harness::start(kind, &[]).await;
    let id = h.server.create().await;
    let bytes: Vec<u8> = (0..=255u8).chain([0, 0xff, 0xfe, b'\r', b'\n']).collect();
    let b64 = base64::engine::general_purpose::STANDARD.encode(&bytes);
    h.server
        .ok(
            "upload_file",
            json!({"session_id": id, "file_name": "blob.bin", "file_content": b64, "destination_path": "/up", "encoding": "base64"}),
        )
        .await;
    let r = h
        .server
        .run(
            &id,
            "import hashlib\nhashlib.sha256(open('up/blob.bin','rb').read()).hexdigest()",
        )
        .await;
    let expected = {
        use sha2::Digest;
        format!("{:x}", sha2::Sha256::digest(&bytes))
    };
    assert_eq!(unquoted(&r["value"]), expected);
    h.server
        .run(&id, "open('up/made.bin', 'wb').write(bytes(range(256)))")
        .await;
    for (path, want) in [
        ("/up/blob.bin", bytes.clone()),
        ("up/made.bin", (0..=255u8).collect()),
    ] {
        let back = h
            .server
            .ok("read_file", json!({"session_id": id, "file_path": path}))
            .await;
        assert_eq!(back["encoding"], "base64");
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(back["content"].as_str().unwrap())
            .unwrap();
        assert_eq!(decoded, want, "{path}");
    }
    let bad = h
        .server
        .err(
            "write_file",
            json!({"session_id": id, "file_path": "x", "content": "%%%", "encoding": "base64"}),
        )
        .await;
    assert!(bad.contains("base64"), "{bad}");
    h.stop().await;
}

async fn paths_that_leave_the_sandbox_are_refused(kind: Kind) {
    let h = Harness::start(kind, &[]).await;
    let id = h.server.create().await;
    for (path, expect) in [
        ("../canary.txt", "outside the sandbox"),
        ("/../../../../etc/passwd", "outside the sandbox"),
        ("a/../../x", "outside the sandbox"),
        ("ok.txt\u{0}/../../etc/passwd", "control character"),
        ("..\\..\\etc\\passwd", "backslash"),
        ("C:/Windows/win.ini", "drive"),
    ] {
        let msg = h
            .server
            .err("read_file", json!({"session_id": id, "file_path": path}))
            .await;
        assert!(msg.contains(expect), "{path:?}: {msg}");
        let msg = h
            .server
            .err(
                "write_file",
                json!({"session_id": id, "file_path": path, "content": "pwned"}),
            )
            .await;
        assert!(msg.contains(expect), "{path:?}: {msg}");
    }
    let msg = h
        .server
        .err("list_files", json!({"session_id": id, "path": "../.."}))
        .await;
    assert!(msg.contains("outside the sandbox"), "{msg}");
    let msg = h
        .server
        .err(
            "upload_file",
            json!({"session_id": id, "file_name": "../x", "file_content": "x"}),
        )
        .await;
    assert!(msg.contains("file_name"), "{msg}");
    h.stop().await;
}

async fn unknown_ids_are_refused_and_close_is_final(kind: Kind) {
    let h = Harness::start(kind, &[]).await;
    let msg = h
        .server
        .err("execute_code", json!({"session_id": "nobody", "code": "1"}))
        .await;
    assert!(msg.contains("no sandbox with id 'nobody'"), "{msg}");
    let id = h.server.create().await;
    h.server.run(&id, "x = 1").await;
    let closed = h
        .server
        .ok("close_sandbox", json!({"session_id": id}))
        .await;
    assert_eq!(closed["closed"], true);
    if let Some(fake) = &h.fake {
        assert!(fake.live().is_empty(), "closing kills the E2B sandbox");
    }
    let again = h
        .server
        .ok("close_sandbox", json!({"session_id": id}))
        .await;
    assert_eq!(again["closed"], false);
    let msg = h
        .server
        .err("execute_code", json!({"session_id": id, "code": "x"}))
        .await;
    assert!(msg.contains("no sandbox"), "{msg}");
    h.stop().await;
}

async fn status_shows_each_sandboxs_backend(kind: Kind) {
    let h = Harness::start(kind, &[]).await;
    let created = h
        .server
        .ok("create_sandbox", json!({"session_id": "mine"}))
        .await;
    assert_eq!(created["created"], true);
    assert_eq!(created["backend"], h.backend());
    let again = h
        .server
        .ok("create_sandbox", json!({"session_id": "mine"}))
        .await;
    assert_eq!(again["created"], false, "an existing id is reported");
    let all = h.server.ok("get_sandbox_status", json!({})).await;
    assert_eq!(all["count"], 1);
    assert_eq!(all["sandboxes"][0]["backend"], h.backend());
    assert_eq!(all["sandboxes"][0]["session_id"], "mine");
    if let Some(fake) = &h.fake {
        assert_eq!(fake.created(), 1, "an existing id creates nothing on E2B");
    }
    h.stop().await;
}

async fn output_past_the_limit_is_cut_and_kept_in_a_file(kind: Kind) {
    let h = Harness::start(kind, &[("SANDBOX_OUTPUT_LIMIT_BYTES", "2000")]).await;
    let id = h.server.create().await;
    let result = h
        .server
        .exec(&id, "for i in range(2000):\n    print(f'line {i}')")
        .await;
    assert_ne!(
        result.is_error,
        Some(true),
        "output cut short is not an error: the code ran to the end"
    );
    let s = structured(&result);
    assert_eq!(
        s["limit"]["kind"], "output",
        "hitting the output limit is reported"
    );
    assert_eq!(s["stdout"]["truncated"], true);
    let inline = s["stdout"]["text"].as_str().unwrap();
    assert!(inline.len() <= 2000, "{}", inline.len());
    assert!(inline.starts_with("line 0\nline 1\n"), "the head is kept");
    assert!(
        inline.ends_with("line 1998\nline 1999\n"),
        "the tail is kept: {inline}"
    );
    let path = s["stdout"]["full_output_path"].as_str().unwrap().to_owned();
    assert!(
        text(&result).contains(&path),
        "the text block says where the whole output is: {}",
        text(&result)
    );
    let whole = h
        .server
        .ok("read_file", json!({"session_id": id, "file_path": path}))
        .await;
    let content = whole["content"].as_str().unwrap();
    assert!(
        content.ends_with("line 1999\n"),
        "the file holds everything"
    );
    assert_eq!(content.lines().count(), 2000);
    h.stop().await;
}

async fn create_run_close_leaves_nothing_behind(kind: Kind) {
    let h = Harness::start(kind, &[]).await;
    let r = h
        .server
        .ok("create_run_close", json!({"code": "print('hi'); 6 * 7"}))
        .await;
    assert_eq!(r["stdout"]["text"], "hi\n");
    assert_eq!(r["value"], "42");
    let status = h.server.ok("get_sandbox_status", json!({})).await;
    assert_eq!(status["count"], 0);
    if let Some(fake) = &h.fake {
        assert_eq!(fake.created(), 1);
        assert!(fake.live().is_empty());
    }
    h.stop().await;
}

async fn a_cancelled_execution_stops_and_the_sandbox_goes_on(kind: Kind) {
    let h = Harness::start(kind, &[]).await;
    let id = h.server.create().await;
    let handle = h
        .server
        .call_cancellable(
            "execute_code",
            json!({"session_id": id, "code": "print('running', flush=True)\nwhile True: pass", "timeout_seconds": 120}),
        )
        .await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    handle.cancel(Some("test".into())).await.unwrap();
    // The next call waits its turn behind the cancelled one, which must stop.
    let next = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        h.server.exec(&id, "6 * 7"),
    )
    .await
    .expect("the cancelled execution stopped");
    assert_eq!(structured(&next)["value"], "42", "{}", text(&next));
    if kind == Kind::Wasm {
        assert!(
            structured(&next)["state_lost"].is_string(),
            "a local interpreter is stopped, and the result says state was lost"
        );
    }
    h.stop().await;
}
