//! Pre-initialising a turn-driven runtime: run its interpreter's start-up,
//! the driver's set-up and the preloaded imports once, and write the result
//! as a new module whose memory and globals start where that run ended
//! (wasmtime-wizer's instrument and snapshot). Sandboxes of the runtime are
//! instances of that module: ready at once, sharing its memory image
//! copy-on-write until they write to it.
//!
//! The run happens in a scratch directory preopened as `/`, with the same
//! mounts in the same order and the same environment as every sandbox (the
//! C library remembers its preopens), and closes every file it opened.
//! What it fixes for all sandboxes and is refreshed per sandbox: the reply
//! token and the random generators (`random`, numpy's global generator,
//! `tempfile`'s names), by the hello each sandbox starts with. What stays
//! shared: the seed of `str` hashing, which CPython cannot change once
//! running.
//!
//! The module then has every mutable global exported, so that a running
//! sandbox's state can be copied whole (see [`super::state_image`]).

use std::path::Path;
use std::sync::Arc;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use wasmtime::{Config, Engine, Instance, Module, OptLevel, Store, Val};
use wasmtime_wizer::{InstanceState, SnapshotVal, Wizer};

use super::capture::OutputCapture;
use super::guest_io::{GuestLink, TOKEN_LEN};
use super::guest_program::program;
use super::interpreter::GuestState;
use super::loading::link;
use super::mounts::ReadOnlyMount;
use super::preinit_error::PreinitError;
use super::protocol::{Request, decode_reply};
use super::runtime::RuntimeManifest;
use super::turns::{SERVE, TurnExports};
use crate::sandbox::budget::Budget;
use crate::sandbox::quota::{DiskQuota, QuotaLedger};

/// Changes whenever what this module bakes into a snapshot changes, so
/// that cached pre-initialised modules are rebuilt.
pub(crate) const PREINIT_VERSION: u32 = 1;
/// The export that starts the interpreter (wizer's initialisation function).
const INIT_FUNC: &str = "wizer.initialize";

/// What a pre-initialisation needs.
pub(crate) struct PreinitPlan<'a> {
    /// The runtime's module, with the quota gates woven in.
    pub wasm: &'a [u8],
    /// Its manifest.
    pub manifest: &'a RuntimeManifest,
    /// Its read-only mounts, as every sandbox gets them.
    pub mounts: &'a [ReadOnlyMount],
    /// Modules to import ahead of any code.
    pub preload: &'a [String],
    /// An empty directory to run in.
    pub scratch: &'a Path,
}

/// Whether a module can be pre-initialised and driven turn by turn.
pub(crate) fn supports_turns(wasm: &[u8]) -> bool {
    let mut found = [false; 3];
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        let Ok(wasmparser::Payload::ExportSection(exports)) = payload else {
            continue;
        };
        for export in exports.into_iter().flatten() {
            for (i, name) in ["turn", "host_alloc", INIT_FUNC].iter().enumerate() {
                found[i] |= export.name == *name;
            }
        }
        break;
    }
    found.iter().all(|&f| f)
}

/// Runs the plan and returns the pre-initialised module (blocking: it
/// compiles the module once and runs the imports; call it on a blocking
/// thread, inside a Tokio runtime).
pub(crate) fn build(
    plan: &PreinitPlan<'_>,
    runtime: &tokio::runtime::Handle,
) -> Result<Vec<u8>, PreinitError> {
    let mut wizer = Wizer::new();
    wizer.init_func(INIT_FUNC);
    let (cx, instrumented) = wizer
        .instrument(plan.wasm)
        .map_err(PreinitError::step("the runtime cannot be pre-initialised"))?;
    let engine = init_engine().map_err(PreinitError::step(
        "cannot set up wasmtime for the pre-initialisation",
    ))?;
    let module = Module::new(&engine, &instrumented).map_err(PreinitError::step(
        "cannot compile the runtime for its pre-initialisation",
    ))?;
    let pre = link(&engine, &module, plan.manifest).map_err(PreinitError::step(
        "cannot link the runtime for its pre-initialisation",
    ))?;
    let snapshot = runtime.block_on(async {
        let (mut store, instance) = initialised(plan, &engine, &pre).await?;
        let mut state = Captured {
            store: &mut store,
            instance,
        };
        wizer
            .snapshot(&cx, &mut state)
            .await
            .map_err(PreinitError::step(
                "cannot snapshot the pre-initialised runtime",
            ))
    })?;
    // Export every mutable global of the result, so sandboxes can be copied.
    let (_, exported) = Wizer::new()
        .instrument(&snapshot)
        .map_err(PreinitError::step("cannot export the snapshot's globals"))?;
    Ok(exported)
}

/// An engine for the one run of the instrumented module: compiled for
/// compile speed, with neither fuel nor epochs (its code is thrown away).
fn init_engine() -> wasmtime::Result<Engine> {
    let mut config = Config::new();
    config
        .wasm_exceptions(true)
        .max_wasm_stack(8 << 20)
        .async_stack_size(10 << 20)
        .cranelift_opt_level(OptLevel::None)
        .parallel_compilation(true);
    Engine::new(&config)
}

/// Instantiates the instrumented module and brings it to the state every
/// sandbox starts from.
async fn initialised(
    plan: &PreinitPlan<'_>,
    engine: &Engine,
    pre: &wasmtime::InstancePre<GuestState>,
) -> Result<(Store<GuestState>, Instance), PreinitError> {
    let dir = Dir::open_ambient_dir(plan.scratch, ambient_authority()).map_err(|source| {
        PreinitError::Scratch {
            path: plan.scratch.to_owned(),
            source,
        }
    })?;
    let ledger = QuotaLedger::new(
        Arc::new(dir),
        plan.scratch,
        DiskQuota::unlimited(),
        crate::sandbox::allocation::Allocation::default(),
        Budget::unlimited(),
    );
    let link_ = GuestLink::new([b'0'; TOKEN_LEN], true);
    let state = GuestState::for_preinit(
        plan.manifest,
        plan.mounts,
        plan.scratch,
        link_.clone(),
        ledger,
    )?;
    let mut store = Store::new(engine, state);
    store.limiter(|s| s.limiter());
    let instance = pre
        .instantiate_async(&mut store)
        .await
        .map_err(PreinitError::step("cannot instantiate the runtime"))?;
    for name in ["_initialize", INIT_FUNC] {
        if let Ok(start) = instance.get_typed_func::<(), ()>(&mut store, name) {
            start
                .call_async(&mut store, ())
                .await
                .map_err(PreinitError::step(&format!("the runtime's {name} failed")))?;
        }
    }
    let exports = TurnExports::find(&mut store, &instance)
        .map_err(PreinitError::step("the runtime cannot be driven by turns"))?;
    let token = link_.token_text().to_owned();
    let hello = Request::Hello {
        token: &token,
        site_packages: &plan.manifest.site_packages,
        want_program: false,
    };
    let setup = format!("_sandbox_turns = True\n{}", program());
    turn(
        &mut store,
        &exports,
        &link_,
        &hello,
        setup.as_bytes(),
        "the driver's set-up",
    )
    .await?;
    if !plan.preload.is_empty() {
        let preload = Request::Preload {
            modules: plan.preload,
        };
        turn(
            &mut store,
            &exports,
            &link_,
            &preload,
            SERVE,
            "SANDBOX_PRELOAD",
        )
        .await?;
    }
    let open = store.data_mut().open_files();
    if open > 0 {
        return Err(PreinitError::FilesLeftOpen(open));
    }
    Ok((store, instance))
}

/// Runs `source` as one turn with `request` waiting on stdin, and checks the
/// driver answered without an error.
async fn turn(
    store: &mut Store<GuestState>,
    exports: &TurnExports,
    link: &Arc<GuestLink>,
    request: &Request<'_>,
    source: &[u8],
    what: &'static str,
) -> Result<(), PreinitError> {
    let answer = link.send(
        &[],
        &request.encode(),
        0,
        None,
        1 << 20,
        OutputCapture::discard(),
        OutputCapture::memory(16 << 10),
    );
    let ran = exports.run(store, source).await;
    link.turn_returned(0);
    let (_, stderr) = link.take_output();
    let stderr = stderr.finish().text;
    if let Err(e) = ran {
        return Err(PreinitError::Stopped {
            what,
            reason: format!("{e:#}"),
            stderr,
        });
    }
    let Ok(body) = answer.await else {
        return Err(PreinitError::NoAnswer { what, stderr });
    };
    let reply =
        decode_reply(&body.body).map_err(|source| PreinitError::BadReply { what, source })?;
    match reply.error {
        Some(error) => Err(PreinitError::Raised {
            what,
            name: error.name,
            value: error.value,
            stderr: if stderr.is_empty() {
                String::new()
            } else {
                format!(" ({})", stderr.trim())
            },
        }),
        None => Ok(()),
    }
}

/// The pre-initialised instance, as wizer reads it.
struct Captured<'a> {
    store: &'a mut Store<GuestState>,
    instance: Instance,
}

impl InstanceState for Captured<'_> {
    async fn global_get(&mut self, name: &str, _: wasmtime_wizer::ValType) -> SnapshotVal {
        let global = self
            .instance
            .get_global(&mut *self.store, name)
            .expect("wizer asks only for the globals it exported");
        match global.get(&mut *self.store) {
            Val::I32(v) => SnapshotVal::I32(v),
            Val::I64(v) => SnapshotVal::I64(v),
            Val::F32(v) => SnapshotVal::F32(v),
            Val::F64(v) => SnapshotVal::F64(v),
            Val::V128(v) => SnapshotVal::V128(v.as_u128()),
            other => panic!("wizer refuses modules with a mutable {other:?} global"),
        }
    }

    async fn memory_contents(&mut self, name: &str, contents: impl FnOnce(&[u8]) + Send) {
        let memory = self
            .instance
            .get_memory(&mut *self.store, name)
            .expect("wizer asks only for the memories it exported");
        contents(memory.data(&*self.store));
    }
}
