//! [`Route`]: how requests reach one E2B sandbox: its per-port host
//! (`https://<port>-<id>.<domain>`) or, when `E2B_SANDBOX_URL` is set, that
//! one URL with the `E2b-Sandbox-Id` and `E2b-Sandbox-Port` headers naming
//! the sandbox and port; plus the tokens each request carries.

use reqwest::header::HeaderValue;
use reqwest::{Client, Method, RequestBuilder};

use super::api::CreatedSandbox;
use super::config::E2bSettings;

/// Port of envd, the daemon in every sandbox (files, filesystem RPCs).
pub(crate) const ENVD_PORT: u16 = 49983;
/// Port of the code interpreter's HTTP bridge (`/execute`).
pub(crate) const JUPYTER_PORT: u16 = 49999;

/// How to address one sandbox.
#[derive(Clone)]
pub(crate) struct Route {
    /// E2B's id of the sandbox.
    pub id: String,
    /// `E2B_SANDBOX_URL`, when set.
    shared_base: Option<String>,
    /// The domain of the per-port hosts.
    domain: String,
    /// `envdAccessToken`, sent as `X-Access-Token`.
    access_token: Option<String>,
    /// `trafficAccessToken`, sent to the interpreter's port.
    traffic_token: Option<String>,
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Route")
            .field("id", &self.id)
            .field("shared_base", &self.shared_base)
            .field("domain", &self.domain)
            .finish_non_exhaustive()
    }
}

impl Route {
    /// The route to a sandbox just created.
    pub(crate) fn new(settings: &E2bSettings, created: &CreatedSandbox) -> Self {
        Self {
            id: created.sandbox_id.clone(),
            shared_base: settings
                .sandbox_url
                .as_ref()
                .map(|u| u.trim_end_matches('/').to_owned()),
            domain: created
                .domain
                .clone()
                .filter(|d| !d.is_empty())
                .unwrap_or_else(|| settings.domain.clone()),
            access_token: created.envd_access_token.clone().filter(|t| !t.is_empty()),
            traffic_token: created
                .traffic_access_token
                .clone()
                .filter(|t| !t.is_empty()),
        }
    }

    /// The base URL of `port` in this sandbox.
    pub(crate) fn base(&self, port: u16) -> String {
        match &self.shared_base {
            Some(base) => base.clone(),
            None => format!("https://{port}-{}.{}", self.id, self.domain),
        }
    }

    /// A request to `path` on `port`, with the routing headers and tokens.
    pub(crate) fn request(
        &self,
        http: &Client,
        method: Method,
        port: u16,
        path: &str,
    ) -> RequestBuilder {
        let mut request = http
            .request(method, format!("{}{path}", self.base(port)))
            .header("E2b-Sandbox-Id", &self.id)
            .header("E2b-Sandbox-Port", port.to_string());
        if let Some(token) = secret(self.access_token.as_deref()) {
            request = request.header("X-Access-Token", token);
        }
        if port != ENVD_PORT
            && let Some(token) = secret(self.traffic_token.as_deref())
        {
            request = request.header("E2B-Traffic-Access-Token", token);
        }
        request
    }
}

/// A token as a header value that HTTP/2 never indexes and logs never show.
fn secret(token: Option<&str>) -> Option<HeaderValue> {
    let mut value = HeaderValue::from_str(token?).ok()?;
    value.set_sensitive(true);
    Some(value)
}
