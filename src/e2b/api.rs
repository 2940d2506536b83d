//! [`ApiClient`]: E2B's control plane (`https://api.<domain>`): create a
//! sandbox, set its timeout, kill it. Authenticated with the API key in
//! `X-API-Key`; errors mapped to [`E2bError`]; retried where that is safe.

use std::collections::HashMap;
use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue};
use reqwest::{Client, Method, RequestBuilder, StatusCode};
use serde::{Deserialize, Serialize};

use super::config::{ApiKey, E2bSettings};
use super::error::{E2bError, UnusableSandbox};
use super::names;
use tokio_util::sync::CancellationToken;

use super::transport::{Failure, Retry, read_body, send, send_until};

/// The API key header, as E2B's API specification names it.
const API_KEY_HEADER: &str = "x-api-key";
/// Most bytes of a sandbox description read (E2B's are under 1 KiB).
const MAX_ANSWER_BYTES: usize = 1 << 20;

/// A client of E2B's control plane.
#[derive(Clone, Debug)]
pub(crate) struct ApiClient {
    http: Client,
    base: String,
    key: ApiKey,
    bound: Duration,
    max_lifetime: Duration,
    /// Cancelled at shutdown: creates stop retrying.
    stopping: CancellationToken,
}

/// The body of `POST /sandboxes`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct NewSandbox<'a> {
    #[serde(rename = "templateID")]
    template_id: &'a str,
    timeout: u64,
    metadata: &'a HashMap<String, String>,
    env_vars: HashMap<String, String>,
    /// Always true: the sandbox then only accepts requests that carry its
    /// access token (E2B's default when absent is *not* secure).
    secure: bool,
    #[serde(rename = "allow_internet_access")]
    allow_internet_access: bool,
}

/// A sandbox as the control plane describes it after creating it.
#[derive(Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreatedSandbox {
    /// E2B's id of the sandbox.
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    /// The resolved template id.
    #[serde(rename = "templateID", default)]
    pub template_id: String,
    /// The version of the sandbox daemon.
    #[serde(default)]
    pub envd_version: String,
    /// The token the sandbox demands in `X-Access-Token`.
    #[serde(default)]
    pub envd_access_token: Option<String>,
    /// The token for non-envd ports of a sandbox closed to public traffic.
    #[serde(default)]
    pub traffic_access_token: Option<String>,
    /// The domain of the sandbox's hosts; often null (then the configured one).
    #[serde(default)]
    pub domain: Option<String>,
}

impl std::fmt::Debug for CreatedSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreatedSandbox")
            .field("sandbox_id", &self.sandbox_id)
            .field("template_id", &self.template_id)
            .field("envd_version", &self.envd_version)
            .field("domain", &self.domain)
            .finish_non_exhaustive()
    }
}

impl CreatedSandbox {
    /// Checks what goes into the URL and headers of every request to the
    /// sandbox: the domain must be a DNS name and the tokens header-safe.
    fn check(&self) -> Result<(), UnusableSandbox> {
        if let Some(domain) = self.domain.as_deref().filter(|d| !d.is_empty())
            && !names::is_domain(domain)
        {
            return Err(UnusableSandbox::Domain(names::shown(domain)));
        }
        for (name, token) in [
            ("envdAccessToken", &self.envd_access_token),
            ("trafficAccessToken", &self.traffic_access_token),
        ] {
            if let Some(token) = token.as_deref().filter(|t| !t.is_empty())
                && !names::is_token(token)
            {
                return Err(UnusableSandbox::Token(name));
            }
        }
        Ok(())
    }
}

impl ApiClient {
    /// A client for the control plane configured in `settings`.
    pub(crate) fn new(http: Client, settings: &E2bSettings) -> Self {
        Self {
            http,
            base: settings.api_url.trim_end_matches('/').to_owned(),
            key: settings.api_key.clone(),
            bound: settings.request_timeout,
            max_lifetime: settings.max_lifetime,
            stopping: CancellationToken::new(),
        }
    }

    /// Makes creates in progress stop retrying (the server is shutting down),
    /// so they end at once instead of making a sandbox nobody will use.
    pub(crate) fn stop_retrying(&self) {
        self.stopping.cancel();
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let mut key = HeaderValue::from_str(self.key.expose())
            .unwrap_or_else(|_| HeaderValue::from_static("invalid"));
        key.set_sensitive(true);
        self.http
            .request(method, format!("{}{path}", self.base))
            .header(HeaderName::from_static(API_KEY_HEADER), key)
    }

    /// Creates a sandbox from `template` that lives `lifetime` unless refreshed.
    pub(crate) async fn create(
        &self,
        template: &str,
        lifetime: Duration,
        metadata: &HashMap<String, String>,
    ) -> Result<CreatedSandbox, E2bError> {
        let what = "creating a sandbox";
        let body = NewSandbox {
            template_id: template,
            timeout: lifetime.as_secs().max(1),
            metadata,
            env_vars: HashMap::new(),
            secure: true,
            allow_internet_access: true,
        };
        let response = send_until(&self.stopping, what, Retry::Unapplied, self.bound, || {
            self.request(Method::POST, "/sandboxes").json(&body)
        })
        .await?;
        if !response.status().is_success() {
            let failure = Failure::read(response).await;
            if failure.status == StatusCode::NOT_FOUND {
                return Err(E2bError::TemplateNotFound {
                    template: template.to_owned(),
                    message: failure.message,
                });
            }
            return Err(failure.into_api_error(what));
        }
        let body = read_body(response, MAX_ANSWER_BYTES, self.bound, what, "").await?;
        let created: CreatedSandbox =
            serde_json::from_slice(&body).map_err(|e| E2bError::Protocol {
                what: what.to_owned(),
                detail: format!("the answer is not a sandbox description: {e}"),
            })?;
        if !names::is_sandbox_id(&created.sandbox_id) {
            return Err(E2bError::Protocol {
                what: what.to_owned(),
                detail: format!(
                    "the sandbox id '{}' is not usable (it must be letters, digits and '-', at most 64)",
                    names::shown(&created.sandbox_id)
                ),
            });
        }
        if let Err(reason) = created.check() {
            // E2B made the sandbox, but it cannot be reached safely: kill it.
            if let Err(e) = self.kill(&created.sandbox_id).await {
                tracing::warn!(e2b_id = %created.sandbox_id, "could not kill an E2B sandbox whose description was refused: {e}");
            }
            return Err(E2bError::Unusable {
                what: what.to_owned(),
                reason,
            });
        }
        Ok(created)
    }

    /// Makes the sandbox expire `lifetime` from now (refreshing it).
    pub(crate) async fn set_timeout(&self, id: &str, lifetime: Duration) -> Result<(), E2bError> {
        let what = "extending a sandbox's lifetime";
        let body = serde_json::json!({ "timeout": lifetime.as_secs().max(1) });
        let response = send(what, Retry::Idempotent, self.bound, || {
            self.request(Method::POST, &format!("/sandboxes/{id}/timeout"))
                .json(&body)
        })
        .await?;
        if response.status().is_success() {
            return Ok(());
        }
        let failure = Failure::read(response).await;
        if failure.status == StatusCode::NOT_FOUND {
            return Err(E2bError::SandboxGone(id.to_owned()));
        }
        if failure.status == StatusCode::BAD_REQUEST
            && failure
                .message
                .to_ascii_lowercase()
                .contains("max instance length")
        {
            return Err(E2bError::MaxLifetimeReached {
                id: id.to_owned(),
                max: crate::sandbox::human_duration(self.max_lifetime),
            });
        }
        Err(failure.into_api_error(what))
    }

    /// Whether E2B still knows the sandbox (`GET /sandboxes/{id}`): false
    /// only on a 404, E2B's definitive word that it is gone.
    pub(crate) async fn exists(&self, id: &str) -> Result<bool, E2bError> {
        let what = "looking up a sandbox";
        let response = send(what, Retry::Idempotent, self.bound, || {
            self.request(Method::GET, &format!("/sandboxes/{id}"))
        })
        .await?;
        match response.status() {
            s if s.is_success() => Ok(true),
            StatusCode::NOT_FOUND => Ok(false),
            _ => Err(Failure::read(response).await.into_api_error(what)),
        }
    }

    /// Kills the sandbox; false when E2B did not know it (already gone).
    pub(crate) async fn kill(&self, id: &str) -> Result<bool, E2bError> {
        let what = "killing a sandbox";
        let response = send(what, Retry::Idempotent, self.bound, || {
            self.request(Method::DELETE, &format!("/sandboxes/{id}"))
        })
        .await?;
        match response.status() {
            s if s.is_success() => Ok(true),
            StatusCode::NOT_FOUND => Ok(false),
            _ => Err(Failure::read(response).await.into_api_error(what)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn created(domain: &str, traffic_token: &str) -> CreatedSandbox {
        serde_json::from_value(serde_json::json!({
            "sandboxID": "iabc", "templateID": "t", "envdVersion": "0.6.13",
            "envdAccessToken": "tok", "trafficAccessToken": traffic_token,
            "domain": domain,
        }))
        .unwrap()
    }

    #[test]
    fn a_description_that_would_misroute_requests_is_refused_by_kind() {
        assert_eq!(created("eu.e2b.dev", "t0k").check(), Ok(()));
        assert_eq!(
            created("evil.test/steal?", "t0k").check(),
            Err(UnusableSandbox::Domain("evil.test/steal?".into()))
        );
        let refused = created("eu.e2b.dev", "a\r\nInjected: yes").check();
        assert_eq!(refused, Err(UnusableSandbox::Token("trafficAccessToken")));
        assert_eq!(
            refused.unwrap_err().to_string(),
            "the trafficAccessToken is not a usable token (visible ASCII, at most 1 KiB)"
        );
    }
}
