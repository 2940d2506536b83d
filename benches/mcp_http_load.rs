//! A load run over MCP Streamable HTTP on loopback: 200 concurrent 2026-07-28
//! clients (rmcp's) across 50 named sandboxes for 60 s (set
//! `MCP_HTTP_LOAD_SECONDS` for a shorter run), each running `1+1` back to
//! back. Fails on any error; prints calls/s, p50/p99/max latency and the
//! server's resident memory per sandbox.
//!
//! `cargo bench --bench mcp_http_load` (CI runs it for a few seconds).

mod http_server;

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use http_server::{Era, Server, call, try_call};

const CLIENTS: usize = 200;
const SANDBOXES: usize = 50;

fn main() {
    let seconds: u64 = std::env::var("MCP_HTTP_LOAD_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(load(Duration::from_secs(seconds)));
}

async fn load(duration: Duration) {
    let server = Arc::new(
        Server::start(&[("SANDBOX_MAX_SANDBOXES", "64"), ("SANDBOX_POOL_SIZE", "0")]).await,
    );
    let rss_before = server.rss_kib();
    let setup = server.client(Era::Stateless).await;
    for s in 0..SANDBOXES {
        call(
            &setup,
            "create_sandbox",
            json!({"session_id": format!("load-{s}")}),
        )
        .await;
        call(
            &setup,
            "execute_code",
            json!({"session_id": format!("load-{s}"), "code": "1+1"}),
        )
        .await;
    }
    let rss_sandboxes = server.rss_kib();
    setup.cancel().await.unwrap();

    let until = Instant::now() + duration;
    let mut clients = Vec::new();
    for c in 0..CLIENTS {
        let server = server.clone();
        clients.push(tokio::spawn(async move {
            let client = server.client(Era::Stateless).await;
            let id = format!("load-{}", c % SANDBOXES);
            let mut latencies = Vec::new();
            let mut errors = Vec::new();
            while Instant::now() < until {
                let started = Instant::now();
                match try_call(
                    &client,
                    "execute_code",
                    json!({"session_id": id, "code": "1+1"}),
                )
                .await
                {
                    Ok(r) if r["value"] == "2" => latencies.push(started.elapsed()),
                    Ok(r) => errors.push(format!("unexpected result {r}")),
                    Err(e) => errors.push(e),
                }
            }
            client.cancel().await.unwrap();
            (latencies, errors)
        }));
    }
    let mut latencies = Vec::new();
    let mut errors = Vec::new();
    for client in clients {
        let (l, e) = client.await.unwrap();
        latencies.extend(l);
        errors.extend(e);
    }
    report(
        &mut latencies,
        duration,
        rss_before,
        rss_sandboxes,
        server.rss_kib(),
    );
    assert!(
        errors.is_empty(),
        "{} errors, first: {:?}",
        errors.len(),
        errors.first()
    );
}

fn report(latencies: &mut [Duration], duration: Duration, before: u64, idle: u64, after: u64) {
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    println!(
        "mcp_http_load: {CLIENTS} clients, {SANDBOXES} sandboxes, {}s: {} calls ({:.0}/s), p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms, 0 errors",
        duration.as_secs(),
        latencies.len(),
        latencies.len() as f64 / duration.as_secs_f64(),
        at(0.50).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3,
        at(1.0).as_secs_f64() * 1e3,
    );
    println!(
        "mcp_http_load: resident memory {:.1} MiB before, {:.1} MiB with {SANDBOXES} idle sandboxes ({:.2} MiB each), {:.1} MiB after the run",
        before as f64 / 1024.0,
        idle as f64 / 1024.0,
        (idle - before) as f64 / 1024.0 / SANDBOXES as f64,
        after as f64 / 1024.0,
    );
}
