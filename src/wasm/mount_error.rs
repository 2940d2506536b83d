//! [`MountError`]: why a runtime's read-only mounts could not be prepared,
//! and [`ExtractError`]: why a zip inside one of its artifacts could not be
//! extracted. The I/O and zip errors stay attached as sources.

use std::path::PathBuf;

use zip::result::ZipError;

/// Why a runtime's mounts could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    /// A mount names an artifact the manifest did not load.
    #[error("the mount {guest} names the artifact {artifact}, which was not loaded")]
    UnloadedArtifact {
        /// The guest directory.
        guest: String,
        /// The artifact's file name.
        artifact: String,
    },
    /// An artifact's path has no parent directory to mount.
    #[error("{} has no parent directory", .0.display())]
    NoParent(PathBuf),
    /// A zip member of an artifact could not be extracted.
    #[error("cannot extract {member} from {} into {}: {source}", .from.display(), .into.display())]
    Extract {
        /// The member.
        member: String,
        /// The artifact.
        from: PathBuf,
        /// The directory it was to go to.
        into: PathBuf,
        /// Why not.
        source: ExtractError,
    },
}

/// Why a nested zip could not be extracted.
#[derive(Debug, thiserror::Error)]
pub enum ExtractError {
    /// The destination has no parent directory.
    #[error("the destination has no parent")]
    NoParent,
    /// Reading or writing failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// A zip archive is unreadable.
    #[error("{0}")]
    Zip(#[from] ZipError),
    /// The outer zip has no such member.
    #[error("no member {member}: {source}")]
    NoMember {
        /// The member.
        member: String,
        /// What the zip reader said.
        source: ZipError,
    },
    /// The inner zip holds more entries than are extracted.
    #[error("it holds {0} entries")]
    TooManyEntries(usize),
    /// A member's name is not a safe relative path.
    #[error("member {name:?}: {why}")]
    BadMember {
        /// The member's name.
        name: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A member is a symbolic link.
    #[error("member {0:?} is a link")]
    Link(String),
    /// The inner zip inflates past the limit.
    #[error("it inflates to more than {0} bytes")]
    TooLarge(u64),
}
