//! [`ProjectFile`]: one file a source offers for a project (a wheel, a source
//! archive, anything else), with what the source says about it.

use std::path::PathBuf;
use std::str::FromStr;

use pep440_rs::Version;
use pep508_rs::PackageName;
use reqwest::Url;

use super::wheel_name::WheelFilename;
use crate::sandbox::PackageSource;

/// Where a file is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileLocation {
    /// On an index (or the file host it links to).
    Url(Url),
    /// In the wheelhouse.
    Path(PathBuf),
}

/// A file of a project as a source lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProjectFile {
    /// The file name (checked to be a plain name).
    pub filename: String,
    /// Where to get it.
    pub location: FileLocation,
    /// Its sha256 in lowercase hex, when the source gives one.
    pub sha256: Option<String>,
    /// Its `Requires-Python`, when the source gives one.
    pub requires_python: Option<String>,
    /// `Some(reason)` (possibly empty) when the file is yanked.
    pub yanked: Option<String>,
    /// Its core metadata is served separately (PEP 658), with this sha256
    /// when given.
    pub metadata: Option<Option<String>>,
    /// Which source lists it.
    pub source: PackageSource,
}

/// What kind of file a [`ProjectFile`] is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// A wheel.
    Wheel(WheelFilename),
    /// A source archive, with its version when the name gives one.
    Sdist(Option<Version>),
    /// Anything else (eggs, installers).
    Other,
}

/// Source archive extensions.
const SDIST_EXTENSIONS: &[&str] = &[".tar.gz", ".tgz", ".zip", ".tar.bz2", ".tar.xz", ".tar"];

impl ProjectFile {
    /// What kind of file it is, for project `project`. A wheel whose name
    /// does not parse, or is for another project, is [`FileKind::Other`].
    pub fn kind(&self, project: &PackageName) -> FileKind {
        if self.filename.ends_with(".whl") {
            return match WheelFilename::from_str(&self.filename) {
                Ok(w) if &w.name == project => FileKind::Wheel(w),
                _ => FileKind::Other,
            };
        }
        for ext in SDIST_EXTENSIONS {
            if let Some(stem) = self.filename.strip_suffix(ext) {
                let version = stem.rsplit_once('-').and_then(|(name, version)| {
                    let same = PackageName::from_str(name).is_ok_and(|n| &n == project);
                    same.then(|| Version::from_str(version).ok()).flatten()
                });
                return FileKind::Sdist(version);
            }
        }
        FileKind::Other
    }
}

/// Whether `name` is a plain file name safe to show and to keep.
pub fn is_plain_filename(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\'])
        && !name.chars().any(char::is_control)
}

/// Lowercase hex when `text` is a sha256 in hex, else `None`.
pub fn sha256_hex(text: &str) -> Option<String> {
    let text = text.trim();
    (text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| text.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str) -> ProjectFile {
        ProjectFile {
            filename: name.into(),
            location: FileLocation::Path(PathBuf::from(name)),
            sha256: None,
            requires_python: None,
            yanked: None,
            metadata: None,
            source: PackageSource::Wheelhouse,
        }
    }

    #[test]
    fn files_are_classified() {
        let p = PackageName::from_str("python-dateutil").unwrap();
        assert!(matches!(
            file("python_dateutil-2.9.0-py2.py3-none-any.whl").kind(&p),
            FileKind::Wheel(_)
        ));
        assert_eq!(
            file("python-dateutil-2.8.2.tar.gz").kind(&p),
            FileKind::Sdist(Some(Version::from_str("2.8.2").unwrap()))
        );
        assert_eq!(file("other-1.0.tar.gz").kind(&p), FileKind::Sdist(None));
        assert_eq!(file("six-1.0-py3-none-any.whl").kind(&p), FileKind::Other);
        assert_eq!(
            file("python_dateutil-2.9.0-py2.7.egg").kind(&p),
            FileKind::Other
        );
    }

    #[test]
    fn names_and_hashes_are_checked() {
        assert!(is_plain_filename("six-1.0.tar.gz"));
        for bad in ["", "..", "a/b", "a\\b", "a\nb"] {
            assert!(!is_plain_filename(bad), "{bad:?}");
        }
        assert_eq!(sha256_hex(&"AB".repeat(32)), Some("ab".repeat(32)));
        assert_eq!(sha256_hex("abc"), None);
        assert_eq!(sha256_hex(&"zz".repeat(32)), None);
    }
}
