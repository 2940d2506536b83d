//! The errors a sandbox operation can end in, each worded for the model that
//! reads it: what went wrong, with the offending value, and what to do next.

use std::path::PathBuf;

/// Why a sandbox operation failed.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// No sandbox has this id.
    #[error(
        "no sandbox with id '{0}': create one with create_sandbox, or call get_sandbox_status to list the open ones"
    )]
    UnknownSandbox(String),

    /// A sandbox id is not of the accepted form.
    #[error(
        "invalid sandbox id '{0}': use 1 to 64 letters, digits, '-', '_' or '.', not starting with '.'"
    )]
    InvalidId(String),

    /// The server already holds its maximum number of sandboxes.
    #[error(
        "this server already holds its maximum of {0} sandboxes: close one with close_sandbox and try again"
    )]
    TooManySandboxes(usize),

    /// The server is stopping: nothing new is created or restored, and what
    /// was being restored stays saved for the next start.
    #[error(
        "the server is shutting down: sandboxes are being saved for its next start; call again once it is back"
    )]
    ShuttingDown,

    /// The caller already holds as much as its own caps allow.
    #[error(
        "{what}: the most your account may hold is {limit}; close one of your sandboxes with close_sandbox (get_sandbox_status lists them) and try again"
    )]
    OverOwnerCap {
        /// What would go over, with the figures.
        what: String,
        /// The cap, as a user reads it.
        limit: String,
    },

    /// The request named a backend this server was not configured with.
    #[error("{0}")]
    BackendUnavailable(String),

    /// A path argument is not a valid path inside the sandbox.
    #[error("invalid path '{path}': {reason}")]
    InvalidPath {
        /// The path as given.
        path: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The file or directory does not exist in the sandbox.
    #[error("{}", not_found(.0))]
    NotFound(String),

    /// A path names a directory where a file was expected, or the reverse.
    #[error("'{path}' is {what}")]
    WrongKind {
        /// The path as given.
        path: String,
        /// What it is instead, e.g. "a directory; use list_files".
        what: String,
    },

    /// A path resolves outside the sandbox, e.g. through a symbolic link.
    #[error(
        "'{0}' leads outside the sandbox (through '..' or a symbolic link); only files inside the sandbox can be used"
    )]
    Escape(String),

    /// An argument is larger than the server accepts.
    #[error("{what} is {size} bytes, over the limit of {limit} bytes{hint}")]
    TooLarge {
        /// What was too large.
        what: String,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
        /// What to do instead, starting with "; ".
        hint: String,
    },

    /// An argument is malformed.
    #[error("{0}")]
    InvalidArgument(String),

    /// The sandbox's disk quota would be exceeded.
    #[error("{0}")]
    QuotaExceeded(String),

    /// A file operation failed on the host.
    #[error("could not {action} '{path}': {source}")]
    Io {
        /// What was being done, e.g. "read".
        action: &'static str,
        /// The guest path.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },

    /// The sandbox root is on a file system where a hole in a file takes
    /// disk, so no quota could bound a write past a file's end.
    #[error(
        "the sandbox root is on a file system that gives disk to the holes in files (FAT or HFS+, say), where the disk quota could not bound a write past a file's end; the server's operator must set SANDBOX_ROOT to a directory on a file system with sparse files (ext4, XFS, btrfs, tmpfs, ZFS or APFS)"
    )]
    RootFillsHoles,

    /// The sandbox root (or its saved store) is owned by another user or
    /// can be written by others, who could plant or swap directories there.
    #[error(
        "refusing the sandbox directory {path}: it {why}, so another local user could plant or swap directories there and take or destroy sandboxes; give it to the server's user alone (chown that user, chmod 700) or set SANDBOX_ROOT to a directory only the server's user can write"
    )]
    SharedRoot {
        /// The directory refused.
        path: PathBuf,
        /// What makes it shared, e.g. "can be written by other users (mode 1777)".
        why: String,
    },

    /// The sandbox root directory could not be used.
    #[error(
        "cannot use the sandbox directory {path}: {source}; set SANDBOX_ROOT to a writable directory"
    )]
    Root {
        /// The host directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },

    /// A task doing blocking work for the sandbox panicked or was cancelled.
    #[error("{what} failed: {source}")]
    Task {
        /// What the task was doing, e.g. "file operation".
        what: &'static str,
        /// Why the task ended.
        source: tokio::task::JoinError,
    },

    /// A backend's own error, kept whole (the runtime missing or failing to
    /// start, the installer's refusal, the remote service's answer): each
    /// backend converts its errors at its edge, and its messages say what to
    /// do next. [`SandboxError::backend`] looks inside.
    #[error(transparent)]
    Backend(Box<dyn std::error::Error + Send + Sync + 'static>),
}

impl SandboxError {
    /// A backend's error of type `E`, when that is what this is.
    pub fn backend<E: std::error::Error + 'static>(&self) -> Option<&E> {
        match self {
            Self::Backend(inner) => inner.downcast_ref::<E>(),
            _ => None,
        }
    }

    /// Wraps an I/O error on a guest path, mapping the common kinds to clear messages.
    pub fn io(action: &'static str, path: &str, source: std::io::Error) -> Self {
        use std::io::ErrorKind;
        match source.kind() {
            ErrorKind::NotFound => Self::NotFound(path.to_owned()),
            ErrorKind::IsADirectory => Self::WrongKind {
                path: path.to_owned(),
                what: "a directory; use list_files to see what it holds".into(),
            },
            ErrorKind::NotADirectory => Self::WrongKind {
                path: path.to_owned(),
                what: "not a directory (a file is in the way)".into(),
            },
            ErrorKind::PermissionDenied if is_escape(&source) => Self::Escape(path.to_owned()),
            _ if is_escape(&source) => Self::Escape(path.to_owned()),
            _ => Self::Io {
                action,
                path: path.to_owned(),
                source,
            },
        }
    }
}

/// Whether cap-std refused an operation because it would leave its directory.
fn is_escape(e: &std::io::Error) -> bool {
    e.to_string().contains("outside of the filesystem")
}

/// The words for a path that does not exist; a server file that is gone
/// may have given way to the sandbox's own files.
fn not_found(path: &str) -> String {
    let server_file = path
        .trim_start_matches('/')
        .strip_prefix(super::server_file_names::OUTPUT_DIR)
        .and_then(|rest| rest.strip_prefix('/'))
        .is_some_and(super::server_file_names::is_server_name);
    if server_file {
        format!(
            "'{path}' does not exist in the sandbox: the files the server saves in /.outputs/ give way, oldest first, when the sandbox's own files need the room (get_sandbox_status counts those that did)"
        )
    } else {
        format!(
            "'{path}' does not exist in the sandbox (paths are relative to the sandbox's root '/')"
        )
    }
}
