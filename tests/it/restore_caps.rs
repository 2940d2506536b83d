//! A saved sandbox comes back only as its owner's caps and the server's
//! maximums allow (the review's attacks: a principal at `max_sandboxes = 1`
//! holding two by naming a saved one; a sandbox saved under generous
//! maximums keeping them under tighter ones), through the real binary.

use serde_json::{Value, json};

use crate::auth::mint_token;
use crate::support::http::{Era, HttpServer, call};
use crate::support::{Server, structured, text};

/// The sandboxes saved under `root`, by id (as their records name them).
pub fn saved_ids(root: &std::path::Path) -> Vec<String> {
    let Ok(read) = std::fs::read_dir(root.join("saved")) else {
        return Vec::new();
    };
    let mut ids: Vec<String> = read
        .flatten()
        .filter_map(|e| {
            let meta: Value =
                serde_json::from_slice(&std::fs::read(e.path().join("meta.json")).ok()?).ok()?;
            Some(meta["session_id"].as_str()?.to_owned())
        })
        .collect();
    ids.sort();
    ids
}

/// Waits until `n` sandboxes are saved under `root`.
pub async fn wait_saved(root: &std::path::Path, n: usize) {
    for _ in 0..300 {
        if saved_ids(root).len() == n {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("{:?} saved, not {n}", saved_ids(root));
}

#[tokio::test]
async fn a_saved_sandbox_comes_back_only_within_its_owners_caps() {
    let dir = tempfile::tempdir().unwrap();
    let (entry, carol) = mint_token("carol", &["--limit-sandboxes", "1"]);
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(&tokens, entry).unwrap();
    let root = dir.path().join("root");
    let env = [
        ("SANDBOX_AUTH_TOKENS_FILE", tokens.to_str().unwrap()),
        ("SANDBOX_POOL_SIZE", "0"),
    ];
    let first = HttpServer::start_on(root.clone(), "127.0.0.1:0", &env)
        .await
        .unwrap();
    let c = first.client(Era::Stateless, Some(&carol)).await;
    let made = call(&c, "create_sandbox", json!({"session_id": "c1"})).await;
    assert_ne!(made.is_error, Some(true), "{}", text(&made));
    drop(c);
    assert!(first.terminate().await.success());
    wait_saved(&root, 1).await;

    let second = HttpServer::start_on(root.clone(), "127.0.0.1:0", &env)
        .await
        .unwrap();
    let c = second.client(Era::Stateless, Some(&carol)).await;
    let made = call(&c, "create_sandbox", json!({"session_id": "c2"})).await;
    assert_ne!(made.is_error, Some(true), "{}", text(&made));
    // Every way of naming c1 would bring it back: each is refused at her cap.
    for (tool, args) in [
        ("execute_code", json!({"session_id": "c1", "code": "1"})),
        ("list_files", json!({"session_id": "c1"})),
        ("create_sandbox", json!({"session_id": "c1"})),
        ("fork_sandbox", json!({"session_id": "c1"})),
    ] {
        let r = call(&c, tool, args).await;
        assert_eq!(r.is_error, Some(true), "{tool}: {}", text(&r));
        assert!(
            text(&r).contains("the most your account may hold is 1 sandboxes"),
            "{tool}: {}",
            text(&r)
        );
    }
    let status = structured(&call(&c, "get_sandbox_status", json!({})).await);
    assert_eq!(status["count"], 1, "she holds one: {status}");
    // Records name the sandbox by its owner's key: "<principal's prefix>.c1".
    let saved = saved_ids(&root);
    assert!(
        saved.len() == 1 && saved[0].ends_with(".c1"),
        "a refused restore keeps it: {saved:?}"
    );
    // Once c2 is closed, c1 comes back.
    let closed = call(&c, "close_sandbox", json!({"session_id": "c2"})).await;
    assert_ne!(closed.is_error, Some(true), "{}", text(&closed));
    let r = call(
        &c,
        "execute_code",
        json!({"session_id": "c1", "code": "6 * 7"}),
    )
    .await;
    assert_eq!(structured(&r)["value"], "42", "{}", text(&r));
}

#[tokio::test]
async fn a_restored_sandbox_keeps_no_limit_above_the_new_servers_maximums() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let generous = Server::start_in(
        tempfile::tempdir().unwrap(),
        root.clone(),
        &[
            ("SANDBOX_POOL_SIZE", "0"),
            ("SANDBOX_MAX_TIMEOUT_SECONDS", "30"),
            ("SANDBOX_MAX_MEMORY_MB", "1024"),
        ],
    )
    .await;
    generous
        .ok(
            "create_sandbox",
            json!({"session_id": "wide", "timeout_seconds": 30, "memory_mb": 1024}),
        )
        .await;
    generous.stop().await;
    wait_saved(&root, 1).await;

    let tight = Server::start_in(
        tempfile::tempdir().unwrap(),
        root.clone(),
        &[
            ("SANDBOX_POOL_SIZE", "0"),
            ("SANDBOX_TIMEOUT_SECONDS", "3"),
            ("SANDBOX_MAX_TIMEOUT_SECONDS", "3"),
            ("SANDBOX_MEMORY_MB", "256"),
            ("SANDBOX_MAX_MEMORY_MB", "256"),
        ],
    )
    .await;
    let started = std::time::Instant::now();
    let slept = tight
        .call(
            "execute_code",
            json!({"session_id": "wide", "code": "import time\ntime.sleep(7)\n'woke'"}),
        )
        .await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(6) || !text(&slept).contains("woke"),
        "slept 7 s under a 3 s maximum: {}",
        text(&slept)
    );
    assert_ne!(structured(&slept)["value"], "'woke'", "{}", text(&slept));
    let big = tight
        .run("wide", "try:\n    b = bytearray(600 << 20)\n    r = 'allocated'\nexcept MemoryError:\n    r = 'MemoryError'\nr")
        .await;
    assert_eq!(big["value"], "'MemoryError'", "{big}");
    let status = tight
        .ok("get_sandbox_status", json!({"session_id": "wide"}))
        .await;
    eprintln!("{status}");
    tight.stop().await;
}

#[tokio::test]
async fn a_restore_whose_files_are_over_the_new_disk_quota_is_refused_and_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let roomy = Server::start_in(
        tempfile::tempdir().unwrap(),
        root.clone(),
        &[("SANDBOX_POOL_SIZE", "0"), ("SANDBOX_DISK_QUOTA_MB", "64")],
    )
    .await;
    roomy
        .ok("create_sandbox", json!({"session_id": "full"}))
        .await;
    roomy
        .run(
            "full",
            "open('/big.bin', 'wb').write(bytes([1]) * (40 << 20))",
        )
        .await;
    roomy.stop().await;
    wait_saved(&root, 1).await;

    let tight = Server::start_in(
        tempfile::tempdir().unwrap(),
        root.clone(),
        &[("SANDBOX_POOL_SIZE", "0"), ("SANDBOX_DISK_QUOTA_MB", "16")],
    )
    .await;
    let refused = tight.err("list_files", json!({"session_id": "full"})).await;
    assert!(
        refused.contains("SANDBOX_DISK_QUOTA_MB") && refused.contains("it stays saved"),
        "{refused}"
    );
    tight.stop().await;
    assert_eq!(saved_ids(&root), ["full"], "still saved, files and all");
}
