//! The local backend: CPython compiled to WASI, running inside this process
//! under wasmtime, one instance and one host directory per sandbox.
//!
//! What a guest gets is listed in [`interpreter`]'s documentation: one
//! directory as `/`, no network, no host environment, and the limits of its
//! sandbox. Runtimes are loaded (verified, compiled or read from the module
//! cache, linked) once per server and then instantiated per sandbox.

mod capture;
pub mod engine;
mod guest_io;
mod interpreter;
pub mod module_cache;
mod pool;
mod protocol;
pub mod quota_gate;
pub mod runtime;
mod sandbox;
mod trap;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::sync::OnceCell;
use wasmtime::{Engine, Linker, Module};

use self::engine::{EngineSettings, build_engine};
use self::interpreter::{GuestImage, GuestState};
use self::pool::WarmPool;
use self::runtime::load_runtime;
use self::sandbox::WasmSandbox;
use crate::packages::Installer;
use crate::sandbox::root::SandboxRoot;
use crate::sandbox::{Backend, BackendKind, CodeInterpreter, SandboxError, SandboxSpec};

/// Settings of the local backend.
#[derive(Clone, Debug)]
pub struct WasmSettings {
    /// Directory holding the runtimes' modules (and extra manifests).
    pub runtime_dir: PathBuf,
    /// Runtime used when a sandbox asks for none.
    pub default_runtime: String,
    /// Directory for compiled modules.
    pub cache_dir: PathBuf,
    /// Directory under which sandbox directories are created.
    pub sandbox_root: PathBuf,
    /// Engine settings.
    pub engine: EngineSettings,
    /// Threads that run guests (0: one per CPU).
    pub threads: usize,
    /// Interpreters of the default runtime kept started ahead of time (0: none).
    pub pool_size: usize,
    /// Limits the pooled interpreters start with (a sandbox's own memory
    /// limit replaces them when one is handed out).
    pub pool_limits: crate::sandbox::SandboxLimits,
}

/// The local WASI backend.
pub struct WasmBackend {
    settings: WasmSettings,
    engine: Engine,
    /// Claimed on first use, so an unusable root is reported by the call that
    /// needs it (and retried by the next), not by a server that fails to start.
    root: OnceCell<Arc<SandboxRoot>>,
    executor: Option<tokio::runtime::Runtime>,
    images: Mutex<HashMap<String, Arc<OnceCell<Arc<GuestImage>>>>>,
    pool: OnceCell<Arc<WarmPool>>,
    /// Installs packages into this backend's sandboxes (none: install_package
    /// says how to configure a package source).
    installer: Option<Arc<Installer>>,
}

impl WasmBackend {
    /// Builds the engine and the guest threads. The sandbox root is claimed
    /// and runtimes are loaded on first use (or by [`WasmBackend::preload`]).
    pub fn new(settings: WasmSettings) -> Result<Self, SandboxError> {
        let engine = build_engine(settings.engine)
            .map_err(|e| SandboxError::Runtime(format!("cannot set up wasmtime: {e}")))?;
        let threads = if settings.threads == 0 {
            std::thread::available_parallelism().map_or(2, |n| n.get())
        } else {
            settings.threads
        };
        let executor = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("wasm-guest")
            .enable_all()
            .build()
            .map_err(|e| SandboxError::Runtime(format!("cannot start the guest threads: {e}")))?;
        Ok(Self {
            settings,
            engine,
            root: OnceCell::new(),
            executor: Some(executor),
            images: Mutex::new(HashMap::new()),
            pool: OnceCell::new(),
            installer: None,
        })
    }

    /// Gives this backend's sandboxes a package installer.
    pub fn with_installer(mut self, installer: Arc<Installer>) -> Self {
        self.installer = Some(installer);
        self
    }

    /// The settings it runs with.
    pub fn settings(&self) -> &WasmSettings {
        &self.settings
    }

    /// Loads a runtime now, so the first sandbox does not wait for it, and
    /// fills the warm pool when it is the default runtime.
    pub async fn preload(&self, name: Option<&str>) -> Result<(), SandboxError> {
        let name = name.unwrap_or(&self.settings.default_runtime);
        self.root().await?;
        self.image(name).await?;
        if name == self.settings.default_runtime {
            self.pool().await?;
        }
        Ok(())
    }

    /// The warm pool of the default runtime, created (and filling) on first use.
    async fn pool(&self) -> Result<&Arc<WarmPool>, SandboxError> {
        self.pool
            .get_or_try_init(|| async {
                let image = self.image(&self.settings.default_runtime).await?;
                let pool = WarmPool::new(
                    image,
                    self.root().await?.clone(),
                    self.settings.pool_size,
                    self.settings.pool_limits.clone(),
                );
                pool.refill();
                Ok(pool)
            })
            .await
    }

    /// This server's directory under the sandbox root, claimed on first use
    /// (which also removes what killed servers left there).
    async fn root(&self) -> Result<&Arc<SandboxRoot>, SandboxError> {
        self.root
            .get_or_try_init(|| async {
                let path = self.settings.sandbox_root.clone();
                tokio::task::spawn_blocking(move || SandboxRoot::open(&path).map(Arc::new))
                    .await
                    .map_err(|e| {
                        SandboxError::Runtime(format!("opening the sandbox root failed: {e}"))
                    })?
            })
            .await
    }

    /// The loaded runtime `name`, loading it on first use.
    async fn image(&self, name: &str) -> Result<Arc<GuestImage>, SandboxError> {
        let cell = {
            let mut images = self.images.lock().unwrap_or_else(|p| p.into_inner());
            images.entry(name.to_owned()).or_default().clone()
        };
        cell.get_or_try_init(|| self.load_image(name.to_owned()))
            .await
            .cloned()
    }

    async fn load_image(&self, name: String) -> Result<Arc<GuestImage>, SandboxError> {
        let settings = self.settings.clone();
        let engine = self.engine.clone();
        let executor = self
            .executor
            .as_ref()
            .map(|e| e.handle().clone())
            .ok_or_else(|| SandboxError::Runtime("the backend is shutting down".into()))?;
        tokio::task::spawn_blocking(move || {
            let runtime = load_runtime(&settings.runtime_dir, &name, &settings.default_runtime)
                .map_err(|e| SandboxError::Runtime(e.to_string()))?;
            let compile_error = |e: wasmtime::Error| {
                SandboxError::Runtime(format!(
                    "cannot compile the Python runtime {}: {e}",
                    runtime.module_path.display()
                ))
            };
            let sha = &runtime.manifest.sha256;
            let gated_key = format!("{}-gate{}", &sha[..24], quota_gate::GATE_VERSION);
            let (module, quota_gated) = match module_cache::load(&engine, &settings.cache_dir, &gated_key) {
                Some(module) => (module, true),
                None => match quota_gate::weave(&runtime.module_bytes) {
                    Ok(woven) => {
                        tracing::debug!(gated = ?woven.gated, call_sites = woven.call_sites, "added disk-quota gates");
                        let module = module_cache::compile_and_store(&engine, &settings.cache_dir, &gated_key, &woven.module)
                            .map_err(compile_error)?;
                        (module, true)
                    }
                    Err(why) => {
                        tracing::warn!("runtime {name}: disk quotas are checked only between executions: {why}");
                        let module = module_cache::load_or_compile(&engine, &settings.cache_dir, &sha[..24], &runtime.module_bytes)
                            .map_err(compile_error)?;
                        (module, false)
                    }
                },
            };
            let pre = link(&engine, &module).map_err(|e| {
                SandboxError::Runtime(format!("cannot link the Python runtime: {e}"))
            })?;
            Ok(Arc::new(GuestImage {
                engine,
                pre,
                manifest: runtime.manifest,
                executor,
                fuel_metered: settings.engine.fuel,
                quota_gated,
            }))
        })
        .await
        .map_err(|e| SandboxError::Runtime(format!("loading the runtime failed: {e}")))?
    }
}

/// Links a module with WASI preview 1 and nothing else; `fd_allocate`
/// (unsupported by wasmtime-wasi) answers the quota gates instead.
fn link(engine: &Engine, module: &Module) -> wasmtime::Result<wasmtime::InstancePre<GuestState>> {
    let mut linker: Linker<GuestState> = Linker::new(engine);
    wasmtime_wasi::p1::add_to_linker_async(&mut linker, GuestState::wasi)?;
    linker.allow_shadowing(true);
    linker.func_wrap(
        "wasi_snapshot_preview1",
        "fd_allocate",
        |mut caller: wasmtime::Caller<'_, GuestState>, fd: i32, offset: i64, len: i64| {
            caller.data_mut().answer_gate(fd, offset, len)
        },
    )?;
    linker.instantiate_pre(module)
}

#[async_trait]
impl Backend for WasmBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Wasm
    }

    async fn create(&self, spec: SandboxSpec) -> Result<Box<dyn CodeInterpreter>, SandboxError> {
        let name = spec
            .runtime
            .clone()
            .unwrap_or_else(|| self.settings.default_runtime.clone());
        let root = self.root().await?.clone();
        let image = self.image(&name).await?;
        if name == self.settings.default_runtime
            && let Some(warm) = self.pool().await?.take()
            && let Some((dir, ledger, interpreter)) = warm.into_parts()
        {
            let sandbox =
                WasmSandbox::from_warm(image, root, dir, ledger, interpreter, spec.limits);
            return Ok(Box::new(sandbox.with_installer(self.installer.clone())));
        }
        let sandbox = WasmSandbox::start(image, root, spec.limits).await?;
        Ok(Box::new(sandbox.with_installer(self.installer.clone())))
    }

    fn default_runtime(&self) -> String {
        self.settings.default_runtime.clone()
    }
}

impl Drop for WasmBackend {
    fn drop(&mut self) {
        if let Some(executor) = self.executor.take() {
            executor.shutdown_background();
        }
    }
}
