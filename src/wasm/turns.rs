//! Driving a runtime turn by turn: a runtime that exports `turn` and
//! `host_alloc` runs one piece of source per call of `turn` and then returns
//! to the host, its state kept for the next turn. Between two turns no guest
//! code is on the stack, so the instance's whole state is its linear memory
//! and globals (plus the WASI context the host holds), which is what makes
//! snapshots, forks and saved sandboxes possible (see [`super::preinit`] and
//! [`super::kept_memory`]).
//!
//! Each execution is one turn of [`SERVE`], which has the driver answer the
//! one request waiting on stdin; the call ends when the turn returns.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use wasmtime::{Instance, Memory, Store, TypedFunc};

use super::guest_io::GuestLink;
use super::guest_state::GuestState;
use super::interrupt::Interrupt;
use super::kept_memory::ForkedMemory;
use super::kept_memory::KeptMemory;
use super::state_error::StateError;
use super::trap::{GuestExit, classify};

/// The source of every turn after the driver's set-up: answer one request.
pub(crate) const SERVE: &[u8] = b"__import__('_sandbox_serve').serve()";

/// A turn-driven instance's entry points.
#[derive(Clone)]
pub(crate) struct TurnExports {
    alloc: TypedFunc<i32, i32>,
    turn: TypedFunc<(i32, i32), i32>,
    memory: Memory,
}

impl TurnExports {
    /// Finds the entry points in `instance`.
    pub(crate) fn find(
        store: &mut Store<GuestState>,
        instance: &Instance,
    ) -> Result<Self, wasmtime::Error> {
        Ok(Self {
            alloc: instance.get_typed_func(&mut *store, "host_alloc")?,
            turn: instance.get_typed_func(&mut *store, "turn")?,
            memory: instance
                .get_memory(&mut *store, "memory")
                .ok_or_else(|| wasmtime::Error::msg("the runtime exports no memory"))?,
        })
    }

    /// Runs `source` as one turn; its value is what `turn` returned (0 when
    /// the source ran without an uncaught exception).
    pub(crate) async fn run(
        &self,
        store: &mut Store<GuestState>,
        source: &[u8],
    ) -> wasmtime::Result<i32> {
        let len = i32::try_from(source.len())
            .map_err(|_| wasmtime::Error::msg("a turn's source is too long"))?;
        let at = self.alloc.call_async(&mut *store, len).await?;
        let start = u32::try_from(at).unwrap_or(0) as usize;
        if start == 0 {
            return Err(wasmtime::Error::msg(
                "the interpreter has no memory left for the next turn",
            ));
        }
        self.memory.write(&mut *store, start, source)?;
        self.turn.call_async(&mut *store, (at, len)).await
    }
}

/// What the host may ask of an instance between two turns.
pub(crate) enum Control {
    /// Fork the instance's memory into a page store in the directory.
    Fork(PathBuf, oneshot::Sender<Result<ForkedMemory, StateError>>),
    /// An execution (the one numbered) is about to start.
    Started(u64),
    /// Keep the state the last turn left (after the execution numbered);
    /// the answer may hold something to tell the client.
    Keep(u64, oneshot::Sender<Result<Option<String>, StateError>>),
}

/// Answers requests, one turn each, until the instance traps or exits; asks
/// between turns are answered as they come.
pub(crate) async fn serve(
    mut store: Store<GuestState>,
    instance: Instance,
    link: Arc<GuestLink>,
    metered: bool,
    mut control: mpsc::Receiver<Control>,
    mut kept: Option<KeptMemory>,
    interrupt: &Interrupt,
) -> GuestExit {
    let exports = match TurnExports::find(&mut store, &instance) {
        Ok(exports) => exports,
        Err(e) => return GuestExit::Failed(format!("the runtime cannot be driven by turns: {e}")),
    };
    loop {
        tokio::select! {
            biased;
            asked = control.recv() => match asked {
                Some(Control::Fork(dir, answer)) => {
                    let forked = match &mut kept {
                        Some(kept) => kept.fork(&mut store, &instance, dir),
                        None => Err(StateError::NotCopyable),
                    };
                    let _ = answer.send(forked);
                }
                Some(Control::Started(executions)) => {
                    if let Some(kept) = &mut kept {
                        kept.started(executions);
                    }
                }
                Some(Control::Keep(executions, answer)) => {
                    let Some(kept) = &mut kept else {
                        let _ = answer.send(Ok(None));
                        continue;
                    };
                    // On the guest's own thread, which nothing else waits for.
                    let kept_now = kept.keep(&mut store, &instance, executions);
                    // The next call's time starts once the tidy is done.
                    let _busy = link.settling().begin();
                    let _ = answer.send(kept_now);
                    // The execution is answered: what the keep left is done
                    // now, before any other control or turn is taken (not
                    // when the guest is being stopped: its memory is blocked).
                    if !interrupt.stopping()
                        && let Err(e) = kept.tidy(&mut store, &instance, || interrupt.stopping())
                    {
                        // A stop that lands during the tidy blocks the memory
                        // it reads: expected (a close, a shutdown), not worth
                        // a warning.
                        if interrupt.stopping() {
                            tracing::debug!(error = %e, "the sandbox was stopped during the tidy of its kept pages: its state stays as the last execution left it");
                        } else {
                            tracing::warn!(error = %e, "could not tidy the sandbox's kept pages: its state stays as the last execution left it");
                        }
                    }
                }
                // The interpreter's owner is gone.
                None => return GuestExit::Gone,
            },
            () = link.wait_request() => {
                interrupt.begin_call();
                if metered && let Some(fuel) = link.take_pending_fuel()
                    && let Err(e) = store.set_fuel(fuel)
                {
                    return GuestExit::Failed(e.to_string());
                }
                if let Err(e) = exports.run(&mut store, SERVE).await {
                    return classify(Err(interrupt.explain(e)));
                }
                interrupt.call_ended();
                let fuel_left = if metered { store.get_fuel().unwrap_or(0) } else { 0 };
                link.turn_returned(fuel_left);
            }
        }
    }
}
