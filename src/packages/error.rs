//! [`PackageError`]: why an install did not happen, worded for the model that
//! reads it: what was refused or failed, quoting the value, and what to do.
//! Every failure leaves the sandbox as it was.

use super::environment::PythonVersionError;
use super::http::{ClientSetupError, RedirectRefused};
use super::metadata_error::MetadataError;
use super::requirement::RequirementError;
use super::simple_page::PageError;
use super::staging::NoRoom;
use super::stop::Stopped;
use super::unpack::WheelError;
use crate::sandbox::SandboxError;

/// Why packages could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    /// Neither an index nor a wheelhouse is configured.
    #[error(
        "no package source is configured on this server (and asking pip for its index is off: SANDBOX_PIP_PYTHON=none), so nothing can be installed. The server's operator can set SANDBOX_INDEX_URL (or --index-url) to a package index's simple API, e.g. https://<your-index>/simple/ (PIP_INDEX_URL or index-url in pip.conf work too), or set SANDBOX_WHEELHOUSE (or --wheelhouse) to a directory of wheels, made on a connected machine with `mcp-code-sandbox wheelhouse add PACKAGE... --dir DIR`"
    )]
    NotConfigured,

    /// Nothing is configured, and the machine's pip could not name an index.
    #[error(
        "no package source is configured on this server, and {0}. The server's operator can set SANDBOX_INDEX_URL (or --index-url) to a package index's simple API, e.g. https://<your-index>/simple/ (PIP_INDEX_URL or index-url in pip.conf work too), or set SANDBOX_WHEELHOUSE (or --wheelhouse) to a directory of wheels, made on a connected machine with `mcp-code-sandbox wheelhouse add PACKAGE... --dir DIR`"
    )]
    NoPipIndex(String),

    /// `wheelhouse add` was run without an index to fetch from.
    #[error(
        "filling a wheelhouse needs a package index to download from: set SANDBOX_INDEX_URL (or --index-url), PIP_INDEX_URL, or index-url in pip.conf, on a machine that can reach it"
    )]
    NoIndexForWheelhouse,

    /// A requirement is refused (see [`RequirementError`]).
    #[error(transparent)]
    Requirement(#[from] RequirementError),

    /// No source has the project.
    #[error(
        "no package named '{name}' was found ({searched}){wanted_by}. Check the spelling: names are as on the index, e.g. 'python-dateutil' for the dateutil module, 'beautifulsoup4' for bs4"
    )]
    UnknownPackage {
        /// The normalized name.
        name: String,
        /// Where it was looked for.
        searched: String,
        /// `; it is needed by ...` for dependencies.
        wanted_by: String,
    },

    /// The project exists but no version matches.
    #[error("{name} has no version matching {wanted} ({origin}); versions available: {available}")]
    NoMatchingVersion {
        /// The project.
        name: String,
        /// The specifiers, e.g. `==99.0`.
        wanted: String,
        /// Who asked for it.
        origin: String,
        /// Newest versions there are.
        available: String,
    },

    /// Only wheels with native code exist.
    #[error(
        "{name} cannot be installed here: this sandbox runs CPython {python} compiled to WebAssembly (WASI), which can take only pure-Python wheels (tags like py3-none-any), and {name} {version} offers only {offers}. Use the standard library or a pure-Python alternative{wanted_by}"
    )]
    NotPure {
        /// The project.
        name: String,
        /// The newest version looked at.
        version: String,
        /// The runtime's Python version.
        python: String,
        /// What it offers instead: a sample of the tags found, and a note
        /// about a source archive when there is one.
        offers: String,
        /// `; it is needed by ...` for dependencies.
        wanted_by: String,
    },

    /// Only source archives exist.
    #[error(
        "{name} cannot be installed here: {name} {version} is published only as a source archive (sdist), and building one would run its setup code on the server; this sandbox runs CPython {python} on WASI and can take only pure-Python wheels (tags like py3-none-any). Look for a version or an alternative published as a py3-none-any wheel{wanted_by}"
    )]
    SdistOnly {
        /// The project.
        name: String,
        /// The newest version looked at.
        version: String,
        /// The runtime's Python version.
        python: String,
        /// `; it is needed by ...` for dependencies.
        wanted_by: String,
    },

    /// Wheels exist only for other Python versions.
    #[error(
        "{name} {version} cannot be installed here: its wheels are for other Python versions ({detail}) and this sandbox runs CPython {python}; ask for a version that supports Python {python}{wanted_by}"
    )]
    WrongPython {
        /// The project.
        name: String,
        /// The newest version looked at.
        version: String,
        /// What it needs (Requires-Python or tags).
        detail: String,
        /// The runtime's Python version.
        python: String,
        /// `; it is needed by ...` for dependencies.
        wanted_by: String,
    },

    /// Every matching release was yanked.
    #[error(
        "{name} {version} was yanked from the index{reason}; pin it exactly ({name}=={version}) to install it anyway, or ask for another version"
    )]
    Yanked {
        /// The project.
        name: String,
        /// The yanked version.
        version: String,
        /// `: <reason>` when the index gave one.
        reason: String,
    },

    /// The index does not publish a sha256 for a file.
    #[error(
        "the index gives no sha256 hash for {filename}, so it cannot be checked and was not installed; use an index that publishes hashes (PEP 503/691), or a wheelhouse"
    )]
    NoHash {
        /// The file.
        filename: String,
    },

    /// Two requirements cannot both hold.
    #[error(
        "conflicting requirements for {name}: {first}, but {second}; no version of {name} satisfies both. Install compatible versions (pin one side), or use separate sandboxes"
    )]
    Conflict {
        /// The project.
        name: String,
        /// One side (who asked for what, and what was picked).
        first: String,
        /// The other side.
        second: String,
    },

    /// No set of versions satisfies every requirement, for more than one
    /// reason (the resolver's derivation, cut short).
    #[error(
        "no set of versions satisfies every requirement here: {explanation}. Relax or drop a requirement, pin versions whose dependencies are pure Python, or install in separate sandboxes"
    )]
    NoSolution {
        /// The chain of reasons, in words.
        explanation: String,
    },

    /// The resolver read as many versions of a package as it may, and none
    /// of them could be used.
    #[error(
        "gave up on {name} after reading {reads} of its versions, newest first, down to {oldest}: {why}. Nothing was installed. An older {name} may work: ask for `{name}<{oldest}` or pin a version you know, e.g. `{name}==X.Y`"
    )]
    GaveUp {
        /// The package.
        name: String,
        /// Versions read.
        reads: usize,
        /// The oldest version read.
        oldest: String,
        /// Why the versions read cannot be used, in words.
        why: String,
    },

    /// A requirement rules out the version of a package the runtime carries.
    #[error(
        "{name} {version} is built into this sandbox's runtime and cannot be replaced, and {origin}, which {version} does not satisfy. Use the built-in {name} {version}: drop or relax that requirement, or pick a version of the package asking for it that accepts {name} {version}"
    )]
    BuiltIn {
        /// The project.
        name: String,
        /// The version built in.
        version: String,
        /// The specifiers that rule it out, e.g. `<2`.
        wanted: String,
        /// Who asked for it.
        origin: String,
    },

    /// The dependency tree is too big.
    #[error(
        "installing this needs more than {limit} packages (requested ones and their dependencies); install fewer at a time"
    )]
    TooManyPackages {
        /// The limit.
        limit: usize,
    },

    /// An index could not be reached.
    #[error(
        "cannot reach the package index {index}: {reason}. Check the address, the network and any proxy (HTTPS_PROXY, NO_PROXY), or configure a wheelhouse (SANDBOX_WHEELHOUSE)"
    )]
    Unreachable {
        /// The index (redacted) and where it was configured.
        index: String,
        /// What failed.
        reason: String,
    },

    /// The index answered with a redirect this server does not follow.
    #[error(
        "cannot reach the package index {index}: {refused} (fetching {url}). Check the index address (use its https address), or configure a wheelhouse (SANDBOX_WHEELHOUSE)"
    )]
    Redirect {
        /// The index (redacted) and where it was configured.
        index: String,
        /// The URL that redirected (redacted).
        url: String,
        /// Why the redirect was not followed.
        #[source]
        refused: RedirectRefused,
    },

    /// A request got an unexpected HTTP answer.
    #[error("the package index answered {status} for {url}{hint}")]
    Http {
        /// The URL (redacted).
        url: String,
        /// The status.
        status: String,
        /// What to do.
        hint: String,
    },

    /// A download does not match its published hash.
    #[error(
        "the download of {filename} does not match the sha256 the index publishes (expected {expected}, got {actual}); it was discarded and nothing was installed. Try again; if it persists, the index or a proxy is serving altered files"
    )]
    HashMismatch {
        /// The file.
        filename: String,
        /// The published hash.
        expected: String,
        /// The hash of what arrived.
        actual: String,
    },

    /// A download is over the size cap.
    #[error("{filename} is larger than the {limit} a download may be; it was not installed")]
    TooLarge {
        /// The file.
        filename: String,
        /// The cap, in words.
        limit: String,
    },

    /// An index page could not be read.
    #[error("the package index page {url} could not be read: {reason}")]
    BadIndexPage {
        /// The page (redacted).
        url: String,
        /// What is wrong.
        #[source]
        reason: PageError,
    },

    /// The versions of a package that fit could not be read, and were
    /// passed over.
    #[error(
        "no version of {name} that fits could be used; the newest, {version}, was passed over because {detail}. Nothing was installed. Pin a version of {name} whose metadata is sound, or tell its maintainers"
    )]
    UnreadableVersion {
        /// The package.
        name: String,
        /// The newest version passed over.
        version: String,
        /// What is wrong with it.
        detail: String,
    },

    /// A package's metadata is unusable.
    #[error("the metadata of {filename} is unusable: {reason}; nothing was installed")]
    BadMetadata {
        /// The wheel (or metadata file).
        filename: String,
        /// What is wrong.
        #[source]
        reason: MetadataError,
    },

    /// A wheel failed a safety check.
    #[error("refused to install {filename}: {source}; nothing was installed")]
    UnsafeWheel {
        /// The wheel.
        filename: String,
        /// The check it failed.
        source: WheelError,
    },

    /// The sandbox's disk quota would be exceeded.
    #[error("{0}")]
    Quota(#[source] NoRoom),

    /// The room left under the sandbox's quota could not be measured or
    /// held (boxed: the sandbox error holds install errors in turn).
    #[error("{0}")]
    Room(#[source] Box<SandboxError>),

    /// A file operation on the host failed.
    #[error("could not {action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path, as a guest path or a host cache path.
        path: String,
        /// The error.
        source: std::io::Error,
    },

    /// An index page is over the size cap.
    #[error(
        "the package index page {url} is larger than {limit}, the most this server reads for one project page; nothing was installed. The index is misbehaving, or lists too many files for one project: use a wheelhouse for it (SANDBOX_WHEELHOUSE)"
    )]
    PageTooLarge {
        /// The page (redacted).
        url: String,
        /// The cap, in words.
        limit: String,
    },

    /// One install would download or unpack more than its cap.
    #[error(
        "this install would {what} more than {limit}, the most one install may; nothing was installed. Install fewer packages at a time"
    )]
    InstallTooLarge {
        /// `download` or `unpack`.
        what: &'static str,
        /// The cap, in words.
        limit: String,
    },

    /// Resolving took more steps than one install may.
    #[error(
        "resolving this install took more than {limit} steps (requirements read, index files sorted, versions compared), the most one install may take; nothing was installed. Install fewer packages at a time; if the sandbox's site-packages holds distributions that list thousands of requirements, remove them"
    )]
    TooComplex {
        /// The cap.
        limit: u64,
    },

    /// The solver thought longer than one install may.
    #[error(
        "working out which versions fit took more than {seconds} s of the solver's time, the most one install may take; nothing was installed. The packages' requirements conflict in too many ways: pin the versions you want (NAME==VERSION), or install fewer packages at a time"
    )]
    TooHardToSolve {
        /// The cap, in seconds.
        seconds: f64,
    },

    /// The sandbox's site-packages holds more than an install reads.
    #[error("{0}; nothing was installed")]
    CrowdedSite(String),

    /// The install was cancelled: the client cancelled the request, or the
    /// sandbox was closed.
    #[error(
        "the install was stopped before it finished (the request was cancelled, or the sandbox closed); nothing was installed"
    )]
    Cancelled,

    /// The install ran past its deadline.
    #[error(
        "the install took longer than {limit}, the most one install may take (SANDBOX_INSTALL_TIMEOUT_SECONDS); nothing was installed. The index or a download may be slow: try again, or install fewer packages at a time"
    )]
    TimedOut {
        /// The deadline, in words.
        limit: String,
    },

    /// The runtime's Python version cannot be used to pick packages.
    #[error("the installer failed: {0}")]
    PythonVersion(#[from] PythonVersionError),

    /// The HTTP client could not be built.
    #[error("the installer failed: {0}")]
    HttpClient(#[source] ClientSetupError),

    /// The installer itself failed (a task panicked, the HTTP client could not start).
    #[error("the installer failed: {0}")]
    Internal(String),
}

pub use super::message_text::{clip, some_of};

impl From<Stopped> for PackageError {
    fn from(stopped: Stopped) -> Self {
        match stopped {
            Stopped::Cancelled => Self::Cancelled,
            Stopped::TimedOut { limit } => Self::TimedOut { limit },
        }
    }
}

impl PackageError {
    /// Whether it says the install must stop (cancelled, out of time, out of
    /// work or download budget), rather than what is wrong with one file.
    pub fn is_stop(&self) -> bool {
        matches!(
            self,
            Self::Cancelled
                | Self::TimedOut { .. }
                | Self::TooComplex { .. }
                | Self::TooHardToSolve { .. }
                | Self::InstallTooLarge { .. }
        )
    }

    /// An I/O error while doing `action` on `path`.
    pub fn io(action: &'static str, path: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            action,
            path: path.into(),
            source,
        }
    }
}

/// The local installer's errors reach the core whole, as a backend error.
impl From<PackageError> for crate::sandbox::SandboxError {
    fn from(e: PackageError) -> Self {
        Self::Backend(Box::new(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_text_and_lists_are_bounded() {
        assert_eq!(clip("abcdef", 3), "abc…");
        assert_eq!(clip("abc", 3), "abc");
        assert_eq!(clip("é", 1), "é");
        let items: Vec<String> = (0..10).map(|i| i.to_string()).collect();
        assert_eq!(some_of(&items, 3, ", "), "0, 1, 2 (and 7 more)");
        assert_eq!(some_of(&items[..2], 3, " and "), "0 and 1");
    }
}
