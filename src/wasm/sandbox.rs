//! [`WasmSandbox`]: a local sandbox: a directory and the interpreter that runs
//! in it, restarted in the same directory when a limit stops it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::capture::{OutputCapture, SpillTarget};
use super::compiler::GuestCompiler;
use super::error::WasmError;
use super::guest_image::GuestImage;
use super::import_check::{CheckedSandbox, check_imports};
use super::interpreter::{
    CallLimits, DirState, Interpreter, MIN_START_CPU, Outcome, START_TIMEOUT,
};
use super::kept_memory::ForkedMemory;
use super::outcome::{self, Facts, FinishedCall, Loss, STATE_LOST, reply_bytes};
use super::protocol::{Request, decode_reply};
use super::start_error::StartError;
use super::starting_memory::StartingMemory;
use crate::door::DoorHandler;
use crate::door::install::InstallTool;
use crate::door::session::DoorCaps;
use crate::door::toolbox::Toolbox;
use crate::packages::{InstallTarget, Installer, PackageError};
use crate::sandbox::copy_tree::{CopyError, copy_tree};
use crate::sandbox::local_files::LocalFiles;
use crate::sandbox::quota::QuotaLedger;
use crate::sandbox::root::{SandboxRoot, memory_dir_of};
use crate::sandbox::server_files::OUTPUT_DIR;

use crate::sandbox::{
    CodeInterpreter, ExecRequest, Execution, FileInterface, Forked, GuestPath, ImportFailure,
    InstallReport, KeptAcrossRestarts, OutputStream, ResourceUsage, SandboxError, SandboxLimits,
    StopSignal,
};

mod keeping;

pub(crate) use keeping::Keeping;

/// How long the interpreter may take to pick up newly installed packages.
const REFRESH_TIMEOUT: Duration = Duration::from_secs(30);

/// A sandbox of the local WASI backend.
pub(crate) struct WasmSandbox {
    image: Arc<GuestImage>,
    root: Arc<SandboxRoot>,
    host_dir: PathBuf,
    files: LocalFiles,
    ledger: Arc<QuotaLedger>,
    limits: SandboxLimits,
    interpreter: Option<Interpreter>,
    /// A replacement interpreter starting in the background.
    restarting: Option<JoinHandle<Result<Interpreter, StartError>>>,
    /// Why the previous interpreter stopped, until the next execution reports it.
    lost_state: Option<String>,
    /// Whether the first interpreter came from the warm pool.
    from_warm_pool: bool,
    executions: u64,
    closed: bool,
    /// Installs packages (none: not configured).
    installer: Option<Arc<Installer>>,
    /// Keeps the sandbox across restarts (none: saving is off).
    keeping: Option<Keeping>,
    /// What the guest's door to the host answers (none: the runtime has no
    /// door, and the guest is told no host is bound).
    door: Option<Arc<SandboxDoor>>,
}

/// A sandbox's door to the host: its handler, caps, and the narrowing of the
/// server's allowed hosts it was created with (kept when it is saved).
pub(crate) struct SandboxDoor {
    /// What answers the guest's calls.
    pub handler: Arc<dyn DoorHandler>,
    /// Per-execution caps.
    pub caps: DoorCaps,
    /// The `allow_hosts` asked for at create (none: the server's list).
    pub asked: Option<Vec<String>>,
}

impl WasmSandbox {
    /// Starts a sandbox in a new directory under `root`.
    pub(crate) async fn start(
        image: Arc<GuestImage>,
        root: Arc<SandboxRoot>,
        limits: SandboxLimits,
        keeping: Option<Keeping>,
    ) -> Result<Self, SandboxError> {
        let host_dir = root.create_sandbox_dir()?;
        let ledger = match root.open_ledger(&host_dir, &limits) {
            Ok(ledger) => ledger,
            Err(e) => {
                root.remove_sandbox_dir(&host_dir);
                return Err(e);
            }
        };
        let mut sandbox = Self::open(image, root, host_dir, ledger, limits, keeping);
        let interpreter = Interpreter::start(
            &sandbox.image,
            &sandbox.host_dir,
            DirState::Fresh,
            sandbox.ledger.clone(),
            &sandbox.limits,
            START_TIMEOUT,
            Some(sandbox.pages_plan()),
        )
        .await
        .map_err(WasmError::Start)?;
        sandbox.interpreter = Some(interpreter);
        Ok(sandbox)
    }

    /// A sandbox made of an interpreter started ahead of time in `host_dir`.
    pub(crate) fn from_warm(
        image: Arc<GuestImage>,
        root: Arc<SandboxRoot>,
        host_dir: PathBuf,
        ledger: Arc<QuotaLedger>,
        interpreter: Interpreter,
        limits: SandboxLimits,
        keeping: Option<Keeping>,
    ) -> Self {
        interpreter.set_memory_limit(limits.memory_bytes);
        let mut sandbox = Self::open(image, root, host_dir, ledger, limits, keeping);
        sandbox.interpreter = Some(interpreter);
        sandbox.from_warm_pool = true;
        sandbox
    }

    fn open(
        image: Arc<GuestImage>,
        root: Arc<SandboxRoot>,
        host_dir: PathBuf,
        ledger: Arc<QuotaLedger>,
        limits: SandboxLimits,
        keeping: Option<Keeping>,
    ) -> Self {
        Self {
            files: LocalFiles::new(ledger.dir().clone(), ledger.clone()),
            image,
            root,
            host_dir,
            ledger,
            limits,
            interpreter: None,
            restarting: None,
            lost_state: None,
            from_warm_pool: false,
            executions: 0,
            closed: false,
            installer: None,
            keeping,
            door: None,
        }
    }

    /// Gives the sandbox its door to the host.
    pub(crate) fn with_door(mut self, door: Option<Arc<SandboxDoor>>) -> Self {
        self.door = door;
        self
    }

    /// Where packages installed into this sandbox go.
    fn install_target(&self) -> Result<InstallTarget, SandboxError> {
        Ok(InstallTarget {
            sandbox: self.ledger.dir().clone(),
            site_packages: GuestPath::parse(&self.image.manifest.site_packages)?,
            python_version: self.image.manifest.python_version.clone(),
            ledger: self.ledger.clone(),
            built_in: self.image.built_in.clone(),
            compiler: Some(Arc::new(GuestCompiler::new(
                self.image.clone(),
                self.root.clone(),
                self.limits.memory_bytes,
            ))),
        })
    }

    /// What answers the guest's door during an execution: the sandbox's
    /// tools, with the installer first (`%pip install` from the code).
    fn door_handler(&self, door: &SandboxDoor) -> Arc<dyn DoorHandler> {
        match self.install_target() {
            Ok(target) => Arc::new(Toolbox::new(vec![
                Arc::new(InstallTool::new(self.installer.clone(), target)),
                door.handler.clone(),
            ])),
            Err(_) => door.handler.clone(),
        }
    }

    /// Gives the sandbox a package installer.
    pub(crate) fn with_installer(mut self, installer: Option<Arc<Installer>>) -> Self {
        self.installer = installer;
        self
    }

    /// Has the running interpreter pick up newly installed packages (the
    /// driver's `refresh_packages`: `site.addsitedir` and
    /// `importlib.invalidate_caches`). Returns a note when that did not work.
    async fn refresh_packages(&mut self) -> Result<Option<String>, SandboxError> {
        let limits = CallLimits {
            fuel: self.limits.fuel,
            cpu: self.limits.cpu.map(|cpu| cpu.max(MIN_START_CPU)),
            timeout: REFRESH_TIMEOUT,
            reply_bytes: 64 << 10,
        };
        let interpreter = self.interpreter().await?;
        let (outcome, _, _) = interpreter
            .call(
                &Request::RefreshPackages,
                limits,
                &CancellationToken::new(),
                OutputCapture::memory(16 << 10),
                OutputCapture::memory(16 << 10),
            )
            .await;
        match outcome {
            Outcome::Reply { body, .. } => match decode_reply(&body) {
                Ok(reply) => Ok(reply.error.map(|e| format!(
                    "the packages are installed, but loading them into the running interpreter raised {}: {}; a .pth file of a package may be at fault",
                    e.name, e.value
                ))),
                Err(e) => Ok(Some(format!(
                    "the packages are installed, but the interpreter sent an unreadable reply when picking them up: {e}"
                ))),
            },
            _ => {
                self.lose_state();
                Ok(Some(format!(
                    "picking up the new packages stopped the interpreter: {STATE_LOST}"
                )))
            }
        }
    }

    /// The imports of `modules` that fail in this sandbox (see
    /// [`check_imports`]); an error says why they were not checked.
    async fn check_imports(
        &self,
        modules: &[String],
        stop: &StopSignal,
    ) -> Result<Vec<ImportFailure>, String> {
        let checked = CheckedSandbox {
            image: &self.image,
            dir: &self.host_dir,
            ledger: &self.ledger,
            limits: &self.limits,
            memory_in_use: self
                .interpreter
                .as_ref()
                .map_or(0, Interpreter::memory_bytes),
        };
        check_imports(checked, modules, stop.token()).await
    }

    /// Starts a replacement interpreter in the background.
    fn restart_in_background(&mut self) {
        let image = self.image.clone();
        let dir = self.host_dir.clone();
        let ledger = self.ledger.clone();
        let limits = self.limits.clone();
        let pages = Some(self.pages_plan());
        self.restarting = Some(tokio::spawn(async move {
            Interpreter::start(
                &image,
                &dir,
                DirState::Used,
                ledger,
                &limits,
                START_TIMEOUT,
                pages,
            )
            .await
        }));
    }

    /// The live interpreter, starting one if the last was stopped.
    async fn interpreter(&mut self) -> Result<&mut Interpreter, SandboxError> {
        if self.interpreter.as_ref().is_some_and(Interpreter::is_alive) {
            return Ok(self.interpreter.as_mut().expect("checked above"));
        }
        if self.interpreter.take().is_some() && self.lost_state.is_none() {
            self.lost_state = Some(format!("the interpreter had stopped: {STATE_LOST}"));
        }
        let started = match self.restarting.take() {
            Some(task) => Some(task.await.unwrap_or_else(|e| Err(StartError::Restart(e)))),
            None => None,
        };
        let interpreter = match started {
            Some(Ok(i)) if i.is_alive() => i,
            _ => self.start_fresh(self.pages_plan()).await?,
        };
        Ok(self.interpreter.insert(interpreter))
    }

    fn spill(&self, stream: &str) -> SpillTarget {
        SpillTarget {
            ledger: self.ledger.clone(),
            relative: format!("{OUTPUT_DIR}/exec-{}-{stream}.txt", self.executions),
            file_limit: self.limits.output_file_bytes,
        }
    }

    /// Copies this sandbox's files into `host_dir` and starts an interpreter
    /// there whose memory is `memory`: the fork, and how many entries were
    /// copied.
    async fn fill_fork(
        &self,
        host_dir: &Path,
        memory: ForkedMemory,
        new_id: &str,
    ) -> Result<(WasmSandbox, u64), SandboxError> {
        let ledger = self.root.open_ledger(host_dir, &self.limits)?;
        let (from, to, charged) = (self.ledger.clone(), ledger.clone(), ledger.clone());
        let report = tokio::task::spawn_blocking(move || copy_tree(from.dir(), to.dir(), &charged))
            .await
            .map_err(|source| WasmError::Task {
                what: "copying the files",
                source,
            })?
            .map_err(|e| match e {
                CopyError::NoRoom => SandboxError::QuotaExceeded(format!("cannot fork: {e}")),
                e => WasmError::ForkCopy(e).into(),
            })?;
        ledger.forget();
        let keeping = self.keeping.as_ref().map(|k| Keeping {
            saver: k.saver.clone(),
            id: new_id.to_owned(),
        });
        let mut fork = Self::open(
            self.image.clone(),
            self.root.clone(),
            host_dir.to_owned(),
            ledger,
            self.limits.clone(),
            keeping,
        )
        .with_installer(self.installer.clone())
        .with_door(self.door.clone());
        let interpreter = Interpreter::start_from(
            &self.image,
            host_dir,
            fork.ledger.clone(),
            &self.limits,
            START_TIMEOUT,
            StartingMemory::Forked(Box::new(memory), fork.pages_plan()),
        )
        .await
        .map_err(WasmError::ForkStart)?;
        fork.interpreter = Some(interpreter);
        fork.executions = self.executions;
        fork.keep_state().await;
        Ok((fork.finish(), report.copied))
    }

    /// Runs `request`'s code on the interpreter, with its output captured
    /// (and spilled to files past the inline limit).
    async fn call_driver(
        &mut self,
        request: &ExecRequest,
        stop: &StopSignal,
    ) -> Result<FinishedCall, SandboxError> {
        let limits = &request.limits;
        let stdout = OutputCapture::new(limits.output_bytes, Some(self.spill("stdout")))
            .tapped(request.output.clone(), OutputStream::Stdout);
        let stderr = OutputCapture::new(limits.output_bytes, Some(self.spill("stderr")))
            .tapped(request.output.clone(), OutputStream::Stderr);
        let cell = format!("<cell-{}>", self.executions);
        let figure_prefix = format!("/{OUTPUT_DIR}/exec-{}", self.executions);
        let message = Request::Exec {
            filename: &cell,
            code: &request.code,
            image_bytes: limits.image_bytes,
            max_images: limits.max_images,
            figure_prefix: &figure_prefix,
            text_limit: limits.output_bytes,
        };
        let call_limits = CallLimits {
            fuel: limits.fuel,
            cpu: limits.cpu,
            timeout: limits.timeout,
            reply_bytes: reply_bytes(limits),
        };
        let door = self
            .door
            .clone()
            .map(|door| (self.door_handler(&door), door.caps));
        let interpreter = self.interpreter().await?;
        if let Some((handler, caps)) = door {
            interpreter.door().arm(handler, caps, limits.timeout);
        }
        let started = Instant::now();
        let (outcome, stdout, stderr) = interpreter
            .call(&message, call_limits, stop.token(), stdout, stderr)
            .await;
        let cpu = match &outcome {
            Outcome::Reply { cpu_used, .. } => *cpu_used,
            Outcome::CancelledUnstarted => Duration::ZERO,
            _ => interpreter.cpu_used(),
        };
        Ok(FinishedCall {
            outcome,
            stdout,
            stderr,
            wall: started.elapsed(),
            cpu,
            memory_bytes: interpreter.memory_bytes(),
            memory_refused: interpreter.memory_refused(),
            door: interpreter.door().disarm(),
        })
    }

    /// Acts on a lost interpreter: a replacement starts (unless the sandbox
    /// is closing), and a loss the client did not see is told next time.
    fn after_loss(&mut self, loss: &Loss) {
        if loss.unseen {
            self.lost_state = Some(format!("{}: {STATE_LOST}", loss.why));
        }
        if loss.replace {
            self.lose_state();
        } else {
            self.interpreter = None;
        }
    }

    /// Marks the interpreter as stopped and starts its replacement; the
    /// caller reports [`STATE_LOST`].
    fn lose_state(&mut self) {
        self.interpreter = None;
        self.restart_in_background();
    }
}

#[async_trait]
impl CodeInterpreter for WasmSandbox {
    async fn execute(
        &mut self,
        request: ExecRequest,
        stop: StopSignal,
    ) -> Result<Execution, SandboxError> {
        self.executions += 1;
        self.interpreter().await?;
        // Taken once the interpreter is known to be alive, so a loss found
        // just now is reported by this call, not the next.
        let earlier_loss = self.lost_state.take();
        self.note_started().await;
        let call = self.call_driver(&request, &stop).await?;
        let facts = Facts {
            limits: &request.limits,
            memory_cap: self.limits.memory_bytes,
            memory_budget: &self.image.memory_budget,
            open_files: self.limits.open_files,
            stop_reason: stop.reason(),
            disk_refused: self
                .ledger
                .take_refused()
                .then(|| self.ledger.quota().describe()),
            earlier_loss,
        };
        let (mut execution, loss) = outcome::execution(call, &facts);
        if let Some(loss) = loss {
            self.after_loss(&loss);
        }
        // The pages it wrote are written before the answer goes (a server
        // killed right after answering keeps this execution); putting them
        // on disk happens in the background.
        execution.notice = self.keep_state().await;
        Ok(execution)
    }

    async fn install(
        &mut self,
        requirements: &[String],
        progress: &(dyn Fn(String) + Send + Sync),
        stop: StopSignal,
    ) -> Result<InstallReport, SandboxError> {
        let Some(installer) = self.installer.clone() else {
            return Err(PackageError::NotConfigured.into());
        };
        let target = self.install_target()?;
        let installed = installer
            .install(requirements, &target, progress, stop.token())
            .await;
        // The installer wrote behind the ledger's back (or cleaned up after itself).
        self.ledger.forget();
        let mut report = installed?;
        if !report.installed.is_empty()
            && let Some(note) = self.refresh_packages().await?
        {
            let output = report.output.get_or_insert_with(String::new);
            if !output.is_empty() {
                output.push('\n');
            }
            output.push_str(&note);
        }
        match self.check_imports(&report.modules, &stop).await {
            Ok(failures) => report.import_failures = failures,
            Err(why) => {
                let output = report.output.get_or_insert_with(String::new);
                if !output.is_empty() {
                    output.push('\n');
                }
                output.push_str(&format!("Their imports were not checked: {why}."));
            }
        }
        if let Some(notice) = self.keep_state().await {
            let output = report.output.get_or_insert_with(String::new);
            if !output.is_empty() {
                output.push('\n');
            }
            output.push_str(&format!("Note: {notice}."));
        }
        Ok(report)
    }

    fn files(&self) -> &dyn FileInterface {
        &self.files
    }

    async fn usage(&self) -> ResourceUsage {
        let ledger = self.ledger.clone();
        let measured = tokio::task::spawn_blocking(move || {
            let disk = ledger.reported_usage().map_err(|e| e.to_string());
            (disk, ledger.server_files().usage(ledger.dir()))
        })
        .await;
        let (disk, server_files) = match measured {
            Ok((disk, server_files)) => (disk, Some(server_files)),
            Err(e) => (Err(format!("measuring failed: {e}")), None),
        };
        let (disk, disk_error) = match disk {
            Ok(usage) => (Some(usage), None),
            Err(e) => (None, Some(e)),
        };
        ResourceUsage {
            memory_bytes: self.interpreter.as_ref().map(Interpreter::memory_bytes),
            disk_bytes: disk.map(|d| d.bytes),
            disk_files: disk.map(|d| d.files),
            disk_error,
            from_warm_pool: Some(self.from_warm_pool),
            server_files,
        }
    }

    fn runtime(&self) -> String {
        self.image.manifest.name.clone()
    }

    fn kept_across_restarts(&self) -> KeptAcrossRestarts {
        match (&self.keeping, self.image.turns) {
            (None, _) => KeptAcrossRestarts::Nothing,
            (Some(_), true) => KeptAcrossRestarts::FilesAndVariables,
            (Some(_), false) => KeptAcrossRestarts::FilesOnly,
        }
    }

    async fn save(&mut self, _id: &str) -> Result<bool, SandboxError> {
        self.save_into_store().await
    }

    async fn fork(&mut self, new_id: &str) -> Result<Forked, SandboxError> {
        if !self.image.turns {
            return Err(SandboxError::InvalidArgument(format!(
                "sandboxes of the runtime '{}' cannot be forked: its interpreter never returns to the server between executions, so its state cannot be copied; create the sandbox with runtime \"scientific\" to fork it",
                self.image.manifest.name
            )));
        }
        let Some(interpreter) = self.interpreter.as_ref().filter(|i| i.is_alive()) else {
            return Err(SandboxError::InvalidArgument(
                "the sandbox's interpreter has stopped, so there is no state to fork; run code in it first (a fresh interpreter starts), then fork".into(),
            ));
        };
        // The fork's memory comes out of the server's memory budget when its
        // instance grows to the source's size (every page it shares with
        // the source may become its own): refused before anything is done
        // when the budget cannot hold it.
        let size = interpreter.memory_bytes();
        let budget = &self.image.memory_budget;
        if budget.free() < size {
            return Err(SandboxError::InvalidArgument(format!(
                "cannot fork: the fork's memory needs {} MiB of the server's memory budget (SANDBOX_MEMORY_BUDGET_MB), which has {} MiB free; close sandboxes, or fork later",
                size.div_ceil(1 << 20),
                budget.free() >> 20
            )));
        }
        let host_dir = self.root.create_sandbox_dir()?;
        let memory = match interpreter.fork_memory(memory_dir_of(&host_dir)).await {
            Ok(memory) => memory,
            Err(e) => {
                self.root.remove_sandbox_dir(&host_dir);
                return Err(WasmError::Capture(e).into());
            }
        };
        let open_files_not_carried = memory.open_files;
        match self.fill_fork(&host_dir, memory, new_id).await {
            Ok((sandbox, files_copied)) => Ok(Forked {
                interpreter: Box::new(sandbox),
                open_files_not_carried,
                files_copied,
            }),
            Err(e) => {
                self.root.remove_sandbox_dir(&host_dir);
                Err(e)
            }
        }
    }

    async fn close(&mut self) {
        // Its memory goes back to the server's budget before the close answers (a
        // client that closes a sandbox to make room uses the room at once).
        if !self.closed
            && let Some(mut interpreter) = self.interpreter.take()
        {
            interpreter.stop().await;
        }
        // A replacement still starting is let finish, then stopped the same
        // way: dropped halfway, its guest would still be writing in the
        // directory removed next.
        if !self.closed
            && let Some(restarting) = self.restarting.take()
            && let Ok(Ok(mut interpreter)) = restarting.await
        {
            interpreter.stop().await;
        }
        if let Some(remove) = self.release() {
            let _ = tokio::task::spawn_blocking(remove).await;
        }
    }
}

impl WasmSandbox {
    /// Stops the interpreter; returns the removal of the sandbox's directory,
    /// to run off the async workers (a directory can hold many files), or
    /// `None` when already released.
    fn release(&mut self) -> Option<impl FnOnce() + Send + 'static> {
        if self.closed {
            return None;
        }
        self.closed = true;
        if let Some(mut interpreter) = self.interpreter.take() {
            interpreter.kill();
        }
        if let Some(task) = self.restarting.take() {
            task.abort();
        }
        let root = self.root.clone();
        let dir = self.host_dir.clone();
        Some(move || root.remove_sandbox_dir(&dir))
    }
}

impl Drop for WasmSandbox {
    fn drop(&mut self) {
        let Some(remove) = self.release() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(remove)),
            Err(_) => remove(),
        }
    }
}

/// Opens the ledger that keeps a sandbox directory within its disk quota
/// and the root's disk budget.
/// Refuses a restore whose files are over the disk quota it comes back with
/// (a server whose `SANDBOX_DISK_QUOTA_MB` is lower than the one that saved
/// it): they would be kept uncounted past the quota.
fn check_restored_size(ledger: &QuotaLedger, limits: &SandboxLimits) -> Result<(), SandboxError> {
    let usage = ledger.usage().map_err(|e| {
        SandboxError::InvalidArgument(format!(
            "the saved sandbox's files cannot be measured ({e}); it stays saved: try again, or close_sandbox deletes it"
        ))
    })?;
    if usage.bytes > limits.disk_bytes || usage.files > limits.disk_files {
        return Err(SandboxError::InvalidArgument(format!(
            "the saved sandbox's files take {} MiB in {} files and directories, over this server's disk quota of {} MiB and {} files (SANDBOX_DISK_QUOTA_MB, SANDBOX_DISK_FILES); it stays saved: restore it on a server with a larger quota, or close_sandbox deletes it",
            usage.bytes.div_ceil(1 << 20),
            usage.files,
            limits.disk_bytes >> 20,
            limits.disk_files
        )));
    }
    Ok(())
}
