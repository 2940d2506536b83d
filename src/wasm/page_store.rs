//! [`PageStore`]: where a sandbox's memory pages live on disk, so that its
//! memory is a set of file mappings (see [`super::guest_memory`]) instead of
//! a private copy: the runtime's snapshot image, plus segment files holding
//! the pages the sandbox wrote.
//!
//! After a flush, every page the sandbox wrote is in a segment and mapped
//! from there copy-on-write, so the memory is again made only of files: a
//! fork maps the same files into a new memory (and hard-links the segments
//! into its own store), a saved sandbox keeps them, and the next flush finds
//! exactly the pages written since (see [`super::written_pages`]).
//!
//! Segments are append-only (a byte once written never changes) and a store
//! stops appending to its segment when it is forked, so a mapping of a
//! segment never sees another sandbox's writes. A segment no page uses any
//! more is deleted; when the pages left are scattered over too many
//! mappings, or the segments hold much more than the pages still used, the
//! pages in use are written into one new segment (compaction).

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::guest_memory::{MapError, MemoryRegion, host_page};
use super::journal::{Replayed, SegmentMark};
use super::snapshot::Snapshot;
use super::written_pages::{Finder, PageSource, written_pages};

/// Most extents a store keeps before it compacts: each is at least one
/// mapping of the process (Linux allows about 65,000 in all).
const MAX_EXTENTS: usize = 256;
/// Bytes of segments no page uses any more that a store tolerates (beyond
/// as many as it uses) before it compacts.
const SLACK_BYTES: u64 = 32 << 20;

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
    fn end(&self) -> usize {
        self.first + self.pages
    }

    /// The part of the extent within `range` of pages.
    fn within(&self, range: &Range<usize>) -> Option<Extent> {
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
        let range = extent.first..extent.end();
        let mut kept: Vec<Extent> = Vec::with_capacity(self.extents.len() + 2);
        for old in &self.extents {
            if old.end() <= range.start || old.first >= range.end {
                kept.push(*old);
                continue;
            }
            kept.extend(old.within(&(old.first..range.start)));
            kept.extend(old.within(&(range.end..old.end())));
        }
        kept.push(extent);
        kept.sort_by_key(|e| e.first);
        self.extents = merged(kept);
    }

    /// Where page `index` comes from, and its byte offset in that file.
    fn find(&self, index: usize) -> Option<(Source, u64)> {
        let at = self.extents.partition_point(|e| e.end() <= index);
        let extent = self.extents.get(at).filter(|e| e.first <= index)?;
        let offset = extent.offset + ((index - extent.first) * host_page()) as u64;
        Some((extent.source, offset))
    }

    /// Pages of each segment in use.
    fn segment_use(&self) -> BTreeMap<u32, u64> {
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
fn merged(sorted: Vec<Extent>) -> Vec<Extent> {
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

/// Why a store could not keep or map pages.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A segment could not be created, written, linked or read.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
    /// Pages could not be mapped into the memory.
    #[error(transparent)]
    Map(#[from] MapError),
    /// The extents name a segment the store does not have, or reach past
    /// a file's end.
    #[error("the memory's layout names pages its files do not hold ({0})")]
    Inconsistent(String),
}

impl StoreError {
    fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.to_owned();
        move |source| Self::Io { what, path, source }
    }
}

/// One segment file, open.
#[derive(Debug)]
struct Segment {
    file: Arc<File>,
    /// Bytes written so far.
    len: u64,
    /// The checksums of its bytes, one per flush that wrote to it, in order.
    marks: Vec<SegmentMark>,
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
        let _ = std::fs::remove_dir_all(&dir);
        Self {
            dir,
            image,
            segments: BTreeMap::new(),
            appending: None,
            next_id: 0,
            layout,
            finder: Finder::best(),
            hold_unused: false,
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

    /// The segment being appended to, for syncing it in the background.
    pub(crate) fn sync_handles(&self) -> Vec<Arc<File>> {
        self.appending
            .and_then(|id| self.segments.get(&id))
            .map(|s| s.file.clone())
            .into_iter()
            .collect()
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
    /// flush, as runs of page indices.
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
        unsafe { written_pages(region, memory_bytes, self.finder, self) }
            .map_err(StoreError::io("finding the pages written in", &self.dir))
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
        let (extents, mark) = unsafe { self.append(region, written)? };
        self.drop_unused_segments();
        if may_compact && self.needs_compaction() {
            // SAFETY: passed on from the caller.
            unsafe { self.compact(region)? };
            return Ok(self.whole());
        }
        Ok(Flushed {
            extents,
            whole: false,
            marks: vec![mark],
        })
    }

    /// Bytes a compaction would write now: the pages the segments hold.
    pub(crate) fn used_bytes(&self) -> u64 {
        self.layout.segment_use().values().sum::<u64>() * host_page() as u64
    }

    /// The whole layout, and the checksums of every segment it uses.
    pub(crate) fn whole(&self) -> Flushed {
        let used = self.layout.segment_use();
        Flushed {
            extents: self.layout.extents.clone(),
            whole: true,
            marks: self
                .segments
                .iter()
                .filter(|(id, _)| used.contains_key(id))
                .flat_map(|(_, s)| s.marks.iter().copied())
                .collect(),
        }
    }

    /// Appends the pages of `runs` to the segment being written and maps
    /// them from it; returns the new extents and the checksum of the bytes
    /// added.
    ///
    /// # Safety
    ///
    /// As for [`PageStore::flush`].
    unsafe fn append(
        &mut self,
        region: &MemoryRegion,
        runs: &[Range<usize>],
    ) -> Result<(Vec<Extent>, SegmentMark), StoreError> {
        let page = host_page();
        let id = self.segment_to_append()?;
        let path = self.segment_path(id);
        let segment = self.segments.get_mut(&id).expect("just opened");
        let from = segment.len;
        let mut crc = crc32fast::Hasher::new();
        let mut changed = Vec::with_capacity(runs.len());
        for run in runs {
            let bytes = run.start * page..run.end * page;
            // SAFETY: the guest is not running (the caller's promise).
            let data = unsafe { region.bytes(bytes.clone())? };
            write_at(&segment.file, data, segment.len)
                .map_err(StoreError::io("writing memory pages to", &path))?;
            crc.update(data);
            changed.push(Extent {
                first: run.start,
                pages: run.len(),
                source: Source::Segment(id),
                offset: segment.len,
            });
            segment.len += data.len() as u64;
        }
        let mark = SegmentMark {
            id,
            from,
            to: segment.len,
            crc: crc.finalize(),
        };
        segment.marks.push(mark);
        for extent in &changed {
            // SAFETY: the bytes just written never change; the guest is
            // not running.
            unsafe {
                region.map_file(
                    extent.first * page..extent.end() * page,
                    &segment.file,
                    extent.offset,
                )?
            };
            self.layout.set(*extent);
        }
        Ok((changed, mark))
    }

    /// The segment to append to, opening a new one when there is none.
    fn segment_to_append(&mut self) -> Result<u32, StoreError> {
        if let Some(id) = self.appending {
            return Ok(id);
        }
        std::fs::create_dir_all(&self.dir)
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

    fn needs_compaction(&self) -> bool {
        let used: u64 = self.layout.segment_use().values().sum::<u64>() * host_page() as u64;
        self.layout.extents.len() > MAX_EXTENTS
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
    unsafe fn compact(&mut self, region: &MemoryRegion) -> Result<(), StoreError> {
        let runs: Vec<Range<usize>> = self
            .layout
            .extents
            .iter()
            .filter(|e| matches!(e.source, Source::Segment(_)))
            .map(|e| e.first..e.end())
            .collect();
        let runs = joined(runs, MAX_EXTENTS / 8);
        self.appending = None;
        // SAFETY: passed on from the caller.
        unsafe { self.append(region, &runs)? };
        self.drop_unused_segments();
        Ok(())
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
        for extent in &self.layout.extents {
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

/// Hard-links (or, where links cannot be made, copies) the segments of
/// `marks` (each with its length and checksums) from `from` into `to`, and
/// opens them there.
fn link_segments(
    from: &Path,
    to: &Path,
    marks: BTreeMap<u32, (u64, Vec<SegmentMark>)>,
) -> Result<BTreeMap<u32, Segment>, StoreError> {
    std::fs::create_dir_all(to).map_err(StoreError::io("creating the memory directory", to))?;
    let mut segments = BTreeMap::new();
    for (id, (len, marks)) in marks {
        let source = from.join(segment_name(id));
        let target = to.join(segment_name(id));
        if std::fs::hard_link(&source, &target).is_err() {
            std::fs::copy(&source, &target).map_err(StoreError::io("copying", &source))?;
        }
        let file = File::open(&target).map_err(StoreError::io("opening", &target))?;
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

fn write_at(file: &File, bytes: &[u8], at: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.write_all_at(bytes, at)
}

fn read_at(file: &File, into: &mut [u8], at: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.read_exact_at(into, at)
}

#[cfg(test)]
mod tests;
