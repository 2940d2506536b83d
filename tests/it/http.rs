//! MCP over Streamable HTTP: the same tools as on stdio for clients of both
//! protocol eras, the operations routes, the bind rule, the Host and Origin
//! guards, mirrored headers, and shutdown.

use serde_json::json;

use crate::support::http::{Era, HttpServer, call, http_client, modern_headers, modern_meta, post};
use crate::support::{Observer, sandbox_dirs_under, structured, text, with_progress};

#[tokio::test]
async fn both_protocol_eras_run_code_over_http() {
    let server = HttpServer::start(&[]).await;
    for era in [Era::Stateless, Era::Session] {
        let client = server.client(era, None).await;
        let tools = client.list_all_tools().await.unwrap();
        assert_eq!(tools.len(), 11, "{era:?}: {tools:?}");
        let id = format!("http-{era:?}").to_lowercase();
        let created = call(&client, "create_sandbox", json!({"session_id": id})).await;
        assert_ne!(created.is_error, Some(true), "{}", text(&created));
        let ran = call(
            &client,
            "execute_code",
            json!({"session_id": id, "code": "x = 6 * 7\nprint('hi')\nx"}),
        )
        .await;
        let result = structured(&ran);
        assert_eq!(result["value"], "42", "{era:?}: {result}");
        assert_eq!(result["stdout"]["text"], "hi\n", "{era:?}: {result}");
        // State is kept between calls, however the requests travel.
        let again = call(
            &client,
            "execute_code",
            json!({"session_id": id, "code": "x + 1"}),
        )
        .await;
        assert_eq!(structured(&again)["value"], "43");
        client.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn operations_routes_answer() {
    let server = HttpServer::start(&[]).await;
    let http = http_client();
    let health = http
        .get(format!("{}/healthz", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    // Ready once the runtime is loaded (it is cached, so soon).
    let mut ready = 0;
    for _ in 0..200 {
        ready = http
            .get(format!("{}/readyz", server.base))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16();
        if ready == 200 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(ready, 200, "{}", server.logs());
    let client = server.client(Era::Stateless, None).await;
    call(&client, "create_sandbox", json!({"session_id": "m"})).await;
    call(
        &client,
        "execute_code",
        json!({"session_id": "m", "code": "1+1"}),
    )
    .await;
    call(
        &client,
        "execute_code",
        json!({"session_id": "m", "code": "while True: pass", "timeout_seconds": 0.5}),
    )
    .await;
    let metrics = server.metrics().await;
    for line in [
        "mcp_sandbox_executions_total{backend=\"wasm\",outcome=\"ok\"} 1",
        "mcp_sandbox_executions_total{backend=\"wasm\",outcome=\"limit\"} 1",
        "mcp_sandbox_limit_hits_total{kind=\"timeout\"} 1",
        "mcp_sandbox_sandboxes{backend=\"wasm\"} 1",
        "mcp_sandbox_runtime_ready 1",
        "mcp_sandbox_execution_seconds_bucket",
    ] {
        assert!(metrics.contains(line), "{line} missing from:\n{metrics}");
    }
    // The request log names the sandbox, never the code.
    let logs = server.logs();
    assert!(
        logs.contains("sandbox=\"m\"") || logs.contains("sandbox=m"),
        "{logs}"
    );
    assert!(!logs.contains("while True"), "{logs}");
}

#[tokio::test]
async fn an_open_address_without_authorization_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let log = HttpServer::start_on(tmp.path().join("root"), "0.0.0.0:0", &[])
        .await
        .err()
        .expect("the server refuses to start");
    assert!(
        log.contains("refusing to serve on 0.0.0.0:0 without authorization"),
        "{log}"
    );
    assert!(log.contains("SANDBOX_AUTH_TOKENS_FILE"), "{log}");
}

#[tokio::test]
async fn foreign_hosts_and_origins_are_refused() {
    let server = HttpServer::start(&[]).await;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
        "params": {"_meta": modern_meta()}});
    let modern = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/list"),
    ];
    let (status, _) = post(&server.url(), &modern, list.clone()).await;
    assert_eq!(status, 200);
    // A page on another site, or a name rebound to loopback, gets nothing.
    let mut rebound = modern.to_vec();
    rebound.push(("host", "attacker.example"));
    let (status, _) = post(&server.url(), &rebound, list.clone()).await;
    assert_eq!(status, 403);
    let mut foreign = modern.to_vec();
    foreign.push(("origin", "http://attacker.example"));
    let (status, _) = post(&server.url(), &foreign, list).await;
    assert_eq!(status, 403);
}

#[tokio::test]
async fn a_page_served_from_the_servers_own_address_is_answered() {
    // With no origins configured, a request whose Origin is this server's
    // own address (under a loopback name, at its port) is served, as the
    // conformance suite's DNS-rebinding check expects; another port or
    // scheme is another origin and is refused.
    let server = HttpServer::start(&[]).await;
    let port = server.base.rsplit(':').next().unwrap().to_owned();
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
        "params": {"_meta": modern_meta()}});
    for (host, origin, expected) in [
        ("127.0.0.1", format!("http://127.0.0.1:{port}"), 200),
        ("localhost", format!("http://localhost:{port}"), 200),
        ("127.0.0.1", "http://127.0.0.1:1".to_owned(), 403),
        ("127.0.0.1", format!("https://127.0.0.1:{port}"), 403),
    ] {
        let host = format!("{host}:{port}");
        let headers = [
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-method", "tools/list"),
            ("host", host.as_str()),
            ("origin", origin.as_str()),
        ];
        let (status, answer) = post(&server.url(), &headers, list.clone()).await;
        assert_eq!(status, expected, "{origin}: {answer}");
    }
}

#[tokio::test]
async fn a_mirrored_session_id_that_disagrees_with_the_body_is_refused() {
    let server = HttpServer::start(&[]).await;
    let client = server.client(Era::Stateless, None).await;
    // Clients learn from the schema which argument to mirror.
    let tools = client.list_all_tools().await.unwrap();
    let execute = tools.iter().find(|t| t.name == "execute_code").unwrap();
    assert_eq!(
        execute.input_schema["properties"]["session_id"]["x-mcp-header"],
        "Session-Id"
    );
    call(&client, "create_sandbox", json!({"session_id": "a"})).await;
    let body = |session: &str| {
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
            "name": "execute_code", "arguments": {"session_id": session, "code": "1+1"},
            "_meta": modern_meta()}})
    };
    let (status, answer) = post(
        &server.url(),
        &modern_headers("execute_code", "a"),
        body("a"),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["result"]["structuredContent"]["value"], "2",
        "{answer}"
    );
    // A proxy routing on the header would send this to the wrong replica.
    let (status, answer) = post(
        &server.url(),
        &modern_headers("execute_code", "b"),
        body("a"),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    let message = answer.to_string();
    assert!(
        message.contains("Mcp-Param-Session-Id") || message.contains("Session-Id"),
        "{message}"
    );
}

#[tokio::test]
async fn cancellation_works_over_http_in_both_eras() {
    use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest};
    use rmcp::service::PeerRequestOptions;
    let server = HttpServer::start(&[]).await;
    for era in [Era::Session, Era::Stateless] {
        let client = server.client(era, None).await;
        let id = format!("loop-{era:?}").to_lowercase();
        call(&client, "create_sandbox", json!({"session_id": id})).await;
        let params = CallToolRequestParams::new("execute_code").with_arguments(
            json!({"session_id": id, "code": "while True: pass", "timeout_seconds": 120})
                .as_object()
                .unwrap()
                .clone(),
        );
        let handle = client
            .send_cancellable_request(
                ClientRequest::CallToolRequest(CallToolRequest::new(params)),
                PeerRequestOptions::no_options(),
            )
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        handle.cancel(Some("test".into())).await.unwrap();
        // The next call waits behind the cancelled one, which must stop.
        let after = tokio::time::timeout(
            std::time::Duration::from_secs(60),
            call(
                &client,
                "execute_code",
                json!({"session_id": id, "code": "'free'"}),
            ),
        )
        .await
        .expect("the cancelled execution stopped and the sandbox is free");
        assert_eq!(
            structured(&after)["value"],
            "'free'",
            "{era:?}: {}",
            text(&after)
        );
    }
}

#[tokio::test]
async fn output_arrives_while_the_code_runs_over_http() {
    let server = HttpServer::start(&[]).await;
    for era in [Era::Session, Era::Stateless] {
        let observer = Observer::new(false);
        let client = server.client_with(observer.clone(), era, None).await;
        let id = format!("live-{era:?}").to_lowercase();
        call(&client, "create_sandbox", json!({"session_id": id})).await;
        let marker = format!("marker-{id}");
        let touch = format!("open('/{marker}', 'w').close()");
        call(
            &client,
            "execute_code",
            json!({"session_id": id, "code": touch}),
        )
        .await;
        let dir = find_dir_holding(&server.root, &marker);
        let code = "import os, time\nprint('waiting for go', flush=True)\nwhile not os.path.exists('/go'): time.sleep(0.02)\nprint('went')";
        let request = with_progress(
            "execute_code",
            json!({"session_id": id, "code": code}),
            "live",
        );
        let peer = client.peer().clone();
        let running = tokio::spawn(async move { peer.call_tool(request).await });
        // The code cannot end before /go exists: the output came while it ran.
        let seen = || {
            observer
                .messages()
                .iter()
                .any(|m| m.contains("waiting for go"))
        };
        for _ in 0..3000 {
            if seen() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(seen(), "{era:?}: no live output: {:?}", observer.messages());
        assert!(!running.is_finished());
        std::fs::write(dir.join("go"), "").unwrap();
        let result = running.await.unwrap().unwrap();
        assert!(
            text(&result).contains("waiting for go\nwent"),
            "{}",
            text(&result)
        );
    }
}

/// The host directory (under `root`) that holds a file named `name`.
fn find_dir_holding(root: &std::path::Path, name: &str) -> std::path::PathBuf {
    sandbox_dirs_under(root)
        .into_iter()
        .find(|dir| dir.join(name).exists())
        .unwrap_or_else(|| panic!("no sandbox directory holds {name}"))
}

#[tokio::test]
async fn sigterm_closes_the_sandboxes_and_exits() {
    let server = HttpServer::start(&[("SANDBOX_KEEP_SAVED_SECONDS", "0")]).await;
    let client = server.client(Era::Stateless, None).await;
    call(&client, "create_sandbox", json!({"session_id": "bye"})).await;
    let root = server.root.clone();
    assert!(!sandbox_dirs_under(&root).is_empty());
    let status = server.terminate().await;
    assert!(status.success(), "{status:?}");
    let left = sandbox_dirs_under(&root);
    assert!(left.is_empty(), "sandbox directories left: {left:?}");
}

#[tokio::test]
async fn https_is_served_from_certificate_files() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = test_certificate(dir.path());
    let server = HttpServer::start_on(
        dir.path().join("root"),
        "127.0.0.1:0",
        &[
            ("SANDBOX_TLS_CERT", cert.to_str().unwrap()),
            ("SANDBOX_TLS_KEY", key.to_str().unwrap()),
        ],
    )
    .await
    .expect("serves HTTPS");
    assert!(server.base.starts_with("https://"), "{}", server.base);
    let trusted = reqwest::Certificate::from_pem(&std::fs::read(&ca).unwrap()).unwrap();
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .no_proxy()
        .add_root_certificate(trusted)
        .build()
        .unwrap();
    let health = client
        .get(format!("{}/healthz", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    // A client that does not trust the certificate gets nowhere, and the
    // server goes on.
    assert!(
        http_client()
            .get(format!("{}/healthz", server.base))
            .send()
            .await
            .is_err()
    );
    let again = client
        .get(format!("{}/healthz", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
}

/// A test CA and a certificate it signed for localhost and 127.0.0.1, with
/// its key, made by openssl in `dir`: (CA, certificate, key).
pub(crate) fn test_certificate(
    dir: &std::path::Path,
) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let openssl = |args: &[&str]| {
        let made = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl runs");
        assert!(
            made.status.success(),
            "{}",
            String::from_utf8_lossy(&made.stderr)
        );
    };
    let ec = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1";
    let ext = "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n";
    std::fs::write(dir.join("leaf.ext"), ext).unwrap();
    let ca = format!("req -x509 {ec} -subj /CN=test-ca -keyout ca.key -out ca.pem");
    let leaf = format!("req {ec} -subj /CN=localhost -keyout key.pem -out leaf.csr");
    let sign = "x509 -req -days 1 -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
                -extfile leaf.ext -out cert.pem";
    for step in [ca.as_str(), leaf.as_str(), sign] {
        openssl(&step.split_whitespace().collect::<Vec<_>>());
    }
    (
        dir.join("ca.pem"),
        dir.join("cert.pem"),
        dir.join("key.pem"),
    )
}

#[tokio::test]
async fn a_client_that_never_finishes_its_headers_is_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = HttpServer::start(&[("SANDBOX_HTTP_HEADER_TIMEOUT_SECONDS", "1")]).await;
    let addr = server.base.trim_start_matches("http://").to_owned();
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    // The server closes the connection (perhaps after a 408) instead of
    // holding it for as long as the client likes.
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        slow.read_to_end(&mut rest),
    )
    .await;
    assert!(
        closed.is_ok(),
        "the half-sent request was still open after 30 s"
    );
    // Others are served all along.
    let health = http_client()
        .get(format!("{}/healthz", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
}
