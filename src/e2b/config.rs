//! [`E2bSettings`]: where the E2B API is, how this server authenticates to it,
//! and how its sandboxes are made and kept alive; [`ApiKey`] keeps the key out
//! of every log, error and result.

use std::fmt;
use std::time::Duration;

/// The template of E2B's code interpreter (a Jupyter kernel behind an HTTP
/// bridge), which every E2B sandbox of this server runs unless told otherwise.
pub const CODE_INTERPRETER_TEMPLATE: &str = "code-interpreter-v1";
/// E2B's own domain, used when `E2B_DOMAIN` is not set.
pub const DEFAULT_DOMAIN: &str = "e2b.app";

/// The longest life of a sandbox on E2B's Hobby plan, in seconds (Pro: 24 h).
pub const DEFAULT_MAX_LIFETIME_SECONDS: u64 = 3600;

/// An E2B API key. Its `Debug` and `Display` print a redacted form, so the
/// key cannot leak through a log line or an error message by accident; only
/// [`ApiKey::expose`] gives the secret, for the one header that carries it.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key. Surrounding whitespace (a stray newline in a `.env` file)
    /// is dropped.
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into().trim().to_owned())
    }

    /// The secret itself, for the `X-API-Key` header and nothing else.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the key is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<String> for ApiKey {
    fn from(key: String) -> Self {
        Self::new(key)
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted E2B API key>")
    }
}

/// Settings of the E2B backend, with the meanings E2B's own SDK gives the
/// variables they come from.
#[derive(Clone, Debug)]
pub struct E2bSettings {
    /// The team API key (`E2B_API_KEY`), sent as `X-API-Key`.
    pub api_key: ApiKey,
    /// The domain of the API and of sandbox hosts (`E2B_DOMAIN`, default
    /// `e2b.app`; a self-hosted E2B has its own).
    pub domain: String,
    /// The control-plane base URL (`E2B_API_URL`, default `https://api.<domain>`).
    pub api_url: String,
    /// One base URL for every request to a sandbox (`E2B_SANDBOX_URL`); the
    /// sandbox and port are then named by the `E2b-Sandbox-Id` and
    /// `E2b-Sandbox-Port` headers. Absent: `https://<port>-<id>.<domain>`.
    pub sandbox_url: Option<String>,
    /// The template new sandboxes start from.
    pub template: String,
    /// How long a sandbox lives on E2B without a refresh. This server refreshes
    /// it every third of that while the sandbox is open, and kills it on close;
    /// the lifetime only matters if this server dies without closing it.
    pub lifetime: Duration,
    /// The longest a sandbox may live on E2B on the team's plan
    /// (`SANDBOX_E2B_MAX_LIFETIME_SECONDS`, default 1 h, the Hobby plan's):
    /// a longer `lifetime` is refused at start, and a sandbox that reaches it
    /// is reported as such, since E2B extends it no further.
    pub max_lifetime: Duration,
    /// Bound of one control-plane or file request, its retries and its answer
    /// included (`SANDBOX_E2B_REQUEST_TIMEOUT_SECONDS`; not of an execution,
    /// which has its own timeout).
    pub request_timeout: Duration,
    /// Bound of opening a connection (at most `request_timeout`).
    pub connect_timeout: Duration,
}

impl E2bSettings {
    /// Settings for `api_key` with E2B's defaults: its domain, the code
    /// interpreter template, a five-minute lifetime, 60 s requests.
    pub fn new(api_key: ApiKey) -> Self {
        Self {
            api_key,
            domain: DEFAULT_DOMAIN.to_owned(),
            api_url: format!("https://api.{DEFAULT_DOMAIN}"),
            sandbox_url: None,
            template: CODE_INTERPRETER_TEMPLATE.to_owned(),
            lifetime: Duration::from_secs(300),
            max_lifetime: Duration::from_secs(DEFAULT_MAX_LIFETIME_SECONDS),
            request_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_never_prints() {
        let key = ApiKey::new(" e2b_0123456789abcdef\n");
        assert_eq!(key.expose(), "e2b_0123456789abcdef");
        let settings = E2bSettings::new(key.clone());
        for shown in [
            format!("{key}"),
            format!("{key:?}"),
            format!("{settings:?}"),
            format!("{settings:#?}"),
        ] {
            assert!(!shown.contains("0123456789abcdef"), "{shown}");
        }
    }
}
