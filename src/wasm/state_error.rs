//! [`StateError`]: why an interpreter's state (its memory's pages and its
//! globals) could not be kept, forked, put into another instance, or read
//! back from a saved sandbox.

/// Why an interpreter's state could not be captured, restored or read.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The interpreter is not running, so it has no state to give.
    #[error("the interpreter has stopped")]
    Stopped,

    /// The runtime's interpreters never return between calls.
    #[error("this runtime's interpreters cannot be copied")]
    NotCopyable,

    /// The instance exports no linear memory.
    #[error("the runtime exports no memory")]
    NoMemory,

    /// An export named like a global is something else.
    #[error("{0} is not a global")]
    NotAGlobal(String),

    /// A global holds a value that cannot be copied (a reference).
    #[error("{name} holds a {kind}, which cannot be copied")]
    Uncopyable {
        /// The global's export name.
        name: String,
        /// What it holds.
        kind: String,
    },

    /// The saved memory is smaller than, or not a whole number of pages
    /// past, the memory the runtime starts with.
    #[error(
        "the saved memory ({saved} bytes) does not fit this runtime, whose memory starts at {have} bytes"
    )]
    DoesNotFit {
        /// Bytes saved.
        saved: usize,
        /// Bytes the new instance starts with.
        have: usize,
    },

    /// The new instance's memory could not grow to the saved size (wasmtime's
    /// error, which is not a standard error, as text).
    #[error("the memory cannot grow to the saved size: {0}")]
    CannotGrow(String),

    /// The new instance lacks a global the state names.
    #[error("the runtime has no global {0}")]
    NoSuchGlobal(String),

    /// A global could not be set (wasmtime's error as text).
    #[error("cannot set {name}: {reason}")]
    CannotSet {
        /// The global's export name.
        name: String,
        /// What wasmtime said.
        reason: String,
    },

    /// The bytes read back are not a saved state, or are damaged.
    #[error("{0}")]
    Damaged(&'static str),

    /// A global's kind is not one this server writes.
    #[error("unknown kind of global {0}")]
    UnknownKind(u8),

    /// The memory's pages could not be kept or mapped.
    #[error(transparent)]
    Store(#[from] super::store_error::StoreError),

    /// Pages of a file could not be mapped into the instance's memory.
    #[error(transparent)]
    Map(#[from] super::guest_memory::MapError),

    /// A file holding memory pages could not be read or written.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Why it failed.
        source: std::io::Error,
    },
}

impl StateError {
    /// A closure that wraps an I/O error with what was being done.
    pub(crate) fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> Self {
        move |source| Self::Io { what, source }
    }
}
