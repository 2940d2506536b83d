//! [`KeptMemory`]: a turn-driven interpreter's memory as its task keeps it
//! between turns: its page store (see [`super::page_store`]) and, for a
//! sandbox kept across restarts, its journal (see [`super::journal`]); and
//! what the host asks of it between turns: a fork, the start of an
//! execution, and keeping the state an execution left.

use std::path::PathBuf;
use std::sync::Arc;

use wasmtime::{Instance, Store};

use super::background_sync::BackgroundSync;
use super::globals::{GlobalValue, capture_globals};
use super::guest_memory::{MemoryRegion, host_page};
use super::guest_state::GuestState;
use super::journal::{Journal, StateRecord};
use super::page_store::{Flushed, PageStore, Upkeep};
use super::state_error::StateError;
use crate::sandbox::budget::Budget;

/// An interpreter's memory as a fork takes it: the pages (mapped from the
/// same files as the source's), the globals, and the size.
#[derive(Debug)]
pub(crate) struct ForkedMemory {
    /// The fork's own store of the pages.
    pub pages: PageStore,
    /// The globals' values.
    pub globals: Vec<(String, GlobalValue)>,
    /// Bytes of memory.
    pub memory_bytes: usize,
    /// Files and directories the source held open (a fork starts with none).
    pub open_files: usize,
}

/// An interpreter's pages, and its journal when it is durable.
#[derive(Debug)]
pub(crate) struct KeptMemory {
    pages: PageStore,
    journal: Option<Journal>,
    /// Whether the next state record must hold the whole layout (the first
    /// of a journal, or the one after a record that could not be written).
    needs_whole: bool,
    /// The disk durable sandboxes' pages may take, and what this one's
    /// segments are charged to it.
    disk: Option<(Arc<Budget>, u64)>,
    /// Puts its files on disk in the background.
    sync: BackgroundSync,
    /// What to tell the client at the next execution (the memory could not
    /// be kept from its start).
    notice: Option<String>,
    /// The execution the last keep recorded, until [`KeptMemory::tidy`]
    /// has done what that keep left.
    to_tidy: Option<u64>,
}

/// Bytes a journal grows to before its next record is a whole one, which
/// replaces it.
const JOURNAL_REWRITE_BYTES: u64 = 8 << 20;

impl KeptMemory {
    /// The memory kept in `pages`, with a new journal beside its pages when
    /// `durable` (the disk durable pages may take).
    pub(crate) fn new(pages: PageStore, durable: Option<Arc<Budget>>) -> Result<Self, StateError> {
        let mut kept = Self {
            journal: None,
            needs_whole: true,
            disk: None,
            sync: BackgroundSync::default(),
            notice: None,
            to_tidy: None,
            pages,
        };
        let Some(budget) = durable else {
            return Ok(kept);
        };
        // The pages a fork or a restore starts with are on disk already;
        // when the disk allowed cannot take them, the memory is not kept
        // (others' sandboxes stay kept), and the client hears it.
        let held = kept.pages.segment_bytes();
        kept.disk = Some((budget, 0));
        if let Some(notice) = charge(&mut kept.disk, held) {
            kept.disk = None;
            kept.notice = Some(notice);
            return Ok(kept);
        }
        kept.pages.hold_unused_segments();
        kept.journal =
            Some(Journal::open(kept.pages.dir()).map_err(StateError::io("opening the journal"))?);
        Ok(kept)
    }

    /// Notes that an execution starts (the `executions`th), so that a server
    /// stopped during it says so when the sandbox comes back.
    pub(crate) fn started(&mut self, executions: u64) {
        // Whatever the last keep left undone stays undone: the guest runs.
        self.to_tidy = None;
        self.pages.forget_deferred();
        if let Some(journal) = &mut self.journal
            && let Err(e) = journal.started(executions)
        {
            tracing::warn!(error = %e, "could not note an execution's start in the sandbox's journal");
        }
    }

    /// Keeps the state the last turn left: its written pages into the page
    /// store, and a record of it in the journal (file work: the caller runs
    /// it where blocking is allowed). A durable memory's files
    /// are then synced in the background. When the pages would take the
    /// durable sandboxes past the disk they may take, the journal says the
    /// memory is no longer kept and stops; what to tell the client then is
    /// returned.
    ///
    /// What can wait until the execution is answered (mapping pages that
    /// stayed unchanged from their copies, a compaction) is left to
    /// [`KeptMemory::tidy`], which must run before the guest runs again.
    pub(crate) fn keep(
        &mut self,
        store: &mut Store<GuestState>,
        instance: &Instance,
        executions: u64,
    ) -> Result<Option<String>, StateError> {
        self.to_tidy = None;
        let Some(journal) = &mut self.journal else {
            return Ok(self.notice.take());
        };
        let region = region_of(store, instance)?;
        let pages = &mut self.pages;
        // SAFETY: between turns no guest code runs, and the store describes
        // this memory.
        let written = unsafe { pages.written(&region, region.size())? };
        // SAFETY: as above.
        let split = unsafe { pages.split_by_change(&region, &written)? };
        // Charged before anything is written: what would not fit is never
        // put on disk, and the memory stops being kept.
        let adding = split.0.iter().map(|r| r.len() as u64).sum::<u64>() * host_page() as u64;
        tracing::debug!(
            written_pages = written.iter().map(|r| r.len()).sum::<usize>(),
            changed_bytes = adding,
            "keeping an execution's pages"
        );
        if let Some(notice) = charge(&mut self.disk, pages.segment_bytes() + adding) {
            let lapsed = journal.lapsed(executions);
            self.journal = None;
            // Nothing names the segments kept for the journal any more.
            pages.stop_holding();
            lapsed.map_err(StateError::io("writing the sandbox's journal"))?;
            return Ok(Some(notice));
        }
        // SAFETY: as above.
        let flushed = match unsafe { pages.flush_split(&region, split, Upkeep::Deferred) } {
            Ok(flushed) => flushed,
            Err(e) => {
                // The layout may have moved on from what the journal knows:
                // the next record says all.
                self.needs_whole = true;
                pages.forget_deferred();
                return Err(e.into());
            }
        };
        if let Err(e) = self.record(store, instance, &region, executions, flushed) {
            // No tidy follows a keep that did not record its state.
            self.pages.forget_deferred();
            return Err(e);
        }
        self.to_tidy = Some(executions);
        Ok(None)
    }

    /// Does what the last [`KeptMemory::keep`] left, once its execution is
    /// answered: maps the pages that stayed unchanged long enough from their
    /// copies, and compacts the pages when they are due (and the disk
    /// allowed can take them once more), recording the whole state that
    /// leaves. A server killed meanwhile has the state that keep recorded.
    /// Must run before the guest runs again (nothing is done after a keep
    /// that did not record its state).
    ///
    /// A compaction whose interpreter is being stopped meanwhile (`stopping`)
    /// is not recorded: the journal keeps naming what that keep recorded.
    pub(crate) fn tidy(
        &mut self,
        store: &mut Store<GuestState>,
        instance: &Instance,
        stopping: impl Fn() -> bool,
    ) -> Result<(), StateError> {
        let Some(executions) = self.to_tidy.take() else {
            return Ok(());
        };
        let region = region_of(store, instance)?;
        // A compaction writes pages once more until the journal is
        // rewritten: only as many as the disk allowed can take.
        let room = self
            .disk
            .as_ref()
            .map_or(u64::MAX, |(budget, _)| budget.free());
        // SAFETY: between turns no guest code runs (and none has since the
        // keep), and the store describes this memory.
        match unsafe { self.pages.tidy(&region, room) } {
            Ok(false) => Ok(()),
            Ok(true) if stopping() => {
                self.needs_whole = true;
                Ok(())
            }
            Ok(true) => {
                let whole = self.pages.whole();
                self.record(store, instance, &region, executions, whole)
            }
            Err(e) => {
                self.needs_whole = true;
                Err(e.into())
            }
        }
    }

    /// Records in the journal the state `flushed` leaves after the
    /// `executions`th execution, and has the files synced in the background.
    fn record(
        &mut self,
        store: &mut Store<GuestState>,
        instance: &Instance,
        region: &MemoryRegion,
        executions: u64,
        flushed: Flushed,
    ) -> Result<(), StateError> {
        let Some(journal) = &mut self.journal else {
            return Ok(());
        };
        let pages = &mut self.pages;
        charge(&mut self.disk, pages.segment_bytes());
        if journal.len() > JOURNAL_REWRITE_BYTES {
            self.needs_whole = true;
        }
        let flushed = if self.needs_whole && !flushed.whole {
            pages.whole()
        } else {
            flushed
        };
        let whole = flushed.whole;
        if whole
            && journal.len() > 0
            && let Err(e) = on_disk(&pages.sync_handles())
        {
            self.needs_whole = true;
            return Err(StateError::io("putting the sandbox's pages on disk")(e));
        }
        let record = StateRecord {
            executions,
            memory_bytes: region.size() as u64,
            globals: capture_globals(store, instance)?,
            whole,
            extents: flushed.extents,
            marks: flushed.marks,
        };
        match journal.state(record) {
            Ok(()) => {
                self.needs_whole = false;
                // The journal now names only what the whole record names.
                if whole {
                    pages.release_unused();
                    charge(&mut self.disk, pages.segment_bytes());
                }
            }
            Err(e) => {
                self.needs_whole = true;
                return Err(StateError::io("writing the sandbox's journal")(e));
            }
        }
        self.sync
            .request(pages.sync_handles(), journal.sync_handle(), executions);
        Ok(())
    }

    /// Takes a fork of the memory into a store in `dir`: the pages written
    /// since the last flush are flushed first.
    pub(crate) fn fork(
        &mut self,
        store: &mut Store<GuestState>,
        instance: &Instance,
        dir: PathBuf,
    ) -> Result<ForkedMemory, StateError> {
        let region = region_of(store, instance)?;
        let memory_bytes = region.size();
        let pages = &mut self.pages;
        // SAFETY: between turns no guest code runs, and the store describes
        // this memory.
        let flushed = unsafe { pages.flush(&region, memory_bytes)? };
        if !flushed.is_empty() {
            // The journal has not seen these pages: its next record says all.
            self.needs_whole = true;
        }
        let forked = pages.fork(dir)?;
        Ok(ForkedMemory {
            pages: forked,
            globals: capture_globals(store, instance)?,
            memory_bytes,
            open_files: store.data_mut().open_files(),
        })
    }
}

impl Drop for KeptMemory {
    fn drop(&mut self) {
        if let Some((budget, charged)) = self.disk.take() {
            budget.release(charged);
        }
    }
}

/// Puts `segments` on disk before a whole record replaces the journal: the
/// segments the records before it named then go, and a machine that stopped
/// with the record on disk and its pages not would have neither state.
fn on_disk(segments: &[Arc<std::fs::File>]) -> std::io::Result<()> {
    segments.iter().try_for_each(|segment| segment.sync_data())
}

/// Charges `disk` for segments that now hold `held` bytes (or gives back
/// what they no longer hold); when the budget cannot take the growth, what
/// to tell the client (nothing is charged then).
fn charge(disk: &mut Option<(Arc<Budget>, u64)>, held: u64) -> Option<String> {
    let (budget, charged) = disk.as_mut()?;
    if held <= *charged {
        budget.release(*charged - held);
        *charged = held;
        return None;
    }
    if budget.try_charge(held - *charged) {
        *charged = held;
        return None;
    }
    Some(format!(
        "this sandbox's variables will not come back if the server restarts (its files will): its memory pages ({} MiB) would take the server's kept sandboxes past SANDBOX_SAVED_MAX_MB ({} MiB)",
        held.div_ceil(1 << 20),
        budget.limit() >> 20
    ))
}

/// The region of `instance`'s memory, which must be this server's.
pub(crate) fn region_of(
    store: &mut Store<GuestState>,
    instance: &Instance,
) -> Result<Arc<MemoryRegion>, StateError> {
    let memory = instance
        .get_memory(&mut *store, "memory")
        .ok_or(StateError::NoMemory)?;
    MemoryRegion::of(memory.data_ptr(&*store)).ok_or(StateError::NotCopyable)
}
