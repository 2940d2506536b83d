//! [`Authorizer`]: the middleware in front of the MCP routes. It takes the
//! bearer token from the `Authorization` header (never from the query
//! string or body), tries the static tokens, then the OAuth issuer, and
//! either hands the request on with its [`Principal`] in the extensions or
//! answers it with the refusal.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::Response;

use super::challenge::{Challenge, Refusal};
use super::error::AuthError;
use super::metadata;
use super::oauth::OAuthVerifier;
use super::principal::Principal;
use super::settings::AuthSettings;
use super::tokens::TokenTable;

/// Longest bearer token read; longer ones are refused unread.
const MAX_TOKEN_BYTES: usize = 16 << 10;

/// Decides who a request comes from, and refuses those it cannot tell.
#[derive(Default)]
pub struct Authorizer {
    tokens: Option<TokenTable>,
    oauth: Option<OAuthVerifier>,
    challenge: Challenge,
}

impl std::fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authorizer")
            .field("tokens", &self.tokens)
            .field(
                "oauth",
                &self.oauth.as_ref().map(|o| o.settings().issuer_id()),
            )
            .finish()
    }
}

impl Authorizer {
    /// Reads the tokens file and sets up the OAuth verifier. The issuer is
    /// not contacted here: its keys are fetched at the first access token.
    pub fn new(settings: AuthSettings) -> Result<Self, AuthError> {
        let tokens = match &settings.tokens_file {
            Some(path) => Some(TokenTable::load(path)?),
            None => None,
        };
        let challenge = Challenge {
            resource_metadata: settings.oauth.as_ref().map(|o| o.metadata_url()),
            scope: settings.oauth.as_ref().map(|o| o.scopes.join(" ")),
        };
        let oauth = settings.oauth.map(OAuthVerifier::new).transpose()?;
        if let Some(tokens) = &tokens {
            tracing::info!(tokens = tokens.len(), "static bearer tokens loaded");
        }
        Ok(Self {
            tokens,
            oauth,
            challenge,
        })
    }

    /// Whether any mode is on. Without one, [`Authorizer::protect`] lets
    /// every request through with no principal.
    pub fn is_configured(&self) -> bool {
        self.tokens.is_some() || self.oauth.is_some()
    }

    /// The router with authorization in front of every route of `inner`
    /// (its fallback included): a request that gets through carries its
    /// [`Principal`] in `http::Extensions`; a refused one never reaches
    /// `inner`. With OAuth on, the RFC 9728 metadata routes are added, open
    /// to all. Routes merged into the result afterwards are not protected.
    pub fn protect(self: Arc<Self>, inner: Router) -> Router {
        if !self.is_configured() {
            return inner;
        }
        let metadata = self.oauth.as_ref().map(|o| metadata::routes(o.settings()));
        // As the fallback of an outer router, `inner` is reached only
        // through the middleware, its own fallback (a 404) included.
        let guarded = Router::new()
            .fallback_service(inner)
            .layer(axum::middleware::from_fn_with_state(self, authorize));
        match metadata {
            Some(routes) => guarded.merge(routes),
            None => guarded,
        }
    }

    /// The principal a request's headers prove, or why there is none.
    pub async fn principal_of(&self, headers: &HeaderMap) -> Result<Principal, Refusal> {
        let token = bearer_token(headers)?;
        if let Some(principal) = self.tokens.as_ref().and_then(|t| t.lookup(token)) {
            return Ok(principal.clone());
        }
        match &self.oauth {
            Some(oauth) => oauth.verify(token).await,
            None => Err(Refusal::InvalidToken(
                "the token is not one this server issued",
            )),
        }
    }
}

/// The middleware: admit with the principal, or answer with the refusal.
async fn authorize(
    State(auth): State<Arc<Authorizer>>,
    mut request: Request,
    next: Next,
) -> Response {
    match auth.principal_of(request.headers()).await {
        Ok(principal) => {
            tracing::debug!(principal = %principal.name, "request authorized");
            request.extensions_mut().insert(principal);
            next.run(request).await
        }
        Err(refusal) => {
            tracing::info!(?refusal, path = %request.uri().path(), "request refused");
            auth.challenge.response(refusal)
        }
    }
}

/// The token of the one `Authorization: Bearer <token>` header (the scheme
/// in any case, one space, then an RFC 6750 `b64token` and nothing else).
fn bearer_token(headers: &HeaderMap) -> Result<&str, Refusal> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let Some(value) = values.next() else {
        return Err(Refusal::Missing);
    };
    if values.next().is_some() {
        return Err(Refusal::BadRequest(
            "the request has several Authorization headers",
        ));
    }
    let text = value
        .to_str()
        .map_err(|_| Refusal::InvalidToken("the Authorization header is not text"))?;
    let (scheme, token) = text.split_once(' ').unwrap_or((text, ""));
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(Refusal::Missing);
    }
    // Exactly `Bearer <token>`, one space between: a near miss (extra
    // spaces, a tab) is malformed, not read generously.
    if token.is_empty() || token.len() > MAX_TOKEN_BYTES || !is_b64token(token) {
        return Err(Refusal::InvalidToken("the bearer token is malformed"));
    }
    Ok(token)
}

/// RFC 6750's `b64token`: `[A-Za-z0-9-._~+/]+ =*`.
fn is_b64token(token: &str) -> bool {
    let body = token.trim_end_matches('=');
    !body.is_empty()
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn the_bearer_token_is_read_from_one_header() {
        assert_eq!(
            bearer_token(&headers(&["Bearer abc.def-_~+/=="])),
            Ok("abc.def-_~+/==")
        );
        assert_eq!(bearer_token(&headers(&["bearer abc"])), Ok("abc"));
        assert_eq!(bearer_token(&headers(&[])), Err(Refusal::Missing));
        assert_eq!(
            bearer_token(&headers(&["Basic YTpi"])),
            Err(Refusal::Missing)
        );
        assert!(matches!(
            bearer_token(&headers(&["Bearer a", "Bearer b"])),
            Err(Refusal::BadRequest(_))
        ));
        for bad in [
            "Bearer",
            "Bearer ",
            "Bearer  abc",
            "Bearer   abc",
            "Bearer abc ",
            "Bearer \tabc",
            "Bearer a b",
            "Bearer a\"b",
            "Bearer ==",
            "Bearer a=b",
        ] {
            assert!(
                matches!(
                    bearer_token(&headers(&[bad])),
                    Err(Refusal::InvalidToken(_))
                ),
                "{bad}"
            );
        }
        let long = format!("Bearer {}", "a".repeat(MAX_TOKEN_BYTES + 1));
        assert!(matches!(
            bearer_token(&headers(&[&long])),
            Err(Refusal::InvalidToken(_))
        ));
    }

    #[test]
    fn an_unconfigured_authorizer_says_so() {
        let auth = Authorizer::new(AuthSettings::default()).unwrap();
        assert!(!auth.is_configured());
    }
}
