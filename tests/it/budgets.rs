//! Everything written for a sandbox counts against it, every host resource a
//! guest can make the server hold has a cap, and the caps add up: the holes a
//! hostile review found, each tried as the review did.

use std::path::Path;

use serde_json::json;

use crate::support::{FORGE_PREAMBLE, Server, structured, text};

/// Bytes a host directory really holds (allocated blocks), walked from the host.
fn held_on_disk(dir: &Path) -> u64 {
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
            } else {
                total += meta.blocks() * 512;
            }
        }
    }
    total
}

#[tokio::test]
async fn output_files_count_against_the_disk_quota() {
    let server = Server::start_with(&[
        ("SANDBOX_DISK_QUOTA_MB", "20"),
        ("SANDBOX_OUTPUT_LIMIT_BYTES", "65536"),
    ])
    .await;
    let id = server.create().await;
    for _ in 0..4 {
        let r = server
            .exec(
                &id,
                "import sys\nfor _ in range(16):\n    sys.stdout.write('o' * (1 << 20))",
            )
            .await;
        let s = structured(&r);
        assert_eq!(s["stdout"]["truncated"], true, "{}", text(&r));
    }
    let dir = &server.sandbox_dirs()[0];
    let held = held_on_disk(dir);
    assert!(held <= 21 << 20, "{held} bytes held under a 20 MiB quota");
    let files = server
        .run(
            &id,
            "import os\nsorted((f, os.stat('/.outputs/' + f).st_size) for f in os.listdir('/.outputs'))",
        )
        .await;
    let listing = files["value"].as_str().unwrap().to_owned();
    // Each stream's saved copy made room for itself by pushing out older
    // ones: the newest is kept whole.
    assert!(
        listing.contains("('exec-4-stdout.txt', 16777216)"),
        "{listing}"
    );
    assert!(!listing.contains("exec-1-stdout.txt"), "{listing}");
    server.stop().await;
}

#[tokio::test]
async fn a_deleted_file_still_open_counts_until_closed() {
    let server = Server::start_with(&[("SANDBOX_DISK_QUOTA_MB", "2")]).await;
    let id = server.create().await;
    let r = server
        .exec(
            &id,
            "import os\nf = open('/ghost', 'wb')\nos.unlink('/ghost')\nwritten = 0\ntry:\n    for _ in range(64):\n        written += f.write(b'g' * (1 << 20))\n        f.flush()\nexcept OSError as e:\n    err = e.errno\n(written, err)",
        )
        .await;
    let s = structured(&r);
    let value = s["value"].as_str().unwrap_or_default().to_owned();
    assert!(
        value.ends_with(", 19)"),
        "EDQUOT inside Python: {}",
        text(&r)
    );
    let written: u64 = value
        .trim_matches(|c| c == '(' || c == ')')
        .split(", ")
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        written <= 3 << 20,
        "{written} bytes went into a deleted file"
    );
    let status = server
        .ok("get_sandbox_status", json!({"session_id": id}))
        .await;
    let disk = status["sandboxes"][0]["usage"]["disk_bytes"]
        .as_u64()
        .unwrap();
    assert!(
        disk >= 1 << 20,
        "status counts the open deleted file: {disk}"
    );
    server.run(&id, "f.close()").await;
    let status = server
        .ok("get_sandbox_status", json!({"session_id": id}))
        .await;
    let disk = status["sandboxes"][0]["usage"]["disk_bytes"]
        .as_u64()
        .unwrap();
    assert!(disk < 1 << 20, "closed, its bytes are free again: {disk}");
    server.stop().await;
}

#[tokio::test]
async fn sparse_files_count_what_they_hold_and_shrinking_or_rewriting_is_never_refused() {
    let server =
        Server::start_with(&[("SANDBOX_DISK_QUOTA_MB", "2"), ("SANDBOX_MAX_FILES", "8")]).await;
    let id = server.create().await;
    server
        .run(
            &id,
            "f = open('/sparse', 'wb'); f.truncate(1 << 40); f.close()",
        )
        .await;
    let status = server
        .ok("get_sandbox_status", json!({"session_id": id}))
        .await;
    let disk = status["sandboxes"][0]["usage"]["disk_bytes"]
        .as_u64()
        .unwrap();
    assert!(disk < 1 << 20, "a hole holds no disk: {disk}");
    // Near the quota, shrinking a file is allowed.
    server
        .run(&id, "open('/big', 'wb').write(b'b' * 1_800_000)")
        .await;
    let shrink = server
        .exec(
            &id,
            "f = open('/big', 'r+b'); f.truncate(100_000); f.close(); 'ok'",
        )
        .await;
    assert_eq!(structured(&shrink)["value"], "'ok'", "{}", text(&shrink));
    // At the file limit, reopening an existing file for writing is allowed; a
    // new file is not.
    let filled = server
        .exec(&id, "for i in range(10):\n    try:\n        open(f'/f{i}', 'w').close()\n    except OSError:\n        break")
        .await;
    assert_eq!(structured(&filled)["limit"]["kind"], "disk");
    let reopen = server.exec(&id, "open('/f0', 'w').write('again')").await;
    assert_eq!(structured(&reopen)["value"], "5", "{}", text(&reopen));
    let new = server.exec(&id, "open('/one-too-many', 'w')").await;
    assert_eq!(
        structured(&new)["error"]["name"],
        "OSError",
        "{}",
        text(&new)
    );
    server.stop().await;
}

#[tokio::test]
async fn a_guest_cannot_hold_the_servers_descriptors() {
    let server = Server::start_with(&[("SANDBOX_MAX_OPEN_FILES", "64")]).await;
    let hog = server.create().await;
    let r = server
        .exec(
            &hog,
            "import errno\nkeep = []\ntry:\n    while True:\n        keep.append(open('/f', 'a'))\nexcept OSError as e:\n    err = e.errno\n(len(keep), err == errno.EMFILE)",
        )
        .await;
    let value = structured(&r)["value"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        value.ends_with("True)"),
        "EMFILE inside Python: {}",
        text(&r)
    );
    let held: u32 = value[1..].split(',').next().unwrap().parse().unwrap();
    assert!(held <= 64, "{held} files held");
    // The sandbox still works, and another is not affected.
    assert_eq!(server.run(&hog, "len(keep) > 0").await["value"], "True");
    let other = server.create().await;
    server
        .ok(
            "write_file",
            json!({"session_id": other, "file_path": "x.txt", "content": "fine"}),
        )
        .await;
    assert_eq!(
        server.run(&other, "open('x.txt').read()").await["value"],
        "'fine'"
    );
    server.stop().await;
}

#[tokio::test]
async fn many_subdirectories_are_measured_and_a_very_deep_tree_is_removed_on_close() {
    let server = Server::start_with(&[("SANDBOX_DISK_QUOTA_MB", "64")]).await;
    let id = server.create().await;
    server
        .run(
            &id,
            "import os\nfor i in range(1200):\n    os.mkdir(f'/d{i}')",
        )
        .await;
    let over = server
        .exec(&id, "open('/big', 'wb').write(b'x' * (65 << 20))")
        .await;
    assert_eq!(
        structured(&over)["limit"]["kind"],
        "disk",
        "{}",
        text(&over)
    );
    let status = server
        .ok("get_sandbox_status", json!({"session_id": id}))
        .await;
    let files = status["sandboxes"][0]["usage"]["disk_files"]
        .as_u64()
        .unwrap();
    assert!(files >= 1200, "{files}");

    let deep = server.create().await;
    let built = server
        .exec(
            &deep,
            "import os\nos.mkdir('/t')\nfor _ in range(3000):\n    os.mkdir('/n')\n    os.rename('/t', '/n/t')\n    os.rename('/n', '/t')\n'built'",
        )
        .await;
    assert_eq!(structured(&built)["value"], "'built'", "{}", text(&built));
    let refused = server
        .exec(&deep, "open('/x', 'wb').write(b'x' * 100)\n")
        .await;
    let s = structured(&refused);
    assert!(
        s["error"]["name"] == "OSError" || s["value"] == "100",
        "a tree too deep to measure refuses writes, or is measured: {}",
        text(&refused)
    );
    let status = server
        .ok("get_sandbox_status", json!({"session_id": deep}))
        .await;
    let usage = &status["sandboxes"][0]["usage"];
    assert!(
        usage["disk_error"].is_string() || usage["disk_files"].as_u64() > Some(2000),
        "never a zero: {usage}"
    );
    let before = server.sandbox_dirs().len();
    server
        .ok("close_sandbox", json!({"session_id": deep}))
        .await;
    assert_eq!(
        server.sandbox_dirs().len(),
        before - 1,
        "the deep tree is gone"
    );
    server.stop().await;
}

#[tokio::test]
async fn sandboxes_together_stay_within_the_server_budgets() {
    let server = Server::start_with(&[
        ("SANDBOX_MEMORY_BUDGET_MB", "320"),
        ("SANDBOX_MEMORY_MB", "256"),
        ("SANDBOX_DISK_BUDGET_MB", "12"),
        ("SANDBOX_DISK_QUOTA_MB", "8"),
        ("SANDBOX_POOL_SIZE", "0"),
    ])
    .await;
    let a = server.create().await;
    let b = server.create().await;
    assert_eq!(
        server.run(&a, "x = bytearray(180 << 20); len(x)").await["value"],
        (180u64 << 20).to_string()
    );
    let r = server.exec(&b, "y = bytearray(180 << 20)").await;
    let s = structured(&r);
    assert_eq!(s["error"]["name"], "MemoryError", "{}", text(&r));
    assert_eq!(s["limit"]["kind"], "memory");
    assert!(
        s["limit"]["message"]
            .as_str()
            .unwrap()
            .contains("all sandboxes"),
        "{}",
        s["limit"]
    );
    assert_eq!(
        server.run(&b, "z = bytearray(8 << 20); len(z)").await["value"],
        "8388608"
    );

    server
        .run(&a, "open('/a.bin', 'wb').write(b'a' * (7 << 20))")
        .await;
    let r = server
        .exec(&b, "open('/b.bin', 'wb').write(b'b' * (7 << 20))")
        .await;
    assert_eq!(structured(&r)["limit"]["kind"], "disk", "{}", text(&r));
    let tool = server
        .err(
            "write_file",
            json!({"session_id": b, "file_path": "t.txt", "content": "t".repeat(6 << 20)}),
        )
        .await;
    assert!(
        tool.contains("all sandboxes") || tool.contains("quota"),
        "{tool}"
    );

    let status = server.ok("get_sandbox_status", json!({})).await;
    let budgets = &status["budgets"];
    assert_eq!(budgets["memory"]["limit_bytes"], 320u64 << 20, "{status}");
    assert!(budgets["memory"]["used_bytes"].as_u64().unwrap() >= 180 << 20);
    assert_eq!(budgets["disk"]["limit_bytes"], 12u64 << 20);
    server.ok("close_sandbox", json!({"session_id": a})).await;
    assert_eq!(
        server.run(&b, "y = bytearray(180 << 20); len(y)").await["value"],
        (180u64 << 20).to_string(),
        "a closed sandbox gives its memory back"
    );
    server.stop().await;
}

#[tokio::test]
async fn write_file_counts_the_directories_it_would_create_before_creating_any() {
    let server = Server::start_with(&[("SANDBOX_MAX_FILES", "100")]).await;
    let id = server.create().await;
    let deep: String = (0..120).map(|i| format!("d{i}/")).collect::<String>() + "f.txt";
    for _ in 0..5 {
        let msg = server
            .err(
                "write_file",
                json!({"session_id": id, "file_path": deep, "content": "x"}),
            )
            .await;
        assert!(msg.contains("files and directories"), "{msg}");
    }
    let status = server
        .ok("get_sandbox_status", json!({"session_id": id}))
        .await;
    let files = status["sandboxes"][0]["usage"]["disk_files"]
        .as_u64()
        .unwrap();
    assert!(files < 10, "nothing was created by refused writes: {files}");
    server.stop().await;
}

#[tokio::test]
async fn replacing_a_hard_linked_file_frees_nothing_and_directories_take_room() {
    let server = Server::start_with(&[
        ("SANDBOX_DISK_QUOTA_MB", "4"),
        ("SANDBOX_MAX_FILES", "2000"),
    ])
    .await;
    let id = server.create().await;
    server
        .run(
            &id,
            "import os\nopen('/big', 'wb').write(b'b' * (3 << 20))\nos.link('/big', '/twin')",
        )
        .await;
    let content = "c".repeat(3 << 20);
    let msg = server
        .err(
            "write_file",
            json!({"session_id": id, "file_path": "big", "content": content}),
        )
        .await;
    assert!(msg.contains("quota"), "the twin keeps the old bytes: {msg}");
    let dirs = server
        .exec(
            &id,
            "import os\nmade = 0\ntry:\n    for i in range(1900):\n        os.mkdir(f'/dir{i}')\n        made += 1\nexcept OSError as e:\n    err = e.errno\n(made, err)",
        )
        .await;
    let value = structured(&dirs)["value"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        value.ends_with(", 19)"),
        "directories take disk: {}",
        text(&dirs)
    );
    server.stop().await;
}

#[tokio::test]
async fn a_sandbox_too_deep_to_measure_keeps_its_share_of_the_disk_budget() {
    let server = Server::start_with(&[
        ("SANDBOX_DISK_BUDGET_MB", "32"),
        ("SANDBOX_DISK_QUOTA_MB", "16"),
    ])
    .await;
    let id = server.create().await;
    server
        .run(&id, "open('/data', 'wb').write(b'd' * (6 << 20))")
        .await;
    let nest = server
        .exec(
            &id,
            "import os\nos.mkdir('/t')\nfor _ in range(170):\n    os.mkdir('/n')\n    os.rename('/t', '/n/t')\n    os.rename('/n', '/t')\n'nested'",
        )
        .await;
    assert_eq!(structured(&nest)["value"], "'nested'", "{}", text(&nest));
    let refused = server
        .exec(&id, "open('/more', 'wb').write(b'm' * (12 << 20))")
        .await;
    assert_eq!(
        structured(&refused)["error"]["name"],
        "OSError",
        "{}",
        text(&refused)
    );
    let status = server.ok("get_sandbox_status", json!({})).await;
    let used = status["budgets"]["disk"]["used_bytes"].as_u64().unwrap();
    assert!(used >= 6 << 20, "its bytes still count: {used}");
    let usage = &status["sandboxes"][0]["usage"];
    assert!(usage["disk_error"].is_string(), "never a zero: {usage}");
    server.stop().await;
}

#[tokio::test]
async fn a_forged_image_must_be_a_png_and_its_path_a_sandbox_path() {
    let server = Server::start().await;
    let id = server.create().await;
    let forge = format!(
        "{FORGE_PREAMBLE}{}",
        r#"body = field(b"i", b"/ok.png\n\x89PNG\r\n\x1a\n" + bytes(100))
body += field(b"i", b"x" * 5000 + b"\n\x89PNG\r\n\x1a\n" + bytes(100))
body += field(b"i", b"/gif\nGIF89a" + bytes(100))
posix.write(1, token + len(body).to_bytes(4, "big") + body)
posix.read(0, 1)
"#
    );
    let result = server
        .call(
            "execute_code",
            json!({"session_id": id, "code": forge, "timeout_seconds": 5}),
        )
        .await;
    let s = structured(&result);
    let images = s["images"].as_array().cloned().unwrap_or_default();
    assert_eq!(images.len(), 2, "the GIF is not passed off as a PNG: {s}");
    assert_eq!(images[0]["path"], "/ok.png");
    assert!(
        images[1]["path"].is_null(),
        "a path that is no sandbox path is dropped"
    );
    server.ok("close_sandbox", json!({"session_id": id})).await;
    server.stop().await;
}
