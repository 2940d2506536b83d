//! Sandboxes belong to the principal that created them, over HTTP with
//! authorization on: another principal naming the same id gets the answer
//! for a sandbox that does not exist, sees none of them listed, and has caps
//! of its own. Driven through the real binary with static tokens and with
//! OAuth access tokens from a fake authorization server.

use serde_json::json;

use crate::auth::issuer::{FakeIssuer, RSA_A, now};
use crate::auth::mint_token;
use crate::support::http::{Era, HttpServer, call, http_client};
use crate::support::{structured, text};

/// A server whose tokens file admits alice, bob, and carol (one sandbox at
/// most); their tokens.
async fn server_with_tokens() -> (HttpServer, [String; 3], tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut file = String::new();
    let mut tokens = Vec::new();
    for (name, limits) in [
        ("alice", vec![]),
        ("bob", vec![]),
        ("carol", vec!["--limit-sandboxes", "1"]),
    ] {
        let (entry, token) = mint_token(name, &limits);
        file.push_str(&entry);
        file.push('\n');
        tokens.push(token);
    }
    let path = dir.path().join("tokens.toml");
    std::fs::write(&path, file).unwrap();
    let server = HttpServer::start(&[("SANDBOX_AUTH_TOKENS_FILE", path.to_str().unwrap())]).await;
    (server, tokens.try_into().unwrap(), dir)
}

#[tokio::test]
async fn a_principal_cannot_see_or_touch_another_principals_sandbox() {
    let (server, [alice, bob, _], _dir) = server_with_tokens().await;
    for era in [Era::Stateless, Era::Session] {
        let a = server.client(era, Some(&alice)).await;
        let b = server.client(era, Some(&bob)).await;
        let id = format!("shared-{era:?}").to_lowercase();
        call(&a, "create_sandbox", json!({"session_id": id})).await;
        call(
            &a,
            "execute_code",
            json!({"session_id": id, "code": "secret = 41"}),
        )
        .await;
        call(
            &a,
            "write_file",
            json!({"session_id": id, "file_path": "/s.txt", "content": "alice's"}),
        )
        .await;

        // Bob gets exactly what he gets for an id nobody uses.
        let never = format!("never-{era:?}").to_lowercase();
        for (tool, args) in [
            ("execute_code", json!({"code": "secret"})),
            ("read_file", json!({"file_path": "/s.txt"})),
            ("list_files", json!({})),
            (
                "write_file",
                json!({"file_path": "/s.txt", "content": "bob's"}),
            ),
            ("install_package", json!({"package_name": "six"})),
            ("fork_sandbox", json!({})),
        ] {
            let mut on_alices = args.clone();
            on_alices["session_id"] = json!(id);
            let mut on_nothing = args.clone();
            on_nothing["session_id"] = json!(never);
            let refused = call(&b, tool, on_alices).await;
            let unknown = call(&b, tool, on_nothing).await;
            assert_eq!(refused.is_error, Some(true), "{tool}: {}", text(&refused));
            assert_eq!(
                text(&refused).replace(&id, "ID"),
                text(&unknown).replace(&never, "ID"),
                "{tool}: the answer must not tell the two apart"
            );
        }
        let status = call(&b, "get_sandbox_status", json!({})).await;
        assert!(!text(&status).contains(&id), "{}", text(&status));
        // Nor what all sandboxes use together, which would show when she is busy.
        assert!(
            structured(&status)["budgets"].is_null(),
            "{}",
            structured(&status)
        );
        let one = call(&b, "get_sandbox_status", json!({"session_id": id})).await;
        assert_eq!(one.is_error, Some(true), "{}", text(&one));
        let resources = b.list_all_resources().await.unwrap();
        assert!(
            resources.iter().all(|r| !r.uri.contains(&id)),
            "{resources:?}"
        );
        assert!(
            b.read_resource(rmcp::model::ReadResourceRequestParams::new(format!(
                "sandbox://{id}/s.txt"
            )))
            .await
            .is_err()
        );

        // Bob's own sandbox of that id is his, and closing it leaves alice's.
        let created = call(&b, "create_sandbox", json!({"session_id": id})).await;
        assert_eq!(structured(&created)["created"], true, "{}", text(&created));
        let his = call(
            &b,
            "execute_code",
            json!({"session_id": id, "code": "'secret' in globals()"}),
        )
        .await;
        assert_eq!(structured(&his)["value"], "False");
        call(&b, "close_sandbox", json!({"session_id": id})).await;
        let hers = call(
            &a,
            "execute_code",
            json!({"session_id": id, "code": "secret + 1"}),
        )
        .await;
        assert_eq!(structured(&hers)["value"], "42", "{}", text(&hers));
        let listed = call(&a, "get_sandbox_status", json!({})).await;
        assert!(text(&listed).contains(&id), "{}", text(&listed));
    }
}

#[tokio::test]
async fn requests_without_a_valid_token_never_reach_a_tool() {
    let (server, [alice, _, _], _dir) = server_with_tokens().await;
    assert!(server.try_client(Era::Stateless, None).await.is_err());
    assert!(
        server
            .try_client(Era::Session, Some("mcs_forged"))
            .await
            .is_err()
    );
    let mut cut = alice.clone();
    cut.pop();
    assert!(server.try_client(Era::Stateless, Some(&cut)).await.is_err());
    let raw = http_client()
        .post(server.url())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_sandbox","arguments":{"session_id":"sneaky"}}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 401);
    assert!(raw.headers().contains_key("www-authenticate"));
    // Nothing was created, and the operations routes stay open.
    let metrics = server.metrics().await;
    assert!(
        metrics.contains("mcp_sandbox_sandboxes{backend=\"wasm\"} 0"),
        "{metrics}"
    );
    let logs = server.logs();
    assert!(!logs.contains(&alice), "a token was logged");
}

#[tokio::test]
async fn a_principal_over_its_own_cap_is_refused_while_others_go_on() {
    let (server, [alice, _, carol], _dir) = server_with_tokens().await;
    let c = server.client(Era::Stateless, Some(&carol)).await;
    let first = call(&c, "create_sandbox", json!({"session_id": "one"})).await;
    assert_ne!(first.is_error, Some(true), "{}", text(&first));
    let second = call(&c, "create_sandbox", json!({"session_id": "two"})).await;
    assert_eq!(second.is_error, Some(true));
    assert!(
        text(&second).contains("the most your account may hold is 1 sandboxes"),
        "{}",
        text(&second)
    );
    let a = server.client(Era::Stateless, Some(&alice)).await;
    let other = call(&a, "create_sandbox", json!({"session_id": "two"})).await;
    assert_ne!(other.is_error, Some(true), "{}", text(&other));
}

#[tokio::test]
async fn an_open_address_is_served_once_authorization_is_on() {
    let dir = tempfile::tempdir().unwrap();
    let (entry, token) = mint_token("alice", &[]);
    let path = dir.path().join("tokens.toml");
    std::fs::write(&path, entry).unwrap();
    let mut server = HttpServer::start_on(
        dir.path().join("root"),
        "0.0.0.0:0",
        &[("SANDBOX_AUTH_TOKENS_FILE", path.to_str().unwrap())],
    )
    .await
    .expect("serves on 0.0.0.0 with tokens");
    // It listens on every address; loopback is one of them.
    let port = server.base.rsplit(':').next().unwrap().to_owned();
    server.base = format!("http://127.0.0.1:{port}");
    let client = server.client(Era::Stateless, Some(&token)).await;
    let ran = call(&client, "create_run_close", json!({"code": "2 + 2"})).await;
    assert_eq!(structured(&ran)["value"], "4", "{}", text(&ran));
}

#[tokio::test]
async fn oauth_access_tokens_name_the_owner_and_bad_ones_are_refused() {
    let issuer = FakeIssuer::start(&[RSA_A]).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let public = format!("http://127.0.0.1:{port}");
    let dir = tempfile::tempdir().unwrap();
    let server = HttpServer::start_on(
        dir.path().join("root"),
        &format!("127.0.0.1:{port}"),
        &[
            ("SANDBOX_OAUTH_ISSUER", issuer.url.as_str()),
            ("SANDBOX_PUBLIC_URL", public.as_str()),
        ],
    )
    .await
    .expect("serves with OAuth");
    let token = |sub: &str, audience: &str, scope: &str| {
        RSA_A.sign(&json!({
            "iss": issuer.url, "aud": audience, "sub": sub, "scope": scope,
            "iat": now(), "exp": now() + 600,
        }))
    };
    let resource = format!("{public}/mcp");
    let alice = server
        .client(Era::Stateless, Some(&token("alice", &resource, "sandbox")))
        .await;
    call(&alice, "create_sandbox", json!({"session_id": "mine"})).await;
    let bob = server
        .client(Era::Session, Some(&token("bob", &resource, "sandbox")))
        .await;
    let status = call(&bob, "get_sandbox_status", json!({})).await;
    assert!(!text(&status).contains("mine"), "{}", text(&status));
    // A token for another resource, or without the scope, gets nowhere.
    let elsewhere = token("alice", "http://127.0.0.1:1/mcp", "sandbox");
    assert!(
        server
            .try_client(Era::Stateless, Some(&elsewhere))
            .await
            .is_err()
    );
    let narrow = token("alice", &resource, "openid");
    assert!(
        server
            .try_client(Era::Stateless, Some(&narrow))
            .await
            .is_err()
    );
    // The protected resource metadata names the issuer.
    let metadata: serde_json::Value = http_client()
        .get(format!("{public}/.well-known/oauth-protected-resource/mcp"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(metadata["resource"], resource);
    assert_eq!(metadata["authorization_servers"][0], issuer.url);
}

#[tokio::test]
async fn a_session_belongs_to_the_principal_that_opened_it() {
    let (server, [alice, bob, _], _dir) = server_with_tokens().await;
    let http = http_client();
    let send = |token: &str,
                session: Option<&str>,
                method: reqwest::Method,
                body: Option<serde_json::Value>| {
        let mut request = http
            .request(method, server.url())
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25");
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        request.send()
    };
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}});
    let opened = send(&alice, None, reqwest::Method::POST, Some(initialize))
        .await
        .unwrap();
    assert_eq!(opened.status(), 200);
    let session = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    drop(opened);
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let unknown = send(
        &bob,
        Some("no-such-session"),
        reqwest::Method::POST,
        Some(list.clone()),
    )
    .await
    .unwrap();
    let unknown = (unknown.status(), unknown.text().await.unwrap());
    // Bob with alice's session id: as if it did not exist, whatever he tries.
    for method in [
        reqwest::Method::POST,
        reqwest::Method::GET,
        reqwest::Method::DELETE,
    ] {
        let body = (method == reqwest::Method::POST).then(|| list.clone());
        let answer = send(&bob, Some(&session), method.clone(), body)
            .await
            .unwrap();
        assert_eq!(answer.status(), 404, "{method}");
        if method == reqwest::Method::POST {
            assert_eq!((answer.status(), answer.text().await.unwrap()), unknown);
        }
    }
    // Alice's session is untouched.
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    send(
        &alice,
        Some(&session),
        reqwest::Method::POST,
        Some(initialized),
    )
    .await
    .unwrap();
    let mine = send(&alice, Some(&session), reqwest::Method::POST, Some(list))
        .await
        .unwrap();
    assert_eq!(mine.status(), 200);
    assert!(mine.text().await.unwrap().contains("execute_code"));
}
