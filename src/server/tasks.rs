//! Long tool calls as MCP tasks (the `io.modelcontextprotocol/tasks`
//! extension), for clients that declare it.
//!
//! Such a client's `execute_code`, `create_run_close`, `install_package` and
//! `create_sandbox` call is answered at once with a task; the call goes on in
//! the background, `tasks/get` says how it stands (its progress messages
//! become the task's status message) and, once it is done, carries the very
//! result the plain call would have returned. `tasks/cancel` stops it as a
//! client's cancellation of the plain call does. A client that does not
//! declare the extension sees plain calls, as before.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::ErrorData;
use rmcp::RoleServer;
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, CreateTaskResult};
use rmcp::service::RequestContext;
use rmcp::task_manager::{TaskExit, TaskManager, TaskOptions};
use tokio_util::sync::CancellationToken;

use super::progress::TaskNotes;
use crate::sandbox::Owner;

/// The tools whose calls become tasks: the ones that can take long.
pub const TASK_TOOLS: &[&str] = &[
    "execute_code",
    "create_run_close",
    "install_package",
    "create_sandbox",
];

/// How long a task and its result are kept: an hour from its start (the
/// longest execution a server allows is well within it), then for as long
/// again once it has ended, for a client to fetch the result.
const TASK_TTL_MS: u64 = 60 * 60 * 1000;

/// How often a client is asked to poll.
const POLL_INTERVAL_MS: u64 = 500;

/// Whether this call is answered with a task: a long tool, from a client
/// that declared the tasks extension.
pub fn wanted(request: &CallToolRequestParams, context: &RequestContext<RoleServer>) -> bool {
    TASK_TOOLS.contains(&request.name.as_ref())
        && context
            .client_capabilities()
            .is_some_and(|capabilities| capabilities.supports_tasks())
}

/// Starts `run` as a task in `tasks` and returns the task's handle for the
/// client. `run` gets the call's context with its own cancellation token
/// (the request's is cancelled once the task handle is sent) and with its
/// progress routed to the task's status message.
pub fn start<F>(
    tasks: &TaskManager,
    mut context: RequestContext<RoleServer>,
    run: impl FnOnce(RequestContext<RoleServer>) -> F + Send + 'static,
) -> CallToolResponse
where
    F: Future<Output = Result<CallToolResponse, ErrorData>> + Send + 'static,
{
    let options = TaskOptions::new()
        .with_ttl_ms(TASK_TTL_MS)
        .with_poll_interval_ms(POLL_INTERVAL_MS)
        .with_status_message("started");
    let task = tasks.spawn(options, move |task| {
        let cancel = CancellationToken::new();
        context.ct = cancel.clone();
        context.extensions.insert(TaskNotes(task.clone()));
        Box::pin(async move {
            let call = run(context);
            tokio::pin!(call);
            let response = tokio::select! {
                response = &mut call => response,
                () = task.cancelled() => {
                    // The call stops as a cancelled plain call does, and is
                    // awaited so the sandbox is free again when the task ends.
                    cancel.cancel();
                    let _ = call.await;
                    return Err(TaskExit::Cancelled);
                }
            };
            settle(response)
        })
    });
    CallToolResponse::Task(CreateTaskResult::new(task))
}

/// The task's end: the call's result, or its protocol error.
fn settle(response: Result<CallToolResponse, ErrorData>) -> Result<CallToolResult, TaskExit> {
    match response {
        Ok(CallToolResponse::Complete(result)) => Ok(result),
        Ok(_) => Err(TaskExit::Error(ErrorData::internal_error(
            "the tool answered with something a task cannot carry",
            None,
        ))),
        Err(error) => Err(TaskExit::Error(error)),
    }
}

/// Who started each task, so that a principal sees only its own: another
/// principal naming the task gets the answer for a task that does not exist.
#[derive(Clone, Default)]
pub struct TaskOwners {
    started: Arc<Mutex<HashMap<String, (Owner, Instant)>>>,
}

impl TaskOwners {
    /// Records that `owner` started the task `response` hands out.
    pub fn record(&self, response: &CallToolResponse, owner: &Owner) {
        let CallToolResponse::Task(created) = response else {
            return;
        };
        let mut started = self.started.lock().unwrap_or_else(|p| p.into_inner());
        // A task and its result live at most twice the TTL.
        let kept = Duration::from_millis(2 * TASK_TTL_MS);
        started.retain(|_, (_, at)| at.elapsed() < kept);
        started.insert(
            created.task.task_id.clone(),
            (owner.clone(), Instant::now()),
        );
    }

    /// `task_id` if `owner` started it, else the error for an unknown task.
    pub fn check<'a>(&self, task_id: &'a str, owner: &Owner) -> Result<&'a str, ErrorData> {
        let started = self.started.lock().unwrap_or_else(|p| p.into_inner());
        match started.get(task_id) {
            Some((started_by, _)) if started_by == owner => Ok(task_id),
            _ => Err(ErrorData::invalid_params(
                format!("unknown task: {task_id}"),
                None,
            )),
        }
    }
}
