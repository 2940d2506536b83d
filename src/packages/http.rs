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
//! - Redirects are followed here, not by reqwest, so that each hop is
//!   checked: only to http(s), never from https to http, at most ten; and
//!   index credentials are attached per hop by [`CredentialRule`], never
//!   taken from a URL.
//! - Bodies are read with a size cap; downloads are hashed as they arrive.
//!
//! Callers bound the whole of a request in time (the install's deadline);
//! the read timeout bounds each pause within it.

use std::io::SeekFrom;
use std::sync::Once;
use std::time::Duration;

use reqwest::header::{
    ACCEPT, ACCEPT_ENCODING, CONTENT_RANGE, CONTENT_TYPE, HeaderValue, LOCATION, RANGE, RETRY_AFTER,
};
use reqwest::{StatusCode, Url};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncSeekExt, AsyncWriteExt};

use super::credentials::{CredentialRule, without_userinfo};
use super::settings::{HttpSettings, redact};

/// Longest `Retry-After` honoured.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(10);
/// Redirects followed for one request.
const MAX_REDIRECTS: usize = 10;

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
    /// A redirect this client does not follow.
    #[error("{0}")]
    Redirect(#[from] RedirectRefused),
}

/// A redirect this client refuses to follow.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum RedirectRefused {
    /// The `Location` is not a URL.
    #[error("a redirect gave an invalid location")]
    InvalidLocation,
    /// From https to plain http.
    #[error("refused a redirect from https to http")]
    Downgrade,
    /// To a scheme other than http(s).
    #[error("refused a redirect to a URL that is not http(s)")]
    NotHttp,
    /// More hops than [`MAX_REDIRECTS`].
    #[error("too many redirects")]
    TooMany,
}

/// Why the HTTP client could not be built (kept, and cloned to every
/// install that needs the client, so it holds reqwest's words as text).
#[derive(Clone, Debug, thiserror::Error)]
#[error("cannot set up HTTPS: {0}")]
pub struct ClientSetupError(String);

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

/// Which part of a file a range request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ByteRange {
    /// The last this many bytes (all of a shorter file).
    Last(u64),
    /// From the first byte to the last, both included.
    Span {
        /// The first byte's offset.
        first: u64,
        /// The last byte's offset.
        last: u64,
    },
}

impl ByteRange {
    fn header(self) -> String {
        match self {
            Self::Last(n) => format!("bytes=-{n}"),
            Self::Span { first, last } => format!("bytes={first}-{last}"),
        }
    }

    /// Whether a part from `start` to `end` of a file of `total` bytes is
    /// what was asked for (a server may shorten a span at the file's end).
    fn admits(self, start: u64, end: u64, total: u64) -> bool {
        if end >= total || start > end {
            return false;
        }
        match self {
            Self::Last(n) => end + 1 == total && start == total.saturating_sub(n),
            Self::Span { first, last } => start == first && end == last.min(total - 1),
        }
    }
}

/// `Content-Range: bytes START-END/TOTAL`, as numbers.
fn parse_content_range(value: &str) -> Option<(u64, u64, u64)> {
    let rest = value.trim().strip_prefix("bytes ")?;
    let (span, total) = rest.split_once('/')?;
    let (start, end) = span.split_once('-')?;
    Some((
        start.trim().parse().ok()?,
        end.trim().parse().ok()?,
        total.trim().parse().ok()?,
    ))
}

/// A part of a file.
#[derive(Debug)]
pub struct Piece {
    /// Where it starts in the file.
    pub start: u64,
    /// Its bytes.
    pub body: Vec<u8>,
    /// The whole file's size.
    pub total: u64,
}

/// What a server gave for a range request.
#[derive(Debug)]
pub enum RangeAnswer {
    /// The part asked for.
    Piece(Piece),
    /// Something else (the whole file, a compressed form): ranges are not
    /// served.
    Unsupported,
}

/// The installer's HTTP client.
#[derive(Clone, Debug)]
pub struct HttpClient {
    client: reqwest::Client,
    settings: HttpSettings,
    credentials: CredentialRule,
}

/// How one attempt at a request failed.
enum Attempt {
    /// No usable answer; retried when transient.
    Net(reqwest::Error),
    /// A redirect this client does not follow; never retried.
    Refused(RedirectRefused),
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

/// Where a redirect from `from` to `location` leads, if it may be followed.
fn redirect_target(from: &Url, location: &str) -> Result<Url, RedirectRefused> {
    let next = from
        .join(location.trim())
        .map_err(|_| RedirectRefused::InvalidLocation)?;
    match (from.scheme(), next.scheme()) {
        (_, "https") | ("http", "http") => Ok(without_userinfo(&next)),
        ("https", "http") => Err(RedirectRefused::Downgrade),
        _ => Err(RedirectRefused::NotHttp),
    }
}

impl HttpClient {
    /// Builds the client; `credentials` decides which requests carry which
    /// index credentials.
    pub fn new(
        settings: &HttpSettings,
        credentials: CredentialRule,
    ) -> Result<Self, ClientSetupError> {
        static PROVIDER: Once = Once::new();
        PROVIDER.call_once(|| {
            let _ = rustls::crypto::ring::default_provider().install_default();
        });
        let client = reqwest::Client::builder()
            .user_agent(concat!("mcp-code-sandbox/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(settings.connect_timeout)
            .read_timeout(settings.read_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| ClientSetupError(describe(&e)))?;
        Ok(Self {
            client,
            settings: settings.clone(),
            credentials,
        })
    }

    /// One GET of `url`, following redirects hop by hop; each hop carries
    /// the credentials [`CredentialRule`] allows for the chain so far.
    async fn send_once(
        &self,
        url: &Url,
        accept: &str,
        range: Option<&HeaderValue>,
    ) -> Result<reqwest::Response, Attempt> {
        let mut chain = vec![without_userinfo(url)];
        loop {
            let current = chain.last().cloned().unwrap_or_else(|| url.clone());
            let mut request = self.client.get(current.clone()).header(ACCEPT, accept);
            if let Some(range) = range {
                // A range of the file as stored, never of a compressed form.
                request = request
                    .header(RANGE, range.clone())
                    .header(ACCEPT_ENCODING, "identity");
            }
            if let Some(credentials) = self.credentials.for_request(&chain) {
                request = request.basic_auth(&credentials.user, credentials.password.as_ref());
            }
            let response = request.send().await.map_err(Attempt::Net)?;
            if !response.status().is_redirection() {
                return Ok(response);
            }
            let Some(location) = response
                .headers()
                .get(LOCATION)
                .and_then(|v| v.to_str().ok())
            else {
                return Ok(response);
            };
            if chain.len() > MAX_REDIRECTS {
                return Err(Attempt::Refused(RedirectRefused::TooMany));
            }
            chain.push(redirect_target(&current, location).map_err(Attempt::Refused)?);
        }
    }

    /// Sends a GET, retrying transient failures. `Ok(None)` for 404 and 410.
    async fn send(
        &self,
        url: &Url,
        accept: &str,
        range: Option<&HeaderValue>,
    ) -> Result<Option<reqwest::Response>, FetchError> {
        let mut attempt = 0;
        loop {
            let result = self.send_once(url, accept, range).await;
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
                Err(Attempt::Refused(refused)) => return Err(refused.into()),
                Err(Attempt::Net(e)) => {
                    let transient = e.is_connect() || e.is_timeout() || e.is_request();
                    if !transient || attempt >= self.settings.retries {
                        return Err(FetchError::Transport(self.describe(&e)));
                    }
                    tracing::debug!(url = %redact(url), error = %describe(&e), "request failed; retrying");
                    self.backoff(attempt)
                }
            };
            attempt += 1;
            tokio::time::sleep(wait).await;
        }
    }

    /// [`describe`], saying which timeout fired.
    fn describe(&self, e: &reqwest::Error) -> String {
        if e.is_timeout() {
            return format!(
                "the request timed out: no connection within {} s, or no data for {} s (the read timeout)",
                self.settings.connect_timeout.as_secs_f64(),
                self.settings.read_timeout.as_secs_f64()
            );
        }
        describe(e)
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
            let Some(mut response) = self.send(url, accept, None).await? else {
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
                Err(e) => return Err(FetchError::Transport(self.describe(&e))),
            }
        }
    }

    /// Fetches part of a file, at most `max_bytes` of it. `Ok(None)` when the
    /// server says it does not exist; [`RangeAnswer::Unsupported`] when it
    /// answers with something other than the part asked for (the body is
    /// then left unread).
    ///
    /// `charge` is told of every chunk as it arrives (a failed attempt's
    /// too), and stops the transfer by answering `false`.
    pub async fn get_range(
        &self,
        url: &Url,
        range: ByteRange,
        max_bytes: u64,
        charge: &(dyn Fn(u64) -> bool + Sync),
    ) -> Result<Option<RangeAnswer>, FetchError> {
        let header = HeaderValue::from_str(&range.header())
            .map_err(|e| FetchError::Transport(e.to_string()))?;
        let mut attempt = 0;
        loop {
            let Some(mut response) = self.send(url, "*/*", Some(&header)).await? else {
                return Ok(None);
            };
            let content_range = response
                .headers()
                .get(CONTENT_RANGE)
                .and_then(|v| v.to_str().ok())
                .and_then(parse_content_range);
            let Some((start, end, total)) = content_range.filter(|_| {
                response.status() == StatusCode::PARTIAL_CONTENT
                    && response.headers().get("content-encoding").is_none()
            }) else {
                return Ok(Some(RangeAnswer::Unsupported));
            };
            let wanted = end - start + 1;
            if wanted > max_bytes || !range.admits(start, end, total) {
                return Ok(Some(RangeAnswer::Unsupported));
            }
            let mut body = Vec::new();
            let mut refused = false;
            let outcome: Result<(), reqwest::Error> = async {
                while let Some(chunk) = response.chunk().await? {
                    if !charge(chunk.len() as u64) {
                        refused = true;
                        break;
                    }
                    body.extend_from_slice(&chunk);
                    if body.len() as u64 > wanted {
                        break;
                    }
                }
                Ok(())
            }
            .await;
            if refused {
                return Err(FetchError::TooLarge(max_bytes));
            }
            match outcome {
                Ok(()) if body.len() as u64 == wanted => {
                    return Ok(Some(RangeAnswer::Piece(Piece { start, body, total })));
                }
                Ok(()) => return Ok(Some(RangeAnswer::Unsupported)),
                Err(e) if attempt < self.settings.retries => {
                    tracing::debug!(url = %redact(url), error = %describe(&e), "reading a range failed; retrying");
                    tokio::time::sleep(self.backoff(attempt)).await;
                    attempt += 1;
                }
                Err(e) => return Err(FetchError::Transport(self.describe(&e))),
            }
        }
    }

    /// Downloads `url` into `out` (replacing its content), at most
    /// `max_bytes`, hashing as it goes. `Ok(None)` when it does not exist.
    pub async fn download(
        &self,
        url: &Url,
        out: &std::fs::File,
        max_bytes: u64,
    ) -> Result<Option<Downloaded>, FetchError> {
        let mut attempt = 0;
        loop {
            let Some(mut response) = self.send(url, "*/*", None).await? else {
                return Ok(None);
            };
            if response.content_length().is_some_and(|n| n > max_bytes) {
                return Err(FetchError::TooLarge(max_bytes));
            }
            let mut file = tokio::fs::File::from_std(out.try_clone().map_err(FetchError::Write)?);
            file.set_len(0).await.map_err(FetchError::Write)?;
            file.seek(SeekFrom::Start(0))
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
                        sha256: crate::digest::hex(&hasher.finalize()),
                        size,
                    }));
                }
                Err(BodyError::Write(e)) => return Err(FetchError::Write(e)),
                Err(BodyError::Net(e)) if attempt < self.settings.retries => {
                    tracing::debug!(url = %redact(url), error = %describe(&e), "download failed; retrying");
                    tokio::time::sleep(self.backoff(attempt)).await;
                    attempt += 1;
                }
                Err(BodyError::Net(e)) => return Err(FetchError::Transport(self.describe(&e))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn a_part_is_taken_only_when_it_is_what_was_asked_for() {
        assert_eq!(parse_content_range("bytes 10-19/100"), Some((10, 19, 100)));
        assert_eq!(parse_content_range("bytes 10-19/*"), None);
        assert_eq!(parse_content_range("items 1-2/3"), None);
        let last = ByteRange::Last(30);
        assert!(last.admits(70, 99, 100));
        assert!(last.admits(0, 9, 10), "a short file comes whole");
        assert!(!last.admits(60, 99, 100));
        assert!(!last.admits(70, 100, 100));
        let span = ByteRange::Span { first: 5, last: 50 };
        assert!(span.admits(5, 50, 100));
        assert!(span.admits(5, 19, 20), "cut at the end of the file");
        assert!(!span.admits(0, 50, 100));
        assert!(!span.admits(5, 40, 100));
    }

    #[test]
    fn redirects_never_go_from_https_to_http_or_elsewhere() {
        let https = Url::parse("https://index.test/simple/six/").unwrap();
        let http = Url::parse("http://index.test/simple/six/").unwrap();
        assert_eq!(
            redirect_target(&https, "/files/six.whl").unwrap().as_str(),
            "https://index.test/files/six.whl"
        );
        assert_eq!(
            redirect_target(&https, "https://u:p@cdn.test/six.whl")
                .unwrap()
                .as_str(),
            "https://cdn.test/six.whl",
            "no credentials from a Location header"
        );
        assert!(redirect_target(&http, "http://cdn.test/six.whl").is_ok());
        assert_eq!(
            redirect_target(&https, "http://index.test/six.whl"),
            Err(RedirectRefused::Downgrade)
        );
        assert_eq!(
            redirect_target(&https, "file:///etc/passwd"),
            Err(RedirectRefused::NotHttp)
        );
        assert_eq!(
            redirect_target(&http, "ftp://cdn.test/six.whl"),
            Err(RedirectRefused::NotHttp)
        );
    }

    /// A server that sends the head of a response, a few bytes of its body,
    /// then nothing.
    async fn stalling_server() -> Url {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = stream.read(&mut buf).await;
                    let _ = stream
                        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nabc")
                        .await;
                    tokio::time::sleep(Duration::from_secs(30)).await;
                });
            }
        });
        Url::parse(&format!("http://127.0.0.1:{port}/file.whl")).unwrap()
    }

    #[tokio::test]
    async fn a_transfer_that_stalls_ends_at_the_read_timeout_with_a_clear_error() {
        let url = stalling_server().await;
        let settings = HttpSettings {
            read_timeout: Duration::from_millis(300),
            retries: 0,
            ..HttpSettings::default()
        };
        let client = HttpClient::new(&settings, CredentialRule::default()).unwrap();
        let out = tempfile::tempfile().unwrap();
        let started = std::time::Instant::now();
        let err = client.download(&url, &out, 1 << 20).await.unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5));
        let text = err.to_string();
        assert!(
            text.contains("timed out") && text.contains("0.3 s (the read timeout)"),
            "{text}"
        );
    }
}
