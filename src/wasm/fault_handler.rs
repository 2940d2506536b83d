//! Stopping a running guest with no check in its code (Linux on x86-64 and
//! arm64): the process's handler for faults on guest memory the host has
//! blocked.
//!
//! To stop a guest that runs WebAssembly, the host takes every right away
//! from its linear memory ([`block`], `mprotect(PROT_NONE)`). The guest's
//! next load or store faults, and wasmtime's own handler, seeing a fault at
//! an instruction of compiled guest code that may fault (every memory access
//! may), unwinds the call with a trap, which the host reads as the stop it
//! asked for (see [`super::interrupt`]). Compiled code then needs no epoch
//! check at its loops and calls, which cost 15-55 % of a guest's time.
//!
//! Host code may touch the blocked memory meanwhile: a WASI call reading the
//! guest's buffer, wasmtime's `memory.copy` and `memory.fill` (which run as
//! host code), the host keeping the guest's pages. That fault is not the
//! guest's, so [`on_fault`], which the process runs for every SIGSEGV and
//! SIGBUS (before or after wasmtime's handler, whichever was installed
//! last), gives the [`CHUNK`] around the address its rights back and lets
//! the access go on. The rest of the memory stays blocked, so the guest's
//! own code traps as soon as the host code returns to it (a real host call
//! also ends the guest as it returns, see [`super::interrupt`]); the next
//! tick blocks again what was given back. Every other fault goes to the
//! handler that was there before (wasmtime's, Rust's stack overflow report,
//! or the default).
//!
//! A system call on blocked memory (the host writing guest pages to a file)
//! fails with `EFAULT` instead of faulting: memory is blocked only while its
//! guest is being stopped, when nothing of it is kept (a tidy after an
//! answer is not started then; one under way fails, and the state stays as
//! the execution's keep recorded it).
//!
//! The handler reads only fixed tables of atomics (no lock, no allocation):
//! the blocked ranges and the ranges of compiled guest code.

use std::ffi::c_void;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, Once, OnceLock};

/// Ranges blocked at once, at most (a stop lasts until the guest's next
/// memory access, so few are ever blocked together).
const BLOCKED_SLOTS: usize = 256;
/// Compiled guest modules whose code is known, at most.
const CODE_SLOTS: usize = 64;
/// What one fault by host code gives back, at most (aligned): a copy of a
/// gigabyte faults 64 times, and a memory blocked in pieces stays a few
/// hundred mappings at most.
const CHUNK: usize = 16 << 20;

/// One blocked range of guest memory.
struct BlockedSlot {
    /// Its first byte (0: the slot is free).
    base: AtomicUsize,
    /// Its length in bytes.
    len: AtomicUsize,
    /// Changed at every [`block`], so a handler that read the slot before
    /// it was reused never touches the new range.
    generation: AtomicUsize,
    /// Set by a handler that gave part of the range back since the last
    /// [`block`].
    restored: AtomicBool,
    /// Set while a handler gives part of the range its rights back.
    restoring: AtomicBool,
}

/// One module's compiled code.
struct CodeSlot {
    start: AtomicUsize,
    end: AtomicUsize,
}

static BLOCKED: [BlockedSlot; BLOCKED_SLOTS] = [const {
    BlockedSlot {
        base: AtomicUsize::new(0),
        len: AtomicUsize::new(0),
        generation: AtomicUsize::new(0),
        restored: AtomicBool::new(false),
        restoring: AtomicBool::new(false),
    }
}; BLOCKED_SLOTS];

static CODE: [CodeSlot; CODE_SLOTS] = [const {
    CodeSlot {
        start: AtomicUsize::new(0),
        end: AtomicUsize::new(0),
    }
}; CODE_SLOTS];

/// Serialises the host's changes to the tables (never taken by the handler).
static CHANGING: Mutex<()> = Mutex::new(());

/// The handlers that were installed before this one, by signal.
static PREVIOUS_SEGV: OnceLock<libc::sigaction> = OnceLock::new();
static PREVIOUS_BUS: OnceLock<libc::sigaction> = OnceLock::new();

/// Installs the handler for SIGSEGV and SIGBUS, once per process. Done
/// before wasmtime installs its own, wasmtime's runs first and hands on
/// the faults that are not its guests' (this order is the one the engine
/// builder keeps); done after, this one hands guest code's faults to it.
pub(crate) fn install() {
    static INSTALLED: Once = Once::new();
    INSTALLED.call_once(|| {
        for (signal, previous) in [
            (libc::SIGSEGV, &PREVIOUS_SEGV),
            (libc::SIGBUS, &PREVIOUS_BUS),
        ] {
            // SAFETY: a zeroed sigaction is a valid value to fill; the handler
            // only touches atomics and calls mprotect.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_fault as *const () as usize;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER | libc::SA_ONSTACK;
                libc::sigemptyset(&mut action.sa_mask);
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(signal, &action, &mut old) != 0 {
                    panic!(
                        "cannot install the guest-memory fault handler: {}",
                        std::io::Error::last_os_error()
                    );
                }
                let _ = previous.set(old);
            }
        }
    });
}

/// Notes that compiled guest code lies in `code`, so a fault there on a
/// blocked range is the guest's (and becomes its trap).
pub(crate) fn note_guest_code(code: Range<*const u8>) {
    let (start, end) = (code.start as usize, code.end as usize);
    let _changing = CHANGING.lock().unwrap_or_else(|p| p.into_inner());
    if CODE
        .iter()
        .any(|slot| slot.start.load(Ordering::Acquire) == start)
    {
        return;
    }
    match CODE
        .iter()
        .find(|slot| slot.start.load(Ordering::Acquire) == 0)
    {
        Some(slot) => {
            slot.end.store(end, Ordering::Release);
            slot.start.store(start, Ordering::Release);
        }
        None => tracing::error!(
            "more than {CODE_SLOTS} compiled guest modules: guests of the newest cannot be stopped"
        ),
    }
}

/// Takes every right away from `len` bytes at `base` (host pages), so the
/// guest's next access faults, unless `released` says the memory is gone.
/// Asked again for a range already blocked, nothing is done unless a
/// handler gave part of it back meanwhile or it grew. False if nothing is
/// blocked: the memory is gone, the table of blocked ranges is full (the
/// caller asks again later) or the system refused.
///
/// # Safety
///
/// The range must be a guest memory's accessible part, mapped until
/// [`forget`] is called for `base` with the same `released`.
pub(crate) unsafe fn block(base: usize, len: usize, released: &AtomicBool) -> bool {
    let _changing = CHANGING.lock().unwrap_or_else(|p| p.into_inner());
    if released.load(Ordering::Acquire) {
        return false;
    }
    let slot = BLOCKED
        .iter()
        .find(|slot| slot.base.load(Ordering::Acquire) == base)
        .or_else(|| {
            BLOCKED
                .iter()
                .find(|slot| slot.base.load(Ordering::Acquire) == 0)
        });
    let Some(slot) = slot else {
        return false;
    };
    let already = slot.base.load(Ordering::Acquire) == base
        && slot.len.load(Ordering::Acquire) == len
        && !slot.restored.load(Ordering::Acquire);
    if already {
        return true;
    }
    // The slot stays filled throughout, so a fault meanwhile is always
    // found; a handler that read it before gives nothing back (the
    // generation changed) and the access faults again.
    slot.generation.fetch_add(1, Ordering::AcqRel);
    slot.restored.store(false, Ordering::Release);
    // A memory only grows: the new length covers the old.
    slot.len.store(len, Ordering::Release);
    slot.base.store(base, Ordering::Release);
    // SAFETY: the caller vouches for the range.
    unsafe { libc::mprotect(base as *mut c_void, len, libc::PROT_NONE) == 0 }
}

/// Gives the range blocked at `base` its rights back and forgets it (the
/// stop it was blocked for no longer holds).
///
/// # Safety
///
/// As for [`block`].
pub(crate) unsafe fn unblock(base: usize, released: &AtomicBool) {
    let _changing = CHANGING.lock().unwrap_or_else(|p| p.into_inner());
    for slot in BLOCKED.iter() {
        if slot.base.load(Ordering::Acquire) != base {
            continue;
        }
        slot.base.store(0, Ordering::Release);
        while slot.restoring.load(Ordering::Acquire) {
            std::hint::spin_loop();
        }
        if !released.load(Ordering::Acquire) {
            let len = slot.len.load(Ordering::Acquire);
            // SAFETY: the caller vouches for the range, still mapped.
            unsafe {
                libc::mprotect(base as *mut c_void, len, libc::PROT_READ | libc::PROT_WRITE);
            }
        }
    }
}

/// Notes in `released` that the memory at `base` is about to be unmapped and
/// forgets its blocked range, if it has one: once this returns, neither a
/// handler nor [`block`] will touch it.
pub(crate) fn forget(base: usize, released: &AtomicBool) {
    let _changing = CHANGING.lock().unwrap_or_else(|p| p.into_inner());
    released.store(true, Ordering::Release);
    for slot in BLOCKED.iter() {
        if slot.base.load(Ordering::Acquire) == base {
            slot.base.store(0, Ordering::Release);
            while slot.restoring.load(Ordering::Acquire) {
                std::hint::spin_loop();
            }
        }
    }
}

/// The handler: a fault by host code on a blocked range gives the chunk
/// around it its rights back; anything else goes to the previous handler.
extern "C" fn on_fault(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo for SIGSEGV and SIGBUS.
    let address = unsafe { (*info).si_addr() } as usize;
    if !in_guest_code(fault_pc(context)) && restore_blocked(address) {
        return;
    }
    let previous = if signal == libc::SIGBUS {
        PREVIOUS_BUS.get()
    } else {
        PREVIOUS_SEGV.get()
    };
    if let Some(previous) = previous {
        // SAFETY: the action the system gave back when this one replaced it.
        unsafe { hand_on(previous, signal, info, context) }
    }
}

/// Gives the [`CHUNK`] of a blocked range around `address` its rights back;
/// false if no blocked range holds it.
fn restore_blocked(address: usize) -> bool {
    for slot in BLOCKED.iter() {
        let generation = slot.generation.load(Ordering::Acquire);
        let base = slot.base.load(Ordering::Acquire);
        let len = slot.len.load(Ordering::Acquire);
        if base == 0 || address < base || address - base >= len {
            continue;
        }
        if slot
            .restoring
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            // Still the range read above (neither forgotten nor blocked
            // anew since): its memory is mapped until `restoring` clears.
            if slot.base.load(Ordering::Acquire) == base
                && slot.generation.load(Ordering::Acquire) == generation
            {
                restore_chunk(base, len, address);
                slot.restored.store(true, Ordering::Release);
            }
            slot.restoring.store(false, Ordering::Release);
        }
        // Restored here or by another thread at this moment: either way the
        // access is retried.
        return true;
    }
    false
}

/// Gives the chunk around `address`, within `len` bytes at `base`, its
/// rights back; the whole range if the system refuses a piece (it may be
/// out of mappings).
fn restore_chunk(base: usize, len: usize, address: usize) {
    let start = (address & !(CHUNK - 1)).max(base);
    let end = (address & !(CHUNK - 1))
        .saturating_add(CHUNK)
        .min(base + len);
    let rights = libc::PROT_READ | libc::PROT_WRITE;
    // SAFETY: inside a guest memory's accessible range, still mapped.
    unsafe {
        if libc::mprotect(start as *mut c_void, end - start, rights) != 0 {
            libc::mprotect(base as *mut c_void, len, rights);
        }
    }
}

/// Whether `pc` lies in compiled guest code.
fn in_guest_code(pc: usize) -> bool {
    CODE.iter().any(|slot| {
        let start = slot.start.load(Ordering::Acquire);
        start != 0 && start <= pc && pc < slot.end.load(Ordering::Acquire)
    })
}

/// The instruction that faulted.
fn fault_pc(context: *mut c_void) -> usize {
    let context = context.cast::<libc::ucontext_t>();
    // SAFETY: the kernel passes the interrupted thread's context.
    unsafe {
        #[cfg(target_arch = "x86_64")]
        {
            (*context).uc_mcontext.gregs[libc::REG_RIP as usize] as usize
        }
        #[cfg(target_arch = "aarch64")]
        {
            (*context).uc_mcontext.pc as usize
        }
    }
}

/// Runs the handler that was installed before this one, as the system
/// would have.
///
/// # Safety
///
/// `previous` is an action the system returned.
unsafe fn hand_on(
    previous: &libc::sigaction,
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut c_void,
) {
    let handler = previous.sa_sigaction;
    // SAFETY: the handler's type is what its flags say.
    unsafe {
        if previous.sa_flags & libc::SA_SIGINFO != 0 {
            let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void) =
                std::mem::transmute(handler);
            handler(signal, info, context);
        } else if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
            // Put it back: the faulting access runs again and the system
            // does what it would have done.
            libc::sigaction(signal, previous, std::ptr::null_mut());
        } else {
            let handler: extern "C" fn(libc::c_int) = std::mem::transmute(handler);
            handler(signal);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page-aligned anonymous mapping, unmapped at the end.
    struct Pages {
        base: usize,
        len: usize,
        released: AtomicBool,
    }

    impl Pages {
        fn new(len: usize) -> Self {
            // SAFETY: a fresh private mapping.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(base, libc::MAP_FAILED);
            Self {
                base: base as usize,
                len,
                released: AtomicBool::new(false),
            }
        }
    }

    impl Drop for Pages {
        fn drop(&mut self) {
            forget(self.base, &self.released);
            // SAFETY: the mapping made in new.
            unsafe { libc::munmap(self.base as *mut c_void, self.len) };
        }
    }

    #[test]
    fn host_code_touching_a_blocked_range_gives_back_only_the_chunk_it_touched() {
        install();
        let pages = Pages::new(3 * CHUNK);
        // SAFETY: the mapping stays until pages is dropped.
        assert!(unsafe { block(pages.base, pages.len, &pages.released) });
        // A chunk wholly inside the mapping, past its first page.
        let chunk = (pages.base + CHUNK) & !(CHUNK - 1);
        // SAFETY: inside the mapping; the fault is this test's, not a guest's.
        unsafe { (chunk as *mut u8).add(100).write_volatile(3) };
        let slot = BLOCKED
            .iter()
            .find(|slot| slot.base.load(Ordering::Acquire) == pages.base)
            .unwrap();
        assert!(slot.restored.load(Ordering::Acquire));
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let rights_at = |address: usize| {
            maps.lines()
                .find(|line| {
                    let (range, _) = line.split_once(' ').unwrap();
                    let (start, end) = range.split_once('-').unwrap();
                    let start = usize::from_str_radix(start, 16).unwrap();
                    let end = usize::from_str_radix(end, 16).unwrap();
                    (start..end).contains(&address)
                })
                .map(|line| line.split_whitespace().nth(1).unwrap().to_owned())
                .unwrap()
        };
        assert_eq!(rights_at(chunk), "rw-p", "the chunk touched is given back");
        assert_eq!(rights_at(pages.base), "---p", "the rest stays blocked");
        assert_eq!(rights_at(chunk + CHUNK), "---p", "the rest stays blocked");
        // Blocked again, the range is whole again.
        // SAFETY: as above.
        assert!(unsafe { block(pages.base, pages.len, &pages.released) });
        assert!(!slot.restored.load(Ordering::Acquire));
    }

    #[test]
    fn host_code_reading_and_writing_a_blocked_range_goes_on_and_unblocks_it() {
        install();
        let pages = Pages::new(4 << 12);
        let bytes = pages.base as *mut u8;
        // SAFETY: inside the mapping.
        unsafe { bytes.add(5000).write_volatile(7) };
        // SAFETY: the mapping stays until pages is dropped (which forgets it).
        assert!(unsafe { block(pages.base, pages.len, &pages.released) });
        // SAFETY: inside the mapping; the fault is this test's, not a guest's.
        let read = unsafe { bytes.add(5000).read_volatile() };
        assert_eq!(read, 7);
        // SAFETY: as above.
        unsafe { bytes.add(9000).write_volatile(9) };
        // SAFETY: as above.
        assert_eq!(unsafe { bytes.add(9000).read_volatile() }, 9);
    }

    #[test]
    fn an_unblocked_range_is_usable_without_a_fault() {
        let pages = Pages::new(2 << 12);
        // SAFETY: the mapping stays until pages is dropped.
        assert!(unsafe { block(pages.base, pages.len, &pages.released) });
        // SAFETY: as above.
        unsafe { unblock(pages.base, &pages.released) };
        assert!(!restore_blocked(pages.base), "no longer in the table");
        // An access that faulted now would end the test process: no blocked
        // range holds it.
        // SAFETY: inside the mapping, which has its rights back.
        unsafe { (pages.base as *mut u8).add(100).write_volatile(1) };
    }

    #[test]
    fn a_released_range_is_no_longer_restored_nor_blocked() {
        install();
        let pages = Pages::new(1 << 12);
        // SAFETY: the mapping stays until pages is dropped.
        assert!(unsafe { block(pages.base, pages.len, &pages.released) });
        forget(pages.base, &pages.released);
        assert!(!restore_blocked(pages.base + 10));
        // SAFETY: as above.
        assert!(
            !unsafe { block(pages.base, pages.len, &pages.released) },
            "a released memory is never blocked again"
        );
        // Give it back its rights so the test ends cleanly.
        // SAFETY: the mapping made above.
        unsafe {
            libc::mprotect(
                pages.base as *mut c_void,
                pages.len,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
    }

    #[test]
    fn a_fault_in_guest_code_is_left_to_the_next_handler() {
        let code = [0u8; 64];
        note_guest_code(code.as_ptr_range());
        assert!(in_guest_code(code.as_ptr() as usize + 10));
        assert!(!in_guest_code(code.as_ptr() as usize + 64));
    }
}
