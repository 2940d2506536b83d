//! [`CpuMeter`]: the CPU time a guest burns, measured with the clock of the
//! thread that runs it, and the CPU-time budget of the call in progress.
//!
//! A guest runs as a future on a thread of its own; [`Metered`] reads the
//! thread's CPU clock around every poll of that future, so the meter counts
//! only the time the guest (and the host calls it makes on its thread) really
//! ran: a guest waiting for a timer, the door or its next request burns
//! nothing, and neither does one descheduled by a busy machine. The budget
//! is checked while a poll runs: on Linux by the engine's ticker, which reads
//! the guest thread's clock from its own thread (see [`super::interrupt`]);
//! elsewhere by the epoch callback, on the guest's thread.
//!
//! Where threads have no CPU clock (Windows), the wall time of each poll
//! stands in for it: still only the time the guest was being run, but a
//! descheduled guest is then charged.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

/// No budget: the call is measured, never stopped for its CPU time.
const UNLIMITED: u64 = u64::MAX;
/// No poll in progress.
const IDLE: u64 = u64::MAX;

/// A number for the calling thread, unique in the process (0 is no thread).
fn thread_tag() -> u64 {
    use std::sync::atomic::AtomicU64;
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static TAG: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    TAG.with(|tag| *tag)
}

/// Nanoseconds on the calling thread's CPU clock.
#[cfg(unix)]
fn thread_cpu_nanos() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    (now.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(now.tv_nsec as u64)
}

/// The calling thread's CPU clock, which other threads can read while it
/// runs (Linux).
#[cfg(target_os = "linux")]
fn this_thread_clock() -> i64 {
    thread_local! {
        static CLOCK: i64 = {
            let mut clock: libc::clockid_t = 0;
            // SAFETY: asks for the clock of this (live) thread.
            match unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut clock) } {
                0 => i64::from(clock),
                _ => NO_CLOCK,
            }
        };
    }
    CLOCK.with(|clock| *clock)
}

/// Nanoseconds on the CPU clock `clock` of another thread (`None` if it
/// cannot be read, the thread having ended).
#[cfg(target_os = "linux")]
fn read_thread_clock(clock: i64) -> Option<u64> {
    let clock = libc::clockid_t::try_from(clock).ok()?;
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes into `now` only.
    if unsafe { libc::clock_gettime(clock, &mut now) } != 0 {
        return None;
    }
    Some(
        (now.tv_sec as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(now.tv_nsec as u64),
    )
}

#[cfg(not(target_os = "linux"))]
fn this_thread_clock() -> i64 {
    NO_CLOCK
}

#[cfg(not(target_os = "linux"))]
fn read_thread_clock(_clock: i64) -> Option<u64> {
    None
}

/// No thread clock another thread can read.
const NO_CLOCK: i64 = i64::MIN;

/// Nanoseconds of wall time since the first call (no thread CPU clock here).
#[cfg(not(unix))]
fn thread_cpu_nanos() -> u64 {
    use std::sync::OnceLock;
    use std::time::Instant;
    static START: OnceLock<Instant> = OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// One guest's CPU time, and the budget of its call in progress.
#[derive(Debug)]
pub(crate) struct CpuMeter {
    /// CPU time of the polls that have ended, in nanoseconds.
    burned: AtomicU64,
    /// The thread clock when the poll in progress started ([`IDLE`]: none).
    poll_started: AtomicU64,
    /// The [`thread_tag`] of the thread running that poll.
    poll_thread: AtomicU64,
    /// That thread's CPU clock, for other threads to read ([`NO_CLOCK`]:
    /// none).
    poll_clock: AtomicI64,
    /// What had been burned when the call in progress began.
    call_started: AtomicU64,
    /// The call's budget in nanoseconds ([`UNLIMITED`]: none).
    budget: AtomicU64,
    /// The budget of a call sent but not yet picked up by the guest (0: none).
    pending: AtomicU64,
}

impl Default for CpuMeter {
    fn default() -> Self {
        Self {
            burned: AtomicU64::new(0),
            poll_started: AtomicU64::new(IDLE),
            poll_thread: AtomicU64::new(0),
            poll_clock: AtomicI64::new(NO_CLOCK),
            call_started: AtomicU64::new(0),
            budget: AtomicU64::new(UNLIMITED),
            pending: AtomicU64::new(0),
        }
    }
}

impl CpuMeter {
    /// A new meter, shared by the guest's future and its host side.
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Gives the next call `budget` of CPU time (`None`: unlimited), from
    /// the moment the guest picks it up ([`CpuMeter::begin_call`]).
    pub(crate) fn arm(&self, budget: Option<Duration>) {
        let nanos = budget.map_or(UNLIMITED, |b| {
            u64::try_from(b.as_nanos()).unwrap_or(UNLIMITED).max(1)
        });
        self.pending.store(nanos, Ordering::SeqCst);
    }

    /// Starts the call the host armed, if one is waiting (true if one
    /// was): called on the guest's thread as it picks a request up.
    pub(crate) fn begin_call(&self) -> bool {
        let budget = self.pending.swap(0, Ordering::SeqCst);
        if budget == 0 {
            return false;
        }
        self.call_started.store(self.total(), Ordering::SeqCst);
        self.budget.store(budget, Ordering::SeqCst);
        true
    }

    /// Ends the call in progress: its budget no longer applies (what the
    /// host does between calls is not the call's).
    pub(crate) fn end_call(&self) {
        self.budget.store(UNLIMITED, Ordering::SeqCst);
    }

    /// CPU time the call in progress (or the last one) has burned so far.
    pub(crate) fn call_used(&self) -> Duration {
        let used = self
            .total()
            .saturating_sub(self.call_started.load(Ordering::SeqCst));
        Duration::from_nanos(used)
    }

    /// Everything the guest has burned since it started, counting the poll
    /// in progress when asked on the thread running it (a host call the
    /// guest makes is).
    pub(crate) fn burned(&self) -> Duration {
        Duration::from_nanos(self.total())
    }

    /// Whether the call in progress has spent its budget (asked on the
    /// guest's thread at an epoch tick, or by the engine's ticker where a
    /// thread's clock can be read from another).
    pub(crate) fn over_budget(&self) -> bool {
        let budget = self.budget.load(Ordering::Relaxed);
        budget != UNLIMITED && self.call_used().as_nanos() >= u128::from(budget)
    }

    /// Everything burned so far, counting the poll in progress when called
    /// on the thread running it, or from another thread where that thread's
    /// clock can be read (Linux); elsewhere, from another thread, the polls
    /// that ended.
    fn total(&self) -> u64 {
        let burned = self.burned.load(Ordering::SeqCst);
        let started = self.poll_started.load(Ordering::SeqCst);
        if started == IDLE {
            return burned;
        }
        let now = if self.poll_thread.load(Ordering::SeqCst) == thread_tag() {
            Some(thread_cpu_nanos())
        } else {
            // Another thread's own CPU clock says nothing about the guest's.
            read_thread_clock(self.poll_clock.load(Ordering::SeqCst))
        };
        match now {
            // The poll may have ended meanwhile (its start then reads IDLE).
            Some(now) if self.poll_started.load(Ordering::SeqCst) == started => {
                burned.saturating_add(now.saturating_sub(started))
            }
            _ => self.burned.load(Ordering::SeqCst),
        }
    }
}

/// A guest's future, with every poll's CPU time added to its meter.
pub(crate) struct Metered<F> {
    inner: Pin<Box<F>>,
    meter: Arc<CpuMeter>,
}

impl<F> Metered<F> {
    /// `inner`, measured by `meter`.
    pub(crate) fn new(inner: F, meter: Arc<CpuMeter>) -> Self {
        Self {
            inner: Box::pin(inner),
            meter,
        }
    }
}

impl<F: Future> Future for Metered<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let started = thread_cpu_nanos();
        self.meter.poll_thread.store(thread_tag(), Ordering::SeqCst);
        self.meter
            .poll_clock
            .store(this_thread_clock(), Ordering::SeqCst);
        self.meter.poll_started.store(started, Ordering::SeqCst);
        let polled = self.inner.as_mut().poll(cx);
        let spent = thread_cpu_nanos().saturating_sub(started);
        self.meter.poll_started.store(IDLE, Ordering::SeqCst);
        self.meter.burned.fetch_add(spent, Ordering::SeqCst);
        polled
    }
}

/// The error an epoch callback stops a guest with when its call has spent
/// its CPU-time budget.
#[derive(Debug, thiserror::Error)]
#[error("the execution used its CPU-time budget")]
pub(crate) struct CpuBudgetSpent;

#[cfg(test)]
mod tests {
    use super::*;

    /// Burns `cpu` of this thread's CPU time (however busy the machine is).
    fn spin(cpu: Duration) {
        let start = thread_cpu_nanos();
        let mut x = 0u64;
        while thread_cpu_nanos() - start < cpu.as_nanos() as u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
    }

    #[tokio::test]
    async fn a_poll_that_spins_is_charged_and_a_sleep_is_not() {
        let meter = CpuMeter::new();
        meter.arm(Some(Duration::from_millis(30)));
        let inner_meter = meter.clone();
        Metered::new(
            async move {
                inner_meter.begin_call();
                spin(Duration::from_millis(40));
                assert!(inner_meter.over_budget(), "40 ms of spinning spends 30 ms");
                tokio::time::sleep(Duration::from_millis(200)).await;
            },
            meter.clone(),
        )
        .await;
        let used = meter.call_used();
        assert!(used >= Duration::from_millis(40), "{used:?}");
        assert!(
            used < Duration::from_millis(150),
            "the 200 ms sleep burned no CPU: {used:?}"
        );
    }

    #[test]
    fn another_thread_reading_mid_poll_sees_the_guest_threads_time_only() {
        let meter = CpuMeter::new();
        meter.arm(None);
        meter.begin_call();
        let (mid_poll, read) = (
            std::sync::Arc::new(std::sync::Barrier::new(2)),
            std::sync::Arc::new(std::sync::Barrier::new(2)),
        );
        let (guest_meter, guest_mid, guest_read) = (meter.clone(), mid_poll.clone(), read.clone());
        let guest = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            runtime.block_on(Metered::new(
                async move {
                    spin(Duration::from_millis(20));
                    guest_mid.wait();
                    guest_read.wait();
                },
                guest_meter,
            ));
        });
        // This thread has burned far more CPU than the guest's 20 ms poll.
        spin(Duration::from_millis(200));
        mid_poll.wait();
        let seen = meter.call_used();
        read.wait();
        guest.join().unwrap();
        if cfg!(target_os = "linux") {
            // Read from the guest thread's own clock: its 20 ms, not this
            // thread's 200.
            assert!(
                seen >= Duration::from_millis(20) && seen < Duration::from_millis(150),
                "a poll in progress is counted by its own thread's clock: {seen:?}"
            );
        } else {
            assert_eq!(
                seen,
                Duration::ZERO,
                "a poll in progress on another thread is not counted from here"
            );
        }
        let used = meter.call_used();
        assert!(
            used >= Duration::from_millis(20) && used < Duration::from_millis(150),
            "the finished poll counts its own thread's time: {used:?}"
        );
    }

    #[test]
    fn a_call_without_budget_is_measured_but_never_over() {
        let meter = CpuMeter::new();
        meter.arm(None);
        meter.begin_call();
        assert!(!meter.over_budget());
        meter.burned.fetch_add(10_000_000_000, Ordering::SeqCst);
        assert!(!meter.over_budget());
        assert_eq!(meter.call_used(), Duration::from_secs(10));
    }

    #[test]
    fn each_call_counts_from_its_own_start() {
        let meter = CpuMeter::new();
        meter.burned.store(5_000, Ordering::SeqCst);
        meter.arm(Some(Duration::from_nanos(1_000)));
        meter.begin_call();
        assert_eq!(meter.call_used(), Duration::ZERO);
        meter.burned.fetch_add(999, Ordering::SeqCst);
        assert!(!meter.over_budget());
        meter.burned.fetch_add(1, Ordering::SeqCst);
        assert!(meter.over_budget());
        // A call armed but not picked up leaves the running one as it is.
        meter.arm(None);
        assert!(meter.over_budget());
        meter.begin_call();
        assert!(!meter.over_budget());
    }
}
