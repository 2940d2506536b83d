//! [`AuthSettings`]: which authorization modes are on, checked once at start.

use std::path::PathBuf;
use std::time::Duration;

use reqwest::Url;

/// Path of the MCP endpoint under the public URL; the OAuth resource is
/// `<public_url>/mcp`.
pub const MCP_PATH: &str = "/mcp";
/// The RFC 9728 well-known prefix.
pub const METADATA_PREFIX: &str = "/.well-known/oauth-protected-resource";

/// Authorization settings. With neither mode on, [`crate::auth::Authorizer`]
/// is not configured and protects nothing.
#[derive(Clone, Debug, Default)]
pub struct AuthSettings {
    /// The static bearer tokens file (`SANDBOX_AUTH_TOKENS_FILE`).
    pub tokens_file: Option<PathBuf>,
    /// The OAuth resource server (`SANDBOX_OAUTH_ISSUER`).
    pub oauth: Option<OAuthSettings>,
}

/// The OAuth 2.1 resource server's settings.
#[derive(Clone, Debug)]
pub struct OAuthSettings {
    /// The authorization server whose access tokens are accepted: its
    /// `iss`, and where its metadata is found.
    pub issuer: Url,
    /// This server's external base URL (`SANDBOX_PUBLIC_URL`).
    pub public_url: Url,
    /// Scopes every access token must hold (`SANDBOX_OAUTH_SCOPES`).
    pub scopes: Vec<String>,
    /// Where the issuer's keys are, instead of its metadata's `jwks_uri`
    /// (`SANDBOX_OAUTH_JWKS_URL`).
    pub jwks_url: Option<Url>,
    /// Keys older than this are fetched again before use.
    pub jwks_max_age: Duration,
    /// Least time between two fetches of the metadata or keys, whatever
    /// asks for them (an unknown `kid`, stale keys, a failed fetch).
    pub jwks_min_refetch: Duration,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway: Duration,
    /// Longest one fetch of metadata or keys may take.
    pub fetch_timeout: Duration,
    /// Largest metadata or key document accepted, in bytes.
    pub max_document_bytes: usize,
}

impl OAuthSettings {
    /// Settings with the defaults for everything but the three URLs and
    /// the scopes: keys refreshed every 10 minutes, at most one fetch every
    /// 30 seconds, 30 seconds of leeway, 10-second fetches of at most 1 MiB.
    pub fn new(issuer: Url, public_url: Url, scopes: Vec<String>) -> Self {
        Self {
            issuer,
            public_url,
            scopes,
            jwks_url: None,
            jwks_max_age: Duration::from_secs(600),
            jwks_min_refetch: Duration::from_secs(30),
            leeway: Duration::from_secs(30),
            fetch_timeout: Duration::from_secs(10),
            max_document_bytes: 1 << 20,
        }
    }

    /// The protected resource, the audience tokens must name (RFC 8707):
    /// `<public_url>/mcp`.
    pub fn resource(&self) -> String {
        format!("{}{MCP_PATH}", base(&self.public_url))
    }

    /// Where this server's protected-resource metadata is (RFC 9728):
    /// `<public_url>/.well-known/oauth-protected-resource/mcp`.
    pub fn metadata_url(&self) -> String {
        format!("{}{METADATA_PREFIX}{MCP_PATH}", base(&self.public_url))
    }

    /// The issuer as tokens and metadata carry it: the configured URL as
    /// written, without a trailing slash on a bare host.
    pub fn issuer_id(&self) -> String {
        issuer_id(&self.issuer)
    }
}

/// The issuer identifier of `url`: `https://host` for a bare host (where
/// the URL type adds a `/`), the URL itself otherwise.
pub fn issuer_id(url: &Url) -> String {
    let text = url.as_str();
    if url.path() == "/" {
        text.trim_end_matches('/').to_owned()
    } else {
        text.to_owned()
    }
}

/// A URL without its trailing slashes.
fn base(url: &Url) -> &str {
    url.as_str().trim_end_matches('/')
}

/// Whether `url` names this machine: `localhost` or a loopback address.
pub fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// Checks a URL the server fetches or publishes: https, or http on
/// loopback only (for tests and local setups); no credentials, query or
/// fragment. Says what is wrong.
pub fn check_url(text: &str) -> Result<Url, String> {
    let url = Url::parse(text.trim()).map_err(|e| format!("'{text}' is not a URL ({e})"))?;
    match url.scheme() {
        "https" => {}
        "http" if is_loopback(&url) => {}
        "http" => {
            return Err(format!(
                "'{text}' is plain http; use https (http is accepted for loopback addresses only)"
            ));
        }
        other => return Err(format!("'{text}' has the scheme {other}; use https")),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!("'{url}' holds credentials; remove them"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!("'{url}' has a query or fragment; remove it"));
    }
    Ok(url)
}

/// Splits the scopes setting at commas and whitespace.
pub fn parse_scopes(text: &str) -> Vec<String> {
    text.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(public: &str) -> OAuthSettings {
        OAuthSettings::new(
            check_url("https://id.example.test").unwrap(),
            check_url(public).unwrap(),
            vec!["sandbox".into()],
        )
    }

    #[test]
    fn resource_and_metadata_hang_off_the_public_url() {
        for public in ["https://sb.example.test", "https://sb.example.test/"] {
            let s = settings(public);
            assert_eq!(s.resource(), "https://sb.example.test/mcp");
            assert_eq!(
                s.metadata_url(),
                "https://sb.example.test/.well-known/oauth-protected-resource/mcp"
            );
        }
        let s = settings("https://sb.example.test/team/");
        assert_eq!(s.resource(), "https://sb.example.test/team/mcp");
    }

    #[test]
    fn issuer_id_keeps_a_path_and_drops_a_lone_slash() {
        assert_eq!(
            issuer_id(&check_url("https://id.example.test").unwrap()),
            "https://id.example.test"
        );
        assert_eq!(
            issuer_id(&check_url("https://id.example.test/realms/a").unwrap()),
            "https://id.example.test/realms/a"
        );
    }

    #[test]
    fn urls_must_be_https_unless_loopback() {
        assert!(check_url("https://id.example.test").is_ok());
        assert!(check_url("http://127.0.0.1:9000").is_ok());
        assert!(check_url("http://localhost:9000").is_ok());
        assert!(check_url("http://[::1]:9000").is_ok());
        let err = check_url("http://id.example.test").unwrap_err();
        assert!(err.contains("plain http"), "{err}");
        assert!(check_url("ftp://id.example.test").is_err());
        assert!(check_url("https://u:p@id.example.test").is_err());
        assert!(check_url("https://id.example.test/?a=b").is_err());
        assert!(check_url("not a url").is_err());
    }

    #[test]
    fn scopes_split_at_commas_and_spaces() {
        assert_eq!(parse_scopes("a, b c,,d"), ["a", "b", "c", "d"]);
        assert!(parse_scopes(" , ").is_empty());
    }
}
