//! What a turn-driven interpreter's memory starts as, and putting it in
//! place between instantiation and the first turn: the runtime's snapshot
//! mapped in (a new sandbox), another interpreter's pages mapped in (a fork),
//! or a saved sandbox's pages mapped in (a restore). In each case the memory
//! is made of file mappings: nothing is copied.

use std::path::PathBuf;
use std::sync::Arc;

use wasmtime::{Instance, Store};

use super::globals::restore_globals;
use super::guest_image::GuestImage;
use super::guest_state::GuestState;
use super::journal::Replayed;
use super::kept_memory::{ForkedMemory, KeptMemory, region_of};
use super::page_store::PageStore;
use super::state_error::StateError;
use crate::sandbox::budget::Budget;

/// The bytes of a 32-bit linear memory's page.
const WASM_PAGE: usize = 64 << 10;

/// Where an interpreter keeps the pages it writes (a sandbox's own
/// interpreter), and whether it keeps a journal of them.
#[derive(Clone, Debug)]
pub(crate) struct PagesPlan {
    /// The directory of its page store.
    pub dir: PathBuf,
    /// When its state is made durable after each execution: the disk all
    /// durable sandboxes' pages may take (`SANDBOX_SAVED_MAX_MB`).
    pub durable: Option<Arc<Budget>>,
}

/// What an interpreter's memory starts as.
pub(crate) enum StartingMemory {
    /// The runtime's snapshot. Without a plan for its pages the interpreter
    /// cannot be forked or kept (an import check's, a compiler's).
    Fresh(Option<PagesPlan>),
    /// Another interpreter's memory, forked.
    Forked(Box<ForkedMemory>, PagesPlan),
    /// A saved sandbox's memory, read back from the journal in `from`.
    Restored {
        /// The saved entry's memory directory.
        from: PathBuf,
        /// What its journal holds.
        replayed: Box<Replayed>,
        /// Where the restored interpreter keeps its pages.
        plan: PagesPlan,
    },
}

/// Puts `starting` in place in `instance`, just instantiated; returns the
/// memory the interpreter keeps, if it keeps one.
pub(crate) fn place(
    store: &mut Store<GuestState>,
    instance: &Instance,
    image: &GuestImage,
    starting: StartingMemory,
) -> Result<Option<KeptMemory>, StateError> {
    let Some(snapshot) = &image.snapshot else {
        return Ok(None);
    };
    match starting {
        StartingMemory::Fresh(plan) => {
            snapshot.apply(store, instance)?;
            let Some(plan) = plan else { return Ok(None) };
            let pages = PageStore::of_image(plan.dir, snapshot.clone());
            Ok(Some(KeptMemory::new(pages, plan.durable)?))
        }
        StartingMemory::Forked(forked, plan) => {
            map_pages(store, instance, &forked.pages, forked.memory_bytes)?;
            restore_globals(store, instance, &forked.globals)?;
            let ForkedMemory { pages, .. } = *forked;
            Ok(Some(KeptMemory::new(pages, plan.durable)?))
        }
        StartingMemory::Restored {
            from,
            replayed,
            plan,
        } => {
            let pages = PageStore::restored(&from, plan.dir, snapshot.clone(), &replayed)?;
            map_pages(
                store,
                instance,
                &pages,
                replayed.state.memory_bytes as usize,
            )?;
            restore_globals(store, instance, &replayed.state.globals)?;
            Ok(Some(KeptMemory::new(pages, plan.durable)?))
        }
    }
}

/// Grows the fresh memory of `instance` to `memory_bytes` and maps the
/// pages of `pages` into it.
fn map_pages(
    store: &mut Store<GuestState>,
    instance: &Instance,
    pages: &PageStore,
    memory_bytes: usize,
) -> Result<(), StateError> {
    let memory = instance
        .get_memory(&mut *store, "memory")
        .ok_or(StateError::NoMemory)?;
    let have = memory.data_size(&*store);
    if have > memory_bytes || !memory_bytes.is_multiple_of(WASM_PAGE) {
        return Err(StateError::DoesNotFit {
            saved: memory_bytes,
            have,
        });
    }
    memory
        .grow(&mut *store, ((memory_bytes - have) / WASM_PAGE) as u64)
        .map_err(|e| StateError::CannotGrow(e.to_string()))?;
    let region = region_of(store, instance)?;
    // SAFETY: no guest code has run on this memory yet, and the store's
    // files are never changed.
    unsafe { pages.map_into(&region)? };
    Ok(())
}
