//! [`Config`]: the settings, checked once and typed. Nothing below `main`
//! reads the environment; everything gets what it needs from here.

mod http;

pub use self::http::{ConnectionLimits, HttpSettings, SessionLimits, TlsFiles};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::auth::settings::{check_url, parse_scopes};
use crate::auth::{AuthSettings, OAuthSettings};
use crate::bundle::Bundle;
use crate::cli::{AuthArgs, PackageArgs, Settings};
use crate::door::DoorSettings;
use crate::door::allowlist::AllowList;
use crate::door::http::HttpSettings as DoorHttpSettings;
use crate::door::ranges::AddressPolicy;
use crate::door::session::DoorCaps;
use crate::door::upstream;
use crate::e2b::E2bSettings;
use crate::packages::settings::parse_pip_conf;
use crate::packages::{IndexUrl, PackageSettings};
use crate::sandbox::manager::ManagerSettings;
use crate::sandbox::{BackendKind, SandboxLimits};
use crate::wasm::WasmSettings;
use crate::wasm::engine::{EngineSettings, GuestProfiler};

/// A setting that is out of range or malformed.
#[derive(Debug, thiserror::Error)]
#[error("invalid setting {name}: {reason}")]
pub struct ConfigError {
    name: &'static str,
    reason: String,
}

fn bad(name: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        name,
        reason: reason.into(),
    }
}

/// Limits on what one tool call may send or receive.
#[derive(Clone, Debug)]
pub struct RequestLimits {
    /// Largest `code` argument, in bytes.
    pub max_code_bytes: usize,
    /// Largest file read or written through the file tools, in bytes.
    pub max_file_bytes: u64,
    /// Most entries `list_files` returns.
    pub max_list_entries: usize,
    /// Longest request line accepted on stdio, in bytes.
    pub max_request_bytes: usize,
}

/// The server's configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// Rules for sandboxes.
    pub manager: ManagerSettings,
    /// The local backend's settings.
    pub wasm: WasmSettings,
    /// Limits on tool arguments and results.
    pub requests: RequestLimits,
    /// The E2B backend's settings, when an API key is configured.
    pub e2b: Option<E2bSettings>,
    /// Where install_package gets packages.
    pub packages: PackageSettings,
    /// Log filter.
    pub log: String,
    /// How to serve MCP over HTTP, when asked to.
    pub http: Option<HttpSettings>,
    /// Who may call the HTTP server.
    pub auth: AuthSettings,
}

impl Config {
    /// Checks raw settings and builds the configuration.
    pub fn from_settings(s: &Settings) -> Result<Self, ConfigError> {
        let default_backend = BackendKind::parse(&s.interpreter_type).ok_or_else(|| {
            bad(
                "INTERPRETER_TYPE",
                format!("'{}' is not a backend; use wasm or e2b", s.interpreter_type),
            )
        })?;
        let timeout = seconds("SANDBOX_TIMEOUT_SECONDS", s.timeout_seconds)?;
        let max_timeout = seconds("SANDBOX_MAX_TIMEOUT_SECONDS", s.max_timeout_seconds)?;
        if timeout > max_timeout {
            return Err(bad(
                "SANDBOX_TIMEOUT_SECONDS",
                format!(
                    "{} is over SANDBOX_MAX_TIMEOUT_SECONDS ({})",
                    s.timeout_seconds, s.max_timeout_seconds
                ),
            ));
        }
        if s.memory_mb < 32 {
            return Err(bad("SANDBOX_MEMORY_MB", "CPython needs at least 32 MiB"));
        }
        if s.memory_mb > s.max_memory_mb {
            return Err(bad(
                "SANDBOX_MEMORY_MB",
                format!(
                    "{} is over SANDBOX_MAX_MEMORY_MB ({})",
                    s.memory_mb, s.max_memory_mb
                ),
            ));
        }
        if s.max_memory_mb > 4096 {
            return Err(bad(
                "SANDBOX_MAX_MEMORY_MB",
                "a 32-bit WebAssembly memory holds at most 4096 MiB",
            ));
        }
        if s.output_limit_bytes < 1024 {
            return Err(bad(
                "SANDBOX_OUTPUT_LIMIT_BYTES",
                "must be at least 1024, room for some head and tail of the output and the note between them",
            ));
        }
        if s.image_limit_bytes < 4096 {
            return Err(bad(
                "SANDBOX_IMAGE_LIMIT_BYTES",
                format!(
                    "{} is too small for a readable plot; use at least 4096",
                    s.image_limit_bytes
                ),
            ));
        }
        if s.max_open_files < 16 {
            return Err(bad(
                "SANDBOX_MAX_OPEN_FILES",
                "CPython needs at least 16 (its standard streams, the sandbox directory and the modules it reads)",
            ));
        }
        if s.max_sandboxes == 0 {
            return Err(bad("SANDBOX_MAX_SANDBOXES", "must be at least 1"));
        }
        let cpu = if s.cpu_seconds == 0.0 {
            None
        } else if s.cpu_seconds > 0.0 && s.cpu_seconds < MIN_CPU_SECONDS {
            return Err(bad(
                "SANDBOX_CPU_SECONDS",
                format!(
                    "{} is below {MIN_CPU_SECONDS} s: the budget is checked every 10 ms, so a shorter one cannot hold; use 0 for no CPU budget",
                    s.cpu_seconds
                ),
            ));
        } else {
            Some(seconds("SANDBOX_CPU_SECONDS", s.cpu_seconds)?)
        };
        let limits = SandboxLimits {
            timeout,
            max_timeout,
            memory_bytes: s.memory_mb << 20,
            fuel: (s.fuel > 0).then_some(s.fuel),
            cpu,
            output_bytes: s.output_limit_bytes,
            output_file_bytes: s.output_file_limit_bytes,
            disk_bytes: s.disk_quota_mb << 20,
            disk_files: s.max_files,
            image_bytes: s.image_limit_bytes,
            max_images: s.max_images,
            open_files: s.max_open_files,
        };
        let cache_dir = s.cache_dir.clone().unwrap_or_else(default_cache_dir);
        let mut packages = package_settings(&s.packages, &cache_dir)?;
        let mut wasm = WasmSettings {
            runtime_dir: s.runtime_dir.clone().unwrap_or_else(default_runtime_dir),
            default_runtime: s.runtime.clone(),
            cache_dir: cache_dir.join("modules"),
            sandbox_root: s
                .root
                .clone()
                .unwrap_or_else(|| cache_dir.join("sandboxes")),
            engine: EngineSettings {
                fuel: s.fuel > 0,
                ..EngineSettings::default()
            },
            profiler: GuestProfiler::from_name(&s.guest_profiler).ok_or_else(|| {
                bad(
                    "SANDBOX_GUEST_PROFILER",
                    format!(
                        "{:?} is not one of {}",
                        s.guest_profiler,
                        GuestProfiler::NAMES.join(", ")
                    ),
                )
            })?,
            threads: s.threads,
            pool_size: s.pool_size,
            pool_limits: limits.clone(),
            memory_budget_bytes: (s.memory_budget_mb > 0).then_some(s.memory_budget_mb << 20),
            disk_budget_bytes: (s.disk_budget_mb > 0).then_some(s.disk_budget_mb << 20),
            preload: preload_modules(&s.preload)?,
            keep_saved: Duration::from_secs(s.keep_saved_seconds),
            saved_max_bytes: s.saved_max_mb.saturating_mul(1 << 20),
            door: door_settings(s)?,
        };
        if let Some(dir) = &s.bundle {
            use_bundle(dir, &mut wasm, &mut packages)?;
        }
        Ok(Self {
            manager: ManagerSettings {
                default_backend,
                limits,
                max_memory_bytes: s.max_memory_mb << 20,
                max_sandboxes: s.max_sandboxes,
                idle_timeout: (s.idle_timeout_seconds > 0)
                    .then(|| Duration::from_secs(s.idle_timeout_seconds)),
            },
            wasm,
            requests: RequestLimits {
                max_code_bytes: s.max_code_bytes,
                max_file_bytes: s.max_file_bytes,
                max_list_entries: 10_000,
                max_request_bytes: s.max_request_bytes,
            },
            e2b: e2b_settings(s, default_backend)?,
            packages,
            log: s.log.clone(),
            http: HttpSettings::from_args(&s.http)?,
            auth: auth_settings(&s.auth)?,
        })
    }
}

impl Config {
    /// Lowers the per-sandbox open-file limit so that every sandbox holding
    /// its limit still leaves the server descriptors of its own, given that
    /// the process may hold `process_limit` descriptors. Returns the new
    /// limit when it was lowered.
    pub fn fit_open_files(&mut self, process_limit: u64, reserved: u64) -> Option<u64> {
        let holders = (self.manager.max_sandboxes + self.wasm.pool_size).max(1) as u64;
        let share = process_limit.saturating_sub(reserved) / holders;
        let limits = &mut self.manager.limits;
        if limits.open_files <= share {
            return None;
        }
        let fitted = share.max(16);
        limits.open_files = fitted;
        self.wasm.pool_limits.open_files = fitted;
        Some(fitted)
    }
}

/// The authorization settings, checked: URLs https (http on loopback
/// only), OAuth with its public URL and at least one scope.
fn auth_settings(a: &AuthArgs) -> Result<AuthSettings, ConfigError> {
    let set = |v: &Option<String>| {
        v.as_deref()
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    };
    let tokens_file = a
        .auth_tokens_file
        .clone()
        .filter(|p| !p.as_os_str().is_empty());
    let Some(issuer) = set(&a.oauth_issuer) else {
        if set(&a.oauth_jwks_url).is_some() {
            return Err(bad(
                "SANDBOX_OAUTH_JWKS_URL",
                "it needs SANDBOX_OAUTH_ISSUER, the issuer of the tokens those keys sign",
            ));
        }
        return Ok(AuthSettings {
            tokens_file,
            oauth: None,
        });
    };
    let issuer = check_url(&issuer).map_err(|e| bad("SANDBOX_OAUTH_ISSUER", e))?;
    let public_url = set(&a.public_url).ok_or_else(|| {
        bad("SANDBOX_PUBLIC_URL", "OAuth needs this server's external base URL, e.g. https://sandbox.example.com: tokens must name <url>/mcp as their audience")
    })?;
    let public_url = check_url(&public_url).map_err(|e| bad("SANDBOX_PUBLIC_URL", e))?;
    let scopes = parse_scopes(&a.oauth_scopes);
    if scopes.is_empty() {
        return Err(bad(
            "SANDBOX_OAUTH_SCOPES",
            "give at least one scope, e.g. sandbox",
        ));
    }
    let mut oauth = OAuthSettings::new(issuer, public_url, scopes);
    if let Some(jwks) = set(&a.oauth_jwks_url) {
        oauth.jwks_url = Some(check_url(&jwks).map_err(|e| bad("SANDBOX_OAUTH_JWKS_URL", e))?);
    }
    Ok(AuthSettings {
        tokens_file,
        oauth: Some(oauth),
    })
}

/// The E2B backend's settings, checked; `None` without an API key.
fn e2b_settings(
    s: &Settings,
    default_backend: BackendKind,
) -> Result<Option<E2bSettings>, ConfigError> {
    let key = s.e2b_api_key.clone().filter(|k| !k.is_empty());
    let Some(key) = key else {
        if default_backend == BackendKind::E2b {
            return Err(bad(
                "INTERPRETER_TYPE",
                "it is e2b but E2B_API_KEY is not set: set E2B_API_KEY to an API key from the E2B dashboard, or use INTERPRETER_TYPE=wasm",
            ));
        }
        return Ok(None);
    };
    if !key.expose().bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad(
            "E2B_API_KEY",
            "it holds spaces or characters that cannot go in an HTTP header; copy the key again from the E2B dashboard",
        ));
    }
    let mut e2b = E2bSettings::new(key);
    if let Some(domain) = s
        .e2b_domain
        .as_deref()
        .map(str::trim)
        .filter(|d| !d.is_empty())
    {
        if domain.contains("://") || domain.contains('/') || domain.contains(char::is_whitespace) {
            return Err(bad(
                "E2B_DOMAIN",
                format!("'{domain}' is not a domain name; give just the domain, e.g. e2b.app"),
            ));
        }
        e2b.domain = domain.to_owned();
    }
    e2b.api_url = match s
        .e2b_api_url
        .as_deref()
        .map(str::trim)
        .filter(|u| !u.is_empty())
    {
        Some(url) => http_url("E2B_API_URL", url)?,
        None => format!("https://api.{}", e2b.domain),
    };
    e2b.sandbox_url = match s
        .e2b_sandbox_url
        .as_deref()
        .map(str::trim)
        .filter(|u| !u.is_empty())
    {
        Some(url) => Some(http_url("E2B_SANDBOX_URL", url)?),
        None => None,
    };
    let template = s.e2b_template.trim();
    if !crate::e2b::is_template(template) {
        return Err(bad(
            "SANDBOX_E2B_TEMPLATE",
            format!("'{template}' is not a template name or id"),
        ));
    }
    e2b.template = template.to_owned();
    if !(1..=86_400).contains(&s.e2b_lifetime_seconds) {
        return Err(bad(
            "SANDBOX_E2B_LIFETIME_SECONDS",
            format!("{} is not between 1 and 86400", s.e2b_lifetime_seconds),
        ));
    }
    e2b.lifetime = Duration::from_secs(s.e2b_lifetime_seconds);
    if !(1..=86_400).contains(&s.e2b_max_lifetime_seconds) {
        return Err(bad(
            "SANDBOX_E2B_MAX_LIFETIME_SECONDS",
            format!("{} is not between 1 and 86400", s.e2b_max_lifetime_seconds),
        ));
    }
    if s.e2b_lifetime_seconds > s.e2b_max_lifetime_seconds {
        return Err(bad(
            "SANDBOX_E2B_LIFETIME_SECONDS",
            format!(
                "{} s is longer than E2B lets a sandbox live on your plan ({} s, SANDBOX_E2B_MAX_LIFETIME_SECONDS; 3600 on the Hobby plan, 86400 on Pro), so E2B would refuse every create with HTTP 400; lower it, or raise SANDBOX_E2B_MAX_LIFETIME_SECONDS if your plan allows more",
                s.e2b_lifetime_seconds, s.e2b_max_lifetime_seconds
            ),
        ));
    }
    e2b.max_lifetime = Duration::from_secs(s.e2b_max_lifetime_seconds);
    if !(1..=3600).contains(&s.e2b_request_timeout_seconds) {
        return Err(bad(
            "SANDBOX_E2B_REQUEST_TIMEOUT_SECONDS",
            format!(
                "{} is not between 1 and 3600",
                s.e2b_request_timeout_seconds
            ),
        ));
    }
    e2b.request_timeout = Duration::from_secs(s.e2b_request_timeout_seconds);
    e2b.connect_timeout = e2b.connect_timeout.min(e2b.request_timeout);
    Ok(Some(e2b))
}

/// Checks an http(s) base URL; returns it without a trailing slash.
fn http_url(name: &'static str, url: &str) -> Result<String, ConfigError> {
    let parsed = reqwest::Url::parse(url).map_err(|e| {
        bad(
            name,
            format!("'{url}' is not a URL ({e}); e.g. https://api.e2b.app"),
        )
    })?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(bad(name, format!("'{url}' is not an http or https URL")));
    }
    Ok(url.trim_end_matches('/').to_owned())
}

/// The smallest CPU-time budget accepted: ten epoch ticks.
const MIN_CPU_SECONDS: f64 = 0.1;

fn seconds(name: &'static str, value: f64) -> Result<Duration, ConfigError> {
    if !(value > 0.0 && value <= 86_400.0) {
        return Err(bad(
            name,
            format!("{value} is not between 0 and 86400 seconds"),
        ));
    }
    Ok(Duration::from_secs_f64(value))
}

/// Points the runtime, the module cache and the wheelhouse at a bundle once
/// every file of it matched its SHA256SUMS; the bundle's runtime and preload
/// become the defaults (its compiled snapshot is for them), and pip is never
/// asked for an index (a bundle is for a machine without network).
fn use_bundle(
    dir: &Path,
    wasm: &mut WasmSettings,
    packages: &mut PackageSettings,
) -> Result<(), ConfigError> {
    let bundle = Bundle::open(dir).map_err(|e| bad("SANDBOX_BUNDLE", e.to_string()))?;
    wasm.runtime_dir = bundle.runtime_dir();
    wasm.cache_dir = bundle.modules_dir();
    wasm.default_runtime = bundle.info().runtime.clone();
    wasm.preload = bundle.info().preload.clone();
    if packages.wheelhouse.is_none() {
        packages.wheelhouse = bundle.wheelhouse();
    }
    packages.pip_python = None;
    Ok(())
}

// ---- Package sources (install_package) ----------------------------------

/// The installer's settings: the indexes (see [`index_urls`]), the
/// wheelhouse, and the wheel and bytecode caches under the cache directory.
fn package_settings(p: &PackageArgs, cache_dir: &Path) -> Result<PackageSettings, ConfigError> {
    let mut settings = PackageSettings::new(cache_dir.join("wheels"));
    settings.bytecode_dir = cache_dir.join("bytecode");
    settings.indexes = index_urls(p, &pip_conf_files(p.pip_config_file.as_deref()))?;
    let pip_python = p.pip_python.trim();
    let no_index = p
        .index_url
        .as_deref()
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("none"));
    if !no_index && !pip_python.is_empty() && !pip_python.eq_ignore_ascii_case("none") {
        settings.pip_python = Some(pip_python.to_owned());
    }
    settings.install_timeout =
        seconds("SANDBOX_INSTALL_TIMEOUT_SECONDS", p.install_timeout_seconds)?;
    settings.wheel_cache_bytes = p.wheel_cache_mb.checked_mul(1 << 20).ok_or_else(|| {
        bad(
            "SANDBOX_WHEEL_CACHE_MB",
            format!("{} MiB is too large", p.wheel_cache_mb),
        )
    })?;
    if let Some(dir) = &p.wheelhouse {
        if !dir.is_dir() {
            return Err(bad(
                "SANDBOX_WHEELHOUSE",
                format!(
                    "{} is not a directory; create it, or fill it with `mcp-code-sandbox wheelhouse add PACKAGE --dir {}`",
                    dir.display(),
                    dir.display()
                ),
            ));
        }
        settings.wheelhouse = Some(dir.clone());
    }
    Ok(settings)
}

/// The package indexes, first match wins: SANDBOX_INDEX_URL ("none": no
/// index); else PIP_INDEX_URL with PIP_EXTRA_INDEX_URL; else the first of
/// `pip_files` that sets index-url (with its extra-index-url, and
/// PIP_EXTRA_INDEX_URL); else PIP_EXTRA_INDEX_URL alone.
fn index_urls(p: &PackageArgs, pip_files: &[PathBuf]) -> Result<Vec<IndexUrl>, ConfigError> {
    let parse = |text: &str, origin: &str, name: &'static str| {
        text.split_whitespace()
            .map(|u| IndexUrl::parse(u, origin).map_err(|e| bad(name, e.to_string())))
            .collect::<Result<Vec<_>, _>>()
    };
    let extra = || match &p.pip_extra_index_url {
        Some(text) => parse(text, "PIP_EXTRA_INDEX_URL", "PIP_EXTRA_INDEX_URL"),
        None => Ok(Vec::new()),
    };
    if let Some(text) = p.index_url.as_deref().filter(|t| !t.trim().is_empty()) {
        if text.trim().eq_ignore_ascii_case("none") {
            return Ok(Vec::new());
        }
        return parse(text, "SANDBOX_INDEX_URL", "SANDBOX_INDEX_URL");
    }
    if let Some(text) = p.pip_index_url.as_deref().filter(|t| !t.trim().is_empty()) {
        let mut urls = parse(text, "PIP_INDEX_URL", "PIP_INDEX_URL")?;
        urls.extend(extra()?);
        return Ok(urls);
    }
    for file in pip_files {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        let conf = parse_pip_conf(&text);
        let Some(index) = conf.index_url else {
            continue;
        };
        let origin = format!("index-url in {}", file.display());
        let mut urls = parse(&index, &origin, "pip.conf index-url")?;
        let extra_origin = format!("extra-index-url in {}", file.display());
        for url in conf.extra_index_urls {
            urls.extend(parse(&url, &extra_origin, "pip.conf extra-index-url")?);
        }
        urls.extend(extra()?);
        return Ok(urls);
    }
    extra()
}

/// pip's configuration files, most important first: PIP_CONFIG_FILE (the
/// null device turns them all off, as in pip), the user's, then the
/// system's.
fn pip_conf_files(explicit: Option<&Path>) -> Vec<PathBuf> {
    let mut files = Vec::new();
    if let Some(file) = explicit {
        if file == Path::new("/dev/null") || file == Path::new("nul") {
            return files;
        }
        files.push(file.to_path_buf());
    }
    if let Some(config) = dirs::config_dir() {
        files.push(config.join("pip").join("pip.conf"));
    }
    if let Some(home) = dirs::home_dir() {
        files.push(home.join(".config").join("pip").join("pip.conf"));
        files.push(home.join(".pip").join("pip.conf"));
    }
    if cfg!(unix) {
        files.push(PathBuf::from("/etc/pip.conf"));
        files.push(PathBuf::from("/etc/xdg/pip/pip.conf"));
    }
    files.dedup();
    files
}

/// `~/.cache/mcp-code-sandbox` (or the platform's equivalent).
fn default_cache_dir() -> PathBuf {
    dirs::cache_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("mcp-code-sandbox")
}

/// The repository's `runtime/` directory, where fetch-python.sh puts runtimes.
fn default_runtime_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("runtime")
}

/// The door's settings: guests' HTTP destinations, networks and caps.
fn door_settings(s: &Settings) -> Result<DoorSettings, ConfigError> {
    let allow_hosts =
        AllowList::parse(&s.allow_hosts).map_err(|e| bad("SANDBOX_ALLOW_HOSTS", e.to_string()))?;
    let networks = s
        .allow_networks
        .split([',', ' '])
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(|n| {
            n.parse::<ipnet::IpNet>().map_err(|_| {
                bad(
                    "SANDBOX_ALLOW_NETWORKS",
                    format!("'{n}' is not a CIDR range; write e.g. 10.1.0.0/16 or fd00::/8"),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if s.door_max_calls == 0 {
        return Err(bad("SANDBOX_DOOR_MAX_CALLS", "must be at least 1"));
    }
    let upstreams = match &s.upstreams {
        None => Vec::new(),
        Some(path) => upstream::spec::load(path, &|name| std::env::var(name).ok())
            .map_err(|e| bad("SANDBOX_UPSTREAMS", e.to_string()))?,
    };
    Ok(DoorSettings {
        upstreams,
        http: DoorHttpSettings {
            allow_hosts,
            addresses: Arc::new(AddressPolicy::new(networks)),
            max_bytes: s.guest_http_max_bytes,
            ..DoorHttpSettings::default()
        },
        caps: DoorCaps {
            max_calls: s.door_max_calls,
            max_time: seconds("SANDBOX_DOOR_MAX_SECONDS", s.door_max_seconds)?,
        },
    })
}

/// The module names of `SANDBOX_PRELOAD`: dotted Python identifiers.
fn preload_modules(value: &str) -> Result<Vec<String>, ConfigError> {
    let value = value.trim();
    if value.eq_ignore_ascii_case("none") {
        return Ok(Vec::new());
    }
    let is_identifier = |part: &str| {
        let mut chars = part.chars();
        chars
            .next()
            .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
            && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
    };
    let mut modules: Vec<String> = Vec::new();
    for name in value.split([',', ' ', '\t']).filter(|n| !n.is_empty()) {
        if !name.split('.').all(is_identifier) {
            return Err(bad(
                "SANDBOX_PRELOAD",
                format!(
                    "'{name}' is not a module name; give names such as numpy, matplotlib.pyplot (or none)"
                ),
            ));
        }
        if !modules.iter().any(|m| m == name) {
            modules.push(name.to_owned());
        }
    }
    Ok(modules)
}

#[cfg(test)]
mod tests;
