//! The `install_package` tool through the door: what `%pip install`,
//! `!pip install`, `subprocess` running `python -m pip install` and
//! `pip.main` turn into inside a sandbox. It runs the host's installer
//! ([`Installer::install`], the same entry point as the `install_package` MCP
//! tool, so the same rules, refusals and messages), into the sandbox's own
//! site-packages, while the execution that asked waits.
//!
//! The sandbox's turn is held by the execution, so no other call to the
//! sandbox runs meanwhile; the install is bounded by what is left of the
//! execution's time (stopped a little before its deadline, so the guest
//! hears why instead of being stopped with it) and by the installer's own
//! timeout and budgets; a stopped install leaves the sandbox as it was. The
//! guest makes the new packages importable itself once it has the answer.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use super::{DoorHandler, FailureKind, RequestLog, ToolFailure, ToolValue};
use crate::packages::{InstallTarget, Installer, PackageError, split_requirements};
use crate::sandbox::{InstallReport, SandboxError};

/// The tool's name, as guests call it.
pub const TOOL: &str = "install_package";

/// How long before the door's bound an install is stopped: the bound runs
/// a little past the execution's deadline, and the guest should hear that
/// the install ran out of time while it can still say so.
const STOP_BEFORE_BOUND: Duration = Duration::from_secs(3);

/// The install tool of one sandbox.
pub struct InstallTool {
    installer: Option<Arc<Installer>>,
    target: InstallTarget,
}

impl InstallTool {
    /// Installs into `target` with `installer` (none: the server has no
    /// package source, and every call says how to configure one).
    pub fn new(installer: Option<Arc<Installer>>, target: InstallTarget) -> Self {
        Self { installer, target }
    }

    /// Installs `requirements`, within `bound`.
    async fn install(
        &self,
        requirements: &[String],
        bound: Duration,
    ) -> Result<ToolValue, ToolFailure> {
        let Some(installer) = &self.installer else {
            return Err(refused(PackageError::NotConfigured));
        };
        let usable = bound.saturating_sub(STOP_BEFORE_BOUND);
        let cancel = CancellationToken::new();
        let progress = |_: String| {};
        let installing = installer.install(requirements, &self.target, &progress, &cancel);
        let outcome = stop_at(usable, &cancel, installing).await;
        // The installer wrote behind the ledger's back (or cleaned up after itself).
        self.target.ledger.forget();
        match outcome {
            Ok(report) => {
                let value = serde_json::to_value(&report).unwrap_or(Value::Null);
                Ok(json!({ "report": value }).into())
            }
            Err(Stopped::InTime(e)) => Err(refused(e)),
            Err(Stopped::Late) => Err(ToolFailure::new(
                FailureKind::Timeout,
                format!(
                    "the install did not finish in the {:.0} s left of this execution, so it was stopped and nothing was changed; run it again with a longer timeout_seconds, or call the install_package tool",
                    usable.as_secs_f64()
                ),
            )),
        }
    }
}

/// Why an install gave no report.
enum Stopped {
    /// It failed by itself (a refusal, a budget, the installer's own timeout).
    InTime(PackageError),
    /// It ran out of the execution's time, was stopped, and has ended.
    Late,
}

/// Runs `installing` for `usable` at most; past that, cancels it with
/// `cancel` and waits for it to end (at its next stop check), so that when
/// this returns nothing is writing into the sandbox any more. An install
/// that finished after all (past its last stop check) is reported as done.
async fn stop_at(
    usable: Duration,
    cancel: &CancellationToken,
    installing: impl std::future::Future<Output = Result<InstallReport, PackageError>>,
) -> Result<InstallReport, Stopped> {
    tokio::pin!(installing);
    let in_time = tokio::select! {
        outcome = &mut installing => Some(outcome),
        () = tokio::time::sleep(usable) => None,
    };
    if let Some(outcome) = in_time {
        return outcome.map_err(Stopped::InTime);
    }
    cancel.cancel();
    match installing.await {
        Ok(report) => Ok(report),
        Err(PackageError::Cancelled) => Err(Stopped::Late),
        Err(e) => Err(Stopped::InTime(e)),
    }
}

/// A refusal or failure of the installer, in the words the
/// `install_package` tool uses for it.
fn refused(e: PackageError) -> ToolFailure {
    ToolFailure::new(FailureKind::ToolError, SandboxError::from(e).to_string())
}

/// The requirements asked for: `requirements` (a list of strings, as pip's
/// arguments come), or `package_name` (one string, as the MCP tool takes it).
fn read_requirements(args: &Map<String, Value>) -> Result<Vec<String>, ToolFailure> {
    let invalid = |m: &str| ToolFailure::new(FailureKind::InvalidArguments, format!("{TOOL}: {m}"));
    let requirements = match (args.get("requirements"), args.get("package_name")) {
        (Some(Value::Array(items)), None) => items
            .iter()
            .map(|item| item.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| invalid("requirements must be a list of strings"))?,
        (None, Some(Value::String(text))) => split_requirements(text),
        _ => {
            return Err(invalid(
                "give requirements (a list of strings, e.g. [\"six\", \"attrs==23.2.0\"]) or package_name (one string)",
            ));
        }
    };
    if requirements.iter().all(|r| r.trim().is_empty()) {
        return Err(invalid(
            "no requirement given: name a package such as \"attrs\"",
        ));
    }
    Ok(requirements)
}

#[async_trait]
impl DoorHandler for InstallTool {
    fn offers(&self, tool: &str) -> bool {
        tool == TOOL
    }

    async fn tools(&self, _bound: Duration) -> Vec<Value> {
        vec![json!({
            "name": TOOL,
            "description": "Install pure-Python packages (and their dependencies) into this sandbox, as the install_package MCP tool does; importable right after. %pip install and pip run from code use it already.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "requirements": {"type": "array", "items": {"type": "string"}, "description": "requirement strings, e.g. [\"six\", \"attrs==23.2.0\"]"},
                    "package_name": {"type": "string", "description": "requirements in one string, separated by spaces or commas"}
                }
            },
            "annotations": {"openWorldHint": true}
        })]
    }

    async fn call(
        &self,
        tool: &str,
        args: Map<String, Value>,
        bound: Duration,
        _log: &RequestLog,
    ) -> Result<ToolValue, ToolFailure> {
        if tool != TOOL {
            return Err(ToolFailure::new(
                FailureKind::UnknownTool,
                format!("no tool named {tool:?} here"),
            ));
        }
        let requirements = read_requirements(&args)?;
        self.install(&requirements, bound).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::atomic::{AtomicBool, Ordering};

    #[tokio::test]
    async fn an_install_out_of_time_is_cancelled_and_waited_for() {
        let cancel = CancellationToken::new();
        let ended = AtomicBool::new(false);
        // An install that sees the stop only at its next check, 200 ms on.
        let installing = async {
            cancel.cancelled().await;
            tokio::time::sleep(Duration::from_millis(200)).await;
            ended.store(true, Ordering::SeqCst);
            Err(PackageError::Cancelled)
        };
        let outcome = stop_at(Duration::from_millis(50), &cancel, installing).await;
        assert!(matches!(outcome, Err(Stopped::Late)));
        assert!(cancel.is_cancelled());
        assert!(ended.load(Ordering::SeqCst), "answered while still at work");
    }

    fn args(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn requirements_come_as_a_list_or_as_one_string() {
        assert_eq!(
            read_requirements(&args(json!({"requirements": ["six", "attrs==23.2.0"]}))).unwrap(),
            ["six", "attrs==23.2.0"]
        );
        assert_eq!(
            read_requirements(&args(json!({"package_name": "six, attrs >= 23"}))).unwrap(),
            ["six", "attrs>=23"]
        );
        for bad in [
            json!({}),
            json!({"requirements": "six"}),
            json!({"requirements": [1]}),
            json!({"requirements": []}),
            json!({"package_name": "  "}),
            json!({"requirements": ["six"], "package_name": "six"}),
        ] {
            let failure = read_requirements(&args(bad.clone())).expect_err("refused");
            assert_eq!(failure.kind, FailureKind::InvalidArguments, "{bad}");
        }
    }
}
