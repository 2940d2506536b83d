//! The upstreams file (`SANDBOX_UPSTREAMS`): which MCP servers guests may
//! call, how each is reached, and which of its tools are offered.
//!
//! ```toml
//! [[upstream]]
//! name = "notes"                       # tools appear as tools.notes_<tool>
//! command = ["notes-mcp", "--stdio"]   # started once, restarted if it dies
//! env = { NOTES_DIR = "/srv/notes" }   # its environment: this, PATH, HOME, LANG
//! tools = ["search", "read"]           # or ["*"] for all it lists
//!
//! [[upstream]]
//! name = "weather"
//! url = "https://weather.example/mcp"  # Streamable HTTP
//! bearer_token_env = "WEATHER_TOKEN"   # sent as its bearer token
//! tools = ["*"]
//! call_timeout_seconds = 30
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use url::Url;

/// Environment variables a command inherits from the server unless its entry
/// says otherwise (`inherit_env`); nothing else of the server's environment
/// (tokens, keys) reaches it.
const DEFAULT_INHERITED: &[&str] = &["PATH", "HOME", "LANG", "LC_ALL", "TMPDIR"];
/// Longest server name (it prefixes every tool name).
const MAX_NAME_CHARS: usize = 32;
/// Default time one upstream call may take (within the execution's door time).
const DEFAULT_CALL_SECONDS: u64 = 60;
/// Default time a server has to start and list its tools.
const DEFAULT_START_SECONDS: u64 = 30;
/// Default cap on one call's result, as JSON.
const DEFAULT_MAX_RESULT_BYTES: usize = 16 << 20;
/// Highest cap a file may set (a command's line buffer grows to twice it).
const MAX_RESULT_BYTES: usize = 64 << 20;

/// One upstream MCP server, as the file describes it.
#[derive(Clone, Debug)]
pub struct UpstreamSpec {
    /// Its name: tools appear to guests as `<name>_<tool>`.
    pub name: String,
    /// How it is reached.
    pub transport: UpstreamTransport,
    /// Which of its tools are offered.
    pub tools: ToolChoice,
    /// Most time one call may take.
    pub call_timeout: Duration,
    /// Most time it has to start (connect, initialize, list its tools).
    pub start_timeout: Duration,
    /// Most bytes of one call's result, as JSON.
    pub max_result_bytes: usize,
}

/// How an upstream server is reached.
#[derive(Clone, Debug)]
pub enum UpstreamTransport {
    /// A command speaking MCP on its stdin and stdout.
    Command {
        /// The program and its arguments (no shell).
        argv: Vec<String>,
        /// Its whole environment: the inherited variables and `env`.
        env: BTreeMap<String, String>,
        /// Its working directory (`/` when unset, not the server's).
        cwd: Option<PathBuf>,
    },
    /// A Streamable HTTP endpoint.
    Http {
        /// The endpoint.
        url: Url,
        /// The bearer token sent with every request, when one is configured.
        bearer_token: Option<Secret>,
    },
}

/// A value that is never printed.
#[derive(Clone)]
pub struct Secret(pub String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// Which of an upstream's tools are offered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    /// Every tool it lists.
    All,
    /// Only these (by their names upstream).
    Named(Vec<String>),
}

impl ToolChoice {
    /// Whether the tool named `name` upstream is offered.
    pub fn includes(&self, name: &str) -> bool {
        match self {
            Self::All => true,
            Self::Named(names) => names.iter().any(|n| n == name),
        }
    }
}

/// The upstreams file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamsFileError {
    /// It could not be read.
    #[error("cannot read the upstreams file {path}: {source}; check SANDBOX_UPSTREAMS")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It is not valid TOML of the expected shape.
    #[error("the upstreams file {path} is not valid: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        message: String,
    },
    /// One entry is wrong.
    #[error("the upstreams file {path}, upstream '{name}': {message}")]
    Entry {
        /// The file.
        path: PathBuf,
        /// The entry's name.
        name: String,
        /// What is wrong and how to fix it.
        message: String,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    upstream: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    command: Option<Vec<String>>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    inherit_env: Option<Vec<String>>,
    cwd: Option<PathBuf>,
    url: Option<String>,
    bearer_token_env: Option<String>,
    tools: Vec<String>,
    call_timeout_seconds: Option<u64>,
    start_timeout_seconds: Option<u64>,
    max_result_bytes: Option<usize>,
}

/// Reads the upstreams file at `path`; `lookup` reads the server's
/// environment (for `inherit_env` and `bearer_token_env`).
pub fn load(
    path: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<UpstreamSpec>, UpstreamsFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| UpstreamsFileError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse(&text, path, lookup)
}

/// Parses the text of an upstreams file (`path` names it in errors).
pub fn parse(
    text: &str,
    path: &Path,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<UpstreamSpec>, UpstreamsFileError> {
    let file: File = toml::from_str(text).map_err(|e| UpstreamsFileError::Parse {
        path: path.to_owned(),
        message: e.message().to_owned(),
    })?;
    let mut specs: Vec<UpstreamSpec> = Vec::new();
    for entry in file.upstream {
        let name = entry.name.clone();
        let wrong = |message: String| UpstreamsFileError::Entry {
            path: path.to_owned(),
            name: name.clone(),
            message,
        };
        if specs.iter().any(|s| s.name == entry.name) {
            return Err(wrong("two upstreams have this name".into()));
        }
        if let Some(other) = specs.iter().find(|s| prefixes(&s.name, &entry.name)) {
            return Err(wrong(format!(
                "it and '{}' would share tool names (one name followed by _ starts the other); rename one",
                other.name
            )));
        }
        specs.push(entry.into_spec(lookup).map_err(wrong)?);
    }
    Ok(specs)
}

impl Entry {
    fn into_spec(self, lookup: &dyn Fn(&str) -> Option<String>) -> Result<UpstreamSpec, String> {
        check_name(&self.name)?;
        let tools = tool_choice(self.tools)?;
        let transport = match (self.command, self.url) {
            (Some(argv), None) => {
                if self.bearer_token_env.is_some() {
                    return Err(
                        "bearer_token_env is for url upstreams; pass a command's secrets in env"
                            .into(),
                    );
                }
                command_transport(argv, self.env, self.inherit_env, self.cwd, lookup)?
            }
            (None, Some(url)) => {
                if !self.env.is_empty() || self.inherit_env.is_some() || self.cwd.is_some() {
                    return Err("env, inherit_env and cwd are for command upstreams".into());
                }
                http_transport(&url, self.bearer_token_env.as_deref(), lookup)?
            }
            _ => {
                return Err(
                    "give exactly one of command (a list: program and arguments) or url".into(),
                );
            }
        };
        let seconds = |value: Option<u64>, default: u64, key: &str| match value.unwrap_or(default) {
            0 => Err(format!("{key} must be at least 1")),
            n => Ok(Duration::from_secs(n)),
        };
        Ok(UpstreamSpec {
            name: self.name,
            transport,
            tools,
            call_timeout: seconds(
                self.call_timeout_seconds,
                DEFAULT_CALL_SECONDS,
                "call_timeout_seconds",
            )?,
            start_timeout: seconds(
                self.start_timeout_seconds,
                DEFAULT_START_SECONDS,
                "start_timeout_seconds",
            )?,
            max_result_bytes: match self.max_result_bytes.unwrap_or(DEFAULT_MAX_RESULT_BYTES) {
                n if n > MAX_RESULT_BYTES => {
                    return Err(format!(
                        "max_result_bytes is at most {MAX_RESULT_BYTES} (64 MiB)"
                    ));
                }
                n => n,
            },
        })
    }
}

/// Whether tools of `a` and `b` could get the same `<server>_<tool>` name:
/// one name, then `_`, starts the other.
fn prefixes(a: &str, b: &str) -> bool {
    let starts = |long: &str, short: &str| {
        long.strip_prefix(short)
            .is_some_and(|rest| rest.starts_with('_'))
    };
    starts(a, b) || starts(b, a)
}

/// A name is a lowercase Python identifier of at most 32 characters.
fn check_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let starts_well = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !starts_well || !rest_ok || name.len() > MAX_NAME_CHARS {
        return Err(format!(
            "the name must be a lowercase letter, then lowercase letters, digits or _ (at most {MAX_NAME_CHARS}): it prefixes the tool names guests call"
        ));
    }
    Ok(())
}

fn tool_choice(tools: Vec<String>) -> Result<ToolChoice, String> {
    match tools.as_slice() {
        [] => Err("tools is empty; list the tools to offer, or [\"*\"] for all".into()),
        [all] if all == "*" => Ok(ToolChoice::All),
        names if names.iter().any(|n| n == "*") => {
            Err("\"*\" stands alone in tools: it offers every tool".into())
        }
        _ => Ok(ToolChoice::Named(tools)),
    }
}

fn command_transport(
    argv: Vec<String>,
    env: BTreeMap<String, String>,
    inherit_env: Option<Vec<String>>,
    cwd: Option<PathBuf>,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<UpstreamTransport, String> {
    if argv.first().is_none_or(|program| program.is_empty()) {
        return Err("command is empty; give the program and its arguments as a list".into());
    }
    let inherited = match &inherit_env {
        Some(names) => names.iter().map(String::as_str).collect::<Vec<_>>(),
        None => DEFAULT_INHERITED.to_vec(),
    };
    let mut whole: BTreeMap<String, String> = inherited
        .into_iter()
        .filter_map(|name| lookup(name).map(|value| (name.to_owned(), value)))
        .collect();
    whole.extend(env);
    Ok(UpstreamTransport::Command {
        argv,
        env: whole,
        cwd,
    })
}

fn http_transport(
    url: &str,
    token_env: Option<&str>,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<UpstreamTransport, String> {
    let url = Url::parse(url).map_err(|e| format!("url '{url}' is not a URL ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err("url must be an http:// or https:// URL with a host".into());
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("url must not carry credentials; use bearer_token_env".into());
    }
    let bearer_token = match token_env {
        None => None,
        Some(name) => {
            let token = lookup(name).filter(|t| !t.is_empty()).ok_or_else(|| {
                format!(
                    "bearer_token_env names {name}, which is not set in the server's environment"
                )
            })?;
            if url.scheme() == "http" && !is_loopback(&url) {
                return Err("a bearer token is only sent over https (or to a loopback address); use an https:// url".into());
            }
            Some(Secret(token))
        }
    };
    Ok(UpstreamTransport::Http { url, bearer_token })
}

fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(name)) => name.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "PATH" => Some("/usr/bin".into()),
            "TOKEN" => Some("s3cret".into()),
            "E2B_API_KEY" => Some("e2b_key".into()),
            _ => None,
        }
    }

    fn parsed(text: &str) -> Result<Vec<UpstreamSpec>, String> {
        parse(text, Path::new("up.toml"), &env).map_err(|e| e.to_string())
    }

    #[test]
    fn a_command_gets_only_its_own_environment() {
        let specs = parsed(
            r#"
            [[upstream]]
            name = "notes"
            command = ["notes-mcp", "--stdio"]
            env = { NOTES_DIR = "/srv" }
            tools = ["search"]
            "#,
        )
        .unwrap();
        let UpstreamTransport::Command { argv, env, .. } = &specs[0].transport else {
            panic!("a command");
        };
        assert_eq!(argv, &["notes-mcp", "--stdio"]);
        assert_eq!(env.get("PATH").map(String::as_str), Some("/usr/bin"));
        assert_eq!(env.get("NOTES_DIR").map(String::as_str), Some("/srv"));
        assert!(!env.contains_key("E2B_API_KEY"), "{env:?}");
        assert!(specs[0].tools.includes("search") && !specs[0].tools.includes("read"));
    }

    #[test]
    fn a_url_takes_its_token_from_the_environment_and_never_prints_it() {
        let specs = parsed(
            r#"
            [[upstream]]
            name = "weather"
            url = "https://weather.test/mcp"
            bearer_token_env = "TOKEN"
            tools = ["*"]
            "#,
        )
        .unwrap();
        assert_eq!(specs[0].tools, ToolChoice::All);
        assert!(!format!("{specs:?}").contains("s3cret"));
    }

    #[test]
    fn mistakes_are_refused_with_what_to_fix() {
        let cases = [
            (
                "name = \"Bad-Name\"\ncommand = [\"x\"]\ntools = [\"*\"]",
                "lowercase",
            ),
            ("name = \"a\"\ntools = [\"*\"]", "exactly one of command"),
            (
                "name = \"a\"\ncommand = []\ntools = [\"*\"]",
                "command is empty",
            ),
            (
                "name = \"a\"\ncommand = [\"x\"]\ntools = []",
                "tools is empty",
            ),
            (
                "name = \"a\"\ncommand = [\"x\"]\ntools = [\"*\", \"y\"]",
                "stands alone",
            ),
            (
                "name = \"a\"\nurl = \"ftp://x/\"\ntools = [\"*\"]",
                "http:// or https://",
            ),
            (
                "name = \"a\"\nurl = \"https://u:p@x/\"\ntools = [\"*\"]",
                "credentials",
            ),
            (
                "name = \"a\"\nurl = \"https://x/\"\nbearer_token_env = \"NOPE\"\ntools = [\"*\"]",
                "not set",
            ),
            (
                "name = \"a\"\nurl = \"http://remote.test/\"\nbearer_token_env = \"TOKEN\"\ntools = [\"*\"]",
                "only sent over https",
            ),
            (
                "name = \"a\"\ncommand = [\"x\"]\ntools = [\"*\"]\ncall_timeout_seconds = 0",
                "at least 1",
            ),
            (
                "name = \"a\"\ncommand = [\"x\"]\ntools = [\"*\"]\nshell = true",
                "unknown field",
            ),
            (
                "name = \"a\"\ncommand = [\"x\"]\ntools = [\"*\"]\nmax_result_bytes = 100000000",
                "at most 67108864",
            ),
        ];
        for (entry, expected) in cases {
            let error = parsed(&format!("[[upstream]]\n{entry}")).unwrap_err();
            assert!(error.contains(expected), "{entry}: {error}");
        }
        let twice = "[[upstream]]\nname = \"a\"\ncommand = [\"x\"]\ntools = [\"*\"]\n";
        let error = parsed(&format!("{twice}{twice}")).unwrap_err();
        assert!(error.contains("two upstreams"), "{error}");
        // x's tool b-add and x_b's add would both be x_b_add.
        let other = "[[upstream]]\nname = \"a_b\"\ncommand = [\"x\"]\ntools = [\"*\"]\n";
        let error = parsed(&format!("{twice}{other}")).unwrap_err();
        assert!(error.contains("share tool names"), "{error}");
    }

    #[test]
    fn plain_http_to_loopback_may_carry_a_token() {
        let specs = parsed(
            "[[upstream]]\nname = \"a\"\nurl = \"http://127.0.0.1:9/mcp\"\nbearer_token_env = \"TOKEN\"\ntools = [\"*\"]",
        );
        assert!(specs.is_ok(), "{specs:?}");
    }
}
