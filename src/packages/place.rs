//! Staging and placing: the wheels an install fetched are unpacked into
//! one staging directory beside the sandbox's site-packages, every byte,
//! file and directory charged to the room the sandbox's quota leaves (see
//! `staging.rs`); only when all of them unpacked, and the install was not
//! stopped, are the versions being replaced removed and the staged files
//! moved into place. The staging directory is removed in every case, and a
//! wheel refused for what it holds is deleted from the wheel cache.
//!
//! In staging, each wheel's sources get its own time and its bytecode is
//! written beside them, as room allows (bytecode the wheel ships for its
//! own sources is dropped; see `bytecode.rs`), and the modules whose import
//! is checked after the install are picked.

use std::collections::HashSet;
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::sync::Arc;

use cap_std::fs::{Dir, OpenOptions};
use pep440_rs::Version;
use pep508_rs::PackageName;
use rand::Rng;
use sha2::Digest;

use super::built_in::BuiltInPackages;
use super::bytecode::{self, Compiler, Pyc, WheelBytecode};
use super::cache::WheelCache;
use super::error::PackageError;
use super::message_text::some_of;
use super::record::record_hash;
use super::settings::InstallLimits;
use super::site_packages::{self, InstalledDist};
use super::staging::{Free, NoRoom, StagingRoom};
use super::stop::InstallStop;
use super::unpack::{
    InstalledFile, UnpackLimits, Unpacked, WheelError, unpack_wheel, write_installed_record,
};
use super::wheel_name::WheelFilename;
use crate::sandbox::quota::{QuotaLedger, RoomHold};
use crate::sandbox::remove_tree::remove_tree_in;
use crate::sandbox::{GuestPath, InstalledPackage, PackageSource};

/// Where an install goes.
#[derive(Clone, Debug)]
pub struct InstallTarget {
    /// The sandbox's root directory.
    pub sandbox: Arc<Dir>,
    /// Its site-packages, as a guest path.
    pub site_packages: GuestPath,
    /// The runtime's full Python version, e.g. `3.12.0`.
    pub python_version: String,
    /// The sandbox's disk quota and its account (charged to the server's
    /// disk budget).
    pub ledger: Arc<QuotaLedger>,
    /// Packages the runtime carries itself.
    pub built_in: Arc<BuiltInPackages>,
    /// What compiles installed modules for the sandbox's runtime (`None`:
    /// they are installed as sources only).
    pub compiler: Option<Arc<dyn Compiler>>,
}

/// A wheel on the host, open at its start.
#[derive(Debug)]
pub struct WheelFile {
    /// The file.
    pub file: File,
    /// Where it came from.
    pub source: PackageSource,
    /// Its sha256 when it is in the wheel cache (wheelhouse files have none).
    pub sha256: Option<String>,
}

/// What installed files are marked with (`*.dist-info/INSTALLER`).
const INSTALLER_NAME: &str = "mcp-code-sandbox";

/// A wheel fetched and about to be unpacked.
pub struct Fetched {
    /// The project.
    pub name: PackageName,
    /// The version.
    pub version: Version,
    /// Its parsed file name.
    pub wheel: WheelFilename,
    /// Its file name.
    pub filename: String,
    /// The wheel, open.
    pub wheel_file: WheelFile,
    /// The installed version it replaces.
    pub replaces: Option<InstalledDist>,
    /// Its modules' bytecode, and the time its sources get.
    pub bytecode: WheelBytecode,
    /// The top-level modules it installs, once staged.
    pub modules: Vec<String>,
}

/// The room staging has: what the sandbox's disk quota and the server's
/// disk budget leave free now (and what the server's own files in the
/// sandbox free when they give way), at most what one install may unpack,
/// until the install must stop. The room is held in the server's budget until the
/// returned hold is dropped (which measures what the install really wrote),
/// so two installs cannot both take the same free space. A sandbox that
/// cannot be measured has no room.
pub fn room_for(
    target: &InstallTarget,
    limits: &InstallLimits,
    stop: &InstallStop,
) -> Result<(StagingRoom, RoomHold), PackageError> {
    let (room, hold) = target
        .ledger
        .hold_room(limits.max_install_unpacked_bytes)
        .map_err(|e| PackageError::Room(Box::new(e)))?;
    let quota = target.ledger.quota();
    let free = Free {
        bytes: room.bytes,
        entries: room.entries,
        quota_bytes: quota.max_bytes(),
        quota_entries: quota.max_files(),
        block: target.ledger.allocation().block,
    };
    let ledger = target.ledger.clone();
    let staging = StagingRoom::new(free, limits.max_install_unpacked_bytes, stop.clone())
        .reclaiming(Box::new(move |bytes, entries| {
            ledger.reclaim(bytes, entries)
        }));
    Ok((staging, hold))
}

/// The error for staging that ran out of room or had to stop.
fn no_room(e: NoRoom, stop: &InstallStop) -> PackageError {
    match e {
        NoRoom::Stopped => stop
            .check()
            .err()
            .map_or(PackageError::Cancelled, PackageError::from),
        NoRoom::InstallCap { limit } => PackageError::InstallTooLarge {
            what: "unpack",
            limit,
        },
        other => PackageError::Quota(other),
    }
}

/// The error for a wheel that failed to unpack; a wheel refused for what it
/// holds is deleted from the wheel cache, so it is never served again.
fn refused(e: WheelError, item: &Fetched, stop: &InstallStop, cache: &WheelCache) -> PackageError {
    match e {
        WheelError::NoRoom(e) => no_room(e, stop),
        WheelError::Write { .. } => PackageError::UnsafeWheel {
            filename: item.filename.clone(),
            source: e,
        },
        source => {
            if let Some(sha256) = &item.wheel_file.sha256 {
                cache.discard(sha256);
            }
            PackageError::UnsafeWheel {
                filename: item.filename.clone(),
                source,
            }
        }
    }
}

/// Unpacks every wheel into one staging directory beside site-packages,
/// charging `room`, then replaces old versions and moves everything into
/// place. The staging directory is always removed.
pub fn place(
    target: &InstallTarget,
    fetched: &mut [Fetched],
    limits: &UnpackLimits,
    mut room: StagingRoom,
    cache: &WheelCache,
) -> Result<(Vec<InstalledPackage>, Vec<String>), PackageError> {
    let site_path = &target.site_packages;
    room.check_stop().map_err(|e| no_room(e, room.stop()))?;
    let created = site_packages::create_dirs(&target.sandbox, site_path)
        .map_err(|source| PackageError::io("create", site_path.to_string(), source))?;
    let result = room
        .take_entries(created.len() as u64)
        .map_err(|e| no_room(e, room.stop()))
        .and_then(|()| stage_and_place(target, fetched, limits, &mut room, cache));
    if result.is_err() {
        site_packages::remove_created(&target.sandbox, &created);
    }
    result
}

/// [`place`] once site-packages exists.
fn stage_and_place(
    target: &InstallTarget,
    fetched: &mut [Fetched],
    limits: &UnpackLimits,
    room: &mut StagingRoom,
    cache: &WheelCache,
) -> Result<(Vec<InstalledPackage>, Vec<String>), PackageError> {
    let site_path = &target.site_packages;
    let site = target
        .sandbox
        .open_dir(site_path.relative())
        .map_err(|source| PackageError::io("open", site_path.to_string(), source))?;
    let parent_path = site_path.parent();
    let parent = target
        .sandbox
        .open_dir(parent_path.relative())
        .map_err(|source| PackageError::io("open", parent_path.to_string(), source))?;
    let staging_name = format!(".install-staging-{:016x}", rand::rng().random::<u64>());
    room.take_entries(1).map_err(|e| no_room(e, room.stop()))?;
    parent.create_dir(&staging_name).map_err(|source| {
        PackageError::io(
            "create a staging directory in",
            parent_path.to_string(),
            source,
        )
    })?;
    let result = (|| {
        let staging = parent.open_dir(&staging_name).map_err(|source| {
            PackageError::io(
                "open the staging directory in",
                parent_path.to_string(),
                source,
            )
        })?;
        let mut notes = Vec::new();
        for (i, item) in fetched.iter_mut().enumerate() {
            notes.extend(stage_one(
                &staging,
                &parent_path,
                i,
                item,
                limits,
                room,
                cache,
            )?);
        }
        // Past this point the install completes: it is short, and a
        // half-moved install is what stopping here would leave.
        room.check_stop().map_err(|e| no_room(e, room.stop()))?;
        for item in fetched.iter() {
            if let Some(old) = &item.replaces {
                site_packages::remove(&site, old, limits.max_metadata_bytes).map_err(|source| {
                    PackageError::io("remove the old version from", site_path.to_string(), source)
                })?;
                notes.push(format!(
                    "replaced {} {} with {}; if the old version was already imported, restart the work that uses it",
                    item.name, old.installed.version, item.version
                ));
            }
        }
        for i in 0..fetched.len() {
            let slot = staging.open_dir(i.to_string()).map_err(|source| {
                PackageError::io(
                    "open the staging directory in",
                    parent_path.to_string(),
                    source,
                )
            })?;
            site_packages::move_into_place(&slot, &site).map_err(|source| {
                PackageError::io("move files into", site_path.to_string(), source)
            })?;
        }
        let placed = fetched
            .iter()
            .map(|f| InstalledPackage {
                name: f.name.to_string(),
                version: f.version.to_string(),
                source: Some(f.wheel_file.source),
                replaces_built_in: None,
            })
            .collect();
        Ok((placed, notes))
    })();
    // The guest may have moved a deep tree into staging: removed without recursion.
    if let Err(e) = remove_tree_in(&parent, &staging_name) {
        tracing::warn!(error = %e, "could not remove a staging directory");
    }
    result
}

/// Unpacks the `i`th wheel into its own slot of `staging`; returns what the
/// result should say about it.
fn stage_one(
    staging: &Dir,
    parent_path: &GuestPath,
    i: usize,
    item: &mut Fetched,
    limits: &UnpackLimits,
    room: &mut StagingRoom,
    cache: &WheelCache,
) -> Result<Vec<String>, PackageError> {
    let slot = i.to_string();
    let staging_io = |source| {
        PackageError::io(
            "write the staging directory in",
            parent_path.to_string(),
            source,
        )
    };
    room.take_entries(1).map_err(|e| no_room(e, room.stop()))?;
    staging.create_dir(&slot).map_err(staging_io)?;
    let dest = staging.open_dir(&slot).map_err(staging_io)?;
    let reading = |source| PackageError::io("read", item.filename.clone(), source);
    item.wheel_file
        .file
        .seek(SeekFrom::Start(0))
        .map_err(reading)?;
    let reader = std::io::BufReader::new(&item.wheel_file.file);
    let stop = room.stop().clone();
    let mut unpacked = unpack_wheel(reader, &item.wheel, &dest, limits, room)
        .map_err(|e| refused(e, item, &stop, cache))?;
    let mut notes = Vec::new();
    drop_shipped_bytecode(&dest, &mut unpacked).map_err(staging_io)?;
    if let Some(time) = item.bytecode.source_time {
        set_source_times(&dest, &unpacked, time).map_err(staging_io)?;
    }
    let left_out = add_bytecode(&dest, &mut unpacked, &item.bytecode.pycs, room)
        .map_err(|e| no_room(e, &stop))?;
    if left_out > 0 {
        notes.push(format!(
            "{} {}: the bytecode of {left_out} module(s) was left out, as the sandbox's disk quota has no room for it (they compile when imported)",
            item.name, item.version
        ));
    }
    write_installed_record(&dest, &unpacked, INSTALLER_NAME, room)
        .map_err(|e| refused(e, item, &stop, cache))?;
    item.modules = modules_to_check(&item.name, top_level_modules(&unpacked.files));
    if !unpacked.dropped.is_empty() {
        notes.push(format!(
            "{} {}: {} file(s) meant for outside site-packages were not installed (only the importable package is): {}",
            item.name,
            item.version,
            unpacked.dropped.len(),
            some_of(&unpacked.dropped, 3, ", ")
        ));
    }
    if !unpacked.startup_files.is_empty() {
        notes.push(format!(
            "{} {} installs {}: code that runs when the interpreter starts",
            item.name,
            item.version,
            some_of(&unpacked.startup_files, 10, ", ")
        ));
    }
    Ok(notes)
}

/// Most public modules of a wheel whose import is checked, when none is
/// named for the distribution.
const MAX_PUBLIC_MODULES: usize = 5;

/// The module named for the distribution when it has one (`black`, not
/// the `blackd` its optional extra serves), else every public one.
fn modules_to_check(name: &PackageName, modules: Vec<String>) -> Vec<String> {
    let own = name.as_ref().replace('-', "_");
    if modules.contains(&own) {
        vec![own]
    } else {
        modules.into_iter().take(MAX_PUBLIC_MODULES).collect()
    }
}

/// The public top-level modules and packages among installed files (what
/// `import name` finds): not private ones
/// (`_name`), test or documentation trees, metadata or bytecode.
fn top_level_modules(files: &[InstalledFile]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for file in files {
        let (top, rest) = file.path.split_once('/').unwrap_or((&file.path, ""));
        let name = if rest.is_empty() {
            match top.strip_suffix(".py") {
                Some(stem) => stem,
                None => continue,
            }
        } else if rest.ends_with(".py") {
            top
        } else {
            continue;
        };
        let public = !name.starts_with('_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && !matches!(
                name,
                "test"
                    | "tests"
                    | "testing"
                    | "docs"
                    | "doc"
                    | "examples"
                    | "benchmarks"
                    | "setup"
                    | "conftest"
            );
        if public && !names.iter().any(|n| n == name) {
            names.push(name.to_owned());
        }
    }
    names.sort();
    names
}

/// Removes the `__pycache__` bytecode a wheel ships for sources it also
/// installs: what CPython imports for them is their source or the bytecode
/// compiled here from it, never bytecode that may say something else (as
/// pip's compile at install replaces it).
fn drop_shipped_bytecode(dest: &Dir, unpacked: &mut Unpacked) -> std::io::Result<()> {
    let installed: HashSet<String> = unpacked.files.iter().map(|f| f.path.clone()).collect();
    let shipped =
        |path: &str| bytecode::source_of(path).is_some_and(|source| installed.contains(&source));
    let mut kept = Vec::with_capacity(unpacked.files.len());
    for file in std::mem::take(&mut unpacked.files) {
        if shipped(&file.path) {
            dest.remove_file(&file.path)?;
        } else {
            kept.push(file);
        }
    }
    unpacked.files = kept;
    Ok(())
}

/// Gives every Python source `unpacked` installed the wheel's own time (see
/// [`bytecode::source_time`]), which its bytecode records.
fn set_source_times(dest: &Dir, unpacked: &Unpacked, seconds: u64) -> std::io::Result<()> {
    let time = bytecode::as_system_time(seconds);
    for file in unpacked.files.iter().filter(|f| f.path.ends_with(".py")) {
        dest.open_with(&file.path, OpenOptions::new().write(true))?
            .into_std()
            .set_modified(time)?;
    }
    Ok(())
}

/// Writes the bytecode of the sources `unpacked` installed beside them
/// (`__pycache__`), listing each file in what `RECORD` will say, as far as
/// the room has space: bytecode is optional. Answers how many were left
/// out for want of room.
fn add_bytecode(
    dest: &Dir,
    unpacked: &mut Unpacked,
    pycs: &[Pyc],
    room: &mut StagingRoom,
) -> Result<usize, NoRoom> {
    let installed: HashSet<String> = unpacked.files.iter().map(|f| f.path.clone()).collect();
    let installed: HashSet<&str> = installed.iter().map(String::as_str).collect();
    let wanted = bytecode::matching(pycs, &installed);
    let mut made_dirs: HashSet<String> = HashSet::new();
    let mut added = Vec::new();
    let mut left_out = 0;
    for (n, pyc) in wanted.iter().enumerate() {
        let Some((dir, _)) = pyc.path.rsplit_once('/') else {
            continue;
        };
        let new_dir = !made_dirs.contains(dir);
        if !room.take_if_room(pyc.bytes.len() as u64, 1 + u64::from(new_dir))? {
            left_out = wanted.len() - n;
            break;
        }
        if new_dir {
            match dest.create_dir(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    tracing::warn!(error = %e, "could not write bytecode; the modules compile when imported");
                    break;
                }
            }
            made_dirs.insert(dir.to_owned());
        }
        let written = dest
            .open_with(&pyc.path, OpenOptions::new().write(true).create_new(true))
            .and_then(|mut file| file.write_all(&pyc.bytes));
        if let Err(e) = written {
            tracing::warn!(error = %e, "could not write bytecode; the modules compile when imported");
            let _ = dest.remove_file(&pyc.path);
            break;
        }
        added.push(InstalledFile {
            path: pyc.path.clone(),
            hash: record_hash(&sha2::Sha256::digest(&pyc.bytes)),
            size: pyc.bytes.len() as u64,
        });
    }
    unpacked.files.extend(added);
    Ok(left_out)
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;
    use std::time::Duration;

    #[test]
    fn the_modules_checked_are_the_public_top_level_ones() {
        let files: Vec<InstalledFile> = [
            "black/__init__.py",
            "black/nodes.py",
            "blib2to3/pgen2/driver.py",
            "_black_version.py",
            "six.py",
            "tests/test_black.py",
            "black-24.1.0.dist-info/METADATA",
            "black/__pycache__/nodes.cpython-315.pyc",
            "data/grammar.txt",
            "3rdparty.py",
        ]
        .iter()
        .map(|p| InstalledFile {
            path: (*p).into(),
            hash: String::new(),
            size: 0,
        })
        .collect();
        let modules = top_level_modules(&files);
        assert_eq!(modules, ["black", "blib2to3", "six"]);
        let black = PackageName::from_str("Black").unwrap();
        assert_eq!(modules_to_check(&black, modules.clone()), ["black"]);
        let bs4 = PackageName::from_str("beautifulsoup4").unwrap();
        assert_eq!(modules_to_check(&bs4, modules.clone()), modules);
    }

    use tokio_util::sync::CancellationToken;

    use super::*;

    #[test]
    fn running_out_of_quota_keeps_the_staging_refusal_as_source() {
        let stop = InstallStop::new(CancellationToken::new(), Duration::from_secs(60));
        let quota = NoRoom::Quota {
            free: "1 MiB".into(),
            quota: "2 MiB".into(),
        };
        let err = no_room(quota, &stop);
        assert!(
            matches!(&err, PackageError::Quota(NoRoom::Quota { free, .. }) if free == "1 MiB"),
            "{err:?}"
        );
        assert!(err.to_string().contains("disk quota of 2 MiB"), "{err}");
        let source = std::error::Error::source(&err).and_then(|s| s.downcast_ref::<NoRoom>());
        assert!(matches!(source, Some(NoRoom::Quota { .. })), "{err:?}");
    }
}
