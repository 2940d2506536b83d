//! Durable sandboxes under attack and mishap: a stopped execution, a client
//! that closes stdin while a call runs, and files planted in a dead server's
//! directory by whoever else can write the sandbox root (a link in place of
//! a page segment, FIFOs in place of its lease and record). Each must leave
//! the sandboxes as promised, never read outside them, and never hang.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{kill_outright, process_gone, scientific_server_on, structured, text};

/// The server directories under `root`.
fn server_dirs(root: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(root)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("server-")
        })
        .collect()
}

/// The memory directories of the sandboxes under `root`.
fn memory_dirs(root: &Path) -> Vec<PathBuf> {
    server_dirs(root)
        .into_iter()
        .flat_map(|server| {
            std::fs::read_dir(server)
                .unwrap()
                .flatten()
                .map(|e| e.path())
        })
        .filter(|p| p.extension().is_some_and(|x| x == "memory"))
        .collect()
}

fn mkfifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        path,
        rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
    )
    .unwrap();
}

#[tokio::test]
async fn a_sandbox_stays_durable_after_an_execution_is_stopped() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let first = scientific_server_on(&root, &[]).await;
    first.ok("create_sandbox", json!({"session_id": "t"})).await;
    first
        .run("t", "open('important.csv', 'w').write('a,b\\n1,2\\n')")
        .await;
    let stopped = first
        .call(
            "execute_code",
            json!({"session_id": "t", "code": "while True: pass", "timeout_seconds": 1}),
        )
        .await;
    assert!(text(&stopped).contains("time limit"), "{}", text(&stopped));
    first.run("t", "after = 'the stop'").await;
    kill_outright(first).await;

    let second = scientific_server_on(&root, &[]).await;
    let back = second
        .exec("t", "(after, open('important.csv').read())")
        .await;
    assert_eq!(
        structured(&back)["value"],
        "('the stop', 'a,b\\n1,2\\n')",
        "{}",
        text(&back)
    );
    second.stop().await;
}

#[tokio::test]
async fn a_client_closing_stdin_during_a_call_loses_only_that_call() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let first = scientific_server_on(&root, &[]).await;
    for id in ["busy", "idle"] {
        first.ok("create_sandbox", json!({"session_id": id})).await;
        first.run(id, &format!("name = '{id}'")).await;
    }
    let peer = first.client.peer().clone();
    let running = tokio::spawn(async move {
        let Ok(serde_json::Value::Object(args)) = serde_json::to_value(
            json!({"session_id": "busy", "code": "import time\ntime.sleep(60)"}),
        ) else {
            unreachable!()
        };
        peer.call_tool(rmcp::model::CallToolRequestParams::new("execute_code").with_arguments(args))
            .await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pid = first.pid;
    let stopping = Instant::now();
    first.stop().await;
    let took = stopping.elapsed().max(process_gone(pid).await);
    running.abort();
    assert!(
        took < Duration::from_secs(1),
        "the server took {took:?} to exit with a call running"
    );

    let second = scientific_server_on(&root, &[]).await;
    assert_eq!(second.run("idle", "name").await["value"], "'idle'");
    let back = second.exec("busy", "name").await;
    assert_eq!(structured(&back)["value"], "'busy'", "{}", text(&back));
    assert!(
        text(&back).contains("the last execution did not finish"),
        "{}",
        text(&back)
    );
    second.stop().await;
}

#[tokio::test]
async fn a_segment_replaced_by_a_link_is_never_followed() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let first = scientific_server_on(&root, &[]).await;
    first.ok("create_sandbox", json!({"session_id": "s"})).await;
    first.run("s", "block = bytearray(4 << 20)").await;
    kill_outright(first).await;

    // A file the guest must never see, as large as any segment.
    let secret = tmp.path().join("secret");
    std::fs::write(&secret, b"TOPSECRET-".repeat(4 << 20)).unwrap();
    let mut replaced = 0;
    for memory in memory_dirs(&root) {
        for entry in std::fs::read_dir(&memory).unwrap().flatten() {
            if entry.file_name().to_string_lossy().starts_with("segment-") {
                std::fs::remove_file(entry.path()).unwrap();
                std::os::unix::fs::symlink(&secret, entry.path()).unwrap();
                replaced += 1;
            }
        }
    }
    assert!(replaced > 0, "the sandbox had page segments");

    let second = scientific_server_on(&root, &[]).await;
    let back = second
        .call(
            "execute_code",
            json!({"session_id": "s", "code": "bytes(block[:64]) if 'block' in globals() else 'no block'"}),
        )
        .await;
    let said = text(&back);
    assert!(!said.contains("TOPSECRET"), "the link was followed: {said}");
    assert!(
        said.contains("damaged") || said.contains("cannot be restored") || said.contains("lost"),
        "the client is told the state was not used: {said}"
    );
    // The server goes on serving.
    second
        .ok("create_sandbox", json!({"session_id": "other"}))
        .await;
    assert_eq!(second.run("other", "1 + 1").await["value"], "2");
    second.stop().await;
}

#[tokio::test]
async fn fifos_planted_in_a_dead_servers_directory_do_not_hang_the_next_start() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let first = scientific_server_on(&root, &[]).await;
    for id in ["a", "b"] {
        first.ok("create_sandbox", json!({"session_id": id})).await;
        first.run(id, "x = 1").await;
    }
    kill_outright(first).await;
    for server in server_dirs(&root) {
        mkfifo(&server.join("lease"));
    }
    let memories = memory_dirs(&root);
    assert_eq!(memories.len(), 2);
    mkfifo(&memories[0].join("journal"));
    mkfifo(&memories[1].join("meta.json"));

    let started = Instant::now();
    let second = tokio::time::timeout(Duration::from_secs(60), scientific_server_on(&root, &[]))
        .await
        .expect("the next server starts");
    for id in ["a", "b"] {
        let answer = tokio::time::timeout(
            Duration::from_secs(60),
            second.call("execute_code", json!({"session_id": id, "code": "1 + 1"})),
        )
        .await
        .expect("the call is answered, not left hanging");
        assert!(!text(&answer).is_empty());
    }
    assert!(started.elapsed() < Duration::from_secs(60));
    second.stop().await;
}
