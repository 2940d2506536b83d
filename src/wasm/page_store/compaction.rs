//! When a [`PageStore`] compacts, and how: the pages in use are written
//! anew, one after another, so the memory is mapped in few pieces and the
//! segments hold little that no page uses.

use std::ops::Range;

use super::{PageStore, Remap, StoreError};
use crate::wasm::guest_memory::{MemoryRegion, host_page};
use crate::wasm::page_layout::Source;

/// Most extents a store keeps before it compacts: each is at least one
/// mapping of the process (Linux allows about 65,000 in all, shared by
/// every sandbox). A store whose last compaction left more than half as
/// many waits until it has twice as many, so that a memory written in
/// scattered places is not compacted after every execution.
pub(super) const MAX_EXTENTS: usize = 512;
/// Bytes of segments no page uses any more that a store tolerates (beyond
/// as many as it uses) before it compacts.
const SLACK_BYTES: u64 = 32 << 20;

/// `runs` (in page order) joined across the smallest gaps until at most
/// `most` are left.
fn joined(mut runs: Vec<Range<usize>>, most: usize) -> Vec<Range<usize>> {
    let mut gap = 1;
    while runs.len() > most.max(1) {
        let mut out: Vec<Range<usize>> = Vec::with_capacity(runs.len());
        for run in runs {
            match out.last_mut() {
                Some(last) if run.start - last.end <= gap => last.end = run.end,
                _ => out.push(run),
            }
        }
        runs = out;
        gap *= 2;
    }
    runs
}

impl PageStore {
    pub(super) fn needs_compaction(&self) -> bool {
        let used: u64 = self.layout.segment_use().values().sum::<u64>() * host_page() as u64;
        let extents = self.layout.extents().len();
        (extents > MAX_EXTENTS && extents >= self.compacted_extents.saturating_mul(2))
            || self.segment_bytes() > used.saturating_mul(2).saturating_add(SLACK_BYTES)
    }

    /// Writes every page the segments hold into one new segment, in page
    /// order, and maps them from it; the old segments go. Runs of pages
    /// close to one another are written as one run, with the pages between
    /// them, so that the memory is mapped in few pieces.
    ///
    /// # Safety
    ///
    /// As for [`PageStore::flush`].
    pub(super) unsafe fn compact(&mut self, region: &MemoryRegion) -> Result<(), StoreError> {
        let runs: Vec<Range<usize>> = self
            .layout
            .extents()
            .iter()
            .filter(|e| matches!(e.source, Source::Segment(_)))
            .map(|e| e.first..e.end())
            .collect();
        let runs = joined(runs, MAX_EXTENTS / 8);
        let (started, extents_before) = (std::time::Instant::now(), self.layout.extents().len());
        self.appending = None;
        // SAFETY: passed on from the caller.
        unsafe { self.append(region, &runs, Remap::Yes)? };
        self.idle.clear();
        self.drop_unused_segments();
        self.compacted_extents = self.layout.extents().len();
        tracing::debug!(
            extents_before,
            extents_after = self.compacted_extents,
            segment_bytes = self.segment_bytes(),
            ms = started.elapsed().as_secs_f64() * 1e3,
            "compacted a sandbox's kept pages"
        );
        Ok(())
    }
}
