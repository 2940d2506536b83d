//! Load: many sandboxes cycling through create, execute, write, read and close
//! at once, for a bounded time, then a check that the server holds no more
//! memory, threads, file descriptors or directories than before.
//!
//! CI runs the short form (about 20 s); set `SANDBOX_SOAK_SECONDS` for longer.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::Server;

/// What the server process holds.
#[derive(Debug, Clone, Copy)]
struct Holdings {
    rss_kib: u64,
    threads: u64,
    fds: usize,
}

fn holdings(pid: u32) -> Holdings {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap()
    };
    Holdings {
        rss_kib: field("VmRSS:"),
        threads: field("Threads:"),
        fds: std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .count(),
    }
}

async fn cycle(server: &Server, worker: usize, round: usize) {
    let id = server.create().await;
    let r = server
        .run(
            &id,
            &format!("x = {worker} * 1000 + {round}\nprint('w', x)\nx + 1"),
        )
        .await;
    assert_eq!(r["value"], (worker * 1000 + round + 1).to_string());
    let path = format!("/data/{round}.txt");
    server
        .ok(
            "write_file",
            json!({"session_id": id, "file_path": path, "content": "payload ".repeat(500)}),
        )
        .await;
    let back = server
        .ok("read_file", json!({"session_id": id, "file_path": path}))
        .await;
    assert_eq!(back["size"], 4000);
    let r = server
        .run(&id, &format!("len(open('{path}').read())"))
        .await;
    assert_eq!(r["value"], "4000");
    server.ok("close_sandbox", json!({"session_id": id})).await;
}

#[tokio::test]
async fn a_soak_of_concurrent_sandbox_cycles_leaks_nothing() {
    let seconds: u64 = std::env::var("SANDBOX_SOAK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let server = Server::start_with(&[("SANDBOX_POOL_SIZE", "2")]).await;
    // Warm up: every code path once, and the pool full again.
    for round in 0..3 {
        cycle(&server, 0, round).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = holdings(server.pid);
    let dirs_before = server.sandbox_dirs().len();

    let deadline = Instant::now() + Duration::from_secs(seconds);
    let workers = (1..=6).map(|worker| {
        let server = &server;
        async move {
            let mut rounds = 0;
            while Instant::now() < deadline {
                cycle(server, worker, rounds).await;
                rounds += 1;
            }
            rounds
        }
    });
    let rounds: usize = futures::future::join_all(workers).await.into_iter().sum();
    assert!(
        rounds >= 6,
        "each worker finished at least one cycle ({rounds} in all)"
    );

    // Let the pool refill, closed interpreters wind down, and idle threads of
    // tokio's blocking pool retire (they linger 10 s after their last task).
    let mut after = holdings(server.pid);
    for _ in 0..30 {
        if after.threads <= before.threads + 2 && after.fds <= before.fds + 2 {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        after = holdings(server.pid);
    }
    eprintln!("soak: {rounds} cycles in {seconds} s; before {before:?}, after {after:?}");
    let status = server.ok("get_sandbox_status", json!({})).await;
    assert_eq!(status["count"], 0, "every sandbox was closed");
    assert_eq!(
        server.sandbox_dirs().len(),
        dirs_before,
        "no directory left behind"
    );
    assert!(
        after.fds <= before.fds + 2,
        "file descriptors: {before:?} -> {after:?}"
    );
    assert!(
        after.threads <= before.threads + 2,
        "threads: {before:?} -> {after:?}"
    );
    assert!(
        after.rss_kib <= before.rss_kib + 96 * 1024,
        "resident memory grew by more than 96 MiB: {before:?} -> {after:?}"
    );
    server.stop().await;
}
