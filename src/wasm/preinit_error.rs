//! [`PreinitError`]: why a runtime could not be pre-initialised (started
//! once and snapshotted, see [`super::preinit`]); the source of
//! [`super::error::WasmError::Preinit`].

use std::path::PathBuf;

use super::protocol::ReplyError;
use super::start_error::StartError;

/// Why pre-initialising a runtime failed.
#[derive(Debug, thiserror::Error)]
pub enum PreinitError {
    /// A step wasmtime or wizer refused (their errors, which are not
    /// standard errors, as text).
    #[error("{what}: {reason}")]
    Step {
        /// The step, e.g. "cannot instantiate the runtime".
        what: String,
        /// What wasmtime or wizer said.
        reason: String,
    },

    /// The scratch directory could not be opened.
    #[error("cannot open {}: {source}", path.display())]
    Scratch {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },

    /// The guest's state could not be set up.
    #[error(transparent)]
    Guest(#[from] StartError),

    /// A turn trapped or exited.
    #[error("{what} stopped the interpreter: {reason}; {stderr}")]
    Stopped {
        /// The turn.
        what: &'static str,
        /// How it stopped.
        reason: String,
        /// What the interpreter wrote to stderr.
        stderr: String,
    },

    /// A turn ended without the driver answering.
    #[error("{what} got no answer from the driver: {stderr}")]
    NoAnswer {
        /// The turn.
        what: &'static str,
        /// What the interpreter wrote to stderr.
        stderr: String,
    },

    /// The driver's answer could not be read.
    #[error("{what} got an unreadable answer from the driver: {source}")]
    BadReply {
        /// The turn.
        what: &'static str,
        /// What is wrong with it.
        source: ReplyError,
    },

    /// The turn's code raised an exception (a preloaded module failed to
    /// import, say).
    #[error("{what} failed: {name}: {value}{stderr}")]
    Raised {
        /// The turn.
        what: &'static str,
        /// The exception's name.
        name: String,
        /// Its value.
        value: String,
        /// ` (<stderr>)`, or nothing.
        stderr: String,
    },

    /// The snapshot could not be written into the module cache.
    #[error("cannot store the snapshot in {}: {source}", path.display())]
    Store {
        /// The cache directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },

    /// Files were left open, which a snapshot cannot carry.
    #[error("the pre-initialisation left {0} files open, which no sandbox would have")]
    FilesLeftOpen(usize),
}

impl PreinitError {
    /// A step `what` that wasmtime or wizer refused with `reason`.
    pub(crate) fn step(what: &str) -> impl FnOnce(wasmtime::Error) -> Self {
        let what = what.to_owned();
        move |reason| Self::Step {
            what,
            reason: format!("{reason:#}"),
        }
    }
}
