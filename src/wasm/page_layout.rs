//! Where each page of a kept memory comes from: [`Layout`], a sorted set of
//! [`Extent`]s, each a run of pages mapped from the runtime's snapshot image
//! or from one of the sandbox's page segments; and [`SegmentMark`], the
//! checksum of bytes a segment gained. The page store keeps a layout and
//! the journal records it (see `page_store.rs` and `journal.rs`).

use std::collections::BTreeMap;
use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::guest_memory::host_page;

/// Bytes a segment gained since the record before, and their checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SegmentMark {
    /// The segment.
    pub id: u32,
    /// Its length before.
    pub from: u64,
    /// Its length after.
    pub to: u64,
    /// CRC-32 of the bytes between.
    pub crc: u32,
}

/// Where a run of pages comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Source {
    /// The runtime's snapshot image.
    Image,
    /// A segment of the store, by number.
    Segment(u32),
}

/// A run of pages mapped from one place of one file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Extent {
    /// Its first page.
    pub first: usize,
    /// How many pages.
    pub pages: usize,
    /// The file.
    pub source: Source,
    /// Where its first page is in the file, in bytes.
    pub offset: u64,
}

impl Extent {
    pub(crate) fn end(&self) -> usize {
        self.first + self.pages
    }

    /// The part of the extent within `range` of pages.
    pub(crate) fn within(&self, range: &Range<usize>) -> Option<Extent> {
        let first = self.first.max(range.start);
        let end = self.end().min(range.end);
        (first < end).then(|| Extent {
            first,
            pages: end - first,
            source: self.source,
            offset: self.offset + ((first - self.first) * host_page()) as u64,
        })
    }
}

/// Which file each page of a memory is mapped from (pages in no extent are
/// anonymous zero pages), as extents in page order that do not overlap.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Layout {
    extents: Vec<Extent>,
}

impl Layout {
    /// A memory whose first `pages` pages are the snapshot image's.
    pub(crate) fn of_image(pages: usize) -> Self {
        let mut layout = Self::default();
        if pages > 0 {
            layout.extents.push(Extent {
                first: 0,
                pages,
                source: Source::Image,
                offset: 0,
            });
        }
        layout
    }

    /// Its extents, in page order.
    pub(crate) fn extents(&self) -> &[Extent] {
        &self.extents
    }

    /// Maps `extent`'s pages to its file, in place of what they were.
    pub(crate) fn set(&mut self, extent: Extent) {
        self.set_all(vec![extent]);
    }

    /// Maps each of `added`'s pages to its file, in place of what they were,
    /// in one pass over the layout. Extents of `added` that overlap one
    /// another are set one after the other (the later wins).
    pub(crate) fn set_all(&mut self, given: Vec<Extent>) {
        let mut added = given.clone();
        added.sort_by_key(|e| e.first);
        if added.windows(2).any(|w| w[0].end() > w[1].first) {
            for extent in given {
                self.set_all(vec![extent]);
            }
            return;
        }
        let mut kept: Vec<Extent> = Vec::with_capacity(self.extents.len() + 2 * added.len());
        let mut next = 0;
        for old in &self.extents {
            while next < added.len() && added[next].end() <= old.first {
                next += 1;
            }
            // The parts of `old` between the added extents that cut it.
            let mut from = old.first;
            for cut in added[next..].iter().take_while(|a| a.first < old.end()) {
                kept.extend(old.within(&(from..cut.first)));
                from = from.max(cut.end());
            }
            kept.extend(old.within(&(from..old.end())));
        }
        kept.extend(added);
        kept.sort_by_key(|e| e.first);
        self.extents = merged(kept);
    }

    /// Where page `index` comes from, and its byte offset in that file.
    pub(crate) fn find(&self, index: usize) -> Option<(Source, u64)> {
        let at = self.extents.partition_point(|e| e.end() <= index);
        let extent = self.extents.get(at).filter(|e| e.first <= index)?;
        let offset = extent.offset + ((index - extent.first) * host_page()) as u64;
        Some((extent.source, offset))
    }

    /// Pages of each segment in use.
    pub(crate) fn segment_use(&self) -> BTreeMap<u32, u64> {
        let mut used = BTreeMap::new();
        for extent in &self.extents {
            if let Source::Segment(id) = extent.source {
                *used.entry(id).or_default() += extent.pages as u64;
            }
        }
        used
    }
}

impl Layout {
    /// Checks that every extent lies within `memory_bytes` and, for a
    /// segment's, within the bytes `segments` says it holds.
    pub(crate) fn check(
        &self,
        segments: &BTreeMap<u32, u64>,
        memory_bytes: u64,
    ) -> Result<(), String> {
        let page = host_page() as u64;
        for extent in &self.extents {
            if extent.end() as u64 * page > memory_bytes {
                return Err(format!(
                    "pages {}..{} lie past the memory's end",
                    extent.first,
                    extent.end()
                ));
            }
            if let Source::Segment(id) = extent.source {
                let held = segments.get(&id).copied().unwrap_or(0);
                if extent.offset + extent.pages as u64 * page > held {
                    return Err(format!(
                        "pages {}..{} lie past what segment {id} holds",
                        extent.first,
                        extent.end()
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The file name of segment `id`.
pub(crate) fn segment_name(id: u32) -> String {
    format!("segment-{id:08}")
}

/// Joins neighbouring extents that continue one another in the same file.
pub(super) fn merged(sorted: Vec<Extent>) -> Vec<Extent> {
    let page = host_page() as u64;
    let mut out: Vec<Extent> = Vec::with_capacity(sorted.len());
    for extent in sorted {
        if let Some(last) = out.last_mut()
            && last.end() == extent.first
            && last.source == extent.source
            && last.offset + last.pages as u64 * page == extent.offset
        {
            last.pages += extent.pages;
            continue;
        }
        out.push(extent);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator, so that a failure repeats.
    struct Steps(u64);

    impl Steps {
        fn below(&mut self, n: usize) -> usize {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((self.0 >> 33) as usize) % n
        }
    }

    #[test]
    fn setting_many_extents_at_once_maps_each_page_as_setting_them_one_by_one_would() {
        const PAGES: usize = 300;
        let page = host_page() as u64;
        let mut steps = Steps(7);
        let mut layout = Layout::of_image(120);
        // Where each page comes from, page by page.
        // (Room past PAGES for an overlapping extent that reaches beyond.)
        let mut model: Vec<Option<(Source, u64)>> = (0..PAGES + 16)
            .map(|i| (i < 120).then_some((Source::Image, i as u64 * page)))
            .collect();
        for round in 0..200u32 {
            // Extents that do not overlap one another, in no order; now and
            // then, two that do (the later wins).
            let mut added = Vec::new();
            let mut at = steps.below(20);
            while at < PAGES - 1 && added.len() < 12 {
                let pages = 1 + steps.below(9).min(PAGES - 1 - at);
                added.push(Extent {
                    first: at,
                    pages,
                    source: Source::Segment(round),
                    offset: steps.below(1000) as u64 * page,
                });
                at += pages + steps.below(30);
            }
            if round % 10 == 0 && added.len() > 1 {
                let mut overlapping = added[0];
                overlapping.first = added[1].first.saturating_sub(1);
                overlapping.offset += page;
                added.push(overlapping);
            }
            let order = added.len();
            added.rotate_left(steps.below(order.max(1)));
            // The model applies them one after the other, as given.
            for extent in &added {
                let pages = &mut model[extent.first..extent.end()];
                for (k, slot) in pages.iter_mut().enumerate() {
                    *slot = Some((extent.source, extent.offset + k as u64 * page));
                }
            }
            layout.set_all(added);
            for (i, expected) in model.iter().enumerate() {
                assert_eq!(layout.find(i), *expected, "page {i} after round {round}");
            }
            assert!(
                layout
                    .extents()
                    .windows(2)
                    .all(|w| w[0].end() <= w[1].first),
                "extents in order, apart, after round {round}"
            );
        }
    }
}
