//! The MCP server: the ten seed tools and `fork_sandbox` over the
//! [`SandboxManager`], served on stdio.
//!
//! Tool failures the model can act on (unknown sandbox, refused path, an
//! exception in the code, a limit) are results with `isError: true` and a
//! message written for the model; only unusable requests are protocol errors.

pub mod caller;
mod file_tools;
pub mod framing;
mod handler;
mod install_text;
mod live_output;
pub mod offer;
mod pages;
pub mod params;
mod progress;
pub mod resources;
pub mod results;
pub mod schema;
pub mod tasks;

use std::sync::Arc;
use std::time::Duration;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use rmcp::task_manager::TaskManager;
use rmcp::{RoleServer, tool, tool_router};

use self::caller::Caller;
use self::install_text::install_message;
use self::live_output::LiveOutput;
use self::offer::Offer;
use self::params::*;
use self::progress::ProgressForwarder;
use self::results::*;
use crate::config::RequestLimits;
use crate::metrics::Metrics;
use crate::sandbox::manager::{CreateRequest, SandboxManager};
use crate::sandbox::{BackendKind, KeptAcrossRestarts, OutputTap, SandboxError, human_bytes};

/// The MCP tool server.
#[derive(Clone)]
pub struct SandboxServer {
    manager: Arc<SandboxManager>,
    limits: RequestLimits,
    offer: Arc<Offer>,
    tool_router: ToolRouter<Self>,
    tasks: TaskManager,
    task_owners: tasks::TaskOwners,
    metrics: Arc<Metrics>,
    /// Whether requests must carry an authorized [`Caller`] (HTTP with
    /// authorization on).
    authorization: bool,
}

/// A number of seconds from a client: above 0 and finite (the sandbox's
/// maximum is checked where it is known).
fn seconds(value: Option<f64>, name: &str) -> Result<Option<Duration>, SandboxError> {
    match value {
        None => Ok(None),
        Some(s) if s > 0.0 => Duration::try_from_secs_f64(s).map(Some).map_err(|_| {
            SandboxError::InvalidArgument(format!("{name} {s} is not a usable number of seconds"))
        }),
        Some(s) => Err(SandboxError::InvalidArgument(format!(
            "{name} must be a number of seconds above 0, not {s}"
        ))),
    }
}

fn backend(name: Option<&str>) -> Result<Option<BackendKind>, SandboxError> {
    name.map(|n| {
        BackendKind::parse(n).ok_or_else(|| {
            SandboxError::InvalidArgument(format!("unknown backend '{n}': use \"wasm\" or \"e2b\""))
        })
    })
    .transpose()
}

#[tool_router]
impl SandboxServer {
    /// A server over `manager`, with per-request `limits`, describing its
    /// tools with what it `offer`s.
    pub fn new(manager: Arc<SandboxManager>, limits: RequestLimits, offer: Offer) -> Self {
        let mut tool_router = Self::tool_router();
        offer.describe(&mut tool_router);
        for route in tool_router.map.values_mut() {
            let mut strict = schema::strict(&route.attr.input_schema);
            schema::mirror_session_id(&mut strict);
            route.attr.input_schema = Arc::new(strict);
        }
        Self {
            manager,
            limits,
            offer: Arc::new(offer),
            tool_router,
            tasks: TaskManager::new(),
            task_owners: tasks::TaskOwners::default(),
            metrics: Arc::new(Metrics::new()),
            authorization: false,
        }
    }

    /// The same server, counting into `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// The same server, requiring every request to carry an authorized
    /// [`Caller`] (attached by the HTTP authorization layer).
    pub fn requiring_authorization(mut self) -> Self {
        self.authorization = true;
        self
    }

    /// Who sent this request.
    fn caller(&self, ctx: &RequestContext<RoleServer>) -> Result<Caller, SandboxError> {
        Caller::of(ctx, self.authorization)
    }

    fn check_code(&self, code: &str) -> Result<(), SandboxError> {
        if code.len() > self.limits.max_code_bytes {
            return Err(SandboxError::TooLarge {
                what: "code".into(),
                size: code.len() as u64,
                limit: self.limits.max_code_bytes as u64,
                hint: "; write large inputs to a file with write_file and read it from the code"
                    .into(),
            });
        }
        Ok(())
    }

    fn check_file_size(&self, size: u64) -> Result<(), SandboxError> {
        if size > self.limits.max_file_bytes {
            return Err(SandboxError::TooLarge {
                what: "the file content".into(),
                size,
                limit: self.limits.max_file_bytes,
                hint: "; split it into smaller files".into(),
            });
        }
        Ok(())
    }

    /// The request `create_sandbox` and `create_run_close` hand the manager.
    fn create_request(
        &self,
        caller: &Caller,
        id: Option<String>,
        options: SandboxOptions,
        progress: &ProgressForwarder,
    ) -> Result<CreateRequest, SandboxError> {
        let backend = backend(options.backend.as_deref())?;
        self.offer.check(
            backend.unwrap_or(self.manager.settings().default_backend),
            options.runtime.as_deref(),
        )?;
        Ok(CreateRequest {
            id,
            backend,
            timeout: seconds(options.timeout_seconds, "timeout_seconds")?,
            memory_bytes: options.memory_mb.map(|mb| mb.saturating_mul(1 << 20)),
            runtime: options.runtime,
            progress: progress.sink(),
            owner: caller.owner.clone(),
            caps: caller.caps,
            allow_hosts: options.allow_hosts,
            one_off: false,
        })
    }

    #[tool(
        title = "Create a sandbox",
        description = "Create a Python sandbox and return its session_id (the server fills in the runtimes and backends it has).",
        output_schema = schema_for_output::<CreateResult>(),
        annotations(title = "Create a sandbox", destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn create_sandbox(
        &self,
        Parameters(p): Parameters<CreateSandboxParams>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        answer(self.create_sandbox_inner(p, ctx).await)
    }

    async fn create_sandbox_inner(
        &self,
        p: CreateSandboxParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, SandboxError> {
        let forwarder = ProgressForwarder::new(&ctx);
        let options = SandboxOptions {
            backend: p.backend,
            timeout_seconds: p.timeout_seconds,
            memory_mb: p.memory_mb,
            runtime: p.runtime,
            allow_hosts: p.allow_hosts,
        };
        let caller = self.caller(&ctx)?;
        let request = self.create_request(&caller, p.session_id, options, &forwarder)?;
        let created = self.manager.create(request).await;
        forwarder.finish().await;
        let (sandbox, created) = created?;
        let status = sandbox
            .status(self.manager.settings().idle_timeout, false)
            .await;
        let message = if created {
            let kept = match status.kept_across_restarts {
                KeptAcrossRestarts::FilesAndVariables => "",
                KeptAcrossRestarts::FilesOnly => {
                    " If the server restarts, its files come back but not its variables: this runtime's interpreter never returns to the server between executions, so its state cannot be kept (the scientific runtime keeps both)."
                }
                KeptAcrossRestarts::Nothing => "",
            };
            format!(
                "Created sandbox '{}' ({} backend, {}). Run code with execute_code.{kept}",
                status.session_id, status.backend, status.runtime
            )
        } else {
            format!(
                "Sandbox '{}' already exists; it was left as it is.",
                status.session_id
            )
        };
        let text = message.clone();
        Ok(structured(
            &CreateResult {
                created,
                message,
                status,
            },
            text,
            false,
        ))
    }

    #[tool(
        title = "Close a sandbox",
        description = "Close a sandbox and delete its files (or delete a sandbox saved when the server \
last stopped). Closing an id that does not exist is not an error.",
        output_schema = schema_for_output::<CloseResult>(),
        annotations(title = "Close a sandbox", destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn close_sandbox(
        &self,
        Parameters(p): Parameters<SessionParams>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        answer(self.close_sandbox_inner(p, &ctx).await)
    }

    async fn close_sandbox_inner(
        &self,
        p: SessionParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, SandboxError> {
        let caller = self.caller(ctx)?;
        let closed = self.manager.close(&caller.owner, &p.session_id).await?;
        let message = if closed {
            format!("Closed sandbox '{}'.", p.session_id)
        } else {
            format!("No sandbox '{}' was open; nothing to close.", p.session_id)
        };
        let text = message.clone();
        Ok(structured(
            &CloseResult {
                session_id: p.session_id,
                closed,
                message,
            },
            text,
            false,
        ))
    }

    #[tool(
        title = "Fork a sandbox",
        description = "Fork a sandbox: a new sandbox (new_session_id, or a generated id) with the same \
variables, imports and files as session_id has now; the two then go their own ways. Use it to try \
something risky, or several alternatives, from one prepared state. Local sandboxes of a runtime driven \
turn by turn (scientific) only; not while the source is running a call. Files the code holds open are \
not carried.",
        output_schema = schema_for_output::<ForkResult>(),
        annotations(title = "Fork a sandbox", destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn fork_sandbox(
        &self,
        Parameters(p): Parameters<ForkParams>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        answer(self.fork_sandbox_inner(p, &ctx).await)
    }

    async fn fork_sandbox_inner(
        &self,
        p: ForkParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, SandboxError> {
        let caller = self.caller(ctx)?;
        let started = std::time::Instant::now();
        let (sandbox, facts) = self
            .manager
            .fork(&caller.owner, &caller.caps, &p.session_id, p.new_session_id)
            .await?;
        let elapsed_ms = started.elapsed().as_millis() as u64;
        let mut message = format!(
            "Forked sandbox '{}' into '{}' in {elapsed_ms} ms: same variables, imports and files ({} copied); from now on the two are independent.",
            p.session_id,
            sandbox.id(),
            facts.files_copied
        );
        if facts.open_files_not_carried > 0 {
            message.push_str(&format!(
                " The code in '{}' held {} files open; the fork does not hold them, so file objects for them fail there: open them again.",
                p.session_id, facts.open_files_not_carried
            ));
        }
        let text = message.clone();
        Ok(structured(
            &ForkResult {
                session_id: sandbox.id().to_owned(),
                source_session_id: p.session_id,
                runtime: sandbox.runtime().to_owned(),
                files_copied: facts.files_copied,
                open_files_not_carried: facts.open_files_not_carried,
                elapsed_ms,
                message,
            },
            text,
            false,
        ))
    }

    #[tool(
        title = "Sandbox status",
        description = "Report on one sandbox (session_id) or all: backend, runtime, created, last used, \
when it is released if left idle, executions, memory and disk used, and its limits. Also lists \
the sandboxes saved when the server last stopped or left idle: a call naming one brings it back \
with its variables and files.",
        output_schema = schema_for_output::<StatusResult>(),
        annotations(title = "Sandbox status", read_only_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn get_sandbox_status(
        &self,
        Parameters(p): Parameters<StatusParams>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        answer(self.get_sandbox_status_inner(p, &ctx).await)
    }

    async fn get_sandbox_status_inner(
        &self,
        p: StatusParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, SandboxError> {
        let caller = self.caller(ctx)?;
        let idle = self.manager.settings().idle_timeout;
        let mut saved = self.manager.saved(&caller.owner);
        if let Some(id) = &p.session_id {
            saved.retain(|s| s.session_id == *id);
        }
        let sandboxes = match &p.session_id {
            Some(id) => match self.manager.get(&caller.owner, id) {
                Ok(sandbox) => vec![sandbox],
                Err(SandboxError::UnknownSandbox(_)) if !saved.is_empty() => Vec::new(),
                Err(e) => return Err(e),
            },
            None => self.manager.all(&caller.owner),
        };
        // Measured in parallel: a remote sandbox's figures take a request each.
        let statuses =
            futures::future::join_all(sandboxes.iter().map(|s| s.status(idle, true))).await;
        // Asked about one sandbox, the answer is about that one only.
        let ids: Vec<String> = statuses.iter().map(|s| s.session_id.clone()).collect();
        let mut text = match &p.session_id {
            Some(_) => String::from("1 sandbox"),
            None => format!("{} sandbox(es) open", ids.len()),
        };
        for s in &statuses {
            text.push_str(&format!(
                "\n- {}: {} ({}), {} executions, memory {}, disk {}{}",
                s.session_id,
                s.backend,
                s.runtime,
                s.executions,
                s.usage.memory_bytes.map_or("?".into(), human_bytes),
                s.usage.disk_bytes.map_or("?".into(), human_bytes),
                if s.busy { ", busy" } else { "" }
            ));
        }
        for s in &saved {
            text.push_str(&format!(
                "\n- {}: saved when the server last stopped ({}, {}{}); a call naming it restores it",
                s.session_id,
                s.runtime,
                human_bytes(s.bytes),
                if s.state_kept { ", variables and files" } else { ", files only" }
            ));
        }
        // What all sandboxes use together would tell a principal when others
        // are busy: only the server's one user sees it.
        let budgets = self
            .manager
            .budgets()
            .filter(|_| caller.owner.name().is_none());
        if let Some(b) = &budgets {
            text.push_str(&format!(
                "\nall local sandboxes: memory {} of {}",
                human_bytes(b.memory.used_bytes),
                human_bytes(b.memory.limit_bytes)
            ));
            if let Some(disk) = &b.disk {
                text.push_str(&format!(
                    ", disk {} of {}",
                    human_bytes(disk.used_bytes),
                    human_bytes(disk.limit_bytes)
                ));
            }
        }
        Ok(structured(
            &StatusResult {
                count: ids.len(),
                sandbox_ids: ids,
                sandboxes: statuses,
                saved,
                budgets,
            },
            text,
            false,
        ))
    }

    #[tool(
        title = "Run Python code",
        description = "Run Python code in a sandbox. State persists between calls (like a notebook); \
the value of a final expression is returned (e.g. `y + 2` shows 42; a pandas DataFrame as a text \
table). Returns stdout, stderr, the value, and on failure the exception with its traceback \
(isError). Top-level await and asyncio.run() work. matplotlib figures (plt.show(), or any left \
open at the end) come back as PNG image content; no need to save them to files. Limits: a \
wall-clock timeout (timeout_seconds, default 30, refused above the server's maximum), memory, CPU \
time when the server sets a budget, and output: long output keeps its head and tail, and the whole stream is saved in a file (its path \
is in the cut) that read_file pages through. If a limit stops the interpreter, variables are lost \
but files are kept. No network access in local sandboxes.",
        output_schema = schema_for_output::<ExecutionResult>(),
        annotations(title = "Run Python code", destructive_hint = true, idempotent_hint = false, open_world_hint = false)
    )]
    async fn execute_code(
        &self,
        Parameters(p): Parameters<ExecuteCodeParams>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        answer(self.execute_code_inner(p, ctx).await)
    }

    async fn execute_code_inner(
        &self,
        p: ExecuteCodeParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, SandboxError> {
        self.check_code(&p.code)?;
        let timeout = seconds(p.timeout_seconds, "timeout_seconds")?;
        let caller = self.caller(&ctx)?;
        let sandbox = self
            .manager
            .get_or_restore(&caller.owner, &caller.caps, &p.session_id)
            .await?;
        let started = std::time::Instant::now();
        let result = run_with_live_output(&ctx, |tap| {
            sandbox.execute(p.code, timeout, ctx.ct.clone(), tap)
        })
        .await;
        self.metrics
            .record_execution(sandbox.backend(), &result, started.elapsed());
        Ok(execution(&p.session_id, result?))
    }

    #[tool(
        title = "Run Python code once",
        description = "Create a fresh sandbox, run the code in it, return the result, and close it. \
For one-off computations that need no state afterwards.",
        output_schema = schema_for_output::<ExecutionResult>(),
        annotations(title = "Run Python code once", destructive_hint = false, idempotent_hint = true, open_world_hint = false)
    )]
    async fn create_run_close(
        &self,
        Parameters(p): Parameters<CreateRunCloseParams>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        answer(self.create_run_close_inner(p, ctx).await)
    }

    async fn create_run_close_inner(
        &self,
        p: CreateRunCloseParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, SandboxError> {
        self.check_code(&p.code)?;
        let forwarder = ProgressForwarder::new(&ctx);
        let options = SandboxOptions {
            backend: p.backend,
            timeout_seconds: p.timeout_seconds,
            memory_mb: p.memory_mb,
            runtime: p.runtime,
            allow_hosts: None,
        };
        let caller = self.caller(&ctx)?;
        let request = CreateRequest {
            one_off: true,
            ..self.create_request(&caller, None, options, &forwarder)?
        };
        let created = self.manager.create(request).await;
        forwarder.finish().await;
        let (sandbox, _) = created?;
        let id = sandbox.id().to_owned();
        let started = std::time::Instant::now();
        let result = run_with_live_output(&ctx, |tap| {
            sandbox.execute(p.code, None, ctx.ct.clone(), tap)
        })
        .await;
        self.metrics
            .record_execution(sandbox.backend(), &result, started.elapsed());
        drop(sandbox);
        if let Err(e) = self.manager.close(&caller.owner, &id).await {
            tracing::warn!(%id, error = %e, "could not close a create_run_close sandbox");
        }
        Ok(execution(&id, result?))
    }

    #[tool(
        title = "Install Python packages",
        description = "Install Python packages into a sandbox, as pip would: \"six\", \"attrs==23.2.0\", \
\"python-dateutil>=2.8\", \"requests[socks]\", several separated by spaces or commas. Dependencies \
are installed too, from the server's configured package index or wheelhouse. Local sandboxes take \
pure-Python wheels only (no packages with compiled code; the error says so); the \"scientific\" \
runtime has numpy, pandas, scipy, scikit-learn, matplotlib and about forty more built in, which \
are reported as present. Import the packages right after, in the same session: no restart, \
variables are kept. Returns what was installed (name, version, source) and what was already present.",
        output_schema = schema_for_output::<InstallResult>(),
        annotations(title = "Install Python packages", destructive_hint = false, idempotent_hint = true, open_world_hint = true)
    )]
    async fn install_package(
        &self,
        Parameters(p): Parameters<InstallPackageParams>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        answer(self.install_package_inner(p, ctx).await)
    }

    async fn install_package_inner(
        &self,
        p: InstallPackageParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, SandboxError> {
        let requirements = crate::packages::split_requirements(&p.package_name);
        if requirements.is_empty() {
            return Err(SandboxError::InvalidArgument(
                "package_name is empty: give a package name such as \"attrs\"".into(),
            ));
        }
        let caller = self.caller(&ctx)?;
        let sandbox = self
            .manager
            .get_or_restore(&caller.owner, &caller.caps, &p.session_id)
            .await?;
        // Progress messages become MCP progress notifications when the
        // request carried a progress token.
        let forwarder = ProgressForwarder::new(&ctx);
        let sink = forwarder.sink();
        let progress = move |message: String| {
            if let Some(sink) = &sink {
                sink.report(message);
            }
        };
        let result = sandbox
            .install(requirements, &progress, ctx.ct.clone())
            .await;
        drop(progress);
        forwarder.finish().await;
        let report = result?;
        let message = install_message(&report);
        let text = message.clone();
        Ok(structured(
            &InstallResult {
                session_id: p.session_id,
                package: p.package_name,
                report,
                message,
            },
            text,
            false,
        ))
    }

    #[tool(
        title = "List files",
        description = "List a directory in a sandbox (default \"/\", the sandbox's root, which is also \
the code's working directory): name, path, kind (file, directory, symlink), size and modification \
time of each entry. On every backend a path, absolute or relative, names the same file for the \
file tools and for the code.",
        output_schema = schema_for_output::<ListResult>(),
        annotations(title = "List files", read_only_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn list_files(
        &self,
        Parameters(p): Parameters<ListFilesParams>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        answer(self.list_files_inner(p, &ctx).await)
    }

    #[tool(
        title = "Read a file",
        description = "Read a file from a sandbox, a page at a time. Text comes back as is, 64 KiB at \
a time by default, ending at a line break when one is near; a result that stops short of the end \
says so (truncated) and gives next_offset to pass as offset for the next page. offset and length \
(bytes) read any part, e.g. the end of a large output file. A file that is not UTF-8 comes back \
as base64 with encoding \"base64\", 48 KiB of it at a time by default.",
        output_schema = schema_for_output::<ReadResult>(),
        annotations(title = "Read a file", read_only_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn read_file(
        &self,
        Parameters(p): Parameters<ReadFileParams>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        answer(self.read_file_inner(p, &ctx).await)
    }

    #[tool(
        title = "Write a file",
        description = "Write a file in a sandbox (creating parent directories; replacing the file \
atomically). content is text, or base64 with encoding \"base64\" for binary data.",
        output_schema = schema_for_output::<WriteResult>(),
        annotations(title = "Write a file", destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn write_file(
        &self,
        Parameters(p): Parameters<WriteFileParams>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        answer(
            self.write(&ctx, &p.session_id, &p.file_path, p.content, p.encoding)
                .await,
        )
    }

    #[tool(
        title = "Upload a file",
        description = "Upload a file into a sandbox: file_name in destination_path (default \"/\"). \
file_content is text, or base64 with encoding \"base64\" for binary files.",
        output_schema = schema_for_output::<WriteResult>(),
        annotations(title = "Upload a file", destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn upload_file(
        &self,
        Parameters(p): Parameters<UploadFileParams>,
        ctx: RequestContext<RoleServer>,
    ) -> CallToolResult {
        answer(self.upload_file_inner(p, &ctx).await)
    }
}

/// Runs an execution, sending its output to the client while it runs when
/// the request asked for progress.
async fn run_with_live_output<F>(
    ctx: &RequestContext<RoleServer>,
    execute: impl FnOnce(Option<OutputTap>) -> F,
) -> F::Output
where
    F: std::future::Future,
{
    let forwarder = ProgressForwarder::new(ctx);
    let live = forwarder.sink().map(LiveOutput::start);
    let result = execute(live.as_ref().map(|(_, tap)| tap.clone())).await;
    if let Some((live, _)) = live {
        live.finish();
    }
    forwarder.finish().await;
    result
}

/// A tool's answer: its result, or its error as an error result.
fn answer(result: Result<CallToolResult, SandboxError>) -> CallToolResult {
    result.unwrap_or_else(|e| error(&e))
}

/// The options `create_sandbox` and `create_run_close` share.
struct SandboxOptions {
    backend: Option<String>,
    timeout_seconds: Option<f64>,
    memory_mb: Option<u64>,
    runtime: Option<String>,
    allow_hosts: Option<Vec<String>>,
}
