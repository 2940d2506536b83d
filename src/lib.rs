//! mcp-code-sandbox: an MCP server that gives AI assistants a safe place to
//! run Python.
//!
//! By default each sandbox is CPython compiled to WASI, running inside this
//! process under wasmtime with one host directory of its own, no network, and
//! memory, time (wall clock and, when set, CPU) and output limits on every
//! execution.
//!
//! # Layout
//!
//! - [`cli`]: flags and environment variables, as parsed from the command line.
//! - [`config`]: the checked, typed configuration built from them.
//! - [`app`]: builds the backends and the manager from the configuration (the
//!   factory), and runs the stdio server.
//! - [`auth`]: authorization for the HTTP server: static bearer tokens and
//!   OAuth 2.1 access tokens, checked in front of the MCP routes.
//! - [`server`]: the ten MCP tools, their arguments and their results.
//! - [`sandbox`]: the interpreter trait every backend implements, the types that
//!   cross it, guest paths, the file tools on a local directory, disk quotas,
//!   the sandbox root, and the manager of live sandboxes.
//! - [`wasm`]: the local backend: runtime manifests (python-3.12, and the
//!   scientific CPython 3.15), loading them (verify, weave the quota gates,
//!   compile or read the module cache, read-only mounts, link), the engine,
//!   and one CPython instance per sandbox with its driver (plots, tables).
//! - [`e2b`]: the E2B backend: the control-plane client, files through
//!   envd, the code interpreter's execution stream, and one sandbox per VM.
//! - [`packages`]: `install_package` for local sandboxes: requirements,
//!   the index and wheelhouse, resolution, the host wheel cache, and the safe
//!   unpacker that puts pure-Python wheels into a sandbox's site-packages.
//! - [`oneshot`]: `mcp-code-sandbox exec`, one execution from the command line.
//! - [`http`]: serving MCP over Streamable HTTP (`serve --http`), with the
//!   operations routes (`/healthz`, `/readyz`, `/metrics`).
//! - [`metrics`]: what the server counts, in the Prometheus text format.
//! - [`bundle`]: reading and checking an air-gapped bundle ([`app`] makes one).
//! - [`digest`]: sha256 of files and streams.
//!
//! Dependencies point one way, with no circle between these modules (nor
//! between the files of one folder): `main`
//! → [`app`], [`http`], [`oneshot`] → [`server`] and [`config`] (with [`cli`],
//! [`auth`], [`bundle`]) → the manager and the backends ([`wasm`], [`e2b`]) →
//! [`packages`] and [`door`] → the core, [`sandbox`] (its trait, types,
//! errors, files and quotas), which imports none of them: each backend
//! converts its errors into [`sandbox::SandboxError::Backend`] at its edge,
//! the door's usage records are core types, and the machine's defaults are
//! read by the core itself.
#![deny(clippy::print_stdout, clippy::dbg_macro)]

pub mod app;
pub mod auth;
pub mod bundle;
pub mod cli;
pub mod config;
pub mod digest;
pub mod door;
pub mod e2b;
pub mod http;
pub mod metrics;
pub mod oneshot;
pub mod packages;
pub mod sandbox;
pub mod server;
pub mod wasm;
