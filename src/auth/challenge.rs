//! [`Refusal`]s and the answers they get: 401 with a `WWW-Authenticate`
//! challenge (RFC 6750, with RFC 9728's `resource_metadata`), 403 for a
//! token without the scopes, 400 for a request that cannot be read, 503
//! when the issuer's keys cannot be had. Bodies are a short JSON object;
//! neither ever quotes the token.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// Why a request is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No bearer token (no `Authorization` header, or another scheme).
    Missing,
    /// The request cannot be read (several `Authorization` headers).
    BadRequest(&'static str),
    /// The token is not one we accept; says why.
    InvalidToken(&'static str),
    /// The token is good but lacks a required scope.
    InsufficientScope,
    /// The issuer's keys cannot be fetched, so no access token can be
    /// checked now.
    KeysUnavailable,
}

/// What every challenge says about this server.
#[derive(Clone, Debug, Default)]
pub struct Challenge {
    /// The protected-resource metadata URL, with OAuth on.
    pub resource_metadata: Option<String>,
    /// The scopes required, space-separated, with OAuth on.
    pub scope: Option<String>,
}

impl Challenge {
    /// The `WWW-Authenticate` value for a refusal with this error code.
    pub fn header(&self, error: Option<(&str, &str)>) -> String {
        let mut params = Vec::new();
        if self.resource_metadata.is_none() {
            params.push(r#"realm="mcp-code-sandbox""#.to_owned());
        }
        if let Some(url) = &self.resource_metadata {
            params.push(format!(r#"resource_metadata="{url}""#));
        }
        if let Some(scope) = &self.scope {
            params.push(format!(r#"scope="{scope}""#));
        }
        if let Some((code, description)) = error {
            params.push(format!(r#"error="{code}""#));
            params.push(format!(r#"error_description="{description}""#));
        }
        format!("Bearer {}", params.join(", "))
    }

    /// The answer to a refused request.
    pub fn response(&self, refusal: Refusal) -> Response {
        let (status, error) = match refusal {
            Refusal::Missing => (StatusCode::UNAUTHORIZED, None),
            Refusal::BadRequest(why) => (StatusCode::BAD_REQUEST, Some(("invalid_request", why))),
            Refusal::InvalidToken(why) => (StatusCode::UNAUTHORIZED, Some(("invalid_token", why))),
            Refusal::InsufficientScope => (
                StatusCode::FORBIDDEN,
                Some((
                    "insufficient_scope",
                    "the access token lacks a scope this server requires",
                )),
            ),
            Refusal::KeysUnavailable => {
                let body = serde_json::json!({
                    "error": "temporarily_unavailable",
                    "error_description": "the authorization server's keys cannot be fetched; try again later",
                });
                return (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response();
            }
        };
        let body = match error {
            Some((code, description)) => {
                serde_json::json!({"error": code, "error_description": description})
            }
            None => serde_json::json!({
                "error": "unauthorized",
                "error_description": "this server needs a bearer token in the Authorization header",
            }),
        };
        let mut response = (status, axum::Json(body)).into_response();
        if let Ok(value) = HeaderValue::from_str(&self.header(error)) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oauth() -> Challenge {
        Challenge {
            resource_metadata: Some(
                "https://sb.test/.well-known/oauth-protected-resource/mcp".into(),
            ),
            scope: Some("sandbox".into()),
        }
    }

    fn www(response: &Response) -> &str {
        response.headers()[header::WWW_AUTHENTICATE]
            .to_str()
            .unwrap()
    }

    #[test]
    fn a_missing_token_gets_the_metadata_and_scope_and_no_error() {
        let r = oauth().response(Refusal::Missing);
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(
            www(&r),
            r#"Bearer resource_metadata="https://sb.test/.well-known/oauth-protected-resource/mcp", scope="sandbox""#
        );
    }

    #[test]
    fn each_refusal_has_its_status_and_code() {
        let r = oauth().response(Refusal::InvalidToken("the token has expired"));
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        assert!(www(&r).contains(r#"error="invalid_token""#), "{}", www(&r));
        let r = oauth().response(Refusal::InsufficientScope);
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        assert!(www(&r).contains(r#"error="insufficient_scope""#));
        assert!(www(&r).contains(r#"scope="sandbox""#));
        let r = oauth().response(Refusal::BadRequest("two Authorization headers"));
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        let r = oauth().response(Refusal::KeysUnavailable);
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    }

    #[test]
    fn static_tokens_alone_challenge_with_a_realm() {
        let r = Challenge::default().response(Refusal::Missing);
        assert_eq!(www(&r), r#"Bearer realm="mcp-code-sandbox""#);
    }
}
