//! A wheelhouse: a directory of wheel files, asked before any index and
//! enough on its own on a machine without network (`wheelhouse_add.rs`
//! fills one from the index on a connected machine).
//!
//! A wheelhouse publishes no hashes: files are trusted as the operator put
//! them there, and still pass every check of the unpacker.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use pep508_rs::PackageName;

use super::error::PackageError;
use super::project_file::{FileLocation, ProjectFile, is_plain_filename};
use super::wheel_name::WheelFilename;
use crate::sandbox::PackageSource;

/// The wheels in a directory, by project.
#[derive(Clone, Debug, Default)]
pub struct Wheelhouse {
    dir: PathBuf,
    files: HashMap<PackageName, Vec<ProjectFile>>,
}

impl Wheelhouse {
    /// Lists the `*.whl` files directly in `dir`.
    pub fn scan(dir: &Path) -> Result<Self, PackageError> {
        let entries = std::fs::read_dir(dir).map_err(|source| {
            PackageError::io("read the wheelhouse", dir.display().to_string(), source)
        })?;
        let mut files: HashMap<PackageName, Vec<ProjectFile>> = HashMap::new();
        for entry in entries.flatten() {
            let Ok(filename) = entry.file_name().into_string() else {
                continue;
            };
            if !is_plain_filename(&filename) || !entry.path().is_file() {
                continue;
            }
            let Ok(wheel) = WheelFilename::from_str(&filename) else {
                continue;
            };
            files.entry(wheel.name).or_default().push(ProjectFile {
                location: FileLocation::Path(entry.path()),
                filename,
                sha256: None,
                requires_python: None,
                yanked: None,
                metadata: None,
                source: PackageSource::Wheelhouse,
            });
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            files,
        })
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The wheels of project `name`.
    pub fn files(&self, name: &PackageName) -> Vec<ProjectFile> {
        self.files.get(name).cloned().unwrap_or_default()
    }

    /// How many wheels it holds.
    pub fn len(&self) -> usize {
        self.files.values().map(Vec::len).sum()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_wheels_are_listed_by_project() {
        let tmp = tempfile::tempdir().unwrap();
        for name in [
            "six-1.17.0-py2.py3-none-any.whl",
            "Six-1.16.0-py2.py3-none-any.whl",
            "attrs-23.2.0-py3-none-any.whl",
            "docopt-0.6.2.tar.gz",
            "not-a-wheel.whl",
        ] {
            std::fs::write(tmp.path().join(name), b"x").unwrap();
        }
        std::fs::create_dir(tmp.path().join("dir-1.0-py3-none-any.whl")).unwrap();
        let house = Wheelhouse::scan(tmp.path()).unwrap();
        assert_eq!(house.len(), 3);
        assert_eq!(house.files(&PackageName::from_str("six").unwrap()).len(), 2);
        assert!(
            house
                .files(&PackageName::from_str("docopt").unwrap())
                .is_empty()
        );
        assert!(Wheelhouse::scan(&tmp.path().join("missing")).is_err());
    }
}
