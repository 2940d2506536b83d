//! The local backend: CPython compiled to WASI, running inside this process
//! under wasmtime, one instance and one host directory per sandbox.
//!
//! What a guest gets is listed in [`interpreter`]'s documentation: one
//! directory as `/`, no network, no host environment, and the limits of its
//! sandbox. Runtimes are loaded (verified, compiled or read from the module
//! cache, linked) once per server and then instantiated per sandbox.

mod background_sync;
mod capture;
mod code_module;
mod compiler;
mod cpu_clock;
mod door;
pub mod engine;
pub mod error;
#[cfg(guest_stop_by_fault)]
mod fault_handler;
mod file_check;
mod file_view;
mod files_on_loan;
mod globals;
mod guest_image;
mod guest_io;
mod guest_memory;
mod guest_program;
mod guest_state;
mod guest_thread;
pub mod host_memory;
mod import_check;
mod interpreter;
mod interrupt;
mod journal;
mod kept_memory;
mod loading;
mod manifest_error;
mod memory_limiter;
pub mod module_cache;
mod mount_error;
mod mounts;
mod outcome;
mod page_layout;
mod page_store;
mod pool;
mod preinit;
mod preinit_error;
mod protocol;
pub mod quota_gate;
mod record_seal;
pub mod runtime;
mod sandbox;
mod save_error;
mod saved;
mod settling;
mod snapshot;
mod start_error;
mod starting_memory;
mod state_error;
mod store_error;
mod tool_door;
mod trap;
mod turns;
mod unused_snapshots;
mod written_pages;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tokio::sync::OnceCell;
use wasmtime::Engine;

use self::engine::{EngineSettings, GuestProfiler, build_engine};
use self::error::WasmError;
use self::guest_image::GuestImage;
use self::loading::ImageSlot;
use self::pool::WarmPool;
use self::runtime::{RuntimeCatalog, RuntimeError, RuntimeManifest};
use self::sandbox::{Keeping, SandboxDoor, WasmSandbox};
use self::saved::{ImageIdentity, SavedStore};
use crate::door::DoorSettings;
use crate::door::http::HttpDoor;
use crate::door::toolbox::Toolbox;
use crate::door::upstream::Upstreams;
use crate::packages::Installer;
use crate::sandbox::budget::{Budget, BudgetsView};
use crate::sandbox::root::SandboxRoot;
use crate::sandbox::{
    Backend, BackendKind, CodeInterpreter, Progress, Restored, SandboxError, SandboxLimits,
    SandboxSpec, SavedLimits, SavedSandbox,
};

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
    /// The profiler told about compiled guest code (none by default).
    pub profiler: GuestProfiler,
    /// Threads that run guests (0: one per CPU).
    pub threads: usize,
    /// Interpreters of the default runtime kept started ahead of time (0: none).
    pub pool_size: usize,
    /// Limits the pooled interpreters start with (a sandbox's own memory
    /// limit replaces them when one is handed out).
    pub pool_limits: crate::sandbox::SandboxLimits,
    /// Memory all sandboxes together may grow to (`None`: half the machine's).
    pub memory_budget_bytes: Option<u64>,
    /// Disk all sandboxes together may hold (`None`: half the free space
    /// where sandboxes live).
    pub disk_budget_bytes: Option<u64>,
    /// Modules imported into the snapshot that sandboxes of a turn-driven
    /// runtime start from (e.g. `numpy`, `matplotlib.pyplot`).
    pub preload: Vec<String>,
    /// How long sandboxes saved at shutdown are kept (zero: not saved).
    pub keep_saved: std::time::Duration,
    /// Most bytes saved sandboxes may take together (0: not saved).
    pub saved_max_bytes: u64,
    /// The guest's door to the host: HTTP to the allowed hosts, and caps.
    pub door: DoorSettings,
}

/// The local WASI backend.
pub struct WasmBackend {
    settings: WasmSettings,
    /// The runtimes this server knows, read at start.
    catalog: RuntimeCatalog,
    engine: Engine,
    /// Claimed on first use, so an unusable root is reported by the call that
    /// needs it (and retried by the next), not by a server that fails to start.
    root: OnceCell<Arc<SandboxRoot>>,
    executor: Option<tokio::runtime::Runtime>,
    images: Mutex<HashMap<String, Arc<ImageSlot>>>,
    pool: OnceCell<Arc<WarmPool>>,
    /// Installs packages into this backend's sandboxes (none: install_package
    /// says how to configure a package source).
    installer: Option<Arc<Installer>>,
    /// Memory all interpreters together may grow to.
    memory_budget: Arc<Budget>,
    /// Sandboxes kept across a restart (none: saving is off).
    saved: Option<Arc<SavedStore>>,
    /// HTTP for guests, shared by every sandbox.
    http: Arc<HttpDoor>,
    /// The upstream MCP servers guests may call, shared by every sandbox.
    upstreams: Arc<Upstreams>,
}

impl WasmBackend {
    /// Reads the runtime manifests, builds the engine and the guest threads.
    /// The sandbox root is claimed and runtimes are loaded on first use (or by
    /// [`WasmBackend::preload`]). An unknown default runtime is an error here,
    /// so a server with a bad `SANDBOX_RUNTIME` stops at start.
    pub fn new(settings: WasmSettings) -> Result<Self, SandboxError> {
        // Refused first, before the saved store trusts anything in it.
        crate::sandbox::root::make_private_root(&settings.sandbox_root)?;
        let catalog = RuntimeCatalog::scan(&settings.runtime_dir).map_err(WasmError::from)?;
        catalog
            .get(&settings.default_runtime)
            .map_err(WasmError::DefaultRuntime)?;
        let memory_budget = Budget::new(
            settings
                .memory_budget_bytes
                .or_else(crate::sandbox::host_resources::default_memory_budget)
                .unwrap_or(u64::MAX),
        );
        let engine = build_engine(settings.engine, settings.profiler)
            .map_err(|e| WasmError::Engine(e.to_string()))?;
        let http = Arc::new(HttpDoor::new(settings.door.http.clone()).map_err(WasmError::from)?);
        let upstreams = Arc::new(Upstreams::new(&settings.door.upstreams));
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
            .map_err(WasmError::GuestThreads)?;
        let (settings_root, settings_keep, settings_saved_max) = (
            settings.sandbox_root.clone(),
            settings.keep_saved,
            settings.saved_max_bytes,
        );
        Ok(Self {
            settings,
            catalog,
            engine,
            root: OnceCell::new(),
            executor: Some(executor),
            images: Mutex::new(HashMap::new()),
            pool: OnceCell::new(),
            installer: None,
            memory_budget,
            saved: SavedStore::open(&settings_root, settings_keep, settings_saved_max)
                .map(Arc::new),
            http,
            upstreams,
        })
    }

    /// Starts the upstream MCP servers now (on the guests' host-work threads), so the
    /// first guest to list its tools does not wait for them.
    pub fn start_upstreams(&self) {
        if let Some(executor) = &self.executor
            && !self.upstreams.is_empty()
        {
            let _entered = executor.enter();
            self.upstreams.start_all();
        }
    }

    /// The door a sandbox of `image` gets: HTTP to the server's allowed
    /// hosts, or to `asked` (which may only narrow them). A runtime without
    /// a door gets none, and asking for hosts on it is refused.
    fn sandbox_door(
        &self,
        image: &GuestImage,
        asked: Option<Vec<String>>,
    ) -> Result<Option<Arc<SandboxDoor>>, SandboxError> {
        if image.manifest.door.is_none() {
            return match asked {
                None => Ok(None),
                Some(_) => Err(SandboxError::InvalidArgument(format!(
                    "the runtime '{}' has no door to the host, so its code cannot make HTTP requests; create the sandbox with runtime \"scientific\" to use allow_hosts",
                    image.manifest.name
                ))),
            };
        }
        let hosts = match &asked {
            None => self.http.allow_hosts().clone(),
            Some(asked) => self
                .http
                .allow_hosts()
                .narrow(asked)
                .map_err(SandboxError::InvalidArgument)?,
        };
        let http = self.http.handler(hosts);
        let handler: Arc<dyn crate::door::DoorHandler> = if self.upstreams.is_empty() {
            http
        } else {
            Arc::new(Toolbox::new(vec![http, self.upstreams.clone()]))
        };
        Ok(Some(Arc::new(SandboxDoor {
            handler,
            caps: self.settings.door.caps,
            asked,
        })))
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

    /// The runtimes a sandbox can start with now (their files are fetched):
    /// name and summary, the default first.
    pub fn offered_runtimes(&self) -> Vec<(String, String)> {
        let mut offered: Vec<(String, String)> = self
            .catalog
            .fetched(&self.settings.runtime_dir)
            .into_iter()
            .map(|m| (m.name.clone(), m.summary.clone().unwrap_or_default()))
            .collect();
        offered.sort_by_key(|(name, _)| *name != self.settings.default_runtime);
        offered
    }

    /// The manifest of a known runtime (unknown names are refused with the
    /// list of known ones).
    pub fn manifest(&self, name: &str) -> Result<&RuntimeManifest, SandboxError> {
        self.catalog.get(name).map_err(|e| match e {
            RuntimeError::Unknown { .. } => SandboxError::InvalidArgument(format!(
                "{e}; pick one of those with create_sandbox's runtime argument, or leave it out for the default ({})",
                self.settings.default_runtime
            )),
            other => WasmError::from(other).into(),
        })
    }

    /// Loads a runtime now, so the first sandbox does not wait for it, and
    /// fills the warm pool when it is the default runtime.
    pub async fn preload(&self, name: Option<&str>) -> Result<(), SandboxError> {
        let name = name.unwrap_or(&self.settings.default_runtime);
        self.root().await?;
        self.image(name, None).await?;
        if name == self.settings.default_runtime {
            self.pool().await?;
        }
        Ok(())
    }

    /// Whether the default runtime is loaded (compiled, or read from the
    /// module cache) and its warm pool made: new sandboxes start without
    /// waiting for a compile.
    pub fn is_ready(&self) -> bool {
        self.pool.get().is_some()
    }

    /// Interpreters waiting ready in the warm pool.
    pub fn pool_ready(&self) -> usize {
        self.pool.get().map_or(0, |pool| pool.ready_count())
    }

    /// The warm pool of the default runtime, created (and filling) on first use.
    async fn pool(&self) -> Result<&Arc<WarmPool>, SandboxError> {
        self.pool
            .get_or_try_init(|| async {
                let image = self.image(&self.settings.default_runtime, None).await?;
                let pool = WarmPool::new(
                    image,
                    self.root().await?.clone(),
                    self.settings.pool_size,
                    self.settings.pool_limits.clone(),
                    self.saved.as_ref().map(|s| s.disk_budget()),
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
                let disk_budget = self.settings.disk_budget_bytes;
                let saved = self.saved.clone();
                tokio::task::spawn_blocking(move || {
                    // A server that died since the saved store opened is
                    // taken in before its directory goes.
                    let open = |take_in: &dyn Fn(&Path)| {
                        SandboxRoot::open_taking_in(&path, disk_budget, take_in).map(Arc::new)
                    };
                    match &saved {
                        Some(saved) => saved.while_taking_in(open),
                        None => open(&|_| {}),
                    }
                })
                .await
                .map_err(|source| WasmError::Task {
                    what: "opening the sandbox root",
                    source,
                })?
            })
            .await
    }

    /// The loaded runtime `name`, loading it on first use. While a slow load
    /// (a first compile) runs, `progress` hears what it is doing.
    async fn image(
        &self,
        name: &str,
        progress: Option<&Progress>,
    ) -> Result<Arc<GuestImage>, SandboxError> {
        // Only known names get a slot (a name from a client must not grow the map).
        let manifest = self.manifest(name)?;
        let slot = self
            .images
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(manifest.name.clone())
            .or_default()
            .clone();
        let load = slot
            .cell
            .get_or_try_init(|| self.load_image(manifest.clone(), slot.clone()));
        slot.wait_reporting(async { load.await.cloned() }, progress)
            .await
    }

    /// Restores the saved sandbox `id` of the runtime `runtime`.
    async fn restore_from(
        &self,
        store: &Arc<SavedStore>,
        id: &str,
        runtime: &str,
        mut limits: SandboxLimits,
    ) -> Result<Restored, SandboxError> {
        let image = self.image(runtime, None).await?;
        let identity = ImageIdentity {
            key: image.state_key.clone(),
            id: image.image_id().to_owned(),
        };
        let restorable = {
            let store = store.clone();
            let id = id.to_owned();
            tokio::task::spawn_blocking(move || store.take(&id, |_| Some(identity.clone())))
                .await
                .map_err(|source| WasmError::Task {
                    what: "reading a saved sandbox",
                    source,
                })?
        }
        .ok_or_else(|| SandboxError::UnknownSandbox(id.to_owned()))??;
        // Never more than the manager gave (its maximums), even if the
        // record changed since it was read.
        limits.memory_bytes = limits.memory_bytes.min(restorable.meta.memory_bytes);
        limits.timeout = limits
            .timeout
            .min(std::time::Duration::from_millis(restorable.meta.timeout_ms));
        let state_kept = restorable.memory.memory.is_some() && image.turns;
        let door = self.sandbox_door(&image, restorable.meta.allow_hosts.clone())?;
        let root = self.root().await?.clone();
        let keeping = Keeping {
            saver: store.clone(),
            id: id.to_owned(),
        };
        let sandbox = WasmSandbox::restore(image, root, restorable, limits.clone(), keeping)
            .await?
            .with_installer(self.installer.clone())
            .with_door(door);
        Ok(Restored {
            interpreter: Box::new(sandbox),
            limits,
            state_kept,
        })
    }

    /// What keeps a sandbox named `id` across restarts (none: saving is off).
    fn keeping(&self, id: &str) -> Option<Keeping> {
        self.saved.as_ref().map(|saver| Keeping {
            saver: saver.clone(),
            id: id.to_owned(),
        })
    }

    async fn load_image(
        &self,
        manifest: RuntimeManifest,
        slot: Arc<ImageSlot>,
    ) -> Result<Arc<GuestImage>, SandboxError> {
        let settings = self.settings.clone();
        let engine = self.engine.clone();
        let memory_budget = self.memory_budget.clone();
        let executor = self
            .executor
            .as_ref()
            .map(|e| e.handle().clone())
            .ok_or(WasmError::ShuttingDown)?;
        tokio::task::spawn_blocking(move || {
            loading::load(&settings, engine, executor, memory_budget, &manifest, &slot)
        })
        .await
        .map_err(|source| WasmError::Task {
            what: "loading the runtime",
            source,
        })?
    }
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
        let image = self.image(&name, spec.progress.as_ref()).await?;
        let door = self.sandbox_door(&image, spec.allow_hosts.clone())?;
        // Room to run code beyond what the interpreter starts with.
        let least = image.initial_memory + (16 << 20);
        if spec.limits.memory_bytes < least {
            return Err(SandboxError::InvalidArgument(format!(
                "the runtime '{name}' starts with {} MiB of memory: memory_mb must be at least {}",
                image.initial_memory >> 20,
                least.div_ceil(1 << 20)
            )));
        }
        // A one-off sandbox is not kept: it is closed after its execution.
        let keeping = if spec.one_off {
            None
        } else {
            self.keeping(&spec.id)
        };
        let sandbox = if name == self.settings.default_runtime
            && let Some(warm) = self.pool().await?.take(&spec.limits)
            && let Some((dir, ledger, interpreter)) = warm.into_parts()
        {
            WasmSandbox::from_warm(image, root, dir, ledger, interpreter, spec.limits, keeping)
        } else {
            WasmSandbox::start(image, root, spec.limits, keeping).await?
        };
        Ok(Box::new(
            sandbox
                .with_installer(self.installer.clone())
                .with_door(door)
                .finish(),
        ))
    }

    async fn restore(
        &self,
        id: &str,
        limits: SandboxLimits,
    ) -> Option<Result<Restored, SandboxError>> {
        let store = self.saved.clone()?;
        match store.runtime_of(id)? {
            Some(runtime) => Some(self.restore_from(&store, id, &runtime, limits).await),
            // An unreadable record: the store says why.
            None => match store.take(id, |_| None)? {
                Err(refused) => Some(Err(refused)),
                Ok(_) => Some(Err(SandboxError::UnknownSandbox(id.to_owned()))),
            },
        }
    }

    fn has_saved(&self, id: &str) -> bool {
        let Some(saved) = &self.saved else {
            return false;
        };
        // A server on the same root that died may have held it (looking
        // costs a lock attempt per server directory under the root, and
        // waits for a taking-in under way, which may be bringing it).
        saved.runtime_of(id).is_some() || {
            saved.adopt_abandoned();
            saved.runtime_of(id).is_some()
        }
    }

    fn saved_limits(&self, id: &str) -> Option<SavedLimits> {
        self.saved.as_ref()?.limits_of(id)
    }

    fn saved(&self) -> Vec<SavedSandbox> {
        self.saved.as_ref().map(|s| s.list()).unwrap_or_default()
    }

    fn delete_saved(&self, id: &str) -> bool {
        self.saved.as_ref().is_some_and(|s| s.delete(id))
    }

    fn default_runtime(&self) -> String {
        self.settings.default_runtime.clone()
    }

    fn budgets(&self) -> Option<BudgetsView> {
        Some(BudgetsView {
            memory: self.memory_budget.view(),
            disk: self.root.get().map(|root| root.disk_budget().view()),
        })
    }
}

impl Drop for WasmBackend {
    fn drop(&mut self) {
        if let Some(executor) = self.executor.take() {
            if !self.upstreams.is_empty() {
                // On a thread of its own: this one may be a runtime's worker.
                let upstreams = &self.upstreams;
                std::thread::scope(|scope| {
                    scope.spawn(|| {
                        executor.block_on(async {
                            let stopping = upstreams.stop_all();
                            tokio::time::timeout(std::time::Duration::from_secs(5), stopping).await
                        })
                    });
                });
            }
            executor.shutdown_background();
        }
    }
}
