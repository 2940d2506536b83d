//! [`PackageSettings`]: where packages come from (indexes, a wheelhouse), where
//! downloads are kept, and the caps on one install; and reading pip's
//! configuration file format, whose `index-url` is honoured.
//!
//! Credentials written into an index URL (`https://user:password@host/...`)
//! are taken out of it when it is parsed: the URL used for requests never
//! carries them, and [`IndexUrl::credentials`] hands them to the one rule
//! that decides where they go (see `credentials.rs`).
//!
//! Nothing here reads the environment or the file system: `config.rs` finds
//! the values and passes them in.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use reqwest::Url;

/// A package index's simple API root (`https://host/simple/`), with where the
/// setting came from for messages, and the credentials it was given with.
#[derive(Clone, PartialEq, Eq)]
pub struct IndexUrl {
    url: Url,
    origin: String,
    credentials: Option<Credentials>,
}

/// Why an index URL setting is refused; the value is shown without its
/// credentials.
#[derive(Clone, Debug, thiserror::Error)]
pub enum IndexUrlError {
    /// It does not parse as a URL.
    #[error("'{shown}' from {origin} is not a URL: {source}")]
    NotAUrl {
        /// The value, redacted.
        shown: String,
        /// The setting it came from.
        origin: String,
        /// Why it does not parse.
        source: <Url as std::str::FromStr>::Err,
    },
    /// Its scheme is not http(s).
    #[error(
        "'{shown}' from {origin} is not an http(s) URL; give the index's simple API address, e.g. https://<your-index>/simple/"
    )]
    NotHttp {
        /// The value, redacted.
        shown: String,
        /// The setting it came from.
        origin: String,
    },
    /// It names no host.
    #[error("'{shown}' from {origin} has no host")]
    NoHost {
        /// The value, redacted.
        shown: String,
        /// The setting it came from.
        origin: String,
    },
}

impl IndexUrl {
    /// Parses an index URL given by setting `origin` (e.g. `SANDBOX_INDEX_URL`).
    /// Only `http` and `https` are accepted; a missing trailing `/` is added.
    pub fn parse(raw: &str, origin: impl Into<String>) -> Result<Self, IndexUrlError> {
        let origin = origin.into();
        let raw = raw.trim();
        let mut url = match Url::parse(raw) {
            Ok(url) => url,
            Err(source) => {
                return Err(IndexUrlError::NotAUrl {
                    shown: redact_text(raw),
                    origin,
                    source,
                });
            }
        };
        if !matches!(url.scheme(), "http" | "https") {
            return Err(IndexUrlError::NotHttp {
                shown: redact(&url),
                origin,
            });
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(IndexUrlError::NoHost {
                shown: redact(&url),
                origin,
            });
        }
        url.set_fragment(None);
        if !url.path().ends_with('/') {
            let path = format!("{}/", url.path());
            url.set_path(&path);
        }
        let credentials = Credentials::take_from(&mut url);
        Ok(Self {
            url,
            origin,
            credentials,
        })
    }

    /// The URL, without credentials.
    pub fn url(&self) -> &Url {
        &self.url
    }

    /// The user name and password the URL was given with, if any.
    pub fn credentials(&self) -> Option<&Credentials> {
        self.credentials.as_ref()
    }

    /// Which setting named it.
    pub fn origin(&self) -> &str {
        &self.origin
    }
}

impl fmt::Display for IndexUrl {
    /// The URL without credentials, then where it came from.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (from {})", redact(&self.url), self.origin)
    }
}

/// A user name and password for HTTP Basic authentication. Its `Debug`
/// shows neither.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The user name (percent-decoded).
    pub user: String,
    /// The password (percent-decoded), if one was given.
    pub password: Option<String>,
}

impl Credentials {
    /// Takes the user name and password out of `url`, leaving it without them.
    fn take_from(url: &mut Url) -> Option<Self> {
        if url.username().is_empty() && url.password().is_none() {
            return None;
        }
        let credentials = Self {
            user: super::simple_page::percent_decode(url.username()),
            password: url.password().map(super::simple_page::percent_decode),
        };
        let _ = url.set_username("");
        let _ = url.set_password(None);
        Some(credentials)
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Credentials(***)")
    }
}

impl fmt::Debug for IndexUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Characters of a URL shown in a message or a log line.
const SHOWN_URL_CHARS: usize = 300;

/// A URL as text for a message or a log, with any user name and password
/// replaced by `***`, and cut after [`SHOWN_URL_CHARS`] characters (an index
/// page may list URLs of any length).
pub fn redact(url: &Url) -> String {
    let text = if url.username().is_empty() && url.password().is_none() {
        url.to_string()
    } else {
        let mut clean = url.clone();
        let _ = clean.set_username("***");
        let _ = clean.set_password(None);
        clean.to_string()
    };
    super::message_text::clip(&text, SHOWN_URL_CHARS)
}

/// [`redact`] for text that may not parse as a URL.
fn redact_text(raw: &str) -> String {
    match Url::parse(raw) {
        Ok(url) => redact(&url),
        Err(_) => match raw.split_once('@') {
            Some((_, rest)) if raw.contains("://") => format!("***@{rest}"),
            _ => raw.to_owned(),
        },
    }
}

/// Caps on one install.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstallLimits {
    /// Requirements one call may name.
    pub max_requirements: usize,
    /// Packages one resolution may pick (requested and dependencies).
    pub max_packages: usize,
    /// Largest file downloaded, in bytes.
    pub max_download_bytes: u64,
    /// Largest index page read, in bytes.
    pub max_page_bytes: u64,
    /// Bytes one install may download in all (pages, metadata files, wheels).
    pub max_install_download_bytes: u64,
    /// Bytes one wheel may unpack to, counted as inflated.
    pub max_unpacked_bytes: u64,
    /// Bytes all the wheels of one install may unpack to.
    pub max_install_unpacked_bytes: u64,
    /// Bytes one member of a wheel may unpack to.
    pub max_member_bytes: u64,
    /// Members one wheel may hold.
    pub max_members: u64,
    /// Largest `METADATA`, `WHEEL` or `RECORD` file read, in bytes.
    pub max_metadata_bytes: u64,
    /// `.dist-info` directories read from a sandbox's site-packages.
    pub max_installed_dists: usize,
    /// Bytes of `METADATA` read from a sandbox's site-packages in all.
    pub max_site_metadata_bytes: u64,
    /// Steps one install may take to resolve: entries of site-packages and
    /// requirements read, files of index pages sorted, versions compared.
    pub max_resolver_steps: u64,
    /// Most time the solver may think in one install (its runs together,
    /// not the fetches between them).
    pub max_solving: Duration,
}

impl Default for InstallLimits {
    fn default() -> Self {
        Self {
            max_requirements: 64,
            max_packages: 100,
            max_download_bytes: 50 << 20,
            max_page_bytes: 8 << 20,
            max_install_download_bytes: 256 << 20,
            max_unpacked_bytes: 200 << 20,
            max_install_unpacked_bytes: 512 << 20,
            max_member_bytes: 50 << 20,
            max_members: 10_000,
            max_metadata_bytes: 4 << 20,
            max_installed_dists: 1000,
            max_site_metadata_bytes: 64 << 20,
            max_resolver_steps: 1_000_000,
            max_solving: Duration::from_secs(20),
        }
    }
}

/// How the HTTP client behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpSettings {
    /// Time to establish a connection.
    pub connect_timeout: Duration,
    /// Longest pause between two reads of a response.
    pub read_timeout: Duration,
    /// Retries of a request that failed transiently (connection errors,
    /// timeouts, 5xx, 429).
    pub retries: u32,
    /// Wait before the first retry; doubled for each further one.
    pub backoff: Duration,
    /// How long an index page is reused without asking again.
    pub page_ttl: Duration,
    /// Bytes of parsed index pages kept in memory (estimated), in all.
    pub page_cache_bytes: u64,
    /// Index pages kept in memory.
    pub page_cache_entries: usize,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(60),
            retries: 3,
            backoff: Duration::from_millis(500),
            page_ttl: Duration::from_secs(600),
            page_cache_bytes: 64 << 20,
            page_cache_entries: 1000,
        }
    }
}

/// Where packages come from and how installs behave.
#[derive(Clone, Debug)]
pub struct PackageSettings {
    /// Indexes in the order they are asked; the first that knows a project
    /// supplies all its files (no mixing, against dependency confusion).
    pub indexes: Vec<IndexUrl>,
    /// A directory of wheels used before any index.
    pub wheelhouse: Option<PathBuf>,
    /// Where downloaded wheels are kept, by sha256.
    pub cache_dir: PathBuf,
    /// Where the installed modules' bytecode is kept, by wheel and runtime
    /// (bounded like the wheel cache, by [`Self::wheel_cache_bytes`]).
    pub bytecode_dir: PathBuf,
    /// Most bytes the wheel cache keeps on disk; the least recently used
    /// wheels are deleted past it.
    pub wheel_cache_bytes: u64,
    /// Longest one install may take, from the call to its answer.
    pub install_timeout: Duration,
    /// Caps on one install.
    pub limits: InstallLimits,
    /// HTTP behaviour.
    pub http: HttpSettings,
    /// With no index and no wheelhouse: the Python whose pip is asked, once,
    /// which index to use (`None`: never ask).
    pub pip_python: Option<String>,
}

/// Default of [`PackageSettings::install_timeout`].
pub const DEFAULT_INSTALL_TIMEOUT: Duration = Duration::from_secs(300);
/// Default of [`PackageSettings::wheel_cache_bytes`].
pub const DEFAULT_WHEEL_CACHE_BYTES: u64 = 1 << 30;

impl PackageSettings {
    /// Settings with no index and no wheelhouse, caching wheels in
    /// `cache_dir` (and bytecode in its `bytecode` directory).
    pub fn new(cache_dir: PathBuf) -> Self {
        Self {
            indexes: Vec::new(),
            wheelhouse: None,
            bytecode_dir: cache_dir.join("bytecode"),
            cache_dir,
            wheel_cache_bytes: DEFAULT_WHEEL_CACHE_BYTES,
            install_timeout: DEFAULT_INSTALL_TIMEOUT,
            limits: InstallLimits::default(),
            http: HttpSettings::default(),
            pip_python: None,
        }
    }
}

/// The index settings found in one pip configuration file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PipConfIndexes {
    /// `index-url`, if set.
    pub index_url: Option<String>,
    /// `extra-index-url` values.
    pub extra_index_urls: Vec<String>,
}

/// Reads `index-url` and `extra-index-url` from the text of a pip
/// configuration file (INI). `[install]` wins over `[global]`, as in pip.
/// Values may continue on indented lines (pip's multi-value form); `#` and
/// `;` start comments.
pub fn parse_pip_conf(text: &str) -> PipConfIndexes {
    #[derive(Default)]
    struct Section {
        index_url: Option<String>,
        extra: Option<Vec<String>>,
    }
    let mut global = Section::default();
    let mut install = Section::default();
    let mut current: Option<&str> = None;
    let mut last_key: Option<String> = None;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with(';') {
            continue;
        }
        let section = match current {
            Some("global") => Some(&mut global),
            Some("install") => Some(&mut install),
            _ => None,
        };
        if line.starts_with([' ', '\t']) {
            if let (Some(section), Some(key)) = (section, last_key.as_deref())
                && key == "extra-index-url"
            {
                section
                    .extra
                    .get_or_insert_with(Vec::new)
                    .extend(trimmed.split_whitespace().map(str::to_owned));
            }
            continue;
        }
        if let Some(name) = trimmed.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            current = match name.trim().to_ascii_lowercase().as_str() {
                "global" => Some("global"),
                "install" => Some("install"),
                _ => Some("other"),
            };
            last_key = None;
            continue;
        }
        let Some((key, value)) = trimmed.split_once(['=', ':']) else {
            continue;
        };
        let key = key.trim().to_ascii_lowercase().replace('_', "-");
        let value = value.trim();
        last_key = Some(key.clone());
        let Some(section) = section else { continue };
        match key.as_str() {
            "index-url" | "index" if !value.is_empty() => {
                section.index_url = Some(value.to_owned());
            }
            "extra-index-url" => {
                section.extra = Some(value.split_whitespace().map(str::to_owned).collect());
            }
            _ => {}
        }
    }
    PipConfIndexes {
        index_url: install.index_url.or(global.index_url),
        extra_index_urls: install.extra.or(global.extra).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_urls_are_checked_and_get_a_trailing_slash() {
        let i = IndexUrl::parse("https://example.test/simple", "SANDBOX_INDEX_URL").unwrap();
        assert_eq!(i.url().as_str(), "https://example.test/simple/");
        assert_eq!(
            i.to_string(),
            "https://example.test/simple/ (from SANDBOX_INDEX_URL)"
        );
        assert!(IndexUrl::parse("file:///etc/passwd", "x").is_err());
        assert!(IndexUrl::parse("not a url", "x").is_err());
        assert!(IndexUrl::parse("ftp://example.test/", "x").is_err());
    }

    #[test]
    fn credentials_never_appear_in_messages() {
        let i =
            IndexUrl::parse("https://me:s3cr%40t@example.test/simple/", "PIP_INDEX_URL").unwrap();
        assert!(!i.to_string().contains("s3cr"), "{i}");
        assert!(!i.to_string().contains("me:"), "{i}");
        assert!(!format!("{:?}", i.credentials()).contains("s3cr"));
        let credentials = i.credentials().expect("kept for requests");
        assert_eq!(credentials.user, "me");
        assert_eq!(
            credentials.password.as_deref(),
            Some("s3cr@t"),
            "percent-decoded"
        );
        assert_eq!(
            i.url().as_str(),
            "https://example.test/simple/",
            "the URL itself never carries them"
        );
        let err = IndexUrl::parse("gopher://me:s3cret@example.test/", "x").unwrap_err();
        assert!(matches!(err, IndexUrlError::NotHttp { .. }), "{err:?}");
        assert!(!err.to_string().contains("s3cret"), "{err}");
        assert!(!format!("{err:?}").contains("s3cret"), "{err:?}");
        let err = IndexUrl::parse("not a url", "x").unwrap_err();
        assert!(matches!(err, IndexUrlError::NotAUrl { .. }), "{err:?}");
        let long =
            Url::parse(&format!("https://me:pw@files.test/{}", "a".repeat(100_000))).unwrap();
        let shown = redact(&long);
        assert!(shown.starts_with("https://***@files.test/aaa"), "{shown}");
        assert!(
            shown.chars().count() <= 301,
            "a URL from a page is shown cut"
        );
    }

    #[test]
    fn pip_conf_install_wins_over_global_and_values_continue() {
        let text = "\
# comment
[global]
index-url = https://global.test/simple
timeout = 60
extra-index-url =
    https://one.test/simple
    https://two.test/simple

[install]
index_url: https://install.test/simple
";
        let conf = parse_pip_conf(text);
        assert_eq!(
            conf.index_url.as_deref(),
            Some("https://install.test/simple")
        );
        assert_eq!(
            conf.extra_index_urls,
            vec!["https://one.test/simple", "https://two.test/simple"]
        );
    }

    #[test]
    fn pip_conf_without_an_index_is_empty() {
        let conf =
            parse_pip_conf("[global]\ncert = /etc/ssl/certs/ca.crt\n[freeze]\nindex-url=x\n");
        assert_eq!(conf, PipConfIndexes::default());
        assert_eq!(
            parse_pip_conf("garbage\n\u{0}[["),
            PipConfIndexes::default()
        );
    }
}
