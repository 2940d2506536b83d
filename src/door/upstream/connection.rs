//! One upstream MCP server: started on first need (or at server start),
//! shared by every sandbox, started again when it has died. Starts are
//! rationed: a server whose start failed is not tried again for a few
//! seconds, and one that keeps dying is started at most a few times a
//! minute, so no guest can make the host spawn processes without end.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation, Tool,
};
use rmcp::service::{RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{Peer, RoleClient, ServiceExt};
use serde_json::{Map, Value};

use super::process::CommandProcess;
use super::results;
use super::spec::{ToolChoice, UpstreamSpec, UpstreamTransport};
use crate::door::{FailureKind, ToolFailure};

/// How long after a failed start the next is tried.
const RETRY_AFTER: Duration = Duration::from_secs(3);
/// Most starts in [`START_WINDOW`]; past them, no start until the oldest
/// leaves the window.
const MAX_STARTS: usize = 5;
/// The window [`MAX_STARTS`] counts in.
const START_WINDOW: Duration = Duration::from_secs(60);
/// Room around a result in one line from a command: its JSON-RPC envelope,
/// and the text content that often repeats the structured content.
const LINE_ROOM: usize = 1 << 20;

/// One upstream tool as guests see it.
#[derive(Clone, Debug)]
pub struct OfferedTool {
    /// The name guests call (`<server>_<tool>`).
    pub guest_name: String,
    /// Its name upstream.
    pub name: String,
    /// The descriptor the guest's `list` answer carries.
    pub descriptor: Value,
}

/// One upstream server and its connection.
pub struct Upstream {
    spec: UpstreamSpec,
    /// The running connection (one start at a time: callers wait for it).
    state: tokio::sync::Mutex<State>,
    /// The tools offered, from the last successful listing (kept while the
    /// server is restarted, so a guest still sees their signatures).
    offered: Mutex<Vec<OfferedTool>>,
}

#[derive(Default)]
struct State {
    running: Option<Running>,
    failed: Option<(Instant, String)>,
    /// When it was started, within the window.
    recent_starts: VecDeque<Instant>,
    /// Starts so far (which one made the running connection).
    starts: u32,
}

/// A connection, and the process behind it (for a command).
struct Running {
    service: RunningService<RoleClient, ClientConfig>,
    process: Option<CommandProcess>,
}

impl Running {
    fn is_alive(&self) -> bool {
        !self.service.is_closed()
            && !self.service.peer().is_transport_closed()
            && self
                .process
                .as_ref()
                .is_none_or(|p| !p.exited().is_cancelled())
    }
}

/// A call that failed, and whether it never left the host (so it may be
/// sent again on a new connection).
struct CallError {
    failure: ToolFailure,
    unsent: bool,
}

impl Upstream {
    /// An upstream server as `spec` describes it; nothing is started yet.
    pub fn new(spec: UpstreamSpec) -> Self {
        Self {
            spec,
            state: tokio::sync::Mutex::new(State::default()),
            offered: Mutex::new(Vec::new()),
        }
    }

    /// The tools offered, as last listed.
    pub fn offered(&self) -> Vec<OfferedTool> {
        self.offered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The name upstream of its tool guests call `guest_name`, when it
    /// offers one.
    pub fn upstream_name(&self, guest_name: &str) -> Option<String> {
        let offered = self.offered.lock().unwrap_or_else(|p| p.into_inner());
        offered
            .iter()
            .find(|t| t.guest_name == guest_name)
            .map(|t| t.name.clone())
    }

    /// A live connection (and which start made it): the running one, or a
    /// new one started now.
    pub async fn peer(&self) -> Result<(Peer<RoleClient>, u32), ToolFailure> {
        let mut state = self.state.lock().await;
        if let Some(running) = &state.running {
            if running.is_alive() {
                return Ok((running.service.peer().clone(), state.starts));
            }
            tracing::warn!(upstream = %self.spec.name, "the upstream MCP server stopped; starting it again");
            state.running = None;
        }
        self.may_start(&mut state)?;
        state.starts += 1;
        state.recent_starts.push_back(Instant::now());
        match tokio::time::timeout(self.spec.start_timeout, self.start()).await {
            Ok(Ok((running, tools))) => {
                let peer = running.service.peer().clone();
                *self.offered.lock().unwrap_or_else(|p| p.into_inner()) = tools;
                state.running = Some(running);
                state.failed = None;
                Ok((peer, state.starts))
            }
            Ok(Err(why)) => Err(self.note_failure(&mut state, why)),
            Err(_) => Err(self.note_failure(
                &mut state,
                format!(
                    "it did not start and list its tools within {} s (start_timeout_seconds)",
                    self.spec.start_timeout.as_secs()
                ),
            )),
        }
    }

    /// Refuses a start too soon after a failed one, or past the ration.
    fn may_start(&self, state: &mut State) -> Result<(), ToolFailure> {
        if let Some((at, why)) = &state.failed
            && at.elapsed() < RETRY_AFTER
        {
            return Err(self.unavailable(why));
        }
        while state
            .recent_starts
            .front()
            .is_some_and(|at| at.elapsed() >= START_WINDOW)
        {
            state.recent_starts.pop_front();
        }
        if state.recent_starts.len() >= MAX_STARTS {
            let oldest = state
                .recent_starts
                .front()
                .copied()
                .unwrap_or_else(Instant::now);
            let wait = START_WINDOW.saturating_sub(oldest.elapsed());
            return Err(self.unavailable(&format!(
                "it was started {MAX_STARTS} times in the last {} s and stopped each time; the next start is in {} s",
                START_WINDOW.as_secs(),
                wait.as_secs() + 1
            )));
        }
        Ok(())
    }

    /// Calls its tool `name` with `args`, within `bound` (and its own call
    /// timeout). A call a command's stdin refused (its process had died) is
    /// sent once more on a new connection.
    pub async fn call(
        &self,
        name: &str,
        args: Map<String, Value>,
        bound: Duration,
    ) -> Result<Value, ToolFailure> {
        let until = Instant::now() + bound.min(self.spec.call_timeout);
        // Only a command's call may be sent again: only it keeps a copy.
        let again = self.is_command().then(|| args.clone());
        match (self.call_once(name, args, until).await, again) {
            (Err(error), Some(args)) if error.unsent => self.call_once(name, args, until).await,
            (outcome, _) => outcome,
        }
        .map_err(|error| error.failure)
    }

    async fn call_once(
        &self,
        name: &str,
        args: Map<String, Value>,
        until: Instant,
    ) -> Result<Value, CallError> {
        let sent = |failure| CallError {
            failure,
            unsent: false,
        };
        let left = until.saturating_duration_since(Instant::now());
        let (peer, start) = tokio::time::timeout(left, self.peer())
            .await
            .map_err(|_| sent(self.timed_out(name, left)))?
            .map_err(sent)?;
        let params = CallToolRequestParams::new(name.to_owned()).with_arguments(args);
        let left = until.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, peer.call_tool(params)).await {
            Ok(Ok(result)) => self.value_of(result).map_err(sent),
            Ok(Err(e)) => {
                // Only a command's stdin refusing the write proves the call
                // never left; an HTTP exchange that failed may have run it,
                // and leaves the session standing.
                let unsent = self.is_command() && matches!(e, ServiceError::TransportSend(_));
                if unsent || matches!(e, ServiceError::TransportClosed) {
                    self.forget(start).await;
                }
                Err(CallError {
                    failure: self.call_failure(name, e),
                    unsent,
                })
            }
            Err(_) => Err(sent(self.timed_out(name, left))),
        }
    }

    /// Starts the server, initializes the session and lists its tools.
    async fn start(&self) -> Result<(Running, Vec<OfferedTool>), String> {
        let client = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("mcp-code-sandbox", env!("CARGO_PKG_VERSION")),
        );
        let running = match &self.spec.transport {
            UpstreamTransport::Command { argv, env, cwd } => {
                let (process, transport) = CommandProcess::spawn(
                    &self.spec.name,
                    argv,
                    env,
                    cwd.as_deref(),
                    self.max_message_bytes(),
                )?;
                let service = client.serve(transport).await.map_err(|e| e.to_string())?;
                // A process that exits ends the connection at once: calls in
                // flight fail instead of waiting out their time.
                let (exited, token) = (process.exited().clone(), service.cancellation_token());
                tokio::spawn(async move {
                    exited.cancelled().await;
                    token.cancel();
                });
                Running {
                    service,
                    process: Some(process),
                }
            }
            UpstreamTransport::Http { url, bearer_token } => {
                let http = reqwest::Client::builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .no_proxy()
                    .build()
                    .map_err(|e| e.to_string())?;
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                config.max_json_response_size = self.max_message_bytes();
                config.max_sse_event_size = self.max_message_bytes();
                if let Some(token) = bearer_token {
                    config = config.auth_header(token.0.clone());
                }
                let transport = StreamableHttpClientTransport::with_client(http, config);
                let service = client.serve(transport).await.map_err(|e| e.to_string())?;
                Running {
                    service,
                    process: None,
                }
            }
        };
        let listed = running
            .service
            .peer()
            .list_all_tools()
            .await
            .map_err(|e| format!("it did not list its tools: {e}"))?;
        let tools = self.choose(listed);
        tracing::info!(
            upstream = %self.spec.name,
            tools = tools.len(),
            "upstream MCP server started"
        );
        Ok((running, tools))
    }

    /// The listed tools the file chose, renamed for guests; a second tool
    /// that would get the same name is left out (and logged).
    fn choose(&self, listed: Vec<Tool>) -> Vec<OfferedTool> {
        let server = &self.spec.name;
        let mut offered: Vec<OfferedTool> = Vec::new();
        for tool in listed.iter().filter(|t| self.spec.tools.includes(&t.name)) {
            let guest_name = results::guest_name(server, &tool.name);
            if offered.iter().any(|o| o.guest_name == guest_name) {
                tracing::warn!(upstream = %server, tool = %tool.name, "left out: another tool has the same Python name {guest_name}");
                continue;
            }
            offered.push(OfferedTool {
                descriptor: results::descriptor(server, &guest_name, tool),
                guest_name,
                name: tool.name.to_string(),
            });
        }
        if let ToolChoice::Named(names) = &self.spec.tools {
            for missing in names
                .iter()
                .filter(|n| !listed.iter().any(|t| t.name == **n))
            {
                tracing::warn!(upstream = %server, tool = %missing, "SANDBOX_UPSTREAMS names a tool this server does not list");
            }
        }
        offered
    }

    /// Drops the connection made by start `start` (its transport closed), so
    /// the next call starts the server again; a newer one is kept.
    async fn forget(&self, start: u32) {
        let mut state = self.state.lock().await;
        if state.starts == start {
            state.running = None;
        }
    }

    fn note_failure(&self, state: &mut State, why: String) -> ToolFailure {
        let why = self.redacted(&why);
        tracing::warn!(upstream = %self.spec.name, "upstream MCP server did not start: {why}");
        let failure = self.unavailable(&why);
        state.failed = Some((Instant::now(), why));
        failure
    }

    /// Stops the server (at shutdown).
    pub async fn stop(&self) {
        if let Some(mut running) = self.state.lock().await.running.take() {
            let _ = running
                .service
                .close_with_timeout(Duration::from_secs(3))
                .await;
        }
    }

    fn value_of(&self, result: CallToolResult) -> Result<Value, ToolFailure> {
        results::value_of(result, &self.spec.name, self.spec.max_result_bytes)
            .map_err(|f| ToolFailure::new(f.kind, self.redacted(&f.message)))
    }

    fn unavailable(&self, why: &str) -> ToolFailure {
        ToolFailure::new(
            FailureKind::ToolError,
            format!(
                "the MCP server '{}' is not available: {why}",
                self.spec.name
            ),
        )
    }

    fn timed_out(&self, tool: &str, limit: Duration) -> ToolFailure {
        ToolFailure::new(
            FailureKind::Timeout,
            format!(
                "{}: {tool} did not answer within {:.1} s",
                self.spec.name,
                limit.as_secs_f64()
            ),
        )
    }

    fn call_failure(&self, tool: &str, error: ServiceError) -> ToolFailure {
        let server = &self.spec.name;
        let (kind, message) = match &error {
            ServiceError::McpError(e) if e.code == rmcp::model::ErrorCode::INVALID_PARAMS => (
                FailureKind::InvalidArguments,
                format!("{server}: {tool}: {}", e.message),
            ),
            ServiceError::McpError(e) => (
                FailureKind::ToolError,
                format!("{server}: {tool}: {}", e.message),
            ),
            ServiceError::TransportClosed | ServiceError::Cancelled { .. } => (
                FailureKind::ToolError,
                format!(
                    "{server}: the server stopped during the call to {tool}; it is started again on the next call"
                ),
            ),
            ServiceError::TransportSend(sent) => {
                // Past the transport's own wrapper (which names its Rust type).
                let cause = std::error::Error::source(sent)
                    .map_or_else(|| sent.to_string(), |inner| inner.to_string());
                (
                    FailureKind::ToolError,
                    format!("{server}: {tool}: the request to the server failed: {cause}"),
                )
            }
            other => (FailureKind::ToolError, format!("{server}: {tool}: {other}")),
        };
        ToolFailure::new(kind, self.redacted(&message))
    }

    /// Most bytes of one message from the server: a result within
    /// `max_result_bytes` fits, with its envelope and a text copy of it.
    fn max_message_bytes(&self) -> usize {
        self.spec.max_result_bytes.saturating_mul(2) + LINE_ROOM
    }

    fn is_command(&self) -> bool {
        matches!(self.spec.transport, UpstreamTransport::Command { .. })
    }

    /// `text` with the bearer token, if any, cut out (an error may quote a
    /// response that echoes the request's headers).
    fn redacted(&self, text: &str) -> String {
        match &self.spec.transport {
            UpstreamTransport::Http {
                bearer_token: Some(token),
                ..
            } if !token.0.is_empty() => text.replace(&token.0, "[token]"),
            _ => text.to_owned(),
        }
    }
}
