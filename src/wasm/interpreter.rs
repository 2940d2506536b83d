//! [`Interpreter`]: one CPython instance, alive between calls, running the
//! driver loop on a thread of its own (see [`super::guest_thread`]).
//!
//! What the guest gets, and nothing more: its sandbox directory preopened
//! read-write as `/`; the read-only directories its runtime's manifest names
//! (e.g. the standard-library zip at `/usr/local/lib`), the same for every
//! sandbox of that runtime; stdin, stdout and stderr connected to the host (see
//! [`super::guest_io`]); a fixed environment (`HOME=/`, `TMPDIR=/tmp`,
//! `MPLBACKEND` and the runtime's own variables, never the host's); the
//! argument list `python [-S] -c <driver>`; WASI clocks and random numbers; and
//! the runtime's declared extra imports, each answering a constant; and, for a
//! runtime that has one, the door to the host (see [`super::tool_door`]),
//! which answers only while an execution is armed. No sockets: WASI preview 1
//! has no way to open one; HTTP goes through the door, to allowed hosts only. Each
//! instance has its own memory limit and disk quota (enforced by the gates of
//! [`super::quota_gate`]), and each call its own fuel budget and wall-clock
//! timeout.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use wasmtime::{CallHook, Store};

use super::capture::OutputCapture;
use super::cpu_clock::Metered;
use super::guest_image::GuestImage;
use super::guest_io::{GuestLink, TOKEN_LEN};
use super::guest_program;
use super::guest_state::GuestState;
use super::guest_thread::GuestThread;
use super::interrupt::Interrupt;
use super::kept_memory::ForkedMemory;
use super::memory_limiter::{MemoryLimiter, MemoryMeter, MemoryRefusal};
use super::protocol::{Reply, Request, decode_reply};
use super::runtime::Entry;
use super::start_error::StartError;
use super::starting_memory::{self, PagesPlan, StartingMemory};
use super::state_error::StateError;
use super::trap::{GuestExit, classify};
use super::turns::{self, Control};
use crate::door::session::DoorSlot;
use crate::sandbox::SandboxLimits;
use crate::sandbox::open_files::note_closed;
use crate::sandbox::quota::QuotaLedger;

/// How long an interpreter may take to start.
pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Fuel for interpreter start-up, until the hello request installs its own.
const IDLE_FUEL: u64 = 50_000_000_000;
/// The least CPU time a start (or a package refresh) gets when executions
/// have a CPU-time budget: code the guest controls runs in both (`.pth`
/// files in its site-packages), so both are bounded like an execution, with
/// room for a slow machine's ordinary start.
pub(crate) const MIN_START_CPU: Duration = Duration::from_secs(5);

/// Whether an interpreter starts in a directory just created or in one that
/// a sandbox's code has used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DirState {
    /// Just created: empty.
    Fresh,
    /// A restart in a sandbox's own directory.
    Used,
}

/// The `-c` program that reads `len` bytes of marshalled driver code (with
/// its guest modules, compiled) from stdin and runs it.
fn bootstrap(len: usize) -> String {
    format!(
        "import marshal, posix\n\
         b = b''\n\
         while len(b) < {len}:\n    \
             c = posix.read(0, {len} - len(b))\n    \
             if not c:\n        \
                 raise SystemExit('the driver code was cut short')\n    \
             b += c\n\
         code, _sandbox_compiled = marshal.loads(b)\n\
         del b\n\
         exec(code)\n"
    )
}

/// The limits of one call to the driver.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CallLimits {
    /// Fuel the call may burn (`None`: not metered).
    pub fuel: Option<u64>,
    /// CPU time the call may burn (`None`: measured, not limited).
    pub cpu: Option<Duration>,
    /// Wall-clock time the call may take.
    pub timeout: Duration,
    /// Most bytes of the reply (images, value, error) kept.
    pub reply_bytes: usize,
}

/// How one call to the driver ended.
pub(crate) enum Outcome {
    /// The driver answered.
    Reply {
        /// The reply's body (kind-tagged fields: see [`super::protocol`]).
        body: Vec<u8>,
        /// Fuel the call burned, when metered.
        fuel_used: Option<u64>,
        /// CPU time the call burned.
        cpu_used: Duration,
    },
    /// The interpreter stopped on its own (trap, exit).
    Exited(GuestExit),
    /// The timeout passed; the interpreter was stopped.
    TimedOut,
    /// The call was cancelled; the interpreter was stopped.
    Cancelled,
    /// The call was cancelled while it waited for the guest's thread to
    /// finish the work after the last answer: nothing of it ran, and the
    /// interpreter goes on as it was.
    CancelledUnstarted,
}

/// One live CPython.
pub(crate) struct Interpreter {
    link: Arc<GuestLink>,
    task: Option<GuestThread>,
    meter: Arc<MemoryMeter>,
    /// Asks for a turn-driven interpreter between its turns.
    control: mpsc::Sender<Control>,
    /// The guest's door to the host, armed for each execution.
    door: Arc<DoorSlot>,
}

impl Interpreter {
    /// Starts CPython on `dir` and waits until the driver is ready.
    ///
    /// `dir_state` is `Fresh` when `dir` was just created: only such a start may hand
    /// back the driver's compiled code for the runtime's later interpreters,
    /// since nothing a user wrote can run in it before the hello reply.
    /// `pages` is where a turn-driven interpreter keeps the pages it writes
    /// (a sandbox's own interpreter: see [`super::page_store`]); without it,
    /// it cannot be forked or kept.
    pub(crate) async fn start(
        image: &Arc<GuestImage>,
        dir: &Path,
        dir_state: DirState,
        ledger: Arc<QuotaLedger>,
        limits: &SandboxLimits,
        start_timeout: Duration,
        pages: Option<PagesPlan>,
    ) -> Result<Self, StartError> {
        let memory = StartingMemory::Fresh(pages);
        Self::launch(image, dir, dir_state, ledger, limits, start_timeout, memory).await
    }

    /// Starts an interpreter of a turn-driven runtime on `dir` whose memory
    /// starts as `memory` (another interpreter's of the same image).
    pub(crate) async fn start_from(
        image: &Arc<GuestImage>,
        dir: &Path,
        ledger: Arc<QuotaLedger>,
        limits: &SandboxLimits,
        start_timeout: Duration,
        memory: StartingMemory,
    ) -> Result<Self, StartError> {
        if !image.turns {
            return Err(StartError::NoState(image.manifest.name.clone()));
        }
        let used = DirState::Used;
        Self::launch(image, dir, used, ledger, limits, start_timeout, memory).await
    }

    async fn launch(
        image: &Arc<GuestImage>,
        dir: &Path,
        dir_state: DirState,
        ledger: Arc<QuotaLedger>,
        limits: &SandboxLimits,
        start_timeout: Duration,
        memory: StartingMemory,
    ) -> Result<Self, StartError> {
        let link = GuestLink::new(random_token(), image.turns);
        let meter = Arc::new(MemoryMeter::with_limit(limits.memory_bytes));
        let max_open = usize::try_from(limits.open_files).unwrap_or(usize::MAX);
        let door = Arc::new(DoorSlot::default());

        let program = image.driver_program.get().filter(|_| !image.turns);
        let boot = program.map(|code| bootstrap(code.len()));
        let state = GuestState::new(
            &image.manifest,
            &image.mounts,
            dir,
            // The driver program (see guest_program.rs), passed with `python -S -c`
            // (`-S`: `site` is imported only once packages are installed, which saves
            // start-up time) to the first interpreter of a runtime, which hands back
            // its compiled code; later ones get that code on stdin behind
            // [`bootstrap`] and skip the compile.
            boot.as_deref().unwrap_or(guest_program::program()),
            link.clone(),
            max_open,
            MemoryLimiter::new(meter.clone(), image.memory_budget.clone()),
            ledger,
            door.clone(),
        )?;
        let task_image = image.clone();
        let task_link = link.clone();
        let (control, asked) = mpsc::channel(1);
        let interrupt = Interrupt::new(link.cpu().clone());
        let guest = run_guest(
            task_image,
            task_link,
            state,
            memory,
            asked,
            interrupt.clone(),
        );
        let task = GuestThread::spawn(
            &image.executor,
            Metered::new(guest, link.cpu().clone()),
            interrupt,
        )
        .map_err(StartError::Thread)?;
        let mut interpreter = Self {
            link,
            task: Some(task),
            meter,
            control,
            door,
        };

        let token = interpreter.link.token_text().to_owned();
        let want_program = !image.turns && program.is_none() && dir_state == DirState::Fresh;
        let hello = Request::Hello {
            token: &token,
            site_packages: &image.manifest.site_packages,
            want_program,
        };
        let limits = CallLimits {
            fuel: image.fuel_metered.then_some(IDLE_FUEL),
            cpu: limits.cpu.map(|cpu| cpu.max(MIN_START_CPU)),
            timeout: start_timeout,
            // The ready reply carries the driver's compiled code.
            reply_bytes: 4 << 20,
        };
        let (outcome, _, stderr) = interpreter
            .call_after(
                program.map_or(&[][..], Vec::as_slice),
                &hello,
                limits,
                &CancellationToken::new(),
                OutputCapture::discard(),
                OutputCapture::memory(16 << 10),
            )
            .await;
        match outcome {
            Outcome::Reply { body, .. } => {
                if want_program
                    && let Ok(Reply {
                        program: Some(code),
                        ..
                    }) = decode_reply(&body)
                {
                    // A concurrent first start may have set it already: same code.
                    let _ = image.driver_program.set(code);
                }
                Ok(interpreter)
            }
            Outcome::Exited(exit) => Err(StartError::Exited {
                exit,
                stderr: stderr_note(stderr),
            }),
            Outcome::TimedOut => Err(StartError::TimedOut(start_timeout.as_secs())),
            Outcome::Cancelled | Outcome::CancelledUnstarted => Err(StartError::Cancelled),
        }
    }

    /// Sends one request and waits for the reply, the interpreter's end, the
    /// timeout or the cancellation, whichever comes first. Program output goes
    /// to the captures, which are handed back.
    pub(crate) async fn call(
        &mut self,
        request: &Request<'_>,
        limits: CallLimits,
        cancel: &CancellationToken,
        stdout: OutputCapture,
        stderr: OutputCapture,
    ) -> (Outcome, OutputCapture, OutputCapture) {
        self.call_after(&[], request, limits, cancel, stdout, stderr)
            .await
    }

    /// Like [`Interpreter::call`], with raw bytes on stdin before the request.
    async fn call_after(
        &mut self,
        preamble: &[u8],
        request: &Request<'_>,
        limits: CallLimits,
        cancel: &CancellationToken,
        stdout: OutputCapture,
        stderr: OutputCapture,
    ) -> (Outcome, OutputCapture, OutputCapture) {
        let Some(task) = self.task.as_mut() else {
            return (Outcome::Exited(GuestExit::Gone), stdout, stderr);
        };
        self.meter.clear_refusal();
        let body = request.encode();
        let CallLimits {
            fuel,
            cpu,
            timeout,
            reply_bytes,
        } = limits;
        let budget = fuel.unwrap_or(0);
        // What the guest's thread still does for the last call (tidying a
        // kept memory) is not this call's time; a cancel meanwhile ends the
        // call before it starts, and stops nothing.
        let cancelled = tokio::select! {
            biased;
            () = cancel.cancelled() => true,
            () = self.link.settling().settled() => false,
        };
        if cancelled {
            return (Outcome::CancelledUnstarted, stdout, stderr);
        }
        let reply = self
            .link
            .send(preamble, &body, budget, cpu, reply_bytes, stdout, stderr);
        let outcome = tokio::select! {
            biased;
            reply = reply => match reply {
                Ok(reply) => Outcome::Reply {
                    body: reply.body,
                    fuel_used: fuel.map(|f| f.saturating_sub(reply.fuel_left)),
                    cpu_used: reply.cpu_used,
                },
                Err(_) => Outcome::Exited(GuestExit::Gone),
            },
            exit = task => {
                self.task = None;
                Outcome::Exited(exit.unwrap_or_else(|e| GuestExit::Failed(e.to_string())))
            }
            _ = tokio::time::sleep(timeout) => {
                self.kill();
                Outcome::TimedOut
            }
            _ = cancel.cancelled() => {
                self.kill();
                Outcome::Cancelled
            }
        };
        let (stdout, stderr) = self.link.take_output();
        (outcome, stdout, stderr)
    }

    /// Notes that the execution numbered `executions` starts (a durable
    /// interpreter records it, so a server stopped during it says so).
    pub(crate) async fn note_started(&self, executions: u64) {
        if self.task.is_some() {
            let _ = self.control.send(Control::Started(executions)).await;
        }
    }

    /// Keeps the state the last call left (a durable interpreter writes its
    /// pages and a journal record; others do nothing); what to tell the
    /// client, if anything.
    pub(crate) async fn keep_state(&self, executions: u64) -> Result<Option<String>, StateError> {
        self.ask(|answer| Control::Keep(executions, answer)).await
    }

    /// A fork of the interpreter's memory, taken between two calls, with
    /// its pages in a store in `dir` (only a turn-driven runtime started
    /// with a page store has one to give).
    pub(crate) async fn fork_memory(&self, dir: PathBuf) -> Result<ForkedMemory, StateError> {
        self.ask(|answer| Control::Fork(dir, answer)).await
    }

    /// Asks the interpreter's task for something between two turns.
    async fn ask<T>(
        &self,
        control: impl FnOnce(oneshot::Sender<Result<T, StateError>>) -> Control,
    ) -> Result<T, StateError> {
        if self.task.is_none() {
            return Err(StateError::Stopped);
        }
        let (answer, answered) = oneshot::channel();
        self.control
            .send(control(answer))
            .await
            .map_err(|_| StateError::Stopped)?;
        answered.await.map_err(|_| StateError::NotCopyable)?
    }

    /// The guest's door to the host: armed by the sandbox around an
    /// execution, unarmed otherwise (the guest is then told no host is bound).
    pub(crate) fn door(&self) -> &DoorSlot {
        &self.door
    }

    /// Whether the interpreter still runs.
    pub(crate) fn is_alive(&self) -> bool {
        self.task.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// CPU time the call in progress (or the last one) has burned.
    pub(crate) fn cpu_used(&self) -> Duration {
        self.link.cpu().call_used()
    }

    /// Its linear memory, in bytes.
    pub(crate) fn memory_bytes(&self) -> u64 {
        self.meter.bytes()
    }

    /// Changes the memory limit (for an interpreter started ahead of time).
    pub(crate) fn set_memory_limit(&self, bytes: u64) {
        self.meter.set_limit(bytes);
    }

    /// Which limit refused a memory growth during the last call, if one did.
    pub(crate) fn memory_refused(&self) -> Option<MemoryRefusal> {
        self.meter.refusal()
    }

    /// Stops the interpreter and waits until its store is gone (with the
    /// memory it kept, and what that memory was charged).
    pub(crate) async fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
            note_closed();
        }
    }

    /// Stops the interpreter. Its store is dropped on its thread as soon as
    /// the guest's code stops (see [`GuestThread::abort`]).
    pub(crate) fn kill(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            note_closed();
        }
    }
}

impl Drop for Interpreter {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A fresh secret for marking replies: lowercase hex digits.
fn random_token() -> [u8; TOKEN_LEN] {
    let alphabet = b"0123456789abcdef";
    let mut rng = rand::rng();
    std::array::from_fn(|_| alphabet[rng.random_range(0..16)])
}

fn stderr_note(stderr: OutputCapture) -> String {
    let text = stderr.finish().text;
    let text = text.trim();
    if text.is_empty() {
        String::new()
    } else {
        format!(": {text}")
    }
}

/// Instantiates the module and runs it until the interpreter ends: `_start`
/// for a command; `_initialize`, then `run`, for a reactor.
async fn run_guest(
    image: Arc<GuestImage>,
    link: Arc<GuestLink>,
    state: GuestState,
    memory: StartingMemory,
    control: mpsc::Receiver<Control>,
    interrupt: Arc<Interrupt>,
) -> GuestExit {
    let mut store = Store::new(&image.engine, state);
    store.limiter(|s| s.limiter());
    let metered = image.fuel_metered;
    if metered && let Err(e) = store.set_fuel(IDLE_FUEL) {
        return GuestExit::Failed(e.to_string());
    }
    #[cfg(not(guest_stop_by_fault))]
    check_epochs(&mut store, interrupt.clone());
    let (hook_link, hook_interrupt) = (link.clone(), interrupt.clone());
    store.call_hook(move |mut ctx, hook| {
        match hook {
            CallHook::ReturningFromHost => {
                hook_interrupt.begin_call();
                hook_interrupt.on_host_return()?;
                if let Some(fuel) = hook_link.take_pending_fuel()
                    && metered
                {
                    ctx.set_fuel(fuel)?;
                }
            }
            CallHook::CallingHost if metered => {
                hook_link.record_fuel_left(ctx.get_fuel()?);
            }
            _ => {}
        }
        Ok(())
    });

    let started = std::time::Instant::now();
    let ended = |result: wasmtime::Result<()>| classify(result.map_err(|e| interrupt.explain(e)));
    let instance = match image.pre.instantiate_async(&mut store).await {
        Ok(instance) => instance,
        Err(e) => return ended(Err(e)),
    };
    tracing::debug!(
        micros = started.elapsed().as_micros(),
        "instantiated a guest"
    );
    #[cfg(guest_stop_by_fault)]
    if let Err(e) = watch_memory(&mut store, &instance, &interrupt) {
        return GuestExit::Failed(e.to_string());
    }
    if image.turns {
        let kept = match starting_memory::place(&mut store, &instance, &image, memory) {
            Ok(kept) => kept,
            Err(e) => return GuestExit::Failed(e.to_string()),
        };
        return turns::serve(store, instance, link, metered, control, kept, &interrupt).await;
    }
    drop(control);
    match image.manifest.entry {
        Entry::Command => {
            let start = match instance.get_typed_func::<(), ()>(&mut store, "_start") {
                Ok(f) => f,
                Err(e) => return GuestExit::Failed(format!("the runtime has no _start: {e}")),
            };
            ended(start.call_async(&mut store, ()).await)
        }
        Entry::Reactor => {
            if let Ok(initialize) = instance.get_typed_func::<(), ()>(&mut store, "_initialize")
                && let Err(e) = initialize.call_async(&mut store, ()).await
            {
                return ended(Err(e));
            }
            let run = match instance.get_typed_func::<(), i32>(&mut store, "run") {
                Ok(f) => f,
                Err(e) => return GuestExit::Failed(format!("the runtime has no run(): {e}")),
            };
            match run.call_async(&mut store, ()).await {
                Ok(code) => GuestExit::Exited(code),
                Err(e) => ended(Err(e)),
            }
        }
    }
}

/// Lets `interrupt` stop the guest by blocking its memory (see
/// [`super::fault_handler`]): notes where its compiled code lies, so a fault
/// there is its own, and which memory is its.
#[cfg(guest_stop_by_fault)]
fn watch_memory(
    store: &mut Store<GuestState>,
    instance: &wasmtime::Instance,
    interrupt: &Interrupt,
) -> Result<(), StateError> {
    super::fault_handler::note_guest_code(instance.module(&*store).text().as_ptr_range());
    let region = super::kept_memory::region_of(store, instance)?;
    interrupt.attach(region);
    Ok(())
}

/// Makes the guest yield at every epoch tick, where the interrupt says
/// whether to stop it (where compiled code checks epochs).
#[cfg(not(guest_stop_by_fault))]
fn check_epochs(store: &mut Store<GuestState>, interrupt: Arc<Interrupt>) {
    store.epoch_deadline_callback(move |_| {
        interrupt.due().map(|()| wasmtime::UpdateDeadline::Yield(1))
    });
    store.set_epoch_deadline(1);
}
