//! [`E2bSandbox`]: one E2B code-interpreter sandbox: code through the
//! interpreter's `/execute` stream, files through envd, a keep-alive task that
//! extends its lifetime on E2B while it is open, and a kill on close.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Tracker;
use super::api::ApiClient;
use super::config::E2bSettings;
use super::envd::Envd;
use super::error::E2bError;
use super::jupyter::{self, Ended, StreamLimits};
use super::output::Capture;
use super::paths;
use super::pip;
use super::pip_error::PipError;
use super::results::{Collected, ResultLimits};
use super::route::Route;
use super::transport::Clients;
use crate::sandbox::{
    CapturedText, CodeInterpreter, ExecError, ExecRequest, Execution, FileInterface, GuestPath,
    InstallReport, LimitHit, LimitKind, OutputStream, ResourceUsage, SandboxError, StopSignal,
    Usage, human_bytes, human_duration,
};

/// How long `pip install` may take.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(600);
/// Most bytes of pip's log kept in an install report.
const MAX_INSTALL_LOG: usize = 64 << 10;
/// Bound of killing a sandbox on close.
const KILL_TIMEOUT: Duration = Duration::from_secs(30);
/// Guest directory of the files that hold whole outputs.
const OUTPUT_DIR: &str = ".outputs";

/// A sandbox of the E2B backend.
pub(crate) struct E2bSandbox {
    api: ApiClient,
    clients: Clients,
    route: Route,
    envd: Envd,
    template: String,
    tracker: Tracker,
    /// Set when E2B said the sandbox no longer exists.
    gone: Arc<AtomicBool>,
    /// Set when E2B refused to extend its life past the plan's maximum.
    max_reached: Arc<AtomicBool>,
    /// The plan's maximum life of a sandbox.
    max_lifetime: Duration,
    keepalive: Option<(CancellationToken, JoinHandle<()>)>,
    executions: u64,
    /// Whether the interpreter was moved to the working directory.
    placed: bool,
    closed: bool,
}

impl E2bSandbox {
    /// Takes over a sandbox just created on E2B and starts keeping it alive.
    pub(crate) fn new(
        api: ApiClient,
        clients: Clients,
        route: Route,
        template: String,
        settings: &E2bSettings,
        tracker: Tracker,
    ) -> Self {
        let (lifetime, max_lifetime) = (settings.lifetime, settings.max_lifetime);
        let gone = Arc::new(AtomicBool::new(false));
        let max_reached = Arc::new(AtomicBool::new(false));
        let keepalive = spawn_keepalive(
            api.clone(),
            route.id.clone(),
            lifetime,
            LearntEnd {
                gone: gone.clone(),
                max_reached: max_reached.clone(),
            },
        );
        Self {
            envd: Envd::new(
                clients.general.clone(),
                route.clone(),
                settings.request_timeout,
            ),
            api,
            clients,
            route,
            template,
            tracker,
            gone,
            max_reached,
            max_lifetime,
            keepalive: Some(keepalive),
            executions: 0,
            placed: false,
            closed: false,
        }
    }

    fn check_alive(&self) -> Result<(), SandboxError> {
        if self.gone.load(Ordering::Relaxed) {
            return Err(self.gone_error().into());
        }
        Ok(())
    }

    /// Why the sandbox is gone: its plan's maximum life, or simply gone.
    fn gone_error(&self) -> E2bError {
        let id = self.route.id.clone();
        if self.max_reached.load(Ordering::Relaxed) {
            return E2bError::MaxLifetimeReached {
                id,
                max: human_duration(self.max_lifetime),
            };
        }
        E2bError::SandboxGone(id)
    }

    /// Notes what an error says about the sandbox, and converts it. E2B's
    /// edge answering 502 ("sandbox not found") holds for that call only:
    /// the control plane is asked, and only its 404 marks the sandbox gone.
    async fn fail(&self, e: E2bError) -> SandboxError {
        if !e.is_gone() {
            return e.into();
        }
        match self.api.exists(&self.route.id).await {
            Ok(false) => {
                self.gone.store(true, Ordering::Relaxed);
                self.gone_error().into()
            }
            _ => E2bError::Unreachable502(self.route.id.clone()).into(),
        }
    }

    /// Runs code until it ends, `deadline` passes, `cancel` fires or the
    /// stream goes past `limits`. A closed port (the interpreter still
    /// starting) is retried until the deadline or the cancellation.
    async fn stream(
        &self,
        code: &str,
        deadline: Instant,
        cancel: &CancellationToken,
        limits: StreamLimits,
        collected: &mut Collected,
    ) -> Result<Ended, SandboxError> {
        loop {
            match jupyter::execute(
                &self.clients.execute,
                self.clients.connect_timeout,
                &self.route,
                code,
                deadline,
                cancel,
                limits,
                |line| collected.take(line),
            )
            .await
            {
                Err(E2bError::PortClosed(id)) => {
                    if Instant::now() + Duration::from_secs(1) >= deadline {
                        return Err(E2bError::PortClosed(id).into());
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                        _ = cancel.cancelled() => return Ok(Ended::Cancelled),
                    }
                }
                Err(e) => return Err(self.fail(e).await),
                Ok(ended) => return Ok(ended),
            }
        }
    }

    /// Moves the interpreter to the working directory of the paths rule,
    /// once, before the first execution; `Ok(Some(ended))` when the cell
    /// did not finish (the caller reports that as the execution's end).
    async fn place(
        &mut self,
        deadline: Instant,
        cancel: &CancellationToken,
    ) -> Result<Option<Ended>, SandboxError> {
        if self.placed {
            return Ok(None);
        }
        let stream_limits = StreamLimits::default();
        let mut collected = quiet_collection(&stream_limits);
        let ended = self
            .stream(
                paths::WORKING_DIRECTORY_CELL,
                deadline,
                cancel,
                stream_limits,
                &mut collected,
            )
            .await?;
        if ended != Ended::Finished {
            return Ok(Some(ended));
        }
        if let Some(error) = collected.error {
            return Err(E2bError::WorkingDirectory {
                dir: paths::WORKING_DIRECTORY.to_owned(),
                name: error.name,
                value: error.value,
            }
            .into());
        }
        self.placed = true;
        Ok(None)
    }

    /// Saves a stream's whole text in the sandbox; returns its guest path.
    async fn save_output(&self, stream: &str, bytes: Vec<u8>) -> Option<String> {
        let path = GuestPath::parse(&format!(
            "/{OUTPUT_DIR}/exec-{}-{stream}.txt",
            self.executions
        ))
        .ok()?;
        match self.envd.write(&path, bytes).await {
            Ok(_) => Some(path.to_string()),
            Err(e) => {
                tracing::debug!(error = %e, "could not save the full output in the E2B sandbox");
                None
            }
        }
    }

    async fn finish_stream(&self, name: &str, mut capture: Capture) -> CapturedText {
        let saved = match capture.whole_if_cut() {
            Some(whole) => {
                let bytes = whole.len() as u64;
                self.save_output(name, whole)
                    .await
                    .map(|path| (path, bytes))
            }
            None => None,
        };
        capture.finish(saved)
    }

    fn release(&mut self) -> bool {
        if self.closed {
            return false;
        }
        self.closed = true;
        if let Some((stop, task)) = self.keepalive.take() {
            stop.cancel();
            task.abort();
        }
        true
    }
}

#[async_trait]
impl CodeInterpreter for E2bSandbox {
    async fn execute(
        &mut self,
        request: ExecRequest,
        stop: StopSignal,
    ) -> Result<Execution, SandboxError> {
        self.check_alive()?;
        let limits = request.limits;
        self.executions += 1;
        let started = Instant::now();
        let deadline = started + limits.timeout;
        let stream_limits = StreamLimits::for_execution(&limits);
        let placed = self.place(deadline, stop.token()).await?;
        let mut collected = Collected::new(
            Capture::new(limits.output_bytes, limits.output_file_bytes)
                .tapped(request.output.clone(), OutputStream::Stdout),
            Capture::new(limits.output_bytes, limits.output_file_bytes)
                .tapped(request.output.clone(), OutputStream::Stderr),
            ResultLimits {
                text_bytes: limits.output_bytes,
                image_bytes: limits.image_bytes,
                max_images: limits.max_images,
                line_bytes: stream_limits.max_line,
            },
        );
        let ended = match placed {
            Some(ended) => ended,
            None => {
                self.stream(
                    &request.code,
                    deadline,
                    stop.token(),
                    stream_limits,
                    &mut collected,
                )
                .await?
            }
        };
        let wall = started.elapsed();
        collected.note_left_out();

        let mut execution = Execution {
            stdout: self.finish_stream("stdout", collected.stdout).await,
            stderr: self.finish_stream("stderr", collected.stderr).await,
            value: collected.value,
            error: collected.error,
            images: collected.images,
            ..Execution::default()
        };
        match ended {
            Ended::Finished => {}
            Ended::Overflow(limit) => {
                let limit = human_bytes(limit);
                execution.limit = Some(LimitHit {
                    kind: LimitKind::Output,
                    limit: format!("{limit} from E2B per execution"),
                    message: format!(
                        "E2B sent more than {limit} for this execution, more than this server reads: the connection was dropped, which makes the sandbox's interpreter interrupt the code (KeyboardInterrupt); what came before is kept, and so are variables and files. Write large outputs to files instead of printing them"
                    ),
                });
            }
            Ended::TimedOut => {
                let limit = human_duration(limits.timeout);
                execution.limit = Some(LimitHit {
                    kind: LimitKind::Timeout,
                    limit: limit.clone(),
                    message: format!(
                        "time limit of {limit} exceeded: the connection to the E2B sandbox was dropped, which makes its interpreter interrupt the code (KeyboardInterrupt) within a few seconds; variables and files are normally kept, but code that ignores the interrupt keeps the sandbox busy (then close it and create a new one)"
                    ),
                });
            }
            Ended::Cancelled => {
                execution.error = Some(ExecError {
                    name: "Cancelled".into(),
                    value: format!(
                        "{}; the connection to the E2B sandbox was dropped, which makes its interpreter interrupt the code; variables and files are normally kept",
                        stop.reason().describe()
                    ),
                    traceback: String::new(),
                });
            }
            Ended::Cut(_) if self.envd.alive().await == Some(false) => {
                let gone = self
                    .fail(E2bError::SandboxGone(self.route.id.clone()))
                    .await;
                execution.error = Some(ExecError {
                    name: "SandboxGone".into(),
                    value: format!("the execution was cut off: {gone}"),
                    traceback: String::new(),
                });
            }
            Ended::Cut(why) => {
                if execution.error.is_none() {
                    execution.error = Some(ExecError {
                        name: "ConnectionLost".into(),
                        value: format!(
                            "the connection to the E2B sandbox broke before the execution finished ({why}); the code may have been interrupted, or the sandbox may have expired: check with another execute_code call"
                        ),
                        traceback: String::new(),
                    });
                }
            }
        }
        let output_truncated = execution.stdout.truncated || execution.stderr.truncated;
        execution.note_output_limit(limits.output_bytes);
        execution.usage = Usage {
            wall_ms: wall.as_secs_f64() * 1000.0,
            cpu_ms: None,
            fuel: None,
            memory_bytes: None,
            output_truncated,
            door: None,
        };
        Ok(execution)
    }

    async fn install(
        &mut self,
        requirements: &[String],
        progress: &(dyn Fn(String) + Send + Sync),
        stop: StopSignal,
    ) -> Result<InstallReport, SandboxError> {
        self.check_alive()?;
        let cell = pip::install_cell(requirements)?;
        let deadline = Instant::now() + INSTALL_TIMEOUT;
        let stream_limits = StreamLimits::default();
        let mut collected = quiet_collection(&stream_limits);
        let ended = self
            .stream(&cell, deadline, stop.token(), stream_limits, &mut collected)
            .await?;
        let stdout = collected.stdout.finish(None);
        let stderr = collected.stderr.finish(None);
        let mut log = stdout.text;
        if !stderr.text.is_empty() {
            if !log.is_empty() && !log.ends_with('\n') {
                log.push('\n');
            }
            log.push_str(&stderr.text);
        }
        for line in log
            .lines()
            .filter(|l| l.starts_with("Successfully installed"))
        {
            progress(line.to_owned());
        }
        let wanted = requirements.join(" ");
        let tail = || {
            let lines: Vec<&str> = log.lines().collect();
            lines[lines.len().saturating_sub(15)..].join("\n")
        };
        match ended {
            Ended::Finished => {}
            Ended::TimedOut => {
                return Err(PipError::TimedOut {
                    wanted,
                    after: human_duration(INSTALL_TIMEOUT),
                    log_tail: tail(),
                }
                .into());
            }
            Ended::Cancelled => {
                return Err(PipError::Interrupted {
                    reason: stop.reason().describe().to_owned(),
                    wanted,
                }
                .into());
            }
            Ended::Overflow(limit) => {
                return Err(PipError::OutputTooLarge {
                    limit: human_bytes(limit),
                    wanted,
                }
                .into());
            }
            Ended::Cut(_) => {
                return Err(PipError::ConnectionLost { wanted }.into());
            }
        }
        if let Some(error) = collected.error {
            return Err(PipError::Raised {
                wanted,
                name: error.name,
                value: error.value,
            }
            .into());
        }
        match collected.value.as_deref().map(str::trim) {
            Some("0") => {
                let (installed, already_present) = pip::parse_log(&log);
                Ok(InstallReport {
                    installed,
                    already_present,
                    output: Some(log),
                    ..InstallReport::default()
                })
            }
            status => Err(PipError::Failed {
                wanted,
                status: status.unwrap_or("unknown").to_owned(),
                log_tail: tail(),
            }
            .into()),
        }
    }

    fn files(&self) -> &dyn FileInterface {
        &self.envd
    }

    async fn usage(&self) -> ResourceUsage {
        if self.gone.load(Ordering::Relaxed) {
            return ResourceUsage::default();
        }
        let metrics = self.envd.metrics().await.unwrap_or_default();
        ResourceUsage {
            memory_bytes: metrics.mem_used,
            disk_bytes: metrics.disk_used,
            disk_files: None,
            ..Default::default()
        }
    }

    fn runtime(&self) -> String {
        self.template.clone()
    }

    async fn close(&mut self) {
        if !self.release() {
            return;
        }
        let id = self.route.id.clone();
        match tokio::time::timeout(KILL_TIMEOUT, self.api.kill(&id)).await {
            Ok(Ok(true)) => tracing::info!(e2b_id = %id, "killed the E2B sandbox"),
            Ok(Ok(false)) => tracing::info!(e2b_id = %id, "the E2B sandbox was already gone"),
            Ok(Err(e)) => {
                tracing::warn!(e2b_id = %id, "could not kill the E2B sandbox: {e}");
                return;
            }
            Err(_) => {
                tracing::warn!(e2b_id = %id, "killing the E2B sandbox timed out");
                return;
            }
        }
        self.tracker.forget(&id);
    }
}

impl Drop for E2bSandbox {
    fn drop(&mut self) {
        if !self.release() {
            return;
        }
        // Dropped without close (a cancelled call): kill it in the background.
        // The backend's tracker still holds its id, so a shutdown kills it too.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let api = self.api.clone();
        let tracker = self.tracker.clone();
        let id = self.route.id.clone();
        runtime.spawn(async move {
            if let Ok(Ok(_)) = tokio::time::timeout(KILL_TIMEOUT, api.kill(&id)).await {
                tracker.forget(&id);
            }
        });
    }
}

/// The flags the keep-alive sets when it learns the sandbox's end.
struct LearntEnd {
    gone: Arc<AtomicBool>,
    max_reached: Arc<AtomicBool>,
}

/// Refreshes the sandbox's lifetime on E2B every third of it until stopped,
/// until E2B says the sandbox is gone, or until E2B refuses to extend it past
/// the plan's maximum.
fn spawn_keepalive(
    api: ApiClient,
    id: String,
    lifetime: Duration,
    end: LearntEnd,
) -> (CancellationToken, JoinHandle<()>) {
    let stop = CancellationToken::new();
    let period = (lifetime / 3).max(Duration::from_millis(500));
    let task = {
        let stop = stop.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(period) => {}
                }
                match api.set_timeout(&id, lifetime).await {
                    Ok(()) => tracing::debug!(e2b_id = %id, "extended the E2B sandbox's lifetime"),
                    Err(e @ E2bError::MaxLifetimeReached { .. }) => {
                        end.max_reached.store(true, Ordering::Relaxed);
                        tracing::warn!(e2b_id = %id, "{e}");
                        return;
                    }
                    Err(e) if e.is_gone() => {
                        end.gone.store(true, Ordering::Relaxed);
                        tracing::warn!(e2b_id = %id, "the E2B sandbox is gone: {e}");
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(e2b_id = %id, "could not extend the E2B sandbox's lifetime: {e}")
                    }
                }
            }
        })
    };
    (stop, task)
}

/// What a cell the server runs for itself (a pip install, the working
/// directory) collects: its text, up to [`MAX_INSTALL_LOG`], no images.
fn quiet_collection(stream_limits: &StreamLimits) -> Collected {
    Collected::new(
        Capture::new(MAX_INSTALL_LOG, 0),
        Capture::new(MAX_INSTALL_LOG, 0),
        ResultLimits {
            text_bytes: MAX_INSTALL_LOG,
            image_bytes: 0,
            max_images: 0,
            line_bytes: stream_limits.max_line,
        },
    )
}
