//! [`GuestThread`]: a guest interpreter's future, run on a thread of its own.
//!
//! A guest runs WebAssembly for as long as its execution lasts and gives the
//! thread back only at its host calls (compiled code has no epoch checks
//! where guests are stopped by blocking their memory, see
//! [`super::fault_handler`]), so guests do not share threads: the system's
//! scheduler shares the cores between them, as between processes. The
//! thread drives the guest with the guest runtime's handle, so the host
//! work the guest waits for (the door's requests, timers) runs on that
//! runtime's threads, shared by all guests.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::interrupt::{Interrupt, StopReason};
use super::trap::GuestExit;

/// A guest running on its own thread: stopped with [`GuestThread::abort`],
/// awaited for how it ended.
#[derive(Debug)]
pub(crate) struct GuestThread {
    exit: oneshot::Receiver<GuestExit>,
    cancel: CancellationToken,
    interrupt: Arc<Interrupt>,
    finished: Arc<AtomicBool>,
}

/// The guest's thread ended without saying how the guest did (it panicked).
#[derive(Debug, thiserror::Error)]
#[error("the guest's thread ended without an answer")]
pub(crate) struct ThreadLost;

impl GuestThread {
    /// Runs `guest` on a new thread, driven by `executor`; `interrupt` stops
    /// it. An aborted guest ends as [`GuestExit::Gone`].
    pub(crate) fn spawn(
        executor: &tokio::runtime::Handle,
        guest: impl Future<Output = GuestExit> + Send + 'static,
        interrupt: Arc<Interrupt>,
    ) -> std::io::Result<Self> {
        let (tell, exit) = oneshot::channel();
        let cancel = CancellationToken::new();
        let finished = Arc::new(AtomicBool::new(false));
        let (executor, thread_cancel, thread_finished, thread_interrupt) = (
            executor.clone(),
            cancel.clone(),
            finished.clone(),
            interrupt.clone(),
        );
        std::thread::Builder::new()
            .name("wasm-guest".into())
            .spawn(move || {
                // Marks the guest finished however the thread ends (a panic
                // too: its exit then reads as ThreadLost).
                let finished = Finished(thread_finished);
                let ended = executor.block_on(async {
                    tokio::select! {
                        biased;
                        () = thread_cancel.cancelled() => GuestExit::Gone,
                        ended = guest => ended,
                    }
                });
                // The guest's store, and its memory, are gone by now.
                #[cfg(guest_stop_by_fault)]
                thread_interrupt.detach();
                drop(thread_interrupt);
                drop(finished);
                let _ = tell.send(ended);
            })?;
        Ok(Self {
            exit,
            cancel,
            interrupt,
            finished,
        })
    }

    /// Stops the guest: at once if it waits for the host, at its next
    /// memory access (or epoch tick) if it runs. Its store is dropped on its
    /// thread, which then ends.
    pub(crate) fn abort(&self) {
        self.cancel.cancel();
        self.interrupt.request(StopReason::Stopped);
    }

    /// Whether the guest has ended (its store dropped).
    pub(crate) fn is_finished(&self) -> bool {
        self.finished.load(Ordering::SeqCst)
    }
}

/// Sets its flag when dropped.
struct Finished(Arc<AtomicBool>);

impl Drop for Finished {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Future for GuestThread {
    type Output = Result<GuestExit, ThreadLost>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.exit)
            .poll(cx)
            .map(|ended| ended.map_err(|_| ThreadLost))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wasm::cpu_clock::CpuMeter;
    use std::time::Duration;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn a_guest_ends_with_its_exit_and_an_aborted_one_as_gone() {
        let runtime = runtime();
        let interrupt = Interrupt::new(CpuMeter::new());
        let done = GuestThread::spawn(
            runtime.handle(),
            async { GuestExit::Exited(3) },
            interrupt.clone(),
        )
        .unwrap();
        assert_eq!(runtime.block_on(done).unwrap(), GuestExit::Exited(3));

        let waiting = GuestThread::spawn(
            runtime.handle(),
            async {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                GuestExit::Exited(0)
            },
            Interrupt::new(CpuMeter::new()),
        )
        .unwrap();
        assert!(!waiting.is_finished());
        waiting.abort();
        let started = std::time::Instant::now();
        let ended = runtime.block_on(waiting).unwrap();
        assert_eq!(ended, GuestExit::Gone);
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
