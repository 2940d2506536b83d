//! A wheelhouse: a directory of wheel files, asked before any index and
//! enough on its own on a machine without network; and [`add`], which fills
//! one from the index on a connected machine (`mcp-code-sandbox wheelhouse
//! add REQ... --dir DIR`), dependencies included.
//!
//! A wheelhouse publishes no hashes: files are trusted as the operator put
//! them there, and still pass every check of the unpacker.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use pep508_rs::PackageName;
use tokio_util::sync::CancellationToken;

use super::built_in::BuiltInPackages;
use super::error::PackageError;
use super::installer::Installer;
use super::offload::offload;
use super::project_file::{FileLocation, ProjectFile, is_plain_filename};
use super::session::Session;
use super::stop::InstallStop;
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

/// One wheel [`add`] dealt with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddedWheel {
    /// Project name.
    pub name: String,
    /// Version.
    pub version: String,
    /// File name in the wheelhouse.
    pub filename: String,
    /// Whether the wheelhouse had it already.
    pub already_there: bool,
}

/// Resolves `requirements` for a WASI CPython of `python_version` that
/// carries `built_in` against the index (and what `dir` already holds) and
/// copies every wheel needed into `dir`, creating it. It runs under the same
/// limits as an install (its deadline included), on a blocking thread.
pub async fn add(
    installer: &Installer,
    requirements: &[String],
    dir: &Path,
    python_version: &str,
    built_in: &BuiltInPackages,
    progress: &(dyn Fn(String) + Send + Sync),
) -> Result<Vec<AddedWheel>, PackageError> {
    if !installer.has_index() {
        return Err(PackageError::NoIndexForWheelhouse);
    }
    let installer = installer.clone();
    let requirements = requirements.to_vec();
    let dir = dir.to_path_buf();
    let python_version = python_version.to_owned();
    let built_in = built_in.clone();
    offload(progress, move |progress| async move {
        let report = |m: String| progress.send(m);
        add_here(
            &installer,
            &requirements,
            &dir,
            &python_version,
            &built_in,
            &report,
        )
        .await
    })
    .await
}

/// [`add`], on its blocking thread.
async fn add_here(
    installer: &Installer,
    requirements: &[String],
    dir: &Path,
    python_version: &str,
    built_in: &BuiltInPackages,
    progress: &(dyn Fn(String) + Send + Sync),
) -> Result<Vec<AddedWheel>, PackageError> {
    std::fs::create_dir_all(dir)
        .map_err(|source| PackageError::io("create", dir.display().to_string(), source))?;
    let wheelhouse = Wheelhouse::scan(dir)?;
    let budget = installer.budget(InstallStop::new(
        CancellationToken::new(),
        installer.settings().install_timeout,
    ));
    let session = Session::new(installer, Some(wheelhouse), &budget);
    let resolution = installer
        .resolve(
            &session,
            requirements,
            python_version,
            &built_in
                .iter()
                .map(|(n, i)| (n.clone(), i.clone()))
                .collect::<HashMap<_, _>>(),
            progress,
        )
        .await?;
    let mut added = Vec::new();
    for package in resolution.packages {
        let super::resolver::Choice::New { file, .. } = package.choice else {
            continue;
        };
        let already_there = file.source == PackageSource::Wheelhouse;
        if !already_there {
            let mut wheel = session.fetch(&file).await?;
            // A plain file name (checked when the page was read).
            let target = dir.join(&file.filename);
            let temp = dir.join(format!(".{}.partial", file.filename));
            File::create(&temp)
                .and_then(|mut out| std::io::copy(&mut wheel.file, &mut out))
                .and_then(|_| std::fs::rename(&temp, &target))
                .map_err(|source| {
                    let _ = std::fs::remove_file(&temp);
                    PackageError::io(
                        "copy into the wheelhouse",
                        target.display().to_string(),
                        source,
                    )
                })?;
            progress(format!("added {}", file.filename));
        }
        added.push(AddedWheel {
            name: package.name.to_string(),
            version: package.version.to_string(),
            filename: file.filename,
            already_there,
        });
    }
    Ok(added)
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
