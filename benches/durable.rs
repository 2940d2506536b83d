//! What keeping sandboxes across restarts costs, end to end over MCP stdio
//! against the real binary with the scientific runtime: `execute_code` of
//! `1+1` with each execution's state made durable (the default) and with
//! saving off; the first call to a 150 MiB sandbox a restarted server
//! restores (once the server has loaded its runtime); and a server holding 20 sandboxes of 200 MiB stopped the way a
//! client stops it (stdin closed), timed until the process is gone.
//! Skipped, with a note, when the scientific runtime is not fetched.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

type Client = RunningService<RoleClient, ()>;

/// A server on `root` and its process id.
async fn start(root: &Path, env: &[(&str, &str)]) -> (Client, u32) {
    let cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_mcp-code-sandbox")).configure(|c| {
        c.env("SANDBOX_LOG", "warn")
            .env("SANDBOX_RUNTIME", "scientific")
            .env("SANDBOX_ROOT", root)
            .env("SANDBOX_SAVED_MAX_MB", "65536");
        for (k, v) in env {
            c.env(k, v);
        }
    });
    let transport = TokioChildProcess::new(cmd).unwrap();
    let pid = transport.id().unwrap();
    (().serve(transport).await.unwrap(), pid)
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

async fn run(client: &Client, id: &str, code: &str) -> Value {
    call(
        client,
        "execute_code",
        json!({"session_id": id, "code": code}),
    )
    .await
}

/// Closes the server's stdin and waits until its process is gone; how long
/// that took.
async fn stop(client: Client, pid: u32) -> Duration {
    let started = Instant::now();
    let closing = tokio::spawn(client.cancel());
    let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
    while rustix::process::test_kill_process(pid).is_ok() {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let took = started.elapsed();
    let _ = closing.await;
    took
}

fn root(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("mcp-bench-durable-{}-{name}", std::process::id()))
}

/// Whether the scientific runtime can be started here.
fn scientific_ready(rt: &tokio::runtime::Runtime) -> bool {
    rt.block_on(async {
        let (client, pid) = start(&root("probe"), &[("SANDBOX_KEEP_SAVED_SECONDS", "0")]).await;
        let Value::Object(args) = json!({}) else {
            unreachable!()
        };
        let made = client
            .call_tool(CallToolRequestParams::new("create_sandbox").with_arguments(args))
            .await;
        let ok = made.is_ok_and(|r| r.is_error != Some(true));
        stop(client, pid).await;
        if !ok {
            eprintln!(
                "note: skipping durable: the scientific runtime is not ready (./fetch-python.sh)"
            );
        }
        ok
    })
}

fn one_plus_one(c: &mut Criterion, rt: &tokio::runtime::Runtime) {
    let mut group = c.benchmark_group("durable");
    for (name, env) in [
        ("execute_1_plus_1_kept", vec![]),
        (
            "execute_1_plus_1_not_kept",
            vec![("SANDBOX_KEEP_SAVED_SECONDS", "0")],
        ),
    ] {
        let (client, pid) = rt.block_on(start(&root(name), &env));
        let id = rt.block_on(call(&client, "create_sandbox", json!({})))["session_id"]
            .as_str()
            .unwrap()
            .to_owned();
        rt.block_on(run(
            &client,
            &id,
            "import numpy as np\nframe = np.zeros(1000)",
        ));
        group.bench_function(name, |b| {
            b.to_async(rt).iter(|| async {
                assert_eq!(run(&client, &id, "1+1").await["value"], "2");
            })
        });
        rt.block_on(stop(client, pid));
    }
    group.finish();
}

fn restore(c: &mut Criterion, rt: &tokio::runtime::Runtime) {
    let mut group = c.benchmark_group("durable");
    group.sample_size(10);
    let root = root("restore");
    rt.block_on(async {
        let (client, pid) = start(&root, &[]).await;
        call(&client, "create_sandbox", json!({"session_id": "big"})).await;
        run(
            &client,
            "big",
            "import numpy as np\nheap = np.full(150 << 17, 1.0)",
        )
        .await;
        stop(client, pid).await;
    });
    group.bench_function("first_call_after_restore_150mib", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let (client, pid) = start(&root, &[]).await;
                    client.list_tools(None).await.unwrap();
                    // The restore, not the runtime's load at the server's
                    // start (about 35 ms, in the background): a client's
                    // first call rarely follows its handshake that closely.
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    let started = Instant::now();
                    let value = run(&client, "big", "heap.nbytes >> 20").await;
                    total += started.elapsed();
                    assert_eq!(value["value"], "150");
                    stop(client, pid).await;
                }
                total
            })
        })
    });
    group.finish();
}

fn shutdown(c: &mut Criterion, rt: &tokio::runtime::Runtime) {
    const SANDBOXES: usize = 20;
    let mut group = c.benchmark_group("durable");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(1));
    let root = root("shutdown");
    group.bench_function("stop_with_20_sandboxes_of_200mib", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for round in 0..iters {
                    let (client, pid) = start(&root, &[]).await;
                    for i in 0..SANDBOXES {
                        let id = format!("big-{i}");
                        // Restored from the last round, or made now.
                        call(&client, "create_sandbox", json!({"session_id": id})).await;
                        let code = format!(
                            "import numpy as np\nheap = np.full(200 << 17, {round}.0)\nheap.nbytes >> 20"
                        );
                        assert_eq!(run(&client, &id, &code).await["value"], "200");
                    }
                    total += stop(client, pid).await;
                }
                // Every one of them is back, as the last round left it.
                let (client, pid) = start(&root, &[]).await;
                for i in 0..SANDBOXES {
                    let back = run(&client, &format!("big-{i}"), "float(heap[0])").await;
                    assert_eq!(back["value"], format!("{}.0", iters - 1));
                }
                stop(client, pid).await;
                total
            })
        })
    });
    group.finish();
}

fn durable(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    if !scientific_ready(&rt) {
        return;
    }
    one_plus_one(c, &rt);
    restore(c, &rt);
    shutdown(c, &rt);
}

criterion_group!(benches, durable);
criterion_main!(benches);
