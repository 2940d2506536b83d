//! [`ProgressForwarder`]: a tool's progress messages, sent to the client as
//! MCP progress notifications when its request carried a progress token, or
//! kept as the status message of the task a call runs as.

use std::time::Duration;

use rmcp::RoleServer;
use rmcp::service::RequestContext;

use crate::sandbox::Progress;

/// Put into a call's extensions when it runs as an MCP task: its progress
/// becomes the task's status message (the request it came from is already
/// answered).
#[derive(Clone)]
pub(crate) struct TaskNotes(pub rmcp::task_manager::TaskContext);

/// A sink for a tool's progress messages that become MCP progress
/// notifications when the request carried a progress token, and the task
/// sending them. Drop the sink, then await [`ProgressForwarder::finish`], so
/// every message goes out before the result.
pub(crate) struct ProgressForwarder {
    sink: Option<Progress>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl ProgressForwarder {
    pub(crate) fn new(ctx: &RequestContext<RoleServer>) -> Self {
        if let Some(TaskNotes(task)) = ctx.extensions.get::<TaskNotes>().cloned() {
            return Self {
                sink: Some(Progress::new(move |message| {
                    task.set_status_message(message)
                })),
                task: None,
            };
        }
        let Some(token) = ctx.meta.get_progress_token() else {
            return Self {
                sink: None,
                task: None,
            };
        };
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let peer = ctx.peer.clone();
        let task = tokio::spawn(async move {
            let mut step = 0u32;
            while let Some(message) = rx.recv().await {
                step += 1;
                let note =
                    rmcp::model::ProgressNotificationParam::new(token.clone(), f64::from(step))
                        .with_message(message);
                if peer.notify_progress(note).await.is_err() {
                    break;
                }
            }
        });
        Self {
            sink: Some(Progress::new(move |message| {
                let _ = tx.send(message);
            })),
            task: Some(task),
        }
    }

    /// The sink (none without a progress token).
    pub(crate) fn sink(&self) -> Option<Progress> {
        self.sink.clone()
    }

    /// Sends what is queued, then stops.
    pub(crate) async fn finish(mut self) {
        self.sink = None;
        if let Some(task) = self.task.take() {
            // Every clone of the sink is gone once the call returned; the
            // timeout only guards against one kept by mistake.
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
    }
}
