//! When a [`PageStore`] compacts, and how. A store whose layout is in too
//! many pieces rewrites its small pieces, each run of them as one, and
//! leaves its long extents where they are (a sandbox holding data keeps its
//! arrays in place, and its interpreter's bookkeeping, written all over at
//! every execution, is joined up); a store whose segments hold too much
//! that no page uses any more, whose small pieces cannot be joined into few
//! enough, or whose disk allowed could not take a rewrite of every page
//! once they are (the rewrite that takes the garbage back), writes every
//! page in use anew into one new segment.

use std::ops::Range;

use super::{PageStore, Remap, StoreError};
use crate::wasm::guest_memory::{MemoryRegion, host_page};
use crate::wasm::page_layout::{Extent, Source};

/// Most extents a store keeps before it compacts: each is at least one
/// mapping of the process (Linux allows about 65,000 in all, shared by
/// every sandbox). A store whose last compaction left more than half as
/// many waits until it has twice as many, so that a memory written in
/// scattered places is not compacted after every execution.
pub(super) const MAX_EXTENTS: usize = 512;
/// Bytes of segments no page uses any more that a store tolerates (beyond
/// as many as it uses) before it compacts.
const SLACK_BYTES: u64 = 32 << 20;

/// Extents shorter than this (in pages) are the small pieces a compaction
/// joins up; longer ones stay where they are.
const SMALL_EXTENT: usize = 64;
/// Pages of no extent (never written) that may lie between two small
/// pieces joined as one.
const JOINED_HOLE: usize = super::NEAR_PAGES;

/// The runs of pages that join `extents`' small pieces: each a longest run
/// of at least two consecutive extents shorter than [`SMALL_EXTENT`] pages,
/// at most [`JOINED_HOLE`] pages apart; and how many extents the layout
/// would have once each run is one.
fn small_pieces(extents: &[Extent]) -> (Vec<Range<usize>>, usize) {
    let mut runs = Vec::new();
    let mut after = 0;
    // The run being gathered, and how many extents it holds.
    let mut open: Option<(Range<usize>, usize)> = None;
    let mut close = |open: &mut Option<(Range<usize>, usize)>, after: &mut usize| {
        if let Some((run, pieces)) = open.take() {
            if pieces > 1 {
                runs.push(run);
                *after += 1;
            } else {
                *after += pieces;
            }
        }
    };
    for extent in extents {
        if extent.pages >= SMALL_EXTENT {
            close(&mut open, &mut after);
            after += 1;
            continue;
        }
        match &mut open {
            Some((run, pieces)) if extent.first - run.end <= JOINED_HOLE => {
                run.end = extent.end();
                *pieces += 1;
            }
            _ => {
                close(&mut open, &mut after);
                open = Some((extent.first..extent.end(), 1));
            }
        }
    }
    close(&mut open, &mut after);
    (runs, after)
}

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
        let extents = self.layout.extents().len();
        (extents > MAX_EXTENTS && extents >= self.compacted_extents.saturating_mul(2))
            || self.holds_too_much_garbage()
    }

    /// Whether the segments hold much more than the pages still used.
    fn holds_too_much_garbage(&self) -> bool {
        self.segment_bytes()
            > self
                .used_bytes()
                .saturating_mul(2)
                .saturating_add(SLACK_BYTES)
    }

    /// Compacts the store: its small pieces joined up when that leaves the
    /// layout in few enough pieces, the segments hold little garbage, and
    /// the disk allowed (`room`, in bytes) could still take a rewrite of
    /// every page afterwards; else every page in use written anew (see the
    /// module's documentation). Either way into a new segment, so a
    /// compaction cut short leaves nothing in a segment a journal names.
    ///
    /// # Safety
    ///
    /// As for [`PageStore::flush`].
    pub(super) unsafe fn compact(
        &mut self,
        region: &MemoryRegion,
        room: u64,
    ) -> Result<(), StoreError> {
        let (started, extents_before) = (std::time::Instant::now(), self.layout.extents().len());
        let (pieces, after) = small_pieces(self.layout.extents());
        let pieces_bytes = pieces.iter().map(|r| r.len() as u64).sum::<u64>() * host_page() as u64;
        let joined_up = !self.holds_too_much_garbage()
            && after <= MAX_EXTENTS / 2
            && room >= pieces_bytes.saturating_add(self.used_bytes());
        self.appending = None;
        if joined_up {
            // SAFETY: passed on from the caller.
            unsafe { self.append(region, &pieces, Remap::Yes)? };
        } else {
            // SAFETY: passed on from the caller.
            unsafe { self.rewrite_all(region)? };
        }
        self.idle.clear();
        self.drop_unused_segments();
        self.compacted_extents = self.layout.extents().len();
        tracing::debug!(
            joined_up,
            extents_before,
            extents_after = self.compacted_extents,
            pages_written = if joined_up {
                pieces.iter().map(|r| r.len()).sum()
            } else {
                0
            },
            segment_bytes = self.segment_bytes(),
            ms = started.elapsed().as_secs_f64() * 1e3,
            "compacted a sandbox's kept pages"
        );
        Ok(())
    }

    /// Writes every page the segments hold into the segment being appended
    /// to (a new one), in page order, and maps them from it; the old
    /// segments go. Runs of pages
    /// close to one another are written as one run, with the pages between
    /// them, so that the memory is mapped in few pieces.
    ///
    /// # Safety
    ///
    /// As for [`PageStore::flush`].
    unsafe fn rewrite_all(&mut self, region: &MemoryRegion) -> Result<(), StoreError> {
        let runs: Vec<Range<usize>> = self
            .layout
            .extents()
            .iter()
            .filter(|e| matches!(e.source, Source::Segment(_)))
            .map(|e| e.first..e.end())
            .collect();
        let runs = joined(runs, MAX_EXTENTS / 8);
        // SAFETY: passed on from the caller.
        unsafe { self.append(region, &runs, Remap::Yes)? };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn extent(first: usize, pages: usize, source: Source) -> Extent {
        Extent {
            first,
            pages,
            source,
            offset: 0,
        }
    }

    #[test]
    fn small_pieces_next_to_one_another_are_joined_and_long_extents_left() {
        let segment = Source::Segment(1);
        let extents = [
            extent(0, 1, segment),
            extent(1, 3, Source::Image),
            extent(4, 2, segment),
            // A long extent ends the run.
            extent(6, 100, Source::Image),
            extent(106, 1, segment),
            // A hole of JOINED_HOLE pages is joined over; a longer one is not.
            extent(107 + JOINED_HOLE, 1, segment),
            extent(108 + 2 * JOINED_HOLE + 1, 1, segment),
            extent(109 + 2 * JOINED_HOLE + 1, SMALL_EXTENT, segment),
        ];
        let (runs, after) = small_pieces(&extents);
        assert_eq!(runs, [0..6, 106..108 + JOINED_HOLE]);
        // The two runs, the long extent, the lone small one, the last long one.
        assert_eq!(after, 5);
    }

    #[test]
    fn a_lone_small_piece_is_not_rewritten() {
        let extents = [
            extent(0, 200, Source::Image),
            extent(200, 1, Source::Segment(0)),
            extent(201, 200, Source::Image),
        ];
        assert_eq!(small_pieces(&extents), (Vec::new(), 3));
    }
}
