//! End to end over MCP stdio against the real binary, as a client sees it:
//! `execute_code` round trips (back to back, and after a pause), and
//! `create_sandbox` and `create_run_close` from the warm pool and cold.

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

type Client = RunningService<RoleClient, ()>;

async fn start(pool: &str) -> Client {
    let root = std::env::temp_dir().join(format!("mcp-bench-stdio-{}-{pool}", std::process::id()));
    let cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_mcp-code-sandbox")).configure(|c| {
        c.env("SANDBOX_LOG", "warn")
            .env("SANDBOX_RUNTIME", "python-3.12")
            .env("SANDBOX_POOL_SIZE", pool)
            .env("SANDBOX_ROOT", &root);
    });
    let client = ().serve(TokioChildProcess::new(cmd).unwrap()).await.unwrap();
    // Wait until the runtime is loaded (and the pool filled).
    let id = call(&client, "create_sandbox", json!({})).await["session_id"].clone();
    call(&client, "close_sandbox", json!({"session_id": id})).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    client
}

async fn call(client: &Client, tool: &str, args: Value) -> Value {
    let Value::Object(args) = args else {
        unreachable!()
    };
    let r = client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args))
        .await
        .unwrap();
    assert_ne!(r.is_error, Some(true), "{tool}: {:?}", r.content);
    r.structured_content.unwrap_or(Value::Null)
}

fn stdio(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut group = c.benchmark_group("mcp_stdio");

    let client = rt.block_on(start("2"));
    let id = rt.block_on(call(&client, "create_sandbox", json!({})))["session_id"].clone();
    group.bench_function("execute_code_1_plus_1", |b| {
        b.to_async(&rt).iter(|| async {
            let r = call(
                &client,
                "execute_code",
                json!({"session_id": id, "code": "1+1"}),
            )
            .await;
            assert_eq!(r["value"], "2");
        })
    });
    // The same call after 120 ms of quiet, as between an assistant's calls:
    // the difference is the operating system waking the server's threads.
    group.bench_function("execute_code_1_plus_1_after_idle", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    tokio::time::sleep(Duration::from_millis(120)).await;
                    let started = Instant::now();
                    let r = call(
                        &client,
                        "execute_code",
                        json!({"session_id": id, "code": "1+1"}),
                    )
                    .await;
                    total += started.elapsed();
                    assert_eq!(r["value"], "2");
                }
                total
            })
        })
    });
    // From the pool: pause between samples so the pool refills, then wake the
    // server with an untimed request, so that only the creation is timed (the
    // wake-up is what `execute_code_1_plus_1_after_idle` adds).
    for (name, tool, args) in [
        ("create_sandbox_warm", "create_sandbox", json!({})),
        (
            "create_run_close_print_warm",
            "create_run_close",
            json!({"code": "print(1)"}),
        ),
    ] {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        tokio::time::sleep(Duration::from_millis(120)).await;
                        client.list_tools(None).await.unwrap();
                        let started = Instant::now();
                        let r = call(&client, tool, args.clone()).await;
                        total += started.elapsed();
                        if tool == "create_sandbox" {
                            call(
                                &client,
                                "close_sandbox",
                                json!({"session_id": r["session_id"]}),
                            )
                            .await;
                        }
                    }
                    total
                })
            })
        });
    }
    // Back to back: the pool cannot keep up, so this shows the cold path too.
    group.bench_function("create_run_close_print_back_to_back", |b| {
        b.to_async(&rt)
            .iter(|| call(&client, "create_run_close", json!({"code": "print(1)"})))
    });
    rt.block_on(client.cancel()).unwrap();

    let cold = rt.block_on(start("0"));
    group.sample_size(20);
    group.bench_function("create_sandbox_cold", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let started = Instant::now();
                    let r = call(&cold, "create_sandbox", json!({})).await;
                    total += started.elapsed();
                    let id = json!({"session_id": r["session_id"]});
                    call(&cold, "close_sandbox", id).await;
                }
                total
            })
        })
    });
    rt.block_on(cold.cancel()).unwrap();
    group.finish();
}

criterion_group!(benches, stdio);
criterion_main!(benches);
