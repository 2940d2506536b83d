//! [`HttpClient`]: the one HTTP client of the installer.
//!
//! - TLS with rustls (the `ring` provider), verifying with the platform's
//!   verifier and the system's certificate store, so corporate CAs installed
//!   on the machine work.
//! - Proxies from `HTTPS_PROXY` / `HTTP_PROXY` / `NO_PROXY` (reqwest's system
//!   proxy support).
//! - Connect and read timeouts; transient failures (connection errors,
//!   timeouts, 5xx, 429, 408) are retried a few times with exponential
//!   backoff, honouring a short `Retry-After`.
//! - Redirects only to http(s), never from https to http, at most ten.
//! - Bodies are read with a size cap; downloads are hashed as they arrive.

use std::path::Path;
use std::sync::Once;
use std::time::Duration;

use reqwest::header::{ACCEPT, CONTENT_TYPE, RETRY_AFTER};
use reqwest::{StatusCode, Url};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use super::settings::{HttpSettings, redact};

/// Longest `Retry-After` honoured.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(10);

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// No answer (connection, TLS, timeout), after retries.
    #[error("{0}")]
    Transport(String),
    /// An HTTP status other than success or not-found.
    #[error("HTTP {0}")]
    Status(StatusCode),
    /// The body is over the cap.
    #[error("the response is larger than {0} bytes")]
    TooLarge(u64),
    /// Writing the download failed.
    #[error("could not write the download: {0}")]
    Write(std::io::Error),
}

/// A page or small file that was fetched.
#[derive(Debug)]
pub struct Fetched {
    /// The body.
    pub body: Vec<u8>,
    /// Its `Content-Type` (empty when absent).
    pub content_type: String,
    /// The URL after redirects.
    pub url: Url,
}

/// A file downloaded to disk.
#[derive(Debug)]
pub struct Downloaded {
    /// Its sha256, lowercase hex.
    pub sha256: String,
    /// Its size.
    pub size: u64,
}

/// The installer's HTTP client.
#[derive(Clone, Debug)]
pub struct HttpClient {
    client: reqwest::Client,
    settings: HttpSettings,
}

/// Describes a reqwest error by its kind and causes, without the URL (which
/// may carry credentials).
fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        return "the request timed out".into();
    }
    let kind = if e.is_connect() {
        "could not connect"
    } else if e.is_redirect() {
        "a redirect was refused"
    } else if e.is_body() {
        "reading the response failed"
    } else if e.is_decode() {
        "the response could not be decoded"
    } else if e.is_builder() {
        "the request could not be built"
    } else {
        "the request failed"
    };
    let mut parts: Vec<String> = vec![kind.to_owned()];
    let mut source = std::error::Error::source(e);
    while let Some(err) = source {
        let text = err.to_string();
        if !text.is_empty() && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = err.source();
    }
    parts.join(": ")
}

/// How reading a download's body failed.
enum BodyError {
    Net(reqwest::Error),
    Write(std::io::Error),
}

impl HttpClient {
    /// Builds the client.
    pub fn new(settings: &HttpSettings) -> Result<Self, String> {
        static PROVIDER: Once = Once::new();
        PROVIDER.call_once(|| {
            let _ = rustls::crypto::ring::default_provider().install_default();
        });
        let policy = reqwest::redirect::Policy::custom(|attempt| {
            let from_https = attempt
                .previous()
                .last()
                .is_some_and(|u| u.scheme() == "https");
            match attempt.url().scheme() {
                _ if attempt.previous().len() >= 10 => attempt.error("too many redirects"),
                "https" => attempt.follow(),
                "http" if !from_https => attempt.follow(),
                "http" => attempt.error("refused a redirect from https to http"),
                _ => attempt.error("refused a redirect to a URL that is not http(s)"),
            }
        });
        let client = reqwest::Client::builder()
            .user_agent(concat!("mcp-code-sandbox/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(settings.connect_timeout)
            .read_timeout(settings.read_timeout)
            .redirect(policy)
            .build()
            .map_err(|e| format!("cannot set up HTTPS: {}", describe(&e)))?;
        Ok(Self {
            client,
            settings: settings.clone(),
        })
    }

    /// Sends a GET, retrying transient failures. `Ok(None)` for 404 and 410.
    async fn send(&self, url: &Url, accept: &str) -> Result<Option<reqwest::Response>, FetchError> {
        let mut attempt = 0;
        loop {
            let result = self
                .client
                .get(url.clone())
                .header(ACCEPT, accept)
                .send()
                .await;
            let wait = match result {
                Ok(response) => {
                    let status = response.status();
                    if status.is_success() {
                        return Ok(Some(response));
                    }
                    if matches!(status, StatusCode::NOT_FOUND | StatusCode::GONE) {
                        return Ok(None);
                    }
                    let transient = status.is_server_error()
                        || matches!(
                            status,
                            StatusCode::TOO_MANY_REQUESTS | StatusCode::REQUEST_TIMEOUT
                        );
                    if !transient || attempt >= self.settings.retries {
                        return Err(FetchError::Status(status));
                    }
                    let retry_after = response
                        .headers()
                        .get(RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .map(|s| Duration::from_secs(s).min(MAX_RETRY_AFTER));
                    tracing::debug!(url = %redact(url), %status, "transient HTTP status; retrying");
                    retry_after.unwrap_or_else(|| self.backoff(attempt))
                }
                Err(e) => {
                    let transient = e.is_connect() || e.is_timeout() || e.is_request();
                    if !transient || attempt >= self.settings.retries {
                        return Err(FetchError::Transport(describe(&e)));
                    }
                    tracing::debug!(url = %redact(url), error = %describe(&e), "request failed; retrying");
                    self.backoff(attempt)
                }
            };
            attempt += 1;
            tokio::time::sleep(wait).await;
        }
    }

    fn backoff(&self, attempt: u32) -> Duration {
        self.settings.backoff.saturating_mul(1 << attempt.min(6))
    }

    /// Fetches a page or small file, at most `max_bytes` of it. `Ok(None)` when
    /// the server says it does not exist.
    pub async fn get(
        &self,
        url: &Url,
        accept: &str,
        max_bytes: u64,
    ) -> Result<Option<Fetched>, FetchError> {
        let mut attempt = 0;
        loop {
            let Some(mut response) = self.send(url, accept).await? else {
                return Ok(None);
            };
            if response.content_length().is_some_and(|n| n > max_bytes) {
                return Err(FetchError::TooLarge(max_bytes));
            }
            let content_type = response
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let final_url = response.url().clone();
            let mut body = Vec::new();
            let outcome: Result<(), reqwest::Error> = async {
                while let Some(chunk) = response.chunk().await? {
                    body.extend_from_slice(&chunk);
                    if body.len() as u64 > max_bytes {
                        break;
                    }
                }
                Ok(())
            }
            .await;
            if body.len() as u64 > max_bytes {
                return Err(FetchError::TooLarge(max_bytes));
            }
            match outcome {
                Ok(()) => {
                    return Ok(Some(Fetched {
                        body,
                        content_type,
                        url: final_url,
                    }));
                }
                Err(e) if attempt < self.settings.retries => {
                    tracing::debug!(url = %redact(url), error = %describe(&e), "reading failed; retrying");
                    tokio::time::sleep(self.backoff(attempt)).await;
                    attempt += 1;
                }
                Err(e) => return Err(FetchError::Transport(describe(&e))),
            }
        }
    }

    /// Downloads `url` into the file at `path` (replacing its content), at
    /// most `max_bytes`, hashing as it goes. `Ok(None)` when it does not exist.
    pub async fn download(
        &self,
        url: &Url,
        path: &Path,
        max_bytes: u64,
    ) -> Result<Option<Downloaded>, FetchError> {
        let mut attempt = 0;
        loop {
            let Some(mut response) = self.send(url, "*/*").await? else {
                return Ok(None);
            };
            if response.content_length().is_some_and(|n| n > max_bytes) {
                return Err(FetchError::TooLarge(max_bytes));
            }
            let mut file = tokio::fs::File::create(path)
                .await
                .map_err(FetchError::Write)?;
            let mut hasher = Sha256::new();
            let mut size = 0u64;
            let outcome: Result<(), BodyError> = async {
                while let Some(chunk) = response.chunk().await.map_err(BodyError::Net)? {
                    size += chunk.len() as u64;
                    if size > max_bytes {
                        break;
                    }
                    hasher.update(&chunk);
                    file.write_all(&chunk).await.map_err(BodyError::Write)?;
                }
                Ok(())
            }
            .await;
            if size > max_bytes {
                return Err(FetchError::TooLarge(max_bytes));
            }
            match outcome {
                Ok(()) => {
                    file.flush().await.map_err(FetchError::Write)?;
                    file.sync_all().await.map_err(FetchError::Write)?;
                    return Ok(Some(Downloaded {
                        sha256: super::cache::hex(&hasher.finalize()),
                        size,
                    }));
                }
                Err(BodyError::Write(e)) => return Err(FetchError::Write(e)),
                Err(BodyError::Net(e)) if attempt < self.settings.retries => {
                    tracing::debug!(url = %redact(url), error = %describe(&e), "download failed; retrying");
                    tokio::time::sleep(self.backoff(attempt)).await;
                    attempt += 1;
                }
                Err(BodyError::Net(e)) => return Err(FetchError::Transport(describe(&e))),
            }
        }
    }
}
