//! Saved sandboxes under pressure, through the real binary: many calls sent
//! at once to sandboxes being restored wait for their restore instead of
//! being refused, and a stop while a restore is under way loses nothing.

use std::time::Duration;

use serde_json::{Value, json};

use crate::restore_caps::{saved_ids, wait_saved};
use crate::support::{Server, scientific_server_on, structured, text};

/// A server on `root` whose sandboxes (of the scientific runtime, whose
/// interpreter state can be saved) are kept across restarts.
async fn server_on(root: &std::path::Path) -> Server {
    scientific_server_on(root, &[]).await
}

#[tokio::test]
async fn calls_sent_at_once_to_saved_sandboxes_wait_for_their_restore() {
    const SANDBOXES: usize = 6;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let first = server_on(&root).await;
    for i in 0..SANDBOXES {
        let id = format!("s{i}");
        first.ok("create_sandbox", json!({"session_id": id})).await;
        first
            .run(
                &id,
                &format!("x = {i}\nopen('/note.txt', 'w').write('n{i}')"),
            )
            .await;
    }
    first.stop().await;
    wait_saved(&root, SANDBOXES).await;

    let second = server_on(&root).await;
    // Six calls to each saved sandbox, all at once, before any is back.
    let calls = (0..SANDBOXES).flat_map(|i| {
        let id = format!("s{i}");
        [
            ("execute_code", json!({"session_id": id, "code": "x"})),
            ("execute_code", json!({"session_id": id, "code": "x + 100"})),
            ("list_files", json!({"session_id": id, "path": "/"})),
            (
                "read_file",
                json!({"session_id": id, "file_path": "/note.txt"}),
            ),
            ("get_sandbox_status", json!({"session_id": id})),
            (
                "write_file",
                json!({"session_id": id, "file_path": "/more.txt", "content": "m"}),
            ),
        ]
        .map(|(tool, args)| (i, tool, args))
    });
    let results = futures::future::join_all(calls.map(|(i, tool, args)| {
        let second = &second;
        async move { (i, tool, args.clone(), second.call(tool, args).await) }
    }))
    .await;
    for (i, tool, args, result) in &results {
        assert_ne!(
            result.is_error,
            Some(true),
            "{tool} {args} was refused: {}",
            text(result)
        );
        if *tool == "execute_code" {
            let value = structured(result)["value"].clone();
            let expected = if args["code"] == "x" { *i } else { i + 100 };
            assert_eq!(value, expected.to_string(), "{args}: {}", text(result));
        }
        if *tool == "read_file" {
            assert!(text(result).contains(&format!("n{i}")), "{}", text(result));
        }
    }
    assert!(saved_ids(&root).is_empty(), "every one came back once");
    second.stop().await;
}

#[tokio::test]
async fn a_stop_while_a_restore_is_under_way_loses_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let first = server_on(&root).await;
    first
        .ok(
            "create_sandbox",
            json!({"session_id": "big", "memory_mb": 1024}),
        )
        .await;
    // A state large enough that restoring it takes a while: pages that are
    // not zero, so none of it is a hole.
    first
        .run(
            "big",
            "import os\nheap = os.urandom(400 << 20)\nopen('/kept.txt', 'w').write('files too')\nmark = 'still here'",
        )
        .await;
    first.stop().await;
    wait_saved(&root, 1).await;

    // SIGTERM at several moments of the restore: whichever moment it lands
    // on, the sandbox is saved again when the server has stopped.
    for delay_ms in [50, 400, 1500] {
        let second = server_on(&root).await;
        let pid = second.pid;
        let code = json!({"session_id": "big", "code": "mark"});
        let Value::Object(code) = code else {
            unreachable!()
        };
        let call = rmcp::model::CallToolRequestParams::new("execute_code").with_arguments(code);
        // The call may be answered, refused or cut off by the stop.
        let (_, _) = tokio::join!(second.client.call_tool(call), async move {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            rustix::process::kill_process(
                rustix::process::Pid::from_raw(pid as i32).unwrap(),
                rustix::process::Signal::TERM,
            )
            .unwrap();
        });
        let logs = second.logs();
        second.stop().await;
        wait_saved(&root, 1).await;
        assert_eq!(
            saved_ids(&root),
            ["big"],
            "after a stop at {delay_ms} ms: {logs}"
        );
    }

    let third = server_on(&root).await;
    let back = third
        .run("big", "(mark, len(heap), open('/kept.txt').read())")
        .await;
    assert_eq!(
        back["value"], "('still here', 419430400, 'files too')",
        "{back}"
    );
    third.stop().await;
}

#[tokio::test]
async fn a_restore_is_charged_to_the_memory_budget_before_its_pages_are_mapped() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let first = server_on(&root).await;
    first
        .ok(
            "create_sandbox",
            json!({"session_id": "heavy", "memory_mb": 1024}),
        )
        .await;
    first
        .run(
            "heavy",
            "import os\nheap = os.urandom(300 << 20)\nlen(heap)",
        )
        .await;
    first.stop().await;
    wait_saved(&root, 1).await;

    // Its memory (over 300 MiB of heap on the runtime's snapshot) is
    // charged whole before its pages are mapped, and does not fit.
    let tight = scientific_server_on(&root, &[("SANDBOX_MEMORY_BUDGET_MB", "350")]).await;
    let refused = tight
        .err(
            "execute_code",
            json!({"session_id": "heavy", "code": "len(heap)"}),
        )
        .await;
    assert!(
        refused.contains("SANDBOX_MEMORY_BUDGET_MB") && refused.contains("it stays saved"),
        "{refused}"
    );
    let status = tight.ok("get_sandbox_status", json!({})).await;
    assert_eq!(
        status["budgets"]["memory"]["used_bytes"], 0,
        "nothing stays charged after the refusal: {status}"
    );
    tight.stop().await;
    assert_eq!(saved_ids(&root), ["heavy"]);

    let roomy = server_on(&root).await;
    let back = roomy.run("heavy", "len(heap)").await;
    assert_eq!(back["value"], "314572800", "{back}");
    roomy.stop().await;
}
