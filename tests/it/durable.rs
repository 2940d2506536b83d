//! Durable sandboxes: a server killed outright, or stopped the way real
//! clients stop it, brings every sandbox back at its next start as of its
//! last completed execution (variables, imports and files); an execution cut
//! off by the kill is named once; with saving off, nothing is kept.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{
    Server, binary, kill_outright, process_gone, scientific_cache, scientific_server_on,
    structured, text,
};

#[tokio::test]
async fn a_server_killed_outright_brings_every_sandbox_back_as_of_its_last_execution() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let first = scientific_server_on(&root, &[]).await;
    let ids = ["one", "two", "three"];
    for (n, id) in ids.iter().enumerate() {
        first.ok("create_sandbox", json!({"session_id": id})).await;
        first
            .run(id, &format!("import numpy as np\nn = {n}\nrows = []"))
            .await;
        first
            .run(
                id,
                "rows.append(n * 10)\nopen('rows.txt', 'w').write(str(rows))",
            )
            .await;
        first
            .run(
                id,
                "rows.append(int(np.arange(1_000_000, dtype=np.int64).sum()) + n)",
            )
            .await;
    }
    let status = first
        .ok("get_sandbox_status", json!({"session_id": "one"}))
        .await;
    assert_eq!(
        status["sandboxes"][0]["kept_across_restarts"], "files_and_variables",
        "{status}"
    );
    kill_outright(first).await;

    let second = scientific_server_on(&root, &[]).await;
    for (n, id) in ids.iter().enumerate() {
        let back = second
            .exec(id, "(n, rows, open('rows.txt').read(), np.__name__)")
            .await;
        assert_ne!(back.is_error, Some(true), "{id}: {}", text(&back));
        let expected = format!(
            "({n}, [{}, {}], '[{}]', 'numpy')",
            n * 10,
            499999500000 + n,
            n * 10
        );
        assert_eq!(structured(&back)["value"], expected, "{id}");
        assert!(
            !text(&back).contains("lost"),
            "nothing is said to be lost: {}",
            text(&back)
        );
    }
    // The two go on from there, and a second kill keeps the new state too.
    second.run("one", "rows.append('after')").await;
    kill_outright(second).await;
    let third = scientific_server_on(&root, &[]).await;
    assert_eq!(third.run("one", "rows[-1]").await["value"], "'after'");
    third.stop().await;
}

#[tokio::test]
async fn an_execution_cut_off_by_the_kill_is_named_once_and_the_one_before_stands() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let first = scientific_server_on(&root, &[]).await;
    first
        .ok("create_sandbox", json!({"session_id": "cut"}))
        .await;
    first.run("cut", "x = 1").await;
    let running = first.client.peer().clone();
    let call = tokio::spawn(async move {
        let args = json!({"session_id": "cut", "code": "x = 2\nimport time\ntime.sleep(60)"});
        let serde_json::Value::Object(args) = args else {
            unreachable!()
        };
        running
            .call_tool(rmcp::model::CallToolRequestParams::new("execute_code").with_arguments(args))
            .await
    });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    kill_outright(first).await;
    let _ = call.await;

    let second = scientific_server_on(&root, &[]).await;
    let back = second.exec("cut", "x").await;
    assert_eq!(structured(&back)["value"], "1", "{}", text(&back));
    assert!(
        text(&back).contains("the last execution did not finish before the server stopped"),
        "{}",
        text(&back)
    );
    let again = second.exec("cut", "x + 1").await;
    assert_eq!(structured(&again)["value"], "2");
    assert!(
        !text(&again).contains("did not finish"),
        "said once: {}",
        text(&again)
    );
    second.stop().await;
}

#[tokio::test]
async fn a_client_that_stops_the_server_loses_nothing_and_waits_for_nothing() {
    // As the official Python SDK does: stdin closed, then SIGTERM after 2 s
    // and SIGKILL after 2 s more. Eight sandboxes of 150 MiB each.
    const SANDBOXES: usize = 8;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let first = scientific_server_on(&root, &[]).await;
    for i in 0..SANDBOXES {
        let id = format!("big-{i}");
        first.ok("create_sandbox", json!({"session_id": id})).await;
        first
            .run(
                &id,
                &format!("import numpy as np\nheap = np.full(150 << 17, {i}.0)"),
            )
            .await;
    }
    let pid = first.pid;
    let stopping = Instant::now();
    first.stop().await;
    let took = stopping.elapsed().max(process_gone(pid).await);
    assert!(
        took < Duration::from_secs(2),
        "the server took {took:?} to exit: a client would have sent SIGTERM"
    );

    let second = scientific_server_on(&root, &[]).await;
    for i in 0..SANDBOXES {
        let id = format!("big-{i}");
        let back = second
            .run(&id, "(heap.nbytes >> 20, float(heap.sum() / len(heap)))")
            .await;
        assert_eq!(back["value"], format!("(150, {i}.0)"), "{id}");
    }
    second.stop().await;
}

#[tokio::test]
async fn with_saving_off_a_killed_server_keeps_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let off = [("SANDBOX_KEEP_SAVED_SECONDS", "0")];
    let first = scientific_server_on(&root, &off).await;
    first
        .ok("create_sandbox", json!({"session_id": "gone"}))
        .await;
    first.run("gone", "x = 1").await;
    let status = first
        .ok("get_sandbox_status", json!({"session_id": "gone"}))
        .await;
    assert_eq!(
        status["sandboxes"][0]["kept_across_restarts"], "nothing",
        "{status}"
    );
    kill_outright(first).await;
    let second = scientific_server_on(&root, &off).await;
    let unknown = second
        .err("execute_code", json!({"session_id": "gone", "code": "x"}))
        .await;
    assert!(unknown.contains("gone"), "{unknown}");
    second.stop().await;
}

#[tokio::test]
async fn a_python_3_12_sandbox_says_its_variables_are_not_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let server = Server::start_in(tempfile::tempdir().unwrap(), root, &[]).await;
    let created = server
        .ok(
            "create_sandbox",
            json!({"session_id": "plain", "runtime": "python-3.12"}),
        )
        .await;
    assert_eq!(created["kept_across_restarts"], "files_only", "{created}");
    let message = created["message"].as_str().unwrap();
    assert!(
        message.contains("its files come back but not its variables"),
        "{message}"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_one_off_exec_on_the_root_of_a_killed_server_loses_none_of_its_sandboxes() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let first = scientific_server_on(&root, &[]).await;
    first
        .ok("create_sandbox", json!({"session_id": "kept"}))
        .await;
    first.run("kept", "answer = 41").await;
    kill_outright(first).await;
    // Before any server starts again, a one-off execution on the same root:
    // it must hand the dead server's sandboxes on, never remove them.
    let out = std::process::Command::new(binary())
        .args(["exec", "6 * 7"])
        .env("SANDBOX_ROOT", &root)
        .env("SANDBOX_CACHE_DIR", scientific_cache())
        .env("SANDBOX_LOG", "warn")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "42\n", "{said}");
    let second = scientific_server_on(&root, &[]).await;
    let back = second.exec("kept", "answer + 1").await;
    assert_eq!(structured(&back)["value"], "42", "{}", text(&back));
    second.stop().await;
}

#[tokio::test]
async fn a_one_off_run_is_never_kept_so_it_never_runs_out_of_the_saved_budget() {
    let tmp = tempfile::tempdir().unwrap();
    let server =
        scientific_server_on(&tmp.path().join("root"), &[("SANDBOX_SAVED_MAX_MB", "64")]).await;
    let grow = "import numpy as np\nheap = np.ones(100 << 17)\nheap.nbytes >> 20";
    // A sandbox that lives on is kept after the execution: past the budget,
    // it says so.
    server
        .ok("create_sandbox", json!({"session_id": "lives"}))
        .await;
    let kept = server.exec("lives", grow).await;
    assert!(
        structured(&kept)["notice"]
            .as_str()
            .is_some_and(|n| n.contains("SANDBOX_SAVED_MAX_MB")),
        "{}",
        text(&kept)
    );
    // The same run in create_run_close keeps nothing: no notice.
    let once = server
        .call(
            "create_run_close",
            json!({"code": grow, "runtime": "scientific", "timeout_seconds": 120}),
        )
        .await;
    assert_eq!(structured(&once)["value"], "100", "{}", text(&once));
    assert!(structured(&once)["notice"].is_null(), "{}", text(&once));
    server.stop().await;
}

#[tokio::test]
async fn a_sandbox_whose_pages_outgrow_the_saved_budget_says_its_variables_are_no_longer_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let small = [("SANDBOX_SAVED_MAX_MB", "64")];
    let first = scientific_server_on(&root, &small).await;
    first
        .ok("create_sandbox", json!({"session_id": "huge"}))
        .await;
    first
        .run(
            "huge",
            "open('/kept.txt', 'w').write('files stay')\nsmall = 1",
        )
        .await;
    let grown = first
        .exec(
            "huge",
            "import numpy as np\nheap = np.ones(100 << 17)\nheap.nbytes >> 20",
        )
        .await;
    assert_eq!(structured(&grown)["value"], "100", "{}", text(&grown));
    let notice = structured(&grown)["notice"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        notice.contains("will not come back if the server restarts")
            && notice.contains("SANDBOX_SAVED_MAX_MB"),
        "{}",
        text(&grown)
    );
    kill_outright(first).await;
    let disk: u64 = walk(&root);
    assert!(disk < 80 << 20, "{disk} bytes kept under a 64 MiB budget");

    let second = scientific_server_on(&root, &small).await;
    let back = second.exec("huge", "open('/kept.txt').read()").await;
    assert_eq!(
        structured(&back)["value"],
        "'files stay'",
        "{}",
        text(&back)
    );
    assert!(
        text(&back).contains("memory was not kept from execution 2 on"),
        "{}",
        text(&back)
    );
    second.stop().await;
}

#[tokio::test]
async fn pages_written_all_over_are_compacted_between_executions_and_a_kill_keeps_the_last() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let first = scientific_server_on(&root, &[]).await;
    first
        .ok("create_sandbox", json!({"session_id": "busy"}))
        .await;
    first
        .run(
            "busy",
            "import pandas as pd, numpy as np\n\
             df = pd.DataFrame(np.arange(2_000_000, dtype=np.float64).reshape(200_000, 10))\n\
             totals = []",
        )
        .await;
    // Each of these writes pages all over the interpreter's heap: the
    // store soon holds them in too many pieces and compacts them (after
    // the answer), into a new segment.
    for i in 0..12 {
        first
            .run(
                "busy",
                &format!("totals.append(float(df.iloc[:100].sum().sum()) + {i})"),
            )
            .await;
    }
    // A compaction records the whole state it leaves, which replaces the
    // journal: it no longer holds a record for each of the 13 executions
    // (how many came after the last compaction depends on when the pieces
    // passed the limit, which the allocator's layout decides).
    let records = state_records(&root);
    assert!(
        (1..12).contains(&records),
        "{records} state records for 13 executions: the journal was not rewritten"
    );
    kill_outright(first).await;

    let second = scientific_server_on(&root, &[]).await;
    let back = second
        .exec(
            "busy",
            "(len(totals), totals[-1] - totals[0], float(df.values.sum()))",
        )
        .await;
    assert_eq!(
        structured(&back)["value"],
        "(12, 11.0, 1999999000000.0)",
        "{}",
        text(&back)
    );
    second.stop().await;
}

#[tokio::test]
async fn a_compaction_after_an_answer_neither_times_out_nor_loses_the_next_call() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let server = scientific_server_on(
        &root,
        &[
            ("SANDBOX_MAX_MEMORY_MB", "2000"),
            ("SANDBOX_SAVED_MAX_MB", "20000"),
        ],
    )
    .await;
    server
        .ok(
            "create_sandbox",
            json!({"session_id": "big", "memory_mb": 1500}),
        )
        .await;
    server
        .run(
            "big",
            "import numpy as np\na = np.ones(400 * 2**20 // 8)\nkeep_me = 'hello'",
        )
        .await;
    // Each changes every page of the array: after the second, the segments
    // hold so much garbage that every page in use is rewritten, after the
    // answer (which takes longer than the next call's limit).
    server.run("big", "a += 1").await;
    server.run("big", "a += 1").await;
    let next = server
        .call(
            "execute_code",
            json!({"session_id": "big", "code": "keep_me", "timeout_seconds": 0.3}),
        )
        .await;
    assert_eq!(structured(&next)["value"], "'hello'", "{}", text(&next));
    assert_eq!(server.run("big", "float(a[0])").await["value"], "3.0");

    // A call cancelled while it waits for such a tidy ran nothing and stops
    // nothing: the sandbox keeps its variables.
    server.run("big", "a += 1").await;
    server.run("big", "a += 1").await;
    let handle = server
        .call_cancellable(
            "execute_code",
            json!({"session_id": "big", "code": "keep_me = 'changed'"}),
        )
        .await;
    // Within the tidy (which outlasts the 0.3 s limit above).
    tokio::time::sleep(Duration::from_millis(100)).await;
    handle.cancel(Some("test".into())).await.unwrap();
    let after = server.exec("big", "(keep_me, float(a[0]))").await;
    assert_eq!(
        structured(&after)["value"],
        "('hello', 5.0)",
        "{}",
        text(&after)
    );
    assert!(
        structured(&after)["state_lost"].is_null(),
        "nothing was lost: {}",
        text(&after)
    );
    server.stop().await;
}

/// The state records in the journals under `dir` (each frame: its length,
/// its checksum, then the record as JSON).
fn state_records(dir: &std::path::Path) -> usize {
    let mut count = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.path().is_dir() {
            count += state_records(&entry.path());
        } else if entry.file_name() == "journal" {
            let bytes = std::fs::read(entry.path()).unwrap();
            let mut at = 0;
            while at + 8 <= bytes.len() {
                let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
                let body = &bytes[at + 8..(at + 8 + len).min(bytes.len())];
                count += usize::from(body.starts_with(br#"{"State""#));
                at += 8 + len;
            }
        }
    }
    count
}

/// Bytes the files under `dir` hold on disk.
fn walk(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let meta = entry.path().symlink_metadata().unwrap();
        total += meta.blocks() * 512;
        if meta.is_dir() {
            total += walk(&entry.path());
        }
    }
    total
}
