//! The command line: subcommands, and every setting as a flag with its
//! environment variable. Values are checked and turned into a
//! [`crate::config::Config`] by [`crate::config::Config::from_settings`].

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::e2b::ApiKey;

/// An MCP server that runs Python in sandboxes: CPython compiled to WebAssembly
/// inside this process by default, or E2B cloud sandboxes.
///
/// With no subcommand it serves MCP on stdin/stdout (point your MCP client at
/// this binary). Settings come from flags, environment variables, and a `.env`
/// file in the working directory (or the one SANDBOX_ENV_FILE names).
#[derive(Debug, Parser)]
#[command(name = "mcp-code-sandbox", version, max_term_width = 100)]
pub struct Cli {
    /// What to do (default: serve MCP on stdio).
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Settings.
    #[command(flatten)]
    pub settings: Settings,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve MCP on stdin/stdout (the default).
    Serve,
    /// Run Python once in a fresh sandbox, print its output, and exit
    /// (status 1 if the code raised or hit a limit).
    Exec {
        /// The code to run.
        #[arg(required_unless_present = "file", conflicts_with = "file")]
        code: Option<String>,
        /// Read the code from this file ("-" for stdin).
        #[arg(long, short)]
        file: Option<PathBuf>,
    },
    /// Load the runtime and compile it into the module cache ahead of time, so
    /// the server's first start does not pay for it.
    Prepare {
        /// Runtimes to prepare (default: the configured one).
        runtimes: Vec<String>,
    },
    /// Make a bundle for a machine without network: the runtime chosen with
    /// --runtime, compiled (and pre-initialised) for this machine's CPU, the
    /// wheelhouse given with --wheelhouse, this binary, fetch-python.sh, and
    /// SHA256SUMS of every file. Run the server from it with --bundle DIR.
    Bundle {
        /// The directory to make (new or empty).
        #[arg(long)]
        out: PathBuf,
    },
    /// Manage a wheelhouse: a directory of wheels for offline installs.
    #[command(subcommand)]
    Wheelhouse(WheelhouseCommand),
    /// Mint a static bearer token for the HTTP server: prints the token
    /// (once: it is stored nowhere) and the entry to add to the tokens file
    /// (SANDBOX_AUTH_TOKENS_FILE), which holds only its hash.
    Token(TokenArgs),
}

/// `token`: whom the token is for, and their limits.
#[derive(Debug, Args)]
pub struct TokenArgs {
    /// The principal's name (owner of the sandboxes it creates).
    #[arg(long)]
    pub principal: String,
    /// Most sandboxes the principal may have alive at once (its
    /// `max_sandboxes`).
    #[arg(long)]
    pub limit_sandboxes: Option<usize>,
    /// Most memory the principal's sandboxes may use together, in MiB (its
    /// `max_memory_mb`).
    #[arg(long)]
    pub limit_memory_mb: Option<u64>,
    /// Most disk the principal's sandboxes may hold together, in MiB (its
    /// `max_disk_mb`).
    #[arg(long)]
    pub limit_disk_mb: Option<u64>,
}

/// Every setting. Each flag also reads the environment variable shown.
#[derive(Debug, Args, Clone)]
pub struct Settings {
    /// Backend for new sandboxes: `wasm` (local, the default) or `e2b`.
    #[arg(long, env = "INTERPRETER_TYPE", default_value = "wasm", global = true)]
    pub interpreter_type: String,

    /// Directory holding the sandbox directories [default: the user's cache
    /// directory, e.g. ~/.cache/mcp-code-sandbox/sandboxes].
    #[arg(long, env = "SANDBOX_ROOT", global = true)]
    pub root: Option<PathBuf>,

    /// Directory holding the Python runtimes that fetch-python.sh downloads
    /// [default: the repository's runtime/ directory].
    #[arg(long, env = "SANDBOX_RUNTIME_DIR", global = true)]
    pub runtime_dir: Option<PathBuf>,

    /// A bundle made by `mcp-code-sandbox bundle` on a connected machine:
    /// its runtime (the default), compiled modules and wheelhouse are used,
    /// and pip is never asked for an index, so the server needs no network.
    /// Every file is checked against the bundle's SHA256SUMS at start.
    #[arg(long, env = "SANDBOX_BUNDLE", global = true)]
    pub bundle: Option<PathBuf>,

    /// Runtime new sandboxes run, by manifest name.
    #[arg(
        long,
        env = "SANDBOX_RUNTIME",
        default_value = "scientific",
        global = true
    )]
    pub runtime: String,

    /// Directory for compiled modules and downloaded wheels [default: the
    /// user's cache directory, e.g. ~/.cache/mcp-code-sandbox].
    #[arg(long, env = "SANDBOX_CACHE_DIR", global = true)]
    pub cache_dir: Option<PathBuf>,

    /// Default wall-clock limit of one execution, in seconds.
    #[arg(
        long,
        env = "SANDBOX_TIMEOUT_SECONDS",
        default_value_t = 30.0,
        global = true
    )]
    pub timeout_seconds: f64,

    /// Largest timeout an execution or sandbox may ask for, in seconds.
    #[arg(
        long,
        env = "SANDBOX_MAX_TIMEOUT_SECONDS",
        default_value_t = 300.0,
        global = true
    )]
    pub max_timeout_seconds: f64,

    /// Default memory cap of one sandbox, in MiB.
    #[arg(long, env = "SANDBOX_MEMORY_MB", default_value_t = 512, global = true)]
    pub memory_mb: u64,

    /// Largest memory cap a sandbox may ask for, in MiB.
    #[arg(
        long,
        env = "SANDBOX_MAX_MEMORY_MB",
        default_value_t = 2048,
        global = true
    )]
    pub max_memory_mb: u64,

    /// CPU time one execution may burn, in seconds, on the clock of the
    /// thread that runs it (waiting and time the machine gave to others are
    /// not counted); 0: only the wall-clock timeout bounds an execution.
    #[arg(
        long,
        env = "SANDBOX_CPU_SECONDS",
        default_value_t = 0.0,
        global = true
    )]
    pub cpu_seconds: f64,

    /// Fuel (about one unit per WebAssembly instruction) one execution may
    /// burn, a budget that is the same on every machine and under any load,
    /// reported as `fuel` in each result; 0 (the default) turns metering off,
    /// which makes plain Python about a third faster (metering is compiled
    /// into the code, so changing it prepares each runtime once more).
    #[arg(long, env = "SANDBOX_FUEL", default_value_t = 0, global = true)]
    pub fuel: u64,

    /// Tell a profiler where compiled guest code lies, so a profile of the
    /// server names the guest's functions: `perfmap` (for `perf record`),
    /// `jitdump` (for `perf inject --jit`), `vtune`, or `none`.
    #[arg(
        long,
        env = "SANDBOX_GUEST_PROFILER",
        default_value = "none",
        value_parser = clap::builder::PossibleValuesParser::new(crate::wasm::engine::GuestProfiler::NAMES),
        global = true
    )]
    pub guest_profiler: String,

    /// Bytes of each output stream (stdout, stderr), of a value and of a
    /// traceback returned to the model; longer ones keep their head and tail
    /// (and the whole stream is saved in the sandbox).
    #[arg(long, env = "SANDBOX_OUTPUT_LIMIT_BYTES", default_value_t = 16 << 10, global = true)]
    pub output_limit_bytes: usize,

    /// Bytes of each output stream kept in a file in the sandbox when it
    /// overflows the inline limit.
    #[arg(long, env = "SANDBOX_OUTPUT_FILE_LIMIT_BYTES", default_value_t = 16 << 20, global = true)]
    pub output_file_limit_bytes: u64,

    /// Most bytes of one image (a plot) an execution returns; a larger plot
    /// is downscaled to fit, and its full-size PNG saved in the sandbox.
    #[arg(long, env = "SANDBOX_IMAGE_LIMIT_BYTES", default_value_t = 512 << 10, global = true)]
    pub image_limit_bytes: usize,

    /// Most images one execution returns; further plots are saved in the
    /// sandbox and their paths given.
    #[arg(long, env = "SANDBOX_MAX_IMAGES", default_value_t = 8, global = true)]
    pub max_images: usize,

    /// Disk quota of one sandbox, in MiB.
    #[arg(
        long,
        env = "SANDBOX_DISK_QUOTA_MB",
        default_value_t = 256,
        global = true
    )]
    pub disk_quota_mb: u64,

    /// Most files and directories one sandbox may hold.
    #[arg(
        long,
        env = "SANDBOX_MAX_FILES",
        default_value_t = 10_000,
        global = true
    )]
    pub max_files: u64,

    /// Largest file read_file returns, or write_file/upload_file accept, in bytes.
    #[arg(long, env = "SANDBOX_MAX_FILE_BYTES", default_value_t = 10 << 20, global = true)]
    pub max_file_bytes: u64,

    /// Longest request (one JSON-RPC line on stdio, one request body over
    /// HTTP) accepted, in bytes; longer ones get an error reply (HTTP 413) and
    /// are skipped without being held in memory.
    #[arg(long, env = "SANDBOX_MAX_REQUEST_BYTES", default_value_t = 64 << 20, global = true)]
    pub max_request_bytes: usize,

    /// Largest `code` argument accepted, in bytes.
    #[arg(long, env = "SANDBOX_MAX_CODE_BYTES", default_value_t = 1 << 20, global = true)]
    pub max_code_bytes: usize,

    /// Most files and directories one sandbox may hold open at once
    /// (descriptors, counting its standard streams).
    #[arg(
        long,
        env = "SANDBOX_MAX_OPEN_FILES",
        default_value_t = 256,
        global = true
    )]
    pub max_open_files: u64,

    /// Memory all local sandboxes together may grow to, in MiB [default 0:
    /// half of this machine's memory]. A sandbox that would grow past it gets
    /// a MemoryError, as at its own cap.
    #[arg(
        long,
        env = "SANDBOX_MEMORY_BUDGET_MB",
        default_value_t = 0,
        global = true
    )]
    pub memory_budget_mb: u64,

    /// Disk all local sandboxes together may hold, in MiB [default 0: half of
    /// the free space where sandboxes live, measured at start]. A write past
    /// it fails as a write past a sandbox's quota does.
    #[arg(
        long,
        env = "SANDBOX_DISK_BUDGET_MB",
        default_value_t = 0,
        global = true
    )]
    pub disk_budget_mb: u64,

    /// Modules imported once into the snapshot that sandboxes of a runtime
    /// driven turn by turn (the scientific one) start from, so no sandbox pays
    /// for importing them; separated by commas or spaces, "none" for none.
    /// Changing it rebuilds the snapshot at the next start.
    #[arg(
        long,
        env = "SANDBOX_PRELOAD",
        default_value = "numpy, pandas, matplotlib.pyplot",
        global = true
    )]
    pub preload: String,

    /// Destinations local sandboxes' code may reach over HTTP (through the
    /// scientific runtime's door; urllib and pandas use it): comma-separated
    /// `scheme://host:port` patterns, the port optional, the host an exact
    /// name or address or `*.suffix`. Empty: no network at all.
    #[arg(long, env = "SANDBOX_ALLOW_HOSTS", default_value = "", global = true)]
    pub allow_hosts: String,

    /// Address ranges (CIDR, comma-separated) guests' HTTP may reach even
    /// though they are special (loopback, private, link-local...), e.g.
    /// 10.1.0.0/16. Empty: none of them.
    #[arg(
        long,
        env = "SANDBOX_ALLOW_NETWORKS",
        default_value = "",
        global = true
    )]
    pub allow_networks: String,

    /// Most bytes of one HTTP response a guest may read.
    #[arg(long, env = "SANDBOX_GUEST_HTTP_MAX_BYTES", default_value_t = 16 << 20, global = true)]
    pub guest_http_max_bytes: u64,

    /// Most frames through the door to the host one execution may send:
    /// tool calls (HTTP requests, upstream MCP tools) and tool lists
    /// (`from host import tools` sends one).
    #[arg(
        long,
        env = "SANDBOX_DOOR_MAX_CALLS",
        default_value_t = 1000,
        global = true
    )]
    pub door_max_calls: u32,

    /// Most time, in seconds, the host may spend on one execution's door
    /// calls together (each is also bounded by the execution's timeout).
    #[arg(
        long,
        env = "SANDBOX_DOOR_MAX_SECONDS",
        default_value_t = 300.0,
        global = true
    )]
    pub door_max_seconds: f64,

    /// A TOML file naming upstream MCP servers (a stdio command or an HTTP
    /// URL each) whose tools the scientific runtime's code may call as
    /// `tools.<server>_<tool>(...)` (`from host import tools`); see the
    /// book (docs/src/network.md). Unset: none.
    #[arg(long, env = "SANDBOX_UPSTREAMS", global = true)]
    pub upstreams: Option<PathBuf>,

    /// How long a local sandbox saved when the server stopped (or left by a
    /// server that died) is kept for a later start to restore (0: sandboxes
    /// are neither durable nor saved, and close with the server).
    #[arg(
        long,
        env = "SANDBOX_KEEP_SAVED_SECONDS",
        default_value_t = 7 * 24 * 3600,
        global = true
    )]
    pub keep_saved_seconds: u64,

    /// Most disk the durable state of live sandboxes and all saved sandboxes
    /// may take together, in MiB; the oldest saved go first, and a live
    /// sandbox past it stops being kept (0: neither durable nor saved).
    #[arg(
        long,
        env = "SANDBOX_SAVED_MAX_MB",
        default_value_t = 4096,
        global = true
    )]
    pub saved_max_mb: u64,

    /// Most sandboxes alive at once.
    #[arg(
        long,
        env = "SANDBOX_MAX_SANDBOXES",
        default_value_t = 64,
        global = true
    )]
    pub max_sandboxes: usize,

    /// Close sandboxes unused for this many seconds (0: never).
    #[arg(
        long,
        env = "SANDBOX_IDLE_TIMEOUT_SECONDS",
        default_value_t = 1800,
        global = true
    )]
    pub idle_timeout_seconds: u64,

    /// Interpreters kept started ahead of time, so creating a sandbox takes one
    /// instead of starting CPython (0: off).
    #[arg(long, env = "SANDBOX_POOL_SIZE", default_value_t = 2, global = true)]
    pub pool_size: usize,

    /// Threads for the host work guests wait for: the door's requests, timers
    /// (0: one per CPU). Each guest runs on a thread of its own.
    #[arg(long, env = "SANDBOX_THREADS", default_value_t = 0, global = true)]
    pub threads: usize,

    /// Log filter for stderr, e.g. `info` or `mcp_code_sandbox=debug`.
    #[arg(long, env = "SANDBOX_LOG", default_value = "info", global = true)]
    pub log: String,

    /// A .env file to read settings from [default: .env in the working directory].
    #[arg(long, env = "SANDBOX_ENV_FILE", global = true)]
    pub env_file: Option<PathBuf>,

    // The E2B backend. The E2B_* names and meanings are those of E2B's SDK.
    /// E2B API key; setting it enables the e2b backend (never logged or shown).
    /// Prefer the variable or the .env file: a flag shows in the process list.
    #[arg(long, env = "E2B_API_KEY", hide_env_values = true, global = true)]
    pub e2b_api_key: Option<ApiKey>,

    /// E2B domain, for a self-hosted E2B [default: e2b.app].
    #[arg(long, env = "E2B_DOMAIN", global = true)]
    pub e2b_domain: Option<String>,

    /// E2B API base URL [default: https://api.<E2B_DOMAIN>].
    #[arg(long, env = "E2B_API_URL", global = true)]
    pub e2b_api_url: Option<String>,

    /// One base URL for every request to an E2B sandbox, which is then named by
    /// the E2b-Sandbox-Id and E2b-Sandbox-Port headers [default:
    /// https://<port>-<sandbox id>.<E2B_DOMAIN>].
    #[arg(long, env = "E2B_SANDBOX_URL", global = true)]
    pub e2b_sandbox_url: Option<String>,

    /// E2B template of new e2b sandboxes (it must run E2B's code interpreter).
    #[arg(
        long,
        env = "SANDBOX_E2B_TEMPLATE",
        default_value = crate::e2b::config::CODE_INTERPRETER_TEMPLATE,
        global = true
    )]
    pub e2b_template: String,

    /// Seconds an E2B sandbox lives on E2B unless refreshed; the server
    /// refreshes open sandboxes every third of it and kills them on close.
    #[arg(
        long,
        env = "SANDBOX_E2B_LIFETIME_SECONDS",
        default_value_t = 300,
        global = true
    )]
    pub e2b_lifetime_seconds: u64,

    /// Longest an E2B sandbox may live on your E2B plan, in seconds (1 h on
    /// the Hobby plan, 24 h on Pro); a longer lifetime is refused at start.
    #[arg(
        long,
        env = "SANDBOX_E2B_MAX_LIFETIME_SECONDS",
        default_value_t = crate::e2b::config::DEFAULT_MAX_LIFETIME_SECONDS,
        global = true
    )]
    pub e2b_max_lifetime_seconds: u64,

    /// Seconds one request to E2B may take (retries and the answer
    /// included), other than running code, which has its own timeout.
    #[arg(
        long,
        env = "SANDBOX_E2B_REQUEST_TIMEOUT_SECONDS",
        default_value_t = 60,
        global = true
    )]
    pub e2b_request_timeout_seconds: u64,

    /// Where install_package gets packages.
    #[command(flatten)]
    pub packages: PackageArgs,

    /// Serving MCP over HTTP instead of stdio.
    #[command(flatten)]
    pub http: HttpArgs,

    /// Who may call the HTTP server.
    #[command(flatten)]
    pub auth: AuthArgs,
}

/// Serving MCP over Streamable HTTP (`serve --http ADDR`) instead of stdio.
#[derive(Debug, Args, Clone)]
pub struct HttpArgs {
    /// Serve MCP over Streamable HTTP at http://ADDR/mcp (e.g.
    /// 127.0.0.1:8080) instead of stdio. An address other than loopback is
    /// refused unless authorization is configured.
    #[arg(long, env = "SANDBOX_HTTP", global = true)]
    pub http: Option<String>,

    /// Host names (and host:port) requests may name in their Host header
    /// besides loopback's and the public URL's, comma-separated; a guard
    /// against DNS rebinding.
    #[arg(long, env = "SANDBOX_HTTP_ALLOWED_HOSTS", global = true)]
    pub http_allowed_hosts: Option<String>,

    /// Origins browsers may send requests from (e.g.
    /// https://app.example.com), comma-separated; a request with any other
    /// Origin header is refused. Empty: requests with an Origin are refused
    /// unless it is this server's own.
    #[arg(long, env = "SANDBOX_HTTP_ALLOWED_ORIGINS", global = true)]
    pub http_allowed_origins: Option<String>,

    /// Serve clients of the session-based protocol (before 2026-07-28)
    /// without sessions too, so that any replica behind a proxy can answer
    /// any request.
    #[arg(long, env = "SANDBOX_HTTP_STATELESS", global = true)]
    pub http_stateless: bool,

    /// Most HTTP connections open at once; further ones wait to be accepted.
    #[arg(
        long,
        env = "SANDBOX_HTTP_MAX_CONNECTIONS",
        default_value_t = 1024,
        global = true
    )]
    pub http_max_connections: usize,

    /// Seconds a client may take to send a request's headers before its
    /// connection is closed.
    #[arg(
        long,
        env = "SANDBOX_HTTP_HEADER_TIMEOUT_SECONDS",
        default_value_t = 30.0,
        global = true
    )]
    pub http_header_timeout_seconds: f64,

    /// Most sessions (of the 2025-11-25 protocol) one principal may hold open
    /// at once; a further `initialize` is refused until one ends or idles out.
    #[arg(
        long,
        env = "SANDBOX_HTTP_MAX_SESSIONS_PER_PRINCIPAL",
        default_value_t = 64,
        global = true
    )]
    pub http_max_sessions_per_principal: usize,

    /// Most sessions open at once, all principals together.
    #[arg(
        long,
        env = "SANDBOX_HTTP_MAX_SESSIONS",
        default_value_t = 1024,
        global = true
    )]
    pub http_max_sessions: usize,

    /// Certificate chain (PEM) to serve HTTPS with; needs --tls-key.
    #[arg(long, env = "SANDBOX_TLS_CERT", global = true, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// Private key (PEM) of --tls-cert.
    #[arg(long, env = "SANDBOX_TLS_KEY", global = true, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

impl Default for HttpArgs {
    /// The values the flags default to.
    fn default() -> Self {
        Self {
            http: None,
            http_allowed_hosts: None,
            http_allowed_origins: None,
            http_stateless: false,
            http_max_connections: 1024,
            http_header_timeout_seconds: 30.0,
            http_max_sessions_per_principal: 64,
            http_max_sessions: 1024,
            tls_cert: None,
            tls_key: None,
        }
    }
}

/// Package sources for install_package (and `wheelhouse add`). With none of
/// these, pip's own settings are used: PIP_INDEX_URL and
/// PIP_EXTRA_INDEX_URL, else index-url in pip's configuration file, else
/// the index the machine's pip says it uses (see `pip_python`).
#[derive(Debug, Args, Clone)]
pub struct PackageArgs {
    /// Package index (simple API) to install from, e.g.
    /// `https://<your-index>/simple/`; several separated by spaces (the first
    /// that has a project supplies it); "none" to use no index at all.
    #[arg(long, env = "SANDBOX_INDEX_URL", global = true)]
    pub index_url: Option<String>,

    /// Directory of wheels to install from before any index (enough on its
    /// own on a machine without network; fill one with `wheelhouse add`).
    #[arg(long, env = "SANDBOX_WHEELHOUSE", global = true)]
    pub wheelhouse: Option<PathBuf>,

    /// pip's PIP_INDEX_URL, used when SANDBOX_INDEX_URL is not set.
    #[arg(long, env = "PIP_INDEX_URL", hide = true, global = true)]
    pub pip_index_url: Option<String>,

    /// pip's PIP_EXTRA_INDEX_URL (space-separated), used with PIP_INDEX_URL
    /// or pip.conf's index-url.
    #[arg(long, env = "PIP_EXTRA_INDEX_URL", hide = true, global = true)]
    pub pip_extra_index_url: Option<String>,

    /// pip's PIP_CONFIG_FILE, read before the usual pip.conf locations
    /// (/dev/null: read none).
    #[arg(long, env = "PIP_CONFIG_FILE", hide = true, global = true)]
    pub pip_config_file: Option<PathBuf>,

    /// With no index and no wheelhouse configured, the Python whose pip is
    /// asked (once, at the first install) which index it uses, so packages
    /// come from where `pip install` gets them; "none": never ask.
    #[arg(
        long,
        env = "SANDBOX_PIP_PYTHON",
        default_value = "python3",
        global = true
    )]
    pub pip_python: String,

    /// Longest one install_package call may take, in seconds (resolving,
    /// downloading and unpacking); past it the install stops and changes
    /// nothing.
    #[arg(
        long,
        env = "SANDBOX_INSTALL_TIMEOUT_SECONDS",
        default_value_t = 300.0,
        global = true
    )]
    pub install_timeout_seconds: f64,

    /// Most MiB the cache of downloaded wheels keeps on disk, and the cache
    /// of their compiled bytecode beside it; the least recently used go
    /// first past it (0: keep none).
    #[arg(
        long,
        env = "SANDBOX_WHEEL_CACHE_MB",
        default_value_t = 1024,
        global = true
    )]
    pub wheel_cache_mb: u64,
}

impl Default for PackageArgs {
    /// The values the flags default to.
    fn default() -> Self {
        Self {
            index_url: None,
            wheelhouse: None,
            pip_index_url: None,
            pip_extra_index_url: None,
            pip_config_file: None,
            pip_python: "python3".into(),
            install_timeout_seconds: 300.0,
            wheel_cache_mb: 1024,
        }
    }
}

/// `wheelhouse` subcommands.
#[derive(Debug, Subcommand)]
pub enum WheelhouseCommand {
    /// Resolve requirements against the index for the sandbox runtime
    /// (pure-Python wheels only, dependencies included) and copy the wheels
    /// into DIR, to carry to a machine without network and use there with
    /// SANDBOX_WHEELHOUSE=DIR.
    Add {
        /// Requirements, as for install_package (e.g. requests "attrs>=23").
        #[arg(required = true)]
        requirements: Vec<String>,
        /// The wheelhouse directory (created if missing).
        #[arg(long)]
        dir: PathBuf,
    },
}

/// Authorization of HTTP requests. With none of these, the HTTP server
/// admits every request (and may then only listen on loopback).
#[derive(Debug, Args, Clone, Default)]
pub struct AuthArgs {
    /// Static bearer tokens: a TOML file of sha256 token hashes, each with
    /// its principal and limits (make entries with `mcp-code-sandbox token`).
    #[arg(long, env = "SANDBOX_AUTH_TOKENS_FILE", global = true)]
    pub auth_tokens_file: Option<PathBuf>,

    /// OAuth 2.1: the authorization server whose JWT access tokens are
    /// accepted, exactly as its tokens' `iss` (https; http on loopback only).
    /// Needs SANDBOX_PUBLIC_URL.
    #[arg(long, env = "SANDBOX_OAUTH_ISSUER", global = true)]
    pub oauth_issuer: Option<String>,

    /// This server's external base URL, as clients reach it; the OAuth
    /// resource (the audience tokens must name) is <public_url>/mcp.
    #[arg(long, env = "SANDBOX_PUBLIC_URL", global = true)]
    pub public_url: Option<String>,

    /// Scopes every access token must hold, separated by commas or spaces.
    #[arg(
        long,
        env = "SANDBOX_OAUTH_SCOPES",
        default_value = "sandbox",
        global = true
    )]
    pub oauth_scopes: String,

    /// Where the issuer's signing keys (JWKS) are [default: the jwks_uri of
    /// the issuer's OAuth or OpenID Connect metadata].
    #[arg(long, env = "SANDBOX_OAUTH_JWKS_URL", global = true)]
    pub oauth_jwks_url: Option<String>,
}
