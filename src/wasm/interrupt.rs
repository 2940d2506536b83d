//! [`Interrupt`]: stopping one guest from outside its thread, and why it was
//! stopped.
//!
//! Three things stop a running guest: its owner (a timeout, a cancellation,
//! a closed sandbox), its call's CPU-time budget, and the loss of the
//! server's lease on a shared directory. Where guest memory can be blocked
//! (Linux on x86-64 and arm64, see [`super::fault_handler`]), a stop blocks
//! the guest's memory and its next access traps; the engine's ticker calls
//! [`tick`], which checks every guest's CPU time and the lease, and blocks
//! again memory that host code gave back. Elsewhere the compiled code checks
//! the engine's epoch and the epoch callback asks [`Interrupt::due`].
//!
//! A stop for the CPU-time budget belongs to one call: it is asked only
//! while that call runs, and lifted if it comes as the call ends
//! ([`Interrupt::call_ended`]) or when the next call begins
//! ([`Interrupt::begin_call`]); meanwhile the host keeps and forks the guest's
//! memory, which must not be blocked. The other two are for good, and
//! replace a CPU-time stop.
//!
//! Either way the guest's call ends with an error that [`Interrupt::explain`]
//! turns into the reason, so the outcome reads "the CPU-time budget was used
//! up", not "out of bounds memory access".

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use super::cpu_clock::{CpuBudgetSpent, CpuMeter};
#[cfg(guest_stop_by_fault)]
use super::guest_memory::MemoryRegion;

/// Why a guest was stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StopReason {
    /// Its owner stopped it (a timeout, a cancellation, a close).
    Stopped,
    /// Its call spent its CPU-time budget.
    CpuBudget,
    /// This server's lease on the shared directory lapsed.
    LeaseLost,
}

/// One guest's stop.
#[derive(Debug)]
pub(crate) struct Interrupt {
    /// The guest's CPU meter, whose budget [`tick`] checks.
    cpu: Arc<CpuMeter>,
    /// Whether a stop holds (what the state's reason says, read without
    /// the lock at every host call's return).
    stopping: AtomicBool,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The reason asked first, if any.
    reason: Option<StopReason>,
    /// How many calls have begun (a CPU-time stop names its call).
    calls: u64,
    /// The guest's memory, once it has one, until it is gone.
    #[cfg(guest_stop_by_fault)]
    memory: Option<Arc<MemoryRegion>>,
}

/// Every guest's interrupt, for the ticker.
static WATCHED: Mutex<Vec<Weak<Interrupt>>> = Mutex::new(Vec::new());

impl Interrupt {
    /// The interrupt of a guest measured by `cpu`.
    pub(crate) fn new(cpu: Arc<CpuMeter>) -> Arc<Self> {
        let interrupt = Arc::new(Self {
            cpu,
            stopping: AtomicBool::new(false),
            state: Mutex::new(State::default()),
        });
        let mut watched = WATCHED.lock().unwrap_or_else(|p| p.into_inner());
        watched.retain(|w| w.strong_count() > 0);
        watched.push(Arc::downgrade(&interrupt));
        interrupt
    }

    /// Stops the guest for `reason`. The first reason asked is kept, except
    /// that a stop for good replaces one for the call's CPU time.
    pub(crate) fn request(&self, reason: StopReason) {
        let mut state = self.state();
        self.stop(&mut state, reason);
    }

    /// Begins the call the host armed on the CPU meter, if one waits (called
    /// on the guest's thread as it picks a request up): a stop for the last
    /// call's CPU time is lifted.
    pub(crate) fn begin_call(&self) {
        if self.cpu.begin_call() {
            self.next_phase();
        }
    }

    /// The call ended: its CPU-time budget no longer applies, a stop for it
    /// that came as it ended is lifted, and no later check holds it to that
    /// budget.
    pub(crate) fn call_ended(&self) {
        self.cpu.end_call();
        self.next_phase();
    }

    /// Between two calls, or into one: a CPU-time stop no longer holds, and
    /// a check made before (which names the phase it saw) is void.
    fn next_phase(&self) {
        let mut state = self.state();
        state.calls += 1;
        if state.reason == Some(StopReason::CpuBudget) {
            state.reason = None;
            self.stopping.store(false, Ordering::SeqCst);
            lift(&state);
        }
    }

    /// Records `reason` (see [`Interrupt::request`]) and blocks the memory.
    fn stop(&self, state: &mut State, reason: StopReason) {
        let replaces = match state.reason {
            None => true,
            Some(StopReason::CpuBudget) => reason != StopReason::CpuBudget,
            Some(_) => false,
        };
        if replaces {
            state.reason = Some(reason);
        }
        self.stopping.store(true, Ordering::SeqCst);
        enforce(state);
    }

    /// Whether a stop holds.
    pub(crate) fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Called as each host call returns to the guest: a stop asked during
    /// the call ends the guest here. Host code (a long read into guest
    /// memory) is not stopped by blocking the memory it touches, so a guest
    /// that spends nearly all its time in such calls is stopped by this.
    pub(crate) fn on_host_return(&self) -> wasmtime::Result<()> {
        if self.stopping() {
            return Err(self.stopped());
        }
        Ok(())
    }

    /// The error that ends a guest stopped from the host side, as its reason.
    fn stopped(&self) -> wasmtime::Error {
        self.explain(wasmtime::Error::msg("the guest was stopped"))
    }

    /// The reason the guest was stopped for, if it was.
    pub(crate) fn reason(&self) -> Option<StopReason> {
        self.state().reason
    }

    /// The error a stopped guest's call ended with, as its reason: the trap
    /// the stop caused says nothing of why.
    pub(crate) fn explain(&self, error: wasmtime::Error) -> wasmtime::Error {
        match self.reason() {
            Some(StopReason::CpuBudget) => CpuBudgetSpent.into(),
            Some(StopReason::LeaseLost) => crate::sandbox::lease::LeaseLost.into(),
            Some(StopReason::Stopped) | None => error,
        }
    }

    /// The question the epoch callback asks where compiled code checks
    /// epochs: an error (its reason) if the guest is to stop now.
    #[cfg(not(guest_stop_by_fault))]
    pub(crate) fn due(&self) -> wasmtime::Result<()> {
        self.check();
        match self.reason() {
            Some(_) => Err(self.stopped()),
            None => Ok(()),
        }
    }

    /// Asks for a stop if the call in progress spent its CPU time or the
    /// lease lapsed.
    fn check(&self) {
        let calls = {
            let state = self.state();
            if state.reason.is_some() {
                return;
            }
            state.calls
        };
        if self.cpu.over_budget() {
            let mut state = self.state();
            // Not if another call began meanwhile: the budget was its
            // predecessor's.
            if state.calls == calls {
                self.stop(&mut state, StopReason::CpuBudget);
            }
        } else if !crate::sandbox::lease::still_held() {
            self.request(StopReason::LeaseLost);
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(guest_stop_by_fault)]
impl Interrupt {
    /// Notes the guest's memory, so a stop can block it (at once if one was
    /// asked already).
    pub(crate) fn attach(&self, memory: Arc<MemoryRegion>) {
        let mut state = self.state();
        state.memory = Some(memory);
        enforce(&state);
    }

    /// Forgets the guest's memory: the guest is gone.
    pub(crate) fn detach(&self) {
        self.state().memory = None;
    }
}

/// Blocks the guest's memory if a stop was asked.
#[cfg(guest_stop_by_fault)]
fn enforce(state: &State) {
    if state.reason.is_some()
        && let Some(memory) = &state.memory
    {
        memory.block();
    }
}

/// Gives the guest's memory back its rights.
#[cfg(guest_stop_by_fault)]
fn lift(state: &State) {
    if let Some(memory) = &state.memory {
        memory.unblock();
    }
}

/// Nothing to block: the epoch callback stops the guest.
#[cfg(not(guest_stop_by_fault))]
fn enforce(_state: &State) {}

#[cfg(not(guest_stop_by_fault))]
fn lift(_state: &State) {}

/// How many ticks apart the memory of a guest still running after its stop
/// is blocked again (host code gave part of it back meanwhile): blocking a
/// large memory takes a while, and the guest almost always traps before.
#[cfg(guest_stop_by_fault)]
const REBLOCK_TICKS: u64 = 10;

/// Checks every guest (called by the engine's ticker): stops those whose call
/// spent its CPU time, all of them if the lease lapsed, and every
/// [`REBLOCK_TICKS`] blocks again the memory of those still running after a
/// stop.
#[cfg(guest_stop_by_fault)]
pub(crate) fn tick() {
    static TICKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let reblock = TICKS
        .fetch_add(1, Ordering::Relaxed)
        .is_multiple_of(REBLOCK_TICKS);
    let watched: Vec<Arc<Interrupt>> = {
        let mut watched = WATCHED.lock().unwrap_or_else(|p| p.into_inner());
        watched.retain(|w| w.strong_count() > 0);
        watched.iter().filter_map(Weak::upgrade).collect()
    };
    for interrupt in watched {
        interrupt.check();
        if reblock {
            enforce(&interrupt.state());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_cpu_time_stop_is_explained_as_such() {
        let interrupt = Interrupt::new(CpuMeter::new());
        assert_eq!(interrupt.reason(), None);
        interrupt.request(StopReason::CpuBudget);
        interrupt.request(StopReason::CpuBudget);
        assert_eq!(interrupt.reason(), Some(StopReason::CpuBudget));
        let explained = interrupt.explain(wasmtime::Error::msg("out of bounds memory access"));
        assert!(explained.downcast_ref::<CpuBudgetSpent>().is_some());
    }

    #[test]
    fn a_stop_for_good_replaces_a_stop_for_the_calls_cpu_time() {
        let interrupt = Interrupt::new(CpuMeter::new());
        interrupt.request(StopReason::CpuBudget);
        interrupt.request(StopReason::Stopped);
        assert_eq!(interrupt.reason(), Some(StopReason::Stopped));
        interrupt.call_ended();
        assert_eq!(
            interrupt.reason(),
            Some(StopReason::Stopped),
            "a timeout is never lifted with the CPU-time stop"
        );
    }

    #[test]
    fn a_guest_stopped_by_its_owner_keeps_its_own_error_and_stays_stopped() {
        let interrupt = Interrupt::new(CpuMeter::new());
        interrupt.request(StopReason::Stopped);
        let explained = interrupt.explain(wasmtime::Error::msg("the guest's own error"));
        assert_eq!(explained.to_string(), "the guest's own error");
        interrupt.call_ended();
        assert_eq!(interrupt.reason(), Some(StopReason::Stopped));
    }

    #[test]
    fn a_spent_budget_stops_its_call_and_not_the_next() {
        let cpu = CpuMeter::new();
        let interrupt = Interrupt::new(cpu.clone());
        cpu.arm(Some(Duration::from_nanos(1)));
        interrupt.begin_call();
        let start = std::time::Instant::now();
        // Burn a little CPU on this thread, which the meter reads as the
        // guest's while no poll runs elsewhere.
        let spin = || {
            let mut x = 0u64;
            while start.elapsed() < Duration::from_millis(5) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        };
        futures::executor::block_on(crate::wasm::cpu_clock::Metered::new(
            async { spin() },
            cpu.clone(),
        ));
        interrupt.check();
        assert_eq!(interrupt.reason(), Some(StopReason::CpuBudget));
        assert!(interrupt.stopping());
        interrupt.call_ended();
        assert_eq!(interrupt.reason(), None, "lifted as the call ends");
        interrupt.check();
        assert_eq!(
            interrupt.reason(),
            None,
            "between calls, the last call's budget stops nothing (the host keeps its memory)"
        );
        cpu.arm(None);
        interrupt.begin_call();
        assert_eq!(interrupt.reason(), None, "the next call runs");
        assert!(!interrupt.stopping());
        interrupt.check();
        assert_eq!(interrupt.reason(), None, "and has no budget to spend");
    }

    /// A guest in real wasmtime code, stopped by blocking its memory.
    #[cfg(guest_stop_by_fault)]
    mod stopping_a_running_guest {
        use super::*;
        use crate::wasm::engine::{GuestProfiler, build_engine};
        use std::time::Instant;
        use wasmtime::{CallHook, Caller, Instance, Linker, Module, Store, Trap};

        /// A guest that loops on its memory (`spin`), and one whose loop
        /// touches its memory only through a host call (`host_spin`).
        const GUEST: &str = r#"(module
            (import "host" "touch" (func $touch))
            (memory (export "memory") 16)
            (func (export "spin") (loop $l (drop (i32.load (i32.const 64))) (br $l)))
            (func (export "host_spin") (loop $l (call $touch) (br $l))))"#;

        /// Runs `export` until `interrupt` stops it, 100 ms after the start;
        /// how the call ended, and how long it ran.
        fn stopped(export: &str, reason: StopReason) -> (wasmtime::Error, Duration) {
            let engine = build_engine(Default::default(), GuestProfiler::None).unwrap();
            let module = Module::new(&engine, wat::parse_str(GUEST).unwrap()).unwrap();
            let mut linker = Linker::<()>::new(&engine);
            linker
                .func_wrap("host", "touch", |mut caller: Caller<'_, ()>| {
                    let memory = caller.get_export("memory").unwrap().into_memory().unwrap();
                    // Host code reading all the guest's memory, many times.
                    for _ in 0..20 {
                        let sum: u64 = memory.data(&caller).iter().map(|b| u64::from(*b)).sum();
                        std::hint::black_box(sum);
                    }
                })
                .unwrap();
            let mut store = Store::new(&engine, ());
            let interrupt = Interrupt::new(CpuMeter::new());
            let hook = interrupt.clone();
            store.call_hook(move |_, call| match call {
                CallHook::ReturningFromHost => hook.on_host_return(),
                _ => Ok(()),
            });
            let instance: Instance = linker.instantiate(&mut store, &module).unwrap();
            crate::wasm::fault_handler::note_guest_code(
                instance.module(&store).text().as_ptr_range(),
            );
            let memory = instance.get_memory(&mut store, "memory").unwrap();
            interrupt.attach(MemoryRegion::of(memory.data_ptr(&store)).unwrap());
            let run = instance
                .get_typed_func::<(), ()>(&mut store, export)
                .unwrap();
            let stopper = interrupt.clone();
            let (ended, returned) = std::sync::mpsc::channel::<()>();
            let stopping = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                stopper.request(reason);
                // A guest that is not stopped would hang the test run.
                if returned.recv_timeout(Duration::from_secs(10)).is_err() {
                    eprintln!("the guest ran on 10 s after its stop");
                    std::process::abort();
                }
            });
            let started = Instant::now();
            let error = futures::executor::block_on(run.call_async(&mut store, ())).unwrap_err();
            let took = started.elapsed();
            let _ = ended.send(());
            stopping.join().unwrap();
            (interrupt.explain(error), took)
        }

        #[test]
        fn a_loop_on_its_memory_traps_at_once() {
            let (error, took) = stopped("spin", StopReason::Stopped);
            assert_eq!(
                error.downcast_ref::<Trap>(),
                Some(&Trap::MemoryOutOfBounds),
                "{error:?}"
            );
            assert!(took < Duration::from_secs(2), "{took:?}");
        }

        #[test]
        fn a_loop_that_touches_its_memory_only_from_host_code_stops_as_a_call_returns() {
            let (error, took) = stopped("host_spin", StopReason::CpuBudget);
            assert!(
                error.downcast_ref::<CpuBudgetSpent>().is_some(),
                "{error:?}"
            );
            assert!(took < Duration::from_secs(2), "{took:?}");
        }
    }
}
