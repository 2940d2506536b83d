//! The E2B backend: each sandbox is a VM of E2B's code-interpreter template,
//! reached over HTTPS. Code runs in the VM's Jupyter kernel (state persists
//! between calls, as locally), files move through the VM's daemon, and the
//! VM is killed when the sandbox closes and at shutdown.
//!
//! What differs from the local backend: the VM has the network and a full
//! Linux (native wheels, subprocesses); the sandbox's `/` is the VM's `/`
//! (see [`paths`] for how the tools and the code agree on it); fuel, the memory
//! cap and the disk quota are E2B's own (set by the template, not by this
//! server); a timeout drops the connection, which makes E2B interrupt the
//! code, and state is normally kept.

mod api;
pub mod config;
mod envd;
pub mod error;
mod jupyter;
mod listing;
mod names;
mod output;
mod paths;
mod pip;
pub mod pip_error;
mod results;
mod route;
mod sandbox;
mod transport;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rand::Rng;

use self::api::ApiClient;
pub use self::config::{ApiKey, E2bSettings};
pub use self::error::E2bError;
pub(crate) use self::names::is_template;
use self::route::Route;
use self::sandbox::E2bSandbox;
use self::transport::Clients;
use crate::sandbox::{Backend, BackendKind, CodeInterpreter, SandboxError, SandboxSpec};

/// The E2B cloud backend.
pub struct E2bBackend {
    settings: E2bSettings,
    clients: Clients,
    api: ApiClient,
    tracker: Tracker,
    /// Tags this server's sandboxes on E2B (metadata `mcp-code-sandbox`).
    instance: String,
}

/// The E2B sandboxes this server created and has not killed yet, and the
/// creations under way: what a shutdown must kill so that nothing leaks.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tracker {
    live: Arc<Mutex<HashSet<String>>>,
    creating: Arc<AtomicUsize>,
}

impl Tracker {
    fn remember(&self, id: &str) {
        self.lock().insert(id.to_owned());
    }

    /// Forgets a sandbox that was killed.
    pub(crate) fn forget(&self, id: &str) {
        self.lock().remove(id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl E2bBackend {
    /// A backend with `settings`; nothing is sent to E2B until a sandbox is
    /// created.
    pub fn new(settings: E2bSettings) -> Result<Self, E2bError> {
        let clients = Clients::new(&settings)?;
        let api = ApiClient::new(clients.general.clone(), &settings);
        let instance = format!("{:016x}", rand::rng().random::<u64>());
        Ok(Self {
            settings,
            clients,
            api,
            tracker: Tracker::default(),
            instance,
        })
    }

    /// The settings it runs with.
    pub fn settings(&self) -> &E2bSettings {
        &self.settings
    }

    /// Makes creates in progress give up instead of retrying (the server is
    /// shutting down): a create that already succeeded is tracked, and
    /// [`E2bBackend::shutdown`] kills it.
    pub fn stop_creating(&self) {
        self.api.stop_retrying();
    }

    /// Kills every E2B sandbox this server created that is still alive,
    /// after waiting (a bounded time) for creations under way. Run at
    /// shutdown, after the manager closed its sandboxes.
    pub async fn shutdown(&self) {
        self.stop_creating();
        let waited = tokio::time::Instant::now();
        while self.tracker.creating.load(Ordering::SeqCst) > 0
            && waited.elapsed() < self.settings.request_timeout
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let left: Vec<String> = self.tracker.lock().drain().collect();
        if left.is_empty() {
            return;
        }
        tracing::info!(count = left.len(), "killing E2B sandboxes left at shutdown");
        let kills = left.iter().map(|id| async move {
            match tokio::time::timeout(Duration::from_secs(30), self.api.kill(id)).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::warn!(e2b_id = %id, "could not kill the E2B sandbox: {e}"),
                Err(_) => tracing::warn!(e2b_id = %id, "killing the E2B sandbox timed out"),
            }
        });
        futures::future::join_all(kills).await;
    }
}

#[async_trait]
impl Backend for E2bBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::E2b
    }

    async fn create(&self, spec: SandboxSpec) -> Result<Box<dyn CodeInterpreter>, SandboxError> {
        if spec.allow_hosts.is_some() {
            return Err(SandboxError::InvalidArgument(
                "allow_hosts applies to local sandboxes: an e2b sandbox has E2B's own network, which this server does not filter; leave allow_hosts out, or create a local sandbox (backend \"wasm\", runtime \"scientific\")".into(),
            ));
        }
        let template = spec
            .runtime
            .clone()
            .unwrap_or_else(|| self.settings.template.clone());
        if !names::is_template(&template) {
            return Err(SandboxError::InvalidArgument(format!(
                "'{}' is not an E2B template name: on e2b, `runtime` names an E2B template (letters, digits, '-', '_' and '.', as name, team/name or name:tag); leave it out to get the default",
                names::shown(&template)
            )));
        }
        let metadata = HashMap::from([
            ("mcp-code-sandbox".to_owned(), self.instance.clone()),
            ("session".to_owned(), spec.id.clone()),
        ]);
        // The request runs on its own task: if this call is dropped (the
        // client cancelled), a sandbox E2B still creates is killed, not leaked.
        let (reply, answer) = tokio::sync::oneshot::channel();
        let api = self.api.clone();
        let tracker = self.tracker.clone();
        let lifetime = self.settings.lifetime;
        let task_template = template.clone();
        tracker.creating.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            let created = api.create(&task_template, lifetime, &metadata).await;
            if let Ok(sandbox) = &created {
                tracker.remember(&sandbox.sandbox_id);
            }
            tracker.creating.fetch_sub(1, Ordering::SeqCst);
            if let Err(Ok(orphan)) = reply.send(created) {
                tracing::info!(e2b_id = %orphan.sandbox_id, "killing an E2B sandbox whose creation was cancelled");
                if api.kill(&orphan.sandbox_id).await.is_ok() {
                    tracker.forget(&orphan.sandbox_id);
                }
            }
        });
        let created = answer.await.map_err(|_| E2bError::CreateInterrupted)??;
        tracing::info!(
            id = %spec.id,
            e2b_id = %created.sandbox_id,
            template = %template,
            envd = %created.envd_version,
            "created an E2B sandbox"
        );
        let route = Route::new(&self.settings, &created);
        Ok(Box::new(E2bSandbox::new(
            self.api.clone(),
            self.clients.clone(),
            route,
            template,
            &self.settings,
            self.tracker.clone(),
        )))
    }

    fn default_runtime(&self) -> String {
        self.settings.template.clone()
    }
}
