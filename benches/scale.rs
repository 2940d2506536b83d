//! Scale: resident memory added per idle sandbox (over 50), 100 sandboxes
//! alive at once, and the aggregate throughput of CPU-bound executions in 1,
//! 2 and 4 sandboxes running at the same time.

mod common;

use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use mcp_code_sandbox::app::App;
use mcp_code_sandbox::sandbox::manager::{CreateRequest, Sandbox};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

fn app(rt: &tokio::runtime::Runtime) -> App {
    common::app(rt, "scale", &["--pool-size", "0", "--max-sandboxes", "200"])
}

/// Resident memory of this process, in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

async fn create_many(app: &App, n: usize) -> Vec<Arc<Sandbox>> {
    let mut sandboxes = Vec::with_capacity(n);
    for _ in 0..n {
        sandboxes.push(
            app.manager
                .create(CreateRequest::default())
                .await
                .unwrap()
                .0,
        );
    }
    sandboxes
}

fn memory_and_alive(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let app = app(&rt);
    // Warm the process up (code paths, allocator) before the baseline.
    rt.block_on(async {
        let warm = create_many(&app, 2).await;
        drop(warm);
        app.manager.close_all().await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    });
    let before = rss();
    let idle = rt.block_on(create_many(&app, 50));
    rt.block_on(async { tokio::time::sleep(Duration::from_millis(300)).await });
    let after = rss();
    let per_sandbox = after.saturating_sub(before) as f64 / 50.0 / (1 << 20) as f64;
    eprintln!(
        "scale: resident memory per idle sandbox: {per_sandbox:.1} MiB (50 sandboxes; RSS {:.0} -> {:.0} MiB)",
        before as f64 / (1 << 20) as f64,
        after as f64 / (1 << 20) as f64
    );
    drop(idle);
    rt.block_on(app.manager.close_all());

    let mut group = c.benchmark_group("scale");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(30));
    group.bench_function("create_100_alive_then_run_in_each", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let started = Instant::now();
                    let all = create_many(&app, 100).await;
                    for s in &all {
                        let e = s
                            .execute("1".into(), None, CancellationToken::new(), None)
                            .await
                            .unwrap();
                        assert_eq!(e.value.as_deref(), Some("1"));
                    }
                    total += started.elapsed();
                    drop(all);
                    app.manager.close_all().await;
                }
                total
            })
        })
    });
    group.finish();
}

fn throughput(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let app = app(&rt);
    let sandboxes = rt.block_on(create_many(&app, 4));
    let fib = "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)";
    for s in &sandboxes {
        rt.block_on(common::run_ok(s, fib));
    }
    let mut group = c.benchmark_group("scale/cpu_bound_fib25_concurrent");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    for k in [1usize, 2, 4] {
        group.throughput(Throughput::Elements(k as u64));
        group.bench_function(format!("{k}_sandboxes"), |b| {
            b.to_async(&rt).iter(|| {
                futures::future::join_all(
                    sandboxes[..k].iter().map(|s| common::run_ok(s, "fib(25)")),
                )
            })
        });
    }
    group.finish();
    rt.block_on(app.manager.close_all());
}

criterion_group!(benches, memory_and_alive, throughput);
criterion_main!(benches);
