//! Which of the written pages a flush found unchanged are mapped from the
//! layout again, and which stay the memory's own for now (see
//! [`IdlePages`]).

use std::collections::HashMap;
use std::ops::Range;

/// Flushes in a row that must find a page unchanged before it is mapped
/// from the layout again.
pub(super) const IDLE_FLUSHES: u8 = 8;
/// Unchanged runs at least this long (in pages) are mapped again at once:
/// data written once (an array, a table) rather than the interpreter's
/// bookkeeping, and costly to compare at every flush.
const LONG_RUN: usize = 64;
/// Most pages a memory keeps as its own while idle: what a flush compares
/// beyond the pages written since the last one (and the changed pages of
/// the last one) stays bounded, however a guest scatters its writes.
const MOST_IDLE: usize = 4096;

/// The memory's own copies of pages whose bytes the layout already holds,
/// with how many flushes in a row found each unchanged.
///
/// Mapping such a page from the layout again gives its memory back to the
/// file, but the interpreter writes many of the same pages at every
/// execution (reference counts, counters, allocator lists), often leaving
/// them as they were: each would then take a copy-on-write fault at the
/// next execution, and a mapping at the next flush. Small runs of pages
/// stay the memory's own until they have been unchanged for
/// [`IDLE_FLUSHES`] flushes; a flush compares them with the layout (they
/// are found written again, being the memory's own), which costs less. At
/// most [`MOST_IDLE`] pages are kept so; runs beyond are mapped at once.
#[derive(Debug, Default)]
pub(crate) struct IdlePages {
    flushes: HashMap<usize, u8>,
}

impl IdlePages {
    /// Of the `unchanged` runs a flush found (runs of the memory's own
    /// pages identical to the layout), those to map from the layout now; the
    /// others are counted as idle once more. Pages not in `unchanged` (they
    /// changed, or are no longer the memory's own) start counting again.
    pub(crate) fn due(&mut self, unchanged: &[Range<usize>]) -> Vec<Range<usize>> {
        let mut due = Vec::new();
        let mut still = HashMap::new();
        for run in unchanged {
            if run.len() >= LONG_RUN || still.len() + run.len() > MOST_IDLE {
                due.push(run.clone());
                continue;
            }
            let counted: Vec<(usize, u8)> = run
                .clone()
                .map(|page| {
                    let before = self.flushes.get(&page).copied().unwrap_or(0);
                    (page, before.saturating_add(1))
                })
                .collect();
            if counted.iter().all(|(_, n)| *n >= IDLE_FLUSHES) {
                due.push(run.clone());
            } else {
                still.extend(counted);
            }
        }
        self.flushes = still;
        due
    }

    /// Forgets every page (the memory was mapped from the layout anew).
    pub(crate) fn clear(&mut self) {
        self.flushes.clear();
    }
}

#[cfg(test)]
// A flush often finds a single unchanged run: the tests pass slices of one.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    #[test]
    fn a_short_run_is_mapped_again_after_being_idle_long_enough() {
        let mut idle = IdlePages::default();
        for _ in 1..IDLE_FLUSHES {
            assert!(idle.due(&[3..5]).is_empty());
        }
        assert_eq!(idle.due(&[3..5]), [3..5]);
        // Mapped again: counted from nothing when next found.
        assert!(idle.due(&[3..5]).is_empty());
    }

    #[test]
    fn a_page_that_changes_starts_counting_again() {
        let mut idle = IdlePages::default();
        for _ in 1..IDLE_FLUSHES {
            assert!(idle.due(&[3..5]).is_empty());
        }
        // Page 4 changed in this flush (it is not among the unchanged
        // runs); page 3 has been idle long enough.
        assert_eq!(idle.due(&[3..4]), [3..4]);
        assert!(idle.due(&[4..5]).is_empty(), "page 4 is counted anew");
    }

    #[test]
    fn pages_beyond_the_most_kept_idle_are_mapped_again_at_once() {
        let mut idle = IdlePages::default();
        let runs: Vec<Range<usize>> = (0..MOST_IDLE / 32 + 2)
            .map(|k| k * 100..k * 100 + 32)
            .collect();
        let due = idle.due(&runs);
        assert_eq!(due, runs[MOST_IDLE / 32..], "the runs past the bound");
        assert_eq!(idle.flushes.len(), MOST_IDLE);
    }

    #[test]
    fn a_long_run_is_mapped_again_at_once() {
        let mut idle = IdlePages::default();
        let long = 100..100 + LONG_RUN;
        assert_eq!(idle.due(&[long.clone(), 3..5]), [long]);
    }
}
