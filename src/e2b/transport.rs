//! HTTP plumbing shared by the E2B clients: the two reqwest clients (which
//! follow no redirect), retries with backoff that honour `Retry-After` within
//! one time bound, bounded body reads, and reading an error answer into an
//! [`E2bError`].

use std::time::Duration;

use reqwest::header::{HeaderMap, LOCATION, RETRY_AFTER};
use reqwest::{Client, RequestBuilder, Response, StatusCode};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::config::E2bSettings;
use super::error::{E2bError, network_error};

/// Most tries of one request, the first included.
const ATTEMPTS: u32 = 4;
/// Wait before the first retry; doubled for each further one.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// Longest wait between tries, even when `Retry-After` asks for more (a
/// longer wait is reported to the model instead).
const MAX_BACKOFF: Duration = Duration::from_secs(20);
/// Most bytes of an error answer read.
const MAX_ERROR_BODY: usize = 64 << 10;
/// Longest time spent reading an error answer's body.
const ERROR_BODY_TIMEOUT: Duration = Duration::from_secs(5);
/// Bodies larger than this are parsed on a blocking thread.
const INLINE_PARSE_BYTES: usize = 256 << 10;

/// The clients E2B is spoken to with.
#[derive(Clone, Debug)]
pub(crate) struct Clients {
    /// For the control plane and envd (HTTP/1.1 or HTTP/2).
    pub general: Client,
    /// For the code interpreter's `/execute` stream: HTTP/1.1 only and
    /// uncompressed, so that
    /// dropping a request closes its connection, which the interpreter notices
    /// and answers by interrupting the code (with HTTP/2 only a stream would
    /// be reset, unnoticed).
    pub execute: Client,
    /// How long opening a connection may take, for the messages that say so.
    pub connect_timeout: Duration,
}

impl Clients {
    /// Builds both clients: rustls with the ring provider and the platform's
    /// certificate verifier, a connect timeout, no redirects followed (a
    /// redirect is an error: the API key and access tokens go to the
    /// configured origin only, never over a downgrade to plain HTTP), and no
    /// whole-request timeout (each call bounds itself; an execution can run
    /// for minutes).
    pub(crate) fn new(settings: &E2bSettings) -> Result<Self, E2bError> {
        // Only the first install in a process wins; later ones are no-ops.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let build = |http1_only: bool| {
            let mut builder = Client::builder()
                .user_agent(concat!("mcp-code-sandbox/", env!("CARGO_PKG_VERSION")))
                .redirect(reqwest::redirect::Policy::none())
                .connect_timeout(settings.connect_timeout)
                .pool_idle_timeout(Duration::from_secs(60));
            if http1_only {
                // No compression either: a compressed stream would arrive in
                // the compressor's blocks, not line by line.
                builder = builder.http1_only().no_gzip();
            }
            builder.build().map_err(E2bError::Client)
        };
        Ok(Self {
            general: build(false)?,
            execute: build(true)?,
            connect_timeout: settings.connect_timeout,
        })
    }
}

/// Which failures a request may be retried after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Retry {
    /// Never (the request is not idempotent, e.g. running code).
    Never,
    /// Only when the request certainly had no effect: a 429, or a connection
    /// that could not be opened (creating a sandbox).
    Unapplied,
    /// Also after 5xx answers and timeouts (idempotent requests).
    Idempotent,
    /// As [`Retry::Idempotent`], but not after a 500: envd's own answer to
    /// this request (a path that cannot be written, say), which a retry
    /// would only repeat. 502, 503 and 504 come from the way there.
    Envd,
}

/// Sends the request `make` builds, retrying as `retry` allows, with
/// exponential backoff that honours `Retry-After`. Every try, every wait and
/// the reading of the answer's body fit in `bound` together: a slow or silent
/// E2B holds the caller that long at most. Returns the last answer, whatever
/// its status, except a redirect, which is an error; `what` names the
/// request in errors.
pub(crate) async fn send(
    what: &str,
    retry: Retry,
    bound: Duration,
    make: impl Fn() -> RequestBuilder,
) -> Result<Response, E2bError> {
    send_until(&CancellationToken::new(), what, retry, bound, make).await
}

/// As [`send`], but no retry starts once `stop` is cancelled (the server is
/// shutting down): the last answer is returned instead.
pub(crate) async fn send_until(
    stop: &CancellationToken,
    what: &str,
    retry: Retry,
    bound: Duration,
    make: impl Fn() -> RequestBuilder,
) -> Result<Response, E2bError> {
    let deadline = Instant::now() + bound;
    let mut backoff = FIRST_BACKOFF;
    let mut attempt = 1;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let outcome = make().timeout(left).send().await;
        let wait = match &outcome {
            Ok(response) => answer_wait(retry, response, backoff),
            Err(e) => failure_wait(retry, e, backoff),
        }
        .filter(|wait| attempt < ATTEMPTS && Instant::now() + *wait < deadline);
        let waited_out = match wait {
            Some(wait) => {
                tracing::debug!(
                    what,
                    attempt,
                    wait_ms = wait.as_millis() as u64,
                    "retrying an E2B request"
                );
                tokio::select! {
                    () = tokio::time::sleep(wait) => true,
                    () = stop.cancelled() => false,
                }
            }
            None => false,
        };
        if !waited_out {
            let response = outcome.map_err(|e| network_error(what, e, bound))?;
            refuse_redirect(what, &response)?;
            return Ok(response);
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
        attempt += 1;
    }
}

/// How long to wait before retrying after `response`; `None`: do not retry.
fn answer_wait(retry: Retry, response: &Response, backoff: Duration) -> Option<Duration> {
    let retryable = match response.status() {
        StatusCode::TOO_MANY_REQUESTS => retry != Retry::Never,
        StatusCode::INTERNAL_SERVER_ERROR => retry == Retry::Idempotent,
        s if s.is_server_error() => {
            matches!(retry, Retry::Idempotent | Retry::Envd) && s != StatusCode::NOT_IMPLEMENTED
        }
        _ => false,
    };
    if !retryable {
        return None;
    }
    match retry_after(response.headers()) {
        Some(asked) if asked > MAX_BACKOFF => None,
        Some(asked) => Some(asked),
        None => Some(backoff),
    }
}

/// How long to wait before retrying after the request failed; `None`: do not retry.
fn failure_wait(retry: Retry, e: &reqwest::Error, backoff: Duration) -> Option<Duration> {
    let unapplied = e.is_connect();
    let retryable = match retry {
        Retry::Never => false,
        Retry::Unapplied => unapplied,
        Retry::Idempotent | Retry::Envd => unapplied || e.is_timeout() || e.is_request(),
    };
    retryable.then_some(backoff)
}

/// Refuses a redirect (any 3xx answer), naming its status and the origin it
/// points to; redirects are never followed, so credentials stay where the
/// settings sent them.
pub(crate) fn refuse_redirect(what: &str, response: &Response) -> Result<(), E2bError> {
    let status = response.status();
    if !status.is_redirection() {
        return Ok(());
    }
    let target = response
        .headers()
        .get(LOCATION)
        .and_then(|l| l.to_str().ok())
        .map(|l| match response.url().join(l) {
            Ok(url) => url.origin().ascii_serialization(),
            Err(_) => "an address that is not a URL".to_owned(),
        })
        .unwrap_or_else(|| "no address".to_owned());
    Err(E2bError::Redirected {
        what: what.to_owned(),
        status: status.as_u16(),
        target,
    })
}

/// Reads a whole body of at most `limit` bytes. A longer one is refused as
/// soon as it is known to be longer (from its `Content-Length`, or after
/// `limit` bytes), so no more than `limit` bytes are ever held; `hint`
/// ("; ...") says what to do about it. `bound` is the request's time bound,
/// for the error when it ran out while the body was read.
pub(crate) async fn read_body(
    response: Response,
    limit: usize,
    bound: Duration,
    what: &str,
    hint: &str,
) -> Result<Vec<u8>, E2bError> {
    if response
        .content_length()
        .is_some_and(|length| length > limit as u64)
    {
        return Err(E2bError::too_large(what, limit, hint));
    }
    let (body, ended) = read_capped(response, limit.saturating_add(1)).await;
    ended.map_err(|e| network_error(what, e, bound))?;
    if body.len() > limit {
        return Err(E2bError::too_large(what, limit, hint));
    }
    Ok(body)
}

/// Parses a body with `parse`: inline when it is small, on a blocking thread
/// when it is large, so that the async workers (which serve every other
/// sandbox) never spend long on one answer.
pub(crate) async fn parse_off_workers<T: Send + 'static>(
    what: &str,
    body: Vec<u8>,
    parse: impl FnOnce(&[u8]) -> T + Send + 'static,
) -> Result<T, E2bError> {
    if body.len() <= INLINE_PARSE_BYTES {
        return Ok(parse(&body));
    }
    tokio::task::spawn_blocking(move || parse(&body))
        .await
        .map_err(|e| E2bError::Protocol {
            what: what.to_owned(),
            detail: format!("reading the answer failed: {e}"),
        })
}

/// The wait a `Retry-After` header asks for (in seconds; dates are ignored).
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    let seconds: f64 = value.parse().ok()?;
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds.min(86_400.0)))
}

/// What an error answer said: its status, its `message` (or its text), and
/// the `Retry-After` it carried.
#[derive(Clone, Debug)]
pub(crate) struct Failure {
    /// The HTTP status.
    pub status: StatusCode,
    /// The `message` of a JSON body, else the body's text (shortened).
    pub message: String,
    /// The JSON `code` when it was a string (a Connect error code).
    pub connect_code: Option<String>,
    /// Whether the body came from E2B's edge proxy (its answers name the
    /// `sandboxId`): "sandbox not found", "port is not open", 409, 429, 403.
    pub from_proxy: bool,
    /// Whether the proxy said the port is closed (the sandbox is running).
    pub port_closed: bool,
    /// How long the server asked to wait, if it did.
    pub retry_after: Option<Duration>,
}

impl Failure {
    /// Reads an error answer: at most 64 KiB of it, for at most 5 s.
    pub(crate) async fn read(response: Response) -> Self {
        let status = response.status();
        let retry_after = retry_after(response.headers());
        let body = tokio::time::timeout(ERROR_BODY_TIMEOUT, read_capped(response, MAX_ERROR_BODY))
            .await
            .map(|(body, _)| body)
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&body).trim().to_owned();
        let json: Option<serde_json::Value> = serde_json::from_str(&text).ok();
        let field = |name: &str| json.as_ref().and_then(|j| j.get(name));
        let message = field("message")
            .and_then(|m| m.as_str())
            .map(str::to_owned)
            .or_else(|| field("detail").map(|d| d.to_string()))
            .unwrap_or(text);
        let message = shorten(&message);
        let message = if message.is_empty() {
            status.canonical_reason().unwrap_or("no message").to_owned()
        } else {
            message
        };
        let from_proxy = field("sandboxId").is_some();
        Self {
            status,
            port_closed: from_proxy && status == StatusCode::BAD_GATEWAY && field("port").is_some(),
            from_proxy,
            connect_code: field("code").and_then(|c| c.as_str()).map(str::to_owned),
            message,
            retry_after,
        }
    }

    /// The error for this answer from the control plane, to request `what`.
    pub(crate) fn into_api_error(self, what: &str) -> E2bError {
        match self.status.as_u16() {
            401 => E2bError::Unauthorized(self.message),
            403 => E2bError::Forbidden(self.message),
            429 => self.rate_limited(),
            s if s >= 500 => E2bError::Server {
                status: s,
                what: what.to_owned(),
                message: self.message,
            },
            s => E2bError::Rejected {
                status: s,
                what: what.to_owned(),
                message: self.message,
            },
        }
    }

    /// The error for this answer from a sandbox (envd or the interpreter).
    pub(crate) fn into_sandbox_error(self, sandbox_id: &str, what: &str) -> E2bError {
        if self.port_closed {
            return E2bError::PortClosed(sandbox_id.to_owned());
        }
        if self.status == StatusCode::BAD_GATEWAY {
            // The edge proxy's answer for a sandbox that expired or was killed.
            return E2bError::SandboxGone(sandbox_id.to_owned());
        }
        let id = sandbox_id.to_owned();
        match (self.from_proxy, self.status.as_u16()) {
            (true, 409) => {
                return E2bError::Transitioning {
                    id,
                    message: self.message,
                };
            }
            (true, 429) => {
                return E2bError::SandboxBusy {
                    id,
                    message: self.message,
                };
            }
            (true, 403) => {
                return E2bError::TrafficRefused {
                    id,
                    message: self.message,
                };
            }
            _ => {}
        }
        if self.status == StatusCode::UNAUTHORIZED {
            return E2bError::SandboxUnauthorized {
                id: sandbox_id.to_owned(),
                message: self.message,
            };
        }
        match self.status.as_u16() {
            429 => self.rate_limited(),
            s if s >= 500 => E2bError::Server {
                status: s,
                what: what.to_owned(),
                message: self.message,
            },
            s => E2bError::Rejected {
                status: s,
                what: what.to_owned(),
                message: self.message,
            },
        }
    }

    fn rate_limited(self) -> E2bError {
        E2bError::RateLimited {
            message: self.message,
            wait: self
                .retry_after
                .map(|d| format!(", retry after {} s", d.as_secs().max(1)))
                .unwrap_or_default(),
        }
    }
}

/// Reads at most `limit` bytes of a body; the rest is dropped. Also says
/// whether the body broke off before that: the bytes read so far come back
/// either way.
pub(crate) async fn read_capped(
    mut response: Response,
    limit: usize,
) -> (Vec<u8>, Result<(), reqwest::Error>) {
    let expected = response.content_length().unwrap_or(0).min(limit as u64);
    let mut body = Vec::with_capacity(usize::try_from(expected).unwrap_or(0));
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = limit.saturating_sub(body.len());
                body.extend_from_slice(&chunk[..room.min(chunk.len())]);
                if body.len() >= limit {
                    return (body, Ok(()));
                }
            }
            Ok(None) => return (body, Ok(())),
            Err(e) => return (body, Err(e)),
        }
    }
}

/// At most 500 characters of a text, marked when cut.
fn shorten(text: &str) -> String {
    if text.chars().count() <= 500 {
        return text.to_owned();
    }
    let mut short: String = text.chars().take(500).collect();
    short.push('…');
    short
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn retry_after_is_read_in_seconds() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert(RETRY_AFTER, HeaderValue::from_static("2"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert(
            RETRY_AFTER,
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&h), None);
        h.insert(RETRY_AFTER, HeaderValue::from_static("-1"));
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn long_messages_are_shortened() {
        assert_eq!(shorten("abc"), "abc");
        let long = "x".repeat(600);
        assert_eq!(shorten(&long).chars().count(), 501);
    }
}
