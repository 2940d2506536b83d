//! Keeping a local sandbox across restarts: its sealed record beside its
//! directory, its interpreter's state made durable after each execution
//! (see [`crate::wasm::kept_memory`]), saving it into the store when the
//! server stops or it idles, and bringing a saved one back.

use std::sync::Arc;

use super::WasmSandbox;
use crate::sandbox::remove_tree::remove_tree;
use crate::sandbox::root::{SandboxRoot, memory_dir_of};
use crate::sandbox::{SandboxError, SandboxLimits};
use crate::wasm::error::WasmError;
use crate::wasm::files_on_loan::FilesOnLoan;
use crate::wasm::guest_image::GuestImage;
use crate::wasm::interpreter::{DirState, Interpreter, START_TIMEOUT};
use crate::wasm::journal::Replay;
use crate::wasm::saved::{Restorable, SavedMeta, SavedStore, retire_entry, unix_now};
use crate::wasm::starting_memory::{PagesPlan, StartingMemory};

/// What keeps a sandbox across restarts: the store, and its id there.
#[derive(Clone)]
pub(crate) struct Keeping {
    /// The saved store of the sandbox root.
    pub saver: Arc<SavedStore>,
    /// The sandbox's id (its owner's key).
    pub id: String,
}

impl WasmSandbox {
    /// Where the interpreter keeps its pages, and whether durably.
    pub(crate) fn pages_plan(&self) -> PagesPlan {
        PagesPlan {
            dir: memory_dir_of(&self.host_dir),
            durable: self
                .keeping
                .as_ref()
                .filter(|_| self.image.turns)
                .map(|k| k.saver.disk_budget()),
        }
    }

    /// The sandbox's record, as of now.
    fn record(&self, keeping: &Keeping) -> SavedMeta {
        SavedMeta {
            session_id: keeping.id.clone(),
            runtime: self.image.manifest.name.clone(),
            image_key: self.image.state_key.clone(),
            image_id: self.image.image_id().to_owned(),
            server_version: env!("CARGO_PKG_VERSION").to_owned(),
            saved_at: unix_now(),
            memory_bytes: self.limits.memory_bytes,
            timeout_ms: self.limits.timeout.as_millis() as u64,
            executions: self.executions,
            allow_hosts: self.door.as_ref().and_then(|d| d.asked.clone()),
        }
    }

    /// Writes the sandbox's sealed record beside its directory, when it is
    /// kept across restarts (once it is set up: after its door is given).
    pub(crate) fn finish(self) -> Self {
        if let Some(keeping) = &self.keeping
            && let Err(e) = keeping
                .saver
                .write_record(&memory_dir_of(&self.host_dir), &self.record(keeping))
        {
            tracing::warn!(error = %e, "could not write the sandbox's record: it will not come back if the server dies");
        }
        self
    }

    /// Notes that an execution starts, in the journal of a durable sandbox.
    pub(crate) async fn note_started(&self) {
        if self.keeping.is_some()
            && let Some(interpreter) = &self.interpreter
        {
            interpreter.note_started(self.executions).await;
        }
    }

    /// Makes the state the last call left durable (a sandbox kept across
    /// restarts, whose interpreter still runs); what to tell the client, if
    /// anything.
    pub(crate) async fn keep_state(&self) -> Option<String> {
        // An interpreter that never returns to the host between executions
        // (python-3.12) has no state to keep: its variables are not durable.
        self.keeping.as_ref().filter(|_| self.image.turns)?;
        let interpreter = self.interpreter.as_ref().filter(|i| i.is_alive())?;
        match interpreter.keep_state(self.executions).await {
            Ok(notice) => notice,
            Err(e) => {
                tracing::warn!(error = %e, "could not keep the sandbox's state: if the server dies now, it comes back as of an earlier execution");
                None
            }
        }
    }

    /// Saves the sandbox into the store: its interpreter stops (its state is
    /// what its journal holds), and its files and memory move into the
    /// entry. Whether it was saved.
    pub(crate) async fn save_into_store(&mut self) -> Result<bool, SandboxError> {
        let Some(keeping) = self.keeping.clone() else {
            return Ok(false);
        };
        if self.closed {
            return Ok(false);
        }
        // Its pages stop counting as a live sandbox's before they count as
        // a saved one's.
        if let Some(mut interpreter) = self.interpreter.take() {
            interpreter.stop().await;
        }
        if let Some(task) = self.restarting.take() {
            task.abort();
        }
        let meta = self.record(&keeping);
        let files = self.host_dir.clone();
        let memory = memory_dir_of(&files);
        let store = keeping.saver;
        let saved = tokio::task::spawn_blocking(move || store.save(meta, &files, &memory))
            .await
            .map_err(|source| WasmError::Task {
                what: "saving",
                source,
            })?;
        saved.map_err(WasmError::Save)?;
        // The directory now belongs to the saved sandbox.
        self.closed = true;
        Ok(true)
    }

    /// A sandbox brought back from `restorable` (its files moved into a new
    /// directory under `root`, its pages mapped from the entry's segments);
    /// on failure, or when the restore is dropped unfinished, the files go
    /// back where they were and the entry stays as it was.
    pub(crate) async fn restore(
        image: Arc<GuestImage>,
        root: Arc<SandboxRoot>,
        restorable: Restorable,
        limits: SandboxLimits,
        keeping: Keeping,
    ) -> Result<Self, SandboxError> {
        let loan = FilesOnLoan::lend(&root, &restorable.entry, &restorable.files)?;
        let host_dir = loan.dir().to_owned();
        let ledger = root.open_ledger(&host_dir, &limits)?;
        super::check_restored_size(&ledger, &limits)?;
        let mut sandbox = Self::open(image, root, host_dir, ledger, limits, Some(keeping));
        // Until the restore completes the files are on loan: dropping the
        // sandbox (a failure, a stop abandoning the restore) must leave them
        // for the loan to give back, and take only the new memory directory.
        sandbox.closed = true;
        let memory_dir = RemovedUnlessKept(Some(memory_dir_of(&sandbox.host_dir)));
        sandbox.executions = restorable.meta.executions;
        let Restorable {
            memory,
            entry,
            meta,
            ..
        } = restorable;
        let plan = sandbox.pages_plan();
        sandbox.lost_state = restore_note(&memory, meta.executions, &sandbox);
        let usable = memory.memory.filter(|_| memory.lapsed.is_none());
        let interpreter = match usable {
            Some(replayed) if sandbox.image.turns => {
                let budget = &sandbox.image.memory_budget;
                let needed = replayed.state.memory_bytes;
                if budget.free() < needed {
                    return Err(SandboxError::InvalidArgument(format!(
                        "cannot restore this sandbox now: its memory needs {} MiB of the server's memory budget (SANDBOX_MEMORY_BUDGET_MB), which has {} MiB free; close sandboxes and try again (it stays saved)",
                        needed.div_ceil(1 << 20),
                        budget.free() >> 20
                    )));
                }
                sandbox.executions = replayed.state.executions.max(meta.executions);
                let starting = StartingMemory::Restored {
                    from: entry.clone(),
                    replayed: Box::new(replayed),
                    plan,
                };
                sandbox.start_from(starting).await?
            }
            _ => sandbox.start_fresh(plan).await?,
        };
        sandbox.interpreter = Some(interpreter);
        sandbox.keep_state().await;
        let mut sandbox = sandbox.finish();
        sandbox.closed = false;
        memory_dir.keep();
        // The files are the running sandbox's from here; a server killed now
        // leaves two records of it, and the live one supersedes the entry.
        loan.keep();
        let retired = retire_entry(&entry);
        // From here nothing may be cancelled (a stop would drop the sandbox,
        // its files with it): the old entry goes in a task of its own, not
        // awaited (the restored pages are linked, not moved).
        drop(tokio::task::spawn_blocking(move || remove_tree(&retired)));
        Ok(sandbox)
    }

    /// Starts an interpreter on this sandbox's directory from `starting`.
    async fn start_from(&self, starting: StartingMemory) -> Result<Interpreter, SandboxError> {
        Interpreter::start_from(
            &self.image,
            &self.host_dir,
            self.ledger.clone(),
            &self.limits,
            START_TIMEOUT,
            starting,
        )
        .await
        .map_err(|e| WasmError::Start(e).into())
    }

    /// Starts a fresh interpreter on this sandbox's (used) directory.
    pub(crate) async fn start_fresh(&self, plan: PagesPlan) -> Result<Interpreter, SandboxError> {
        Interpreter::start(
            &self.image,
            &self.host_dir,
            DirState::Used,
            self.ledger.clone(),
            &self.limits,
            START_TIMEOUT,
            Some(plan),
        )
        .await
        .map_err(|e| WasmError::Start(e).into())
    }
}

/// A directory removed when this is dropped, unless kept.
struct RemovedUnlessKept(Option<std::path::PathBuf>);

impl RemovedUnlessKept {
    fn keep(mut self) {
        self.0 = None;
    }
}

impl Drop for RemovedUnlessKept {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take() {
            let _ = remove_tree(&dir);
        }
    }
}

/// What the first call after a restore is told about the memory that came
/// back (of a sandbox that had run `executions` when its record was
/// written), if anything was lost.
fn restore_note(replay: &Replay, executions: u64, sandbox: &WasmSandbox) -> Option<String> {
    let Some(memory) = replay.memory.as_ref().filter(|_| sandbox.image.turns) else {
        return files_only_note(sandbox, executions, replay.damage.as_deref());
    };
    let executions = memory.state.executions;
    if let Some(lapsed) = replay.lapsed {
        return Some(format!(
            "the sandbox was restored after the server restarted with its files only: its memory was not kept from execution {lapsed} on (its pages would have taken the server past SANDBOX_SAVED_MAX_MB), so variables, imports and definitions are lost"
        ));
    }
    match (&replay.damage, replay.unfinished) {
        (Some(damage), _) => Some(format!(
            "part of the sandbox's saved state could not be used ({damage}): it was restored as of execution {executions}, and what later executions did to its variables is lost (its files are as they were)"
        )),
        (None, true) => Some(format!(
            "the last execution did not finish before the server stopped: its variables were restored as of the execution before it (execution {executions}), and its files are as they were when the server stopped"
        )),
        (None, false) => None,
    }
}

/// What the first call after a restore without memory is told, if the
/// sandbox had variables to lose.
fn files_only_note(sandbox: &WasmSandbox, executions: u64, damage: Option<&str>) -> Option<String> {
    let why = match damage {
        _ if !sandbox.image.turns => format!(
            "the interpreter of the runtime '{}' never returns to the server between executions, so its variables cannot be kept",
            sandbox.image.manifest.name
        ),
        Some(why) => format!("its interpreter's saved state cannot be used ({why})"),
        None if executions == 0 => return None,
        None => "its interpreter's state was not kept (the server stopped before its first execution finished)".to_owned(),
    };
    Some(format!(
        "the sandbox was restored after the server restarted with its files only: {why}, so variables, imports and definitions are lost"
    ))
}
