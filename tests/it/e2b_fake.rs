//! A local fake of E2B, on loopback, that the server under test reaches
//! through `E2B_API_URL` and `E2B_SANDBOX_URL` exactly as it would reach E2B.
//!
//! It follows the wire format in the project's E2B protocol notes: the
//! control plane (`X-API-Key`, `POST /sandboxes` → 201, timeouts, kill, 401,
//! 404, 429 with `Retry-After`, 5xx), sandbox traffic routed by the
//! `E2b-Sandbox-Id` / `E2b-Sandbox-Port` headers (502 once a sandbox is gone),
//! envd's `/files` and `filesystem.Filesystem` RPCs over a temporary directory
//! per sandbox (standing in for the VM's `/`, home `/home/user`), and the code
//! interpreter's `/execute` NDJSON stream, backed by one real `python3` per
//! sandbox (`fake/kernel.py`) so that state persists. Every request is
//! recorded for assertions; faults can be injected.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use rand::Rng;
use serde_json::{Value, json};
use tokio::io::{BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

mod envd;
mod faults;
mod kernel;

use envd::{filesystem, read_file, write_file};
use faults::misbehave;
use kernel::execute;

const KERNEL: &str = include_str!("fake/kernel.py");
const PIP_INIT: &str = include_str!("fake/pip/__init__.py");
const PIP_MAIN: &str = include_str!("fake/pip/__main__.py");
const TEMPLATE: &str = "code-interpreter-v1";
/// The longest life of a sandbox on E2B's Hobby plan.
const MAX_LIFETIME: Duration = Duration::from_secs(3600);
const ENVD_PORT: &str = "49983";
const JUPYTER_PORT: &str = "49999";
/// Silence after which the fake's `/execute` sends a keepalive line (the real
/// bridge waits 5 s; shorter here so that a dropped client is noticed fast).
const KEEPALIVE: Duration = Duration::from_millis(200);
/// Pause between the first lines of a stream, so the client reads them in pieces.
const LINE_DELAY: Duration = Duration::from_millis(5);
/// How many lines of a stream are delayed (long outputs then flow at full speed).
const DELAYED_LINES: usize = 20;

/// One request the fake received.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// Which listener: "api" or "sandbox".
    pub service: &'static str,
    /// The method.
    pub method: String,
    /// The path.
    pub path: String,
    /// The raw query.
    pub query: String,
    /// Headers, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Recorded {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// An answer to inject in place of the real one.
#[derive(Clone, Debug, Default)]
pub struct Fault {
    /// Only requests with this method (any when `None`).
    pub method: Option<Method>,
    /// Only requests whose path starts with this.
    pub path_prefix: String,
    /// The status to answer.
    pub status: u16,
    /// A `Retry-After` header, in seconds.
    pub retry_after: Option<u64>,
    /// How many requests get it.
    pub times: usize,
    /// How the answer misbehaves.
    pub act: Act,
}

/// How an injected answer misbehaves.
#[derive(Clone, Debug, Default)]
pub enum Act {
    /// A JSON error body with the fault's status.
    #[default]
    Error,
    /// A redirect (the fault's status, 3xx) to this URL.
    Redirect(String),
    /// Silence this long, then the real answer.
    Stall(Duration),
    /// The fault's status at once, then a body of one byte a second, forever.
    Trickle,
    /// The fault's status with a JSON body of about this many bytes.
    Huge(usize),
    /// A `ListDir` answer (200) with this many entries.
    Listing(usize),
    /// The real answer to a create, with these fields replaced.
    Patch(Value),
    /// An answer of E2B's edge proxy about the sandbox (JSON naming its
    /// `sandboxId`), with the fault's status and this message.
    Proxy(&'static str),
}

struct Kernel {
    _child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

struct FakeSandbox {
    token: Option<String>,
    envd_version: String,
    metadata: Value,
    started: SystemTime,
    end_at: SystemTime,
    dead: bool,
    root: PathBuf,
    kernel: Arc<tokio::sync::Mutex<Option<Kernel>>>,
    pid: Arc<AtomicU32>,
}

impl FakeSandbox {
    fn alive(&self) -> bool {
        !self.dead && SystemTime::now() < self.end_at
    }

    fn stop_kernel(&self) {
        let pid = self.pid.swap(0, Ordering::SeqCst);
        if pid != 0 {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
}

#[derive(Default)]
struct FakeState {
    sandboxes: HashMap<String, FakeSandbox>,
    requests: Vec<Recorded>,
    faults: Vec<Fault>,
    max_concurrent: Option<usize>,
    /// The plan's longest life of a sandbox (E2B's Hobby plan: 1 h).
    max_lifetime: Option<Duration>,
    disconnects: usize,
}

struct Shared {
    key: String,
    dir: tempfile::TempDir,
    state: Mutex<FakeState>,
}

impl Shared {
    fn state(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The running fake.
pub struct FakeE2b {
    /// The control plane's base URL (`E2B_API_URL`).
    pub api_url: String,
    /// The sandboxes' base URL (`E2B_SANDBOX_URL`).
    pub sandbox_url: String,
    /// Another origin, which only records what reaches it: where hostile
    /// redirects point.
    pub elsewhere_url: String,
    shared: Arc<Shared>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for FakeE2b {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        for sandbox in self.shared.state().sandboxes.values() {
            sandbox.stop_kernel();
        }
    }
}

impl FakeE2b {
    /// Starts the fake on two loopback ports.
    pub async fn start() -> Self {
        let key = format!("e2b_{:032x}", rand::rng().random::<u128>());
        let dir = tempfile::tempdir().unwrap();
        let site = dir.path().join("site");
        std::fs::create_dir_all(site.join("pip")).unwrap();
        std::fs::write(site.join("pip/__init__.py"), PIP_INIT).unwrap();
        std::fs::write(site.join("pip/__main__.py"), PIP_MAIN).unwrap();
        std::fs::write(dir.path().join("kernel.py"), KERNEL).unwrap();
        let shared = Arc::new(Shared {
            key,
            dir,
            state: Mutex::new(FakeState::default()),
        });
        let mut tasks = Vec::new();
        let mut urls = Vec::new();
        for service in ["api", "sandbox", "elsewhere"] {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            urls.push(format!("http://{}", listener.local_addr().unwrap()));
            let router = match service {
                "api" => Router::new().fallback(api).with_state(shared.clone()),
                "sandbox" => Router::new().fallback(sandbox).with_state(shared.clone()),
                _ => Router::new().fallback(elsewhere).with_state(shared.clone()),
            };
            tasks.push(tokio::spawn(async move {
                let _ = axum::serve(listener, router).await;
            }));
        }
        Self {
            elsewhere_url: urls.pop().unwrap(),
            sandbox_url: urls.pop().unwrap(),
            api_url: urls.pop().unwrap(),
            shared,
            tasks,
        }
    }

    /// The API key the fake accepts.
    pub fn key(&self) -> &str {
        &self.shared.key
    }

    /// The environment that points the server at this fake, E2B as default.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("INTERPRETER_TYPE".into(), "e2b".into()),
            ("E2B_API_KEY".into(), self.key().into()),
            ("E2B_API_URL".into(), self.api_url.clone()),
            ("E2B_SANDBOX_URL".into(), self.sandbox_url.clone()),
        ]
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.state().requests.clone()
    }

    /// Ids of the sandboxes alive now.
    pub fn live(&self) -> Vec<String> {
        let state = self.shared.state();
        let mut ids: Vec<String> = state
            .sandboxes
            .iter()
            .filter(|(_, s)| s.alive())
            .map(|(id, _)| id.clone())
            .collect();
        ids.sort();
        ids
    }

    /// How many sandboxes were ever created.
    pub fn created(&self) -> usize {
        self.shared.state().sandboxes.len()
    }

    /// The metadata a sandbox was created with.
    pub fn metadata(&self, id: &str) -> Value {
        self.shared.state().sandboxes[id].metadata.clone()
    }

    /// How many `/execute` streams the client closed before their end.
    pub fn disconnects(&self) -> usize {
        self.shared.state().disconnects
    }

    /// Answers the next matching requests with a fault.
    pub fn fail(&self, fault: Fault) {
        self.shared.state().faults.push(fault);
    }

    /// Refuses creating sandboxes past `n` alive at once (429).
    pub fn set_max_concurrent(&self, n: usize) {
        self.shared.state().max_concurrent = Some(n);
    }

    /// Sets the plan's longest life of a sandbox (1 h when not set): creates
    /// asking for more are refused with 400, and refreshes are capped at it.
    pub fn set_max_lifetime(&self, max: Duration) {
        self.shared.state().max_lifetime = Some(max);
    }

    /// Makes a sandbox expire now, as E2B does when its lifetime runs out.
    pub fn expire(&self, id: &str) {
        let mut state = self.shared.state();
        if let Some(s) = state.sandboxes.get_mut(id) {
            s.end_at = SystemTime::now();
            s.stop_kernel();
        }
    }
}

fn json_response(status: StatusCode, body: Value) -> Response {
    (
        status,
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn api_error(status: StatusCode, message: &str) -> Response {
    json_response(status, json!({"code": status.as_u16(), "message": message}))
}

/// Reads the whole request, records it, and picks the injected fault that
/// applies to it, if any.
async fn take(
    shared: &Shared,
    service: &'static str,
    request: Request,
) -> (axum::http::request::Parts, Bytes, Option<Fault>) {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let recorded = Recorded {
        service,
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().unwrap_or_default().to_owned(),
        headers: parts
            .headers
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_ascii_lowercase(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: body.to_vec(),
    };
    let mut state = shared.state();
    state.requests.push(recorded);
    let path = parts.uri.path();
    let fault = state.faults.iter_mut().find(|f| {
        service != "elsewhere"
            && f.times > 0
            && path.starts_with(&f.path_prefix)
            && f.method.as_ref().is_none_or(|m| *m == parts.method)
    });
    let injected = fault.map(|f| {
        f.times -= 1;
        f.clone()
    });
    (parts, body, injected)
}

fn random_id(len: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..len)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_nanos(t).to_string()
}

/// The control plane.
async fn api(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body, injected) = take(&shared, "api", request).await;
    if parts.headers.get("x-api-key").and_then(|v| v.to_str().ok()) != Some(shared.key.as_str()) {
        return api_error(StatusCode::UNAUTHORIZED, "Invalid API key");
    }
    if let Some(fault) = &injected
        && let Some(response) = misbehave(fault, "").await
    {
        return response;
    }
    let patch = injected.and_then(|f| match f.act {
        Act::Patch(patch) => Some(patch),
        _ => None,
    });
    let segments: Vec<&str> = parts.uri.path().trim_matches('/').split('/').collect();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    match (parts.method.clone(), segments.as_slice()) {
        (Method::POST, ["sandboxes"]) => create(&shared, &body, patch),
        (Method::DELETE, ["sandboxes", id]) => {
            let mut state = shared.state();
            match state.sandboxes.get_mut(*id) {
                Some(s) if s.alive() => {
                    s.dead = true;
                    s.stop_kernel();
                    StatusCode::NO_CONTENT.into_response()
                }
                _ => api_error(
                    StatusCode::NOT_FOUND,
                    &format!("sandbox \"{id}\" not found"),
                ),
            }
        }
        (Method::POST, ["sandboxes", id, "timeout"]) => {
            let Some(timeout) = body["timeout"].as_u64().filter(|t| *t > 0) else {
                return api_error(StatusCode::BAD_REQUEST, "validation error: timeout");
            };
            let mut state = shared.state();
            let max = state.max_lifetime.unwrap_or(MAX_LIFETIME);
            match state.sandboxes.get_mut(*id) {
                Some(s) if s.alive() => {
                    // E2B caps the end at start + the plan's maximum, and
                    // refuses once the sandbox is at that cap.
                    let cap = s.started + max;
                    if s.end_at >= cap {
                        return api_error(StatusCode::BAD_REQUEST, "Max instance length exceeded");
                    }
                    s.end_at = (SystemTime::now() + Duration::from_secs(timeout)).min(cap);
                    StatusCode::NO_CONTENT.into_response()
                }
                _ => api_error(
                    StatusCode::NOT_FOUND,
                    &format!("Sandbox \"{id}\" doesn't exist or you don't have access to it"),
                ),
            }
        }
        (Method::GET, ["sandboxes", id]) => {
            let state = shared.state();
            match state.sandboxes.get(*id) {
                Some(s) if s.alive() => json_response(
                    StatusCode::OK,
                    json!({
                        "templateID": "fake0template0id", "alias": TEMPLATE, "sandboxID": id,
                        "clientID": "6532622b", "startedAt": rfc3339(s.started),
                        "endAt": rfc3339(s.end_at), "cpuCount": 2, "memoryMB": 2048,
                        "diskSizeMB": 10240, "state": "running", "envdVersion": "0.6.13",
                        "metadata": s.metadata,
                    }),
                ),
                _ => api_error(
                    StatusCode::NOT_FOUND,
                    &format!("Sandbox \"{id}\" doesn't exist or you don't have access to it"),
                ),
            }
        }
        _ => api_error(StatusCode::NOT_FOUND, "no such route in the fake"),
    }
}

fn create(shared: &Shared, body: &Value, patch: Option<Value>) -> Response {
    let template = body["templateID"].as_str().unwrap_or_default();
    if template != TEMPLATE {
        return api_error(
            StatusCode::NOT_FOUND,
            &format!("template '{template}' not found"),
        );
    }
    let Some(timeout) = body["timeout"].as_i64() else {
        return api_error(StatusCode::BAD_REQUEST, "validation error: timeout");
    };
    let mut state = shared.state();
    let max = state.max_lifetime.unwrap_or(MAX_LIFETIME);
    if timeout <= 0 || timeout as u64 > max.as_secs() {
        return api_error(
            StatusCode::BAD_REQUEST,
            &format!(
                "Timeout cannot be greater than {} hours",
                max.as_secs() / 3600
            ),
        );
    }
    let alive = state.sandboxes.values().filter(|s| s.alive()).count();
    if state.max_concurrent.is_some_and(|max| alive >= max) {
        return api_error(
            StatusCode::TOO_MANY_REQUESTS,
            &format!("you have reached the maximum number of concurrent E2B sandboxes ({alive})"),
        );
    }
    let id = format!("i{}", random_id(20));
    let root = shared.dir.path().join("vms").join(&id);
    std::fs::create_dir_all(root.join("home/user")).unwrap();
    let token = (body["secure"] == Value::Bool(true)).then(|| random_id(32));
    let now = SystemTime::now();
    state.sandboxes.insert(
        id.clone(),
        FakeSandbox {
            token: token.clone(),
            envd_version: "0.6.13".into(),
            metadata: body["metadata"].clone(),
            started: now,
            end_at: now + Duration::from_secs(timeout as u64),
            dead: false,
            root,
            kernel: Arc::default(),
            pid: Arc::default(),
        },
    );
    let mut answer = json!({
        "templateID": "fake0template0id", "alias": TEMPLATE, "sandboxID": id,
        "clientID": "6532622b", "envdVersion": "0.6.13",
        "trafficAccessToken": null, "domain": null,
    });
    if let Some(token) = token {
        answer["envdAccessToken"] = json!(token);
    }
    if let Some(Value::Object(fields)) = patch {
        for (k, v) in fields {
            answer[k] = v;
        }
    }
    if let (Some(s), Some(version)) = (state.sandboxes.get_mut(&id), answer["envdVersion"].as_str())
    {
        s.envd_version = version.to_owned();
    }
    json_response(StatusCode::CREATED, answer)
}

/// Another origin: records the request and answers `{}`.
async fn elsewhere(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let _ = take(&shared, "elsewhere", request).await;
    json_response(StatusCode::OK, json!({}))
}

/// Traffic to a sandbox (envd and the code interpreter), routed by headers.
async fn sandbox(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body, injected) = take(&shared, "sandbox", request).await;
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (id, port) = match (header("e2b-sandbox-id"), header("e2b-sandbox-port")) {
        (Some(id), Some(port)) => (id, port),
        _ => {
            // A per-port host name: <port>-<id>.<domain>.
            let host = header("host").unwrap_or_default();
            let label = host.split('.').next().unwrap_or_default();
            match label.split_once('-') {
                Some((port, id)) => (id.to_owned(), port.to_owned()),
                None => (String::new(), String::new()),
            }
        }
    };
    let (root, token, kernel, pid, envd_version) = {
        let mut state = shared.state();
        match state.sandboxes.get_mut(&id) {
            Some(s) if s.alive() => (
                s.root.clone(),
                s.token.clone(),
                s.kernel.clone(),
                s.pid.clone(),
                s.envd_version.clone(),
            ),
            Some(s) => {
                s.stop_kernel();
                return gone(&id);
            }
            None => return gone(&id),
        }
    };
    if port != ENVD_PORT && port != JUPYTER_PORT {
        return json_response(
            StatusCode::BAD_GATEWAY,
            json!({"sandboxId": id, "message": "The sandbox is running but port is not open", "port": port.parse::<u16>().unwrap_or(0), "code": 502}),
        );
    }
    if let Some(fault) = &injected
        && let Some(response) = misbehave(fault, &id).await
    {
        return response;
    }
    let path = parts.uri.path().to_owned();
    if parts.method == Method::GET && path == "/health" && port == ENVD_PORT {
        return StatusCode::NO_CONTENT.into_response();
    }
    if token.is_some() && header("x-access-token") != token {
        return json_response(
            StatusCode::UNAUTHORIZED,
            json!({"code": 401, "message": "unauthorized access, please provide a valid access token or method signing if supported"}),
        );
    }
    if port == JUPYTER_PORT {
        return match (parts.method.clone(), path.as_str()) {
            (Method::POST, "/execute") => execute(&shared, id, &root, kernel, pid, &body),
            _ => (StatusCode::NOT_FOUND, "Not Found").into_response(),
        };
    }
    let query: HashMap<String, String> = url_query(parts.uri.query().unwrap_or_default());
    let user = if path == "/files" {
        query.get("username").cloned()
    } else {
        basic_user(header("authorization").as_deref())
    };
    if let Some(refused) = check_user(&envd_version, user.as_deref()) {
        return refused;
    }
    match (parts.method.clone(), path.as_str()) {
        (Method::GET, "/files") => read_file(&root, query.get("path").map(String::as_str)),
        (Method::POST, "/files") => {
            let request = Request::from_parts(parts, Body::from(body));
            write_file(&root, query.get("path").cloned(), request).await
        }
        (Method::GET, "/metrics") => json_response(
            StatusCode::OK,
            json!({"cpu_count": 2, "cpu_used_pct": 1.5, "mem_total": 2147483648u64, "mem_used": 123456789, "disk_used": 987654321, "disk_total": 10737418240u64, "ts": 0}),
        ),
        (Method::POST, rpc) if rpc.starts_with("/filesystem.Filesystem/") => {
            if header("content-type").as_deref() != Some("application/json") {
                return json_response(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    json!({"code": "unknown", "message": "unsupported content type"}),
                );
            }
            let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            filesystem(&root, &rpc["/filesystem.Filesystem/".len()..], &body)
        }
        _ => api_error(StatusCode::NOT_FOUND, "no such route in the fake"),
    }
}

/// The user a Basic `Authorization` header names (`user:` in base64).
fn basic_user(header: Option<&str>) -> Option<String> {
    use base64::Engine;
    let encoded = header?.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    Some(text.split(':').next()?.to_owned())
}

/// envd's answer to a request as `user`: a user it does not know is refused,
/// and envd before 0.4.0 refuses requests that name no user.
fn check_user(envd_version: &str, user: Option<&str>) -> Option<Response> {
    let refuse = |message: String| {
        Some(json_response(
            StatusCode::UNAUTHORIZED,
            json!({"code": 401, "message": message}),
        ))
    };
    match user {
        Some("root" | "user") => None,
        Some(other) => refuse(format!("error looking up user '{other}'")),
        None if version_below(envd_version, (0, 4, 0)) => refuse("no user specified".into()),
        None => None,
    }
}

/// Whether a version `a.b.c` is below `floor`.
fn version_below(version: &str, floor: (u64, u64, u64)) -> bool {
    let mut parts = version.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
    let v = (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    );
    v < floor
}

fn gone(id: &str) -> Response {
    json_response(
        StatusCode::BAD_GATEWAY,
        json!({"sandboxId": id, "message": "The sandbox was not found", "code": 502}),
    )
}

fn url_query(query: &str) -> HashMap<String, String> {
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (decode(k), decode(v)))
        .collect()
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
