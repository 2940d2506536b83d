//! [`KeyCache`]: the issuer's signing keys, found through its metadata,
//! fetched on first use, kept, and fetched again when they are older than
//! the maximum age or a token names a key we do not have. Fetches, whatever
//! asks for them, are at most one per `jwks_min_refetch`, so tokens with
//! made-up `kid`s cannot make us hammer the issuer; while a fetch fails, the
//! keys we had stay in use.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey};
use reqwest::Url;
use serde::Deserialize;

use super::fetch::Fetcher;
use super::settings::{OAuthSettings, check_url};

/// The signature algorithms accepted: RSA (PKCS#1 v1.5 and PSS), ECDSA on
/// P-256 and P-384, and Ed25519. Never `none`, never HMAC (a shared secret
/// is not the issuer's public key).
pub const ACCEPTED: [Algorithm; 9] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// One verification key of the issuer.
#[derive(Clone)]
pub struct Key {
    kid: Option<String>,
    alg: Option<Algorithm>,
    family: AlgorithmFamily,
    curve: Option<EllipticCurve>,
    /// The key.
    pub decoding: DecodingKey,
}

impl Key {
    /// Reads a JWK; `None` for keys not for signatures or of a kind we do
    /// not accept.
    fn from_jwk(jwk: &Jwk) -> Option<Self> {
        if let Some(usage) = &jwk.common.public_key_use
            && *usage != PublicKeyUse::Signature
        {
            return None;
        }
        let alg = match &jwk.common.key_algorithm {
            Some(k) => Some(accepted_algorithm(k)?),
            None => None,
        };
        let (family, curve) = match &jwk.algorithm {
            AlgorithmParameters::RSA(_) => (AlgorithmFamily::Rsa, None),
            AlgorithmParameters::EllipticCurve(p) => (AlgorithmFamily::Ec, Some(p.curve.clone())),
            AlgorithmParameters::OctetKeyPair(p) => (AlgorithmFamily::Ed, Some(p.curve.clone())),
            _ => return None,
        };
        Some(Self {
            kid: jwk.common.key_id.clone(),
            alg,
            family,
            curve,
            decoding: DecodingKey::from_jwk(jwk).ok()?,
        })
    }

    /// Whether this key verifies signatures made with `alg`.
    fn fits(&self, alg: Algorithm) -> bool {
        let curve_fits = match (alg, &self.curve) {
            (Algorithm::ES256, Some(c)) => *c == EllipticCurve::P256,
            (Algorithm::ES384, Some(c)) => *c == EllipticCurve::P384,
            (Algorithm::EdDSA, Some(c)) => *c == EllipticCurve::Ed25519,
            (_, None) => true,
            _ => false,
        };
        self.family == alg.family() && self.alg.is_none_or(|a| a == alg) && curve_fits
    }
}

/// The `alg` of a JWK, when it is one we accept.
fn accepted_algorithm(k: &KeyAlgorithm) -> Option<Algorithm> {
    ACCEPTED.into_iter().find(|a| KeyAlgorithm::from(*a) == *k)
}

/// The issuer's keys as last fetched.
#[derive(Clone, Default)]
pub struct KeySet {
    keys: Vec<Key>,
}

impl KeySet {
    /// Reads a JWKS document, skipping the keys that are not usable.
    pub fn from_document(doc: &JwksDocument) -> Self {
        let keys = doc
            .keys
            .iter()
            .filter_map(|v| serde_json::from_value::<Jwk>(v.clone()).ok())
            .filter_map(|jwk| Key::from_jwk(&jwk))
            .collect();
        Self { keys }
    }

    /// The key for a token with this `kid` and `alg`: the key of that id if
    /// it fits the algorithm; without a `kid`, the one key that fits.
    pub fn select(&self, kid: Option<&str>, alg: Algorithm) -> Option<&Key> {
        match kid {
            Some(kid) => self
                .keys
                .iter()
                .find(|k| k.kid.as_deref() == Some(kid) && k.fits(alg)),
            None => {
                let mut fitting = self.keys.iter().filter(|k| k.fits(alg));
                let first = fitting.next()?;
                fitting.next().is_none().then_some(first)
            }
        }
    }

    /// How many usable keys there are.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there is no usable key.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// A JWKS document: its keys, each read on its own so that one odd key
/// does not hide the others.
#[derive(Deserialize)]
pub struct JwksDocument {
    /// The keys, as JSON.
    pub keys: Vec<serde_json::Value>,
}

/// The part of RFC 8414 / OpenID Connect metadata used here.
#[derive(Deserialize)]
struct IssuerMetadata {
    issuer: String,
    jwks_uri: Option<String>,
}

/// Why no key could be had for a token.
#[derive(Debug, PartialEq, Eq)]
pub enum KeyError {
    /// The issuer has no key of that id fitting the token's algorithm.
    Unknown,
    /// The issuer's keys could not be fetched, and none were before.
    Unavailable,
}

#[derive(Clone, Default)]
struct Snapshot {
    keys: Arc<KeySet>,
    fetched_at: Option<Instant>,
    attempted_at: Option<Instant>,
}

/// The issuer's keys, cached.
pub struct KeyCache {
    fetcher: Fetcher,
    issuer: Url,
    issuer_id: String,
    configured_jwks: Option<Url>,
    max_age: Duration,
    min_refetch: Duration,
    current: RwLock<Snapshot>,
    /// Held while fetching (one fetch at a time); holds the discovered
    /// `jwks_uri`.
    refresh: tokio::sync::Mutex<Option<Url>>,
}

impl KeyCache {
    /// A cache that has fetched nothing yet.
    pub fn new(settings: &OAuthSettings, fetcher: Fetcher) -> Self {
        Self {
            fetcher,
            issuer: settings.issuer.clone(),
            issuer_id: settings.issuer_id(),
            configured_jwks: settings.jwks_url.clone(),
            max_age: settings.jwks_max_age,
            min_refetch: settings.jwks_min_refetch,
            current: RwLock::new(Snapshot::default()),
            refresh: tokio::sync::Mutex::new(None),
        }
    }

    /// The key to verify a token of this `kid` and `alg` with.
    pub async fn key(&self, kid: Option<&str>, alg: Algorithm) -> Result<Key, KeyError> {
        let seen = self.snapshot();
        if self.is_fresh(&seen)
            && let Some(key) = seen.keys.select(kid, alg)
        {
            return Ok(key.clone());
        }
        let mut jwks_uri = self.refresh.lock().await;
        let now = self.snapshot();
        let someone_else_fetched = now.attempted_at != seen.attempted_at;
        let may_fetch = now
            .attempted_at
            .is_none_or(|t| t.elapsed() >= self.min_refetch);
        if !someone_else_fetched && may_fetch {
            self.fetch_into_cache(&mut jwks_uri, now).await;
        }
        drop(jwks_uri);
        let latest = self.snapshot();
        match latest.keys.select(kid, alg) {
            Some(key) => Ok(key.clone()),
            None if latest.fetched_at.is_none() => Err(KeyError::Unavailable),
            None => Err(KeyError::Unknown),
        }
    }

    fn snapshot(&self) -> Snapshot {
        self.current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    fn is_fresh(&self, snapshot: &Snapshot) -> bool {
        snapshot
            .fetched_at
            .is_some_and(|t| t.elapsed() < self.max_age)
    }

    /// Fetches the keys and stores them; on failure keeps the old ones and
    /// notes the attempt.
    async fn fetch_into_cache(&self, jwks_uri: &mut Option<Url>, old: Snapshot) {
        let attempted_at = Some(Instant::now());
        let next = match self.fetch_keys(jwks_uri).await {
            Ok(keys) => {
                tracing::info!(keys = keys.len(), issuer = %self.issuer_id, "fetched the OAuth issuer's signing keys");
                Snapshot {
                    keys: Arc::new(keys),
                    fetched_at: attempted_at,
                    attempted_at,
                }
            }
            Err(e) => {
                tracing::warn!(issuer = %self.issuer_id, "cannot fetch the OAuth issuer's signing keys: {e}; {} until the next try", if old.fetched_at.is_some() { "keeping the keys fetched before" } else { "access tokens are refused" });
                *jwks_uri = None;
                Snapshot {
                    attempted_at,
                    ..old
                }
            }
        };
        *self
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = next;
    }

    async fn fetch_keys(&self, jwks_uri: &mut Option<Url>) -> Result<KeySet, String> {
        let url = match (&self.configured_jwks, &*jwks_uri) {
            (Some(url), _) | (None, Some(url)) => url.clone(),
            (None, None) => {
                let url = self.discover().await?;
                *jwks_uri = Some(url.clone());
                url
            }
        };
        let doc: JwksDocument = self
            .fetcher
            .get_json(&url)
            .await
            .map_err(|e| e.to_string())?;
        let keys = KeySet::from_document(&doc);
        if keys.is_empty() {
            return Err(format!("{url} holds no signing key we can use"));
        }
        Ok(keys)
    }

    /// Finds `jwks_uri` in the issuer's metadata, trying the well-known
    /// places in the order the MCP specification gives.
    async fn discover(&self) -> Result<Url, String> {
        let mut failures = Vec::new();
        for url in metadata_urls(&self.issuer) {
            match self.fetcher.get_json::<IssuerMetadata>(&url).await {
                Ok(meta) if meta.issuer != self.issuer_id => {
                    return Err(format!(
                        "{url} names the issuer '{}', not '{}'; set SANDBOX_OAUTH_ISSUER to the issuer exactly as its tokens carry it",
                        meta.issuer, self.issuer_id
                    ));
                }
                Ok(meta) => {
                    let uri = meta.jwks_uri.ok_or_else(|| {
                        format!("{url} has no jwks_uri; set SANDBOX_OAUTH_JWKS_URL")
                    })?;
                    return check_url(&uri).map_err(|e| format!("the jwks_uri of {url}: {e}"));
                }
                Err(e) => failures.push(e.to_string()),
            }
        }
        Err(format!(
            "no metadata found for the issuer ({}); set SANDBOX_OAUTH_JWKS_URL",
            failures.join("; ")
        ))
    }
}

/// Where an issuer's metadata may be: RFC 8414 and OpenID Connect, with the
/// issuer's path inserted after the well-known segment, then OpenID
/// Connect's appended form.
pub fn metadata_urls(issuer: &Url) -> Vec<Url> {
    let path = issuer.path().trim_end_matches('/');
    let at = |p: &str| {
        let mut url = issuer.clone();
        url.set_path(p);
        url
    };
    if path.is_empty() {
        vec![
            at("/.well-known/oauth-authorization-server"),
            at("/.well-known/openid-configuration"),
        ]
    } else {
        vec![
            at(&format!("/.well-known/oauth-authorization-server{path}")),
            at(&format!("/.well-known/openid-configuration{path}")),
            at(&format!("{path}/.well-known/openid-configuration")),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn metadata_is_looked_for_where_the_spec_says() {
        let bare: Vec<String> = metadata_urls(&url("https://id.example.test"))
            .iter()
            .map(Url::to_string)
            .collect();
        assert_eq!(
            bare,
            [
                "https://id.example.test/.well-known/oauth-authorization-server",
                "https://id.example.test/.well-known/openid-configuration"
            ]
        );
        let pathed: Vec<String> = metadata_urls(&url("https://id.example.test/realms/t/"))
            .iter()
            .map(Url::to_string)
            .collect();
        assert_eq!(
            pathed,
            [
                "https://id.example.test/.well-known/oauth-authorization-server/realms/t",
                "https://id.example.test/.well-known/openid-configuration/realms/t",
                "https://id.example.test/realms/t/.well-known/openid-configuration"
            ]
        );
    }

    // A P-256 public key (any valid point will do for selection).
    fn ec_key(kid: &str, alg: Option<&str>) -> serde_json::Value {
        let mut k = json!({
            "kty": "EC", "crv": "P-256", "kid": kid, "use": "sig",
            "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
            "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"
        });
        if let Some(alg) = alg {
            k["alg"] = json!(alg);
        }
        k
    }

    fn set(keys: Vec<serde_json::Value>) -> KeySet {
        KeySet::from_document(&JwksDocument { keys })
    }

    #[test]
    fn keys_are_chosen_by_kid_and_algorithm() {
        let keys = set(vec![ec_key("a", Some("ES256")), ec_key("b", None)]);
        assert_eq!(keys.len(), 2);
        assert!(keys.select(Some("a"), Algorithm::ES256).is_some());
        assert!(keys.select(Some("b"), Algorithm::ES256).is_some());
        assert!(keys.select(Some("c"), Algorithm::ES256).is_none());
        // A P-256 key does not verify ES384 or RSA signatures.
        assert!(keys.select(Some("a"), Algorithm::ES384).is_none());
        assert!(keys.select(Some("b"), Algorithm::RS256).is_none());
        // Without a kid, only when exactly one key fits.
        assert!(keys.select(None, Algorithm::ES256).is_none());
        let one = set(vec![ec_key("a", None)]);
        assert!(one.select(None, Algorithm::ES256).is_some());
    }

    #[test]
    fn hmac_encryption_and_odd_keys_are_skipped() {
        let mut enc = ec_key("enc", None);
        enc["use"] = json!("enc");
        let keys = set(vec![
            json!({"kty": "oct", "kid": "h", "k": "c2VjcmV0", "alg": "HS256"}),
            enc,
            ec_key("hs", Some("HS256")),
            json!({"kty": "weird", "kid": "w"}),
            json!("not an object"),
            ec_key("ok", None),
        ]);
        assert_eq!(keys.len(), 1);
        assert!(keys.select(Some("ok"), Algorithm::ES256).is_some());
        assert!(keys.select(Some("h"), Algorithm::HS256).is_none());
    }
}
