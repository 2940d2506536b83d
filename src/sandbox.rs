//! The sandbox core: the interpreter trait every backend implements, the types
//! that cross it, and the manager that holds the live sandboxes.
//!
//! A [`Backend`] creates sandboxes; each is a [`CodeInterpreter`] (run code,
//! install packages) with a [`FileInterface`] onto its files. The
//! [`manager::SandboxManager`] owns them, serializes the calls to each one, and
//! enforces the server-wide rules (ids, counts, expiry).

pub mod allocation;
pub mod budget;
pub mod changed_files;
pub mod clip;
pub mod copy_tree;
pub mod disk_usage;
pub mod door_usage;
pub mod error;
pub mod guest_path;
pub mod host_resources;
pub mod lease;
pub mod local_files;
pub mod manager;
pub mod open_files;
pub mod owner;
pub mod private_files;
pub mod quota;
pub mod remove_tree;
pub mod root;
pub mod server_file_names;
pub mod server_files;
pub mod shown_text;
pub mod stop;
pub mod types;

use async_trait::async_trait;

pub use clip::{MARKER_ROOM, StreamClip, cap_exec_error, cap_value_text, head_and_tail};
pub use error::SandboxError;
pub use guest_path::GuestPath;
pub use owner::{Owner, OwnerCaps};
pub use stop::{StopReason, StopSignal};
pub use types::*;

/// Which kind of backend runs a sandbox.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// CPython compiled to WASI, running inside this process under wasmtime.
    Wasm,
    /// An E2B cloud sandbox.
    E2b,
}

impl BackendKind {
    /// The name used in configuration and tool arguments.
    pub fn name(self) -> &'static str {
        match self {
            Self::Wasm => "wasm",
            Self::E2b => "e2b",
        }
    }

    /// Parses a backend name (`wasm`, `e2b`; case-insensitive).
    pub fn parse(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "wasm" | "wasi" | "local" => Some(Self::Wasm),
            "e2b" => Some(Self::E2b),
            _ => None,
        }
    }
}

impl std::fmt::Display for BackendKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A source of sandboxes.
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// Which kind of backend this is.
    fn kind(&self) -> BackendKind;

    /// Creates one sandbox. The returned interpreter is ready to run code.
    async fn create(&self, spec: SandboxSpec) -> Result<Box<dyn CodeInterpreter>, SandboxError>;

    /// The name of the runtime sandboxes get by default, for status.
    fn default_runtime(&self) -> String;

    /// The server-wide budgets its sandboxes share, when it keeps any.
    fn budgets(&self) -> Option<budget::BudgetsView> {
        None
    }

    /// Brings back sandbox `id` as saved when the server last stopped, with
    /// at most `limits` (the manager's, from [`Backend::saved_limits`] lowered
    /// to the server's maximums): `None` when none is saved.
    async fn restore(
        &self,
        _id: &str,
        _limits: SandboxLimits,
    ) -> Option<Result<Restored, SandboxError>> {
        None
    }

    /// Whether a sandbox is saved under `id`.
    fn has_saved(&self, _id: &str) -> bool {
        false
    }

    /// The memory cap and timeout the sandbox saved under `id` was saved
    /// with, as its record says (`None`: none saved, or unreadable).
    fn saved_limits(&self, _id: &str) -> Option<SavedLimits> {
        None
    }

    /// The sandboxes saved when the server last stopped, not restored yet.
    fn saved(&self) -> Vec<SavedSandbox> {
        Vec::new()
    }

    /// Deletes the saved sandbox `id`; whether there was one.
    fn delete_saved(&self, _id: &str) -> bool {
        false
    }
}

/// The limits a saved sandbox's record gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SavedLimits {
    /// Its memory cap, in bytes.
    pub memory_bytes: u64,
    /// Its wall-clock limit per execution.
    pub timeout: std::time::Duration,
}

/// A sandbox brought back by [`Backend::restore`].
pub struct Restored {
    /// The sandbox.
    pub interpreter: Box<dyn CodeInterpreter>,
    /// Its limits (the memory cap and timeout it was saved with, lowered to
    /// the server's maximums).
    pub limits: SandboxLimits,
    /// Whether its variables came back too (otherwise only its files).
    pub state_kept: bool,
}

/// One live sandbox: an interpreter with state kept between executions.
///
/// The manager calls these one at a time per sandbox; implementations need
/// no locking of their own for that.
#[async_trait]
pub trait CodeInterpreter: Send + Sync {
    /// Runs code; state persists into the next call. An exception in the code
    /// or a limit is part of the returned [`Execution`], not an `Err`; `Err`
    /// means the sandbox could not run the code at all. `stop` stops the
    /// execution as a timeout would, and says why.
    async fn execute(
        &mut self,
        request: ExecRequest,
        stop: StopSignal,
    ) -> Result<Execution, SandboxError>;

    /// Installs packages given as requirement strings (`attrs==23.2.0`, ...)
    /// so that the running interpreter can import them right away. `stop`
    /// (the client's cancellation, or the sandbox closing) stops the install
    /// and leaves the sandbox as it was.
    async fn install(
        &mut self,
        requirements: &[String],
        progress: &(dyn Fn(String) + Send + Sync),
        stop: StopSignal,
    ) -> Result<InstallReport, SandboxError>;

    /// The sandbox's files.
    fn files(&self) -> &dyn FileInterface;

    /// Memory and disk the sandbox uses now.
    async fn usage(&self) -> ResourceUsage;

    /// The runtime this sandbox runs (e.g. `python-3.12`).
    fn runtime(&self) -> String;

    /// Releases everything the sandbox holds (interpreter, directory, remote VM).
    async fn close(&mut self);

    /// Saves the sandbox (named `id`) for the next start of the server and
    /// releases it; `Ok(false)` when this kind of sandbox is not saved.
    async fn save(&mut self, _id: &str) -> Result<bool, SandboxError> {
        Ok(false)
    }

    /// What of the sandbox comes back after the server restarts.
    fn kept_across_restarts(&self) -> KeptAcrossRestarts {
        KeptAcrossRestarts::Nothing
    }

    /// A new sandbox with this one's variables, imports and files as they
    /// are now (called between executions), to be known as `_new_id` (its
    /// owner's key); the two then diverge.
    async fn fork(&mut self, _new_id: &str) -> Result<Forked, SandboxError> {
        Err(SandboxError::InvalidArgument(format!(
            "sandboxes of the runtime '{}' cannot be forked: only local sandboxes of a runtime driven turn by turn (scientific) can",
            self.runtime()
        )))
    }
}

/// A sandbox made by [`CodeInterpreter::fork`].
pub struct Forked {
    /// The new sandbox.
    pub interpreter: Box<dyn CodeInterpreter>,
    /// Files the source's code held open, which the copy does not hold.
    pub open_files_not_carried: usize,
    /// Files and directories copied.
    pub files_copied: u64,
}

/// File operations on a sandbox's filesystem, with guest paths.
#[async_trait]
pub trait FileInterface: Send + Sync {
    /// Lists a directory (not recursively), at most `max_entries` entries.
    async fn list(&self, path: &GuestPath, max_entries: usize) -> Result<Listing, SandboxError>;

    /// Reads at most `max_bytes` of a file, from byte `offset`.
    async fn read(
        &self,
        path: &GuestPath,
        offset: u64,
        max_bytes: u64,
    ) -> Result<FileContent, SandboxError>;

    /// Writes a file atomically, creating parent directories; returns bytes written.
    async fn write(&self, path: &GuestPath, data: Vec<u8>) -> Result<u64, SandboxError>;

    /// A count that changes whenever something is written in the sandbox
    /// (`None`: not known): unchanged over an execution, it wrote nothing.
    fn write_count(&self) -> Option<u64> {
        None
    }

    /// Files written since `since` (at most a few, newest first) and how
    /// many more there are; nothing where that cannot be told cheaply.
    async fn changed_since(&self, since: std::time::SystemTime) -> (Vec<ChangedFile>, usize) {
        let _ = since;
        (Vec::new(), 0)
    }
}
