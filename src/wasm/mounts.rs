//! [`prepare`]: the read-only directories a runtime's guests see besides
//! their sandbox directory, as its manifest describes them: the directory
//! holding a verified artifact, or a zip stored inside an artifact, extracted
//! once into the module cache.

use std::io::{Cursor, Read};
use std::path::{Path, PathBuf};

use super::mount_error::{ExtractError, MountError};
use super::runtime::VerifiedRuntime;
use crate::packages::unpack::member_components;

/// Most bytes an extracted zip member may inflate to.
const MAX_EXTRACTED_BYTES: u64 = 512 << 20;
/// Most entries it may hold.
const MAX_EXTRACTED_ENTRIES: usize = 100_000;

/// A host directory the guest sees read-only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ReadOnlyMount {
    /// The host directory.
    pub host: PathBuf,
    /// Where the guest sees it.
    pub guest: String,
}

/// The runtime's mounts, extracting zip members into `cache_dir` the first
/// time. The artifacts were verified by their sha256, and an extracted
/// directory's name carries that sha256, so it is never stale.
pub(crate) fn prepare(
    runtime: &VerifiedRuntime,
    cache_dir: &Path,
) -> Result<Vec<ReadOnlyMount>, MountError> {
    let mut mounts = Vec::new();
    for mount in &runtime.manifest.mounts {
        let artifact = runtime
            .manifest
            .artifacts
            .iter()
            .find(|a| a.file == mount.artifact);
        let (Some(artifact), Some(path)) = (artifact, runtime.artifact_path(&mount.artifact))
        else {
            return Err(MountError::UnloadedArtifact {
                guest: mount.guest.clone(),
                artifact: mount.artifact.clone(),
            });
        };
        let host = match &mount.zip_member {
            None => path
                .parent()
                .map(Path::to_path_buf)
                .ok_or_else(|| MountError::NoParent(path.to_path_buf()))?,
            Some(member) => {
                let name = format!(
                    "{}-{}",
                    &artifact.sha256[..16],
                    member.replace(|c: char| !c.is_ascii_alphanumeric() && c != '-', "_")
                );
                let dir = cache_dir.join("extracted").join(name);
                if !dir.is_dir() {
                    extract_nested_zip(path, member, &dir).map_err(|source| {
                        MountError::Extract {
                            member: member.clone(),
                            from: path.to_path_buf(),
                            into: dir.clone(),
                            source,
                        }
                    })?;
                }
                dir
            }
        };
        mounts.push(ReadOnlyMount {
            host,
            guest: mount.guest.clone(),
        });
    }
    Ok(mounts)
}

/// Extracts the zip stored as `member` of the zip `outer` into `dest`: into a
/// fresh directory beside it first, renamed into place when complete, so
/// `dest` exists only whole.
fn extract_nested_zip(outer: &Path, member: &str, dest: &Path) -> Result<(), ExtractError> {
    let parent = dest.parent().ok_or(ExtractError::NoParent)?;
    std::fs::create_dir_all(parent)?;
    let file = std::fs::File::open(outer)?;
    let mut archive = zip::ZipArchive::new(file)?;
    let mut inner_bytes = Vec::new();
    archive
        .by_name(member)
        .map_err(|source| ExtractError::NoMember {
            member: member.to_owned(),
            source,
        })?
        .take(MAX_EXTRACTED_BYTES)
        .read_to_end(&mut inner_bytes)?;
    let mut inner = zip::ZipArchive::new(Cursor::new(inner_bytes))?;
    if inner.len() > MAX_EXTRACTED_ENTRIES {
        return Err(ExtractError::TooManyEntries(inner.len()));
    }
    let temp = parent.join(format!(
        ".{}.partial-{}",
        dest.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&temp);
    let result = (|| -> Result<(), ExtractError> {
        std::fs::create_dir(&temp)?;
        let mut budget = MAX_EXTRACTED_BYTES;
        for i in 0..inner.len() {
            let mut entry = inner.by_index(i)?;
            let name = entry.name().to_owned();
            let (components, is_dir) =
                member_components(&name).map_err(|why| ExtractError::BadMember {
                    name: name.clone(),
                    why,
                })?;
            let target = components.iter().fold(temp.clone(), |p, c| p.join(c));
            if is_dir || entry.is_dir() {
                std::fs::create_dir_all(&target)?;
                continue;
            }
            if entry.is_symlink() {
                return Err(ExtractError::Link(name));
            }
            if let Some(dir) = target.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let mut out = std::fs::File::create(&target)?;
            let copied = std::io::copy(&mut (&mut entry).take(budget + 1), &mut out)?;
            budget = budget
                .checked_sub(copied)
                .ok_or(ExtractError::TooLarge(MAX_EXTRACTED_BYTES))?;
        }
        Ok(())
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_dir_all(&temp);
        return Err(e);
    }
    match std::fs::rename(&temp, dest) {
        Ok(()) => Ok(()),
        // Another server extracted the same thing first.
        Err(_) if dest.is_dir() => {
            let _ = std::fs::remove_dir_all(&temp);
            Ok(())
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&temp);
            Err(e.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn zip_of(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = zip::ZipWriter::new(Cursor::new(Vec::new()));
        for (name, body) in files {
            out.start_file(*name, zip::write::SimpleFileOptions::default())
                .unwrap();
            out.write_all(body).unwrap();
        }
        out.finish().unwrap().into_inner()
    }

    #[test]
    fn a_zip_inside_a_zip_is_extracted_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let inner = zip_of(&[("matplotlibrc", b"backend: agg\n"), ("fonts/a.ttf", b"x")]);
        let outer = tmp.path().join("lib.zip");
        std::fs::write(&outer, zip_of(&[("pkg/data.zip", &inner)])).unwrap();
        let dest = tmp.path().join("cache/extracted/data");
        extract_nested_zip(&outer, "pkg/data.zip", &dest).unwrap();
        assert_eq!(
            std::fs::read(dest.join("matplotlibrc")).unwrap(),
            b"backend: agg\n"
        );
        assert_eq!(std::fs::read(dest.join("fonts/a.ttf")).unwrap(), b"x");
        let leftovers: Vec<_> = std::fs::read_dir(dest.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers, ["data"]);
    }

    #[test]
    fn members_that_would_leave_the_directory_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let inner = zip_of(&[("../escape", b"x")]);
        let outer = tmp.path().join("lib.zip");
        std::fs::write(&outer, zip_of(&[("data.zip", &inner)])).unwrap();
        let dest = tmp.path().join("out");
        let err = extract_nested_zip(&outer, "data.zip", &dest).unwrap_err();
        assert!(
            matches!(&err, ExtractError::BadMember { name, .. } if name == "../escape"),
            "{err:?}"
        );
        assert!(err.to_string().contains(".."), "{err}");
        assert!(!dest.exists() && !tmp.path().join("escape").exists());
    }
}
