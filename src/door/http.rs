//! The `http_request` tool: one HTTP request for a guest, to a destination
//! the allowlist names and an address the [`AddressPolicy`] allows. No proxy
//! from the environment, no credentials or cookies of the host, no automatic
//! redirects (each hop is checked again, a bounded number of them), headers
//! checked so none can smuggle another, and the response body capped.

use std::net::IpAddr;
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use reqwest::header::{self, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, StatusCode, Url};
use serde_json::{Map, Value, json};

use super::allowlist::{AllowList, origin};
use super::frames::{bytes_value, value_bytes};
use super::ranges::AddressPolicy;
use super::resolve::{AddressRefused, CheckedResolver, Lookup, SystemLookup};
use super::{DoorHandler, FailureKind, RequestLog, ToolFailure, ToolValue};
use crate::sandbox::RequestRecord;

/// The tool's name, as guests call it.
pub const TOOL: &str = "http_request";

/// Headers a guest may not set: the transport's own, whose value the host
/// decides, and the proxy's.
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "expect",
    "proxy-authorization",
    "proxy-authenticate",
    "proxy-connection",
];
/// Headers dropped when a redirect leaves the origin.
const ORIGIN_HEADERS: &[&str] = &["authorization", "cookie"];

/// Settings of guests' HTTP.
#[derive(Clone, Debug)]
pub struct HttpSettings {
    /// The destinations allowed (`SANDBOX_ALLOW_HOSTS`).
    pub allow_hosts: AllowList,
    /// The addresses allowed (`SANDBOX_ALLOW_NETWORKS` opens special ranges).
    pub addresses: Arc<AddressPolicy>,
    /// Most bytes of one response body (`SANDBOX_GUEST_HTTP_MAX_BYTES`).
    pub max_bytes: u64,
    /// Most redirects one request follows.
    pub max_redirects: u32,
    /// Longest wait for a connection.
    pub connect_timeout: Duration,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            allow_hosts: AllowList::default(),
            addresses: Arc::default(),
            max_bytes: 16 << 20,
            max_redirects: 5,
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// The server's HTTP for guests: one client, shared by every sandbox.
pub struct HttpDoor {
    client: reqwest::Client,
    settings: HttpSettings,
}

/// Why the HTTP client could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("cannot set up HTTP for guests: {0}")]
pub struct HttpSetupError(String);

impl HttpDoor {
    /// The client, resolving with the system's resolver.
    pub fn new(settings: HttpSettings) -> Result<Self, HttpSetupError> {
        Self::with_lookup(settings, Arc::new(SystemLookup))
    }

    /// The client, resolving names through `lookup`.
    pub fn with_lookup(
        settings: HttpSettings,
        lookup: Arc<dyn Lookup>,
    ) -> Result<Self, HttpSetupError> {
        static PROVIDER: Once = Once::new();
        PROVIDER.call_once(|| {
            let _ = rustls::crypto::ring::default_provider().install_default();
        });
        let resolver = CheckedResolver::new(settings.addresses.clone(), lookup);
        let client = reqwest::Client::builder()
            .user_agent(concat!(
                "mcp-code-sandbox-guest/",
                env!("CARGO_PKG_VERSION")
            ))
            .no_proxy()
            .no_gzip()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(settings.connect_timeout)
            .dns_resolver(Arc::new(resolver))
            .build()
            .map_err(|e| HttpSetupError(e.to_string()))?;
        Ok(Self { client, settings })
    }

    /// The server's own allowlist.
    pub fn allow_hosts(&self) -> &AllowList {
        &self.settings.allow_hosts
    }

    /// The handler for a sandbox allowed `hosts` (the server's list, or a
    /// narrowing of it).
    pub fn handler(self: &Arc<Self>, hosts: AllowList) -> Arc<dyn DoorHandler> {
        Arc::new(HttpTool {
            door: self.clone(),
            hosts,
        })
    }
}

/// The door handler of one sandbox: `http_request` to its allowed hosts.
pub struct HttpTool {
    door: Arc<HttpDoor>,
    hosts: AllowList,
}

/// One request as the guest asked for it.
struct Asked {
    method: Method,
    url: Url,
    headers: HeaderMap,
    body: Option<Vec<u8>>,
    /// The body goes back raw after the answer's JSON, not as `$bytes`.
    raw_body: bool,
    /// Whether the host follows redirects (else a 3xx is the answer, for a
    /// guest library that follows them itself).
    follow_redirects: bool,
    /// The guest's own timeout for the request, when it set one (the
    /// execution's time left bounds it anyway).
    timeout: Option<Duration>,
}

#[async_trait]
impl DoorHandler for HttpTool {
    fn offers(&self, tool: &str) -> bool {
        tool == TOOL
    }

    async fn tools(&self, _bound: Duration) -> Vec<Value> {
        vec![json!({
            "name": TOOL,
            "description": format!(
                "Make one HTTP request from the host to an allowed destination ({}); redirects are followed and checked. urllib.request.urlopen and pandas.read_csv(url) use it already.",
                self.hosts
            ),
            "inputSchema": {
                "type": "object",
                "properties": {
                    "url": {"type": "string", "description": "http:// or https:// URL"},
                    "method": {"type": "string", "description": "GET by default"},
                    "headers": {"type": "array", "items": {"type": "array", "items": {"type": "string"}}, "description": "[name, value] pairs"},
                    "body": {"type": "string", "contentEncoding": "base64", "description": "the request body"},
                    "raw_body": {"type": "boolean", "description": "send the response body raw after the answer's JSON and a newline (for the sandbox's HTTP clients)"},
                    "follow_redirects": {"type": "boolean", "description": "follow redirects on the host (default true); false answers a redirect with its own 3xx response, for a client that follows redirects itself"},
                    "timeout_seconds": {"type": "number", "description": "give up after this many seconds (the execution's time left bounds it anyway)"}
                },
                "required": ["url"]
            },
            "annotations": {"openWorldHint": true}
        })]
    }

    async fn call(
        &self,
        tool: &str,
        args: Map<String, Value>,
        bound: Duration,
        log: &RequestLog,
    ) -> Result<ToolValue, ToolFailure> {
        if tool != TOOL {
            return Err(ToolFailure::new(
                FailureKind::UnknownTool,
                format!("no tool named {tool:?}; this sandbox offers: {TOOL}"),
            ));
        }
        let asked = read_args(&args)?;
        let bound = asked.timeout.map_or(bound, |asked| asked.min(bound));
        self.fetch(asked, Instant::now() + bound, log).await
    }
}

impl HttpTool {
    /// Sends `asked`, following redirects, each hop checked and noted.
    async fn fetch(
        &self,
        mut asked: Asked,
        until: Instant,
        log: &RequestLog,
    ) -> Result<ToolValue, ToolFailure> {
        let settings = &self.door.settings;
        for hop in 0..=settings.max_redirects {
            let method = asked.method.to_string();
            if let Err(rule) = self.check_destination(&asked.url) {
                let why = if hop == 0 {
                    rule
                } else {
                    format!("a redirect was refused: {rule}")
                };
                log.note(record(&method, &asked.url, None, 0, Some(why.clone())));
                return Err(ToolFailure::new(FailureKind::Denied, why));
            }
            let left = until.saturating_duration_since(Instant::now());
            let mut request = self
                .door
                .client
                .request(asked.method.clone(), asked.url.clone())
                .headers(asked.headers.clone())
                .timeout(left);
            if let Some(body) = &asked.body {
                request = request.body(body.clone());
            }
            log.sending(record(&method, &asked.url, None, 0, None));
            let response = match request.send().await {
                Ok(response) => response,
                Err(e) => return Err(send_failed(&method, &asked.url, &e, log)),
            };
            let status = response.status();
            if let Some(next) =
                redirect_target(&asked.url, &response).filter(|_| asked.follow_redirects)
            {
                log.note(record(&method, &asked.url, Some(status), 0, None));
                if hop == settings.max_redirects {
                    break;
                }
                follow(&mut asked, next, status);
                continue;
            }
            return self
                .answer(&method, &asked.url, response, asked.raw_body, log)
                .await;
        }
        Err(ToolFailure::new(
            FailureKind::ToolError,
            format!("more than {} redirects", settings.max_redirects),
        ))
    }

    /// The allowlist, then (for an address written in the URL) the address
    /// policy; a name's addresses are checked by the resolver.
    fn check_destination(&self, url: &Url) -> Result<(), String> {
        self.hosts.check(url)?;
        let ip = match url.host() {
            Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip),
            Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip),
            _ => return Ok(()),
        };
        self.door.settings.addresses.check(ip).map_err(|range| {
            format!(
                "{} is in {range}, which a sandbox may not reach; SANDBOX_ALLOW_NETWORKS can allow a range",
                ip
            )
        })
    }

    /// Reads the body within the cap and builds the tool's value.
    async fn answer(
        &self,
        method: &str,
        url: &Url,
        mut response: reqwest::Response,
        raw_body: bool,
        log: &RequestLog,
    ) -> Result<ToolValue, ToolFailure> {
        let status = response.status();
        let headers = answer_headers(method, &response);
        let read = self.read_body(method, url, &mut response, log).await?;
        if let (Some(why), false) = (&read.broken, raw_body) {
            return Err(ToolFailure::new(FailureKind::BrokenAnswer, why.clone()));
        }
        let mut value = json!({
            "status": status.as_u16(),
            "reason": status.canonical_reason().unwrap_or(""),
            "url": url.as_str(),
            "headers": headers,
        });
        if raw_body {
            // The sandbox's clients read what came, and fail where a socket's
            // reader would.
            value["body_bytes"] = json!(read.body.len());
            if let Some(why) = read.broken {
                value["broken"] = json!(why);
            }
            return Ok(ToolValue {
                value,
                raw: Some(read.body),
            });
        }
        value["body"] = bytes_value(&read.body);
        Ok(value.into())
    }

    /// Reads `response`'s body within the cap, and notes the request. An
    /// answer that breaks off is what came, with why.
    async fn read_body(
        &self,
        method: &str,
        url: &Url,
        response: &mut reqwest::Response,
        log: &RequestLog,
    ) -> Result<ReadBody, ToolFailure> {
        let max = self.door.settings.max_bytes;
        let status = Some(response.status());
        // Sized once from Content-Length (within the cap, and at most 8 MiB
        // before the bytes arrive), not grown chunk by chunk.
        let expected = response.content_length().unwrap_or(0).min(max).min(8 << 20);
        let mut body = Vec::with_capacity(usize::try_from(expected).unwrap_or(0));
        let broken = loop {
            match response.chunk().await {
                Ok(Some(chunk)) if body.len() as u64 + chunk.len() as u64 > max => {
                    let why = format!(
                        "the response of {} is over {max} bytes (SANDBOX_GUEST_HTTP_MAX_BYTES)",
                        origin(url)
                    );
                    let refused = Some(why.clone());
                    log.note(record(method, url, status, body.len() as u64, refused));
                    return Err(ToolFailure::new(FailureKind::TooLarge, why));
                }
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                Ok(None) => break None,
                Err(e) if is_timeout(&e) => {
                    log.note(record(method, url, status, body.len() as u64, None));
                    return Err(ToolFailure::new(
                        FailureKind::Timeout,
                        format!(
                            "the response of {} did not end within the time left (the request's own timeout, the execution's timeout, or its door time: SANDBOX_DOOR_MAX_SECONDS)",
                            origin(url)
                        ),
                    ));
                }
                Err(e) => {
                    break Some(format!(
                        "the answer of {} broke off before its body ended ({} bytes came): {}",
                        origin(url),
                        body.len(),
                        with_causes(&e)
                    ));
                }
            }
        };
        log.note(RequestRecord {
            broken: broken.is_some(),
            ..record(method, url, status, body.len() as u64, None)
        });
        Ok(ReadBody { body, broken })
    }
}

/// A response's body as it came: whole, or broken off (`broken` says why).
struct ReadBody {
    body: Vec<u8>,
    broken: Option<String>,
}

/// A response's headers as the tool gives them, as (name, latin-1 text)
/// pairs. A length sent beside a transfer coding is not the body's (HTTP/1.1
/// reads the coding and ignores it): the body handed over is whole, so it
/// would only contradict it. (A HEAD's answer has no body.)
fn answer_headers(method: &str, response: &reqwest::Response) -> Vec<Value> {
    let coded = response.headers().contains_key(header::TRANSFER_ENCODING) && method != "HEAD";
    response
        .headers()
        .iter()
        .filter(|(k, _)| !(coded && *k == header::CONTENT_LENGTH))
        .map(|(k, v)| json!([k.as_str(), latin1_text(v.as_bytes())]))
        .collect()
}

/// The arguments, checked: a method token, an http(s) URL, headers that are
/// valid and not reserved, and a body.
fn read_args(args: &Map<String, Value>) -> Result<Asked, ToolFailure> {
    let invalid = |m: String| ToolFailure::new(FailureKind::InvalidArguments, m);
    let denied = |m: String| ToolFailure::new(FailureKind::Denied, m);
    let url = args
        .get("url")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(format!("{TOOL}: url must be a string")))?;
    let url = Url::parse(url).map_err(|e| invalid(format!("{TOOL}: {url:?} is not a URL: {e}")))?;
    let method = match args.get("method") {
        None | Some(Value::Null) => Method::GET,
        Some(Value::String(m)) => Method::from_bytes(m.to_ascii_uppercase().as_bytes())
            .map_err(|_| invalid(format!("{TOOL}: {m:?} is not an HTTP method")))?,
        Some(_) => return Err(invalid(format!("{TOOL}: method must be a string"))),
    };
    if method == Method::CONNECT {
        return Err(denied(format!(
            "{TOOL}: CONNECT is not allowed through the door"
        )));
    }
    let mut headers = HeaderMap::new();
    let pairs = match args.get("headers") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Array(pairs)) => pairs.as_slice(),
        Some(_) => {
            return Err(invalid(format!(
                "{TOOL}: headers must be [name, value] pairs"
            )));
        }
    };
    for pair in pairs {
        let (Some(name), Some(value)) = (
            pair.get(0).and_then(Value::as_str),
            pair.get(1).and_then(Value::as_str),
        ) else {
            return Err(invalid(format!(
                "{TOOL}: headers must be [name, value] pairs"
            )));
        };
        let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            denied(format!(
                "header injection refused: {name:?} is not a header name"
            ))
        })?;
        if RESERVED_HEADERS.contains(&header.as_str()) {
            return Err(denied(format!(
                "the header {name:?} is set by the host, not by the guest"
            )));
        }
        let value = header_value(value).ok_or_else(|| {
            denied(format!(
                "header injection refused: the value of {name:?} holds a line break or another ASCII control character"
            ))
        })?;
        headers.append(header, value);
    }
    let body = match args.get("body") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(text.as_bytes().to_vec()),
        Some(value) => Some(
            value_bytes(value)
                .ok_or_else(|| invalid(format!("{TOOL}: body must be bytes or a string")))?,
        ),
    };
    let raw_body = args.get("raw_body").and_then(Value::as_bool) == Some(true);
    let follow_redirects = args.get("follow_redirects").and_then(Value::as_bool) != Some(false);
    let timeout = match args.get("timeout_seconds") {
        None | Some(Value::Null) => None,
        Some(seconds) => Some(
            seconds
                .as_f64()
                .filter(|s| s.is_finite() && *s > 0.0)
                .map(|s| Duration::from_secs_f64(s.min(86_400.0)))
                .ok_or_else(|| {
                    invalid(format!(
                        "{TOOL}: timeout_seconds must be a positive number of seconds"
                    ))
                })?,
        ),
    };
    Ok(Asked {
        method,
        url,
        headers,
        body,
        raw_body,
        follow_redirects,
        timeout,
    })
}

/// Header bytes as text, one character per byte (latin-1): what http.client
/// reads a header as, and what gives the guest back the bytes unchanged.
fn latin1_text(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| char::from(b)).collect()
}

/// A header value as the guest's clients write it: text whose characters all
/// lie below U+0100 is latin-1, the bytes HTTP/1.1 reads header text as (so
/// http.client's bytes go out unchanged); other text goes as UTF-8. None when
/// it holds a line break or another ASCII control character (bytes 0x80-0xFF
/// are HTTP's obs-text, which a header value may hold).
fn header_value(text: &str) -> Option<HeaderValue> {
    let latin1: Option<Vec<u8>> = text
        .chars()
        .map(|c| u8::try_from(u32::from(c)).ok())
        .collect();
    let bytes = latin1.unwrap_or_else(|| text.as_bytes().to_vec());
    HeaderValue::from_bytes(&bytes).ok()
}

/// Where a redirect response points, resolved against `url`.
fn redirect_target(url: &Url, response: &reqwest::Response) -> Option<Url> {
    let status = response.status();
    if !matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308) {
        return None;
    }
    let location = response.headers().get(reqwest::header::LOCATION)?;
    url.join(location.to_str().ok()?).ok()
}

/// The next hop's request: as browsers do, 303 (and 301/302 after a POST)
/// become a GET without a body; headers tied to the origin stay behind when
/// it changes.
fn follow(asked: &mut Asked, next: Url, status: StatusCode) {
    let to_get = status == StatusCode::SEE_OTHER
        || (matches!(status.as_u16(), 301 | 302) && asked.method == Method::POST);
    if to_get {
        if asked.method != Method::HEAD {
            asked.method = Method::GET;
        }
        asked.body = None;
        asked.headers.remove(reqwest::header::CONTENT_TYPE);
    }
    if origin(&next) != origin(&asked.url) {
        for name in ORIGIN_HEADERS {
            asked.headers.remove(*name);
        }
    }
    asked.url = next;
}

/// A send that failed: refused by the resolver (a rule), or a network error.
fn send_failed(method: &str, url: &Url, e: &reqwest::Error, log: &RequestLog) -> ToolFailure {
    if let Some(refused) = find_refusal(e) {
        let why = refused.to_string();
        log.note(record(method, url, None, 0, Some(why.clone())));
        return ToolFailure::new(FailureKind::Denied, why);
    }
    log.note(record(method, url, None, 0, None));
    let text = with_causes(e);
    let malformed = causes(e).skip(1).any(|inner| {
        inner
            .downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_parse)
    });
    let kind = if e.is_timeout() {
        FailureKind::Timeout
    } else {
        FailureKind::ToolError
    };
    let message = if malformed {
        // The server was reached: it is its answer that cannot be read.
        format!("the answer of {} is not valid HTTP: {text}", origin(url))
    } else {
        format!("could not reach {}: {text}", origin(url))
    };
    ToolFailure::new(kind, message)
}

/// `e` and the errors under it, `e` first.
fn causes(e: &reqwest::Error) -> impl Iterator<Item = &(dyn std::error::Error + 'static)> {
    std::iter::successors(Some(e as &(dyn std::error::Error + 'static)), |inner| {
        inner.source()
    })
}

/// `e`'s message followed by those of the errors under it.
fn with_causes(e: &reqwest::Error) -> String {
    causes(e)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ")
}

/// Whether `e`, or an error under it, is a timeout.
fn is_timeout(e: &reqwest::Error) -> bool {
    causes(e).any(|inner| {
        inner
            .downcast_ref::<reqwest::Error>()
            .is_some_and(reqwest::Error::is_timeout)
            || inner
                .downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
    })
}

fn find_refusal(e: &reqwest::Error) -> Option<&AddressRefused> {
    causes(e)
        .skip(1)
        .find_map(|inner| inner.downcast_ref::<AddressRefused>())
}

fn record(
    method: &str,
    url: &Url,
    status: Option<StatusCode>,
    bytes: u64,
    refused: Option<String>,
) -> RequestRecord {
    RequestRecord {
        method: method.to_owned(),
        host: origin(url),
        status: status.map(|s| s.as_u16()),
        bytes,
        refused,
        cut: false,
        broken: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_that_could_smuggle_another_are_refused() {
        let base = |headers: Value| {
            let mut args = Map::new();
            args.insert("url".into(), json!("http://a.test/"));
            args.insert("headers".into(), headers);
            read_args(&args)
        };
        assert!(base(json!([["X-Ok", "fine\tvalue"]])).is_ok());
        for bad in [
            json!([["X-A", "v\r\nX-Evil: 1"]]),
            json!([["X-A", "v\nX-Evil: 1"]]),
            json!([["X-A\r\nX-Evil", "1"]]),
            json!([["X A", "1"]]),
            json!([["Host", "internal.test"]]),
            json!([["Transfer-Encoding", "chunked"]]),
            json!([["Proxy-Authorization", "Basic x"]]),
        ] {
            let Err(failure) = base(bad.clone()) else {
                panic!("{bad} must be refused")
            };
            assert_eq!(failure.kind, FailureKind::Denied, "{bad}");
        }
    }

    #[test]
    fn header_text_goes_out_as_the_bytes_http_reads_it_as() {
        // http.client writes a str header as latin-1: the same bytes go out.
        let latin1 = header_value("caf\u{e9}").unwrap();
        assert_eq!(latin1.as_bytes(), b"caf\xe9");
        // Text past latin-1 goes as UTF-8.
        assert_eq!(
            header_value("\u{20ac}5").unwrap().as_bytes(),
            "\u{20ac}5".as_bytes()
        );
        // An answer's header bytes (any a header may hold) come back as the
        // same bytes.
        let bytes: Vec<u8> = (0x20..0x7f).chain(0x80..=0xff).collect();
        let text = latin1_text(&bytes);
        assert_eq!(header_value(&text).unwrap().as_bytes(), &bytes[..]);
        // Control characters stay refused, whatever else the text holds.
        for bad in ["caf\u{e9}\r\nX-Evil: 1", "\u{20ac}\n", "a\u{0}b", "a\u{7f}"] {
            assert!(header_value(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn a_redirect_off_the_origin_drops_credentials_and_a_303_becomes_a_get() {
        let mut asked = Asked {
            method: Method::POST,
            url: Url::parse("https://a.test/form").unwrap(),
            headers: HeaderMap::new(),
            body: Some(b"x=1".to_vec()),
            raw_body: false,
            follow_redirects: true,
            timeout: None,
        };
        asked
            .headers
            .insert("authorization", HeaderValue::from_static("Bearer t"));
        asked
            .headers
            .insert("x-trace", HeaderValue::from_static("1"));
        follow(
            &mut asked,
            Url::parse("https://b.test/done").unwrap(),
            StatusCode::SEE_OTHER,
        );
        assert_eq!(asked.method, Method::GET);
        assert!(asked.body.is_none());
        assert!(asked.headers.get("authorization").is_none());
        assert!(asked.headers.get("x-trace").is_some());
    }
}
