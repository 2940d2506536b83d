//! [`Offer`]: what this server can really give a sandbox (the runtimes whose
//! files are fetched, the backends that are configured), and the tool
//! descriptions, argument descriptions and instructions that say so: a model
//! is only offered what works.

use std::sync::Arc;

use rmcp::handler::server::router::tool::ToolRouter;
use serde_json::Value;

use crate::sandbox::{BackendKind, SandboxError};

/// What this server offers.
#[derive(Clone, Debug)]
pub struct Offer {
    /// Local runtimes that can start now: name and summary, the default first.
    pub runtimes: Vec<(String, String)>,
    /// The backend of a sandbox that names none.
    pub default_backend: BackendKind,
    /// The E2B template of `e2b` sandboxes, when E2B is configured.
    pub e2b_template: Option<String>,
}

impl Offer {
    /// Whether `runtime` can be asked of `backend`: a local runtime's name
    /// means nothing to E2B (there, `runtime` is a template name).
    pub fn check(&self, backend: BackendKind, runtime: Option<&str>) -> Result<(), SandboxError> {
        match (backend, runtime) {
            (BackendKind::E2b, Some(name)) if self.runtimes.iter().any(|(n, _)| n == name) => {
                Err(SandboxError::InvalidArgument(format!(
                    "'{name}' is a runtime of local sandboxes; on the e2b backend, runtime names an E2B template (the server's is {}): leave runtime out, or use backend \"wasm\" for '{name}'",
                    self.e2b_template.as_deref().unwrap_or("not configured")
                )))
            }
            _ => Ok(()),
        }
    }

    /// The server's instructions to the model.
    pub fn instructions(&self) -> String {
        let mut text = String::from(
            "This server runs Python 3 in isolated sandboxes. Call create_sandbox (or create_run_close \
for a one-off), then execute_code; variables and imports persist between calls in a sandbox, and a \
final expression's value is returned. Local sandboxes have no network and see only their own \
directory, which is '/'; move files with write_file, upload_file, read_file (a page at a time) and \
list_files. Every execution has a time, memory and output limit; results say when one was hit, and \
long output keeps its head and tail with the whole saved in a file.",
        );
        match self.runtimes.iter().position(|(n, _)| n == "scientific") {
            Some(0) => text.push_str(&format!(
                " Sandboxes run \"scientific\" by default: {}; numpy, pandas and matplotlib.pyplot are already imported when a sandbox starts. fork_sandbox copies a sandbox (variables, imports and files) to try alternatives from one state.",
                self.runtimes[0].1
            )),
            Some(i) => {
                let (name, summary) = &self.runtimes[i];
                text.push_str(&format!(
                    " For data work, create the sandbox with runtime \"{name}\": {summary}."
                ));
            }
            None => {}
        }
        text
    }

    /// What `runtime` means, for the argument's description.
    fn runtime_argument(&self) -> String {
        let mut text = String::from("Python runtime of a local sandbox, by name: ");
        let names: Vec<String> = self
            .runtimes
            .iter()
            .enumerate()
            .map(|(i, (name, summary))| {
                let default = if i == 0 { ", the default" } else { "" };
                format!("\"{name}\" ({summary}{default})")
            })
            .collect();
        text.push_str(if names.is_empty() {
            "none is installed on this server yet"
        } else {
            ""
        });
        text.push_str(&names.join(" or "));
        text.push('.');
        if let Some(template) = &self.e2b_template {
            text.push_str(&format!(
                " With backend \"e2b\" it names an E2B template instead (default \"{template}\")."
            ));
        }
        text
    }

    /// What `backend` means, for the argument's description.
    fn backend_argument(&self) -> String {
        match (&self.e2b_template, self.default_backend) {
            (Some(_), BackendKind::E2b) => "Backend: \"e2b\" (an E2B cloud VM, the default) or \"wasm\" (a local WebAssembly sandbox).".into(),
            (Some(_), BackendKind::Wasm) => "Backend: \"wasm\" (a local WebAssembly sandbox, the default) or \"e2b\" (an E2B cloud VM).".into(),
            (None, _) => "Backend: \"wasm\" (a local WebAssembly sandbox; the only one this server has configured).".into(),
        }
    }

    /// `create_sandbox`'s description.
    fn create_description(&self) -> String {
        let runtimes: Vec<String> = self
            .runtimes
            .iter()
            .map(|(name, summary)| format!("\"{name}\" ({summary})"))
            .collect();
        let mut text = String::from(
            "Create a Python sandbox and return its session_id. A local sandbox is CPython compiled to \
WebAssembly: no network, only its own directory ('/'), and time, memory and output limits on every \
execution.",
        );
        if runtimes.len() > 1 {
            text.push_str(&format!(
                " runtime picks the Python: {}.",
                runtimes.join(" or ")
            ));
        }
        if self.e2b_template.is_some() {
            text.push_str(" backend \"e2b\" creates an E2B cloud VM instead.");
        }
        text.push_str(
            " Optional: session_id (your own id; an existing one is reported, not replaced), \
timeout_seconds, memory_mb, runtime, backend.",
        );
        text
    }

    /// Puts what this server offers into the tools' descriptions and
    /// argument schemas.
    pub fn describe<S>(&self, router: &mut ToolRouter<S>) {
        let runtime = self.runtime_argument();
        let backend = self.backend_argument();
        for tool in ["create_sandbox", "create_run_close"] {
            let Some(route) = router.map.get_mut(tool) else {
                continue;
            };
            if tool == "create_sandbox" {
                route.attr.description = Some(self.create_description().into());
            }
            let mut schema = (*route.attr.input_schema).clone();
            set_property_description(&mut schema, "runtime", &runtime);
            set_property_description(&mut schema, "backend", &backend);
            route.attr.input_schema = Arc::new(schema);
        }
        if self.e2b_template.is_some() {
            self.mark_remote_tools_open_world(router);
        }
    }

    /// With E2B configured, every tool but the local-only `fork_sandbox`
    /// may act on a cloud VM: an open world.
    fn mark_remote_tools_open_world<S>(&self, router: &mut ToolRouter<S>) {
        for (name, route) in router.map.iter_mut() {
            if name == "fork_sandbox" {
                continue;
            }
            if let Some(annotations) = route.attr.annotations.as_mut() {
                annotations.open_world_hint = Some(true);
            }
        }
    }
}

fn set_property_description(schema: &mut serde_json::Map<String, Value>, name: &str, text: &str) {
    if let Some(Value::Object(property)) =
        schema.get_mut("properties").and_then(|p| p.get_mut(name))
    {
        property.insert("description".into(), Value::String(text.into()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer(runtimes: &[&str], e2b: bool) -> Offer {
        Offer {
            runtimes: runtimes
                .iter()
                .map(|n| ((*n).to_owned(), format!("about {n}")))
                .collect(),
            default_backend: BackendKind::Wasm,
            e2b_template: e2b.then(|| "code-interpreter-v1".to_owned()),
        }
    }

    #[test]
    fn only_what_works_is_offered() {
        let small = offer(&["python-3.12"], false);
        assert!(!small.instructions().contains("scientific"));
        assert!(!small.create_description().contains("scientific"));
        assert!(!small.backend_argument().contains("e2b"));
        assert!(small.runtime_argument().contains("\"python-3.12\""));
        let by_default = offer(&["scientific", "python-3.12"], false);
        assert!(
            by_default
                .instructions()
                .contains("\"scientific\" by default")
        );
        let full = offer(&["python-3.12", "scientific"], true);
        assert!(full.instructions().contains("runtime \"scientific\""));
        assert!(full.create_description().contains("\"scientific\""));
        assert!(full.runtime_argument().contains("E2B template"));
        assert!(full.check(BackendKind::E2b, Some("scientific")).is_err());
        assert!(full.check(BackendKind::E2b, Some("my-template")).is_ok());
        assert!(full.check(BackendKind::Wasm, Some("scientific")).is_ok());
    }
}
