//! Past one host: two replicas of the server on loopback sharing one
//! SANDBOX_ROOT, behind real nginx with the shipped configuration (routing by
//! the mirrored `Mcp-Param-Session-Id` header with consistent hashing). Each
//! sandbox's calls land on the replica that holds it; a replica stopped with
//! SIGTERM saves its sandboxes, and one killed outright leaves them durable,
//! and either way they come back, variables and all, on the other one.

use std::collections::BTreeMap;

use rmcp::RoleClient;
use rmcp::service::RunningService;
use serde_json::{Value, json};

use crate::support::http::{Era, HttpServer, call, connect};
use crate::support::nginx::Nginx;
use crate::support::{scientific_cache, structured, text};

/// Sandboxes each replica must hold before the test goes on.
const EACH: usize = 2;
/// Names tried before concluding that routing sends everything one way.
const MOST: usize = 40;
/// Calls made to each sandbox through nginx after creating it.
const CALLS: u64 = 3;

#[tokio::test]
async fn nginx_routes_each_sandbox_to_its_replica_and_a_stopped_replicas_come_back_with_their_variables()
 {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("shared-root");
    // The scientific runtime: its interpreter's state is saved on SIGTERM
    // (python-3.12's cannot be, and comes back with its files only).
    let (a, b, _nginx, client) =
        behind_nginx(&root, &[("SANDBOX_KEEP_SAVED_SECONDS", "3600")]).await;

    let holders = spread(&client, &a, &b).await;
    let on_a: Vec<String> = ids_on(&holders, 0);
    let on_b: Vec<String> = ids_on(&holders, 1);

    // Every later call reaches the replica holding the sandbox: the state is
    // there each time, and each replica counts exactly its sandboxes' calls.
    for id in holders.keys() {
        let n: i64 = id.trim_start_matches("team-").parse().unwrap();
        for k in 1..=CALLS {
            let value = run(&client, id, "x = x * 10\nx").await;
            assert_eq!(value, (n * 10i64.pow(k as u32)).to_string(), "{id}");
        }
    }
    for (replica, ids) in [(&a, &on_a), (&b, &on_b)] {
        let status = status_of(replica).await;
        for sandbox in status["sandboxes"].as_array().unwrap() {
            assert_eq!(
                sandbox["executions"],
                CALLS + 1,
                "every call to {} landed on its replica",
                sandbox["session_id"]
            );
        }
        assert_eq!(status["count"], ids.len());
        let executed = metric(
            replica,
            "mcp_sandbox_executions_total{backend=\"wasm\",outcome=\"ok\"}",
        )
        .await;
        assert_eq!(
            executed,
            (ids.len() as u64 * (CALLS + 1)) as f64,
            "{}",
            replica.base
        );
    }

    // A replica stopped with SIGTERM saves its sandboxes in the shared root;
    // nginx moves their keys to the other, which restores them on first use.
    assert!(a.terminate().await.success());
    for id in &on_a {
        let n: i64 = id.trim_start_matches("team-").parse().unwrap();
        let value = run(&client, id, "x").await;
        assert_eq!(
            value,
            (n * 10i64.pow(CALLS as u32)).to_string(),
            "{id} came back"
        );
    }
    let now_on_b = status_of(&b).await;
    let mut ids: Vec<String> = serde_json::from_value(now_on_b["sandbox_ids"].clone()).unwrap();
    ids.sort();
    let mut all: Vec<String> = holders.keys().cloned().collect();
    all.sort();
    assert_eq!(ids, all, "the remaining replica holds every sandbox");
    assert!(
        b.logs()
            .contains("restored a sandbox saved when the server last stopped"),
        "{}",
        b.logs()
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_session_protocol_client_keeps_its_replica_through_nginx() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("shared-root");
    let a = replica(&root, &[]).await;
    let b = replica(&root, &[]).await;
    let nginx = Nginx::start([addr(&a), addr(&b)]);
    // A 2025-11-25 client sends no Mcp-Param-* headers; its session lives
    // on the replica that answered initialize, and every later request of
    // it must reach that replica (routed by the client's address).
    let client = connect(&nginx.url(), Era::Session, None)
        .await
        .expect("a session client connects through nginx");
    client
        .list_all_tools()
        .await
        .expect("tools/list in the session");
    for id in ["legacy-0", "legacy-1", "legacy-2"] {
        call(&client, "create_sandbox", json!({"session_id": id})).await;
        run(&client, id, "y = 5").await;
        assert_eq!(run(&client, id, "y * 2").await, "10");
    }
    let holders = holders_of(&[&a, &b]).await;
    assert_eq!(holders.len(), 3, "{holders:?}");
    let replicas: std::collections::BTreeSet<_> = holders.values().collect();
    assert_eq!(
        replicas.len(),
        1,
        "one replica serves the session: {holders:?}"
    );
    client.cancel().await.unwrap();
}

/// Named sandboxes created through nginx until both replicas hold at least
/// [`EACH`], each given `x = i`; which replica holds each.
async fn spread(
    client: &RunningService<RoleClient, ()>,
    a: &HttpServer,
    b: &HttpServer,
) -> BTreeMap<String, usize> {
    let mut holders: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..MOST {
        let id = format!("team-{i}");
        let created = call(client, "create_sandbox", json!({"session_id": id})).await;
        assert_ne!(created.is_error, Some(true), "{}", text(&created));
        run(client, &id, &format!("x = {i}")).await;
        holders = holders_of(&[a, b]).await;
        let on = |r| holders.values().filter(|&&h| h == r).count();
        if on(0) >= EACH && on(1) >= EACH {
            break;
        }
    }
    assert!(
        ids_on(&holders, 0).len() >= EACH && ids_on(&holders, 1).len() >= EACH,
        "nginx should spread named sandboxes over both replicas: {holders:?}"
    );
    holders
}

#[tokio::test]
async fn a_replica_killed_outright_loses_nothing_its_sandboxes_resume_on_the_other() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("shared-root");
    let (a, b, _nginx, client) = behind_nginx(&root, &[]).await;
    let holders = spread(&client, &a, &b).await;
    for id in holders.keys() {
        run(
            &client,
            id,
            "x = x * 10\nimport numpy as np\nblock = np.arange(10)",
        )
        .await;
    }
    let on_a = ids_on(&holders, 0);
    // SIGKILL: nothing is saved on the way out. The other replica takes in
    // the dead one's sandboxes when their next calls reach it.
    a.kill().await;
    for id in &on_a {
        let n: i64 = id.trim_start_matches("team-").parse().unwrap();
        let back = run(&client, id, "(x, int(block.sum()))").await;
        assert_eq!(back, format!("({}, 45)", n * 10), "{id} came back");
    }
    let now_on_b = status_of(&b).await;
    let mut ids: Vec<String> = serde_json::from_value(now_on_b["sandbox_ids"].clone()).unwrap();
    ids.sort();
    let mut all: Vec<String> = holders.keys().cloned().collect();
    all.sort();
    assert_eq!(ids, all, "the remaining replica holds every sandbox");
    client.cancel().await.unwrap();
}

/// A replica on a free loopback port using `root`.
/// Two replicas of the scientific runtime on `root` (with `env` besides),
/// nginx in front of them, and a 2026-07-28 client connected through it that
/// has read the tools' schemas (which say what nginx routes by).
async fn behind_nginx(
    root: &std::path::Path,
    env: &[(&str, &str)],
) -> (
    HttpServer,
    HttpServer,
    Nginx,
    RunningService<RoleClient, ()>,
) {
    let cache = scientific_cache();
    let mut all = vec![
        ("SANDBOX_RUNTIME", "scientific"),
        ("SANDBOX_CACHE_DIR", cache.to_str().unwrap()),
    ];
    all.extend_from_slice(env);
    let a = replica(root, &all).await;
    let b = replica(root, &all).await;
    let nginx = Nginx::start([addr(&a), addr(&b)]);
    let client = connect(&nginx.url(), Era::Stateless, None)
        .await
        .expect("a 2026-07-28 client connects through nginx");
    client
        .list_all_tools()
        .await
        .expect("tools/list through nginx");
    (a, b, nginx, client)
}

async fn replica(root: &std::path::Path, env: &[(&str, &str)]) -> HttpServer {
    HttpServer::start_on(root.to_owned(), "127.0.0.1:0", env)
        .await
        .unwrap_or_else(|log| panic!("a replica did not start:\n{log}"))
}

/// `host:port` of a replica.
fn addr(server: &HttpServer) -> &str {
    server.base.trim_start_matches("http://")
}

/// Runs `code` in sandbox `id`; its value.
async fn run(client: &RunningService<RoleClient, ()>, id: &str, code: &str) -> String {
    let ran = call(
        client,
        "execute_code",
        json!({"session_id": id, "code": code}),
    )
    .await;
    assert_ne!(ran.is_error, Some(true), "{id}: {}", text(&ran));
    let result = structured(&ran);
    assert_eq!(result["error"], Value::Null, "{id}: {result}");
    result["value"].as_str().unwrap_or_default().to_owned()
}

/// `get_sandbox_status` asked of one replica directly.
async fn status_of(replica: &HttpServer) -> Value {
    let direct = replica.client(Era::Stateless, None).await;
    let status = structured(&call(&direct, "get_sandbox_status", json!({})).await);
    direct.cancel().await.unwrap();
    status
}

/// Which replica (index into `replicas`) holds each sandbox; a sandbox held
/// by two is a failure.
async fn holders_of(replicas: &[&HttpServer]) -> BTreeMap<String, usize> {
    let mut holders = BTreeMap::new();
    for (i, replica) in replicas.iter().enumerate() {
        let status = status_of(replica).await;
        for id in status["sandbox_ids"].as_array().unwrap() {
            let id = id.as_str().unwrap().to_owned();
            if let Some(other) = holders.insert(id.clone(), i) {
                panic!("{id} is open on replicas {other} and {i}");
            }
        }
    }
    holders
}

/// The ids held by replica `index`.
fn ids_on(holders: &BTreeMap<String, usize>, index: usize) -> Vec<String> {
    holders
        .iter()
        .filter(|&(_, &h)| h == index)
        .map(|(id, _)| id.clone())
        .collect()
}

/// A sample's value in a replica's `/metrics` (0 when absent).
async fn metric(replica: &HttpServer, sample: &str) -> f64 {
    let text = replica.metrics().await;
    text.lines()
        .find_map(|line| line.strip_prefix(sample))
        .map(|value| value.trim().parse().unwrap())
        .unwrap_or(0.0)
}
