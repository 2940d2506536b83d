//! [`App`]: the backends and the sandbox manager built from a [`Config`] —
//! the factory that `INTERPRETER_TYPE` steers — the stdio server's life, and
//! the shutdown every way of serving ends with; and [`make_bundle`], which
//! starts the runtimes to prepare an air-gapped bundle.

mod make_bundle;

use std::sync::Arc;

use rmcp::ServiceExt;
use rmcp::transport::async_rw::AsyncRwTransport;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::e2b::E2bBackend;
use crate::metrics::{Metrics, Snapshot};
use crate::packages::Installer;
use crate::sandbox::host_resources;
use crate::sandbox::manager::SandboxManager;
use crate::sandbox::{Backend, BackendKind, SandboxError};
use crate::server::offer::Offer;
use crate::server::{SandboxServer, framing};
use crate::wasm::WasmBackend;

pub use make_bundle::make_bundle;

/// Keeps errors the server handles as a matter of course from capturing a
/// stack backtrace each when `RUST_BACKTRACE` is set: a guest's look-up of a
/// file that is not there is one (WASI reports it as an error, and wasmtime
/// captures two backtraces for it), and it took twice as long with them. It
/// sets `RUST_LIB_BACKTRACE=0` unless the user set it; panics still print
/// their backtrace under `RUST_BACKTRACE`.
///
/// # Safety
///
/// It changes the process's environment: no other thread may run yet (call
/// it first thing in `main`, or in a bench before it starts any).
pub unsafe fn no_backtraces_for_handled_errors() {
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        // SAFETY: the caller's promise: no other thread reads the
        // environment meanwhile.
        unsafe { std::env::set_var("RUST_LIB_BACKTRACE", "0") };
    }
}

/// A configured server: its backends and its sandboxes.
pub struct App {
    /// The configuration it was built from.
    pub config: Config,
    /// The live sandboxes.
    pub manager: Arc<SandboxManager>,
    /// The local backend.
    pub wasm: Arc<WasmBackend>,
    /// The E2B backend, when an API key is configured.
    pub e2b: Option<Arc<E2bBackend>>,
    /// What the server counts.
    pub metrics: Arc<Metrics>,
}

impl App {
    /// Builds the backends the configuration asks for, after raising the
    /// process's descriptor limit as far as it goes and fitting the
    /// per-sandbox open-file limit within it.
    pub fn build(mut config: Config) -> Result<Self, SandboxError> {
        if !config.wasm.door.upstreams.is_empty() {
            // Upstream commands run as this user: they must not read its secrets.
            host_resources::forbid_inspection();
        }
        if let Some(limit) = host_resources::raise_descriptor_limit()
            && let Some(fitted) = config.fit_open_files(limit, host_resources::SERVER_DESCRIPTORS)
        {
            tracing::warn!(
                fitted,
                process_limit = limit,
                "lowered SANDBOX_MAX_OPEN_FILES so that every sandbox at its limit still leaves the server descriptors; raise the process's limit (ulimit -n) to allow more"
            );
        }
        let installer = Arc::new(Installer::new(config.packages.clone()));
        let wasm = Arc::new(WasmBackend::new(config.wasm.clone())?.with_installer(installer));
        let mut backends: Vec<Arc<dyn Backend>> = vec![wasm.clone()];
        let e2b = match &config.e2b {
            Some(settings) => {
                let e2b = Arc::new(E2bBackend::new(settings.clone())?);
                backends.push(e2b.clone());
                Some(e2b)
            }
            None => None,
        };
        let manager = SandboxManager::new(config.manager.clone(), backends);
        Ok(Self {
            config,
            manager,
            wasm,
            e2b,
            metrics: Arc::new(Metrics::new()),
        })
    }

    /// Loads the default runtime in the background, logging what is wrong
    /// with it (sandbox creation reports the same to the client), and starts
    /// the upstream MCP servers.
    pub fn preload_in_background(&self) {
        self.wasm.start_upstreams();
        let wasm = self.wasm.clone();
        let wasm_is_default = self.config.manager.default_backend == BackendKind::Wasm;
        tokio::spawn(async move {
            if let Err(e) = wasm.preload(None).await {
                if wasm_is_default {
                    tracing::error!("{e}");
                } else {
                    tracing::info!("local wasm sandboxes are not available: {e}");
                }
            }
        });
    }

    /// The MCP tool server over this app's sandboxes.
    pub fn server(&self) -> SandboxServer {
        let offer = Offer {
            runtimes: self.wasm.offered_runtimes(),
            default_backend: self.config.manager.default_backend,
            e2b_template: self.config.e2b.as_ref().map(|e| e.template.clone()),
        };
        SandboxServer::new(self.manager.clone(), self.config.requests.clone(), offer)
            .with_metrics(self.metrics.clone())
    }

    /// Whether new sandboxes of the default backend can start without
    /// waiting: the local runtime loaded, or the E2B backend configured.
    pub fn is_ready(&self) -> bool {
        match self.config.manager.default_backend {
            BackendKind::Wasm => self.wasm.is_ready(),
            BackendKind::E2b => self.e2b.is_some(),
        }
    }

    /// The figures `/metrics` reads from the server.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            sandboxes: self.manager.count_by_backend(),
            pool_ready: self.wasm.pool_ready(),
            runtime_ready: self.wasm.is_ready(),
        }
    }

    /// Serves MCP on stdin/stdout until stdin closes or SIGINT/SIGTERM
    /// arrives, then closes every sandbox.
    pub async fn serve_stdio(self) -> anyhow::Result<()> {
        self.preload_in_background();
        let stop = CancellationToken::new();
        self.manager.spawn_reaper(stop.clone());
        let server = self.server();
        let max = self.config.requests.max_request_bytes;
        let guarded = framing::guard(tokio::io::stdin(), tokio::io::stdout(), max);
        let input_ended = guarded.input_ended.clone();
        tokio::select! {
            result = async {
                let transport = AsyncRwTransport::new_server(guarded.reader, guarded.writer)
                    .with_max_line_length(max.saturating_add(1));
                let running = server.serve_with_ct(transport, stop.clone()).await?;
                running.waiting().await?;
                anyhow::Ok(())
            } => {
                if let Err(e) = result {
                    tracing::warn!("the MCP session ended with an error: {e:#}");
                }
                tracing::info!("stdin closed; shutting down");
            }
            // A client that closes stdin is stopping the server (the official
            // SDKs kill it 2 s later): calls still running get a moment to
            // answer, then they are stopped and every sandbox saved.
            () = async {
                input_ended.cancelled().await;
                tokio::time::sleep(ANSWER_GRACE).await;
            } => tracing::info!("stdin closed with calls still running; stopping them and shutting down"),
            signal = shutdown_signal() => tracing::info!("received {signal}; shutting down"),
        }
        stop.cancel();
        self.shut_down().await;
        Ok(())
    }

    /// Ends serving: stops creations waiting on E2B, saves or closes every
    /// sandbox, and lets the E2B backend finish.
    pub async fn shut_down(&self) {
        if let Some(e2b) = &self.e2b {
            e2b.stop_creating();
        }
        self.manager.close_all().await;
        if let Some(e2b) = &self.e2b {
            e2b.shutdown().await;
        }
    }
}

/// How long calls still running when stdin closes get to answer before they
/// are stopped.
const ANSWER_GRACE: std::time::Duration = std::time::Duration::from_millis(300);

/// Waits for SIGINT or SIGTERM; returns its name.
pub async fn shutdown_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut int), Ok(mut term)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            std::future::pending::<()>().await;
            return "nothing";
        };
        tokio::select! {
            _ = int.recv() => "SIGINT",
            _ = term.recv() => "SIGTERM",
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        "Ctrl-C"
    }
}
