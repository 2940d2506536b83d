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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::e2b::config::ApiKey;

    fn created(domain: Option<&str>) -> CreatedSandbox {
        serde_json::from_value(serde_json::json!({
            "sandboxID": "iabc", "templateID": "t", "envdVersion": "0.6.13",
            "envdAccessToken": "tok", "domain": domain,
        }))
        .unwrap()
    }

    #[test]
    fn sandboxes_are_reached_by_per_port_hosts_or_the_one_sandbox_url() {
        let mut settings = E2bSettings::new(ApiKey::new("k"));
        let route = Route::new(&settings, &created(None));
        assert_eq!(route.base(JUPYTER_PORT), "https://49999-iabc.e2b.app");
        assert_eq!(route.base(ENVD_PORT), "https://49983-iabc.e2b.app");
        let route = Route::new(&settings, &created(Some("eu.e2b.dev")));
        assert_eq!(route.base(ENVD_PORT), "https://49983-iabc.eu.e2b.dev");
        settings.sandbox_url = Some("http://127.0.0.1:9/".into());
        let route = Route::new(&settings, &created(None));
        assert_eq!(route.base(ENVD_PORT), "http://127.0.0.1:9");
        let _ = rustls::crypto::ring::default_provider().install_default();
        let request = route
            .request(&Client::new(), Method::GET, JUPYTER_PORT, "/health")
            .build()
            .unwrap();
        assert_eq!(request.url().as_str(), "http://127.0.0.1:9/health");
        let headers = request.headers();
        assert_eq!(headers["e2b-sandbox-id"], "iabc");
        assert_eq!(headers["e2b-sandbox-port"], "49999");
        assert_eq!(headers["x-access-token"], "tok");
        assert!(headers["x-access-token"].is_sensitive());
        assert!(!format!("{route:?}").contains("tok"));
    }
}
