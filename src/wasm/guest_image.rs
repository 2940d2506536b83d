//! [`GuestImage`]: a runtime compiled and linked once per server, from
//! which every interpreter of that runtime is instantiated.

use std::sync::{Arc, OnceLock};

use wasmtime::{Engine, InstancePre};

use super::guest_state::GuestState;
use super::mounts::ReadOnlyMount;
use super::runtime::RuntimeManifest;
use super::snapshot::Snapshot;
use crate::packages::BuiltInPackages;
use crate::sandbox::budget::Budget;

/// A compiled runtime, ready to be instantiated many times.
pub(crate) struct GuestImage {
    /// The engine it was compiled for.
    pub engine: Engine,
    /// The module, linked with WASI.
    pub pre: InstancePre<GuestState>,
    /// What it is.
    pub manifest: RuntimeManifest,
    /// The runtime whose threads run guests.
    pub executor: tokio::runtime::Handle,
    /// Whether the engine meters fuel.
    pub fuel_metered: bool,
    /// Whether the module is pre-initialised and driven turn by turn (see
    /// [`super::turns`]); otherwise it runs the driver's loop to its end.
    pub turns: bool,
    /// Where each interpreter of a turn-driven runtime starts (see
    /// [`super::snapshot`]).
    pub snapshot: Option<Arc<Snapshot>>,
    /// Bytes of linear memory an interpreter starts with (a snapshot's
    /// heap): the least memory cap a sandbox of this runtime can have.
    pub initial_memory: u64,
    /// What an interpreter's saved state must have been made with to be
    /// restored here (the runtime, the driver and the preloaded modules).
    pub state_key: String,
    /// Read-only directories every guest of this runtime sees.
    pub mounts: Vec<ReadOnlyMount>,
    /// Packages the runtime carries in its own import path.
    pub built_in: Arc<BuiltInPackages>,
    /// The server-wide memory budget every instance charges as it grows.
    pub memory_budget: Arc<Budget>,
    /// The driver compiled by this runtime's Python (marshal), once the first
    /// interpreter in a fresh directory has handed it back: taken from its hello
    /// reply, before any user code could run in it, so no sandbox can shape
    /// what others run.
    pub driver_program: OnceLock<Vec<u8>>,
}

impl GuestImage {
    /// The identity of the snapshot image interpreters start from (empty
    /// without a snapshot): saved memory fits only onto the same image.
    pub fn image_id(&self) -> &str {
        self.snapshot.as_ref().map_or("", |snapshot| snapshot.id())
    }
}
