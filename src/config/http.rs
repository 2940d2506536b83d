//! [`HttpSettings`]: serving MCP over Streamable HTTP, checked.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::{ConfigError, bad};
use crate::cli::HttpArgs;

/// How to serve MCP over HTTP.
#[derive(Clone, Debug)]
pub struct HttpSettings {
    /// The address to listen on.
    pub addr: SocketAddr,
    /// Host header values accepted besides loopback's (and the public URL's).
    pub allowed_hosts: Vec<String>,
    /// Origins accepted from browsers.
    pub allowed_origins: Vec<String>,
    /// Serve clients of the session protocol without sessions too.
    pub stateless: bool,
    /// Certificate and key files for HTTPS.
    pub tls: Option<TlsFiles>,
    /// Limits on the connections it holds.
    pub connections: ConnectionLimits,
    /// Limits on the sessions it holds.
    pub sessions: SessionLimits,
}

/// Limits on the sessions (of the 2025-11-25 protocol) the HTTP server holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionLimits {
    /// Most sessions one principal may hold open at once.
    pub per_principal: usize,
    /// Most sessions open at once, all principals together.
    pub total: usize,
}

impl Default for SessionLimits {
    fn default() -> Self {
        Self {
            per_principal: 64,
            total: 1024,
        }
    }
}

/// Limits on the connections the HTTP server holds.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    /// Most connections open at once; further ones wait to be accepted.
    pub max_connections: usize,
    /// Longest a client may take to send a request's headers.
    pub header_timeout: Duration,
}

/// A certificate chain and its key, in PEM files.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// The certificate chain.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
}

impl HttpSettings {
    /// The HTTP settings, when `--http` asks for HTTP.
    pub fn from_args(args: &HttpArgs) -> Result<Option<Self>, ConfigError> {
        let Some(addr) = args.http.as_deref().filter(|a| !a.trim().is_empty()) else {
            return Ok(None);
        };
        let addr: SocketAddr = addr.trim().parse().map_err(|_| {
            bad(
                "SANDBOX_HTTP",
                format!(
                    "'{addr}' is not an address to listen on; use IP:PORT such as 127.0.0.1:8080"
                ),
            )
        })?;
        let tls = match (&args.tls_cert, &args.tls_key) {
            (Some(cert), Some(key)) => Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
            }),
            (None, None) => None,
            _ => {
                return Err(bad(
                    "SANDBOX_TLS_CERT",
                    "HTTPS needs both SANDBOX_TLS_CERT and SANDBOX_TLS_KEY",
                ));
            }
        };
        Ok(Some(Self {
            addr,
            allowed_hosts: list(args.http_allowed_hosts.as_deref()),
            allowed_origins: list(args.http_allowed_origins.as_deref()),
            stateless: args.http_stateless,
            tls,
            connections: ConnectionLimits {
                max_connections: args.http_max_connections.max(1),
                header_timeout: Duration::try_from_secs_f64(args.http_header_timeout_seconds)
                    .ok()
                    .filter(|t| !t.is_zero())
                    .ok_or_else(|| {
                        bad(
                            "SANDBOX_HTTP_HEADER_TIMEOUT_SECONDS",
                            "must be a number of seconds above 0",
                        )
                    })?,
            },
            sessions: SessionLimits {
                per_principal: args.http_max_sessions_per_principal.max(1),
                total: args.http_max_sessions.max(1),
            },
        }))
    }
}

/// A comma-separated list, trimmed, without empty items.
fn list(value: Option<&str>) -> Vec<String> {
    value
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_lists_are_checked() {
        let mut args = HttpArgs::default();
        assert!(HttpSettings::from_args(&args).unwrap().is_none());
        args.http = Some("localhost:80".into());
        let err = HttpSettings::from_args(&args).unwrap_err().to_string();
        assert!(
            err.contains("SANDBOX_HTTP") && err.contains("IP:PORT"),
            "{err}"
        );
        args.http = Some("127.0.0.1:0".into());
        args.http_allowed_hosts = Some(" a.example , ,b.example:8443".into());
        let settings = HttpSettings::from_args(&args).unwrap().unwrap();
        assert_eq!(settings.allowed_hosts, ["a.example", "b.example:8443"]);
        args.tls_cert = Some("cert.pem".into());
        assert!(HttpSettings::from_args(&args).is_err());
    }
}
