//! [`SaveError`]: why a sandbox could not be saved for after a restart (see
//! [`super::saved::SavedStore`]). Nothing is kept when it happens; the
//! sandbox's files stay where they were.

use std::path::PathBuf;

/// Why a sandbox could not be saved.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    /// A file or directory of the store could not be created, written or moved.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done: "create", "write", "move".
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },

    /// The sandbox's record could not be encoded.
    #[error("cannot encode the saved sandbox's record: {0}")]
    Record(#[from] serde_json::Error),

    /// The sandbox alone is larger than saved sandboxes may be together.
    #[error("the sandbox takes {mib} MiB, more than SANDBOX_SAVED_MAX_MB ({max_mib} MiB) allows")]
    TooLarge {
        /// Its size, in MiB.
        mib: u64,
        /// The limit, in MiB.
        max_mib: u64,
    },

    /// The saved sandboxes could not all be measured, so the size limit
    /// could not be checked: the save is refused rather than undercounted.
    #[error(
        "the saved sandboxes cannot be measured against SANDBOX_SAVED_MAX_MB ({0}); nothing was saved: check the permissions under the sandbox root's saved/ directory"
    )]
    Unmeasurable(std::io::Error),
}

impl SaveError {
    /// An I/O error while doing `action` on `path`.
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io {
            action,
            path,
            source,
        }
    }
}
