//! Telling the pages an execution changed from those it only wrote (see
//! [`PageStore::split_by_change`]).

use std::ops::Range;

use super::{ChangedAndNot, FileView, PageStore, StoreError, read_at};
use crate::wasm::guest_memory::{MemoryRegion, host_page};
use crate::wasm::page_layout::{Extent, Source};

/// Unchanged pages between changed ones that are written with them rather
/// than left out (one extent fewer for a page or two of bytes).
const BRIDGED_PAGES: usize = 2;
/// Pages of last copies read at once when comparing without a view of
/// their file (a bounded buffer).
const READ_PAGES: usize = 256;
/// Least bytes of a segment a view covers (a view of the segment being
/// appended to covers twice what it holds, so it is made anew rarely).
const VIEW_BYTES: u64 = 16 << 20;

impl PageStore {
    /// `runs` of written pages split into the runs of pages whose bytes
    /// differ from what the layout says (what the execution changed: these
    /// are written) and the runs identical to it page for page (pages written
    /// earlier and left the memory's own, or written back as they were:
    /// these are mapped from the layout again once idle, see
    /// [`super::idle`]). Gaps of at most [`BRIDGED_PAGES`] unchanged pages
    /// between changed ones are written with their neighbours, to keep the
    /// layout in fewer pieces.
    ///
    /// # Safety
    ///
    /// As for [`PageStore::flush`].
    pub(crate) unsafe fn split_by_change(
        &mut self,
        region: &MemoryRegion,
        runs: &[Range<usize>],
    ) -> Result<ChangedAndNot, StoreError> {
        // SAFETY: passed on from the caller.
        let same = unsafe { self.pages_as_before(region, runs)? };
        let mut same = same.into_iter().peekable();
        let (mut changed, mut unchanged) = (Vec::new(), Vec::new());
        for run in runs {
            let mut differing: Vec<Range<usize>> = Vec::new();
            for index in run.clone() {
                while same.next_if(|&page| page < index).is_some() {}
                if same.next_if_eq(&index).is_some() {
                    continue;
                }
                match differing.last_mut() {
                    Some(last) if index - last.end <= BRIDGED_PAGES => last.end = index + 1,
                    _ => differing.push(index..index + 1),
                }
            }
            // The pages between changed ones (beyond a bridge) are unchanged
            // runs of their own.
            let mut from = run.start;
            for part in &differing {
                if from < part.start {
                    unchanged.push(from..part.start);
                }
                from = part.end;
            }
            if from < run.end {
                unchanged.push(from..run.end);
            }
            changed.extend(differing);
        }
        Ok((changed, unchanged))
    }

    /// The pages of `runs` (in page order) that hold the bytes the layout
    /// says, in page order. Last copies that lie one after another in one
    /// file (the pages one flush wrote, however scattered in the memory)
    /// are compared in one go, read in place through a view of the file, or
    /// read [`READ_PAGES`] at a time where no view can be had.
    ///
    /// # Safety
    ///
    /// As for [`PageStore::flush`].
    unsafe fn pages_as_before(
        &mut self,
        region: &MemoryRegion,
        runs: &[Range<usize>],
    ) -> Result<Vec<usize>, StoreError> {
        let page = host_page();
        let mut same = Vec::new();
        let mut before = Vec::new();
        let mut batch: Vec<Extent> = Vec::new();
        let mut batch_pages = 0;
        for part in self.last_copies(runs) {
            let follows = batch.last().is_some_and(|last| {
                last.source == part.source
                    && last.offset + (last.pages * page) as u64 == part.offset
            });
            let joins = follows && batch_pages + part.pages <= READ_PAGES;
            if !(batch.is_empty() || joins) {
                // SAFETY: passed on from the caller.
                unsafe { self.compare(region, &batch, &mut before, &mut same)? };
                batch.clear();
                batch_pages = 0;
            }
            batch_pages += part.pages;
            batch.push(part);
        }
        if !batch.is_empty() {
            // SAFETY: passed on from the caller.
            unsafe { self.compare(region, &batch, &mut before, &mut same)? };
        }
        Ok(same)
    }

    /// The pieces of the layout's extents that hold the last copies of
    /// `runs`' pages, in page order, none longer than [`READ_PAGES`] (a
    /// piece can be most of the memory). Pages in no extent have none.
    fn last_copies(&self, runs: &[Range<usize>]) -> Vec<Extent> {
        let extents = self.layout.extents();
        let mut pieces = Vec::new();
        for run in runs {
            let start = extents.partition_point(|e| e.end() <= run.start);
            for extent in extents[start..].iter().take_while(|e| e.first < run.end) {
                let Some(piece) = extent.within(run) else {
                    continue;
                };
                for first in (piece.first..piece.end()).step_by(READ_PAGES) {
                    pieces.extend(piece.within(&(first..first + READ_PAGES)));
                }
            }
        }
        pieces
    }

    /// Adds to `same` the pages of `batch` (pieces whose last copies lie one
    /// after another in one file) whose bytes in the memory are those
    /// copies; `before` is room to read the copies into when their file
    /// cannot be viewed.
    ///
    /// # Safety
    ///
    /// As for [`PageStore::flush`].
    unsafe fn compare(
        &mut self,
        region: &MemoryRegion,
        batch: &[Extent],
        before: &mut Vec<u8>,
        same: &mut Vec<usize>,
    ) -> Result<(), StoreError> {
        let page = host_page();
        let first = &batch[0];
        let len = batch.iter().map(|p| p.pages).sum::<usize>() * page;
        let then = if self.view_covers(first.source, first.offset + len as u64) {
            // SAFETY: the view covers the bytes (just checked), which the
            // file holds (checked when the view was made, and a segment
            // only grows), and no file of a store is cut short.
            unsafe { self.viewed(first.source, first.offset, len) }
        } else {
            None
        };
        let then = match then {
            Some(bytes) => bytes,
            None => {
                before.resize(len, 0);
                read_at(self.file_of(first.source)?, before, first.offset)
                    .map_err(StoreError::io("reading memory pages from", &self.dir))?;
                before.as_slice()
            }
        };
        let mut then = then.chunks(page);
        for piece in batch {
            // SAFETY: the guest is not running (the caller's promise).
            let now = unsafe { region.bytes(piece.first * page..piece.end() * page)? };
            for (k, now) in now.chunks(page).enumerate() {
                if then.next() == Some(now) {
                    same.push(piece.first + k);
                }
            }
        }
        Ok(())
    }

    /// Whether `source`'s file can be read in place up to byte `end`,
    /// making (or remaking, larger) a segment's view when needed; once a
    /// view is refused, the store reads with system calls.
    fn view_covers(&mut self, source: Source, end: u64) -> bool {
        let holds = self.file_len(source);
        if end > holds || self.views_refused {
            return false;
        }
        let covered = match source {
            Source::Image => self.image.image_view().is_some(),
            Source::Segment(id) => self.segments.get_mut(&id).is_some_and(|segment| {
                if segment.view.as_ref().is_some_and(|v| v.len() as u64 >= end) {
                    return true;
                }
                // The file must hold what the store says it does: reading
                // past its end would fault.
                let on_disk = segment.file.metadata().map_or(0, |m| m.len());
                let want = usize::try_from(holds.saturating_mul(2).max(VIEW_BYTES)).ok();
                segment.view = want
                    .filter(|_| on_disk >= holds)
                    .and_then(|want| FileView::of(&segment.file, want).ok());
                segment.view.is_some()
            }),
        };
        self.views_refused = !covered;
        covered
    }

    /// The `len` bytes from `at` of `source`'s view.
    ///
    /// # Safety
    ///
    /// As for [`FileView::bytes`].
    unsafe fn viewed(&self, source: Source, at: u64, len: usize) -> Option<&[u8]> {
        let view = match source {
            Source::Image => self.image.image_view(),
            Source::Segment(id) => self.segments.get(&id).and_then(|s| s.view.as_ref()),
        }?;
        // SAFETY: passed on from the caller.
        unsafe { view.bytes(at, len) }
    }
}
