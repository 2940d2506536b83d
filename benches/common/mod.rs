//! What the benches share: an [`App`] built as the binary builds it, with its
//! runtime loaded before anything is timed, and a checked execution.

// Each bench uses only part of this module.
#![allow(dead_code)]

use std::time::Duration;

use clap::Parser;
use mcp_code_sandbox::app::App;
use mcp_code_sandbox::cli::Cli;
use mcp_code_sandbox::config::Config;
use mcp_code_sandbox::sandbox::Execution;
use mcp_code_sandbox::sandbox::manager::Sandbox;
use tokio_util::sync::CancellationToken;

/// Sets what the binary sets as it starts (no stack backtrace captured for
/// each error it handles), so a bench run with `RUST_BACKTRACE=1` times what
/// the server does. Call it first, before the bench starts any thread.
pub fn as_the_binary_starts() {
    // SAFETY: called before the bench starts any thread of its own.
    unsafe { mcp_code_sandbox::app::no_backtraces_for_handled_errors() };
}

/// An app configured by `flags` (as on the command line), with sandboxes
/// under a temporary directory named after `bench`, and its default runtime
/// loaded; `None`, with a note, when that runtime cannot be loaded here (e.g.
/// the scientific runtime was not fetched).
pub fn try_app(rt: &tokio::runtime::Runtime, bench: &str, flags: &[&str]) -> Option<App> {
    let root = std::env::temp_dir().join(format!("mcp-bench-{bench}-{}", std::process::id()));
    let mut args = vec![
        "mcp-code-sandbox",
        "--log",
        "warn",
        "--root",
        root.to_str().unwrap(),
    ];
    // The figures in docs/src/performance.md are for python-3.12 unless a bench names
    // its runtime.
    if !flags.contains(&"--runtime") {
        args.extend_from_slice(&["--runtime", "python-3.12"]);
    }
    args.extend_from_slice(flags);
    let cli = Cli::try_parse_from(args).unwrap();
    let config = Config::from_settings(&cli.settings).unwrap();
    let app = rt.block_on(async { App::build(config) }).unwrap();
    match rt.block_on(app.wasm.preload(None)) {
        Ok(()) => Some(app),
        Err(e) => {
            eprintln!("note: skipping {bench} {flags:?}: {e}");
            None
        }
    }
}

/// Like [`try_app`], for the default runtime, which every bench needs.
pub fn app(rt: &tokio::runtime::Runtime, bench: &str, flags: &[&str]) -> App {
    try_app(rt, bench, flags).expect("run ./fetch-python.sh first")
}

/// Runs `code` in `sandbox` (up to 300 s) and checks it neither raised nor
/// hit a limit, so a broken bench cannot pass for a fast one.
pub async fn run_ok(sandbox: &Sandbox, code: &str) -> Execution {
    let e = sandbox
        .execute(
            code.to_owned(),
            Some(Duration::from_secs(300)),
            CancellationToken::new(),
            None,
        )
        .await
        .unwrap();
    assert!(e.error.is_none() && e.limit.is_none(), "{e:?}");
    e
}

/// Closes `sandbox` (dropping the caller's handle first, as a client's
/// `close_sandbox` would find it).
pub async fn close(app: &App, sandbox: std::sync::Arc<Sandbox>) {
    let id = sandbox.id().to_owned();
    drop(sandbox);
    app.manager
        .close(&mcp_code_sandbox::sandbox::Owner::anyone(), &id)
        .await
        .unwrap();
}

/// The pinned wheels of the notebook tests (requests and its dependencies),
/// fetched by tests/fetch-notebook-wheels.sh when they are not there yet.
pub fn notebook_wheels() -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("notebook-wheels");
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fetch-notebook-wheels.sh");
    let status = std::process::Command::new("sh")
        .arg(script)
        .arg(&dir)
        .status()
        .expect("run tests/fetch-notebook-wheels.sh");
    assert!(status.success(), "could not fetch the pinned wheels");
    dir
}

/// Runs `body` `iters` times inside the sandbox, timed by the guest.
pub fn guest_loop(
    rt: &tokio::runtime::Runtime,
    sandbox: &Sandbox,
    setup: &str,
    body: &str,
    iters: u64,
) -> Duration {
    let code = format!(
        "{setup}\nimport time\n_t = time.perf_counter_ns()\nfor _ in range({iters}):\n    {body}\ntime.perf_counter_ns() - _t"
    );
    let e = rt.block_on(run_ok(sandbox, &code));
    Duration::from_nanos(e.value.unwrap().parse().unwrap())
}
