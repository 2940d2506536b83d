//! Authorization in front of an HTTP route: `Authorizer::protect` over a
//! small axum route on loopback, against the fake issuer in `auth/issuer.rs`
//! and a static tokens file. Every refusal is checked to happen before the
//! route runs: the route counts its calls, and the count stays 0.

pub mod issuer;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{Extension, State};
use axum::routing::post;
use mcp_code_sandbox::auth::{AuthSettings, Authorizer, OAuthSettings, Principal};
use reqwest::{StatusCode, Url};
use serde_json::{Value, json};

use issuer::{EC_A, FakeIssuer, RSA_A, RSA_B, hs256, now, unsigned};

/// A protected route on loopback that counts the requests it serves.
struct App {
    url: String,
    calls: Arc<AtomicUsize>,
    client: reqwest::Client,
}

/// The answer of one request.
struct Answer {
    status: StatusCode,
    challenge: String,
    body: Value,
}

impl App {
    /// Serves `/mcp` (and nothing else) behind an authorizer with these
    /// settings; `oauth` gets the app's own URL as its public URL.
    async fn start(tokens_file: Option<std::path::PathBuf>, oauth: Option<OAuthSettings>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let oauth = oauth.map(|mut o| {
            o.public_url = Url::parse(&url).unwrap();
            o
        });
        let auth = Authorizer::new(AuthSettings { tokens_file, oauth }).unwrap();
        assert!(auth.is_configured());
        let calls = Arc::new(AtomicUsize::new(0));
        let inner = Router::new()
            .route("/mcp", post(route))
            .with_state(calls.clone());
        let app = Arc::new(auth).protect(inner);
        tokio::spawn(async move { axum::serve(listener, app).await });
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        Self { url, calls, client }
    }

    async fn oauth(issuer: &FakeIssuer) -> Self {
        Self::start(None, Some(oauth_settings(issuer))).await
    }

    /// POSTs to `/mcp` with these `Authorization` headers.
    async fn post(&self, authorization: &[&str]) -> Answer {
        let mut request = self.client.post(format!("{}/mcp", self.url));
        for value in authorization {
            request = request.header("authorization", *value);
        }
        answer(request.send().await.unwrap()).await
    }

    async fn bearer(&self, token: &str) -> Answer {
        self.post(&[&format!("Bearer {token}")]).await
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

async fn answer(response: reqwest::Response) -> Answer {
    let status = response.status();
    let challenge = response
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body = response.json().await.unwrap_or(Value::Null);
    Answer {
        status,
        challenge,
        body,
    }
}

/// The protected route: says whom it served.
async fn route(
    State(calls): State<Arc<AtomicUsize>>,
    Extension(p): Extension<Principal>,
) -> axum::Json<Value> {
    calls.fetch_add(1, Ordering::SeqCst);
    axum::Json(json!({
        "principal": p.name,
        "max_sandboxes": p.limits.max_sandboxes,
        "max_memory_mb": p.limits.max_memory_mb,
        "max_disk_mb": p.limits.max_disk_mb,
    }))
}

fn oauth_settings(issuer: &FakeIssuer) -> OAuthSettings {
    OAuthSettings::new(
        Url::parse(&issuer.url).unwrap(),
        // Replaced by the app's own URL in App::start.
        Url::parse("http://127.0.0.1").unwrap(),
        vec!["sandbox".into()],
    )
}

/// Claims a good token of `app` carries.
fn claims(app: &App, issuer: &FakeIssuer) -> Value {
    json!({
        "iss": issuer.url,
        "aud": format!("{}/mcp", app.url),
        "sub": "alice",
        "scope": "openid sandbox",
        "iat": now(),
        "exp": now() + 600,
    })
}

fn with(mut claims: Value, key: &str, value: Value) -> Value {
    claims[key] = value;
    claims
}

fn assert_invalid_token(answer: &Answer, what: &str) {
    assert_eq!(
        answer.status,
        StatusCode::UNAUTHORIZED,
        "{what}: {:?}",
        answer.body
    );
    assert!(
        answer.challenge.starts_with("Bearer ")
            && answer.challenge.contains(r#"error="invalid_token""#),
        "{what}: {}",
        answer.challenge
    );
}

#[tokio::test]
async fn a_good_access_token_reaches_the_route_with_its_principal() {
    let issuer = FakeIssuer::start(&[RSA_A, EC_A]).await;
    let app = App::oauth(&issuer).await;
    let good = claims(&app, &issuer);
    let answer = app.bearer(&RSA_A.sign(&good)).await;
    assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
    assert_eq!(answer.body["principal"], "alice");
    assert_eq!(answer.body["max_sandboxes"], Value::Null);
    // ES256, with the scopes as an `scp` array and the audience in a list.
    let es = json!({
        "iss": issuer.url, "aud": ["other", format!("{}/mcp", app.url)], "sub": "bob",
        "scp": ["sandbox"], "exp": now() + 600,
    });
    let answer = app.bearer(&EC_A.sign(&es)).await;
    assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
    assert_eq!(answer.body["principal"], "bob");
    assert_eq!(app.calls(), 2);
    // The keys were fetched once, through the issuer's metadata.
    assert_eq!((issuer.metadata_fetches(), issuer.jwks_fetches()), (1, 1));
}

#[tokio::test]
async fn a_request_without_a_token_gets_the_challenge_and_never_reaches_the_route() {
    let issuer = FakeIssuer::start(&[RSA_A]).await;
    let app = App::oauth(&issuer).await;
    for headers in [&[][..], &["Basic YWxpY2U6cHc="][..]] {
        let answer = app.post(headers).await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
        assert_eq!(
            answer.challenge,
            format!(
                r#"Bearer resource_metadata="{}/.well-known/oauth-protected-resource/mcp", scope="sandbox""#,
                app.url
            )
        );
    }
    // Other paths are behind the same check (no route is found unasked).
    let other = answer(
        app.client
            .get(format!("{}/elsewhere", app.url))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(other.status, StatusCode::UNAUTHORIZED);
    assert_eq!(app.calls(), 0);
    // Nothing was fetched from the issuer for requests without a token.
    assert_eq!(issuer.jwks_fetches(), 0);
}

#[tokio::test]
async fn bad_access_tokens_are_refused_before_the_route() {
    let issuer = FakeIssuer::start(&[RSA_A, EC_A]).await;
    let app = App::oauth(&issuer).await;
    let good = claims(&app, &issuer);
    let mut no_exp = good.clone();
    no_exp.as_object_mut().unwrap().remove("exp");
    let mut no_sub = good.clone();
    no_sub.as_object_mut().unwrap().remove("sub");
    let public_key_as_secret = serde_json::to_vec(&RSA_A.jwk()).unwrap();
    let cases: Vec<(&str, String)> = vec![
        ("not a JWT", "not-a-jwt".into()),
        ("three garbage parts", "abc.def.ghi".into()),
        (
            "expired",
            RSA_A.sign(&with(good.clone(), "exp", json!(now() - 3600))),
        ),
        (
            "not yet valid",
            RSA_A.sign(&with(good.clone(), "nbf", json!(now() + 3600))),
        ),
        (
            "wrong audience",
            RSA_A.sign(&with(
                good.clone(),
                "aud",
                json!(format!("{}/other", app.url)),
            )),
        ),
        (
            "audience of the bare URL",
            RSA_A.sign(&with(good.clone(), "aud", json!(app.url))),
        ),
        (
            "wrong issuer",
            RSA_A.sign(&with(good.clone(), "iss", json!("http://127.0.0.1:1"))),
        ),
        ("no exp", RSA_A.sign(&no_exp)),
        ("no sub", RSA_A.sign(&no_sub)),
        ("bad signature", RSA_B.sign_as(RSA_A.kid, &good)),
        ("unknown kid", RSA_B.sign(&good)),
        (
            "EC key named for an RSA signature",
            RSA_A.sign_as(EC_A.kid, &good),
        ),
        ("alg none", unsigned(RSA_A.kid, &good)),
        ("HS256", hs256(RSA_A.kid, b"a shared secret", &good)),
        (
            "HS256 keyed with the public key",
            hs256(RSA_A.kid, &public_key_as_secret, &good),
        ),
    ];
    for (what, token) in &cases {
        assert_invalid_token(&app.bearer(token).await, what);
    }
    // A signature cut off, a token with one character changed.
    let token = RSA_A.sign(&good);
    assert_invalid_token(
        &app.bearer(&token[..token.len() - 4]).await,
        "cut signature",
    );
    let (head, tail) = token.split_at(token.len() / 2);
    let flipped = if tail.starts_with('A') { "B" } else { "A" };
    assert_invalid_token(
        &app.bearer(&format!("{head}{flipped}{}", &tail[1..])).await,
        "tampered",
    );
    assert_eq!(app.calls(), 0);
    // The same token, whole, is good: the refusals were for what they changed.
    assert_eq!(app.bearer(&token).await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_token_without_the_scope_is_forbidden() {
    let issuer = FakeIssuer::start(&[RSA_A]).await;
    let app = App::oauth(&issuer).await;
    let good = claims(&app, &issuer);
    for scopes in [json!("openid"), json!("sandboxes"), json!("")] {
        let answer = app
            .bearer(&RSA_A.sign(&with(good.clone(), "scope", scopes)))
            .await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN);
        assert!(
            answer.challenge.contains(r#"error="insufficient_scope""#),
            "{}",
            answer.challenge
        );
        assert!(
            answer.challenge.contains(r#"scope="sandbox""#),
            "{}",
            answer.challenge
        );
        assert!(
            answer.challenge.contains("resource_metadata="),
            "{}",
            answer.challenge
        );
    }
    let mut no_scope = good.clone();
    no_scope.as_object_mut().unwrap().remove("scope");
    assert_eq!(
        app.bearer(&RSA_A.sign(&no_scope)).await.status,
        StatusCode::FORBIDDEN
    );
    assert_eq!(app.calls(), 0);
}

#[tokio::test]
async fn several_authorization_headers_are_a_bad_request() {
    let issuer = FakeIssuer::start(&[RSA_A]).await;
    let app = App::oauth(&issuer).await;
    let token = RSA_A.sign(&claims(&app, &issuer));
    let answer = app
        .post(&[&format!("Bearer {token}"), &format!("Bearer {token}")])
        .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(app.calls(), 0);
}

#[tokio::test]
async fn the_protected_resource_metadata_is_served_without_a_token() {
    let issuer = FakeIssuer::start(&[RSA_A]).await;
    let app = App::oauth(&issuer).await;
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let response = app
            .client
            .get(format!("{}{path}", app.url))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        let doc: Value = response.json().await.unwrap();
        assert_eq!(doc["resource"], format!("{}/mcp", app.url));
        assert_eq!(doc["authorization_servers"], json!([issuer.url]));
        assert_eq!(doc["scopes_supported"], json!(["sandbox"]));
        assert_eq!(doc["bearer_methods_supported"], json!(["header"]));
    }
    assert_eq!(app.calls(), 0);
}

#[tokio::test]
async fn made_up_kids_do_not_make_the_server_fetch_the_keys_again() {
    let issuer = FakeIssuer::start(&[RSA_A]).await;
    let mut settings = oauth_settings(&issuer);
    settings.jwks_min_refetch = Duration::from_secs(3600);
    let app = App::start(None, Some(settings)).await;
    let good = claims(&app, &issuer);
    assert_eq!(app.bearer(&RSA_A.sign(&good)).await.status, StatusCode::OK);
    for i in 0..5 {
        let forged = RSA_B.sign_as(&format!("forged-{i}"), &good);
        assert_invalid_token(&app.bearer(&forged).await, "forged kid");
    }
    assert_eq!((issuer.metadata_fetches(), issuer.jwks_fetches()), (1, 1));
    assert_eq!(app.calls(), 1);
}

#[tokio::test]
async fn a_new_key_of_the_issuer_is_fetched_when_a_token_names_it() {
    let issuer = FakeIssuer::start(&[RSA_A]).await;
    let mut settings = oauth_settings(&issuer);
    settings.jwks_min_refetch = Duration::ZERO;
    let app = App::start(None, Some(settings)).await;
    let good = claims(&app, &issuer);
    assert_eq!(app.bearer(&RSA_A.sign(&good)).await.status, StatusCode::OK);
    assert_invalid_token(
        &app.bearer(&RSA_B.sign(&good)).await,
        "key not published yet",
    );
    assert_eq!(issuer.jwks_fetches(), 2);
    issuer.publish(RSA_B);
    let answer = app.bearer(&RSA_B.sign(&good)).await;
    assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
    assert_eq!(issuer.jwks_fetches(), 3);
    // Known keys are served from the cache.
    assert_eq!(app.bearer(&RSA_A.sign(&good)).await.status, StatusCode::OK);
    assert_eq!(issuer.jwks_fetches(), 3);
}

#[tokio::test]
async fn keys_past_their_age_are_fetched_again() {
    let issuer = FakeIssuer::start(&[RSA_A]).await;
    let mut settings = oauth_settings(&issuer);
    settings.jwks_max_age = Duration::ZERO;
    settings.jwks_min_refetch = Duration::ZERO;
    let app = App::start(None, Some(settings)).await;
    let token = RSA_A.sign(&claims(&app, &issuer));
    for expected in 1..=3 {
        assert_eq!(app.bearer(&token).await.status, StatusCode::OK);
        assert_eq!(issuer.jwks_fetches(), expected);
    }
    // The jwks_uri found once is reused.
    assert_eq!(issuer.metadata_fetches(), 1);
}

#[tokio::test]
async fn metadata_naming_another_issuer_is_not_trusted() {
    let issuer = FakeIssuer::start(&[RSA_A]).await;
    issuer.claim_to_be("http://127.0.0.1:1");
    let app = App::oauth(&issuer).await;
    let answer = app.bearer(&RSA_A.sign(&claims(&app, &issuer))).await;
    assert_eq!(
        answer.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{:?}",
        answer.body
    );
    assert_eq!(issuer.jwks_fetches(), 0);
    assert_eq!(app.calls(), 0);
}

#[tokio::test]
async fn an_unreachable_issuer_refuses_tokens_with_503() {
    // Port 1 (tcpmux), which nothing here listens on: a port found free a moment
    // before could be taken meanwhile by another test's listener, which answered.
    let url = "http://127.0.0.1:1".to_owned();
    let settings = OAuthSettings::new(
        Url::parse(&url).unwrap(),
        Url::parse("http://127.0.0.1").unwrap(),
        vec!["sandbox".into()],
    );
    let app = App::start(None, Some(settings)).await;
    let claims = json!({"iss": url, "aud": format!("{}/mcp", app.url), "sub": "a", "scope": "sandbox", "exp": now() + 60});
    let answer = app.bearer(&RSA_A.sign(&claims)).await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(app.calls(), 0);
}

/// A tokens file holding the entry the `token` subcommand printed.
fn tokens_file(
    dir: &tempfile::TempDir,
    principal: &str,
    limits: &[&str],
) -> (std::path::PathBuf, String) {
    let (entry, token) = mint_token(principal, limits);
    let path = dir.path().join("tokens.toml");
    std::fs::write(&path, entry).unwrap();
    (path, token)
}

/// A fresh static token for `principal` with `limits` (flags of the `token`
/// subcommand), minted by the binary: the tokens-file entry it printed, and
/// the token.
pub fn mint_token(principal: &str, limits: &[&str]) -> (String, String) {
    let out = std::process::Command::new(crate::support::binary())
        .args(["token", "--principal", principal])
        .args(limits)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let token = stdout.lines().nth(1).unwrap().to_owned();
    let entry = stdout[stdout.find("[[token]]").unwrap()..].to_owned();
    assert!(!entry.contains(&token), "the entry must hold only the hash");
    (entry, token)
}

#[tokio::test]
async fn a_minted_static_token_reaches_the_route_and_near_misses_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let (path, token) = tokens_file(
        &dir,
        "bob",
        &["--limit-sandboxes", "3", "--limit-disk-mb", "500"],
    );
    let app = App::start(Some(path), None).await;
    // Without OAuth the challenge names a realm, not metadata.
    let answer = app.post(&[]).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    assert_eq!(answer.challenge, r#"Bearer realm="mcp-code-sandbox""#);
    let hash = {
        use sha2::Digest;
        mcp_code_sandbox::digest::hex(&sha2::Sha256::digest(token.as_bytes()))
    };
    let near_misses = [
        "mcs_wrong".to_owned(),
        token[..token.len() - 1].to_owned(),
        format!("{token}A"),
        hash,
    ];
    for near in &near_misses {
        assert_invalid_token(&app.bearer(near).await, "near miss");
    }
    assert_eq!(app.calls(), 0);
    let answer = app.bearer(&token).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.body["principal"], "bob");
    assert_eq!(answer.body["max_sandboxes"], 3);
    assert_eq!(answer.body["max_memory_mb"], Value::Null);
    assert_eq!(answer.body["max_disk_mb"], 500);
    assert_eq!(app.calls(), 1);
    // The metadata routes exist only with OAuth on.
    let meta = app
        .client
        .get(format!("{}/.well-known/oauth-protected-resource", app.url))
        .send()
        .await
        .unwrap();
    assert_eq!(meta.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn with_both_modes_static_tokens_are_tried_first_and_jwts_still_work() {
    let dir = tempfile::tempdir().unwrap();
    let (path, token) = tokens_file(&dir, "carol", &[]);
    let issuer = FakeIssuer::start(&[RSA_A]).await;
    let app = App::start(Some(path), Some(oauth_settings(&issuer))).await;
    let answer = app.bearer(&token).await;
    assert_eq!(answer.body["principal"], "carol");
    // A static token costs the issuer nothing.
    assert_eq!(issuer.jwks_fetches(), 0);
    let answer = app.bearer(&RSA_A.sign(&claims(&app, &issuer))).await;
    assert_eq!(answer.body["principal"], "alice");
    assert_invalid_token(&app.bearer("mcs_wrong").await, "wrong static token");
    assert_eq!(app.calls(), 2);
}

#[test]
fn a_malformed_tokens_file_stops_the_start_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens.toml");
    std::fs::write(
        &path,
        "[[token]]\nsha256 = \"0123\"\nprincipal = \"dave\"\n",
    )
    .unwrap();
    let err = Authorizer::new(AuthSettings {
        tokens_file: Some(path.clone()),
        oauth: None,
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains(&format!("{} line 2", path.display())), "{err}");
    assert!(err.contains("64 hex digits"), "{err}");
}

#[test]
fn token_refuses_a_principal_name_it_cannot_store() {
    let out = std::process::Command::new(crate::support::binary())
        .args(["token", "--principal", "alice smith"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "no token may be printed");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a name"));
}
