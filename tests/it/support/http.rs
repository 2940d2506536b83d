//! The server serving MCP over HTTP on loopback, and clients for it: rmcp's
//! Streamable HTTP client in either protocol era, and raw HTTP requests for
//! what a client library would not send.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, ProtocolVersion};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::Value;
use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::support::{binary, shared_cache};

/// Which protocol a client speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Era {
    /// 2026-07-28: `server/discover`, no sessions, mirrored headers.
    Stateless,
    /// 2025-11-25: `initialize` and a session.
    Session,
}

/// The server process serving HTTP.
pub struct HttpServer {
    /// Where it serves, e.g. `http://127.0.0.1:PORT`.
    pub base: String,
    /// Its sandbox root.
    pub root: PathBuf,
    child: tokio::process::Child,
    log: Arc<Mutex<String>>,
    _tmp: Option<TempDir>,
}

impl HttpServer {
    /// Starts the server on a free loopback port with extra `env`.
    pub async fn start(env: &[(&str, &str)]) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let mut server = Self::start_on(root, "127.0.0.1:0", env).await.unwrap();
        server._tmp = Some(tmp);
        server
    }

    /// Starts the server on `root` listening on `addr`; the log when it
    /// exits instead of serving.
    pub async fn start_on(root: PathBuf, addr: &str, env: &[(&str, &str)]) -> Result<Self, String> {
        let mut cmd = tokio::process::Command::new(binary());
        cmd.args(["serve", "--http", addr])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", root.parent().unwrap_or(&root))
            .env("SANDBOX_CACHE_DIR", shared_cache())
            .env("SANDBOX_ROOT", &root)
            .env("SANDBOX_RUNTIME", "python-3.12")
            .env("SANDBOX_PIP_PYTHON", "none")
            .env("SANDBOX_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start the server");
        let log = Arc::new(Mutex::new(String::new()));
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let serving = tokio::time::timeout(Duration::from_secs(60), async {
            while let Ok(Some(line)) = lines.next_line().await {
                log.lock().unwrap().push_str(&format!("{line}\n"));
                if let Some(at) = line.split("serving MCP at ").nth(1) {
                    return Some(at.trim().trim_end_matches("/mcp").to_owned());
                }
            }
            None
        })
        .await
        .ok()
        .flatten();
        let sink = log.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                sink.lock().unwrap().push_str(&format!("{line}\n"));
            }
        });
        match serving {
            Some(base) => Ok(Self {
                base,
                root,
                child,
                log,
                _tmp: None,
            }),
            None => {
                let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
                Err(log.lock().unwrap().clone())
            }
        }
    }

    /// The MCP endpoint.
    pub fn url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    /// Its `/metrics` page.
    pub async fn metrics(&self) -> String {
        let page = http_client()
            .get(format!("{}/metrics", self.base))
            .send()
            .await
            .expect("the server answers /metrics");
        page.text().await.unwrap()
    }

    /// What the server logged so far.
    pub fn logs(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// An rmcp client of `era`, sending `token` as a bearer token, that has
    /// listed the tools (as clients do: a 2026-07-28 client learns from the
    /// schemas which arguments to mirror into headers).
    pub async fn client(&self, era: Era, token: Option<&str>) -> RunningService<RoleClient, ()> {
        self.client_with((), era, token).await
    }

    /// [`HttpServer::client`] with `handler` handling what the server sends.
    pub async fn client_with<H: ClientHandler>(
        &self,
        handler: H,
        era: Era,
        token: Option<&str>,
    ) -> RunningService<RoleClient, H> {
        let client = self
            .try_client_with(handler, era, token)
            .await
            .expect("MCP handshake over HTTP");
        client.list_all_tools().await.expect("tools/list over HTTP");
        client
    }

    /// An rmcp client of `era`, or why it could not connect.
    pub async fn try_client(
        &self,
        era: Era,
        token: Option<&str>,
    ) -> Result<RunningService<RoleClient, ()>, String> {
        self.try_client_with((), era, token).await
    }

    /// [`HttpServer::try_client`] with `handler`.
    pub async fn try_client_with<H: ClientHandler>(
        &self,
        handler: H,
        era: Era,
        token: Option<&str>,
    ) -> Result<RunningService<RoleClient, H>, String> {
        connect_with(&self.url(), handler, era, token).await
    }

    /// Kills the process outright (SIGKILL), as a crash or the machine's
    /// OOM killer would, and waits for it to be gone.
    pub async fn kill(mut self) {
        let pid = self.child.id().expect("running") as i32;
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(pid).unwrap(),
            rustix::process::Signal::KILL,
        )
        .unwrap();
        let _ = tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await;
    }

    /// Sends SIGTERM and waits for the process to exit; its exit status.
    pub async fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().expect("running") as i32;
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(pid).unwrap(),
            rustix::process::Signal::TERM,
        )
        .unwrap();
        tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("the server exits after SIGTERM")
            .unwrap()
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- server log ---\n{}", self.logs());
        }
    }
}

/// An rmcp client of `era` for the MCP endpoint `url` (the server's, or a
/// proxy's in front of it), or why it could not connect.
pub async fn connect(
    url: &str,
    era: Era,
    token: Option<&str>,
) -> Result<RunningService<RoleClient, ()>, String> {
    connect_with(url, (), era, token).await
}

/// [`connect`] with `handler` handling what the server sends.
pub async fn connect_with<H: ClientHandler>(
    url: &str,
    handler: H,
    era: Era,
    token: Option<&str>,
) -> Result<RunningService<RoleClient, H>, String> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
    if let Some(token) = token {
        config = config.auth_header(token.to_owned());
    }
    let transport = StreamableHttpClientTransport::with_client(http_client(), config);
    let client = match era {
        Era::Session => handler.serve(transport).await,
        Era::Stateless => {
            handler
                .serve_with_lifecycle(
                    transport,
                    ClientLifecycleMode::Discover {
                        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                    },
                )
                .await
        }
    };
    client.map_err(|e| e.to_string())
}

/// Calls a tool with an rmcp client.
pub async fn call<H: ClientHandler>(
    client: &RunningService<RoleClient, H>,
    tool: &str,
    args: Value,
) -> CallToolResult {
    let Value::Object(args) = args else {
        panic!("tool arguments must be an object")
    };
    client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args))
        .await
        .expect("tool call")
}

/// A raw JSON-RPC POST to `/mcp` with extra headers; the status and the
/// JSON-RPC message in the answer (plain JSON or the first SSE event).
pub async fn post(url: &str, headers: &[(&str, &str)], body: Value) -> (u16, Value) {
    let client = http_client();
    let mut request = client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .json(&body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.expect("the server answers");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    let message = text
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(str::trim)
        .find(|data| !data.is_empty())
        .map(|data| serde_json::from_str(data).unwrap_or(Value::Null))
        .or_else(|| serde_json::from_str(&text).ok())
        .unwrap_or_else(|| Value::String(text.clone()));
    (status, message)
}

/// The `_meta` a 2026-07-28 request carries instead of a handshake.
pub fn modern_meta() -> Value {
    serde_json::json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw-test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}
    })
}

/// The headers a 2026-07-28 `tools/call` of `tool` carries.
pub fn modern_headers<'a>(tool: &'a str, session: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", tool),
        ("mcp-param-session-id", session),
    ]
}

/// An HTTP client for loopback (reqwest is built without a default TLS
/// provider; the server's own, ring, is installed).
pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().no_proxy().build().unwrap()
}
