//! [`KeptMemory`]: a turn-driven interpreter's memory as its task keeps it
//! between turns: its page store (see [`super::page_store`]) and, for a
//! sandbox kept across restarts, its journal (see [`super::journal`]); and
//! what the host asks of it between turns: a fork, the start of an
//! execution, and keeping the state an execution left.

use std::path::PathBuf;
use std::sync::Arc;

use wasmtime::{Instance, Store};

use super::globals::capture_globals;
use super::guest_memory::MemoryRegion;
use super::interpreter::GuestState;
use super::journal::{Journal, StateRecord};
use super::page_store::PageStore;
use super::starting_memory::ForkedMemory;
use super::state_error::StateError;

/// An interpreter's pages, and its journal when it is durable.
#[derive(Debug)]
pub(crate) struct KeptMemory {
    pages: PageStore,
    journal: Option<Journal>,
    /// Whether the next state record must hold the whole layout (the first
    /// of a journal, or the one after a record that could not be written).
    needs_whole: bool,
}

impl KeptMemory {
    /// The memory kept in `pages`, with a new journal beside its pages when
    /// `durable`.
    pub(crate) fn new(mut pages: PageStore, durable: bool) -> Result<Self, StateError> {
        let journal = if durable {
            pages.hold_unused_segments();
            Some(Journal::create(pages.dir()).map_err(StateError::io("creating the journal"))?)
        } else {
            None
        };
        Ok(Self {
            pages,
            journal,
            needs_whole: true,
        })
    }

    /// Notes that an execution starts (the `executions`th), so that a server
    /// stopped during it says so when the sandbox comes back.
    pub(crate) fn started(&mut self, executions: u64) {
        if let Some(journal) = &mut self.journal
            && let Err(e) = journal.started(executions)
        {
            tracing::warn!(error = %e, "could not note an execution's start in the sandbox's journal");
        }
    }

    /// Keeps the state the last turn left: its written pages into the page
    /// store, and a record of it in the journal. A durable memory's files
    /// are then synced in the background.
    pub(crate) fn keep(
        &mut self,
        store: &mut Store<GuestState>,
        instance: &Instance,
        executions: u64,
    ) -> Result<(), StateError> {
        let Some(journal) = &mut self.journal else {
            return Ok(());
        };
        let region = region_of(store, instance)?;
        let memory_bytes = region.size();
        let globals = capture_globals(store, instance)?;
        let pages = &mut self.pages;
        // SAFETY: between turns no guest code runs, and the store describes
        // this memory.
        let flushed =
            tokio::task::block_in_place(|| unsafe { pages.flush(&region, memory_bytes) })?;
        let flushed = if self.needs_whole {
            pages.whole()
        } else {
            flushed
        };
        let whole = flushed.whole;
        let record = StateRecord {
            executions,
            memory_bytes: memory_bytes as u64,
            globals,
            whole,
            extents: flushed.extents,
            marks: flushed.marks,
        };
        match tokio::task::block_in_place(|| journal.state(record)) {
            Ok(()) => {
                self.needs_whole = false;
                // The journal now names only what the whole record names.
                if whole {
                    pages.release_unused();
                }
            }
            Err(e) => {
                self.needs_whole = true;
                return Err(StateError::io("writing the sandbox's journal")(e));
            }
        }
        let mut files = pages.sync_handles();
        files.push(journal.sync_handle());
        drop(tokio::task::spawn_blocking(move || {
            for file in files {
                let _ = file.sync_data();
            }
        }));
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
