//! [`Bundle::open`]: a bundle checked file by file against its `SHA256SUMS`
//! before a server uses anything in it.

use std::path::{Path, PathBuf};

use super::info::{BundleInfo, INFO_FILE};
use super::sums::{BadLine, SUMS_FILE, Sum, entries_under, parse, sha256_file};

/// What to do about a bundle that cannot be used, said in every message.
const REMAKE: &str = "copy the bundle again, or make a new one on a connected machine with `mcp-code-sandbox bundle --runtime NAME --out DIR`";

/// What is wrong with a bundle's `SHA256SUMS` or `bundle.toml`.
#[derive(Debug, thiserror::Error)]
pub enum Damage {
    /// A line of `SHA256SUMS` does not parse.
    #[error(transparent)]
    Line(#[from] BadLine),
    /// `SHA256SUMS` does not list a file every bundle has.
    #[error("it does not list {0}")]
    NotListed(&'static str),
    /// `bundle.toml` does not parse.
    #[error("{0}")]
    Info(#[source] toml::de::Error),
}

/// Why a bundle cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// The directory or one of its two description files cannot be read.
    #[error(
        "cannot read the bundle's {path}: {source}; is it a directory made by `mcp-code-sandbox bundle`? {REMAKE}"
    )]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// `SHA256SUMS` or `bundle.toml` does not parse, or does not list
    /// `bundle.toml`.
    #[error("the bundle's {file} is damaged ({reason}); {REMAKE}")]
    BadManifest {
        /// Which file.
        file: &'static str,
        /// What is wrong.
        #[source]
        reason: Damage,
    },
    /// A listed file is missing.
    #[error(
        "the bundle {dir} holds {file}, which its SHA256SUMS does not list (in runtime/, wheelhouse/ and bin/ every file must be listed: its code would run unchecked); remove it, or {REMAKE}"
    )]
    Unlisted {
        /// The bundle.
        dir: PathBuf,
        /// The file, relative to the bundle.
        file: String,
    },
    #[error("the bundle {dir} does not match its SHA256SUMS: {file} is missing; {REMAKE}")]
    Missing {
        /// The bundle.
        dir: PathBuf,
        /// The file, relative to it.
        file: String,
    },
    /// A listed file's content is not what was listed.
    #[error(
        "the bundle {dir} does not match its SHA256SUMS: {file} has sha256 {actual}, but SHA256SUMS lists {expected}; nothing in it is used. {REMAKE}"
    )]
    Mismatch {
        /// The bundle.
        dir: PathBuf,
        /// The file, relative to it.
        file: String,
        /// Its sha256.
        actual: String,
        /// The sha256 listed.
        expected: String,
    },
}

/// A bundle whose files all matched its manifest when it was opened.
#[derive(Clone, Debug)]
pub struct Bundle {
    dir: PathBuf,
    info: BundleInfo,
}

impl Bundle {
    /// Reads `dir/SHA256SUMS` and `dir/bundle.toml`, and checks the sha256
    /// of every listed file.
    pub fn open(dir: &Path) -> Result<Self, BundleError> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read_to_string(&path)
                .map_err(|source| BundleError::Unreadable { path, source })
        };
        let sums = parse(&read(SUMS_FILE)?).map_err(|line| BundleError::BadManifest {
            file: SUMS_FILE,
            reason: Damage::Line(line),
        })?;
        if !sums.iter().any(|s| s.path == INFO_FILE) {
            return Err(BundleError::BadManifest {
                file: SUMS_FILE,
                reason: Damage::NotListed(INFO_FILE),
            });
        }
        for sum in &sums {
            let actual = match sha256_file(&dir.join(&sum.path)) {
                Ok(actual) => actual,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(BundleError::Missing {
                        dir: dir.to_path_buf(),
                        file: sum.path.clone(),
                    });
                }
                Err(source) => {
                    return Err(BundleError::Unreadable {
                        path: dir.join(&sum.path),
                        source,
                    });
                }
            };
            if actual != sum.sha256 {
                return Err(BundleError::Mismatch {
                    dir: dir.to_path_buf(),
                    file: sum.path.clone(),
                    actual,
                    expected: sum.sha256.clone(),
                });
            }
        }
        refuse_unlisted(dir, &sums)?;
        let info = BundleInfo::parse(&read(INFO_FILE)?).map_err(|e| BundleError::BadManifest {
            file: INFO_FILE,
            reason: Damage::Info(e),
        })?;
        Ok(Self {
            dir: dir.to_path_buf(),
            info,
        })
    }

    /// What it holds.
    pub fn info(&self) -> &BundleInfo {
        &self.info
    }

    /// Its runtime directory (what `SANDBOX_RUNTIME_DIR` names).
    pub fn runtime_dir(&self) -> PathBuf {
        self.dir.join("runtime")
    }

    /// Its compiled modules (the module cache's `modules/`).
    pub fn modules_dir(&self) -> PathBuf {
        self.dir.join("modules")
    }

    /// Its wheelhouse, when it has one.
    pub fn wheelhouse(&self) -> Option<PathBuf> {
        self.info.wheelhouse.then(|| self.dir.join("wheelhouse"))
    }
}

/// Refuses any file (or link) in the directories whose content is run or
/// installed that the sums do not list.
fn refuse_unlisted(dir: &Path, sums: &[Sum]) -> Result<(), BundleError> {
    for sub in ["runtime", "wheelhouse", "bin"] {
        let entries = entries_under(dir, sub).map_err(|source| BundleError::Unreadable {
            path: dir.join(sub),
            source,
        })?;
        if let Some(file) = entries
            .into_iter()
            .find(|entry| !sums.iter().any(|s| s.path == *entry))
        {
            return Err(BundleError::Unlisted {
                dir: dir.to_path_buf(),
                file,
            });
        }
    }
    Ok(())
}
