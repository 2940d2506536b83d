//! What a turn-driven interpreter's memory starts as, and putting it in
//! place between instantiation and the first turn: the runtime's snapshot
//! mapped in (a new sandbox), another interpreter's pages mapped in (a fork),
//! or a saved state copied in (a restore).

use std::path::PathBuf;
use std::sync::Arc;

use wasmtime::{Instance, Store};

use super::globals::{GlobalValue, capture_globals, restore_globals};
use super::guest_memory::MemoryRegion;
use super::interpreter::{GuestImage, GuestState};
use super::page_store::PageStore;
use super::state_error::StateError;
use super::state_image::StateImage;

/// The bytes of a 32-bit linear memory's page.
const WASM_PAGE: usize = 64 << 10;

/// What an interpreter's memory starts as.
pub(crate) enum StartingMemory {
    /// The runtime's snapshot; the pages it writes are kept in `pages`
    /// when given (a sandbox's own interpreter), so that it can be forked.
    Fresh {
        /// The directory of its page store.
        pages: Option<PathBuf>,
    },
    /// Another interpreter's memory, forked.
    Forked(ForkedMemory),
    /// A saved state, copied in.
    Saved {
        /// The state.
        state: Arc<StateImage>,
        /// The directory of its page store.
        pages: Option<PathBuf>,
    },
}

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

/// The region of `instance`'s memory, which must be this server's.
fn region_of(
    store: &mut Store<GuestState>,
    instance: &Instance,
) -> Result<Arc<MemoryRegion>, StateError> {
    let memory = instance
        .get_memory(&mut *store, "memory")
        .ok_or(StateError::NoMemory)?;
    MemoryRegion::of(memory.data_ptr(&*store)).ok_or(StateError::NotCopyable)
}

/// Puts `starting` in place in `instance`, just instantiated; returns the
/// page store the interpreter keeps its pages in, if it has one.
pub(crate) fn place(
    store: &mut Store<GuestState>,
    instance: &Instance,
    image: &GuestImage,
    starting: StartingMemory,
) -> Result<Option<PageStore>, StateError> {
    match starting {
        StartingMemory::Fresh { pages } => {
            let Some(snapshot) = &image.snapshot else {
                return Ok(None);
            };
            snapshot.apply(store, instance)?;
            Ok(pages.map(|dir| PageStore::of_image(dir, snapshot.clone())))
        }
        StartingMemory::Forked(forked) => {
            let memory = instance
                .get_memory(&mut *store, "memory")
                .ok_or(StateError::NoMemory)?;
            let have = memory.data_size(&*store);
            if have > forked.memory_bytes || !forked.memory_bytes.is_multiple_of(WASM_PAGE) {
                return Err(StateError::DoesNotFit {
                    saved: forked.memory_bytes,
                    have,
                });
            }
            memory
                .grow(
                    &mut *store,
                    ((forked.memory_bytes - have) / WASM_PAGE) as u64,
                )
                .map_err(|e| StateError::CannotGrow(e.to_string()))?;
            let region = region_of(store, instance)?;
            // SAFETY: no guest code has run on this memory yet, and the
            // store's files are never changed.
            unsafe { forked.pages.map_into(&region)? };
            restore_globals(store, instance, &forked.globals)?;
            Ok(Some(forked.pages))
        }
        StartingMemory::Saved { state, pages } => {
            state.restore(store, instance)?;
            Ok(match (pages, &image.snapshot) {
                (Some(dir), Some(snapshot)) => Some(PageStore::unmapped(dir, snapshot.clone())),
                _ => None,
            })
        }
    }
}

/// Takes a fork of the memory of `instance` (between turns) into a store
/// in `dir`: the pages written since the last flush are flushed first.
pub(crate) fn fork(
    store: &mut Store<GuestState>,
    instance: &Instance,
    pages: Option<&mut PageStore>,
    dir: PathBuf,
) -> Result<ForkedMemory, StateError> {
    let pages = pages.ok_or(StateError::NotCopyable)?;
    let region = region_of(store, instance)?;
    let memory_bytes = region.size();
    // SAFETY: between turns no guest code runs, and the store describes
    // this memory.
    unsafe { pages.flush(&region, memory_bytes)? };
    let forked = pages.fork(dir)?;
    Ok(ForkedMemory {
        pages: forked,
        globals: capture_globals(store, instance)?,
        memory_bytes,
        open_files: store.data_mut().open_files(),
    })
}
