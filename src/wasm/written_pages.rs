//! Finding the pages of a guest memory written since they were last mapped
//! from a file (see [`super::guest_memory`]): such a page has become the
//! process's own private copy, where an unwritten one is still the file's
//! page, or no page at all.
//!
//! Three ways, best first:
//! - Linux 6.7 and later: one `PAGEMAP_SCAN` ioctl on `/proc/self/pagemap`
//!   lists the ranges of private anonymous pages (present or swapped, not
//!   the shared zero page) in the memory;
//! - older Linux: the same facts read from `/proc/self/pagemap`, eight bytes
//!   per page (the zero page then counts as written, which only costs the
//!   bytes of a page of zeros);
//! - elsewhere: each page is compared with what it was mapped from.
//!
//! All of them over-approximate at worst (a page written back to the same
//! bytes counts as written), never miss a write.

use std::ops::Range;

use super::guest_memory::{MemoryRegion, host_page};

/// Where each page of a memory came from, for the comparing way: the bytes
/// a page had when it was last mapped.
pub(crate) trait PageSource {
    /// Fills `into` (one host page) with what page `index` held when mapped.
    fn original(&self, index: usize, into: &mut [u8]) -> std::io::Result<()>;
}

/// Which way [`written_pages`] finds pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Finder {
    /// `PAGEMAP_SCAN` (Linux 6.7+).
    Scan,
    /// `/proc/self/pagemap`, read.
    Pagemap,
    /// Comparing each page with its source.
    Compare,
}

impl Finder {
    /// The best way this system offers.
    pub(crate) fn best() -> Self {
        static BEST: std::sync::OnceLock<Finder> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| {
            #[cfg(target_os = "linux")]
            {
                if linux::scan_works() {
                    return Finder::Scan;
                }
                if linux::pagemap_works() {
                    return Finder::Pagemap;
                }
            }
            Finder::Compare
        })
    }
}

/// The pages (as ranges of page indices) of `region` below `bytes` written
/// since they were last mapped.
///
/// # Safety
///
/// No guest code may run on the memory meanwhile.
pub(crate) unsafe fn written_pages(
    region: &MemoryRegion,
    bytes: usize,
    finder: Finder,
    source: &dyn PageSource,
) -> std::io::Result<Vec<Range<usize>>> {
    let bytes = bytes.min(region.size());
    match finder {
        #[cfg(target_os = "linux")]
        Finder::Scan => linux::scan(region.base(), bytes),
        #[cfg(target_os = "linux")]
        Finder::Pagemap => linux::pagemap(region.base(), bytes),
        // SAFETY: passed on from the caller.
        _ => unsafe { compare(region, bytes, source) },
    }
}

/// The comparing way: every page against its source.
///
/// # Safety
///
/// As for [`written_pages`].
unsafe fn compare(
    region: &MemoryRegion,
    bytes: usize,
    source: &dyn PageSource,
) -> std::io::Result<Vec<Range<usize>>> {
    let page = host_page();
    let mut original = vec![0u8; page];
    let mut found = Vec::new();
    for index in 0..bytes / page {
        // SAFETY: inside the memory; the caller keeps the guest off it.
        let now = unsafe { region.bytes(index * page..(index + 1) * page) }
            .map_err(std::io::Error::other)?;
        source.original(index, &mut original)?;
        if now != original.as_slice() {
            push_page(&mut found, index);
        }
    }
    Ok(found)
}

/// Adds page `index` to `ranges`, joining it to the last range when next to it.
fn push_page(ranges: &mut Vec<Range<usize>>, index: usize) {
    match ranges.last_mut() {
        Some(last) if last.end == index => last.end += 1,
        _ => ranges.push(index..index + 1),
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use super::*;
    use std::fs::File;
    use std::os::unix::fs::FileExt;
    use std::sync::OnceLock;

    const PAGE_IS_FILE: u64 = 1 << 2;
    const PAGE_IS_PRESENT: u64 = 1 << 3;
    const PAGE_IS_SWAPPED: u64 = 1 << 4;
    const PAGE_IS_PFNZERO: u64 = 1 << 5;

    /// The kernel's `struct pm_scan_arg`.
    #[repr(C)]
    #[derive(Default)]
    struct ScanArg {
        size: u64,
        flags: u64,
        start: u64,
        end: u64,
        walk_end: u64,
        vec: u64,
        vec_len: u64,
        max_pages: u64,
        category_inverted: u64,
        category_mask: u64,
        category_anyof_mask: u64,
        return_mask: u64,
    }

    /// The kernel's `struct page_region`.
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Region {
        start: u64,
        end: u64,
        categories: u64,
    }

    struct Scan<'a>(&'a mut ScanArg);

    // SAFETY: PAGEMAP_SCAN takes a pointer to a `struct pm_scan_arg`, reads
    // it and writes `walk_end` (and the regions its `vec` points to), and
    // returns how many regions it filled.
    unsafe impl rustix::ioctl::Ioctl for Scan<'_> {
        type Output = usize;
        const IS_MUTATING: bool = true;

        fn opcode(&self) -> rustix::ioctl::Opcode {
            rustix::ioctl::opcode::read_write::<ScanArg>(b'f', 16)
        }

        fn as_ptr(&mut self) -> *mut std::ffi::c_void {
            std::ptr::from_mut(self.0).cast()
        }

        unsafe fn output_from_ptr(
            out: rustix::ioctl::IoctlOutput,
            _: *mut std::ffi::c_void,
        ) -> rustix::io::Result<usize> {
            Ok(usize::try_from(out).unwrap_or(0))
        }
    }

    fn pagemap_file() -> std::io::Result<&'static File> {
        static FILE: OnceLock<std::io::Result<File>> = OnceLock::new();
        FILE.get_or_init(|| File::open("/proc/self/pagemap"))
            .as_ref()
            .map_err(|e| std::io::Error::new(e.kind(), e.to_string()))
    }

    pub(super) fn scan(base: usize, bytes: usize) -> std::io::Result<Vec<Range<usize>>> {
        let page = host_page();
        let file = pagemap_file()?;
        let mut found: Vec<Range<usize>> = Vec::new();
        let mut regions = vec![Region::default(); 512];
        let mut start = base as u64;
        let end = (base + bytes) as u64;
        while start < end {
            let mut arg = ScanArg {
                size: std::mem::size_of::<ScanArg>() as u64,
                start,
                end,
                vec: regions.as_mut_ptr() as u64,
                vec_len: regions.len() as u64,
                // Neither a page of a file nor the zero page...
                category_inverted: PAGE_IS_FILE | PAGE_IS_PFNZERO,
                category_mask: PAGE_IS_FILE | PAGE_IS_PFNZERO,
                // ...that is there, in memory or in swap.
                category_anyof_mask: PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
                return_mask: PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
                ..Default::default()
            };
            // SAFETY: `arg` points at `regions`, which outlives the call.
            let filled = unsafe { rustix::ioctl::ioctl(file, Scan(&mut arg)) }?;
            for region in &regions[..filled.min(regions.len())] {
                let first = (region.start as usize - base) / page;
                let last = (region.end as usize - base) / page;
                match found.last_mut() {
                    Some(prev) if prev.end == first => prev.end = last,
                    _ => found.push(first..last),
                }
            }
            if arg.walk_end <= start {
                break;
            }
            start = arg.walk_end;
        }
        Ok(found)
    }

    pub(super) fn pagemap(base: usize, bytes: usize) -> std::io::Result<Vec<Range<usize>>> {
        const PRESENT: u64 = 1 << 63;
        const SWAPPED: u64 = 1 << 62;
        const FILE_OR_SHARED: u64 = 1 << 61;
        let page = host_page();
        let file = pagemap_file()?;
        let mut found = Vec::new();
        let pages = bytes / page;
        let first = base / page;
        let mut buffer = vec![0u8; 8 * 4096];
        let mut done = 0;
        while done < pages {
            let count = (pages - done).min(4096);
            let chunk = &mut buffer[..count * 8];
            file.read_exact_at(chunk, ((first + done) * 8) as u64)?;
            for (i, entry) in chunk.chunks_exact(8).enumerate() {
                let entry = u64::from_le_bytes(entry.try_into().unwrap_or_default());
                let private = entry & FILE_OR_SHARED == 0;
                if private && entry & (PRESENT | SWAPPED) != 0 {
                    push_page(&mut found, done + i);
                }
            }
            done += count;
        }
        Ok(found)
    }

    /// Whether PAGEMAP_SCAN answers here.
    pub(super) fn scan_works() -> bool {
        let probe = vec![1u8; host_page()];
        scan(probe.as_ptr() as usize & !(host_page() - 1), host_page()).is_ok()
    }

    /// Whether `/proc/self/pagemap` can be read here.
    pub(super) fn pagemap_works() -> bool {
        let probe = [0u8; 1];
        pagemap(probe.as_ptr() as usize & !(host_page() - 1), host_page()).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::FileExt;
    use std::sync::Arc;

    use wasmtime::{Config, Engine, Instance, Module, Store};

    use super::super::guest_memory::GuestMemoryCreator;

    struct FromFile(std::fs::File);

    impl PageSource for FromFile {
        fn original(&self, index: usize, into: &mut [u8]) -> std::io::Result<()> {
            let page = host_page();
            let length = self.0.metadata()?.len() as usize;
            into.fill(0);
            if index * page < length {
                self.0.read_exact_at(into, (index * page) as u64)?;
            }
            Ok(())
        }
    }

    #[test]
    fn every_way_finds_the_pages_written_since_their_mapping() {
        let mut config = Config::new();
        config.with_host_memory(Arc::new(GuestMemoryCreator));
        let engine = Engine::new(&config).unwrap();
        let module = Module::new(
            &engine,
            wat::parse_str(
                r#"(module (memory (export "memory") 4)
                 (func (export "store") (param i32 i32) (i32.store8 (local.get 0) (local.get 1)))
                 (func (export "load") (param i32) (result i32) (i32.load8_u (local.get 0))))"#,
            )
            .unwrap(),
        )
        .unwrap();
        let page = host_page();
        let mut finders = vec![Finder::Compare];
        #[cfg(target_os = "linux")]
        {
            finders.push(Finder::Pagemap);
            if linux::scan_works() {
                finders.push(Finder::Scan);
            }
        }
        for finder in finders {
            let mut store = Store::new(&engine, ());
            let instance = Instance::new(&mut store, &module, &[]).unwrap();
            let memory = instance.get_memory(&mut store, "memory").unwrap();
            let region = MemoryRegion::of(memory.data_ptr(&store)).unwrap();
            let mut file = tempfile::tempfile().unwrap();
            file.write_all(&vec![3u8; 8 * page]).unwrap();
            // SAFETY: the guest is not running; the file never changes.
            unsafe { region.map_file(0..8 * page, &file, 0).unwrap() };
            let source = FromFile(file);
            let store8 = instance
                .get_typed_func::<(i32, i32), ()>(&mut store, "store")
                .unwrap();
            let load = instance
                .get_typed_func::<i32, i32>(&mut store, "load")
                .unwrap();
            // Reads make nothing written: of the file, and past it.
            assert_eq!(load.call(&mut store, page as i32).unwrap(), 3);
            assert_eq!(load.call(&mut store, 20 * page as i32).unwrap(), 0);
            for at in [2 * page, 3 * page + 9, 7 * page, 12 * page, 13 * page] {
                store8.call(&mut store, (at as i32, 1)).unwrap();
            }
            let size = region.size();
            // SAFETY: the guest is not running.
            let found = unsafe { written_pages(&region, size, finder, &source) }.unwrap();
            let expected: Vec<Range<usize>> = if finder == Finder::Pagemap {
                // The zero page read at page 20 counts too there.
                vec![2..4, 7..8, 12..14, 20..21]
            } else {
                vec![2..4, 7..8, 12..14]
            };
            assert_eq!(found, expected, "{finder:?}");
            // Mapped again, they are the file's once more.
            unsafe { region.map_file(2 * page..4 * page, &source.0, 0).unwrap() };
            let found = unsafe { written_pages(&region, 8 * page, finder, &source) }.unwrap();
            assert_eq!(found, vec![7..8], "{finder:?}");
        }
    }
}
