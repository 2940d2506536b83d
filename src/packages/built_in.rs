//! [`BuiltInPackages`]: the distributions a runtime carries in its own import
//! path (the scientific runtime's zip holds numpy, pandas and fifty more).
//!
//! `install_package` counts them as present and resolves dependencies
//! against them. One with compiled parts linked into the runtime stays as it
//! is; a pure-Python one gives way to another version when a sandbox
//! installs one (the driver then imports that copy from site-packages
//! instead of the runtime's).

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use std::str::FromStr;

use pep508_rs::PackageName;

use super::metadata::CoreMetadata;
use super::metadata_error::MetadataError;
use super::resolver::Installed;

/// Largest `METADATA` read from a runtime's zip.
const MAX_METADATA_BYTES: u64 = 1 << 20;

/// Why a runtime's zip of built-in packages could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BuiltInError {
    /// The file could not be opened.
    #[error("{0}")]
    Open(#[from] std::io::Error),
    /// The file is not a readable zip.
    #[error("{0}")]
    Zip(#[from] zip::result::ZipError),
    /// A distribution's `METADATA` does not parse (that one is skipped).
    #[error("{0}")]
    Metadata(#[from] MetadataError),
}

/// The packages built into a runtime, by normalized name.
#[derive(Clone, Debug, Default)]
pub struct BuiltInPackages {
    by_name: HashMap<PackageName, Installed>,
}

impl BuiltInPackages {
    /// Reads the `NAME-VERSION.dist-info/METADATA` members at the top of the
    /// zip `path`. A member that cannot be read or parsed is skipped. Those
    /// named in `compiled` (every one when `None`) have compiled parts.
    pub fn from_zip(path: &Path, compiled: Option<&[String]>) -> Result<Self, BuiltInError> {
        let compiled: Option<Vec<PackageName>> = compiled.map(|names| {
            names
                .iter()
                .filter_map(|n| PackageName::from_str(n).ok())
                .collect()
        });
        let file = std::fs::File::open(path)?;
        let mut archive = zip::ZipArchive::new(file)?;
        let members: Vec<String> = archive
            .file_names()
            .filter(|name| {
                name.strip_suffix("/METADATA")
                    .is_some_and(|dir| dir.ends_with(".dist-info") && !dir.contains('/'))
            })
            .map(str::to_owned)
            .collect();
        let mut by_name = HashMap::new();
        for member in members {
            let mut text = String::new();
            let read = archive
                .by_name(&member)
                .map_err(BuiltInError::from)
                .and_then(|entry| {
                    entry
                        .take(MAX_METADATA_BYTES)
                        .read_to_string(&mut text)
                        .map_err(BuiltInError::from)
                });
            match read.and_then(|_| Ok(CoreMetadata::parse(&text)?)) {
                Ok(metadata) => {
                    let has_compiled_parts = compiled
                        .as_ref()
                        .is_none_or(|names| names.contains(&metadata.name));
                    by_name.insert(
                        metadata.name,
                        Installed {
                            version: metadata.version,
                            requires_dist: metadata.requires_dist,
                            built_in: true,
                            compiled: has_compiled_parts,
                        },
                    );
                }
                Err(e) => tracing::debug!(%member, error = %e, "skipping a built-in distribution"),
            }
        }
        Ok(Self { by_name })
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// What the resolver sees of `name`, when the runtime carries it.
    pub(crate) fn get(&self, name: &PackageName) -> Option<&Installed> {
        self.by_name.get(name)
    }

    /// Each one's name and what the resolver sees of it.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&PackageName, &Installed)> {
        self.by_name.iter()
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Cursor, Write};
    use std::str::FromStr;

    use super::*;

    #[test]
    fn dist_info_metadata_at_the_top_of_the_zip_is_read() {
        let mut out = zip::ZipWriter::new(Cursor::new(Vec::new()));
        let options = zip::write::SimpleFileOptions::default();
        for (name, body) in [
            (
                "numpy-2.5.2.dist-info/METADATA",
                "Metadata-Version: 2.1\nName: numpy\nVersion: 2.5.2\n",
            ),
            (
                "pandas-3.0.6.dist-info/METADATA",
                "Metadata-Version: 2.1\nName: pandas\nVersion: 3.0.6\nRequires-Dist: numpy>=1.26\n",
            ),
            (
                "vendored/inner-1.0.dist-info/METADATA",
                "Name: inner\nVersion: 1.0\n",
            ),
            ("broken-1.0.dist-info/METADATA", "not metadata"),
            ("json/__init__.pyc", "x"),
        ] {
            out.start_file(name, options).unwrap();
            out.write_all(body.as_bytes()).unwrap();
        }
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("lib.zip");
        std::fs::write(&path, out.finish().unwrap().into_inner()).unwrap();

        let built_in = BuiltInPackages::from_zip(&path, Some(&["NumPy".to_owned()])).unwrap();
        let every_one_compiled = BuiltInPackages::from_zip(&path, None).unwrap();
        std::fs::write(&path, b"not a zip").unwrap();
        assert!(matches!(
            BuiltInPackages::from_zip(&path, None),
            Err(BuiltInError::Zip(_))
        ));
        assert!(matches!(
            BuiltInPackages::from_zip(&tmp.path().join("missing.zip"), None),
            Err(BuiltInError::Open(e)) if e.kind() == std::io::ErrorKind::NotFound
        ));
        assert_eq!(built_in.len(), 2);
        let pandas = built_in
            .iter()
            .find(|(n, _)| **n == PackageName::from_str("pandas").unwrap())
            .unwrap()
            .1;
        assert_eq!(pandas.version.to_string(), "3.0.6");
        assert_eq!(pandas.requires_dist.len(), 1);
        assert!(pandas.built_in);
        assert!(!pandas.compiled, "pandas is not named compiled");
        let compiled = |packages: &BuiltInPackages, name: &str| {
            packages
                .iter()
                .find(|(n, _)| **n == PackageName::from_str(name).unwrap())
                .unwrap()
                .1
                .compiled
        };
        assert!(compiled(&built_in, "numpy"), "names are normalized");
        assert!(compiled(&every_one_compiled, "pandas"));
        assert!(compiled(&every_one_compiled, "numpy"));
    }
}
