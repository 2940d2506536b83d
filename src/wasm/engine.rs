//! The wasmtime engine all local sandboxes share, and the clock that lets a
//! busy guest yield.
//!
//! Deny by default: the engine enables no WebAssembly proposal beyond what
//! wasmtime turns on for stable features (the Wasm 3.0 set, which includes
//! exception handling: the scientific runtime's C++ and `setjmp` code needs
//! it, so it is named explicitly and listed in [`SUPPORTED`]), compiles with Cranelift, and keeps
//! wasmtime's default guard regions and Spectre mitigations.
//!
//! A ticker thread runs every [`EPOCH_TICK`]. Where a running guest is
//! stopped by blocking its memory (Linux on x86-64 and arm64, see
//! [`super::fault_handler`]), compiled code has no epoch checks and the
//! ticker asks [`super::interrupt::tick`] which guests to stop. Elsewhere
//! every store checks the engine's epoch, which the ticker advances, so a
//! running guest yields at least that often and can be stopped there.

use std::time::Duration;

use wasmtime::{Config, Engine, OptLevel, ProfilingStrategy};

#[cfg(unix)]
use super::guest_memory::GuestMemoryCreator;
use super::runtime::WasmFeature;

/// The proposals a runtime's manifest may ask for: every engine enables them.
pub const SUPPORTED: &[WasmFeature] = &[WasmFeature::Exceptions];

/// How often the ticker checks running guests (and, where compiled code
/// checks epochs, advances the epoch).
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Engine settings that change compiled code, so they key the module cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EngineSettings {
    /// Whether fuel is metered.
    pub fuel: bool,
    /// Most bytes of native stack that WebAssembly frames may use.
    pub max_wasm_stack: usize,
}

impl Default for EngineSettings {
    fn default() -> Self {
        Self {
            fuel: false,
            max_wasm_stack: 8 << 20,
        }
    }
}

/// A profiler the engine tells where each compiled guest function lies, so
/// a profile of the server (`perf record`, VTune) names the guest's
/// WebAssembly functions instead of showing anonymous code. It changes no
/// compiled code, so it does not key the module cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GuestProfiler {
    /// No profiler (the default).
    #[default]
    None,
    /// `/tmp/perf-<pid>.map`, which `perf report` reads (Linux).
    PerfMap,
    /// A jitdump file for `perf inject --jit` (Linux).
    JitDump,
    /// Intel VTune's JIT API.
    VTune,
}

impl GuestProfiler {
    /// The names accepted by `SANDBOX_GUEST_PROFILER`.
    pub const NAMES: &[&str] = &["none", "perfmap", "jitdump", "vtune"];

    /// The profiler called `name` (one of [`GuestProfiler::NAMES`]).
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "none" => Some(Self::None),
            "perfmap" => Some(Self::PerfMap),
            "jitdump" => Some(Self::JitDump),
            "vtune" => Some(Self::VTune),
            _ => None,
        }
    }

    fn strategy(self) -> ProfilingStrategy {
        match self {
            Self::None => ProfilingStrategy::None,
            Self::PerfMap => ProfilingStrategy::PerfMap,
            Self::JitDump => ProfilingStrategy::JitDump,
            Self::VTune => ProfilingStrategy::VTune,
        }
    }
}

/// Builds the engine, reporting compiled guest code to `profiler`.
pub fn build_engine(settings: EngineSettings, profiler: GuestProfiler) -> wasmtime::Result<Engine> {
    let mut config = Config::new();
    config
        .profiler(profiler.strategy())
        .consume_fuel(settings.fuel)
        // On by default in wasmtime 48 (so this does not change the module
        // cache's key); said here because a runtime relies on it.
        .wasm_exceptions(true)
        .epoch_interruption(cfg!(not(guest_stop_by_fault)))
        .max_wasm_stack(settings.max_wasm_stack)
        // Host calls run on the same fiber stack: leave them room beyond the
        // WebAssembly frames, so a deep guest recursion traps instead of
        // overflowing the host's stack.
        .async_stack_size(settings.max_wasm_stack + (2 << 20))
        .cranelift_opt_level(OptLevel::Speed)
        .parallel_compilation(true)
        // No table from native code back to wasm offsets: nothing here reads
        // them (a trap is reported by its kind and the guest's own Python
        // traceback), and for the 99 MB scientific module they are about a
        // third of what a compile holds in memory and of the compiled file.
        .generate_address_map(false)
        // Only for outside unwinders (wasmtime walks guest frames by their
        // frame pointers, as `perf` does): about a tenth of a compile's
        // memory.
        .native_unwind_info(false);
    // Memories the server can map files into (snapshots, forks, restores).
    // wasmtime's own copy-on-write images need its own memories: modules
    // with data segments copy them in instead (turn-driven runtimes have
    // none: their memory comes from their snapshot).
    #[cfg(unix)]
    config
        .with_host_memory(std::sync::Arc::new(GuestMemoryCreator))
        .memory_init_cow(false);
    // Before wasmtime installs its own handler, which then hands on the
    // faults that are not its guests' (see fault_handler).
    #[cfg(guest_stop_by_fault)]
    super::fault_handler::install();
    let engine = Engine::new(&config)?;
    start_ticker(&engine);
    Ok(engine)
}

/// Ticks every [`EPOCH_TICK`] on a thread of its own, until the engine is
/// dropped.
fn start_ticker(engine: &Engine) {
    let weak = engine.weak();
    let spawned = std::thread::Builder::new()
        .name("wasm-ticker".into())
        .spawn(move || {
            loop {
                std::thread::sleep(EPOCH_TICK);
                let Some(engine) = weak.upgrade() else {
                    return;
                };
                tick(&engine);
            }
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "could not start the ticker thread: running guests cannot be stopped for their CPU time");
    }
}

/// One tick: the guests to stop are stopped.
#[cfg(guest_stop_by_fault)]
fn tick(_engine: &Engine) {
    super::interrupt::tick();
}

/// One tick: the epoch advances, and running guests yield.
#[cfg(not(guest_stop_by_fault))]
fn tick(engine: &Engine) {
    engine.increment_epoch();
}
