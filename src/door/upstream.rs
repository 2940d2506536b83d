//! The tools of upstream MCP servers, offered to guests through the door:
//! `from host import tools; tools.<server>_<tool>(**kwargs)`, with the
//! signature and docstring the guest makes from each tool's schema.
//!
//! - [`spec`]: the upstreams file (`SANDBOX_UPSTREAMS`).
//! - [`connection`]: one server: started once, shared, started again when it
//!   has died (starts rationed).
//! - [`process`]: a command's process group, watched and killed with it.
//! - [`bounded_lines`]: a command's stderr read line by line in bounded memory.
//! - [`results`]: descriptors as guests see them, results as Python values.

pub mod bounded_lines;
pub mod connection;
pub mod process;
pub mod results;
pub mod spec;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value};

pub use connection::Upstream;
pub use spec::{UpstreamSpec, UpstreamsFileError};

use super::{DoorHandler, FailureKind, RequestLog, ToolFailure, ToolValue};

/// Every upstream server, shared by all sandboxes.
pub struct Upstreams {
    servers: Vec<Arc<Upstream>>,
}

impl Upstreams {
    /// The servers `specs` describe; none is started yet.
    pub fn new(specs: &[UpstreamSpec]) -> Self {
        Self {
            servers: specs
                .iter()
                .map(|spec| Arc::new(Upstream::new(spec.clone())))
                .collect(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Starts every server now (each in its own task), so the first guest
    /// to list the tools does not wait for them.
    pub fn start_all(&self) {
        for server in &self.servers {
            let server = server.clone();
            tokio::spawn(async move {
                let _ = server.peer().await;
            });
        }
    }

    /// Stops every server.
    pub async fn stop_all(&self) {
        futures::future::join_all(self.servers.iter().map(|s| s.stop())).await;
    }

    fn owner_of(&self, guest_name: &str) -> Option<(&Upstream, String)> {
        self.servers
            .iter()
            .find_map(|s| s.upstream_name(guest_name).map(|name| (s.as_ref(), name)))
    }
}

#[async_trait]
impl DoorHandler for Upstreams {
    /// Each server's tools; a server not running yet is started first
    /// (within `bound`), and one that cannot start offers what it last
    /// listed.
    async fn tools(&self, bound: Duration) -> Vec<Value> {
        let started = self.servers.iter().map(|server| async move {
            let _ = tokio::time::timeout(bound, server.peer()).await;
            server.offered()
        });
        let lists = futures::future::join_all(started).await;
        // The toolbox around these lists each name once.
        let tools = lists.into_iter().flatten();
        tools.map(|tool| tool.descriptor).collect()
    }

    fn offers(&self, tool: &str) -> bool {
        self.owner_of(tool).is_some()
    }

    async fn call(
        &self,
        tool: &str,
        args: Map<String, Value>,
        bound: Duration,
        _log: &RequestLog,
    ) -> Result<ToolValue, ToolFailure> {
        let Some((server, name)) = self.owner_of(tool) else {
            return Err(ToolFailure::new(
                FailureKind::UnknownTool,
                format!("no upstream tool named {tool:?}"),
            ));
        };
        server.call(&name, args, bound).await.map(ToolValue::from)
    }
}
