//! [`WeaveError`]: why a module cannot carry the disk-quota gates.

/// Why a module cannot carry the gates. A runtime that cannot is refused:
/// without its gates, a guest's writes would go unaccounted.
#[derive(Debug, thiserror::Error)]
pub enum WeaveError {
    /// The bytes are not a WebAssembly module.
    #[error("the module does not parse ({0}): fetch the runtime again (./fetch-python.sh --force)")]
    Parse(String),
    /// Neither door is imported.
    #[error(
        "the module imports neither fd_allocate nor fd_advise, through which its disk-quota gates would ask the host: use a runtime built with wasi-libc, which imports them"
    )]
    NoDoor,
    /// A WASI import the gates rely on has another type than WASI's.
    #[error(
        "the module imports {0} with a type that is not WASI preview 1's: use a runtime built for wasi_snapshot_preview1"
    )]
    WrongType(String),
    /// `poll_oneoff` is imported without `clock_time_get`.
    #[error(
        "the module imports poll_oneoff but not clock_time_get, so its waits cannot be bounded: use a runtime built with wasi-libc, which imports both"
    )]
    NoClock,
    /// A gated import is reachable other than by a direct call.
    #[error(
        "the module refers to {import} {how}, so calls through that reference would bypass its disk-quota gate: use a runtime that calls its WASI imports directly (a wasi-libc build does)"
    )]
    Indirect {
        /// The import's name.
        import: String,
        /// Where the reference is.
        how: &'static str,
    },
}

impl From<wasmparser::BinaryReaderError> for WeaveError {
    fn from(e: wasmparser::BinaryReaderError) -> Self {
        Self::Parse(e.to_string())
    }
}
