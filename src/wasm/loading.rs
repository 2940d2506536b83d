//! Loading a runtime into a [`GuestImage`], once per server: verify its files,
//! weave the disk-quota gates, compile (or read the module cache), prepare its
//! read-only mounts, and link it. A first compile of a large runtime takes
//! long, so [`ImageSlot`] tells whoever waits what the load is doing.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::OnceCell;
use wasmtime::{Engine, Linker, Module, Val};

use super::code_module::{self, InitialData, code_module};
use super::error::WasmError;
use super::guest_image::GuestImage;
use super::guest_program::program;
use super::guest_state::GuestState;
use super::host_memory::check_compile_memory;
use super::quota_gate::{self, Door};
use super::runtime::{RuntimeManifest, VerifiedRuntime, load_runtime};
use super::snapshot::Snapshot;
use super::{
    WasmSettings, door, engine, module_cache, mounts, preinit, tool_door, unused_snapshots,
};
use crate::packages::BuiltInPackages;
use crate::sandbox::budget::Budget;
use crate::sandbox::{Progress, SandboxError};

/// How often a waiting creation repeats what a long load is doing.
const PROGRESS_EVERY: Duration = Duration::from_secs(3);

/// Held while a module compiles: one compile at a time per process. Two at
/// once share wasmtime's compile threads, so a small runtime would wait as
/// long as a large one, and their memory peaks would add up.
static COMPILING: Mutex<()> = Mutex::new(());

/// One runtime's image, loaded on first use, and what its load is doing.
#[derive(Default)]
pub(crate) struct ImageSlot {
    /// The loaded image.
    pub cell: OnceCell<Arc<GuestImage>>,
    /// What a slow step of the load is doing now, and since when.
    phase: Mutex<Option<(String, Instant)>>,
}

impl ImageSlot {
    fn set_phase(&self, phase: Option<String>) {
        *self.phase.lock().unwrap_or_else(|p| p.into_inner()) =
            phase.map(|text| (text, Instant::now()));
    }

    fn phase(&self) -> Option<(String, Duration)> {
        self.phase
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|(text, since)| (text.clone(), since.elapsed()))
    }

    /// Waits for `load` (this slot's load, or another caller's), telling
    /// `progress` what a slow step is doing when it starts and every few
    /// seconds after.
    pub(crate) async fn wait_reporting<F>(
        &self,
        load: F,
        progress: Option<&Progress>,
    ) -> Result<Arc<GuestImage>, SandboxError>
    where
        F: Future<Output = Result<Arc<GuestImage>, SandboxError>>,
    {
        let Some(progress) = progress else {
            return load.await;
        };
        tokio::pin!(load);
        let mut last: Option<(String, Instant)> = None;
        loop {
            tokio::select! {
                done = &mut load => return done,
                _ = tokio::time::sleep(Duration::from_millis(250)) => {
                    let Some((text, elapsed)) = self.phase() else { continue };
                    let due = match &last {
                        Some((said, at)) => *said != text || at.elapsed() >= PROGRESS_EVERY,
                        None => true,
                    };
                    if due {
                        progress.report(format!("{text}: {} s so far", elapsed.as_secs()));
                        last = Some((text, Instant::now()));
                    }
                }
            }
        }
    }
}

/// Loads the runtime `name` (blocking: run it on a blocking thread).
pub(crate) fn load(
    settings: &WasmSettings,
    engine: Engine,
    executor: tokio::runtime::Handle,
    memory_budget: Arc<Budget>,
    manifest: &RuntimeManifest,
    slot: &ImageSlot,
) -> Result<Arc<GuestImage>, SandboxError> {
    let name = manifest.name.as_str();
    let records = settings.cache_dir.join("verified");
    let runtime = load_runtime(
        &settings.runtime_dir,
        manifest,
        &settings.default_runtime,
        Some(&records),
    )
    .map_err(WasmError::from)?;
    if let Some(missing) = runtime
        .manifest
        .wasm_features
        .iter()
        .find(|f| !engine::SUPPORTED.contains(f))
    {
        return Err(WasmError::UnsupportedFeature {
            runtime: name.to_owned(),
            feature: *missing,
        }
        .into());
    }
    let mounts =
        mounts::prepare(&runtime, &settings.cache_dir).map_err(|reason| WasmError::Mounts {
            runtime: name.to_owned(),
            reason: Box::new(reason),
        })?;
    let state_key = preinit_key(&runtime.manifest, &mounts, &settings.preload);
    let module = module(settings, &engine, &runtime, slot);
    slot.set_phase(None);
    let (module, turns) = module?;
    let built_in = match runtime.distributions() {
        Some((path, compiled)) => BuiltInPackages::from_zip(path, compiled).map_err(|reason| {
            WasmError::BuiltInPackages {
                path: path.to_owned(),
                reason,
            }
        })?,
        None => BuiltInPackages::default(),
    };
    let pre = link(&engine, &module, &runtime.manifest).map_err(|e| WasmError::Link {
        runtime: name.to_owned(),
        reason: e.to_string(),
    })?;
    let snapshot = match turns {
        Turns::No => None,
        Turns::Yes(data) => {
            let made = snapshot(
                settings, &engine, &pre, &runtime, &mounts, &executor, slot, &state_key, data,
            );
            slot.set_phase(None);
            let made = made?;
            remove_unused_snapshots(&settings.cache_dir, &state_key);
            Some(Arc::new(made))
        }
    };
    let initial_memory = match &snapshot {
        Some(snapshot) => snapshot.memory_bytes(),
        None => initial_memory(&module),
    };
    Ok(Arc::new(GuestImage {
        engine,
        pre,
        manifest: runtime.manifest,
        executor,
        fuel_metered: settings.engine.fuel,
        turns: snapshot.is_some(),
        snapshot,
        initial_memory,
        state_key,
        mounts,
        built_in: Arc::new(built_in),
        memory_budget,
        driver_program: std::sync::OnceLock::new(),
    }))
}

/// Whether a runtime is driven turn by turn (and so starts from a
/// snapshot), with its initial data when it was just read.
enum Turns {
    /// It runs the driver's loop to its end.
    No,
    /// It is; the data of its module's segments, if at hand.
    Yes(Option<InitialData>),
}

/// The runtime's compiled module: for a turn-driven runtime its code module
/// (see [`code_module`]), otherwise the module with the quota gates woven
/// in; from the cache when it is there (without reading the runtime's
/// module), else compiled now and cached. Only a turn-driven runtime's code
/// module is ever cached under its code key, and only another under its
/// gated key.
fn module(
    settings: &WasmSettings,
    engine: &Engine,
    runtime: &VerifiedRuntime,
    slot: &ImageSlot,
) -> Result<(Module, Turns), SandboxError> {
    let cache = &settings.cache_dir;
    let manifest = &runtime.manifest;
    if let Some(module) = module_cache::load(engine, cache, &code_key(manifest)) {
        return Ok((module, Turns::Yes(None)));
    }
    if let Some(module) = module_cache::load(engine, cache, &gated_key(manifest)) {
        return Ok((module, Turns::No));
    }
    let wasm = runtime.read_module().map_err(WasmError::from)?;
    let turns = preinit::supports_turns(&wasm);
    let woven = woven(&manifest.name, &wasm)?;
    drop(wasm);
    if !turns {
        let module = compiled(
            settings,
            engine,
            runtime,
            &gated_key(manifest),
            &woven,
            slot,
        )?;
        return Ok((module, Turns::No));
    }
    let (code, data) = code_module(&woven).map_err(|source| WasmError::CodeModule {
        runtime: manifest.name.clone(),
        source,
    })?;
    drop(woven);
    let module = compiled(settings, engine, runtime, &code_key(manifest), &code, slot)?;
    Ok((module, Turns::Yes(Some(data))))
}

/// The cache key of a turn-driven runtime's code module.
fn code_key(manifest: &RuntimeManifest) -> String {
    format!(
        "{}-gate{}-code{}",
        &manifest.sha256[..24],
        quota_gate::GATE_VERSION,
        code_module::CODE_MODULE_VERSION
    )
}

/// The cache key of a runtime's module with the quota gates woven in.
fn gated_key(manifest: &RuntimeManifest) -> String {
    format!(
        "{}-gate{}",
        &manifest.sha256[..24],
        quota_gate::GATE_VERSION
    )
}

/// Compiles `wasm` (the runtime's module with the quota gates woven in, or
/// its code module) and caches it under `key`.
fn compiled(
    settings: &WasmSettings,
    engine: &Engine,
    runtime: &VerifiedRuntime,
    key: &str,
    wasm: &[u8],
    slot: &ImageSlot,
) -> Result<Module, SandboxError> {
    let manifest = &runtime.manifest;
    let cache = &settings.cache_dir;
    // Nothing cached: this is the expensive first start.
    let _compiling = wait_for_compiler(manifest, slot);
    // Whoever held the lock may have compiled this very module meanwhile.
    if let Some(module) = module_cache::load(engine, cache, key) {
        return Ok(module);
    }
    if let Some(needed_mb) = manifest.compile_memory_mb {
        check_compile_memory(&manifest.name, needed_mb, cache).map_err(WasmError::from)?;
    }
    let phase = compiling_phase(manifest) + &other_settings_note(cache, engine, key);
    tracing::info!(
        runtime = %manifest.name,
        "{phase}; `mcp-code-sandbox prepare {}` does this ahead of time",
        manifest.name
    );
    slot.set_phase(Some(phase));
    let module = module_cache::compile_and_store(engine, cache, key, wasm).map_err(|e| {
        WasmError::Compile {
            path: runtime.module_path.clone(),
            reason: e.to_string(),
        }
    })?;
    Ok(module)
}

/// The runtime `name`'s module with the disk-quota gates woven in; a module
/// that cannot carry them is refused, never run without them.
fn woven(name: &str, wasm: &[u8]) -> Result<Vec<u8>, SandboxError> {
    let woven = quota_gate::weave(wasm).map_err(|source| WasmError::Weave {
        runtime: name.to_owned(),
        source,
    })?;
    tracing::debug!(gated = ?woven.gated, call_sites = woven.call_sites, door = ?woven.door, "added disk-quota gates");
    Ok(woven.module)
}

/// The snapshot every sandbox of a turn-driven runtime starts from: from the
/// cache, or made now by running the runtime once (see [`preinit`]) in an
/// instance of its code module, `pre`. `data` is its module's initial data
/// when at hand (otherwise the module is read again for it). Its cache key
/// covers everything the snapshot depends on: the runtime, the gates, the
/// code module, the driver, the preloaded modules, the environment and the
/// mounts; not the engine's settings, which change no guest state.
#[allow(clippy::too_many_arguments)]
fn snapshot(
    settings: &WasmSettings,
    engine: &Engine,
    pre: &wasmtime::InstancePre<GuestState>,
    runtime: &VerifiedRuntime,
    mounts: &[mounts::ReadOnlyMount],
    executor: &tokio::runtime::Handle,
    slot: &ImageSlot,
    key: &str,
    data: Option<InitialData>,
) -> Result<Snapshot, SandboxError> {
    let manifest = &runtime.manifest;
    let cache = &settings.cache_dir;
    if let Some(snapshot) = Snapshot::load(cache, key) {
        return Ok(snapshot);
    }
    let _making = Snapshot::making(cache, key);
    if let Some(snapshot) = Snapshot::load(cache, key) {
        return Ok(snapshot); // another server made it meanwhile
    }
    let data = match data {
        Some(data) => data,
        None => {
            let wasm = runtime.read_module().map_err(WasmError::from)?;
            let woven = woven(&manifest.name, &wasm)?;
            drop(wasm);
            code_module(&woven)
                .map_err(|source| WasmError::CodeModule {
                    runtime: manifest.name.clone(),
                    source,
                })?
                .1
        }
    };
    let imports = if settings.preload.is_empty() {
        "nothing preloaded".to_owned()
    } else {
        format!("importing {}", settings.preload.join(", "))
    };
    let phase = format!(
        "preparing the runtime '{}' (first use only; later starts load it from the cache): starting Python once and {imports}",
        manifest.name,
    );
    tracing::info!(
        "{phase}; `mcp-code-sandbox prepare {}` does this ahead of time",
        manifest.name
    );
    slot.set_phase(Some(phase));
    let scratch = cache.join(format!("preinit-{}-{}", std::process::id(), &key[..12]));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).map_err(|source| WasmError::Scratch {
        path: scratch.clone(),
        source,
    })?;
    let plan = preinit::PreinitPlan {
        engine,
        pre,
        data: &data,
        manifest,
        mounts,
        preload: &settings.preload,
        scratch: &scratch,
        cache_dir: cache,
        key,
    };
    let started = Instant::now();
    let built = preinit::build(&plan, executor);
    let _ = std::fs::remove_dir_all(&scratch);
    let snapshot = built.map_err(|reason| WasmError::Preinit {
        runtime: manifest.name.clone(),
        reason,
    })?;
    tracing::info!(
        seconds = started.elapsed().as_secs_f64(),
        bytes = snapshot.memory_bytes(),
        "pre-initialised the runtime"
    );
    Ok(snapshot)
}

/// Removes the snapshots no server has used for a while (see
/// [`unused_snapshots`]), saying what went.
fn remove_unused_snapshots(cache_dir: &Path, in_use: &str) {
    let removed = unused_snapshots::remove_unused(cache_dir, in_use, std::time::SystemTime::now());
    if removed.snapshots > 0 || removed.bytes > 0 {
        tracing::info!(
            snapshots = removed.snapshots,
            megabytes = removed.bytes >> 20,
            "removed runtime snapshots no server has used for {} days (another build or another SANDBOX_PRELOAD; one that is needed again is made again)",
            unused_snapshots::UNUSED_DAYS
        );
    }
}

/// Bytes of linear memory an instance of `module` starts with.
fn initial_memory(module: &Module) -> u64 {
    module
        .exports()
        .find_map(|e| e.ty().memory().map(|m| m.minimum()))
        .unwrap_or(0)
        .saturating_mul(64 << 10)
}

/// The cache key of a runtime's pre-initialised module.
fn preinit_key(
    manifest: &RuntimeManifest,
    mounts: &[mounts::ReadOnlyMount],
    preload: &[String],
) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    let mut add = |part: &str| {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part.as_bytes());
    };
    add(&manifest.sha256);
    add(program());
    add(&manifest.site_packages);
    for flag in &manifest.python_flags {
        add(flag);
    }
    for (key, value) in &manifest.env {
        add(key);
        add(value);
    }
    for mount in mounts {
        add(&mount.guest);
    }
    add(&preload.len().to_string());
    for module in preload {
        add(module);
    }
    let digest = hash.finalize();
    let hex: String = digest.iter().take(12).map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-gate{}-code{}-preinit{}-{hex}",
        &manifest.sha256[..24],
        quota_gate::GATE_VERSION,
        code_module::CODE_MODULE_VERSION,
        preinit::PREINIT_VERSION
    )
}

/// Takes the compile lock, saying so when another runtime's compile holds it.
fn wait_for_compiler(
    manifest: &RuntimeManifest,
    slot: &ImageSlot,
) -> std::sync::MutexGuard<'static, ()> {
    match COMPILING.try_lock() {
        Ok(guard) => guard,
        Err(_) => {
            slot.set_phase(Some(format!(
                "the runtime '{}' waits for another runtime's first compile to finish before its own",
                manifest.name
            )));
            COMPILING.lock().unwrap_or_else(|p| p.into_inner())
        }
    }
}

/// What a first compile says it is doing, with the manifest's figures.
/// Why a runtime the cache already holds is compiled again, if that is why:
/// it was compiled for other engine settings (fuel metering, or another build).
fn other_settings_note(cache: &Path, engine: &Engine, key: &str) -> String {
    if module_cache::built_for_other_settings(cache, engine, key) {
        "; the cache holds it compiled for other engine settings (SANDBOX_FUEL, whose metering is compiled into the code, or another build of this server), so it is prepared once more for these".to_owned()
    } else {
        String::new()
    }
}

fn compiling_phase(manifest: &RuntimeManifest) -> String {
    let mut text = format!(
        "compiling the runtime '{}' to native code (first use only; later starts load it from the cache",
        manifest.name
    );
    match (manifest.compile_seconds, manifest.compile_memory_mb) {
        (Some(seconds), Some(mb)) => {
            text.push_str(&format!(
                "; it takes about {seconds} s and {mb} MiB of memory on 2 cores)"
            ));
        }
        (Some(seconds), None) => text.push_str(&format!("; it takes about {seconds} s)")),
        _ => text.push(')'),
    }
    text
}

/// Links a module with WASI preview 1, the stubs its manifest declares, and
/// nothing else. The quota gates' door (see [`quota_gate`]) is answered by
/// the host instead of wasmtime-wasi.
pub(super) fn link(
    engine: &Engine,
    module: &Module,
    manifest: &RuntimeManifest,
) -> wasmtime::Result<wasmtime::InstancePre<GuestState>> {
    const WASI: &str = "wasi_snapshot_preview1";
    let mut linker: Linker<GuestState> = Linker::new(engine);
    wasmtime_wasi::p1::add_to_linker_async(&mut linker, GuestState::wasi)?;
    linker.allow_shadowing(true);
    let wasi_imports: Vec<&str> = module
        .imports()
        .filter(|i| i.module() == WASI)
        .map(|i| i.name())
        .collect();
    match Door::among(wasi_imports) {
        // fd_allocate is unsupported by wasmtime-wasi anyway: it answers only
        // the gates (and "not supported" to anything else).
        Some(Door::FdAllocate) => {
            linker.func_wrap(
                WASI,
                "fd_allocate",
                |mut caller: wasmtime::Caller<'_, GuestState>, fd: i32, offset: i64, len: i64| {
                    door::answer(&mut caller, fd, offset, len)
                },
            )?;
        }
        // Advice is only advice: real calls are accepted and not acted on.
        Some(Door::FdAdvise) => {
            linker.func_wrap(
                WASI,
                "fd_advise",
                |mut caller: wasmtime::Caller<'_, GuestState>,
                 fd: i32,
                 offset: i64,
                 len: i64,
                 _advice: i32| {
                    if offset < 0 {
                        door::answer(&mut caller, fd, offset, len)
                    } else {
                        0
                    }
                },
            )?;
        }
        _ => {}
    }
    for import in module.imports() {
        if import.module() == WASI {
            continue;
        }
        if let Some(door) = &manifest.door
            && door.module == import.module()
            && door.name == import.name()
        {
            tool_door::define(&mut linker, door)?;
            continue;
        }
        let Some(stub) = manifest
            .host_stubs
            .iter()
            .find(|s| s.module == import.module() && s.name == import.name())
        else {
            return Err(wasmtime::Error::msg(format!(
                "the module imports {}.{}, which its manifest does not declare as a [[host_stub]]",
                import.module(),
                import.name()
            )));
        };
        let Some(ty) = import.ty().func().cloned() else {
            return Err(wasmtime::Error::msg(format!(
                "the import {}.{} is not a function",
                import.module(),
                import.name()
            )));
        };
        let answer = stub.returns;
        let results: Vec<_> = ty.results().collect();
        if !(results.is_empty()
            || (results.len() == 1 && results[0].matches(&wasmtime::ValType::I32)))
        {
            return Err(wasmtime::Error::msg(format!(
                "the import {}.{} does not return one i32, so no stub can answer it",
                import.module(),
                import.name()
            )));
        }
        linker.func_new(import.module(), import.name(), ty, move |_, _, out| {
            if let Some(slot) = out.first_mut() {
                *slot = Val::I32(answer);
            }
            Ok(())
        })?;
    }
    linker.instantiate_pre(module)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compiling_phase_quotes_the_manifest_figures() {
        let tmp = tempfile::tempdir().unwrap();
        let manifest = super::super::runtime::RuntimeCatalog::scan(tmp.path())
            .unwrap()
            .get("scientific")
            .unwrap()
            .clone();
        let text = compiling_phase(&manifest);
        assert!(text.contains("'scientific'"), "{text}");
        let seconds = format!("about {} s", manifest.compile_seconds.unwrap());
        let memory = format!("{} MiB", manifest.compile_memory_mb.unwrap());
        assert!(text.contains(&seconds) && text.contains(&memory), "{text}");
    }

    /// A guest that opens a file, renumbers it onto stdout (or stdout onto
    /// it), then writes 4 MiB to fd 1, run against the real WASI host with
    /// its real gates and output capture.
    #[tokio::test(flavor = "multi_thread")]
    async fn renumbering_onto_or_from_stdout_leaves_the_output_captured_and_capped() {
        use super::super::capture::OutputCapture;
        use super::super::guest_io::{GuestLink, TOKEN_LEN};
        use crate::sandbox::quota::{DiskQuota, QuotaLedger};
        let guest = wat::parse_str(
            r#"(module
              (import "wasi_snapshot_preview1" "fd_allocate" (func (param i32 i64 i64) (result i32)))
              (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
              (import "wasi_snapshot_preview1" "fd_renumber" (func $renumber (param i32 i32) (result i32)))
              (import "wasi_snapshot_preview1" "path_open" (func $open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
              (memory (export "memory") 1)
              (data (i32.const 100) "f.txt")
              ;; onto: 1 renumbers the file onto stdout, 0 stdout onto the file.
              ;; Returns fd_renumber's errno.
              (func (export "run") (param $onto i32) (result i32)
                (local $fd i32) (local $errno i32) (local $i i32)
                (drop (call $open (i32.const 3) (i32.const 0) (i32.const 100) (i32.const 5)
                  (i32.const 1) (i64.const 0x1fffffff) (i64.const 0x1fffffff) (i32.const 0) (i32.const 200)))
                (local.set $fd (i32.load (i32.const 200)))
                (local.set $errno
                  (if (result i32) (local.get $onto)
                    (then (call $renumber (local.get $fd) (i32.const 1)))
                    (else (call $renumber (i32.const 1) (local.get $fd)))))
                ;; 1024 writes of 4 KiB of 'x' to fd 1.
                (memory.fill (i32.const 1024) (i32.const 120) (i32.const 4096))
                (i32.store (i32.const 0) (i32.const 1024))
                (i32.store (i32.const 4) (i32.const 4096))
                (loop $again
                  (drop (call $write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
                  (local.set $i (i32.add (local.get $i) (i32.const 1)))
                  (br_if $again (i32.lt_u (local.get $i) (i32.const 1024))))
                (local.get $errno)))"#,
        )
        .unwrap();
        let settings = super::super::engine::EngineSettings {
            fuel: false,
            ..Default::default()
        };
        let engine = super::super::engine::build_engine(settings, Default::default()).unwrap();
        let module = Module::new(&engine, quota_gate::weave(&guest).unwrap().module).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let manifest = super::super::runtime::RuntimeCatalog::scan(tmp.path())
            .unwrap()
            .get("python-3.12")
            .unwrap()
            .clone();
        let pre = link(&engine, &module, &manifest).unwrap();
        for onto in [1, 0] {
            let dir = tempfile::tempdir().unwrap();
            let handle =
                cap_std::fs::Dir::open_ambient_dir(dir.path(), cap_std::ambient_authority())
                    .unwrap();
            let ledger = QuotaLedger::new(
                Arc::new(handle),
                dir.path(),
                DiskQuota::unlimited(),
                crate::sandbox::allocation::Allocation::default(),
                Budget::unlimited(),
            );
            let guest_link = GuestLink::new([b'0'; TOKEN_LEN], false);
            let state =
                GuestState::for_preinit(&manifest, &[], dir.path(), guest_link.clone(), ledger)
                    .unwrap();
            let _reply = guest_link.send(
                &[],
                b"",
                0,
                None,
                0,
                OutputCapture::memory(64 << 10),
                OutputCapture::memory(64 << 10),
            );
            let mut store = wasmtime::Store::new(&engine, state);
            #[cfg(not(guest_stop_by_fault))]
            store.epoch_deadline_async_yield_and_update(1);
            let instance = pre.instantiate_async(&mut store).await.unwrap();
            let run = instance
                .get_typed_func::<i32, i32>(&mut store, "run")
                .unwrap();
            let errno = run.call_async(&mut store, onto).await.unwrap();
            assert_eq!(errno, 8, "onto {onto}: EBADF");
            let (stdout, _) = guest_link.take_output();
            let stdout = stdout.finish();
            assert_eq!(
                stdout.total_bytes,
                4 << 20,
                "onto {onto}: every byte reached the capture"
            );
            assert!(
                stdout.truncated && stdout.text.len() < (64 << 10) + 1024,
                "onto {onto}: and it is capped"
            );
            let file = std::fs::metadata(dir.path().join("f.txt")).unwrap();
            assert_eq!(file.len(), 0, "onto {onto}: nothing went to the file");
        }
    }

    #[test]
    fn an_undeclared_import_is_refused_by_name() {
        let engine =
            super::super::engine::build_engine(Default::default(), Default::default()).unwrap();
        let wasm =
            wat::parse_str(r#"(module (import "host" "call" (func (param i32) (result i32))))"#)
                .unwrap();
        let module = Module::new(&engine, wasm).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let mut manifest = super::super::runtime::RuntimeCatalog::scan(tmp.path())
            .unwrap()
            .get("python-3.12")
            .unwrap()
            .clone();
        let Err(err) = link(&engine, &module, &manifest) else {
            panic!("an undeclared import must not link")
        };
        assert!(err.to_string().contains("host.call"), "{err}");
        manifest.host_stubs = vec![super::super::runtime::HostStub {
            module: "host".into(),
            name: "call".into(),
            returns: -1,
        }];
        assert!(link(&engine, &module, &manifest).is_ok());
    }
}
