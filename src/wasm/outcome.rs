//! How a call to the driver ended, in words for the model: the one place that
//! turns an [`Outcome`] (with the [`GuestExit`] that [`super::trap`]
//! classified) into the parts of an [`Execution`]: the reply's value, error
//! and images held to the limits, or the limit or crash that stopped the
//! interpreter.

use base64::Engine as _;

use super::interpreter::{MemoryRefusal, Outcome};
use super::protocol::{Reply, decode_reply};
use super::trap::GuestExit;
use crate::sandbox::budget::Budget;
use crate::sandbox::{
    ExecError, ExecImage, ExecLimits, Execution, GuestPath, LimitHit, LimitKind, StopReason,
    cap_exec_error, cap_value_text, human_bytes, human_duration,
};

/// What the sandbox knew as the call ended.
pub(crate) struct Facts<'a> {
    /// The execution's limits.
    pub limits: &'a ExecLimits,
    /// The sandbox's memory cap, in bytes.
    pub memory_cap: u64,
    /// Which limit refused a memory growth during the call, if one did.
    pub memory_refused: Option<MemoryRefusal>,
    /// The server's memory budget.
    pub memory_budget: &'a Budget,
    /// Most files the interpreter may hold open.
    pub open_files: u64,
    /// Why the call was stopped, when it was.
    pub stop_reason: StopReason,
}

/// How the call ended.
pub(crate) enum Ending {
    /// The driver answered; the result has its parts.
    Answered {
        /// Fuel the call burned, when metered.
        fuel_used: Option<u64>,
    },
    /// The interpreter is gone.
    Lost(Loss),
}

/// Why an interpreter is gone, and what the result says about it.
pub(crate) struct Loss {
    /// What happened, in words (the start of the state-lost sentence).
    pub why: String,
    /// The limit that stopped it (`None`: an error named `error_name`).
    pub limit: Option<(LimitKind, String)>,
    /// The error's name when no limit stopped it.
    pub error_name: &'static str,
    /// Whether a replacement interpreter should start (not for a sandbox
    /// that is being closed).
    pub replace: bool,
    /// Whether the client will not see this result (it cancelled the call),
    /// so the next result must say what was lost.
    pub unseen: bool,
}

impl Loss {
    /// Puts the loss into the result: what happened as the limit or error,
    /// and `consequence` (what it means for the sandbox) as the state lost,
    /// each said once.
    pub(crate) fn record(self, execution: &mut Execution, consequence: String) {
        match self.limit {
            Some((kind, limit)) => {
                execution.limit = Some(LimitHit {
                    kind,
                    limit,
                    message: self.why,
                });
            }
            None => {
                execution.error = Some(ExecError {
                    name: self.error_name.into(),
                    value: self.why,
                    traceback: String::new(),
                });
            }
        }
        execution.state_lost = Some(consequence);
    }
}

/// Turns the outcome into the result's parts, or into the loss to record.
pub(crate) fn ending(outcome: Outcome, facts: &Facts<'_>, execution: &mut Execution) -> Ending {
    match outcome {
        Outcome::Reply { body, fuel_used } => {
            match decode_reply(&body) {
                Ok(reply) => take_reply(execution, reply, facts.limits),
                Err(e) => {
                    execution.error = Some(ExecError {
                        name: "SandboxError".into(),
                        value: format!("the interpreter sent an unreadable reply: {e}"),
                        traceback: String::new(),
                    });
                }
            }
            note_memory_error(execution, facts);
            Ending::Answered { fuel_used }
        }
        Outcome::TimedOut => {
            let limit = human_duration(facts.limits.timeout);
            Ending::Lost(Loss {
                why: format!("time limit of {limit} exceeded"),
                limit: Some((LimitKind::Timeout, limit)),
                error_name: "",
                replace: true,
                unseen: false,
            })
        }
        Outcome::Cancelled => Ending::Lost(Loss {
            why: facts.stop_reason.describe().to_owned(),
            limit: None,
            error_name: "Cancelled",
            replace: facts.stop_reason == StopReason::Cancelled,
            unseen: facts.stop_reason == StopReason::Cancelled,
        }),
        Outcome::Exited(exit) => Ending::Lost(exit_loss(&exit, facts)),
    }
}

/// Why an interpreter that stopped on its own did.
fn exit_loss(exit: &GuestExit, facts: &Facts<'_>) -> Loss {
    let memory_cap = human_bytes(facts.memory_cap);
    let (limit, why) = match exit {
        GuestExit::OutOfFuel => {
            let fuel = facts.limits.fuel.unwrap_or_default();
            (
                Some((LimitKind::Fuel, format!("{fuel} units"))),
                format!("fuel budget of {fuel} units exhausted (the code ran too long)"),
            )
        }
        GuestExit::StackOverflow => (
            Some((LimitKind::Stack, "WebAssembly stack".into())),
            "the WebAssembly stack overflowed (recursion too deep)".into(),
        ),
        GuestExit::TooManyOpen => (
            Some((
                LimitKind::OpenFiles,
                format!("{} open files", facts.open_files),
            )),
            format!(
                "the code held more than {} files open at once (close files when done, e.g. with `with open(...)`)",
                facts.open_files
            ),
        ),
        GuestExit::Trap(_) if facts.memory_refused.is_some() => (
            Some((LimitKind::Memory, memory_cap.clone())),
            format!(
                "memory limit of {memory_cap} reached and the interpreter could not recover ({exit})"
            ),
        ),
        GuestExit::Exited(code) => (
            None,
            format!("the program ended the interpreter with exit status {code}"),
        ),
        other => (None, format!("the interpreter crashed ({other})")),
    };
    Loss {
        why,
        limit,
        error_name: "InterpreterExit",
        replace: true,
        unseen: false,
    }
}

/// A `MemoryError` raised because a growth was refused is a memory limit:
/// the sandbox's own cap, or the budget all sandboxes share.
fn note_memory_error(execution: &mut Execution, facts: &Facts<'_>) {
    let raised = execution
        .error
        .as_ref()
        .is_some_and(|e| e.name.ends_with("MemoryError"));
    let (limit, message) = match facts.memory_refused {
        _ if !raised => return,
        None => return,
        Some(MemoryRefusal::Cap) => {
            let cap = human_bytes(facts.memory_cap);
            let message = format!(
                "memory limit of {cap} reached: Python raised MemoryError; the interpreter and its state are kept"
            );
            (cap, message)
        }
        Some(MemoryRefusal::Budget) => {
            let budget = human_bytes(facts.memory_budget.limit());
            let message = format!(
                "the server's memory budget of {budget}, shared by all sandboxes, is in use: Python raised MemoryError before this sandbox reached its own limit; free memory here (del large objects) or close other sandboxes; the interpreter and its state are kept"
            );
            (format!("{budget} for all sandboxes"), message)
        }
    };
    execution.limit = Some(LimitHit {
        kind: LimitKind::Memory,
        limit,
        message,
    });
}

/// The first bytes of every PNG file.
const PNG_SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";

/// Most bytes of an execution's reply: its images, and a value, message and
/// traceback of at most the output limit each, with room for framing.
pub(crate) fn reply_bytes(limits: &ExecLimits) -> usize {
    let images = limits.max_images.saturating_mul(limits.image_bytes + 4096);
    images
        .saturating_add(limits.output_bytes.saturating_mul(3))
        .saturating_add(64 << 10)
}

/// Puts what the driver answered into the result, within the execution's
/// limits: the reply comes from guest memory, so it is held to them here
/// whatever the driver was told.
fn take_reply(execution: &mut Execution, reply: Reply, limits: &ExecLimits) {
    execution.value = reply.value.map(|v| cap_value_text(v, limits.output_bytes));
    execution.error = reply.error.map(|e| cap_exec_error(e, limits.output_bytes));
    let (fitting, refused): (Vec<_>, Vec<_>) = reply.images.into_iter().partition(|image| {
        image.png.len() <= limits.image_bytes && image.png.starts_with(PNG_SIGNATURE)
    });
    let dropped = refused.len() + fitting.len().saturating_sub(limits.max_images);
    execution.images = fitting
        .into_iter()
        .take(limits.max_images)
        .map(|image| ExecImage {
            mime_type: "image/png".into(),
            data_base64: base64::engine::general_purpose::STANDARD.encode(image.png),
            // Only a path that could name a file in the sandbox.
            path: image.full_size_path.filter(|p| GuestPath::parse(p).is_ok()),
        })
        .collect();
    if dropped > 0 {
        execution.stderr.text.push_str(&format!(
            "\n[{dropped} image(s) not returned: at most {} per execution, {} each]\n",
            limits.max_images,
            human_bytes(limits.image_bytes as u64)
        ));
    }
}
