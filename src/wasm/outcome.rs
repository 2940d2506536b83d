//! How a call to the driver ended, in words for the model: the one place that
//! turns a [`FinishedCall`] (its [`Outcome`], with the [`GuestExit`] that
//! [`super::trap`] classified, and its output) into an [`Execution`]: the
//! reply's value, error and images held to the limits, or the limit or crash
//! that stopped the interpreter, the disk quota, and the usage.

use std::time::Duration;

use base64::Engine as _;

use super::capture::OutputCapture;
use super::interpreter::Outcome;
use super::memory_limiter::MemoryRefusal;
use super::protocol::{Reply, decode_reply};
use super::trap::GuestExit;
use crate::sandbox::budget::Budget;
use crate::sandbox::{
    ExecError, ExecImage, ExecLimits, Execution, GuestPath, LimitHit, LimitKind, StopReason, Usage,
    cap_exec_error, cap_value_text, human_bytes, human_duration,
};

/// What a lost interpreter means for the sandbox, for the model.
pub(crate) const STATE_LOST: &str = "the interpreter was stopped and a fresh one is starting in the same sandbox: variables, imports and definitions are lost, files are kept";

/// A call to the driver that has ended, and the interpreter as it left it.
pub(crate) struct FinishedCall {
    /// How it ended.
    pub outcome: Outcome,
    /// What the program wrote to stdout.
    pub stdout: OutputCapture,
    /// What the program wrote to stderr.
    pub stderr: OutputCapture,
    /// How long it took.
    pub wall: Duration,
    /// CPU time the guest burned in it.
    pub cpu: Duration,
    /// The interpreter's memory after it.
    pub memory_bytes: u64,
    /// Which limit refused a memory growth during it, if one did.
    pub memory_refused: Option<MemoryRefusal>,
    /// What it asked through the door to the host, when it used it.
    pub door: Option<crate::sandbox::DoorUsage>,
}

/// What the sandbox knew as the call ended.
pub(crate) struct Facts<'a> {
    /// The execution's limits.
    pub limits: &'a ExecLimits,
    /// The sandbox's memory cap, in bytes.
    pub memory_cap: u64,
    /// The server's memory budget.
    pub memory_budget: &'a Budget,
    /// Most files the interpreter may hold open.
    pub open_files: u64,
    /// Why the call was stopped, when it was.
    pub stop_reason: StopReason,
    /// The sandbox's disk quota, in words, when a write was refused for it
    /// during the call.
    pub disk_refused: Option<String>,
    /// A loss an earlier call could not report (it was cancelled), to report
    /// now when this call loses nothing itself.
    pub earlier_loss: Option<String>,
}

/// The result of `call`, and the loss of its interpreter, if it was lost
/// (the sandbox must then act on it: see [`Loss`]).
pub(crate) fn execution(call: FinishedCall, facts: &Facts<'_>) -> (Execution, Option<Loss>) {
    let mut execution = Execution {
        stdout: call.stdout.finish(),
        stderr: call.stderr.finish(),
        ..Execution::default()
    };
    let (fuel_used, loss) = match ending(call.outcome, facts, call.memory_refused, &mut execution) {
        Ending::Answered { fuel_used } => (fuel_used, None),
        Ending::Lost(loss) => {
            loss.record(&mut execution);
            (None, Some(loss))
        }
    };
    let output_truncated = execution.stdout.truncated || execution.stderr.truncated;
    note_disk_quota(&mut execution, facts.disk_refused.as_deref());
    execution.note_output_limit(facts.limits.output_bytes);
    if execution.state_lost.is_none() {
        execution.state_lost = facts.earlier_loss.clone();
    }
    execution.usage = Usage {
        wall_ms: call.wall.as_secs_f64() * 1000.0,
        cpu_ms: Some(call.cpu.as_secs_f64() * 1000.0),
        fuel: fuel_used,
        memory_bytes: Some(call.memory_bytes),
        output_truncated,
        door: call.door,
    };
    (execution, loss)
}

/// How the call ended.
enum Ending {
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
    limit: Option<(LimitKind, String)>,
    /// The error's name when no limit stopped it.
    error_name: &'static str,
    /// Whether a replacement interpreter should start (not for a sandbox
    /// that is being closed).
    pub replace: bool,
    /// Whether the client will not see this result (it cancelled the call),
    /// so the next result must say what was lost.
    pub unseen: bool,
}

impl Loss {
    /// Puts the loss into the result: what happened as the limit or error,
    /// and what it means for the sandbox as the state lost, each said once.
    fn record(&self, execution: &mut Execution) {
        match &self.limit {
            Some((kind, limit)) => {
                execution.limit = Some(LimitHit {
                    kind: *kind,
                    limit: limit.clone(),
                    message: self.why.clone(),
                });
            }
            None => {
                execution.error = Some(ExecError {
                    name: self.error_name.into(),
                    value: self.why.clone(),
                    traceback: String::new(),
                });
            }
        }
        execution.state_lost = Some(if self.replace {
            STATE_LOST.to_owned()
        } else {
            "the interpreter was stopped".to_owned()
        });
    }
}

/// Turns the outcome into the result's parts, or into the loss to record.
fn ending(
    outcome: Outcome,
    facts: &Facts<'_>,
    memory_refused: Option<MemoryRefusal>,
    execution: &mut Execution,
) -> Ending {
    match outcome {
        Outcome::Reply {
            body, fuel_used, ..
        } => {
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
            note_memory_error(execution, facts, memory_refused);
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
        Outcome::CancelledUnstarted => {
            execution.error = Some(ExecError {
                name: "Cancelled".into(),
                value: match facts.stop_reason {
                    StopReason::Cancelled => "the call was cancelled by the client before any of its code ran: the sandbox is as it was",
                    StopReason::Closing => "the sandbox was closed before any of the call's code ran",
                }
                .to_owned(),
                traceback: String::new(),
            });
            Ending::Answered { fuel_used: None }
        }
        Outcome::Exited(exit) => Ending::Lost(exit_loss(&exit, facts, memory_refused)),
    }
}

/// A write refused for the disk quota during the call is the limit hit,
/// when no other limit was.
fn note_disk_quota(execution: &mut Execution, quota: Option<&str>) {
    let Some(limit) = quota else { return };
    if execution.limit.is_some() {
        return;
    }
    execution.limit = Some(LimitHit {
        kind: LimitKind::Disk,
        limit: limit.to_owned(),
        message: format!(
            "disk quota of {limit} reached: a write failed inside Python with OSError (Quota exceeded); delete files (or read them out with read_file) to make room"
        ),
    });
}

/// Why an interpreter that stopped on its own did.
fn exit_loss(exit: &GuestExit, facts: &Facts<'_>, memory_refused: Option<MemoryRefusal>) -> Loss {
    let memory_cap = human_bytes(facts.memory_cap);
    let (limit, why) = match exit {
        GuestExit::OutOfFuel => {
            let fuel = facts.limits.fuel.unwrap_or_default();
            (
                Some((LimitKind::Fuel, format!("{fuel} units"))),
                format!("fuel budget of {fuel} units exhausted (the code ran too long)"),
            )
        }
        GuestExit::OutOfCpu => {
            let cpu = facts.limits.cpu.map(human_duration).unwrap_or_default();
            (
                Some((LimitKind::Cpu, cpu.clone())),
                format!(
                    "CPU-time budget of {cpu} used up (the code computed too long; SANDBOX_CPU_SECONDS sets it)"
                ),
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
        GuestExit::Trap(_) if memory_refused.is_some() => (
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
fn note_memory_error(
    execution: &mut Execution,
    facts: &Facts<'_>,
    memory_refused: Option<MemoryRefusal>,
) {
    let raised = execution
        .error
        .as_ref()
        .is_some_and(|e| e.name.ends_with("MemoryError"));
    let (limit, message) = match memory_refused {
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

/// The MIME type of an image the driver handed back, from its first bytes:
/// PNG (figures, `_repr_png_`), JPEG, or SVG (`IPython.display.SVG`); `None`
/// for anything else, which is not returned.
fn image_type(data: &[u8]) -> Option<&'static str> {
    if data.starts_with(b"\x89PNG\r\n\x1a\n") {
        return Some("image/png");
    }
    if data.starts_with(b"\xff\xd8\xff") {
        return Some("image/jpeg");
    }
    let head = &data[..data.len().min(4096)];
    let text = String::from_utf8_lossy(head);
    svg_root(text.trim_start_matches('\u{feff}')).then_some("image/svg+xml")
}

/// Whether markup's root element is `<svg`, after an XML declaration,
/// processing instructions, comments and a doctype, if any (HTML that holds
/// an `<svg>` somewhere is not an SVG image).
fn svg_root(mut text: &str) -> bool {
    loop {
        text = text.trim_start();
        let skipped = [("<?", "?>"), ("<!--", "-->"), ("<!", ">")]
            .iter()
            .find(|(open, _)| text.starts_with(open))
            .map(|(open, close)| {
                text[open.len()..]
                    .find(close)
                    .map(|at| open.len() + at + close.len())
            });
        match skipped {
            Some(Some(end)) => text = &text[end..],
            Some(None) => return false,
            None => {
                let rest = text.strip_prefix("<svg").unwrap_or("x");
                return rest.starts_with(|c: char| c.is_whitespace() || c == '>' || c == '/');
            }
        }
    }
}

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
    let (images, unknown): (Vec<_>, Vec<_>) = reply
        .images
        .into_iter()
        .partition(|image| image_type(&image.png).is_some());
    let (fitting, refused): (Vec<_>, Vec<_>) = images
        .into_iter()
        .partition(|image| image.png.len() <= limits.image_bytes);
    let dropped = refused.len() + fitting.len().saturating_sub(limits.max_images);
    execution.images = fitting
        .into_iter()
        .take(limits.max_images)
        .map(|image| ExecImage {
            mime_type: image_type(&image.png).unwrap_or("image/png").into(),
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
    if !unknown.is_empty() {
        execution.stderr.text.push_str(&format!(
            "\n[{} image(s) not returned: their bytes are not a PNG, JPEG or SVG image]\n",
            unknown.len()
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::image_type;

    #[test]
    fn images_are_typed_by_their_first_bytes() {
        assert_eq!(image_type(b"\x89PNG\r\n\x1a\n\0\0"), Some("image/png"));
        assert_eq!(image_type(b"\xff\xd8\xff\xe0JFIF"), Some("image/jpeg"));
        assert_eq!(
            image_type(b"<?xml version=\"1.0\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\"/>"),
            Some("image/svg+xml")
        );
        assert_eq!(image_type(b"GIF89a"), None);
        assert_eq!(image_type(b"<html><body>no</body></html>"), None);
        assert_eq!(
            image_type(b"<!-- a comment -->\n<!DOCTYPE svg>\n<svg width=\"1\"></svg>"),
            Some("image/svg+xml")
        );
        assert_eq!(
            image_type(b"<html><script>alert(1)</script><svg></svg></html>"),
            None
        );
        assert_eq!(image_type(b"<svgx></svgx>"), None);
        assert_eq!(image_type(b"<!-- never closed <svg>"), None);
    }
}
