//! What `get_sandbox_status` says of one sandbox: [`SandboxStatus`] and its
//! limits as shown, [`LimitsView`].

use schemars::JsonSchema;
use serde::Serialize;

use crate::sandbox::BackendKind;
use crate::sandbox::types::{KeptAcrossRestarts, ResourceUsage, SandboxLimits};

/// How a sandbox is doing, for `get_sandbox_status`.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct SandboxStatus {
    /// Its id.
    pub session_id: String,
    /// The backend running it (`wasm` or `e2b`).
    pub backend: BackendKind,
    /// The Python runtime it runs.
    pub runtime: String,
    /// What of it comes back if the server restarts or is killed.
    pub kept_across_restarts: KeptAcrossRestarts,
    /// When it was created (RFC 3339, UTC).
    pub created_at: String,
    /// When a tool last used it (RFC 3339, UTC).
    pub last_used_at: String,
    /// When it will be closed if left unused (RFC 3339, UTC).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Executions run so far.
    pub executions: u64,
    /// Whether a call is running in it right now.
    pub busy: bool,
    /// Memory and disk it uses (absent while busy, and at creation).
    pub usage: ResourceUsage,
    /// Its limits.
    pub limits: LimitsView,
}

/// A sandbox's limits, as status shows them.
#[derive(Clone, Debug, Serialize, JsonSchema)]
pub struct LimitsView {
    /// Default wall-clock timeout of an execution, in seconds.
    pub timeout_seconds: f64,
    /// Largest timeout an execution may ask for, in seconds.
    pub max_timeout_seconds: f64,
    /// Inline output per stream, in bytes.
    pub output_bytes: usize,
    /// Memory cap, in bytes (absent where the backend sets its own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    /// Fuel per execution (absent when not metered).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fuel: Option<u64>,
    /// CPU time per execution, in seconds (absent when only the wall clock
    /// bounds an execution).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<f64>,
    /// Disk quota, in bytes (absent where the backend sets its own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_bytes: Option<u64>,
    /// Most files and directories (absent where the backend sets its own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_files: Option<u64>,
}

impl LimitsView {
    /// The limits of a sandbox of `backend`: a remote VM's memory, fuel, CPU
    /// time and disk are its provider's, not this server's, so they are left out.
    pub fn new(limits: &SandboxLimits, backend: BackendKind) -> Self {
        let local = backend == BackendKind::Wasm;
        Self {
            timeout_seconds: limits.timeout.as_secs_f64(),
            max_timeout_seconds: limits.max_timeout.as_secs_f64(),
            output_bytes: limits.output_bytes,
            memory_bytes: local.then_some(limits.memory_bytes),
            fuel: limits.fuel.filter(|_| local),
            cpu_seconds: limits.cpu.filter(|_| local).map(|cpu| cpu.as_secs_f64()),
            disk_bytes: local.then_some(limits.disk_bytes),
            disk_files: local.then_some(limits.disk_files),
        }
    }
}
