//! [`OAuthVerifier`]: checks a JWT access token as an OAuth 2.1 resource
//! server (the MCP authorization specification of 2025-11-25): signature by
//! one of the issuer's keys with an accepted algorithm, `iss` equal to the
//! issuer, `aud` naming this server's resource (RFC 8707), `exp` and `nbf`
//! within the leeway, a `sub`, and every required scope in `scope` (a
//! space-separated string) or `scp` (an array or a string).

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use serde::Deserialize;

use super::challenge::Refusal;
use super::error::AuthError;
use super::fetch::Fetcher;
use super::jwks::{ACCEPTED, KeyCache, KeyError};
use super::principal::{Principal, PrincipalLimits};
use super::settings::OAuthSettings;

/// The claims read from an access token beyond those the JWT library
/// checks.
#[derive(Deserialize)]
struct Claims {
    sub: String,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    scp: Option<Scp>,
}

/// `scp`, as issuers write it.
#[derive(Deserialize)]
#[serde(untagged)]
enum Scp {
    List(Vec<String>),
    Text(String),
}

impl Claims {
    /// Every scope the token grants.
    fn scopes(&self) -> Vec<&str> {
        let mut all: Vec<&str> = self
            .scope
            .as_deref()
            .map(|s| s.split_whitespace().collect())
            .unwrap_or_default();
        match &self.scp {
            Some(Scp::List(list)) => all.extend(list.iter().map(String::as_str)),
            Some(Scp::Text(text)) => all.extend(text.split_whitespace()),
            None => {}
        }
        all
    }
}

/// Checks access tokens from one issuer.
pub struct OAuthVerifier {
    settings: OAuthSettings,
    keys: KeyCache,
}

impl OAuthVerifier {
    /// A verifier that fetches the issuer's keys on first use.
    pub fn new(settings: OAuthSettings) -> Result<Self, AuthError> {
        let fetcher = Fetcher::new(settings.fetch_timeout, settings.max_document_bytes)?;
        Ok(Self {
            keys: KeyCache::new(&settings, fetcher),
            settings,
        })
    }

    /// The settings it checks against.
    pub fn settings(&self) -> &OAuthSettings {
        &self.settings
    }

    /// The principal an access token was issued to, or why it is refused.
    pub async fn verify(&self, token: &str) -> Result<Principal, Refusal> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| {
            Refusal::InvalidToken("the token is not a JWT signed with an accepted algorithm")
        })?;
        if !ACCEPTED.contains(&header.alg) {
            return Err(Refusal::InvalidToken(
                "the token's signature algorithm is not accepted (HMAC and none never are)",
            ));
        }
        let key = self
            .keys
            .key(header.kid.as_deref(), header.alg)
            .await
            .map_err(|e| match e {
                KeyError::Unknown => {
                    Refusal::InvalidToken("the token was not signed by a key of the issuer")
                }
                KeyError::Unavailable => Refusal::KeysUnavailable,
            })?;
        let data =
            jsonwebtoken::decode::<Claims>(token, &key.decoding, &self.validation(header.alg))
                .map_err(|e| Refusal::InvalidToken(describe(e.kind())))?;
        let granted = data.claims.scopes();
        if !self
            .settings
            .scopes
            .iter()
            .all(|s| granted.contains(&s.as_str()))
        {
            return Err(Refusal::InsufficientScope);
        }
        if data.claims.sub.is_empty() {
            return Err(Refusal::InvalidToken("the token has an empty sub"));
        }
        Ok(Principal {
            name: data.claims.sub,
            limits: PrincipalLimits::default(),
        })
    }

    /// The checks on a token signed with `alg`.
    fn validation(&self, alg: Algorithm) -> Validation {
        let mut v = Validation::new(alg);
        v.set_issuer(&[self.settings.issuer_id()]);
        v.set_audience(&[self.settings.resource()]);
        v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        v.validate_exp = true;
        v.validate_nbf = true;
        v.leeway = self.settings.leeway.as_secs();
        v
    }
}

/// Why a token failed, for the `error_description` (never its content).
fn describe(kind: &ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InvalidSignature => "the token's signature does not verify",
        ErrorKind::ExpiredSignature => "the token has expired",
        ErrorKind::ImmatureSignature => "the token is not valid yet (nbf)",
        ErrorKind::InvalidAudience => "the token is not for this server (aud)",
        ErrorKind::InvalidIssuer => "the token is from another issuer (iss)",
        ErrorKind::MissingRequiredClaim(_) => "the token lacks exp, iss, aud or sub",
        ErrorKind::InvalidAlgorithm => "the token's algorithm does not fit the issuer's key",
        _ => "the token cannot be read",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(json: serde_json::Value) -> Claims {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn scopes_come_from_scope_and_scp() {
        let c = claims(serde_json::json!({"sub": "a", "scope": "x  y"}));
        assert_eq!(c.scopes(), ["x", "y"]);
        let c = claims(serde_json::json!({"sub": "a", "scp": ["x", "z"]}));
        assert_eq!(c.scopes(), ["x", "z"]);
        let c = claims(serde_json::json!({"sub": "a", "scp": "x z", "scope": "y"}));
        assert_eq!(c.scopes(), ["y", "x", "z"]);
        let c = claims(serde_json::json!({"sub": "a"}));
        assert!(c.scopes().is_empty());
    }
}
