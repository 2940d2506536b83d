//! [`WasmError`]: why the wasm backend could not set up, load a runtime, or
//! start, fork or save an interpreter, worded for whoever reads it (the
//! model, or the operator when the server stops at start): what failed, on
//! which runtime or file, and what to do. Lower errors stay attached as
//! sources; the wasmtime errors, which are not standard errors, as text.

use std::path::PathBuf;

use tokio::task::JoinError;

use super::host_memory::NotEnoughMemory;
use super::mount_error::MountError;
use super::preinit_error::PreinitError;
use super::quota_gate::WeaveError;
use super::runtime::{RuntimeError, WasmFeature};
use super::save_error::SaveError;
use super::start_error::StartError;
use super::state_error::StateError;
use crate::packages::BuiltInError;
use crate::sandbox::copy_tree::CopyError;

/// Why the wasm backend failed.
#[derive(Debug, thiserror::Error)]
pub enum WasmError {
    /// A runtime's manifest or module is unknown, invalid, missing or corrupt.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),

    /// The default runtime (`SANDBOX_RUNTIME`) cannot be used.
    #[error("SANDBOX_RUNTIME: {0}")]
    DefaultRuntime(#[source] RuntimeError),

    /// The wasmtime engine could not be built from the settings.
    #[error("cannot set up wasmtime: {0}")]
    Engine(String),

    /// The HTTP client guests' requests go through could not be set up.
    #[error(transparent)]
    Http(#[from] crate::door::http::HttpSetupError),

    /// The threads that run guests could not be started.
    #[error("cannot start the guest threads: {0}")]
    GuestThreads(#[source] std::io::Error),

    /// The server is shutting down, so nothing new is loaded.
    #[error("the backend is shutting down")]
    ShuttingDown,

    /// A task doing blocking work for the backend panicked or was cancelled.
    #[error("{what} failed: {source}")]
    Task {
        /// What the task was doing, e.g. "loading the runtime".
        what: &'static str,
        /// Why the task ended.
        source: JoinError,
    },

    /// The runtime needs a WebAssembly feature the engine does not enable.
    #[error(
        "the runtime '{runtime}' needs the WebAssembly feature {feature:?}, which this server's engine does not enable"
    )]
    UnsupportedFeature {
        /// The runtime.
        runtime: String,
        /// The feature it declares.
        feature: WasmFeature,
    },

    /// The runtime's read-only mounts could not be prepared.
    #[error("cannot prepare the runtime '{runtime}': {reason}")]
    Mounts {
        /// The runtime.
        runtime: String,
        /// What went wrong (boxed: it is large next to the others).
        #[source]
        reason: Box<MountError>,
    },

    /// The list of packages built into the runtime could not be read.
    #[error("cannot read {path}: {reason}")]
    BuiltInPackages {
        /// The runtime's artifact holding them.
        path: PathBuf,
        /// What went wrong.
        #[source]
        reason: BuiltInError,
    },

    /// The machine has too little memory to compile the runtime.
    #[error(transparent)]
    NotEnoughMemory(#[from] NotEnoughMemory),

    /// The runtime's module cannot carry the disk-quota gates.
    #[error("the runtime '{runtime}' cannot carry the disk-quota gates: {source}")]
    Weave {
        /// The runtime.
        runtime: String,
        /// Why the gates could not be woven in.
        source: WeaveError,
    },

    /// The runtime's module did not compile.
    #[error("cannot compile the Python runtime {path}: {reason}")]
    Compile {
        /// The module file.
        path: PathBuf,
        /// What the compiler said.
        reason: String,
    },

    /// A scratch directory for pre-initialising could not be created.
    #[error("cannot create {path}: {source}")]
    Scratch {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },

    /// Starting Python once to snapshot it failed.
    #[error("cannot prepare the runtime '{runtime}': {reason}")]
    Preinit {
        /// The runtime.
        runtime: String,
        /// What went wrong.
        #[source]
        reason: PreinitError,
    },

    /// A turn-driven runtime's module could not be made into its code
    /// module (see `code_module`).
    #[error(
        "cannot prepare the runtime '{runtime}' to start from snapshots: {source}; fetch it again with ./fetch-python.sh --force"
    )]
    CodeModule {
        /// The runtime.
        runtime: String,
        /// What is wrong with its module.
        source: super::code_module::CodeModuleError,
    },

    /// The module could not be linked with WASI and its stubs.
    #[error("cannot link the Python runtime '{runtime}': {reason}")]
    Link {
        /// The runtime.
        runtime: String,
        /// What the linker said.
        reason: String,
    },

    /// An interpreter did not start (its message says why and what to do).
    #[error(transparent)]
    Start(#[from] StartError),

    /// The interpreter's state could not be captured.
    #[error(transparent)]
    Capture(#[from] StateError),

    /// A fork's files could not be copied (other than for lack of room).
    #[error("cannot fork: {0}")]
    ForkCopy(#[source] CopyError),

    /// A fork's interpreter did not start.
    #[error("cannot start the fork: {0}")]
    ForkStart(#[source] StartError),

    /// A sandbox could not be saved for after a restart.
    #[error("saving failed: {0}")]
    Save(#[source] SaveError),
}

/// The wasm backend's errors reach the core whole, as a backend error.
impl From<WasmError> for crate::sandbox::SandboxError {
    fn from(e: WasmError) -> Self {
        Self::Backend(Box::new(e))
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;
    use std::path::Path;

    use clap::Parser;

    use super::*;
    use crate::config::Config;
    use crate::wasm::{WasmBackend, WasmSettings};

    /// The wasm settings the command line `args` gives, with `runtime_dir`
    /// and a cache under `cache`.
    fn settings(runtime_dir: &Path, cache: &Path, args: &[&str]) -> WasmSettings {
        let mut argv = vec![
            "mcp-code-sandbox",
            "--runtime-dir",
            runtime_dir.to_str().unwrap(),
            "--cache-dir",
            cache.to_str().unwrap(),
        ];
        argv.extend_from_slice(args);
        let cli = crate::cli::Cli::try_parse_from(argv).unwrap();
        Config::from_settings(&cli.settings).unwrap().wasm
    }

    fn runtimes() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("runtime")
    }

    #[test]
    fn an_unknown_default_runtime_keeps_the_catalog_error_as_source() {
        let cache = tempfile::tempdir().unwrap();
        let settings = settings(&runtimes(), cache.path(), &["--runtime", "no-such-runtime"]);
        let Err(err) = WasmBackend::new(settings) else {
            panic!("an unknown default runtime must stop the backend");
        };
        assert!(
            err.to_string().starts_with(
                "SANDBOX_RUNTIME: unknown runtime 'no-such-runtime': known runtimes are"
            ),
            "{err}"
        );
        let source = err.source().and_then(|s| s.downcast_ref::<RuntimeError>());
        assert!(
            matches!(source, Some(RuntimeError::Unknown { name, .. }) if name == "no-such-runtime"),
            "the catalog's error is lost: {err:?}"
        );
        assert!(matches!(
            err.backend::<WasmError>(),
            Some(WasmError::DefaultRuntime(RuntimeError::Unknown { .. }))
        ));
    }

    #[tokio::test]
    async fn a_missing_module_is_a_runtime_error_callers_can_match() {
        let runtime_dir = tempfile::tempdir().unwrap();
        std::fs::copy(
            runtimes().join("python-3.12.toml"),
            runtime_dir.path().join("python-3.12.toml"),
        )
        .unwrap();
        let cache = tempfile::tempdir().unwrap();
        let settings = settings(
            runtime_dir.path(),
            cache.path(),
            &["--runtime", "python-3.12"],
        );
        let backend = WasmBackend::new(settings).unwrap();
        let err = backend.preload(None).await.unwrap_err();
        assert!(
            matches!(
                err.backend::<WasmError>(),
                Some(WasmError::Runtime(RuntimeError::Missing { .. }))
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("./fetch-python.sh"), "{err}");
    }
}
