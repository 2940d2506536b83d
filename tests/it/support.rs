//! The one support module of the integration tests: start the real binary,
//! talk MCP to it over stdio with rmcp's client and read results the way a
//! client would; over HTTP (`http`), behind real nginx (`nginx`), and
//! against a package index served on loopback (`index`).

pub mod http;
pub mod index;
pub mod nginx;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, Once};

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
    ProgressNotificationParam,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RequestHandle, RunningService};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::io::AsyncReadExt;

/// Guest code that finds the driver's reply token in its frames (as
/// `token`) and defines `field(kind, data)` for a reply's fields: the start of
/// a forged reply, for tests that check forging gains nothing.
pub const FORGE_PREAMBLE: &str = r#"
import sys, posix
frame, token = sys._getframe(), None
while frame is not None and token is None:
    candidate = frame.f_locals.get("token")
    candidate = candidate[0] if isinstance(candidate, list) and candidate else candidate
    token = candidate if isinstance(candidate, bytes) else None
    frame = frame.f_back
def field(kind, data):
    return kind + len(data).to_bytes(4, "big") + data
"#;

/// The binary under test: this build's, or the one `SANDBOX_TEST_BINARY`
/// names (to see a new test fail against an older build).
pub fn binary() -> &'static str {
    static BINARY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BINARY.get_or_init(|| {
        std::env::var("SANDBOX_TEST_BINARY")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_mcp-code-sandbox").to_owned())
    })
}

/// A module cache shared by all tests, so the runtime compiles once.
pub fn shared_cache() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sandbox-cache");
    static PREPARE: Once = Once::new();
    PREPARE.call_once(|| {
        let status = std::process::Command::new(binary())
            .args(["prepare", "python-3.12"])
            .env("SANDBOX_CACHE_DIR", &dir)
            .env("SANDBOX_ROOT", dir.join("prepare-root"))
            .env("SANDBOX_LOG", "warn")
            .status()
            .expect("run mcp-code-sandbox prepare");
        assert!(
            status.success(),
            "the runtime is not ready: run ./fetch-python.sh first"
        );
    });
    dir
}

/// The shared module cache with the scientific runtime compiled into it too
/// (once per test run: about a minute and 2.5 GiB of memory the first time).
pub fn scientific_cache() -> PathBuf {
    let dir = shared_cache();
    static PREPARE: Once = Once::new();
    PREPARE.call_once(|| {
        let status = std::process::Command::new(binary())
            .args(["prepare", "scientific"])
            .env("SANDBOX_CACHE_DIR", &dir)
            .env("SANDBOX_ROOT", dir.join("prepare-root"))
            .env("SANDBOX_LOG", "warn")
            .status()
            .expect("run mcp-code-sandbox prepare scientific");
        assert!(
            status.success(),
            "the scientific runtime is not ready: run ./fetch-python.sh --runtime scientific first"
        );
    });
    dir
}

/// A running server process with an MCP client connected to it; the client
/// handles what the server sends with `H` (nothing, by default).
pub struct Server<H: ClientHandler = ()> {
    pub client: RunningService<RoleClient, H>,
    /// The sandbox root given to the server.
    pub root: PathBuf,
    /// The server's process id.
    pub pid: u32,
    stderr: Arc<Mutex<String>>,
    _show_logs_on_failure: ShowLogsOnFailure,
    _tmp: TempDir,
}

/// Prints the server's log when a test fails.
struct ShowLogsOnFailure(Arc<Mutex<String>>);

impl Drop for ShowLogsOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- server log ---\n{}", self.0.lock().unwrap());
        }
    }
}

impl Server {
    /// Starts the server with default settings.
    pub async fn start() -> Self {
        Self::start_with(&[]).await
    }

    /// Starts the server with extra environment variables.
    pub async fn start_with(env: &[(&str, &str)]) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        Self::start_in(tmp, root, env).await
    }

    /// Starts the server with `index_url` as its only package index (pip's
    /// configuration ignored) and no warm pool, so its one sandbox
    /// directory is the one the test created.
    pub async fn start_on_index(index_url: &str) -> Self {
        Self::start_with(&[
            ("SANDBOX_INDEX_URL", index_url),
            ("PIP_CONFIG_FILE", "/dev/null"),
            ("SANDBOX_POOL_SIZE", "0"),
        ])
        .await
    }

    /// Starts the server on a given sandbox root.
    pub async fn start_in(tmp: TempDir, root: PathBuf, env: &[(&str, &str)]) -> Self {
        Server::start_handled((), tmp, root, env).await
    }
}

impl Server<Observer> {
    /// Starts the server with a client that records what the server sends
    /// and, when `tasks` is true, declares the tasks extension.
    pub async fn observed(tasks: bool, env: &[(&str, &str)]) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        Server::start_handled(Observer::new(tasks), tmp, root, env).await
    }
}

/// A client that records the progress notifications it receives and can
/// declare the tasks extension.
#[derive(Clone, Default)]
pub struct Observer {
    /// The progress notifications received, in order.
    pub progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
    tasks: bool,
}

impl Observer {
    /// A recorder; `tasks`: whether it declares the tasks extension.
    pub fn new(tasks: bool) -> Self {
        Self {
            progress: Arc::default(),
            tasks,
        }
    }

    /// The progress notifications received so far.
    pub fn notes(&self) -> Vec<ProgressNotificationParam> {
        self.progress.lock().unwrap().clone()
    }

    /// Their messages.
    pub fn messages(&self) -> Vec<String> {
        self.notes().into_iter().filter_map(|n| n.message).collect()
    }
}

impl ClientHandler for Observer {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push(params);
    }

    fn get_info(&self) -> ClientConfig {
        let capabilities = if self.tasks {
            ClientCapabilities::builder().enable_tasks().build()
        } else {
            ClientCapabilities::default()
        };
        ClientConfig::new(capabilities, Implementation::new("it", "1"))
    }
}

impl<H: ClientHandler> Server<H> {
    /// Starts the server on a given sandbox root, with `handler` as the
    /// client's handler.
    pub async fn start_handled(
        handler: H,
        tmp: TempDir,
        root: PathBuf,
        env: &[(&str, &str)],
    ) -> Self {
        let cache = shared_cache();
        let cmd = tokio::process::Command::new(binary()).configure(|c| {
            c.env_clear()
                .env("PATH", std::env::var("PATH").unwrap_or_default())
                .env("HOME", tmp.path())
                .env("SANDBOX_CACHE_DIR", &cache)
                .env("SANDBOX_ROOT", &root)
                // Most tests use the small runtime; scientific ones ask for theirs.
                .env("SANDBOX_RUNTIME", "python-3.12")
                // The machine's pip would name an index on the internet;
                // tests that want pip asked point it at a loopback index.
                .env("SANDBOX_PIP_PYTHON", "none")
                .env("SANDBOX_LOG", "info");
            for (k, v) in env {
                c.env(k, v);
            }
        });
        Self::start_command(handler, cmd, tmp, root).await
    }

    /// Starts the server as `cmd` (a command that runs the binary, with its
    /// environment set) and connects to it.
    pub async fn start_command(
        handler: H,
        cmd: tokio::process::Command,
        tmp: TempDir,
        root: PathBuf,
    ) -> Self {
        let (transport, stderr_pipe) = TokioChildProcess::builder(cmd)
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the server");
        let pid = transport.id().expect("the server has a process id");
        let stderr = Arc::new(Mutex::new(String::new()));
        if let Some(mut pipe) = stderr_pipe {
            let sink = stderr.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while let Ok(n) = pipe.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    sink.lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            });
        }
        let client = handler.serve(transport).await.expect("MCP handshake");
        Self {
            client,
            root,
            pid,
            _show_logs_on_failure: ShowLogsOnFailure(stderr.clone()),
            stderr,
            _tmp: tmp,
        }
    }

    /// What the server logged so far.
    pub fn logs(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Calls a tool and returns its result (tool errors included).
    pub async fn call(&self, tool: &str, args: Value) -> CallToolResult {
        let Value::Object(args) = args else {
            panic!("tool arguments must be an object")
        };
        self.client
            .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args))
            .await
            .unwrap_or_else(|e| panic!("{tool} failed at the protocol level: {e}"))
    }

    /// Sends a tool call the test can cancel (its result comes through the
    /// handle).
    pub async fn call_cancellable(&self, tool: &str, args: Value) -> RequestHandle<RoleClient> {
        use rmcp::model::{CallToolRequest, ClientRequest};
        let Value::Object(args) = args else {
            panic!("tool arguments must be an object")
        };
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(args);
        self.client
            .send_cancellable_request(
                ClientRequest::CallToolRequest(CallToolRequest::new(params)),
                PeerRequestOptions::no_options(),
            )
            .await
            .unwrap_or_else(|e| panic!("{tool} failed at the protocol level: {e}"))
    }

    /// Calls a tool that must succeed; returns its structured content.
    pub async fn ok(&self, tool: &str, args: Value) -> Value {
        let result = self.call(tool, args).await;
        assert_ne!(
            result.is_error,
            Some(true),
            "{tool} failed: {}",
            text(&result)
        );
        result
            .structured_content
            .unwrap_or_else(|| panic!("{tool} returned no structured content"))
    }

    /// Calls a tool that must fail; returns its text.
    pub async fn err(&self, tool: &str, args: Value) -> String {
        let result = self.call(tool, args).await;
        assert_eq!(
            result.is_error,
            Some(true),
            "{tool} should have failed: {}",
            text(&result)
        );
        text(&result)
    }

    /// Creates a sandbox; returns its id.
    pub async fn create(&self) -> String {
        self.create_with(json!({})).await
    }

    /// Creates a sandbox with arguments; returns its id.
    pub async fn create_with(&self, args: Value) -> String {
        let created = self.ok("create_sandbox", args).await;
        created["session_id"].as_str().unwrap().to_owned()
    }

    /// Runs code that must succeed; returns the structured result.
    pub async fn run(&self, id: &str, code: &str) -> Value {
        self.ok("execute_code", json!({"session_id": id, "code": code}))
            .await
    }

    /// Runs code; returns the whole result.
    pub async fn exec(&self, id: &str, code: &str) -> CallToolResult {
        self.call("execute_code", json!({"session_id": id, "code": code}))
            .await
    }

    /// The host directories of this server's sandboxes.
    pub fn sandbox_dirs(&self) -> Vec<PathBuf> {
        sandbox_dirs_under(&self.root)
    }

    /// Ends the session (stdin EOF) and waits for the process to exit.
    pub async fn stop(self) {
        let _ = self.client.cancel().await;
    }
}

/// The text blocks of a result, joined.
pub fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The structured content of a result (which may be an error).
pub fn structured(result: &CallToolResult) -> Value {
    result
        .structured_content
        .clone()
        .unwrap_or_else(|| panic!("no structured content: {}", text(result)))
}

/// A client that writes raw lines to the binary's stdin and reads raw lines
/// back, for requests no well-behaved client would send.
pub struct RawClient {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    _tmp: TempDir,
}

impl RawClient {
    /// Starts the server and completes the MCP handshake.
    pub async fn start(env: &[(&str, &str)]) -> Self {
        use tokio::io::AsyncBufReadExt;
        let tmp = tempfile::tempdir().unwrap();
        let mut cmd = tokio::process::Command::new(binary());
        cmd.env("SANDBOX_CACHE_DIR", shared_cache())
            .env("SANDBOX_ROOT", tmp.path().join("root"))
            .env("SANDBOX_LOG", "warn")
            .env("SANDBOX_POOL_SIZE", "0")
            .env("SANDBOX_PIP_PYTHON", "none")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut client = Self {
            child,
            stdin,
            stdout,
            _tmp: tmp,
        };
        client
            .send_json(
                json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"}}}),
            )
            .await;
        let init = client.recv().await;
        assert_eq!(init["id"], 0, "{init}");
        client
            .send_json(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        client
    }

    /// Sends bytes followed by a newline.
    pub async fn send_line(&mut self, line: &[u8]) {
        use tokio::io::AsyncWriteExt;
        self.stdin.write_all(line).await.unwrap();
        self.stdin.write_all(b"\n").await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    /// Sends a JSON message.
    pub async fn send_json(&mut self, message: Value) {
        self.send_line(message.to_string().as_bytes()).await;
    }

    /// Receives the next message (within 60 s).
    pub async fn recv(&mut self) -> Value {
        let line =
            tokio::time::timeout(std::time::Duration::from_secs(60), self.stdout.next_line())
                .await
                .expect("the server answered")
                .unwrap()
                .expect("the server is still running");
        serde_json::from_str(&line).unwrap()
    }

    /// Calls a tool with a given request id; returns the response.
    pub async fn call(&mut self, id: i64, tool: &str, args: Value) -> Value {
        self.send_json(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": args}}))
            .await;
        self.recv().await
    }

    /// Closes stdin and waits for the server to exit; returns whether it
    /// exited successfully.
    pub async fn finish(mut self) -> bool {
        drop(self.stdin);
        self.child
            .wait()
            .await
            .map(|s| s.success())
            .unwrap_or(false)
    }
}

/// A client that records progress, connected to the binary started with
/// only `env` set (its logs discarded).
pub async fn progress_client(
    env: &[(&str, &std::ffi::OsStr)],
) -> (RunningService<RoleClient, Observer>, Observer) {
    let cmd = tokio::process::Command::new(binary()).configure(|c| {
        c.env_clear();
        for (k, v) in env {
            c.env(k, v);
        }
    });
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::null())
        .spawn()
        .expect("start the server");
    let log = Observer::default();
    let client = log.clone().serve(transport).await.expect("MCP handshake");
    (client, log)
}

/// A tool call's parameters carrying the progress token `token`.
pub fn with_progress(tool: &str, args: Value, token: &str) -> CallToolRequestParams {
    let Value::Object(args) = args else {
        panic!("tool arguments must be an object")
    };
    let mut request = CallToolRequestParams::new(tool.to_owned()).with_arguments(args);
    request.meta = Some(rmcp::model::RequestMetaObject::with_progress_token(
        rmcp::model::ProgressToken(rmcp::model::NumberOrString::String(token.into())),
    ));
    request
}

/// The sandbox directories under a sandbox root (one directory per server
/// process, one per sandbox inside it).
pub fn sandbox_dirs_under(root: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for server in std::fs::read_dir(root).into_iter().flatten().flatten() {
        if !server.file_name().to_string_lossy().starts_with("server-") {
            continue;
        }
        for sb in std::fs::read_dir(server.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            // A sandbox's directory, not the memory directory beside it.
            if sb.path().is_dir() && sb.path().extension().is_none() {
                dirs.push(sb.path());
            }
        }
    }
    dirs
}

/// A server of the scientific runtime on the sandbox root `root` (with no
/// warm pool unless `env` says otherwise), as the durability tests start
/// one server after another on the same root.
pub async fn scientific_server_on(root: &Path, env: &[(&str, &str)]) -> Server {
    scientific_cache();
    let mut all = vec![
        ("SANDBOX_POOL_SIZE", "0"),
        ("SANDBOX_RUNTIME", "scientific"),
    ];
    all.extend_from_slice(env);
    Server::start_in(tempfile::tempdir().unwrap(), root.to_owned(), &all).await
}

/// Whether the process `pid` is still there.
pub fn process_alive(pid: u32) -> bool {
    let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
    rustix::process::test_kill_process(pid).is_ok()
}

/// Waits (at most 30 s) for the process `pid` to be gone; how long it took.
pub async fn process_gone(pid: u32) -> std::time::Duration {
    let started = std::time::Instant::now();
    while process_alive(pid) {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "the server did not exit"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    started.elapsed()
}

/// Kills the server outright (SIGKILL), as an OOM killer or a crash would,
/// and waits until it is gone.
pub async fn kill_outright(server: Server) {
    let pid = server.pid;
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    process_gone(pid).await;
    drop(server);
}
