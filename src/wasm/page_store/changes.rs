//! Telling the pages an execution changed from those it only wrote (see
//! [`PageStore::split_by_change`]).

use std::ops::Range;

use super::{ChangedAndNot, PageStore, StoreError, read_at};
use crate::wasm::guest_memory::{MemoryRegion, host_page};
use crate::wasm::page_layout::Extent;

/// Unchanged pages between changed ones that are written with them rather
/// than left out (one extent fewer for a page or two of bytes).
const BRIDGED_PAGES: usize = 2;
/// Pages of last copies read at once when comparing (a bounded buffer).
const READ_PAGES: usize = 256;

impl PageStore {
    /// `runs` of written pages split into the runs of pages whose bytes
    /// differ from what the layout says (what the execution changed: these
    /// are written) and the runs identical to it page for page (pages written
    /// earlier and left the memory's own, or written back as they were:
    /// these are mapped from the layout again). Unchanged pages between
    /// changed ones in a run are in neither: they stay the memory's own, and
    /// the layout already holds their bytes. Gaps of at most
    /// [`BRIDGED_PAGES`] unchanged pages are written with their neighbours,
    /// to keep the layout in fewer pieces.
    ///
    /// # Safety
    ///
    /// As for [`PageStore::flush`].
    pub(crate) unsafe fn split_by_change(
        &self,
        region: &MemoryRegion,
        runs: &[Range<usize>],
    ) -> Result<ChangedAndNot, StoreError> {
        let mut before = Vec::new();
        let (mut changed, mut unchanged) = (Vec::new(), Vec::new());
        for run in runs {
            let mut differing: Vec<Range<usize>> = Vec::new();
            let mut note = |index: usize| match differing.last_mut() {
                Some(last) if index - last.end <= BRIDGED_PAGES => last.end = index + 1,
                _ => differing.push(index..index + 1),
            };
            // The run piece by piece of the layout, each piece's last copies
            // read at once; pages in no piece are new.
            let extents = self.layout.extents();
            let mut at = extents.partition_point(|e| e.end() <= run.start);
            let mut index = run.start;
            while index < run.end {
                match extents.get(at).and_then(|e| e.within(&(index..run.end))) {
                    Some(piece) if piece.first == index => {
                        // Read in bounded parts: a piece can be most of the memory.
                        for part in (piece.first..piece.end()).step_by(READ_PAGES) {
                            let part = piece.within(&(part..part + READ_PAGES));
                            let part = part.expect("within the piece");
                            // SAFETY: passed on from the caller.
                            let same = unsafe { self.same_as_before(region, &part, &mut before)? };
                            for (k, same) in same.into_iter().enumerate() {
                                if !same {
                                    note(part.first + k);
                                }
                            }
                        }
                        index = piece.end();
                        at += 1;
                    }
                    Some(piece) => {
                        (index..piece.first).for_each(&mut note);
                        index = piece.first;
                    }
                    None => {
                        (index..run.end).for_each(&mut note);
                        index = run.end;
                    }
                }
            }
            if differing.is_empty() {
                unchanged.push(run.clone());
            } else {
                changed.extend(differing);
            }
        }
        Ok((changed, unchanged))
    }

    /// For each page of `piece` (a part of one extent of the layout),
    /// whether the memory holds the bytes the layout says; `before` is room
    /// to read them into.
    ///
    /// # Safety
    ///
    /// As for [`PageStore::flush`].
    unsafe fn same_as_before(
        &self,
        region: &MemoryRegion,
        piece: &Extent,
        before: &mut Vec<u8>,
    ) -> Result<Vec<bool>, StoreError> {
        let page = host_page();
        before.resize(piece.pages * page, 0);
        let file = self.file_of(piece.source)?;
        read_at(file, before, piece.offset)
            .map_err(StoreError::io("reading memory pages from", &self.dir))?;
        // SAFETY: the guest is not running (the caller's promise).
        let now = unsafe { region.bytes(piece.first * page..piece.end() * page)? };
        Ok(now
            .chunks(page)
            .zip(before.chunks(page))
            .map(|(now, then)| now == then)
            .collect())
    }
}
