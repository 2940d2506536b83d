//! The DNS-rebinding guard in front of every route: a request whose `Host`
//! is not one of the server's names, or that carries an `Origin` other than
//! those allowed, is refused with `403` before any route sees it (the MCP
//! endpoint, the operations routes and the OAuth metadata alike). The
//! matching is rmcp's, which also checks `/mcp` itself: a host entry without
//! a port matches any port; an origin matches by scheme, host and port (an
//! entry ending `:*` matches any port).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The names a request may be addressed to and the origins it may come from.
#[derive(Clone, Debug)]
pub struct Allowed {
    hosts: Vec<(String, Option<u16>)>,
    origins: Vec<Origin>,
}

/// An allowed origin: scheme, host and port (`None`: any port).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Origin {
    scheme: String,
    host: String,
    port: Option<u16>,
}

impl Allowed {
    /// From the lists the MCP endpoint is configured with.
    pub fn new(hosts: &[String], origins: &[String]) -> Self {
        Self {
            hosts: hosts.iter().filter_map(|h| authority(h)).collect(),
            origins: origins.iter().filter_map(|o| allowed_origin(o)).collect(),
        }
    }

    /// Why a request with these headers (and URI) is refused, if it is.
    fn refusal(&self, uri: &Uri, headers: &HeaderMap) -> Option<&'static str> {
        let host = match headers.get(header::HOST) {
            Some(value) => value.to_str().ok().and_then(authority),
            // HTTP/2 carries it in `:authority`.
            None => uri.authority().and_then(|a| authority(a.as_str())),
        };
        let Some((name, port)) = host else {
            return Some("Forbidden: Host header is missing or malformed");
        };
        let known = self
            .hosts
            .iter()
            .any(|(h, p)| *h == name && p.is_none_or(|p| Some(p) == port));
        if !known {
            return Some("Forbidden: Host header is not allowed");
        }
        let origin = headers.get(header::ORIGIN)?;
        let Some(origin) = origin.to_str().ok().and_then(request_origin) else {
            return Some("Forbidden: Invalid Origin header");
        };
        let allowed = self.origins.iter().any(|a| {
            a.scheme == origin.scheme
                && a.host == origin.host
                && a.port.is_none_or(|p| Some(p) == origin.port)
        });
        (!allowed).then_some("Forbidden: Origin header is not allowed")
    }
}

/// The middleware: refuses a request addressed to another name or sent from
/// another origin.
pub async fn guard(State(allowed): State<Arc<Allowed>>, request: Request, next: Next) -> Response {
    if let Some(why) = allowed.refusal(request.uri(), request.headers()) {
        tracing::warn!(path = %request.uri().path(), "{why} (possible DNS rebinding)");
        return (StatusCode::FORBIDDEN, why).into_response();
    }
    next.run(request).await
}

/// A host and optional port, lower-cased, IPv6 brackets taken off.
fn authority(text: &str) -> Option<(String, Option<u16>)> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    match text.parse::<axum::http::uri::Authority>() {
        Ok(a) => Some((normal(a.host()), a.port_u16())),
        // A bare IPv6 address (`::1`) is not an authority.
        Err(_) => Some((normal(text), None)),
    }
}

fn normal(host: &str) -> String {
    host.trim_matches(['[', ']']).to_ascii_lowercase()
}

/// An `Origin` header's scheme, host and port (the scheme's default port
/// when it names none).
fn request_origin(text: &str) -> Option<Origin> {
    let uri: Uri = text.trim().parse().ok()?;
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let authority = uri.authority()?;
    let port = authority.port_u16().or(match scheme.as_str() {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    });
    Some(Origin {
        host: normal(authority.host()),
        scheme,
        port,
    })
}

/// An allowed origin entry: `scheme://host:port`, `scheme://host:*` or
/// `scheme://host` (any port, as rmcp matches it).
fn allowed_origin(text: &str) -> Option<Origin> {
    let text = text.trim();
    let (base, any_port) = match text.strip_suffix(":*") {
        Some(base) => (base, true),
        None => (text, false),
    };
    let uri: Uri = base.parse().ok()?;
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let authority = uri.authority()?;
    Some(Origin {
        host: normal(authority.host()),
        scheme,
        port: if any_port { None } else { authority.port_u16() },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn hosts_and_origins_match_as_the_mcp_endpoint_matches_them() {
        let allowed = Allowed::new(
            &[
                "localhost".into(),
                "127.0.0.1".into(),
                "::1".into(),
                "sb.example:8443".into(),
            ],
            &[
                "http://localhost:8801".into(),
                "https://app.example:*".into(),
            ],
        );
        let uri = Uri::from_static("/metrics");
        let ok = |pairs: &[(&str, &str)]| allowed.refusal(&uri, &headers(pairs)).is_none();
        assert!(ok(&[("host", "localhost:8801")]));
        assert!(ok(&[("host", "127.0.0.1")]));
        assert!(ok(&[("host", "[::1]:8801")]));
        assert!(ok(&[("host", "SB.example:8443")]));
        assert!(!ok(&[("host", "sb.example:80")]), "the port is named");
        assert!(!ok(&[("host", "evil.example:8801")]));
        assert!(!ok(&[("host", "localhost.evil.example")]));
        assert!(!ok(&[]), "no Host at all");
        assert!(ok(&[
            ("host", "localhost:8801"),
            ("origin", "http://localhost:8801")
        ]));
        assert!(ok(&[
            ("host", "localhost"),
            ("origin", "https://app.example:9000")
        ]));
        assert!(!ok(&[
            ("host", "localhost"),
            ("origin", "http://evil.example")
        ]));
        assert!(!ok(&[
            ("host", "localhost"),
            ("origin", "http://localhost:9999")
        ]));
        assert!(!ok(&[("host", "localhost"), ("origin", "null")]));
        assert!(!ok(&[("host", "localhost"), ("origin", "not a url")]));
    }
}
