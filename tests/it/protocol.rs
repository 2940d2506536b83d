//! What a client sees of the protocol around the tools: annotations and
//! strict schemas, output while code runs, long calls as tasks.

use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, GetTaskParams,
    ReadResourceRequestParams, ResourceContents, TaskPayload, TaskStatus,
};
use serde_json::{Value, json};

use crate::support::{Observer, Server, text, with_progress};

fn request(tool: &str, args: Value) -> CallToolRequestParams {
    let Value::Object(args) = args else {
        panic!("arguments must be an object")
    };
    CallToolRequestParams::new(tool.to_owned()).with_arguments(args)
}

/// Waits (up to a minute) until `done` holds, checking every 20 ms.
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..3000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("gave up waiting: {what}");
}

/// The host directory of sandbox `id` (found by a file written into it).
pub(crate) async fn host_dir<H: rmcp::ClientHandler>(
    server: &Server<H>,
    id: &str,
) -> std::path::PathBuf {
    let marker = format!("which-{id}");
    let written = plain(
        server,
        "write_file",
        json!({"session_id": id, "file_path": marker, "content": ""}),
    )
    .await;
    assert_ne!(written.is_error, Some(true), "{}", text(&written));
    server
        .sandbox_dirs()
        .into_iter()
        .find(|d| d.join(&marker).exists())
        .expect("the sandbox's directory")
}

/// Calls a tool and returns its result, waiting for the task when the
/// server answers with one.
async fn plain<H: rmcp::ClientHandler>(
    server: &Server<H>,
    tool: &str,
    args: Value,
) -> CallToolResult {
    match server
        .client
        .peer()
        .call_tool_once(request(tool, args))
        .await
        .unwrap()
    {
        CallToolResponse::Complete(result) => result,
        CallToolResponse::Task(task) => {
            for _ in 0..3000 {
                let got = server
                    .client
                    .peer()
                    .get_task(GetTaskParams::new(task.task.task_id.clone()))
                    .await
                    .unwrap();
                if got.task.status().is_terminal() {
                    return completed(got.task.payload);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            panic!("the task did not end")
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// Code that prints, then waits until the test creates `/go` in the
/// sandbox's directory, then prints again.
const WAIT_FOR_GO: &str = "import os, time\nprint('waiting for go')\nwhile not os.path.exists('/go'):\n    time.sleep(0.02)\nprint('went')";

#[tokio::test]
async fn every_tool_is_annotated_titled_and_has_a_strict_schema() {
    let server = Server::start().await;
    let tools = server.client.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 11);
    for tool in &tools {
        let name = tool.name.as_ref();
        let annotations = tool
            .annotations
            .as_ref()
            .unwrap_or_else(|| panic!("{name}"));
        assert!(
            tool.title.is_some() && annotations.title.is_some(),
            "{name}"
        );
        let read_only = annotations.read_only_hint == Some(true);
        assert_eq!(
            read_only,
            matches!(name, "get_sandbox_status" | "list_files" | "read_file"),
            "{name}"
        );
        if !read_only {
            assert!(annotations.destructive_hint.is_some(), "{name}");
        }
        assert!(annotations.idempotent_hint.is_some(), "{name}");
        assert_eq!(
            annotations.open_world_hint,
            Some(name == "install_package"),
            "{name}: only the install reaches outside (no E2B configured)"
        );
        let schema = Value::Object((*tool.input_schema).clone());
        let rendered = schema.to_string();
        for loose in [
            "\"null\"",
            "$ref",
            "$defs",
            "uint64",
            "\"double\"",
            "$schema",
        ] {
            assert!(!rendered.contains(loose), "{name}: {loose} in {rendered}");
        }
        assert_eq!(schema["additionalProperties"], false, "{name}");
    }
    let by_name = |n: &str| tools.iter().find(|t| t.name == n).unwrap();
    assert_eq!(
        by_name("close_sandbox")
            .annotations
            .as_ref()
            .unwrap()
            .destructive_hint,
        Some(true)
    );
    // Clients that send an explicit null for an optional argument still work.
    let id = server.create().await;
    let ran = server.run(&id, "1 + 1").await;
    assert_eq!(ran["value"], "2");
    let with_nulls = server
        .ok(
            "execute_code",
            json!({"session_id": id, "code": "2 + 2", "timeout_seconds": null}),
        )
        .await;
    assert_eq!(with_nulls["value"], "4");
    server
        .ok(
            "write_file",
            json!({"session_id": id, "file_path": "n.txt", "content": "x", "encoding": null}),
        )
        .await;
    let listed = server
        .ok("list_files", json!({"session_id": id, "path": null}))
        .await;
    assert_eq!(listed["path"], "/");
    server
        .ok(
            "upload_file",
            json!({"session_id": id, "file_name": "u.txt", "file_content": "y", "destination_path": null}),
        )
        .await;
    let write = Value::Object((*by_name("write_file").input_schema).clone());
    assert_eq!(
        write["properties"]["encoding"]["enum"],
        json!(["utf-8", "base64"])
    );
    server.stop().await;
}

#[tokio::test]
async fn output_reaches_a_client_that_asked_for_progress_while_the_code_runs() {
    let server = Server::observed(false, &[]).await;
    let id = server.create().await;
    let dir = host_dir(&server, &id).await;
    let call = with_progress(
        "execute_code",
        json!({"session_id": id, "code": WAIT_FOR_GO}),
        "run-1",
    );
    let peer = server.client.peer().clone();
    let running = tokio::spawn(async move { peer.call_tool(call).await });
    let observer = server.client.service().clone();
    // The code cannot end before /go exists: the message came while it ran.
    eventually("the first line, live", || {
        observer
            .messages()
            .iter()
            .any(|m| m.contains("waiting for go"))
    })
    .await;
    assert!(!running.is_finished());
    std::fs::write(dir.join("go"), "").unwrap();
    let result = running.await.unwrap().unwrap();
    assert_ne!(result.is_error, Some(true), "{}", text(&result));
    assert!(
        text(&result).contains("waiting for go\nwent"),
        "{}",
        text(&result)
    );
    let live = observer.messages().concat();
    assert!(live.contains("went"), "the rest followed: {live}");
    server.stop().await;
}

#[tokio::test]
async fn a_flood_of_output_is_streamed_in_bounded_messages() {
    let server = Server::observed(false, &[]).await;
    let id = server.create().await;
    let call = with_progress(
        "execute_code",
        json!({"session_id": id, "code": "for i in range(200000): print('line', i)"}),
        "flood",
    );
    let result = server.client.call_tool(call).await.unwrap();
    assert_ne!(result.is_error, Some(true), "{}", text(&result));
    let observer = server.client.service();
    let messages = observer.messages();
    let streamed: usize = messages
        .iter()
        .filter(|m| !m.starts_with('['))
        .map(String::len)
        .sum();
    assert!(
        messages.iter().all(|m| m.len() <= 8 << 10),
        "each message is small"
    );
    assert!(
        streamed <= 256 << 10,
        "at most 256 KiB live, got {streamed}"
    );
    assert!(
        messages.iter().any(|m| m.contains("the result has")),
        "what was not streamed is said: {:?}",
        &messages[messages.len().saturating_sub(3)..]
    );
    let progress = observer.progress.lock().unwrap().clone();
    assert!(progress.windows(2).all(|w| w[0].progress < w[1].progress));
    server.stop().await;
}

/// Polls a task until it ends.
async fn task_end(server: &Server<Observer>, task_id: &str) -> TaskPayload {
    for _ in 0..3000 {
        let got = server
            .client
            .peer()
            .get_task(GetTaskParams::new(task_id.to_owned()))
            .await
            .unwrap();
        if got.task.status().is_terminal() {
            return got.task.payload;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the task did not end");
}

async fn create(server: &Server<Observer>) -> String {
    let created = plain(server, "create_sandbox", json!({})).await;
    created.structured_content.unwrap()["session_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn completed(payload: TaskPayload) -> CallToolResult {
    let TaskPayload::Completed { result } = payload else {
        panic!("expected a completed task, got {payload:?}")
    };
    serde_json::from_value(Value::Object(result)).unwrap()
}

#[tokio::test]
async fn a_client_with_tasks_gets_a_task_whose_result_is_the_plain_result() {
    let server = Server::observed(true, &[]).await;
    let response = server
        .client
        .peer()
        .call_tool_once(request("create_sandbox", json!({"session_id": "t"})))
        .await
        .unwrap();
    let CallToolResponse::Task(created) = response else {
        panic!("expected a task, got {response:?}")
    };
    let created = completed(task_end(&server, &created.task.task_id).await);
    assert_eq!(created.structured_content.unwrap()["session_id"], "t");

    let response = server
        .client
        .peer()
        .call_tool_once(request(
            "execute_code",
            json!({"session_id": "t", "code": "print('hi')\n6 * 7"}),
        ))
        .await
        .unwrap();
    let CallToolResponse::Task(task) = response else {
        panic!("expected a task, got {response:?}")
    };
    assert_eq!(task.task.status, TaskStatus::Working);
    let result = completed(task_end(&server, &task.task.task_id).await);
    let structured = result.structured_content.clone().unwrap();
    assert_eq!(structured["value"], "42");
    assert_eq!(structured["stdout"]["text"], "hi\n");
    assert!(
        text(&result).starts_with("stdout:\nhi\nOut: 42\n"),
        "{}",
        text(&result)
    );

    // Quick tools stay plain calls.
    let listed = server.call("list_files", json!({"session_id": "t"})).await;
    assert_ne!(listed.is_error, Some(true));
    server.stop().await;
}

#[tokio::test]
async fn a_cancelled_task_stops_its_code_and_leaves_the_sandbox_usable() {
    let server = Server::observed(true, &[]).await;
    let id = create(&server).await;
    let response = server
        .client
        .peer()
        .call_tool_once(request(
            "execute_code",
            json!({"session_id": id, "code": "x = 1\nimport time\nwhile True: time.sleep(0.01)"}),
        ))
        .await
        .unwrap();
    let CallToolResponse::Task(task) = response else {
        panic!("expected a task, got {response:?}")
    };
    let task_id = task.task.task_id;
    server
        .client
        .peer()
        .cancel_task(CancelTaskParams::new(task_id.clone()))
        .await
        .unwrap();
    let end = task_end(&server, &task_id).await;
    assert!(matches!(end, TaskPayload::Cancelled), "{end:?}");
    // The sandbox is free again (its code was stopped, not left running).
    let after = plain(
        &server,
        "execute_code",
        json!({"session_id": id, "code": "1 + 1"}),
    )
    .await;
    assert_eq!(after.structured_content.unwrap()["value"], "2");
    let unknown = server
        .client
        .peer()
        .get_task(GetTaskParams::new("no-such-task".to_owned()))
        .await;
    assert!(unknown.is_err(), "an unknown task is an error");
    server.stop().await;
}

#[tokio::test]
async fn progress_of_a_task_becomes_its_status_message() {
    let server = Server::observed(true, &[]).await;
    let id = create(&server).await;
    let dir = host_dir(&server, &id).await;
    let response = server
        .client
        .peer()
        .call_tool_once(request(
            "execute_code",
            json!({"session_id": id, "code": WAIT_FOR_GO}),
        ))
        .await
        .unwrap();
    let CallToolResponse::Task(task) = response else {
        panic!("expected a task, got {response:?}")
    };
    let task_id = task.task.task_id;
    let mut seen = None;
    for _ in 0..3000 {
        let got = server
            .client
            .peer()
            .get_task(GetTaskParams::new(task_id.clone()))
            .await
            .unwrap();
        if let Some(message) = got
            .task
            .task
            .status_message
            .filter(|m| m.contains("waiting"))
        {
            seen = Some(message);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(seen.is_some(), "the output showed as the status message");
    std::fs::write(dir.join("go"), "").unwrap();
    let result = completed(task_end(&server, &task_id).await);
    assert!(text(&result).contains("went"), "{}", text(&result));
    server.stop().await;
}

#[tokio::test]
async fn files_an_execution_writes_are_linked_and_read_as_resources() {
    let server = Server::start_with(&[("SANDBOX_MAX_FILE_BYTES", "100000")]).await;
    let id = server.create().await;
    let templates = server.client.list_all_resource_templates().await.unwrap();
    assert_eq!(templates[0].uri_template, "sandbox://{session_id}/{+path}");

    let code = "import os\nos.makedirs('/out', exist_ok=True)\nopen('/out/a b.csv', 'w').write('x,y\\n1,2\\n')\nopen('/out/raw.bin', 'wb').write(bytes(range(256)))\nprint('ok')";
    let result = server.exec(&id, code).await;
    assert_ne!(result.is_error, Some(true), "{}", text(&result));
    let links: Vec<_> = result
        .content
        .iter()
        .filter_map(|c| c.as_resource_link())
        .collect();
    let uris: Vec<&str> = links.iter().map(|l| l.uri.as_str()).collect();
    let csv_uri = format!("sandbox://{id}/out/a%20b.csv");
    assert!(uris.contains(&csv_uri.as_str()), "{uris:?}");
    let csv = links.iter().find(|l| l.uri == csv_uri).unwrap();
    assert_eq!(
        (csv.size, csv.mime_type.as_deref()),
        (Some(8), Some("text/csv"))
    );
    let structured = result.structured_content.clone().unwrap();
    assert!(
        structured["files"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["path"] == "/out/a b.csv")
    );
    assert!(
        text(&result).contains("Files written: "),
        "{}",
        text(&result)
    );

    // Text reads as text, bytes as a base64 blob.
    let read = server
        .client
        .read_resource(ReadResourceRequestParams::new(csv_uri.clone()))
        .await
        .unwrap();
    let ResourceContents::TextResourceContents { text: csv_text, .. } = &read.contents[0] else {
        panic!("{read:?}")
    };
    assert_eq!(csv_text, "x,y\n1,2\n");
    let raw_uri = format!("sandbox://{id}/out/raw.bin");
    let read = server
        .client
        .read_resource(ReadResourceRequestParams::new(raw_uri))
        .await
        .unwrap();
    let ResourceContents::BlobResourceContents { blob, .. } = &read.contents[0] else {
        panic!("{read:?}")
    };
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(blob)
        .unwrap();
    assert_eq!(bytes, (0..=255u8).collect::<Vec<_>>());

    // The listing has them; a second execution that writes nothing links nothing.
    let listed = server.client.list_all_resources().await.unwrap();
    assert!(listed.iter().any(|r| r.uri == csv_uri), "{listed:?}");
    // File times tick every few milliseconds: let one tick pass, so the
    // files above are older than the next execution.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let quiet = server.exec(&id, "1 + 1").await;
    assert!(
        quiet.content.iter().all(|c| c.as_resource_link().is_none()),
        "{:?}",
        quiet.content
    );
    server.stop().await;
}

#[tokio::test]
async fn resource_reads_keep_the_file_tools_rules() {
    let server = Server::start_with(&[("SANDBOX_MAX_FILE_BYTES", "100000")]).await;
    let id = server.create().await;
    let dir = crate::protocol::host_dir(&server, &id).await;
    std::os::unix::fs::symlink("/etc/passwd", dir.join("leak")).unwrap();
    std::fs::write(dir.join("big.txt"), vec![b'a'; 200_000]).unwrap();
    let read = |uri: String| {
        let peer = server.client.peer().clone();
        async move {
            peer.read_resource(ReadResourceRequestParams::new(uri))
                .await
        }
    };
    for (uri, expected) in [
        (format!("sandbox://{id}/leak"), "outside"),
        (format!("sandbox://{id}/../../etc/passwd"), "outside"),
        (
            format!("sandbox://{id}/%2e%2e/%2e%2e/etc/passwd"),
            "outside",
        ),
        ("file:///etc/passwd".to_owned(), "not a sandbox file URI"),
        ("sandbox://nobody/x".to_owned(), "nobody"),
        (format!("sandbox://{id}/missing.txt"), "missing.txt"),
        (format!("sandbox://{id}/big.txt"), "read_file"),
    ] {
        let err = read(uri.clone()).await.expect_err(&uri).to_string();
        assert!(err.contains(expected), "{uri}: {err}");
        assert!(!err.contains("root:x:0"), "{uri}: {err}");
    }
    // Still usable afterwards.
    let small = read(format!("sandbox://{id}/which-{id}")).await.unwrap();
    assert_eq!(small.contents.len(), 1);
    server.stop().await;
}
