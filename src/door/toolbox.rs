//! One sandbox's tools: several handlers offered as one (the HTTP tool, the
//! upstream servers' tools), a call going to the handler that offers its
//! name.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value};

use super::{DoorHandler, FailureKind, RequestLog, ToolFailure, ToolValue};

/// Handlers offered together; the first that offers a name answers it.
pub struct Toolbox {
    parts: Vec<Arc<dyn DoorHandler>>,
}

impl Toolbox {
    /// The handlers in `parts`, one handler.
    pub fn new(parts: Vec<Arc<dyn DoorHandler>>) -> Self {
        Self { parts }
    }
}

/// The tools in order, each name kept the first time it comes (a later one
/// is logged and left out).
fn first_of_each_name(tools: impl IntoIterator<Item = Value>) -> Vec<Value> {
    let mut seen = std::collections::HashSet::new();
    tools
        .into_iter()
        .filter(|tool| {
            let name = tool["name"].as_str().unwrap_or_default().to_owned();
            let first = seen.insert(name.clone());
            if !first {
                tracing::warn!(tool = %name, "left out: another tool has this name");
            }
            first
        })
        .collect()
}

#[async_trait]
impl DoorHandler for Toolbox {
    /// Every part's tools; a name offered twice is listed once, the first
    /// part's (the one a call goes to), so the guest never sees two tools
    /// with one name.
    async fn tools(&self, bound: Duration) -> Vec<Value> {
        let lists = futures::future::join_all(self.parts.iter().map(|part| part.tools(bound)));
        first_of_each_name(lists.await.into_iter().flatten())
    }

    fn offers(&self, tool: &str) -> bool {
        self.parts.iter().any(|part| part.offers(tool))
    }

    async fn call(
        &self,
        tool: &str,
        args: Map<String, Value>,
        bound: Duration,
        log: &RequestLog,
    ) -> Result<ToolValue, ToolFailure> {
        match self.parts.iter().find(|part| part.offers(tool)) {
            Some(part) => part.call(tool, args, bound, log).await,
            None => Err(ToolFailure::new(
                FailureKind::UnknownTool,
                format!(
                    "no tool named {:?}; `from host import tools; help(tools)` lists this sandbox's tools",
                    tool.chars().take(64).collect::<String>()
                ),
            )),
        }
    }
}
