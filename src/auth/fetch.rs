//! [`Fetcher`]: the bounded GET of the issuer's metadata and keys.
//!
//! Each fetch is bounded in time and size, follows no redirect, sends no
//! credentials, and goes only to https URLs (or http on loopback, for
//! tests). TLS is rustls on `ring`, as everywhere in this server.

use std::sync::Once;
use std::time::Duration;

use futures::StreamExt;
use reqwest::Url;
use reqwest::header::ACCEPT;
use serde::de::DeserializeOwned;

use super::error::AuthError;
use super::settings::check_url;

/// Why a document could not be had.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The URL is not one we fetch.
    #[error("{0}")]
    Refused(String),
    /// No answer in time, or the connection failed.
    #[error("{url}: {reason}")]
    Transport {
        /// The URL.
        url: Url,
        /// What failed.
        reason: String,
    },
    /// An answer other than 200 (redirects are not followed).
    #[error("{url}: HTTP {status}{}", if status.is_redirection() { " (redirects are not followed; configure the final URL)" } else { "" })]
    Status {
        /// The URL.
        url: Url,
        /// The status.
        status: reqwest::StatusCode,
    },
    /// The document is over the size cap.
    #[error("{url}: the answer is larger than {max} bytes")]
    TooLarge {
        /// The URL.
        url: Url,
        /// The cap.
        max: usize,
    },
    /// The document is not the JSON expected.
    #[error("{url}: {reason}")]
    Malformed {
        /// The URL.
        url: Url,
        /// What is wrong.
        reason: String,
    },
}

/// An HTTP client for small JSON documents.
#[derive(Clone, Debug)]
pub struct Fetcher {
    client: reqwest::Client,
    max_bytes: usize,
}

impl Fetcher {
    /// A client whose fetches take at most `timeout` and `max_bytes`.
    pub fn new(timeout: Duration, max_bytes: usize) -> Result<Self, AuthError> {
        static PROVIDER: Once = Once::new();
        PROVIDER.call_once(|| {
            let _ = rustls::crypto::ring::default_provider().install_default();
        });
        let client = reqwest::Client::builder()
            .user_agent(concat!("mcp-code-sandbox/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(timeout)
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| AuthError::Client(e.to_string()))?;
        Ok(Self { client, max_bytes })
    }

    /// GETs `url` and parses its JSON body.
    pub async fn get_json<T: DeserializeOwned>(&self, url: &Url) -> Result<T, FetchError> {
        check_url(url.as_str()).map_err(FetchError::Refused)?;
        let transport = |e: reqwest::Error| FetchError::Transport {
            url: url.clone(),
            reason: e.without_url().to_string(),
        };
        let response = self
            .client
            .get(url.clone())
            .header(ACCEPT, "application/json")
            .send()
            .await
            .map_err(transport)?;
        if response.status() != reqwest::StatusCode::OK {
            return Err(FetchError::Status {
                url: url.clone(),
                status: response.status(),
            });
        }
        if response
            .content_length()
            .is_some_and(|n| n > self.max_bytes as u64)
        {
            return Err(self.too_large(url));
        }
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(transport)?;
            if body.len() + chunk.len() > self.max_bytes {
                return Err(self.too_large(url));
            }
            body.extend_from_slice(&chunk);
        }
        serde_json::from_slice(&body).map_err(|e| FetchError::Malformed {
            url: url.clone(),
            reason: format!("not the JSON expected: {e}"),
        })
    }

    fn too_large(&self, url: &Url) -> FetchError {
        FetchError::TooLarge {
            url: url.clone(),
            max: self.max_bytes,
        }
    }
}
