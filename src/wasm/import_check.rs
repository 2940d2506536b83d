//! [`check_imports`]: after an install, each new package's module is
//! imported in an interpreter of its own, started on the sandbox's
//! directory: the install result can then name an import that fails
//! instead of saying "import them now". The sandbox's own interpreter keeps
//! its state (nothing is imported into it), and an import that hangs costs
//! only its timeout; the checking interpreter has the sandbox's limits and
//! writes, as the sandbox's would, to its files under its quota.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::capture::OutputCapture;
use super::guest_image::GuestImage;
use super::interpreter::{
    CallLimits, DirState, Interpreter, MIN_START_CPU, Outcome, START_TIMEOUT,
};
use super::protocol::{Request, decode_reply};
use crate::sandbox::quota::QuotaLedger;
use crate::sandbox::{ImportFailure, SandboxLimits};

/// Longest the import of one installed module may take when it is checked.
const IMPORT_CHECK_TIMEOUT: Duration = Duration::from_secs(20);
/// Longest the whole check may take, its start included.
const CHECK_TIME: Duration = Duration::from_secs(30);
/// Least memory past its start the checking interpreter must have to run.
const MIN_FREE_MEMORY: u64 = 32 << 20;
/// Most characters of a module name or an error kept in the result.
const MAX_ERROR_CHARS: usize = 300;

/// The sandbox whose modules are checked.
pub(crate) struct CheckedSandbox<'a> {
    /// Its runtime.
    pub image: &'a Arc<GuestImage>,
    /// Its directory.
    pub dir: &'a Path,
    /// Its disk quota's account.
    pub ledger: &'a Arc<QuotaLedger>,
    /// Its limits.
    pub limits: &'a SandboxLimits,
    /// Memory its own interpreter holds now.
    pub memory_in_use: u64,
}

/// Imports each of `modules` in an interpreter of its own started on
/// the sandbox's directory, within [`CHECK_TIME`] in all: the imports that
/// fail, with what they raised (clipped, control characters escaped). The
/// checking interpreter may grow only to what the sandbox's own leaves of
/// its memory cap. An error says why nothing was checked, or that the check
/// was cut short before any import failed; modules left unchecked after a
/// failure are listed as failures "not checked".
pub(crate) async fn check_imports(
    sandbox: CheckedSandbox<'_>,
    modules: &[String],
    cancel: &CancellationToken,
) -> Result<Vec<ImportFailure>, String> {
    if modules.is_empty() {
        return Ok(Vec::new());
    }
    let deadline = Instant::now() + CHECK_TIME;
    let mut limits = sandbox.limits.clone();
    limits.memory_bytes = sandbox
        .limits
        .memory_bytes
        .saturating_sub(sandbox.memory_in_use);
    if limits.memory_bytes < sandbox.image.initial_memory + MIN_FREE_MEMORY {
        return Err("the sandbox's interpreter holds nearly all of its memory cap".into());
    }
    let started = Interpreter::start(
        sandbox.image,
        sandbox.dir,
        DirState::Used,
        sandbox.ledger.clone(),
        &limits,
        START_TIMEOUT.min(CHECK_TIME),
        None,
    );
    let mut interpreter = tokio::select! {
        started = started => started.map_err(|e| format!("the interpreter that checks them did not start: {e}"))?,
        () = cancel.cancelled() => return Err("the install was stopped".into()),
    };
    let mut failures = Vec::new();
    let mut checked = 0;
    for module in modules {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        checked += 1;
        let call_limits = CallLimits {
            fuel: limits.fuel,
            cpu: limits.cpu.map(|cpu| cpu.max(MIN_START_CPU)),
            timeout: left.min(IMPORT_CHECK_TIMEOUT),
            reply_bytes: 64 << 10,
        };
        let (outcome, _, _) = interpreter
            .call(
                &Request::Preload {
                    modules: std::slice::from_ref(module),
                },
                call_limits,
                cancel,
                OutputCapture::discard(),
                OutputCapture::discard(),
            )
            .await;
        let error = match outcome {
            Outcome::Reply { body, .. } => match decode_reply(&body) {
                Ok(reply) => reply.error.map(|e| format!("{}: {}", e.name, e.value)),
                Err(_) => None,
            },
            Outcome::TimedOut => Some(format!(
                "its import took longer than {} s",
                call_limits.timeout.as_secs()
            )),
            Outcome::Exited(exit) => Some(format!("its import stopped the interpreter: {exit}")),
            Outcome::Cancelled | Outcome::CancelledUnstarted => break,
        };
        if let Some(error) = error {
            failures.push(ImportFailure {
                module: clipped(module),
                error: clipped(&error),
            });
        }
        if !interpreter.is_alive() {
            break;
        }
    }
    interpreter.kill();
    if checked < modules.len() || cancel.is_cancelled() {
        let rest: Vec<String> = modules[checked.min(modules.len())..]
            .iter()
            .map(|m| clipped(m))
            .collect();
        let what = if rest.is_empty() {
            "the check was stopped".to_owned()
        } else {
            format!(
                "the check stopped (out of time, or its interpreter gone) before {}",
                rest.join(", ")
            )
        };
        if failures.is_empty() {
            return Err(what);
        }
        if !rest.is_empty() {
            failures.push(ImportFailure {
                module: rest.join(", "),
                error: format!("not checked: {what}"),
            });
        }
    }
    Ok(failures)
}

/// `text` as a result shows guest-made text: control characters escaped,
/// at most [`MAX_ERROR_CHARS`] characters.
fn clipped(text: &str) -> String {
    let mut out = String::new();
    for (n, c) in text.chars().enumerate() {
        if n == MAX_ERROR_CHARS {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_text_is_clipped_and_its_control_characters_escaped() {
        assert_eq!(
            clipped("ImportError: no\n\x1b[2Jmodule"),
            "ImportError: no\\n\\u{1b}[2Jmodule"
        );
        let long = "x".repeat(5000);
        assert_eq!(clipped(&long).chars().count(), MAX_ERROR_CHARS + 1);
    }
}
