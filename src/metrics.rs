//! [`Metrics`]: what the server counts, in the Prometheus text format that
//! `/metrics` serves over HTTP. Executions and limit hits are counted as they
//! happen; the gauges (sandboxes alive, the warm pool, the runtime's state)
//! are read from the server when scraped.

use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::sandbox::{BackendKind, Execution, SandboxError};

/// Labels of an execution: its backend and how it ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ExecutionLabels {
    backend: &'static str,
    /// `ok`, `exception` (the code raised), `limit` (a limit stopped it) or
    /// `failed` (it could not run: unknown sandbox, backend error).
    outcome: &'static str,
}

/// Labels of a limit hit: which limit.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabels {
    kind: String,
}

/// Labels of a per-backend figure.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendLabels {
    backend: &'static str,
}

/// The figures read from the server when `/metrics` is scraped.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Sandboxes alive, by backend.
    pub sandboxes: Vec<(BackendKind, usize)>,
    /// Interpreters waiting in the warm pool.
    pub pool_ready: usize,
    /// Whether the default runtime is compiled and loaded.
    pub runtime_ready: bool,
}

/// The server's metrics.
pub struct Metrics {
    registry: Registry,
    executions: Family<ExecutionLabels, Counter>,
    limit_hits: Family<LimitLabels, Counter>,
    latency: Family<BackendLabels, Histogram>,
    sandboxes: Family<BackendLabels, Gauge>,
    pool_ready: Gauge,
    runtime_ready: Gauge,
    /// Encoding takes the registry whole; one scrape at a time.
    encoding: Mutex<()>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Metrics at zero, registered under the `mcp_sandbox` prefix.
    pub fn new() -> Self {
        let mut root = Registry::default();
        let registry = root.sub_registry_with_prefix("mcp_sandbox");
        let executions = Family::<ExecutionLabels, Counter>::default();
        registry.register(
            "executions",
            "Executions run, by backend and how they ended",
            executions.clone(),
        );
        let limit_hits = Family::<LimitLabels, Counter>::default();
        registry.register(
            "limit_hits",
            "Executions stopped by a limit, by limit",
            limit_hits.clone(),
        );
        let latency = Family::<BackendLabels, Histogram>::new_with_constructor(|| {
            // 0.5 ms to about 4.4 minutes.
            Histogram::new(exponential_buckets(0.0005, 2.0, 20))
        });
        registry.register(
            "execution_seconds",
            "Wall time of executions, by backend",
            latency.clone(),
        );
        let sandboxes = Family::<BackendLabels, Gauge>::default();
        registry.register(
            "sandboxes",
            "Sandboxes alive, by backend",
            sandboxes.clone(),
        );
        let pool_ready = Gauge::default();
        registry.register(
            "pool_ready",
            "Interpreters started ahead of time and waiting in the warm pool",
            pool_ready.clone(),
        );
        let runtime_ready = Gauge::default();
        registry.register(
            "runtime_ready",
            "1 when the default runtime is compiled and loaded, else 0",
            runtime_ready.clone(),
        );
        Self {
            registry: root,
            executions,
            limit_hits,
            latency,
            sandboxes,
            pool_ready,
            runtime_ready,
            encoding: Mutex::new(()),
        }
    }

    /// Counts one execution on `backend` that took `elapsed` and ended in `result`.
    pub fn record_execution(
        &self,
        backend: BackendKind,
        result: &Result<Execution, SandboxError>,
        elapsed: Duration,
    ) {
        let outcome = match result {
            Ok(execution) if execution.limit.is_some() => "limit",
            Ok(execution) if execution.error.is_some() => "exception",
            Ok(_) => "ok",
            Err(_) => "failed",
        };
        let backend = backend.name();
        self.executions
            .get_or_create(&ExecutionLabels { backend, outcome })
            .inc();
        if let Ok(Execution {
            limit: Some(hit), ..
        }) = result
        {
            let kind = serde_json::to_value(hit.kind)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_else(|| "other".into());
            self.limit_hits.get_or_create(&LimitLabels { kind }).inc();
        }
        if result.is_ok() {
            self.latency
                .get_or_create(&BackendLabels { backend })
                .observe(elapsed.as_secs_f64());
        }
    }

    /// The metrics in the Prometheus text format, with the gauges set from `now`.
    pub fn render(&self, now: &Snapshot) -> String {
        let _one_at_a_time = self.encoding.lock().unwrap_or_else(|p| p.into_inner());
        for (kind, count) in &now.sandboxes {
            self.sandboxes
                .get_or_create(&BackendLabels {
                    backend: kind.name(),
                })
                .set(*count as i64);
        }
        self.pool_ready.set(now.pool_ready as i64);
        self.runtime_ready.set(i64::from(now.runtime_ready));
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut text, &self.registry);
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::{LimitHit, LimitKind};

    #[test]
    fn executions_limits_and_gauges_are_rendered() {
        let metrics = Metrics::new();
        let ok = Ok(Execution::default());
        metrics.record_execution(BackendKind::Wasm, &ok, Duration::from_millis(2));
        let limited = Ok(Execution {
            limit: Some(LimitHit {
                kind: LimitKind::Timeout,
                limit: "1 s".into(),
                message: String::new(),
            }),
            ..Execution::default()
        });
        metrics.record_execution(BackendKind::Wasm, &limited, Duration::from_secs(1));
        let text = metrics.render(&Snapshot {
            sandboxes: vec![(BackendKind::Wasm, 3)],
            pool_ready: 2,
            runtime_ready: true,
        });
        for line in [
            "mcp_sandbox_executions_total{backend=\"wasm\",outcome=\"ok\"} 1",
            "mcp_sandbox_executions_total{backend=\"wasm\",outcome=\"limit\"} 1",
            "mcp_sandbox_limit_hits_total{kind=\"timeout\"} 1",
            "mcp_sandbox_execution_seconds_count{backend=\"wasm\"} 2",
            "mcp_sandbox_sandboxes{backend=\"wasm\"} 3",
            "mcp_sandbox_pool_ready 2",
            "mcp_sandbox_runtime_ready 1",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }
}
