//! What a client sees before calling anything: server info and the tool list.

use crate::support::Server;

#[tokio::test]
async fn the_ten_seed_tools_and_fork_are_listed_with_schemas_and_descriptions() {
    let server = Server::start().await;
    let info = server.client.peer_info().expect("server info");
    assert_eq!(info.server_info.as_ref().unwrap().name, "mcp-code-sandbox");
    let tools = server.client.list_all_tools().await.unwrap();
    let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "close_sandbox",
            "create_run_close",
            "create_sandbox",
            "execute_code",
            "fork_sandbox",
            "get_sandbox_status",
            "install_package",
            "list_files",
            "read_file",
            "upload_file",
            "write_file"
        ]
    );
    for tool in &tools {
        let description = tool.description.as_deref().unwrap_or_default();
        assert!(description.len() > 40, "{} needs a description", tool.name);
        assert!(
            tool.output_schema.is_some(),
            "{} needs an output schema",
            tool.name
        );
    }
    let seed_params = [
        ("create_sandbox", vec!["session_id"]),
        ("close_sandbox", vec!["session_id"]),
        ("get_sandbox_status", vec!["session_id"]),
        ("execute_code", vec!["session_id", "code"]),
        ("install_package", vec!["session_id", "package_name"]),
        ("create_run_close", vec!["code"]),
        ("list_files", vec!["session_id", "path"]),
        ("read_file", vec!["session_id", "file_path"]),
        ("write_file", vec!["session_id", "file_path", "content"]),
        (
            "upload_file",
            vec![
                "session_id",
                "file_name",
                "file_content",
                "destination_path",
            ],
        ),
    ];
    for (name, params) in seed_params {
        let tool = tools.iter().find(|t| t.name == name).unwrap();
        let properties = tool.input_schema["properties"].as_object().unwrap();
        for p in params {
            let property = properties
                .get(p)
                .unwrap_or_else(|| panic!("{name} lacks the seed's parameter {p}"));
            assert!(
                property.get("description").is_some(),
                "{name}.{p} needs a description"
            );
        }
    }
    server.stop().await;
}

#[tokio::test]
async fn malformed_arguments_get_tool_errors_and_the_server_keeps_serving() {
    let server = Server::start().await;
    let missing = server
        .err("execute_code", serde_json::json!({"session_id": "x"}))
        .await;
    assert!(missing.contains("code"), "{missing}");
    let wrong_type = server
        .err(
            "execute_code",
            serde_json::json!({"session_id": 5, "code": "1"}),
        )
        .await;
    assert!(
        wrong_type.contains("session_id") || wrong_type.contains("string"),
        "{wrong_type}"
    );
    let unknown = server
        .client
        .call_tool(rmcp::model::CallToolRequestParams::new("no_such_tool"))
        .await;
    assert!(unknown.is_err(), "an unknown tool is a protocol error");
    let id = server.create().await;
    assert_eq!(server.run(&id, "1 + 1").await["value"], "2");
    server.stop().await;
}

/// Descriptions offer only what this server has: a runtime that is not
/// fetched is not offered, nor is a backend that is not configured.
#[tokio::test]
async fn tools_offer_only_the_runtimes_and_backends_that_work() {
    let full = Server::start().await;
    let describe = |tools: &[rmcp::model::Tool]| -> String {
        let create = tools.iter().find(|t| t.name == "create_sandbox").unwrap();
        format!(
            "{} {}",
            create.description.as_deref().unwrap_or_default(),
            serde_json::to_string(&create.input_schema).unwrap()
        )
    };
    let text = describe(&full.client.list_all_tools().await.unwrap());
    assert!(text.contains("\"scientific\""), "{text}");
    assert!(
        !text.contains("e2b"),
        "no E2B key, no e2b backend offered: {text}"
    );
    full.stop().await;

    let small = tempfile::tempdir().unwrap();
    let repo_runtime = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("runtime");
    std::os::unix::fs::symlink(
        repo_runtime.join("python-3.12.0.wasm"),
        small.path().join("python-3.12.0.wasm"),
    )
    .unwrap();
    let server =
        Server::start_with(&[("SANDBOX_RUNTIME_DIR", small.path().to_str().unwrap())]).await;
    let text = describe(&server.client.list_all_tools().await.unwrap());
    assert!(text.contains("python-3.12"), "{text}");
    assert!(
        !text.contains("scientific"),
        "not fetched, not offered: {text}"
    );
    let instructions = server
        .client
        .peer_info()
        .and_then(|i| i.instructions.clone())
        .unwrap_or_default();
    assert!(!instructions.contains("scientific"), "{instructions}");
    server.stop().await;
}
