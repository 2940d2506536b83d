//! The four file tools, and every way of trying to leave the sandbox with them.

use serde_json::json;

use crate::support::Server;

#[tokio::test]
async fn paths_that_leave_the_sandbox_are_refused_and_nothing_outside_is_touched() {
    let server = Server::start().await;
    let id = server.create().await;
    let outside = server.root.parent().unwrap().join("canary.txt");
    std::fs::write(&outside, "canary").unwrap();
    let canary = outside.to_str().unwrap().to_owned();
    let guest_read = server.exec(&id, "open('../../../canary.txt').read()").await;
    assert_eq!(
        guest_read.is_error,
        Some(true),
        "the guest cannot read past its root"
    );

    // A host path is read as a path inside the sandbox, where it does not exist.
    let msg = server
        .err("read_file", json!({"session_id": id, "file_path": canary}))
        .await;
    assert!(msg.contains("does not exist"), "{msg}");
    let msg = server
        .err(
            "read_file",
            json!({"session_id": id, "file_path": "/etc/passwd"}),
        )
        .await;
    assert!(msg.contains("does not exist"), "{msg}");

    // Links the guest makes that point out of the sandbox. WASI refuses
    // absolute targets outright; relative ones can be made but not followed.
    let abs = server
        .exec(&id, &format!("import os\nos.symlink({canary:?}, 'abs')"))
        .await;
    assert_eq!(
        crate::support::structured(&abs)["error"]["name"],
        "PermissionError"
    );
    server
        .run(
            &id,
            "import os\nos.symlink('../../../canary.txt', 'rel')\nos.symlink('../../..', 'up')\nos.symlink('up/', 'chain')\n'ok'",
        )
        .await;
    for path in ["rel", "up/canary.txt", "chain/canary.txt"] {
        let msg = server
            .err("read_file", json!({"session_id": id, "file_path": path}))
            .await;
        assert!(
            msg.contains("outside the sandbox")
                || msg.contains("does not exist")
                || msg.contains("symbolic link"),
            "{path}: {msg}"
        );
        server
            .err(
                "write_file",
                json!({"session_id": id, "file_path": path, "content": "pwned"}),
            )
            .await;
        server
            .err(
                "write_file",
                json!({"session_id": id, "file_path": format!("{path}/x"), "content": "pwned"}),
            )
            .await;
    }
    server
        .err("list_files", json!({"session_id": id, "path": "up"}))
        .await;
    let bad_upload = server
        .err(
            "upload_file",
            json!({"session_id": id, "file_name": "../x", "file_content": "x"}),
        )
        .await;
    assert!(bad_upload.contains("file_name"), "{bad_upload}");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "canary");
    let parent_entries: Vec<_> = std::fs::read_dir(server.root.parent().unwrap())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !parent_entries.iter().any(|n| n == "x"),
        "{parent_entries:?}"
    );
    server.stop().await;
}

#[tokio::test]
async fn oversized_and_wrong_kind_requests_get_clear_errors() {
    let server = Server::start_with(&[("SANDBOX_MAX_FILE_BYTES", "1000")]).await;
    let id = server.create().await;
    let msg = server
        .err(
            "write_file",
            json!({"session_id": id, "file_path": "big", "content": "x".repeat(2000)}),
        )
        .await;
    assert!(msg.contains("over the limit of 1000 bytes"), "{msg}");
    server
        .run(
            &id,
            "open('/big.txt', 'w').write('y' * 5000)\nimport os; os.mkdir('/d')",
        )
        .await;
    let cut = server
        .ok(
            "read_file",
            json!({"session_id": id, "file_path": "big.txt"}),
        )
        .await;
    assert_eq!(cut["truncated"], true);
    assert_eq!(cut["size"], 5000);
    assert_eq!(cut["content"].as_str().unwrap().len(), 1000);
    let dir = server
        .err("read_file", json!({"session_id": id, "file_path": "/d"}))
        .await;
    assert!(dir.contains("directory"), "{dir}");
    let missing = server
        .err("list_files", json!({"session_id": id, "path": "/nope"}))
        .await;
    assert!(missing.contains("does not exist"), "{missing}");
    let unknown = server
        .err(
            "read_file",
            json!({"session_id": "nobody", "file_path": "x"}),
        )
        .await;
    assert!(unknown.contains("no sandbox with id 'nobody'"), "{unknown}");
    let big_code = server
        .err(
            "execute_code",
            json!({"session_id": id, "code": "#".repeat(2 << 20)}),
        )
        .await;
    assert!(big_code.contains("code is"), "{big_code}");
    server.stop().await;
}

#[tokio::test]
async fn large_files_are_read_a_page_at_a_time_and_every_byte_can_be_reached() {
    let server = Server::start().await;
    let id = server.create().await;
    server
        .run(
            &id,
            "lines = ''.join(f'row {i:06d}, é\\n' for i in range(20_000))\nopen('/big.txt', 'w').write(lines)\nopen('/bin', 'wb').write(bytes(range(256)) * 1000)",
        )
        .await;
    let whole = server.run(&id, "len(lines.encode())").await["value"]
        .as_str()
        .unwrap()
        .parse::<u64>()
        .unwrap();
    let mut offset = 0u64;
    let mut text = String::new();
    let mut pages = 0;
    loop {
        let page = server
            .ok(
                "read_file",
                json!({"session_id": id, "file_path": "big.txt", "offset": offset}),
            )
            .await;
        let content = page["content"].as_str().unwrap();
        assert!(content.len() <= 64 << 10, "a page is at most 64 KiB");
        assert!(content.ends_with('\n'), "pages end at a line break");
        text.push_str(content);
        pages += 1;
        match page["next_offset"].as_u64() {
            Some(next) => {
                assert_eq!(page["truncated"], true);
                offset = next;
            }
            None => break,
        }
    }
    assert_eq!(
        text.len() as u64,
        whole,
        "{pages} pages hold the whole file"
    );
    assert!(text.starts_with("row 000000, é\n") && text.ends_with("row 019999, é\n"));
    let tail = server
        .ok(
            "read_file",
            json!({"session_id": id, "file_path": "big.txt", "offset": whole - 15, "length": 100}),
        )
        .await;
    assert_eq!(tail["content"], "row 019999, é\n");
    assert_eq!(tail["truncated"], false);
    let binary = server
        .ok("read_file", json!({"session_id": id, "file_path": "bin"}))
        .await;
    assert_eq!(binary["encoding"], "base64");
    assert_eq!(
        binary["length"],
        48 << 10,
        "a binary file comes in pages of 48 KiB"
    );
    assert_eq!(binary["next_offset"], 48 << 10);
    assert!(binary["content"].as_str().unwrap().len() <= 64 << 10);
    let in_a_char = server
        .ok(
            "read_file",
            json!({"session_id": id, "file_path": "big.txt", "offset": 13}),
        )
        .await;
    assert!(
        in_a_char["content"].as_str().unwrap().len() <= 64 << 10,
        "a page starting inside a character is no larger"
    );
    let slice = server
        .ok(
            "read_file",
            json!({"session_id": id, "file_path": "bin", "offset": 254, "length": 3}),
        )
        .await;
    assert_eq!(slice["encoding"], "base64");
    assert_eq!(slice["content"], "/v8A", "bytes 254, 255 and 0");
    let bad = server
        .err(
            "read_file",
            json!({"session_id": id, "file_path": "bin", "length": 0}),
        )
        .await;
    assert!(bad.contains("length must be between"), "{bad}");
    server.stop().await;
}
