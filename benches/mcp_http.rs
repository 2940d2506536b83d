//! End to end over MCP Streamable HTTP on loopback against the real binary
//! (`serve --http`), as a client sees it: `execute_code` of `1+1` for a
//! 2026-07-28 client (stateless, the session id mirrored into a header) and
//! for a 2025-11-25 client (a session), beside `mcp_stdio`'s.

mod http_server;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;

use http_server::{Era, Server, call};

fn http(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut group = c.benchmark_group("mcp_http");
    let server = rt.block_on(Server::start(&[]));
    for (name, era) in [
        ("execute_code_1_plus_1_stateless", Era::Stateless),
        ("execute_code_1_plus_1_session", Era::Session),
    ] {
        let client = rt.block_on(server.client(era));
        let id = format!("bench-{era:?}");
        rt.block_on(call(&client, "create_sandbox", json!({"session_id": id})));
        group.bench_function(name, |b| {
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
        rt.block_on(client.cancel()).unwrap();
    }
    group.finish();
}

criterion_group!(benches, http);
criterion_main!(benches);
