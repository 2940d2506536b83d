//! [`Sandbox`]: one live sandbox as the manager holds it: who owns it, its
//! limits and use, and its interpreter, which runs one call at a time (a
//! call waits for its turn; closing the sandbox stops the call in progress).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use super::status::{LimitsView, SandboxStatus};
use crate::sandbox::error::SandboxError;
use crate::sandbox::guest_path::GuestPath;
use crate::sandbox::stop::{StopReason, StopSignal};
use crate::sandbox::types::{
    ExecRequest, Execution, FileContent, InstallReport, KeptAcrossRestarts, Listing, OutputTap,
    ResourceUsage, SandboxLimits,
};
use crate::sandbox::{BackendKind, CodeInterpreter, Owner};

/// One live sandbox.
pub struct Sandbox {
    /// The id its owner knows it by.
    pub(super) id: String,
    /// Who created it.
    pub(super) owner: Owner,
    /// Where it is kept: in the manager, on disk, in the saved store.
    pub(super) key: String,
    pub(super) backend: BackendKind,
    pub(super) runtime: String,
    pub(super) kept_across_restarts: KeptAcrossRestarts,
    pub(super) limits: SandboxLimits,
    pub(super) created: SystemTime,
    pub(super) last_used: Mutex<SystemTime>,
    pub(super) executions: AtomicU64,
    /// Cancelled when the sandbox is closed, to stop a running execution.
    pub(super) closing: CancellationToken,
    /// `None` once closed.
    pub(super) interpreter: tokio::sync::Mutex<Option<Box<dyn CodeInterpreter>>>,
}

impl Sandbox {
    /// `owner`'s sandbox `id` made now of `interpreter`.
    pub(super) fn new(
        owner: &Owner,
        id: &str,
        backend: BackendKind,
        interpreter: Box<dyn CodeInterpreter>,
        limits: SandboxLimits,
    ) -> Arc<Self> {
        let now = SystemTime::now();
        Arc::new(Self {
            id: id.to_owned(),
            owner: owner.clone(),
            key: owner.key(id),
            backend,
            runtime: interpreter.runtime(),
            kept_across_restarts: interpreter.kept_across_restarts(),
            limits,
            created: now,
            last_used: Mutex::new(now),
            executions: AtomicU64::new(0),
            closing: CancellationToken::new(),
            interpreter: tokio::sync::Mutex::new(Some(interpreter)),
        })
    }

    /// The id its owner knows it by.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Who created it.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    /// Its backend.
    pub fn backend(&self) -> BackendKind {
        self.backend
    }

    /// The runtime it runs.
    pub fn runtime(&self) -> &str {
        &self.runtime
    }

    /// Its limits.
    pub fn limits(&self) -> &SandboxLimits {
        &self.limits
    }

    pub(super) fn is_busy(&self) -> bool {
        self.interpreter.try_lock().is_err()
    }

    pub(super) fn idle_deadline(&self, idle: Duration) -> SystemTime {
        *lock(&self.last_used) + idle
    }

    pub(super) fn touch(&self) {
        *lock(&self.last_used) = SystemTime::now();
    }

    /// Waits for this sandbox's turn and holds it until the guard is dropped.
    async fn turn(&self) -> Result<Turn<'_>, SandboxError> {
        let guard = self.interpreter.lock().await;
        if guard.is_none() {
            return Err(SandboxError::UnknownSandbox(self.id.clone()));
        }
        self.touch();
        Ok(Turn {
            sandbox: self,
            guard,
        })
    }

    /// Runs code. `cancel` (a client's cancellation) stops it as a timeout
    /// would; `output`, when given, sees the output while it is produced.
    pub async fn execute(
        &self,
        code: String,
        timeout: Option<Duration>,
        cancel: CancellationToken,
        output: Option<OutputTap>,
    ) -> Result<Execution, SandboxError> {
        let limits = self.limits.for_execution(timeout)?;
        let mut turn = self.turn().await?;
        let stop = self.stop_on_cancel_or_close(cancel);
        let started = crate::sandbox::changed_files::file_clock_now();
        let writes_before = turn.interpreter().files().write_count();
        let mut result = turn
            .interpreter()
            .execute(
                ExecRequest {
                    code,
                    limits,
                    output,
                },
                stop.signal(),
            )
            .await;
        self.executions.fetch_add(1, Ordering::Relaxed);
        let files = turn.interpreter().files();
        let wrote = writes_before.is_none() || files.write_count() != writes_before;
        if let Ok(execution) = &mut result
            && wrote
        {
            (execution.files, execution.files_not_listed) = files.changed_since(started).await;
        }
        result
    }

    /// Installs packages into the running interpreter. `cancel` (a client's
    /// cancellation) or closing the sandbox stops the install.
    pub async fn install(
        &self,
        requirements: Vec<String>,
        progress: &(dyn Fn(String) + Send + Sync),
        cancel: CancellationToken,
    ) -> Result<InstallReport, SandboxError> {
        let mut turn = self.turn().await?;
        let stop = self.stop_on_cancel_or_close(cancel);
        turn.interpreter()
            .install(&requirements, progress, stop.signal())
            .await
    }

    /// A signal that fires when the client cancels or the sandbox closes.
    fn stop_on_cancel_or_close(&self, cancel: CancellationToken) -> StopGuard {
        let signal = StopSignal::new();
        let watcher = {
            let signal = signal.clone();
            let closing = self.closing.clone();
            tokio::spawn(async move {
                tokio::select! {
                    _ = cancel.cancelled() => signal.stop(StopReason::Cancelled),
                    _ = closing.cancelled() => signal.stop(StopReason::Closing),
                }
            })
        };
        StopGuard { signal, watcher }
    }

    /// Lists a directory.
    pub async fn list(&self, path: GuestPath, max_entries: usize) -> Result<Listing, SandboxError> {
        let mut turn = self.turn().await?;
        turn.interpreter().files().list(&path, max_entries).await
    }

    /// Reads at most `max_bytes` of a file, from byte `offset`.
    pub async fn read(
        &self,
        path: GuestPath,
        offset: u64,
        max_bytes: u64,
    ) -> Result<FileContent, SandboxError> {
        let mut turn = self.turn().await?;
        turn.interpreter()
            .files()
            .read(&path, offset, max_bytes)
            .await
    }

    /// Writes a file.
    pub async fn write(&self, path: GuestPath, data: Vec<u8>) -> Result<u64, SandboxError> {
        let mut turn = self.turn().await?;
        turn.interpreter().files().write(&path, data).await
    }

    /// Its status now; `measure` adds memory and disk use (a directory walk).
    pub async fn status(&self, idle_timeout: Option<Duration>, measure: bool) -> SandboxStatus {
        let (busy, usage) = match self.interpreter.try_lock() {
            Ok(guard) => match guard.as_ref() {
                Some(i) if measure => (false, i.usage().await),
                _ => (false, ResourceUsage::default()),
            },
            Err(_) => (true, ResourceUsage::default()),
        };
        let last_used = *lock(&self.last_used);
        SandboxStatus {
            session_id: self.id.clone(),
            backend: self.backend,
            runtime: self.runtime.clone(),
            kept_across_restarts: self.kept_across_restarts,
            created_at: humantime::format_rfc3339_seconds(self.created).to_string(),
            last_used_at: humantime::format_rfc3339_seconds(last_used).to_string(),
            expires_at: idle_timeout
                .map(|idle| humantime::format_rfc3339_seconds(last_used + idle).to_string()),
            executions: self.executions.load(Ordering::Relaxed),
            busy,
            usage,
            limits: LimitsView::new(&self.limits, self.backend),
        }
    }

    /// Stops whatever runs in it and releases it.
    /// Saves the sandbox for the next start when its backend keeps saved
    /// sandboxes (a call in progress is stopped first).
    pub(super) async fn save(&self) {
        self.closing.cancel();
        let mut guard = self.interpreter.lock().await;
        if let Some(interpreter) = guard.as_mut() {
            match interpreter.save(&self.key).await {
                Ok(true) => tracing::info!(id = %self.id, "saved the sandbox for the next start"),
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(id = %self.id, error = %e, "could not save the sandbox; it is closed")
                }
            }
        }
    }

    pub(super) async fn shut(&self) {
        self.closing.cancel();
        let mut guard = self.interpreter.lock().await;
        if let Some(mut interpreter) = guard.take() {
            interpreter.close().await;
        }
    }
}

/// A call's stop signal and the task that fires it on a client's
/// cancellation or the sandbox closing; dropping it ends the task.
struct StopGuard {
    signal: StopSignal,
    watcher: tokio::task::JoinHandle<()>,
}

impl StopGuard {
    fn signal(&self) -> StopSignal {
        self.signal.clone()
    }
}

impl Drop for StopGuard {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

/// Exclusive use of a sandbox's interpreter; marks the sandbox used when dropped.
struct Turn<'a> {
    sandbox: &'a Sandbox,
    guard: tokio::sync::MutexGuard<'a, Option<Box<dyn CodeInterpreter>>>,
}

impl Turn<'_> {
    fn interpreter(&mut self) -> &mut dyn CodeInterpreter {
        self.guard
            .as_deref_mut()
            .expect("a turn is only handed out for an open sandbox")
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.sandbox.touch();
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
