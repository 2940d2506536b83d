//! The `mcp-code-sandbox` binary: parse settings, start logging, build the
//! app, then serve MCP on stdio or HTTP (or run one of the subcommands).

use std::io::{IsTerminal, Read};
use std::process::ExitCode;

use clap::Parser;
use mcp_code_sandbox::app::App;
use mcp_code_sandbox::auth::PrincipalLimits;
use mcp_code_sandbox::auth::tokens;
use mcp_code_sandbox::cli::{Cli, Command, TokenArgs, WheelhouseCommand};
use mcp_code_sandbox::config::Config;
use mcp_code_sandbox::oneshot;

fn main() -> ExitCode {
    load_env_file();
    // SAFETY: main's first steps; no other thread runs yet.
    unsafe { mcp_code_sandbox::app::no_backtraces_for_handled_errors() };
    let cli = Cli::parse();
    let config = match Config::from_settings(&cli.settings) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("mcp-code-sandbox: {e}");
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(tracing_subscriber::EnvFilter::new(log_filter(&config.log)))
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("mcp-code-sandbox: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let status = runtime.block_on(run(cli.command.unwrap_or(Command::Serve), config));
    // Everything that matters is done (sandboxes saved, E2B told); what may
    // still run is a blocking read of stdin, which cannot be cancelled.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    status
}

/// The log filter: the setting, with the package solver's steps kept to
/// warnings, and rmcp's own messages (one per
/// notification at INFO) kept to warnings unless the setting names rmcp, and
/// its client worker's silenced: its errors can quote an upstream's response
/// whole, an echoed bearer token included (the upstream code logs those
/// failures itself, the token cut out).
fn log_filter(setting: &str) -> String {
    let mut filter = setting.to_owned();
    if !setting.contains("rmcp") {
        filter.push_str(",rmcp=warn,rmcp::transport::worker=off");
    }
    // The resolver's solver logs every step it takes at INFO.
    if !setting.contains("pubgrub") {
        filter.push_str(",pubgrub=warn");
    }
    filter
}

async fn run(command: Command, mut config: Config) -> ExitCode {
    if let Command::Token(args) = &command {
        return report(mint_token(args));
    }
    if !matches!(command, Command::Serve) {
        // One-off commands need no interpreters started ahead of time.
        config.wasm.pool_size = 0;
    }
    let app = match App::build(config) {
        Ok(app) => app,
        Err(e) => {
            eprintln!("mcp-code-sandbox: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match command {
        Command::Serve => match app.config.http.clone() {
            Some(http) => mcp_code_sandbox::http::serve(app, http).await.map(|()| 0),
            None => app.serve_stdio().await.map(|()| 0),
        },
        Command::Exec { code, file } => match read_code(code, file) {
            Ok(code) => oneshot::run(&app, code).await.map_err(anyhow::Error::from),
            Err(e) => Err(e),
        },
        Command::Prepare { runtimes } => prepare(&app, runtimes).await,
        // The bundle prepares the runtime in an app of its own, whose
        // module cache is the bundle's.
        Command::Bundle { out } => bundle(app.config.clone(), &out).await,
        Command::Wheelhouse(action) => wheelhouse(&app, action).await,
        Command::Token(args) => mint_token(&args),
    };
    report(result)
}

/// The exit status of a command, with its error printed.
fn report(result: anyhow::Result<i32>) -> ExitCode {
    match result {
        Ok(status) => ExitCode::from(status as u8),
        Err(e) => {
            eprintln!("mcp-code-sandbox: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn bundle(config: Config, out: &std::path::Path) -> anyhow::Result<i32> {
    let progress = |m: &str| eprintln!("{m}");
    let made = mcp_code_sandbox::app::make_bundle(config, out, &progress).await?;
    println!(
        "bundle of the runtime '{}' in {}: {} files, {} MiB{}",
        made.info.runtime,
        out.display(),
        made.files,
        made.bytes >> 20,
        if made.info.wheelhouse {
            ", with a wheelhouse"
        } else {
            ""
        }
    );
    println!(
        "on the offline machine: {0}/bin/mcp-code-sandbox --bundle {0} (or {0}/fetch-python.sh --from {0})",
        out.display()
    );
    Ok(0)
}

async fn prepare(app: &App, runtimes: Vec<String>) -> anyhow::Result<i32> {
    let names = if runtimes.is_empty() {
        vec![app.config.wasm.default_runtime.clone()]
    } else {
        runtimes
    };
    for name in names {
        app.wasm.preload(Some(&name)).await?;
        eprintln!(
            "runtime '{name}' is ready (compiled into {})",
            app.config.wasm.cache_dir.display()
        );
    }
    Ok(0)
}

async fn wheelhouse(app: &App, action: WheelhouseCommand) -> anyhow::Result<i32> {
    use mcp_code_sandbox::packages::{
        BuiltInPackages, Installer, split_requirements, wheelhouse_add,
    };
    let WheelhouseCommand::Add { requirements, dir } = action;
    let wasm = &app.config.wasm;
    let manifest = app.wasm.manifest(&wasm.default_runtime)?;
    let installer = Installer::new(app.config.packages.clone());
    let requirements: Vec<String> = requirements
        .iter()
        .flat_map(|r| split_requirements(r))
        .collect();
    // A runtime's built-in packages are not fetched: what depends on them
    // resolves against them.
    let built_in = match manifest.artifacts.iter().find(|a| a.distributions) {
        Some(artifact) => {
            let path = wasm.runtime_dir.join(&artifact.file);
            BuiltInPackages::from_zip(&path, artifact.compiled_distributions.as_deref()).map_err(|e| {
                anyhow::anyhow!(
                    "cannot read the packages built into the runtime '{}' from {} ({e}); run ./fetch-python.sh --runtime {} first",
                    manifest.name,
                    path.display(),
                    manifest.name
                )
            })?
        }
        None => BuiltInPackages::default(),
    };
    let progress = |m: String| eprintln!("{m}");
    let added = wheelhouse_add::add(
        &installer,
        &requirements,
        &dir,
        &manifest.python_version,
        &built_in,
        &progress,
    )
    .await?;
    for wheel in &added {
        let state = if wheel.already_there {
            "already there"
        } else {
            "added"
        };
        println!("{state:>13}  {}", wheel.filename);
    }
    println!(
        "{} wheel(s) in {}; use them with SANDBOX_WHEELHOUSE={}",
        added.len(),
        dir.display(),
        dir.display()
    );
    Ok(0)
}

/// `token`: prints a fresh token once, and the entry for the tokens file.
fn mint_token(args: &TokenArgs) -> anyhow::Result<i32> {
    let limits = PrincipalLimits {
        max_sandboxes: args.limit_sandboxes,
        max_memory_mb: args.limit_memory_mb,
        max_disk_mb: args.limit_disk_mb,
    };
    let minted = tokens::mint(&args.principal, &limits).map_err(anyhow::Error::msg)?;
    println!(
        "token (shown once; give it to {}, it is stored nowhere):",
        args.principal
    );
    println!("{}", minted.token);
    println!();
    println!("add to the tokens file (SANDBOX_AUTH_TOKENS_FILE):");
    print!("{}", minted.entry);
    Ok(0)
}

fn read_code(code: Option<String>, file: Option<std::path::PathBuf>) -> anyhow::Result<String> {
    match (code, file) {
        (Some(code), _) => Ok(code),
        (None, Some(path)) if path.as_os_str() == "-" => {
            let mut code = String::new();
            std::io::stdin().read_to_string(&mut code)?;
            Ok(code)
        }
        (None, Some(path)) => std::fs::read_to_string(&path)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display())),
        (None, None) => anyhow::bail!("give the code to run, or --file"),
    }
}

/// Loads settings from a .env file into the environment before the command
/// line is parsed; variables already set win.
fn load_env_file() {
    let mut args = std::env::args().skip(1);
    let mut from_flag = None;
    while let Some(arg) = args.next() {
        if arg == "--env-file" {
            from_flag = args.next();
        } else if let Some(path) = arg.strip_prefix("--env-file=") {
            from_flag = Some(path.to_owned());
        }
    }
    // Exactly the file named, or .env in the working directory: never one
    // found by walking up the parent directories.
    match from_flag.or_else(|| std::env::var("SANDBOX_ENV_FILE").ok()) {
        Some(path) => {
            if let Err(e) = dotenvy::from_path(&path) {
                eprintln!("mcp-code-sandbox: cannot read the env file {path}: {e}");
            }
        }
        None => {
            let _ = dotenvy::from_path(".env");
        }
    }
}
