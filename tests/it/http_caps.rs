//! What a hostile caller tried against the HTTP server and the promise it
//! broke, through the real binary: sessions opened without end by one
//! principal, a bearer token with extra spaces, and the operations routes
//! answered for any Host or Origin.

use serde_json::json;

use crate::auth::issuer::{FakeIssuer, RSA_A};
use crate::auth::mint_token;
use crate::support::http::{HttpServer, http_client};

/// A server whose tokens file admits alice and bob, with `env`; their tokens.
async fn server_with_tokens(env: &[(&str, &str)]) -> (HttpServer, [String; 2], tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut file = String::new();
    let mut tokens = Vec::new();
    for name in ["alice", "bob"] {
        let (entry, token) = mint_token(name, &[]);
        file.push_str(&entry);
        file.push('\n');
        tokens.push(token);
    }
    let path = dir.path().join("tokens.toml");
    std::fs::write(&path, file).unwrap();
    let mut env = env.to_vec();
    env.push(("SANDBOX_AUTH_TOKENS_FILE", path.to_str().unwrap()));
    let server = HttpServer::start(&env).await;
    (server, tokens.try_into().unwrap(), dir)
}

/// Opens a 2025-11-25 session with `authorization`: the status, the session
/// id (when one was opened) and the body.
async fn initialize(server: &HttpServer, authorization: &str) -> (u16, Option<String>, String) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}});
    let answer = http_client()
        .post(server.url())
        .header("authorization", authorization)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = answer.status().as_u16();
    let session = answer
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, session, answer.text().await.unwrap_or_default())
}

#[tokio::test]
async fn one_principal_cannot_open_sessions_without_end() {
    let (server, [alice, bob], _dir) =
        server_with_tokens(&[("SANDBOX_HTTP_MAX_SESSIONS_PER_PRINCIPAL", "3")]).await;
    let alice = format!("Bearer {alice}");
    let bob = format!("Bearer {bob}");
    let mut opened = Vec::new();
    for _ in 0..3 {
        let (status, session, body) = initialize(&server, &alice).await;
        assert_eq!(status, 200, "{body}");
        opened.push(session.expect("a session id"));
    }
    let (status, session, body) = initialize(&server, &alice).await;
    assert_eq!(status, 429, "the fourth session: {body}");
    assert!(session.is_none(), "no session is handed out over the cap");
    assert!(
        body.contains("SANDBOX_HTTP_MAX_SESSIONS_PER_PRINCIPAL") && body.contains("DELETE"),
        "{body}"
    );
    // Another principal is not held back by hers.
    let (status, _, body) = initialize(&server, &bob).await;
    assert_eq!(status, 200, "{body}");
    // Ending one makes room again.
    let ended = http_client()
        .delete(server.url())
        .header("authorization", &alice)
        .header("mcp-session-id", &opened[0])
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .unwrap();
    // 204, not rmcp's 202, which the official Python client logs as a
    // failed termination.
    assert_eq!(ended.status(), 204, "{}", ended.text().await.unwrap());
    let (status, _, body) = initialize(&server, &alice).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn sessions_are_capped_by_default_too() {
    let (server, [alice, _], _dir) = server_with_tokens(&[]).await;
    let alice = format!("Bearer {alice}");
    let mut statuses = Vec::new();
    for _ in 0..70 {
        statuses.push(initialize(&server, &alice).await.0);
    }
    let served = statuses.iter().filter(|&&s| s == 200).count();
    assert_eq!(served, 64, "{statuses:?}");
    assert!(statuses[64..].iter().all(|&s| s == 429), "{statuses:?}");
}

#[tokio::test]
async fn a_bearer_token_with_extra_spaces_is_refused() {
    let (server, [alice, _], _dir) = server_with_tokens(&[]).await;
    let (status, _, body) = initialize(&server, &format!("Bearer {alice}")).await;
    assert_eq!(status, 200, "{body}");
    for near_miss in [
        format!("Bearer  {alice}"),
        format!("Bearer   {alice}"),
        format!("Bearer\t{alice}"),
        format!("Bearer {alice} x"),
    ] {
        let (status, session, body) = initialize(&server, &near_miss).await;
        assert_eq!(status, 401, "{near_miss:?}: {body}");
        assert!(session.is_none());
    }
}

/// The status of a GET of `path` with extra `headers`.
async fn get(base: &str, path: &str, headers: &[(&str, &str)]) -> u16 {
    let mut request = http_client().get(format!("{base}{path}"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.unwrap().status().as_u16()
}

#[tokio::test]
async fn every_route_answers_only_the_servers_names_and_origins() {
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
    let own_origin = format!("http://127.0.0.1:{port}");
    for path in [
        "/healthz",
        "/readyz",
        "/metrics",
        "/.well-known/oauth-protected-resource/mcp",
        "/mcp",
    ] {
        let plain = get(&server.base, path, &[]).await;
        assert!(
            [200, 401, 405, 406, 503].contains(&plain),
            "{path}: {plain}"
        );
        assert_eq!(
            get(&server.base, path, &[("origin", &own_origin)]).await,
            plain,
            "{path}: the server's own origin"
        );
        assert_eq!(
            get(&server.base, path, &[("host", "attacker.example")]).await,
            403,
            "{path}: a name rebound to loopback"
        );
        assert_eq!(
            get(
                &server.base,
                path,
                &[("host", &format!("attacker.example:{port}"))]
            )
            .await,
            403,
            "{path}: a name rebound to loopback, with the port"
        );
        assert_eq!(
            get(&server.base, path, &[("origin", "http://attacker.example")]).await,
            403,
            "{path}: a page on another site"
        );
    }
}
