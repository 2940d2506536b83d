//! What the HTTP benches share: the real binary serving MCP over HTTP on a
//! free loopback port, rmcp clients of either protocol era, and a checked
//! tool call.

// Each bench uses only part of this module.
#![allow(dead_code)]

use std::process::Stdio;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, ProtocolVersion};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

/// An rmcp client over HTTP.
pub type Client = RunningService<RoleClient, ()>;

/// Which protocol a client speaks.
#[derive(Clone, Copy, Debug)]
pub enum Era {
    /// 2026-07-28: no sessions, mirrored headers.
    Stateless,
    /// 2025-11-25: `initialize` and a session.
    Session,
}

/// The server serving HTTP, killed when dropped.
pub struct Server {
    /// Its MCP endpoint.
    pub url: String,
    child: tokio::process::Child,
    _root: tempfile::TempDir,
}

impl Server {
    /// Starts the binary with `serve --http 127.0.0.1:0` and extra `env`,
    /// and waits until it serves and its runtime is loaded.
    pub async fn start(env: &[(&str, &str)]) -> Self {
        let root = tempfile::tempdir().unwrap();
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_mcp-code-sandbox"));
        cmd.args(["serve", "--http", "127.0.0.1:0"])
            .env("SANDBOX_LOG", "warn,mcp_code_sandbox::http=info")
            .env("SANDBOX_RUNTIME", "python-3.12")
            .env("SANDBOX_PIP_PYTHON", "none")
            .env("SANDBOX_ROOT", root.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start the server");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let mut url = None;
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(at) = line.split("serving MCP at ").nth(1) {
                url = Some(at.trim().to_owned());
                break;
            }
        }
        let url = url.expect("the server logs where it serves");
        // Drain the rest of its log so it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let server = Self {
            url,
            child,
            _root: root,
        };
        server.wait_ready().await;
        server
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("running")
    }

    /// Its resident memory now, in KiB (from `/proc`).
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    /// An rmcp client of `era` that has listed the tools.
    pub async fn client(&self, era: Era) -> Client {
        let config = StreamableHttpClientTransportConfig::with_uri(self.url.clone());
        let transport = StreamableHttpClientTransport::with_client(http_client(), config);
        let client = match era {
            Era::Session => ().serve(transport).await,
            Era::Stateless => {
                ().serve_with_lifecycle(
                    transport,
                    ClientLifecycleMode::Discover {
                        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                    },
                )
                .await
            }
        }
        .expect("MCP over HTTP");
        client.list_all_tools().await.expect("tools/list");
        client
    }

    async fn wait_ready(&self) {
        let ready = self.url.trim_end_matches("/mcp").to_owned() + "/readyz";
        let http = http_client();
        for _ in 0..600 {
            if let Ok(r) = http.get(&ready).send().await
                && r.status() == 200
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the server's runtime did not become ready");
    }
}

/// Calls a tool; its structured result. Panics on a tool error.
pub async fn call(client: &Client, tool: &str, args: Value) -> Value {
    try_call(client, tool, args).await.unwrap()
}

/// Calls a tool; its structured result, or what went wrong.
pub async fn try_call(client: &Client, tool: &str, args: Value) -> Result<Value, String> {
    let Value::Object(args) = args else {
        unreachable!()
    };
    let r = client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args))
        .await
        .map_err(|e| format!("{tool}: {e}"))?;
    if r.is_error == Some(true) {
        return Err(format!("{tool}: {:?}", r.content));
    }
    Ok(r.structured_content.unwrap_or(Value::Null))
}

/// An HTTP client for loopback (the server's TLS provider, ring, installed).
pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().no_proxy().build().unwrap()
}
