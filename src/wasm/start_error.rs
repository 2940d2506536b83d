//! [`StartError`]: why an interpreter did not start, worded for the model
//! that reads it (through [`super::error::WasmError::Start`]).

use std::path::PathBuf;

use tokio::task::JoinError;

use super::trap::GuestExit;

/// Why an interpreter did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The sandbox's directory could not be given to the guest (wasmtime's
    /// error, which is not a standard error, as text).
    #[error("cannot open the sandbox directory: {0}")]
    SandboxDir(String),

    /// One of the runtime's read-only mounts could not be given to the guest.
    #[error("cannot open {} (the runtime's {guest}): {reason}", host.display())]
    Mount {
        /// The host directory.
        host: PathBuf,
        /// Where the guest sees it.
        guest: String,
        /// What wasmtime said.
        reason: String,
    },

    /// A state was to be restored into a runtime that cannot carry one.
    #[error("the runtime '{0}' cannot carry an interpreter's state")]
    NoState(String),

    /// The interpreter ended before it was ready.
    #[error("the Python runtime stopped while starting ({exit}){stderr}")]
    Exited {
        /// How it ended.
        exit: GuestExit,
        /// `: <its stderr>`, or nothing.
        stderr: String,
    },

    /// The interpreter was not ready in time.
    #[error("the Python runtime did not start within {0} s")]
    TimedOut(u64),

    /// The start was cancelled.
    #[error("start-up was cancelled")]
    Cancelled,

    /// The system would not start a thread for the interpreter.
    #[error("cannot start a thread for the interpreter (the system's thread limit?): {0}")]
    Thread(#[source] std::io::Error),

    /// The task starting a replacement interpreter panicked or was cancelled.
    #[error("restarting failed: {0}")]
    Restart(#[source] JoinError),
}
