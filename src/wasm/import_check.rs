//! [`check_imports`]: after an install, each new package's module is
//! imported in an interpreter of its own, started on the sandbox's
//! directory: the install result can then name an import that fails
//! instead of saying "import them now". The sandbox's own interpreter keeps
//! its state (nothing is imported into it), and an import that hangs costs
//! only its timeout; the checking interpreter has the sandbox's limits and
//! writes, as the sandbox's would, to its files under its quota.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::capture::OutputCapture;
use super::interpreter::{
    CallLimits, DirState, GuestImage, Interpreter, MIN_START_CPU, Outcome, START_TIMEOUT,
};
use super::protocol::{Request, decode_reply};
use crate::sandbox::quota::QuotaLedger;
use crate::sandbox::{ImportFailure, SandboxLimits};

/// Longest the import of one installed module may take when it is checked.
const IMPORT_CHECK_TIMEOUT: Duration = Duration::from_secs(20);

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
}

/// Imports each of `modules` in an interpreter of its own started on
/// the sandbox's directory (the sandbox's own interpreter keeps its
/// state, and a module whose import hangs costs nothing but time):
/// the imports that fail, with what they raised.
pub(crate) async fn check_imports(
    sandbox: CheckedSandbox<'_>,
    modules: &[String],
    cancel: &CancellationToken,
) -> Vec<ImportFailure> {
    if modules.is_empty() {
        return Vec::new();
    }
    let started = Interpreter::start(
        sandbox.image,
        sandbox.dir,
        DirState::Used,
        sandbox.ledger.clone(),
        sandbox.limits,
        START_TIMEOUT,
    )
    .await;
    let mut interpreter = match started {
        Ok(interpreter) => interpreter,
        Err(e) => {
            tracing::warn!(error = %e, "could not start an interpreter to check the installed modules");
            return Vec::new();
        }
    };
    let limits = CallLimits {
        fuel: sandbox.limits.fuel,
        cpu: sandbox.limits.cpu.map(|cpu| cpu.max(MIN_START_CPU)),
        timeout: IMPORT_CHECK_TIMEOUT,
        reply_bytes: 64 << 10,
    };
    let mut failures = Vec::new();
    for module in modules {
        let (outcome, _, _) = interpreter
            .call(
                &Request::Preload {
                    modules: std::slice::from_ref(module),
                },
                limits,
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
                IMPORT_CHECK_TIMEOUT.as_secs()
            )),
            Outcome::Exited(exit) => Some(format!("its import stopped the interpreter: {exit}")),
            Outcome::Cancelled => break,
        };
        if let Some(error) = error {
            failures.push(ImportFailure {
                module: module.clone(),
                error,
            });
        }
        if !interpreter.is_alive() {
            break;
        }
    }
    interpreter.kill();
    failures
}
