//! Files the server writes into a sandbox (spilled output, saved figures)
//! never make the sandbox's own writes fail: the oldest give way first, and
//! `get_sandbox_status` says so (the review's attack: four executions
//! printing 20 MB each under a 20 MiB quota, then a 5-byte `write_file`),
//! on both runtimes, over stdio and HTTP.

use serde_json::{Value, json};

use crate::disk_blocks::held_on_disk;
use crate::support::http::{Era, HttpServer, call};
use crate::support::{Server, sandbox_dirs_under, scientific_cache, structured, text};

/// Prints 20 MB (more than the 16 MiB a stream may save).
const FLOOD: &str = "import sys\nfor _ in range(20):\n    sys.stdout.write('o' * 1_000_000)";

/// The server's files in a status answer.
fn server_files(status: &Value) -> &Value {
    &status["sandboxes"][0]["usage"]["server_files"]
}

async fn spilled_output_gives_way(runtime: &str) {
    if runtime == "scientific" {
        scientific_cache();
    }
    let server =
        Server::start_with(&[("SANDBOX_DISK_QUOTA_MB", "20"), ("SANDBOX_POOL_SIZE", "0")]).await;
    let id = server.create_with(json!({"runtime": runtime})).await;
    let exec = |code: &'static str| {
        server.call(
            "execute_code",
            json!({"session_id": id, "code": code, "timeout_seconds": 240}),
        )
    };
    for _ in 0..4 {
        let r = exec(FLOOD).await;
        assert_eq!(structured(&r)["stdout"]["truncated"], true, "{}", text(&r));
    }
    let dir = server.sandbox_dirs()[0].clone();
    let held = held_on_disk(&dir);
    assert!(held <= 20 << 20, "{held} bytes held under a 20 MiB quota");
    let status = server
        .ok("get_sandbox_status", json!({"session_id": id}))
        .await;
    let before = server_files(&status).clone();
    assert!(before["bytes"].as_u64().unwrap() > 8 << 20, "{status}");

    // The sandbox's own writes go through, the server's files making room.
    let wrote = server
        .call(
            "write_file",
            json!({"session_id": id, "file_path": "notes.txt", "content": "hello"}),
        )
        .await;
    assert_ne!(wrote.is_error, Some(true), "{}", text(&wrote));
    let r = exec("open('/mine.bin', 'wb').write(b'm' * 12_000_000)").await;
    assert_eq!(structured(&r)["value"], "12000000", "{}", text(&r));
    assert!(structured(&r)["limit"].is_null(), "{}", text(&r));

    // Output being saved gives way too, cut where it is; the result says so.
    let r = exec(
        "import sys\nsys.stdout.write('p' * 6_000_000)\nopen('/more.bin', 'wb').write(b'n' * 6_000_000)",
    )
    .await;
    let s = structured(&r);
    assert_eq!(s["value"], "6000000", "{}", text(&r));
    assert!(
        s["stdout"]["text"].as_str().unwrap().contains("gave way"),
        "{}",
        s["stdout"]["text"]
    );
    let status = server
        .ok("get_sandbox_status", json!({"session_id": id}))
        .await;
    let after = server_files(&status);
    assert!(after["given_way_files"].as_u64().unwrap() >= 2, "{status}");
    assert!(
        after["given_way_bytes"].as_u64().unwrap() >= 12 << 20,
        "{status}"
    );
    let mine = server
        .run(&id, "import os\n(os.path.getsize('/mine.bin'), os.path.getsize('/more.bin'), open('/notes.txt').read())")
        .await;
    assert_eq!(mine["value"], "(12000000, 6000000, 'hello')");
    assert!(held_on_disk(&dir) <= 20 << 20);
    let gone = server
        .err(
            "read_file",
            json!({"session_id": id, "file_path": "/.outputs/exec-1-stdout.txt"}),
        )
        .await;
    assert!(gone.contains("give way"), "{gone}");
    server.stop().await;
}

#[tokio::test]
async fn spilled_output_gives_way_to_the_sandboxs_own_files_on_the_small_runtime() {
    spilled_output_gives_way("python-3.12").await;
}

#[tokio::test]
async fn spilled_output_gives_way_to_the_sandboxs_own_files_on_the_scientific_runtime() {
    spilled_output_gives_way("scientific").await;
}

#[tokio::test]
async fn spilled_output_gives_way_to_write_file_over_http() {
    let server =
        HttpServer::start(&[("SANDBOX_DISK_QUOTA_MB", "20"), ("SANDBOX_POOL_SIZE", "0")]).await;
    let client = server.client(Era::Session, None).await;
    let created = call(&client, "create_sandbox", json!({"session_id": "spill"})).await;
    assert_ne!(created.is_error, Some(true), "{}", text(&created));
    for _ in 0..4 {
        let r = call(
            &client,
            "execute_code",
            json!({"session_id": "spill", "code": FLOOD}),
        )
        .await;
        assert_eq!(structured(&r)["stdout"]["truncated"], true, "{}", text(&r));
    }
    let wrote = call(
        &client,
        "write_file",
        json!({"session_id": "spill", "file_path": "notes.txt", "content": "w".repeat(9 << 20)}),
    )
    .await;
    assert_ne!(wrote.is_error, Some(true), "{}", text(&wrote));
    let status = structured(&call(&client, "get_sandbox_status", json!({})).await);
    assert!(
        server_files(&status)["given_way_files"].as_u64().unwrap() >= 1,
        "{status}"
    );
    let dirs = sandbox_dirs_under(&server.root);
    assert!(held_on_disk(&dirs[0]) <= 20 << 20);
    client.cancel().await.unwrap();
}

/// When the sandbox's own files fill its quota, a long output is still cut
/// as usual and says how much of it could be saved; the call reports the
/// output limit, not a write of the code's that never failed.
#[tokio::test]
async fn a_full_quota_cuts_the_saved_copy_of_a_long_output_without_blaming_the_code() {
    let server = Server::start_with(&[
        ("SANDBOX_DISK_QUOTA_MB", "4"),
        ("SANDBOX_POOL_SIZE", "0"),
        ("SANDBOX_RUNTIME", "python-3.12"),
    ])
    .await;
    let id = server.create().await;
    let fill = "f = open('/fill', 'wb')\ntry:\n    for _ in range(100):\n        f.write(b'x' * 65536); f.flush()\nexcept OSError as e:\n    print(e)";
    let filled = structured(&server.exec(&id, fill).await).clone();
    assert_eq!(filled["limit"]["kind"], "disk", "{filled}");
    let flood = structured(
        &server
            .exec(&id, "for i in range(200000): print('line', i)")
            .await,
    )
    .clone();
    assert_eq!(flood["error"], Value::Null, "{flood}");
    assert_eq!(flood["limit"]["kind"], "output", "{flood}");
    let said = flood["stdout"]["text"].as_str().unwrap_or_default();
    assert!(said.contains("the disk quota stopped it"), "{said}");
    assert!(said.contains("line 199999"), "the tail is kept: {said}");
    server.stop().await;
}
