//! [`PageStore`]: where a sandbox's memory pages live on disk, so that its
//! memory is a set of file mappings (see [`super::guest_memory`]) instead of
//! a private copy: the runtime's snapshot image, plus segment files holding
//! the pages the sandbox wrote.
//!
//! After a flush, every page the sandbox wrote is in a segment: a fork maps
//! the same files into a new memory (and hard-links the segments into its
//! own store), and a saved sandbox keeps them. The pages the last execution
//! wrote stay the memory's own copies (so an execution that writes them
//! again takes no page fault); the next flush finds them with the pages
//! written since (see [`super::written_pages`]) and writes those that
//! changed. Unchanged ones are mapped from their segment again once they
//! have stayed unchanged for a while, or at once when they are many in a
//! row (see [`idle`]).
//!
//! Segments are append-only (a byte once written never changes) and a store
//! stops appending to its segment when it is forked, so a mapping of a
//! segment never sees another sandbox's writes. A segment no page uses any
//! more is deleted; when the pages left are scattered over too many
//! mappings, or the segments hold much more than the pages still used, pages
//! in use are written anew (see [`compaction`]). A kept memory flushes before
//! its execution is answered and leaves the rest (mapping idle pages again,
//! compacting) to [`PageStore::tidy`] after it.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::file_view::FileView;
use super::guest_memory::{MemoryRegion, host_page};
use super::journal::Replayed;
use super::page_layout::{Extent, Layout, SegmentMark, Source, segment_name};
use super::snapshot::Snapshot;
pub use super::store_error::StoreError;
use super::written_pages::{Finder, PageSource, written_pages};
use crate::sandbox::private_files::{create_private_dir, open_regular};
use idle::IdlePages;

/// Written runs of pages this close (in pages) are kept as one run, with
/// the pages between them: a few more bytes, far fewer extents.
const NEAR_PAGES: usize = 8;
/// `runs` (in page order) joined where at most `gap` pages lie between
/// two.
fn bridged(runs: Vec<Range<usize>>, gap: usize) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::with_capacity(runs.len());
    for run in runs {
        match out.last_mut() {
            Some(last) if run.start.saturating_sub(last.end) <= gap => {
                last.end = last.end.max(run.end)
            }
            _ => out.push(run),
        }
    }
    out
}

/// One segment file, open.
#[derive(Debug)]
struct Segment {
    file: Arc<File>,
    /// Bytes written so far.
    len: u64,
    /// The checksums of its bytes, one per flush that wrote to it, in order.
    marks: Vec<SegmentMark>,
    /// Its bytes read in place, once a flush has compared pages with them.
    view: Option<FileView>,
}

/// What a flush changed.
#[derive(Debug, Default)]
pub(crate) struct Flushed {
    /// The extents mapped anew; or, when `whole`, every extent.
    pub extents: Vec<Extent>,
    /// Whether the layout was rebuilt (a compaction).
    pub whole: bool,
    /// The checksums of the bytes the segments gained.
    pub marks: Vec<SegmentMark>,
}

impl Flushed {
    /// Whether nothing changed.
    pub(crate) fn is_empty(&self) -> bool {
        self.extents.is_empty() && !self.whole
    }
}

/// Runs of pages that changed, and runs that did not.
pub(crate) type ChangedAndNot = (Vec<Range<usize>>, Vec<Range<usize>>);

/// When a flush maps the unchanged pages that have been idle long enough
/// from the layout again (see [`idle`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Upkeep {
    /// During the flush.
    Now,
    /// At the [`PageStore::tidy`] that follows it, once the execution has
    /// been answered (mapping them is not what makes the state durable).
    Deferred,
}

/// Whether pages just appended to a segment are mapped from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Remap {
    /// Mapped from the segment (a compaction: the memory gives up its own
    /// copies).
    Yes,
    /// Left as the memory's own (a flush).
    No,
}

/// A sandbox's pages on disk (see the module's documentation).
#[derive(Debug)]
pub(crate) struct PageStore {
    /// The directory of its segments (created on the first write).
    dir: PathBuf,
    image: Arc<Snapshot>,
    segments: BTreeMap<u32, Segment>,
    /// The segment new pages are appended to, once one is open.
    appending: Option<u32>,
    next_id: u32,
    layout: Layout,
    finder: Finder,
    /// Whether segments no page uses are kept until [`PageStore::release_unused`]
    /// (a journal may still name them).
    hold_unused: bool,
    /// Extents the last compaction left.
    compacted_extents: usize,
    /// Segments an earlier interpreter left in the directory (its journal
    /// may still name them): deleted with the unused ones.
    stale: Vec<PathBuf>,
    /// Unchanged pages the memory keeps as its own for now.
    idle: IdlePages,
    /// Idle pages the last flush left to [`PageStore::tidy`] to map.
    deferred: Vec<Range<usize>>,
    /// Whether its files could not be viewed (see [`FileView`]): they are
    /// read with system calls from then on.
    views_refused: bool,
}

impl PageStore {
    /// The store of a memory that is the snapshot `image` as mapped, in
    /// `dir` (made when first needed; what an earlier interpreter left there
    /// goes).
    pub(crate) fn of_image(dir: PathBuf, image: Arc<Snapshot>) -> Self {
        let pages = image.memory_bytes() as usize / host_page();
        Self::new(dir, image, Layout::of_image(pages))
    }

    fn new(dir: PathBuf, image: Arc<Snapshot>, layout: Layout) -> Self {
        let stale = existing_segments(&dir);
        let next_id = stale.iter().map(|(id, _)| id + 1).max().unwrap_or(0);
        Self {
            dir,
            image,
            segments: BTreeMap::new(),
            stale: stale.into_iter().map(|(_, path)| path).collect(),
            appending: None,
            next_id,
            layout,
            finder: Finder::best(),
            hold_unused: false,
            compacted_extents: 0,
            idle: IdlePages::default(),
            deferred: Vec::new(),
            views_refused: false,
        }
    }

    /// Keeps segments no page uses until [`PageStore::release_unused`]: a
    /// journal's records may name them until it is rewritten.
    pub(crate) fn hold_unused_segments(&mut self) {
        self.hold_unused = true;
    }

    /// Deletes the segments no page uses (but the one being written).
    pub(crate) fn release_unused(&mut self) {
        let used = self.layout.segment_use();
        let unused: Vec<u32> = self
            .segments
            .keys()
            .copied()
            .filter(|id| !used.contains_key(id) && Some(*id) != self.appending)
            .collect();
        for id in unused {
            self.segments.remove(&id);
            let _ = std::fs::remove_file(self.segment_path(id));
        }
        for path in self.stale.drain(..) {
            let _ = std::fs::remove_file(path);
        }
    }

    /// Stops holding unused segments (the journal that named them is gone)
    /// and deletes them.
    pub(crate) fn stop_holding(&mut self) {
        self.hold_unused = false;
        self.release_unused();
    }

    /// Uses `finder` to find written pages (the tests try each).
    #[cfg(test)]
    fn with_finder(mut self, finder: Finder) -> Self {
        self.finder = finder;
        self
    }

    /// Its layout.
    #[cfg(test)]
    pub(crate) fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The directory of its segments.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its segments, for syncing them in the background.
    pub(crate) fn sync_handles(&self) -> Vec<Arc<File>> {
        // Syncing a segment already on disk costs next to nothing; every
        // one the journal names must be there before it says so.
        self.segments.values().map(|s| s.file.clone()).collect()
    }

    /// Bytes its segments hold on disk.
    pub(crate) fn segment_bytes(&self) -> u64 {
        self.segments.values().map(|s| s.len).sum()
    }

    /// Writes the pages of `region` (up to `memory_bytes`) written since
    /// the last flush into a segment and maps them from there; returns what
    /// changed.
    ///
    /// # Safety
    ///
    /// `region` must be the memory this store describes, and no guest code
    /// may run on it meanwhile.
    pub(crate) unsafe fn flush(
        &mut self,
        region: &MemoryRegion,
        memory_bytes: usize,
    ) -> Result<Flushed, StoreError> {
        // SAFETY: passed on from the caller.
        let written = unsafe { self.written(region, memory_bytes)? };
        // SAFETY: passed on from the caller.
        unsafe { self.flush_written(region, &written, true) }
    }

    /// The pages of `region` (up to `memory_bytes`) written since the last
    /// flush, as runs of page indices; runs a few pages apart come as one.
    ///
    /// # Safety
    ///
    /// As for [`PageStore::flush`].
    pub(crate) unsafe fn written(
        &self,
        region: &MemoryRegion,
        memory_bytes: usize,
    ) -> Result<Vec<Range<usize>>, StoreError> {
        // SAFETY: passed on from the caller.
        let written = unsafe { written_pages(region, memory_bytes, self.finder, self) }
            .map_err(StoreError::io("finding the pages written in", &self.dir))?;
        Ok(bridged(written, NEAR_PAGES))
    }

    /// [`PageStore::flush`] of the pages `written` found; compacting
    /// afterwards only when `may_compact`.
    ///
    /// # Safety
    ///
    /// As for [`PageStore::flush`].
    pub(crate) unsafe fn flush_written(
        &mut self,
        region: &MemoryRegion,
        written: &[Range<usize>],
        may_compact: bool,
    ) -> Result<Flushed, StoreError> {
        if written.is_empty() {
            return Ok(Flushed::default());
        }
        // SAFETY: passed on from the caller.
        let split = unsafe { self.split_by_change(region, written)? };
        // SAFETY: passed on from the caller.
        let flushed = unsafe { self.flush_split(region, split, Upkeep::Now)? };
        let room = if may_compact { u64::MAX } else { 0 };
        // SAFETY: passed on from the caller.
        let compacted = unsafe { self.tidy(region, room)? };
        Ok(if compacted { self.whole() } else { flushed })
    }

    /// [`PageStore::flush_written`] of written pages already split by
    /// [`PageStore::split_by_change`], without compacting; the unchanged
    /// pages due to be mapped from the layout again are mapped now or left
    /// for [`PageStore::tidy`], as `upkeep` says.
    ///
    /// # Safety
    ///
    /// As for [`PageStore::flush`].
    pub(crate) unsafe fn flush_split(
        &mut self,
        region: &MemoryRegion,
        (changed, unchanged): ChangedAndNot,
        upkeep: Upkeep,
    ) -> Result<Flushed, StoreError> {
        // Unchanged pages are mapped from the layout once idle (see [`idle`]).
        let due = self.idle.due(&unchanged);
        match upkeep {
            // SAFETY: passed on from the caller.
            Upkeep::Now => unsafe { self.map_from_layout(region, &due)? },
            Upkeep::Deferred => self.deferred = due,
        }
        if changed.is_empty() {
            self.drop_unused_segments();
            return Ok(Flushed::default());
        }
        // SAFETY: passed on from the caller.
        let (extents, mark) = unsafe { self.append(region, &changed, Remap::No)? };
        self.drop_unused_segments();
        Ok(Flushed {
            extents,
            whole: false,
            marks: vec![mark],
        })
    }

    /// Does what the last flush left for later: maps from the layout the
    /// unchanged pages it left (see [`Upkeep::Deferred`]), then compacts the
    /// store when it is due and the disk allowed has `room` (bytes) for it
    /// (see [`compaction`]). Whether it compacted (the layout then wants a
    /// whole record, see [`PageStore::whole`]).
    ///
    /// # Safety
    ///
    /// As for [`PageStore::flush`]; and no guest code may have run since
    /// that flush.
    pub(crate) unsafe fn tidy(
        &mut self,
        region: &MemoryRegion,
        room: u64,
    ) -> Result<bool, StoreError> {
        let due = std::mem::take(&mut self.deferred);
        // SAFETY: passed on from the caller; the pages are as the flush
        // found them.
        unsafe { self.map_from_layout(region, &due)? };
        if room < self.used_bytes() || !self.needs_compaction() {
            return Ok(false);
        }
        // SAFETY: passed on from the caller.
        unsafe { self.compact(region, room)? };
        Ok(true)
    }

    /// Forgets what the last flush left for [`PageStore::tidy`] (the guest
    /// is about to run: those pages may change).
    pub(crate) fn forget_deferred(&mut self) {
        self.deferred.clear();
    }

    /// Bytes a compaction would write now: the pages the segments hold.
    pub(crate) fn used_bytes(&self) -> u64 {
        self.layout.segment_use().values().sum::<u64>() * host_page() as u64
    }

    /// The whole layout, and the checksums of every segment it uses.
    pub(crate) fn whole(&self) -> Flushed {
        let used = self.layout.segment_use();
        Flushed {
            extents: self.layout.extents().to_vec(),
            whole: true,
            marks: self
                .segments
                .iter()
                .filter(|(id, _)| used.contains_key(id))
                .flat_map(|(_, s)| s.marks.iter().copied())
                .collect(),
        }
    }

    /// Maps `runs` of the memory from where the layout says their pages
    /// are (pages identical to those, held by the memory until now).
    ///
    /// # Safety
    ///
    /// As for [`PageStore::flush`].
    unsafe fn map_from_layout(
        &self,
        region: &MemoryRegion,
        runs: &[Range<usize>],
    ) -> Result<(), StoreError> {
        let page = host_page();
        let extents = self.layout.extents();
        for run in runs {
            let start = extents.partition_point(|e| e.end() <= run.start);
            for extent in extents[start..].iter().take_while(|e| e.first < run.end) {
                let Some(part) = extent.within(run) else {
                    continue;
                };
                let file = self.file_of(part.source)?;
                // SAFETY: the files' bytes never change; the guest is not
                // running (the caller's promise).
                unsafe {
                    region.map_file(part.first * page..part.end() * page, file, part.offset)?
                };
            }
        }
        Ok(())
    }

    /// Appends the pages of `runs` to the segment being written (mapping
    /// them from it when `remap` says so); returns the new extents and the
    /// checksum of the bytes added.
    ///
    /// Pages an execution wrote are not mapped from the segment at once:
    /// the memory keeps its own copies, so an execution writing the same
    /// pages again (CPython's own bookkeeping writes hundreds every time)
    /// takes no page fault for them. The next flush finds them again,
    /// writes the ones that changed, and maps the rest from the segment.
    ///
    /// # Safety
    ///
    /// As for [`PageStore::flush`].
    unsafe fn append(
        &mut self,
        region: &MemoryRegion,
        runs: &[Range<usize>],
        remap: Remap,
    ) -> Result<(Vec<Extent>, SegmentMark), StoreError> {
        let page = host_page();
        let id = self.segment_to_append()?;
        let path = self.segment_path(id);
        let segment = self.segments.get_mut(&id).expect("just opened");
        let from = segment.len;
        let mut crc = crc32fast::Hasher::new();
        let mut changed = Vec::with_capacity(runs.len());
        let mut data = Vec::with_capacity(runs.len());
        let mut end = from;
        for run in runs {
            // SAFETY: the guest is not running (the caller's promise).
            let bytes = unsafe { region.bytes(run.start * page..run.end * page)? };
            crc.update(bytes);
            changed.push(Extent {
                first: run.start,
                pages: run.len(),
                source: Source::Segment(id),
                offset: end,
            });
            end += bytes.len() as u64;
            data.push(bytes);
        }
        // The runs lie one after another in the segment: written in one go.
        // On failure nothing names the bytes written: the next append
        // writes over them, and its mark starts where the last ended.
        write_all_at(&segment.file, &data, from)
            .map_err(StoreError::io("writing memory pages to", &path))?;
        segment.len = end;
        let mark = SegmentMark {
            id,
            from,
            to: segment.len,
            crc: crc.finalize(),
        };
        segment.marks.push(mark);
        for extent in &changed {
            if remap == Remap::Yes {
                // SAFETY: the bytes just written never change; the guest is
                // not running.
                unsafe {
                    region.map_file(
                        extent.first * page..extent.end() * page,
                        &segment.file,
                        extent.offset,
                    )?
                };
            }
        }
        self.layout.set_all(changed.clone());
        Ok((changed, mark))
    }

    /// The segment to append to, opening a new one when there is none.
    fn segment_to_append(&mut self) -> Result<u32, StoreError> {
        if let Some(id) = self.appending {
            return Ok(id);
        }
        create_private_dir(&self.dir)
            .map_err(StoreError::io("creating the memory directory", &self.dir))?;
        let id = self.next_id;
        let path = self.segment_path(id);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(StoreError::io("creating the memory segment", &path))?;
        self.segments.insert(
            id,
            Segment {
                file: Arc::new(file),
                len: 0,
                marks: Vec::new(),
                view: None,
            },
        );
        self.next_id += 1;
        self.appending = Some(id);
        Ok(id)
    }

    fn segment_path(&self, id: u32) -> PathBuf {
        self.dir.join(segment_name(id))
    }

    /// Deletes the segments no page uses, unless they are held.
    fn drop_unused_segments(&mut self) {
        if !self.hold_unused {
            self.release_unused();
        }
    }

    /// A store for a fork of this memory in `dir`: the same layout, its
    /// segments hard-linked (copied where links cannot be made). This store
    /// appends to a new segment from now on, so neither sees the other's
    /// later pages.
    pub(crate) fn fork(&mut self, dir: PathBuf) -> Result<PageStore, StoreError> {
        self.appending = None;
        let marks = self
            .segments
            .iter()
            .map(|(id, s)| (*id, (s.len, s.marks.clone())))
            .collect();
        let segments = link_segments(&self.dir, &dir, marks)?;
        Ok(PageStore {
            dir,
            image: self.image.clone(),
            segments,
            appending: None,
            next_id: self.next_id,
            layout: self.layout.clone(),
            finder: self.finder,
            hold_unused: false,
            compacted_extents: self.compacted_extents,
            stale: Vec::new(),
            idle: IdlePages::default(),
            deferred: Vec::new(),
            views_refused: false,
        })
    }

    /// The store of a memory brought back from the journal in `from` (a
    /// saved sandbox), in `dir`, its segments hard-linked from there.
    pub(crate) fn restored(
        from: &Path,
        dir: PathBuf,
        image: Arc<Snapshot>,
        replayed: &Replayed,
    ) -> Result<PageStore, StoreError> {
        let marks = replayed
            .segments
            .iter()
            .map(|(id, len)| {
                (
                    *id,
                    (*len, replayed.marks.get(id).cloned().unwrap_or_default()),
                )
            })
            .collect();
        let segments = link_segments(from, &dir, marks)?;
        let next_id = segments.keys().next_back().map_or(0, |id| id + 1);
        Ok(PageStore {
            dir,
            image,
            segments,
            appending: None,
            next_id,
            layout: replayed.layout.clone(),
            finder: Finder::best(),
            hold_unused: false,
            compacted_extents: 0,
            stale: Vec::new(),
            idle: IdlePages::default(),
            deferred: Vec::new(),
            views_refused: false,
        })
    }

    /// Maps every extent of the layout into `region` (a fresh memory, grown
    /// to its size).
    ///
    /// # Safety
    ///
    /// No guest code may run on the memory meanwhile.
    pub(crate) unsafe fn map_into(&self, region: &MemoryRegion) -> Result<(), StoreError> {
        let page = host_page();
        for extent in self.layout.extents() {
            let file = self.file_of(extent.source)?;
            let end = extent.offset + (extent.pages * page) as u64;
            if end > self.file_len(extent.source) {
                return Err(StoreError::Inconsistent(format!(
                    "{:?} ends at byte {} of {end}",
                    extent.source,
                    self.file_len(extent.source)
                )));
            }
            // SAFETY: the file's bytes never change; the guest is not
            // running (the caller's promise).
            unsafe {
                region.map_file(
                    extent.first * page..extent.end() * page,
                    file,
                    extent.offset,
                )?
            };
        }
        Ok(())
    }

    fn file_of(&self, source: Source) -> Result<&File, StoreError> {
        match source {
            Source::Image => Ok(self.image.image_file()),
            Source::Segment(id) => self
                .segments
                .get(&id)
                .map(|s| s.file.as_ref())
                .ok_or_else(|| StoreError::Inconsistent(format!("no segment {id}"))),
        }
    }

    fn file_len(&self, source: Source) -> u64 {
        match source {
            Source::Image => self.image.memory_bytes(),
            Source::Segment(id) => self.segments.get(&id).map_or(0, |s| s.len),
        }
    }
}

/// The segment files in `dir` (left by an earlier interpreter of the same
/// sandbox), with their numbers.
fn existing_segments(dir: &Path) -> Vec<(u32, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name();
            let id = name.to_str()?.strip_prefix("segment-")?.parse().ok()?;
            Some((id, entry.path()))
        })
        .collect()
}

/// Hard-links (or, where links cannot be made, copies) the segments of
/// `marks` (each with its length and checksums) from `from` into `to`, and
/// opens them there.
fn link_segments(
    from: &Path,
    to: &Path,
    marks: BTreeMap<u32, (u64, Vec<SegmentMark>)>,
) -> Result<BTreeMap<u32, Segment>, StoreError> {
    create_private_dir(to).map_err(StoreError::io("creating the memory directory", to))?;
    let mut segments = BTreeMap::new();
    for (id, (len, marks)) in marks {
        let source = from.join(segment_name(id));
        let target = to.join(segment_name(id));
        // Only a regular file is a segment: a link or a device planted in
        // its place is never followed.
        if !std::fs::symlink_metadata(&source).is_ok_and(|m| m.is_file()) {
            return Err(StoreError::Inconsistent(format!(
                "segment {id} is not a regular file"
            )));
        }
        if std::fs::hard_link(&source, &target).is_err() {
            std::fs::copy(&source, &target).map_err(StoreError::io("copying", &source))?;
        }
        let file = open_regular(&target).map_err(StoreError::io("opening", &target))?;
        let on_disk = file
            .metadata()
            .map_err(StoreError::io("measuring", &target))?
            .len();
        if on_disk < len {
            return Err(StoreError::Inconsistent(format!(
                "segment {id} holds {on_disk} bytes of {len}"
            )));
        }
        segments.insert(
            id,
            Segment {
                file: Arc::new(file),
                len,
                marks,
                view: None,
            },
        );
    }
    Ok(segments)
}

impl PageSource for PageStore {
    fn original(&self, index: usize, into: &mut [u8]) -> std::io::Result<()> {
        match self.layout.find(index) {
            None => {
                into.fill(0);
                Ok(())
            }
            Some((source, offset)) => {
                let file = self.file_of(source).map_err(std::io::Error::other)?;
                read_at(file, into, offset)
            }
        }
    }
}

/// Writes `parts` one after another into `file` from byte `at`, with as
/// few system calls as the system allows.
fn write_all_at(file: &File, parts: &[&[u8]], mut at: u64) -> std::io::Result<()> {
    /// Parts given to one call (within every system's limit).
    const PARTS_AT_ONCE: usize = 512;
    let mut parts: Vec<&[u8]> = parts.iter().copied().filter(|p| !p.is_empty()).collect();
    let mut next = 0;
    while next < parts.len() {
        let slices: Vec<std::io::IoSlice<'_>> = parts[next..]
            .iter()
            .take(PARTS_AT_ONCE)
            .map(|part| std::io::IoSlice::new(part))
            .collect();
        let mut written = match rustix::io::pwritev(file, &slices, at) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        };
        at += written as u64;
        // Past the parts written whole; the rest of one written in part.
        while written > 0 {
            let part = parts[next];
            if written >= part.len() {
                written -= part.len();
                next += 1;
            } else {
                parts[next] = &part[written..];
                written = 0;
            }
        }
    }
    Ok(())
}

fn read_at(file: &File, into: &mut [u8], at: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.read_exact_at(into, at)
}

mod changes;
mod compaction;
mod idle;
#[cfg(test)]
mod tests;
