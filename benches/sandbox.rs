//! Library-level latency: sandbox creation (cold and from the warm pool),
//! trivial executions, create-run-close, the file tools, and a guest's own
//! look-ups of files (one that is there, one that is not); creation and
//! trivial executions also for the scientific runtime, when it is fetched.

mod common;

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use mcp_code_sandbox::sandbox::GuestPath;
use mcp_code_sandbox::sandbox::manager::{CreateRequest, Sandbox};
use tokio_util::sync::CancellationToken;

fn create(c: &mut Criterion) {
    // The first group: no thread of the bench's runs yet.
    common::as_the_binary_starts();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut group = c.benchmark_group("create_sandbox");
    group
        .sample_size(30)
        .measurement_time(Duration::from_secs(10));
    // (name, runtime, pool size, fuel on, pause between samples for the pool
    // to refill); `cold_fuel_on` shows what metering adds to Python's start.
    for (name, runtime, pool, fuel_on, pause) in [
        ("cold", "python-3.12", "0", false, 0),
        ("cold_fuel_on", "python-3.12", "0", true, 0),
        ("warm_pool", "python-3.12", "4", false, 150),
        ("cold_scientific", "scientific", "0", false, 0),
        ("warm_pool_scientific", "scientific", "4", false, 500),
    ] {
        let mut flags = vec!["--pool-size", pool, "--runtime", runtime];
        if fuel_on {
            flags.extend(["--fuel", "5000000000000"]);
        }
        let Some(app) = common::try_app(&rt, "sandbox", &flags) else {
            continue;
        };
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        // Let the pool refill between samples, outside the timed part.
                        tokio::time::sleep(Duration::from_millis(pause)).await;
                        let started = std::time::Instant::now();
                        let (sandbox, _) =
                            app.manager.create(CreateRequest::default()).await.unwrap();
                        total += started.elapsed();
                        common::close(&app, sandbox).await;
                    }
                    total
                })
            })
        });
        rt.block_on(app.manager.close_all());
    }
    group.finish();
}

fn execute(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let app = common::app(&rt, "sandbox", &[]);
    let (sandbox, _) = rt
        .block_on(app.manager.create(CreateRequest::default()))
        .unwrap();
    let mut group = c.benchmark_group("execute_code");
    // `1 + 1` in a live sandbox, checking the answer.
    let trivial = |group: &mut criterion::BenchmarkGroup<_>, name: &str, sandbox: &Sandbox| {
        group.bench_function(name, |b| {
            b.to_async(&rt).iter(|| async {
                let e = sandbox
                    .execute("1 + 1".into(), None, CancellationToken::new(), None)
                    .await
                    .unwrap();
                assert_eq!(e.value.as_deref(), Some("2"));
            })
        });
    };
    trivial(&mut group, "trivial_expression", &sandbox);
    group.bench_function("print", |b| {
        b.to_async(&rt).iter(|| async {
            sandbox
                .execute(
                    "print('hello')".into(),
                    None,
                    CancellationToken::new(),
                    None,
                )
                .await
                .unwrap()
        })
    });
    let scientific = CreateRequest {
        runtime: Some("scientific".into()),
        ..CreateRequest::default()
    };
    match rt.block_on(app.manager.create(scientific)) {
        Ok((scientific, _)) => trivial(&mut group, "trivial_expression_scientific", &scientific),
        Err(e) => eprintln!("note: skipping the scientific runtime: {e}"),
    }
    group.finish();

    let mut files = c.benchmark_group("file_tools");
    let data = vec![b'x'; 1 << 20];
    let path = GuestPath::parse("/bench.bin").unwrap();
    files.bench_function("write_then_read_1MiB", |b| {
        b.to_async(&rt).iter(|| async {
            sandbox.write(path.clone(), data.clone()).await.unwrap();
            let back = sandbox.read(path.clone(), 0, 2 << 20).await.unwrap();
            assert_eq!(back.bytes.len(), 1 << 20);
        })
    });
    files.finish();

    // What imports, `os.path.exists` and friends pay for each look-up: a
    // WASI call, its path checked beneath the sandbox's directory.
    let mut lookups = c.benchmark_group("guest_file_lookups");
    let setup = "import os\nopen('/here.txt', 'w').close()";
    lookups.bench_function("stat_existing_file", |b| {
        b.iter_custom(|iters| {
            common::guest_loop(&rt, &sandbox, setup, "os.stat('/here.txt')", iters)
        })
    });
    lookups.bench_function("exists_missing_file", |b| {
        b.iter_custom(|iters| {
            common::guest_loop(
                &rt,
                &sandbox,
                setup,
                "os.path.exists('/not-here.txt')",
                iters,
            )
        })
    });
    lookups.finish();
    rt.block_on(app.manager.close_all());
}

criterion_group!(benches, create, execute);
criterion_main!(benches);
