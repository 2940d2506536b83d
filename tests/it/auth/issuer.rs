//! A fake OAuth authorization server on loopback: RFC 8414 metadata and a
//! JWKS, counting how often each is fetched, with keys that can be added
//! while it runs; and access tokens minted with the fixed test keys in
//! tests/fixtures/auth (made with openssl; never used anywhere else).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use base64::Engine;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

/// A test key: its PEM file, algorithm and `kid`.
#[derive(Clone, Copy)]
pub struct TestKey {
    pub file: &'static str,
    pub alg: Algorithm,
    pub kid: &'static str,
}

/// The RSA key the issuer publishes from the start.
pub const RSA_A: TestKey = TestKey {
    file: "rsa-a.pem",
    alg: Algorithm::RS256,
    kid: "rsa-a",
};
/// An RSA key the issuer does not publish (until a test adds it).
pub const RSA_B: TestKey = TestKey {
    file: "rsa-b.pem",
    alg: Algorithm::RS256,
    kid: "rsa-b",
};
/// The P-256 key the issuer publishes from the start.
pub const EC_A: TestKey = TestKey {
    file: "ec-a.pem",
    alg: Algorithm::ES256,
    kid: "ec-a",
};

fn pem(file: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/auth")
        .join(file);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

impl TestKey {
    fn encoding(&self) -> EncodingKey {
        let pem = pem(self.file);
        match self.alg {
            Algorithm::ES256 => EncodingKey::from_ec_pem(&pem).unwrap(),
            _ => EncodingKey::from_rsa_pem(&pem).unwrap(),
        }
    }

    /// Its public half as a JWK with its `kid` and `use: sig`.
    pub fn jwk(&self) -> Value {
        let mut jwk = Jwk::from_encoding_key(&self.encoding(), self.alg).unwrap();
        jwk.common.key_id = Some(self.kid.to_owned());
        let mut value = serde_json::to_value(jwk).unwrap();
        value["use"] = json!("sig");
        value
    }

    /// A JWT of `claims` signed with this key, naming `kid` in its header.
    pub fn sign_as(&self, kid: &str, claims: &Value) -> String {
        let mut header = Header::new(self.alg);
        header.kid = Some(kid.to_owned());
        jsonwebtoken::encode(&header, claims, &self.encoding()).unwrap()
    }

    /// A JWT of `claims` signed with this key under its own `kid`.
    pub fn sign(&self, claims: &Value) -> String {
        self.sign_as(self.kid, claims)
    }
}

/// A JWT with `"alg": "none"` and no signature.
pub fn unsigned(kid: &str, claims: &Value) -> String {
    let b64 = |v: &Value| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(serde_json::to_vec(v).unwrap())
    };
    format!(
        "{}.{}.",
        b64(&json!({"alg": "none", "typ": "JWT", "kid": kid})),
        b64(claims)
    )
}

/// A JWT signed with HMAC-SHA256 under `secret`, naming `kid`.
pub fn hs256(kid: &str, secret: &[u8], claims: &Value) -> String {
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some(kid.to_owned());
    jsonwebtoken::encode(&header, claims, &EncodingKey::from_secret(secret).unwrap()).unwrap()
}

/// Seconds since the epoch.
pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[derive(Default)]
struct Published {
    keys: Mutex<Vec<Value>>,
    metadata_fetches: AtomicUsize,
    jwks_fetches: AtomicUsize,
    issuer: Mutex<String>,
    base: Mutex<String>,
}

/// The running fake issuer.
pub struct FakeIssuer {
    /// Its issuer identifier, `http://127.0.0.1:PORT`.
    pub url: String,
    published: Arc<Published>,
}

impl FakeIssuer {
    /// Starts an issuer publishing `keys`.
    pub async fn start(keys: &[TestKey]) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let published = Arc::new(Published::default());
        *published.issuer.lock().unwrap() = url.clone();
        *published.base.lock().unwrap() = url.clone();
        *published.keys.lock().unwrap() = keys.iter().map(TestKey::jwk).collect();
        let app = Router::new()
            .route("/.well-known/oauth-authorization-server", get(metadata))
            .route("/jwks", get(jwks))
            .with_state(published.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { url, published }
    }

    /// Publishes one more key.
    pub fn publish(&self, key: TestKey) {
        self.published.keys.lock().unwrap().push(key.jwk());
    }

    /// Makes the metadata name another issuer.
    pub fn claim_to_be(&self, issuer: &str) {
        *self.published.issuer.lock().unwrap() = issuer.to_owned();
    }

    /// How often the metadata was fetched.
    pub fn metadata_fetches(&self) -> usize {
        self.published.metadata_fetches.load(Ordering::SeqCst)
    }

    /// How often the JWKS was fetched.
    pub fn jwks_fetches(&self) -> usize {
        self.published.jwks_fetches.load(Ordering::SeqCst)
    }
}

async fn metadata(State(p): State<Arc<Published>>) -> axum::Json<Value> {
    p.metadata_fetches.fetch_add(1, Ordering::SeqCst);
    let issuer = p.issuer.lock().unwrap().clone();
    let base = p.issuer_base();
    axum::Json(json!({
        "issuer": issuer,
        "jwks_uri": format!("{base}/jwks"),
        "authorization_endpoint": format!("{base}/authorize"),
        "token_endpoint": format!("{base}/token"),
        "response_types_supported": ["code"],
    }))
}

impl Published {
    /// Where the server really is (the metadata may claim another issuer).
    fn issuer_base(&self) -> String {
        self.base.lock().unwrap().clone()
    }
}

async fn jwks(State(p): State<Arc<Published>>) -> axum::Json<Value> {
    p.jwks_fetches.fetch_add(1, Ordering::SeqCst);
    axum::Json(json!({"keys": *p.keys.lock().unwrap()}))
}
