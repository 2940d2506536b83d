//! The disk quota and the server's disk budget count the blocks a sandbox
//! really holds: a write into a hole takes whole blocks, however few bytes it
//! carries, and every way of putting bytes on disk is booked by what it can
//! take (the hole-writing attack of a hostile review, tried as it was, on both
//! runtimes, over stdio and HTTP).

use std::path::Path;

use serde_json::{Value, json};

use crate::support::http::{Era, HttpServer, call};
use crate::support::{Server, sandbox_dirs_under, scientific_cache, structured, text};

/// Bytes a host directory really holds (allocated blocks), walked from the host.
pub fn held_on_disk(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut pending = vec![dir.to_owned()];
    while let Some(d) = pending.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            if meta.is_dir() {
                pending.push(entry.path());
            }
            total += meta.blocks() * 512;
        }
    }
    total
}

/// One byte every 4 KiB, with `pwrite` and with `lseek` + `write`: each
/// lands in a hole and takes a block. Returns `(writes done, errno)`.
const HOLES: &str = r#"
import os
done, err = 0, None
for name, step in (('/holes-p', 'pwrite'), ('/holes-s', 'seek')):
    f = os.open(name, os.O_WRONLY | os.O_CREAT)
    try:
        for i in range(12000):
            if step == 'pwrite':
                os.pwrite(f, b'x', i * 4096)
            else:
                os.lseek(f, 4095, os.SEEK_CUR)
                os.write(f, b'x')
            done += 1
    except OSError as e:
        err = e.errno
    os.close(f)
(done, err)
"#;

/// What the attack left, as a user (and the host's operator) would check it.
#[derive(Debug)]
struct Outcome {
    writes: u64,
    errno: Option<u64>,
    held: u64,
    status_disk: u64,
    budget_used: u64,
}

fn outcome(value: &str, dir: &Path, status: &Value) -> Outcome {
    let inner = value.trim_matches(|c| c == '(' || c == ')');
    let (writes, errno) = inner.split_once(", ").expect("(done, err)");
    Outcome {
        writes: writes.parse().unwrap(),
        errno: errno.parse().ok(),
        held: held_on_disk(dir),
        status_disk: status["sandboxes"][0]["usage"]["disk_bytes"]
            .as_u64()
            .unwrap(),
        budget_used: status["budgets"]["disk"]["used_bytes"].as_u64().unwrap(),
    }
}

/// The sandbox stopped at its quota (EDQUOT inside Python), the host holds
/// no more than the quota, and status and the budget say what is really held.
fn assert_held_to(quota: u64, got: &Outcome) {
    eprintln!("hole-writing attack under a {quota}-byte quota: {got:?}");
    let slack = 1 << 20;
    assert_eq!(got.errno, Some(19), "EDQUOT inside Python");
    assert!(
        got.writes <= quota / 4096,
        "{} one-byte writes into holes went through under a {quota}-byte quota",
        got.writes
    );
    assert!(
        got.held <= quota + slack,
        "the host holds {} bytes for a {quota}-byte quota",
        got.held
    );
    assert!(
        got.status_disk <= quota + slack && got.status_disk + slack >= got.held,
        "status says {} bytes, the host holds {}",
        got.status_disk,
        got.held
    );
    assert!(
        got.budget_used + slack >= got.held,
        "the server's budget counts {} bytes, the host holds {}",
        got.budget_used,
        got.held
    );
}

async fn holes_over_stdio(runtime: &str) -> Outcome {
    if runtime == "scientific" {
        scientific_cache();
    }
    let server = Server::start_with(&[
        ("SANDBOX_DISK_QUOTA_MB", "16"),
        ("SANDBOX_DISK_BUDGET_MB", "200"),
        ("SANDBOX_POOL_SIZE", "0"),
    ])
    .await;
    let id = server.create_with(json!({"runtime": runtime})).await;
    let r = server
        .call(
            "execute_code",
            json!({"session_id": id, "code": HOLES, "timeout_seconds": 240}),
        )
        .await;
    let value = structured(&r)["value"]
        .as_str()
        .unwrap_or_else(|| panic!("{}", text(&r)))
        .to_owned();
    let status = server.ok("get_sandbox_status", json!({})).await;
    let got = outcome(&value, &server.sandbox_dirs()[0], &status);
    server.stop().await;
    got
}

#[tokio::test]
async fn writes_into_holes_are_held_to_the_quota_on_the_small_runtime() {
    let got = holes_over_stdio("python-3.12").await;
    assert_held_to(16 << 20, &got);
}

#[tokio::test]
async fn writes_into_holes_are_held_to_the_quota_on_the_scientific_runtime() {
    let got = holes_over_stdio("scientific").await;
    assert_held_to(16 << 20, &got);
}

#[tokio::test]
async fn writes_into_holes_are_held_to_the_quota_over_http() {
    let server = HttpServer::start(&[
        ("SANDBOX_DISK_QUOTA_MB", "16"),
        ("SANDBOX_DISK_BUDGET_MB", "200"),
        ("SANDBOX_POOL_SIZE", "0"),
    ])
    .await;
    let client = server.client(Era::Session, None).await;
    let created = call(&client, "create_sandbox", json!({"session_id": "holes"})).await;
    assert_ne!(created.is_error, Some(true), "{}", text(&created));
    let r = call(
        &client,
        "execute_code",
        json!({"session_id": "holes", "code": HOLES, "timeout_seconds": 120}),
    )
    .await;
    let value = structured(&r)["value"]
        .as_str()
        .unwrap_or_else(|| panic!("{}", text(&r)))
        .to_owned();
    let status = structured(&call(&client, "get_sandbox_status", json!({})).await);
    let dirs = sandbox_dirs_under(&server.root);
    let got = outcome(&value, &dirs[0], &status);
    client.cancel().await.unwrap();
    assert_held_to(16 << 20, &got);
}

/// Growing a file takes nothing (its hole holds no disk), and nothing can
/// be allocated past the gates: `posix_fallocate` is not supported.
#[tokio::test]
async fn extending_or_preallocating_a_file_takes_no_disk() {
    let server =
        Server::start_with(&[("SANDBOX_DISK_QUOTA_MB", "4"), ("SANDBOX_POOL_SIZE", "0")]).await;
    let id = server.create().await;
    let r = server
        .run(
            &id,
            "import os\nf = os.open('/grown', os.O_RDWR | os.O_CREAT)\nos.ftruncate(f, 1 << 40)\n\
             try:\n    os.posix_fallocate(f, 0, 1 << 30)\n    got = 'allocated'\nexcept AttributeError:\n    got = 'absent'\n\
             except OSError as e:\n    got = e.errno\nos.close(f)\n(os.stat('/grown').st_size, got)",
        )
        .await;
    let value = r["value"].as_str().unwrap().to_owned();
    assert!(value.starts_with("(1099511627776, "), "{value}");
    assert!(!value.contains("allocated"), "{value}");
    let held = held_on_disk(&server.sandbox_dirs()[0]);
    assert!(held < 1 << 20, "{held} bytes held");
    // The sandbox still has its whole quota.
    let r = server
        .run(&id, "open('/data', 'wb').write(b'd' * 3_000_000)")
        .await;
    assert_eq!(r["value"], "3000000");
    server.stop().await;
}
