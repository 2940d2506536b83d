//! [`StoreError`]: why a page store could not keep or map pages.

use std::path::{Path, PathBuf};

use super::guest_memory::MapError;

/// Why a store could not keep or map pages.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A segment could not be created, written, linked or read.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
    /// Pages could not be mapped into the memory.
    #[error(transparent)]
    Map(#[from] MapError),
    /// The extents name a segment the store does not have, or reach past
    /// a file's end.
    #[error("the memory's layout names pages its files do not hold ({0})")]
    Inconsistent(String),
}

impl StoreError {
    pub(super) fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.to_owned();
        move |source| Self::Io { what, path, source }
    }
}
