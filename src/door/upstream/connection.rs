//! One upstream MCP server: started on first need (or at server start),
//! shared by every sandbox, started again when it has died. A server whose
//! start failed is not tried again for a few seconds, so a broken command is
//! not spawned once per guest call.

use std::process::Stdio;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, Tool};
use rmcp::service::{RunningService, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{Peer, RoleClient, ServiceExt};
use serde_json::{Map, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::results;
use super::spec::{UpstreamSpec, UpstreamTransport};
use crate::door::{FailureKind, ToolFailure};

/// How long after a failed start the next is tried.
const RETRY_AFTER: Duration = Duration::from_secs(3);
/// Longest stderr line of an upstream command that is logged.
const MAX_LOG_LINE: usize = 1000;

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
    running: Option<RunningService<RoleClient, ClientConfig>>,
    failed: Option<(Instant, String)>,
    starts: u32,
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

    /// Its name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The tools offered, as last listed.
    pub fn offered(&self) -> Vec<OfferedTool> {
        self.offered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Its tool named `guest_name` by guests, when it offers one.
    pub fn find(&self, guest_name: &str) -> Option<OfferedTool> {
        let offered = self.offered.lock().unwrap_or_else(|p| p.into_inner());
        offered.iter().find(|t| t.guest_name == guest_name).cloned()
    }

    /// A live connection (and which start made it): the running one, or a
    /// new one started now.
    pub async fn peer(&self) -> Result<(Peer<RoleClient>, u32), ToolFailure> {
        let mut state = self.state.lock().await;
        if let Some(running) = &state.running
            && !running.is_closed()
            && !running.peer().is_transport_closed()
        {
            return Ok((running.peer().clone(), state.starts));
        }
        if state.running.take().is_some() {
            tracing::warn!(upstream = %self.spec.name, "the upstream MCP server stopped; starting it again");
        }
        if let Some((at, why)) = &state.failed
            && at.elapsed() < RETRY_AFTER
        {
            return Err(unavailable(&self.spec.name, why));
        }
        state.starts += 1;
        match tokio::time::timeout(self.spec.start_timeout, self.start()).await {
            Ok(Ok((running, tools))) => {
                let peer = running.peer().clone();
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

    /// Calls its tool `name` with `args`, within `bound` (and its own call
    /// timeout).
    pub async fn call(
        &self,
        name: &str,
        args: Map<String, Value>,
        bound: Duration,
    ) -> Result<Value, ToolFailure> {
        let (peer, start) = self.peer().await?;
        let limit = bound.min(self.spec.call_timeout);
        let params = CallToolRequestParams::new(name.to_owned()).with_arguments(args);
        let server = &self.spec.name;
        match tokio::time::timeout(limit, peer.call_tool(params)).await {
            Ok(Ok(result)) => results::value_of(result, server, self.spec.max_result_bytes),
            Ok(Err(ServiceError::TransportClosed)) => {
                self.forget(start).await;
                Err(call_failure(server, name, ServiceError::TransportClosed))
            }
            Ok(Err(e)) => Err(call_failure(server, name, e)),
            Err(_) => Err(ToolFailure::new(
                FailureKind::Timeout,
                format!(
                    "{server}: {name} did not answer within {:.1} s",
                    limit.as_secs_f64()
                ),
            )),
        }
    }

    /// Starts the server, initializes the session and lists its tools.
    async fn start(
        &self,
    ) -> Result<(RunningService<RoleClient, ClientConfig>, Vec<OfferedTool>), String> {
        let client = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("mcp-code-sandbox", env!("CARGO_PKG_VERSION")),
        );
        let running = match &self.spec.transport {
            UpstreamTransport::Command { argv, env, cwd } => {
                let transport = self.spawn(argv, env, cwd.as_deref())?;
                client.serve(transport).await.map_err(|e| e.to_string())?
            }
            UpstreamTransport::Http { url, bearer_token } => {
                let http = reqwest::Client::builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .build()
                    .map_err(|e| e.to_string())?;
                let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                if let Some(token) = bearer_token {
                    config = config.auth_header(token.0.clone());
                }
                let transport = StreamableHttpClientTransport::with_client(http, config);
                client.serve(transport).await.map_err(|e| e.to_string())?
            }
        };
        let listed = running
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

    /// Spawns the command with its own environment only, its stderr logged.
    fn spawn(
        &self,
        argv: &[String],
        env: &std::collections::BTreeMap<String, String>,
        cwd: Option<&std::path::Path>,
    ) -> Result<TokioChildProcess, String> {
        let mut command = tokio::process::Command::new(&argv[0]);
        command
            .args(&argv[1..])
            .env_clear()
            .envs(env)
            .kill_on_drop(true);
        if let Some(cwd) = cwd {
            command.current_dir(cwd);
        }
        let (process, stderr) = TokioChildProcess::builder(command)
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {:?}: {e}", argv[0]))?;
        if let Some(stderr) = stderr {
            let name = self.spec.name.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let line: String = line.chars().take(MAX_LOG_LINE).collect();
                    tracing::info!(upstream = %name, "{line}");
                }
            });
        }
        Ok(process)
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
        if let super::spec::ToolChoice::Named(names) = &self.spec.tools {
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
        tracing::warn!(upstream = %self.spec.name, "upstream MCP server did not start: {why}");
        let failure = unavailable(&self.spec.name, &why);
        state.failed = Some((Instant::now(), why));
        failure
    }

    /// Stops the server (at shutdown).
    pub async fn stop(&self) {
        if let Some(mut running) = self.state.lock().await.running.take() {
            let _ = running.close_with_timeout(Duration::from_secs(3)).await;
        }
    }

    /// How many times it was started (or tried).
    pub async fn starts(&self) -> u32 {
        self.state.lock().await.starts
    }
}

fn unavailable(server: &str, why: &str) -> ToolFailure {
    ToolFailure::new(
        FailureKind::ToolError,
        format!("the MCP server '{server}' is not available: {why}"),
    )
}

fn call_failure(server: &str, tool: &str, error: ServiceError) -> ToolFailure {
    let message = match &error {
        ServiceError::McpError(e) if e.code == rmcp::model::ErrorCode::INVALID_PARAMS => {
            return ToolFailure::new(
                FailureKind::InvalidArguments,
                format!("{server}: {tool}: {}", e.message),
            );
        }
        ServiceError::McpError(e) => format!("{server}: {tool}: {}", e.message),
        ServiceError::TransportClosed => format!(
            "{server}: the server stopped during the call to {tool}; it is started again on the next call"
        ),
        other => format!("{server}: {tool}: {other}"),
    };
    ToolFailure::new(FailureKind::ToolError, message)
}
