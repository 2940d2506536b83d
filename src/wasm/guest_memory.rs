//! Guest memories the server owns: every linear memory of the engine is a
//! virtual-memory reservation made here ([`GuestMemoryCreator`]), so the host
//! can put pages of a file into it copy-on-write: a sandbox starts from the
//! runtime's snapshot image by mapping it, not by copying it, and a fork or a
//! restore maps the pages it carries.
//!
//! A memory is anonymous, zero-filled memory until [`MemoryRegion::map_file`]
//! maps part of a file over it (`MAP_PRIVATE`): the guest reads the file's
//! pages, and its first write to a page gives it a private copy, so the file
//! never changes. Only files that are never truncated or rewritten may be
//! mapped (the runtime's images and a sandbox's page segments are written
//! once, then only read).
//!
//! The host finds the region of an instance's memory by the address of its
//! first byte ([`MemoryRegion::of`]). Mapping happens only between turns,
//! when no guest code runs on the memory.
//!
//! Unix only: elsewhere the engine keeps wasmtime's own memories, and a
//! snapshot is copied in instead of mapped.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Weak};

/// The regions alive now, by the address of their first byte.
static REGIONS: LazyLock<Mutex<HashMap<usize, Weak<MemoryRegion>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// The host's page size: the unit of mapping and of finding written pages.
pub(crate) fn host_page() -> usize {
    #[cfg(unix)]
    {
        rustix::param::page_size()
    }
    #[cfg(not(unix))]
    {
        4096
    }
}

/// One guest memory's reservation, as the host sees it.
#[derive(Debug)]
pub(crate) struct MemoryRegion {
    /// Its first byte.
    base: usize,
    /// Bytes it can grow to without moving.
    capacity: usize,
    /// Bytes the guest may use now.
    size: AtomicUsize,
    /// Bytes reserved in all (capacity and the guard after it).
    reserved: usize,
    /// Set just before the reservation is unmapped.
    #[cfg_attr(not(guest_stop_by_fault), allow(dead_code))]
    released: AtomicBool,
}

/// Why the host could not map a file into a guest memory.
#[derive(Debug, thiserror::Error)]
pub enum MapError {
    /// The range is not inside the memory, or not aligned to host pages.
    #[error(
        "bytes {start}..{end} are not whole host pages inside the guest's {size} bytes of memory"
    )]
    OutOfRange {
        /// The range's first byte.
        start: usize,
        /// One past its last byte.
        end: usize,
        /// The memory's size.
        size: usize,
    },
    /// The operating system refused the mapping.
    #[error("the system refused to map the file into the guest's memory: {0}")]
    System(#[from] std::io::Error),
}

impl MemoryRegion {
    /// The region whose first byte is at `base`, if this creator made it.
    pub(crate) fn of(base: *const u8) -> Option<Arc<MemoryRegion>> {
        REGIONS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(base as usize))
            .and_then(Weak::upgrade)
    }

    /// Bytes the guest may use now.
    pub(crate) fn size(&self) -> usize {
        self.size.load(Ordering::Acquire)
    }

    /// Maps `range` of the memory to the file's bytes from `offset`,
    /// copy-on-write. The range must lie within the memory's current size and
    /// within the file, on host pages.
    ///
    /// # Safety
    ///
    /// No guest code may run on the memory meanwhile, no reference to its
    /// bytes in `range` may be alive, and the file's bytes mapped must never
    /// change or be cut off (pages past a file's end fault).
    #[cfg(unix)]
    pub(crate) unsafe fn map_file(
        &self,
        range: Range<usize>,
        file: &std::fs::File,
        offset: u64,
    ) -> Result<(), MapError> {
        use rustix::mm::{MapFlags, ProtFlags, mmap};
        self.check(&range)?;
        if range.is_empty() {
            return Ok(());
        }
        // SAFETY: the range lies inside this reservation (checked), the
        // caller guarantees nothing uses those bytes now, and MAP_FIXED
        // replaces exactly those pages.
        unsafe {
            mmap(
                (self.base + range.start) as *mut _,
                range.len(),
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::FIXED,
                file,
                offset,
            )
            .map_err(std::io::Error::from)?;
        }
        Ok(())
    }

    /// The bytes of `range`, for reading by the host.
    ///
    /// # Safety
    ///
    /// No guest code may run on the memory while the slice is alive.
    pub(crate) unsafe fn bytes(&self, range: Range<usize>) -> Result<&[u8], MapError> {
        self.check_within(&range)?;
        // SAFETY: inside the accessible part of the reservation (checked);
        // the caller keeps the guest off it.
        Ok(unsafe {
            std::slice::from_raw_parts((self.base + range.start) as *const u8, range.len())
        })
    }

    /// The address of the memory's first byte.
    pub(crate) fn base(&self) -> usize {
        self.base
    }

    /// Takes every right away from what the guest may use now, so its next
    /// access traps (see [`super::fault_handler`]); nothing once the memory
    /// is gone.
    #[cfg(guest_stop_by_fault)]
    pub(crate) fn block(&self) {
        let len = self.size().next_multiple_of(host_page());
        if len == 0 {
            return;
        }
        // SAFETY: the accessible part of this reservation, which stays
        // mapped until its memory's drop, which forgets it first.
        if !unsafe { super::fault_handler::block(self.base, len, &self.released) }
            && !self.released.load(Ordering::Acquire)
        {
            tracing::warn!(
                "could not block a guest's memory to stop it; asking again at the next tick"
            );
        }
    }

    /// Gives back what [`MemoryRegion::block`] took away.
    #[cfg(guest_stop_by_fault)]
    pub(crate) fn unblock(&self) {
        // SAFETY: as for block.
        unsafe { super::fault_handler::unblock(self.base, &self.released) }
    }

    fn check(&self, range: &Range<usize>) -> Result<(), MapError> {
        let page = host_page();
        self.check_within(range)?;
        if !range.start.is_multiple_of(page) || !range.end.is_multiple_of(page) {
            return Err(self.out_of_range(range));
        }
        Ok(())
    }

    fn check_within(&self, range: &Range<usize>) -> Result<(), MapError> {
        if range.start > range.end || range.end > self.size() {
            return Err(self.out_of_range(range));
        }
        Ok(())
    }

    fn out_of_range(&self, range: &Range<usize>) -> MapError {
        MapError::OutOfRange {
            start: range.start,
            end: range.end,
            size: self.size(),
        }
    }
}

/// Makes every linear memory of the engine (see the module's documentation).
#[derive(Debug, Default)]
pub(crate) struct GuestMemoryCreator;

/// A linear memory made by [`GuestMemoryCreator`].
struct GuestMemory {
    region: Arc<MemoryRegion>,
}

#[cfg(unix)]
mod unix {
    use super::*;
    use rustix::mm::{MapFlags, MprotectFlags, ProtFlags, mmap_anonymous, mprotect, munmap};
    use wasmtime::{LinearMemory, MemoryCreator, MemoryType};

    /// Bytes reserved when wasmtime leaves the size to the creator: the
    /// whole 32-bit address space.
    const DEFAULT_RESERVATION: usize = 4 << 30;

    fn round_up(bytes: usize) -> usize {
        bytes.next_multiple_of(host_page())
    }

    // SAFETY: each memory is a fresh reservation of its own, zero-filled,
    // with at least `guard` bytes left inaccessible after its capacity, and
    // it never moves; it is released only when wasmtime drops it.
    unsafe impl MemoryCreator for GuestMemoryCreator {
        fn new_memory(
            &self,
            _ty: MemoryType,
            minimum: usize,
            maximum: Option<usize>,
            reserved_size_in_bytes: Option<usize>,
            guard_size_in_bytes: usize,
        ) -> Result<Box<dyn LinearMemory>, String> {
            let capacity = round_up(
                reserved_size_in_bytes
                    .or(maximum)
                    .unwrap_or(DEFAULT_RESERVATION)
                    .max(minimum),
            );
            let reserved = capacity
                .checked_add(round_up(guard_size_in_bytes))
                .ok_or("the memory's reservation does not fit the address space")?;
            // SAFETY: a new mapping at an address of the system's choosing.
            let base = unsafe {
                mmap_anonymous(
                    std::ptr::null_mut(),
                    reserved,
                    ProtFlags::empty(),
                    MapFlags::PRIVATE | MapFlags::NORESERVE,
                )
            }
            .map_err(|e| format!("cannot reserve {reserved} bytes for a guest memory: {e}"))?;
            let region = Arc::new(MemoryRegion {
                base: base as usize,
                capacity,
                size: AtomicUsize::new(0),
                reserved,
                released: AtomicBool::new(false),
            });
            let mut memory = GuestMemory { region };
            memory.grow_to(minimum).map_err(|e| e.to_string())?;
            REGIONS
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(base as usize, Arc::downgrade(&memory.region));
            Ok(Box::new(memory))
        }
    }

    // SAFETY: the pointer and sizes describe the reservation made above,
    // which stays mapped until this value is dropped.
    unsafe impl LinearMemory for GuestMemory {
        fn byte_size(&self) -> usize {
            self.region.size()
        }

        fn byte_capacity(&self) -> usize {
            self.region.capacity
        }

        fn grow_to(&mut self, new_size: usize) -> wasmtime::Result<()> {
            let region = &self.region;
            if new_size > region.capacity {
                return Err(wasmtime::Error::msg(format!(
                    "a guest memory cannot grow past its {} reserved bytes",
                    region.capacity
                )));
            }
            let from = round_up(region.size());
            let to = round_up(new_size);
            if to > from {
                // SAFETY: inside the reservation, past what the guest uses.
                unsafe {
                    mprotect(
                        (region.base + from) as *mut _,
                        to - from,
                        MprotectFlags::READ | MprotectFlags::WRITE,
                    )
                }
                .map_err(|e| wasmtime::Error::msg(format!("cannot grow a guest memory: {e}")))?;
            }
            region
                .size
                .store(new_size.max(region.size()), Ordering::Release);
            Ok(())
        }

        fn as_ptr(&self) -> *mut u8 {
            self.region.base as *mut u8
        }
    }

    impl Drop for GuestMemory {
        fn drop(&mut self) {
            let base = self.region.base;
            REGIONS
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&base);
            #[cfg(guest_stop_by_fault)]
            super::super::fault_handler::forget(base, &self.region.released);
            // SAFETY: the reservation made in new_memory, no longer used by
            // wasmtime (it dropped the memory) nor by the host (which maps
            // only while it holds the store).
            if let Err(e) = unsafe { munmap(base as *mut _, self.region.reserved) } {
                tracing::error!(error = %e, "could not release a guest memory");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use wasmtime::{Config, Engine, Instance, Module, Store};

    fn engine() -> Engine {
        let mut config = Config::new();
        config.with_host_memory(Arc::new(GuestMemoryCreator));
        Engine::new(&config).unwrap()
    }

    #[test]
    fn a_file_mapped_into_a_guest_memory_is_read_and_written_copy_on_write() {
        let engine = engine();
        let module = Module::new(
            &engine,
            wat::parse_str(
                r#"(module (memory (export "memory") 1)
                 (func (export "load") (param i32) (result i32) (i32.load8_u (local.get 0)))
                 (func (export "store") (param i32 i32) (i32.store8 (local.get 0) (local.get 1)))
                 (func (export "grow") (param i32) (result i32) (memory.grow (local.get 0))))"#,
            )
            .unwrap(),
        )
        .unwrap();
        let mut store = Store::new(&engine, ());
        let instance = Instance::new(&mut store, &module, &[]).unwrap();
        let memory = instance.get_memory(&mut store, "memory").unwrap();
        let region = MemoryRegion::of(memory.data_ptr(&store)).expect("made by the creator");
        assert_eq!(region.size(), 64 << 10);

        let page = host_page();
        let mut file = tempfile::tempfile().unwrap();
        let mut content = vec![0u8; 2 * page];
        content[0] = 7;
        content[page] = 9;
        file.write_all(&content).unwrap();
        // SAFETY: the guest is not running; the file is not changed after.
        unsafe { region.map_file(page..3 * page, &file, 0).unwrap() };
        let load = instance
            .get_typed_func::<i32, i32>(&mut store, "load")
            .unwrap();
        let store8 = instance
            .get_typed_func::<(i32, i32), ()>(&mut store, "store")
            .unwrap();
        assert_eq!(load.call(&mut store, page as i32).unwrap(), 7);
        assert_eq!(load.call(&mut store, 2 * page as i32).unwrap(), 9);
        store8.call(&mut store, (page as i32, 42)).unwrap();
        assert_eq!(load.call(&mut store, page as i32).unwrap(), 42);
        let mut on_disk = vec![0u8; 1];
        use std::os::unix::fs::FileExt;
        file.read_exact_at(&mut on_disk, 0).unwrap();
        assert_eq!(on_disk, [7], "the file never changes");

        // Growing keeps the mapped pages and adds zero pages.
        let grow = instance
            .get_typed_func::<i32, i32>(&mut store, "grow")
            .unwrap();
        assert_eq!(grow.call(&mut store, 2).unwrap(), 1);
        assert_eq!(region.size(), 3 * (64 << 10));
        assert_eq!(load.call(&mut store, page as i32).unwrap(), 42);
        assert_eq!(load.call(&mut store, (128 << 10) + 5).unwrap(), 0);

        let outside = unsafe { region.map_file(0..(4 << 20), &file, 0) };
        assert!(matches!(outside, Err(MapError::OutOfRange { .. })));
        let unaligned = unsafe { region.map_file(1..page + 1, &file, 0) };
        assert!(matches!(unaligned, Err(MapError::OutOfRange { .. })));

        let base = region.base() as *const u8;
        drop(region);
        drop(store);
        assert!(
            MemoryRegion::of(base).is_none(),
            "a dropped memory leaves the registry"
        );
    }
}
