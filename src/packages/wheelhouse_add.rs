//! [`add`]: fills a wheelhouse from the index on a connected machine
//! (`mcp-code-sandbox wheelhouse add REQ... --dir DIR`), dependencies
//! included, resolved as an install would resolve them.

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;

use tokio_util::sync::CancellationToken;

use super::built_in::BuiltInPackages;
use super::error::PackageError;
use super::installer::Installer;
use super::offload::offload;
use super::resolver::Choice;
use super::session::Session;
use super::stop::InstallStop;
use super::wheelhouse::Wheelhouse;
use crate::sandbox::PackageSource;

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
    let budget = installer.sources().budget(InstallStop::new(
        CancellationToken::new(),
        installer.settings().install_timeout,
    ));
    let session = Session::new(installer.sources(), Some(wheelhouse), &budget);
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
        let Choice::New { file, .. } = package.choice else {
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
