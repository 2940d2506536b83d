//! Pre-initialising a turn-driven runtime: run its interpreter's start-up,
//! the driver's set-up and the preloaded imports once, in an instance of the
//! code module (see [`super::code_module`]) with the module's initial data
//! written into its memory, and keep the memory and globals it ends with as
//! the runtime's [`Snapshot`]. Sandboxes of the runtime are instances of the
//! same compiled code module with that snapshot mapped in: ready at once,
//! sharing its image copy-on-write until they write to it. Only the code
//! module is ever compiled, and only once per runtime and engine.
//!
//! The run happens in a scratch directory preopened as `/`, with the same
//! mounts in the same order and the same environment as every sandbox (the
//! C library remembers its preopens), and closes every file it opened.
//! What it fixes for all sandboxes and is refreshed per sandbox: the reply
//! token and the random generators (`random`, numpy's global generator,
//! `tempfile`'s names), by the hello each sandbox starts with. What stays
//! shared: the seed of `str` hashing, which CPython cannot change once
//! running.

use std::path::Path;
use std::sync::Arc;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use wasmtime::{Engine, Instance, InstancePre, Store};

use super::capture::OutputCapture;
use super::code_module::{INIT_FUNC, InitialData};
use super::globals::capture_globals;
use super::guest_io::{GuestLink, TOKEN_LEN};
use super::guest_program::program;
use super::guest_state::GuestState;
use super::mounts::ReadOnlyMount;
use super::preinit_error::PreinitError;
use super::protocol::{Request, decode_reply};
use super::runtime::RuntimeManifest;
use super::snapshot::Snapshot;
use super::turns::{SERVE, TurnExports};
use crate::sandbox::budget::Budget;
use crate::sandbox::quota::{DiskQuota, QuotaLedger};

/// Changes whenever what this module bakes into a snapshot changes, so
/// that cached snapshots are made again.
pub(crate) const PREINIT_VERSION: u32 = 2;

/// What a pre-initialisation needs.
pub(crate) struct PreinitPlan<'a> {
    /// The engine the code module was compiled for.
    pub engine: &'a Engine,
    /// The code module, linked as every sandbox's.
    pub pre: &'a InstancePre<GuestState>,
    /// What the runtime's data segments put into memory.
    pub data: &'a InitialData,
    /// Its manifest.
    pub manifest: &'a RuntimeManifest,
    /// Its read-only mounts, as every sandbox gets them.
    pub mounts: &'a [ReadOnlyMount],
    /// Modules to import ahead of any code.
    pub preload: &'a [String],
    /// An empty directory to run in.
    pub scratch: &'a Path,
    /// Where the snapshot is kept, and under which key.
    pub cache_dir: &'a Path,
    /// The snapshot's key.
    pub key: &'a str,
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

/// Runs the plan and stores the snapshot (blocking: it runs the imports;
/// call it on a blocking thread, inside a Tokio runtime).
pub(crate) fn build(
    plan: &PreinitPlan<'_>,
    runtime: &tokio::runtime::Handle,
) -> Result<Snapshot, PreinitError> {
    runtime.block_on(async {
        let (mut store, instance) = initialised(plan).await?;
        let globals = capture_globals(&mut store, &instance)
            .map_err(|e| PreinitError::step("cannot read the globals")(e.into()))?;
        let memory = instance.get_memory(&mut store, "memory").ok_or_else(|| {
            PreinitError::step("cannot snapshot the runtime")(wasmtime::Error::msg(
                "it exports no memory",
            ))
        })?;
        Snapshot::store(plan.cache_dir, plan.key, memory.data(&store), globals).map_err(|source| {
            PreinitError::Store {
                path: plan.cache_dir.to_owned(),
                source,
            }
        })
    })
}

/// Instantiates the code module, puts the runtime's initial data into its
/// memory, and brings it to the state every sandbox starts from.
async fn initialised(
    plan: &PreinitPlan<'_>,
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
    let mut store = Store::new(plan.engine, state);
    store.limiter(|s| s.limiter());
    // The engine may meter fuel and check epochs: this run has no limits.
    let _ = store.set_fuel(u64::MAX);
    #[cfg(not(guest_stop_by_fault))]
    store.epoch_deadline_async_yield_and_update(1);
    let instance = plan
        .pre
        .instantiate_async(&mut store)
        .await
        .map_err(PreinitError::step("cannot instantiate the runtime"))?;
    let memory = instance.get_memory(&mut store, "memory").ok_or_else(|| {
        PreinitError::step("cannot instantiate the runtime")(wasmtime::Error::msg(
            "it exports no memory",
        ))
    })?;
    for (at, bytes) in &plan.data.segments {
        memory
            .write(&mut store, *at as usize, bytes)
            .map_err(|e| PreinitError::step("cannot write the runtime's initial data")(e.into()))?;
    }
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
