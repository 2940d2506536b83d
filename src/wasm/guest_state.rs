//! [`GuestState`]: everything a guest's store holds: its WASI context (the
//! sandbox directory preopened as `/`, the runtime's read-only mounts, the
//! host's ends of stdin, stdout and stderr, a fixed environment), its memory
//! limiter, its disk quota and the answers its quota gates get, and its door
//! to the host.

use std::path::Path;
use std::sync::Arc;

use wasmtime::ResourceLimiter;
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use super::guest_io::{GuestLink, GuestOutput, GuestStdin, GuestWriter, Stream};
use super::memory_limiter::{MemoryLimiter, MemoryMeter};
use super::mounts::ReadOnlyMount;
use super::quota_gate::{ASK_CREATE, ASK_OPEN, ASK_WRITE, NOTE_CLOSE};
use super::runtime::RuntimeManifest;
use super::start_error::StartError;
use crate::door::session::DoorSlot;
use crate::sandbox::budget::Budget;
use crate::sandbox::open_files::note_closed;
use crate::sandbox::quota::QuotaLedger;

/// The matplotlib backend the driver provides (see `driver.py`).
const PLOTS_BACKEND: &str = "module://_sandbox_plots";

/// Everything a guest's store holds.
pub(crate) struct GuestState {
    wasi: WasiP1Ctx,
    limiter: MemoryLimiter,
    ledger: Arc<QuotaLedger>,
    /// Which of stdin, stdout and stderr the guest has closed (their numbers
    /// may then name files, whose writes count against the quota).
    stdio_closed: [bool; 3],
    /// Most entries (open files, directories, streams) the guest may hold.
    max_open: usize,
    /// Where the guest's stdout and stderr go.
    link: Arc<GuestLink>,
    /// How many read-only mounts it has (preopens beyond `/`).
    mounts: usize,
    /// The door to the host, armed per execution (see [`super::tool_door`]).
    door: Arc<DoorSlot>,
}

/// Extra room in the WASI resource table beyond twice `max_open` (a poll
/// adds one entry per file it waits on), for the streams a call opens and
/// closes on its own; past it a push traps.
const TABLE_SLACK: usize = 32;

impl GuestState {
    /// The state of a guest running `program` (`python -c`) in `dir`, with the
    /// runtime's mounts, talking over `link`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        manifest: &RuntimeManifest,
        mounts: &[ReadOnlyMount],
        dir: &Path,
        program: &str,
        link: Arc<GuestLink>,
        max_open: usize,
        limiter: MemoryLimiter,
        ledger: Arc<QuotaLedger>,
        door: Arc<DoorSlot>,
    ) -> Result<Self, StartError> {
        let mut args = vec!["python"];
        args.extend(manifest.python_flags.iter().map(String::as_str));
        args.extend(["-c", program]);
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdin(GuestStdin(link.clone()))
            .stdout(GuestOutput(link.clone(), Stream::Stdout))
            .stderr(GuestOutput(link.clone(), Stream::Stderr))
            .args(&args)
            .env("HOME", "/")
            .env("TMPDIR", "/tmp")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONUTF8", "1")
            .env("MPLBACKEND", PLOTS_BACKEND)
            .allow_blocking_current_thread(true)
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        for (key, value) in &manifest.env {
            wasi.env(key, value);
        }
        wasi.preopened_dir(dir, "/", FsPerms::ReadWrite)
            .map_err(|e| StartError::SandboxDir(e.to_string()))?;
        for mount in mounts {
            wasi.preopened_dir(&mount.host, &mount.guest, FsPerms::ReadOnly)
                .map_err(|e| StartError::Mount {
                    host: mount.host.clone(),
                    guest: mount.guest.clone(),
                    reason: e.to_string(),
                })?;
        }
        let mut wasi = wasi.build_p1();
        {
            use wasmtime_wasi::WasiView;
            wasi.ctx()
                .table
                .set_max_capacity(max_open.saturating_mul(2).saturating_add(TABLE_SLACK));
        }
        Ok(Self {
            wasi,
            limiter,
            ledger,
            stdio_closed: [false; 3],
            max_open,
            link,
            mounts: mounts.len(),
            door,
        })
    }

    /// The state of the guest that pre-initialises a runtime (see
    /// [`super::preinit`]): in `dir`, with no limits of its own.
    pub(crate) fn for_preinit(
        manifest: &RuntimeManifest,
        mounts: &[ReadOnlyMount],
        dir: &Path,
        link: Arc<GuestLink>,
        ledger: Arc<QuotaLedger>,
    ) -> Result<Self, StartError> {
        let meter = Arc::new(MemoryMeter::with_limit(u64::MAX));
        let limiter = MemoryLimiter::new(meter, Budget::unlimited());
        let door = Arc::new(DoorSlot::default());
        Self::new(manifest, mounts, dir, "", link, 4096, limiter, ledger, door)
    }

    /// The door slot the sandbox arms for each execution.
    pub(crate) fn door_slot(&self) -> Arc<DoorSlot> {
        self.door.clone()
    }

    /// The CPU time the guest has burned since it started.
    pub(crate) fn cpu_burned(&self) -> std::time::Duration {
        self.link.cpu().burned()
    }

    /// The memory limiter, for a store's `limiter`.
    pub(crate) fn limiter(&mut self) -> &mut dyn ResourceLimiter {
        &mut self.limiter
    }

    /// Entries beyond the standard streams and the preopens the guest holds
    /// (its open files and directories).
    pub(crate) fn open_files(&mut self) -> usize {
        self.open_entries().saturating_sub(4 + self.mounts)
    }

    /// The WASI context (for the linker).
    pub(crate) fn wasi(&mut self) -> &mut WasiP1Ctx {
        &mut self.wasi
    }

    /// Answers a quota gate's question (see [`super::quota_gate`]) with a
    /// WASI errno: 0 to go ahead, `EDQUOT` when it would exceed the quota.
    pub(crate) fn answer_gate(&mut self, fd: i32, offset: i64, len: i64) -> i32 {
        const EDQUOT: i32 = 19;
        const EMFILE: i32 = 33;
        const ENOTSUP: i32 = 58;
        let amount = u64::try_from(len).unwrap_or(0);
        let stdio = usize::try_from(fd).ok().filter(|&fd| fd < 3);
        match offset {
            // Booked by the blocks the write can touch, not the bytes it
            // carries: one byte written into a hole takes a whole block.
            ASK_WRITE => match stdio {
                Some(fd) if !self.stdio_closed[fd] => 0,
                _ if self.ledger.reserve_write(amount) => 0,
                _ => EDQUOT,
            },
            ASK_CREATE if self.ledger.reserve_entry(amount) => 0,
            ASK_CREATE => EDQUOT,
            ASK_OPEN if self.open_entries() < self.max_open => 0,
            ASK_OPEN => EMFILE,
            NOTE_CLOSE => {
                if let Some(fd) = stdio {
                    self.stdio_closed[fd] = true;
                }
                note_closed();
                0
            }
            // A real fd_allocate: wasmtime-wasi does not support it either.
            _ => ENOTSUP,
        }
    }

    /// The stream `fd` writes to, while it is still the guest's stdout or
    /// stderr (not closed, not renumbered over).
    pub(crate) fn stdio_output(&self, fd: i32) -> Option<GuestWriter> {
        let stream = match fd {
            1 => Stream::Stdout,
            2 => Stream::Stderr,
            _ => return None,
        };
        (!self.stdio_closed[fd as usize]).then(|| GuestWriter(self.link.clone(), stream))
    }

    /// Entries the guest holds in its WASI table now.
    fn open_entries(&mut self) -> usize {
        use wasmtime_wasi::WasiView;
        self.wasi.ctx().table.iter_mut().count()
    }
}
