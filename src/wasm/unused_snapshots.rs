//! Snapshots no server uses any more, removed from the module cache.
//!
//! Every change of what a snapshot holds (another build of the guest program,
//! another `SANDBOX_PRELOAD`) makes a new one, about 85 MB for the scientific
//! runtime, and the old one stays behind. A snapshot is marked as used each
//! time a server loads it (its record's modification time), and one that no
//! server has loaded for [`UNUSED_DAYS`] is removed when a server starts. That
//! loses nothing: a saved sandbox is only ever restored onto the snapshot of
//! the server restoring it, a running server keeps its image open (on Unix a
//! removed file stays readable while open), and a server that needs a removed
//! snapshot again pre-initialises the runtime again (seconds; the compiled
//! module, the expensive part, is not touched). A sandbox saved on a
//! snapshot that was since made again comes back with its files only, and is
//! told why (the image's identity is in its record). A running server marks
//! its snapshot again every hour. Temporary files and scratch directories a
//! stopped preparation or compile left behind go too, once a day old. A
//! bundle's modules (listed in its `SHA256SUMS`) are never touched.

use std::fs::File;
use std::path::Path;

use crate::sandbox::remove_tree::remove_tree;
use std::time::{Duration, SystemTime};

/// Days a snapshot stays in the cache after a server last loaded it.
pub(crate) const UNUSED_DAYS: u64 = 7;

/// Age after which a temporary file of a preparation is one that stopped.
const LEFT_BEHIND: Duration = Duration::from_secs(24 * 60 * 60);

/// The name of a snapshot's record ends with this.
pub(crate) const RECORD: &str = ".snapshot.json";
/// The name of a snapshot's image ends with this.
pub(crate) const IMAGE: &str = ".image";
/// The name of a snapshot's making lock ends with this (see
/// [`super::snapshot::Snapshot::making`]).
pub(crate) const LOCK: &str = ".snapshot.lock";

/// Notes that the snapshot whose record is `record` was just loaded.
pub(crate) fn mark_used(record: &Path) {
    if let Ok(file) = File::options().append(true).open(record) {
        let _ = file.set_modified(SystemTime::now());
    }
}

/// What a pass removed.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Removed {
    /// Snapshots (record and image).
    pub snapshots: usize,
    /// Bytes their files and the temporary files took.
    pub bytes: u64,
}

/// Removes from `cache_dir` every snapshot but `keep` that no server has
/// loaded for [`UNUSED_DAYS`], and temporary files over a day old, as of
/// `now`.
pub(crate) fn remove_unused(cache_dir: &Path, keep: &str, now: SystemTime) -> Removed {
    let unused_for = Duration::from_secs(UNUSED_DAYS * 24 * 60 * 60);
    let mut removed = Removed::default();
    if is_bundles(cache_dir) {
        return removed;
    }
    let Ok(entries) = std::fs::read_dir(cache_dir) else {
        return removed;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // Not followed: a link, a directory or anything else is left alone.
        let Ok(meta) = entry.metadata() else { continue };
        let age = now
            .duration_since(meta.modified().unwrap_or(now))
            .unwrap_or_default();
        if meta.is_dir() {
            if is_scratch(&name) && age > LEFT_BEHIND {
                let _ = remove_tree(&entry.path());
            }
            continue;
        }
        if !meta.is_file() {
            continue;
        }
        if let Some(key) = name.strip_suffix(RECORD) {
            if key != keep
                && age > unused_for
                && let Some(bytes) = remove_snapshot(cache_dir, key, meta.len())
            {
                removed.bytes += bytes;
                removed.snapshots += 1;
            }
        } else if let Some(key) = name.strip_suffix(IMAGE)
            && key != keep
            && age > unused_for
            && !cache_dir.join(format!("{key}{RECORD}")).exists()
            && std::fs::remove_file(entry.path()).is_ok()
        {
            // An image whose record is gone (a removal cut short).
            removed.bytes += meta.len();
        } else if is_left_behind(&name)
            && age > LEFT_BEHIND
            && std::fs::remove_file(entry.path()).is_ok()
        {
            removed.bytes += meta.len();
        }
    }
    removed
}

/// Removes the snapshot `key` (record first, so no loader finds a record
/// whose image is gone); the bytes freed, or `None` when its record stays.
fn remove_snapshot(cache_dir: &Path, key: &str, record_bytes: u64) -> Option<u64> {
    std::fs::remove_file(cache_dir.join(format!("{key}{RECORD}"))).ok()?;
    let _ = std::fs::remove_file(cache_dir.join(format!("{key}{LOCK}")));
    let image = cache_dir.join(format!("{key}{IMAGE}"));
    let image_bytes = std::fs::symlink_metadata(&image).map_or(0, |m| m.len());
    Some(match std::fs::remove_file(&image) {
        Ok(()) => record_bytes + image_bytes,
        Err(_) => record_bytes,
    })
}

/// Whether `cache_dir` is a bundle's modules directory (its parent holds the
/// bundle's `SHA256SUMS`, which lists its snapshot).
fn is_bundles(cache_dir: &Path) -> bool {
    cache_dir
        .parent()
        .is_some_and(|bundle| bundle.join(crate::bundle::sums::SUMS_FILE).exists())
}

/// Whether `name` is a preparation's scratch directory (`preinit-{pid}-{key}`).
fn is_scratch(name: &str) -> bool {
    name.strip_prefix("preinit-")
        .and_then(|rest| rest.split_once('-'))
        .is_some_and(|(pid, _)| pid.parse::<u32>().is_ok())
}

/// Whether `name` is a temporary file a preparation writes before renaming
/// it into place (`.{name}.partial-{pid}`, of an image, a record or a
/// compiled module).
fn is_left_behind(name: &str) -> bool {
    name.starts_with('.')
        && name.rsplit_once(".partial-").is_some_and(|(stem, pid)| {
            [IMAGE, RECORD, ".cwasm"]
                .iter()
                .any(|end| stem.ends_with(end))
                && pid.parse::<u32>().is_ok()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(24 * 60 * 60);

    fn snapshot(dir: &Path, key: &str, used: SystemTime) {
        std::fs::write(dir.join(format!("{key}.image")), vec![1u8; 4096]).unwrap();
        let record = dir.join(format!("{key}.snapshot.json"));
        std::fs::write(&record, b"{}").unwrap();
        File::options()
            .append(true)
            .open(&record)
            .unwrap()
            .set_modified(used)
            .unwrap();
    }

    fn aged(path: &Path, modified: SystemTime) {
        std::fs::write(path, vec![0u8; 100]).unwrap();
        File::options()
            .append(true)
            .open(path)
            .unwrap()
            .set_modified(modified)
            .unwrap();
    }

    #[test]
    fn only_snapshots_unused_for_a_week_go_and_never_the_one_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        snapshot(dir.path(), "old-build", now - 8 * DAY);
        snapshot(dir.path(), "other-preload", now - 2 * DAY);
        snapshot(dir.path(), "current", now - 30 * DAY);
        aged(
            &dir.path().join("rt-gate8-wasmtime48.0-1.cwasm"),
            now - 90 * DAY,
        );
        aged(
            &dir.path().join(".old-build.image.partial-77"),
            now - 2 * DAY,
        );
        aged(&dir.path().join(".current.image.partial-78"), now);
        aged(
            &dir.path().join(".rt-wasmtime48.0-1.cwasm.partial-79"),
            now - 2 * DAY,
        );
        aged(&dir.path().join(".notes.txt.partial-80"), now - 2 * DAY);
        aged(&dir.path().join("cut-short.image"), now - 9 * DAY);
        let scratch = dir.path().join("preinit-81-0123abcd");
        std::fs::create_dir(&scratch).unwrap();
        std::fs::write(scratch.join("x"), b"x").unwrap();
        File::open(&scratch)
            .unwrap()
            .set_modified(now - 2 * DAY)
            .unwrap();
        let removed = remove_unused(dir.path(), "current", now);
        assert_eq!(removed.snapshots, 1);
        assert_eq!(removed.bytes, 4096 + 2 + 100 + 100 + 100);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                ".current.image.partial-78",
                ".notes.txt.partial-80",
                "current.image",
                "current.snapshot.json",
                "other-preload.image",
                "other-preload.snapshot.json",
                "rt-gate8-wasmtime48.0-1.cwasm",
            ]
        );
    }

    #[test]
    fn a_bundles_snapshots_are_never_removed() {
        let bundle = tempfile::tempdir().unwrap();
        let modules = bundle.path().join("modules");
        std::fs::create_dir(&modules).unwrap();
        std::fs::write(bundle.path().join("SHA256SUMS"), b"").unwrap();
        snapshot(&modules, "shipped", SystemTime::now() - 30 * DAY);
        assert_eq!(
            remove_unused(&modules, "current", SystemTime::now()),
            Removed::default()
        );
        assert!(modules.join("shipped.image").exists());
    }

    #[test]
    fn loading_a_snapshot_keeps_it_for_another_week() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        snapshot(dir.path(), "used-again", now - 8 * DAY);
        mark_used(&dir.path().join("used-again.snapshot.json"));
        assert_eq!(
            remove_unused(dir.path(), "current", now),
            Removed::default()
        );
        assert!(dir.path().join("used-again.image").exists());
    }

    #[cfg(unix)]
    #[test]
    fn links_and_directories_named_like_snapshots_are_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        snapshot(outside.path(), "victim", now - 30 * DAY);
        std::os::unix::fs::symlink(
            outside.path().join("victim.snapshot.json"),
            dir.path().join("victim.snapshot.json"),
        )
        .unwrap();
        std::fs::create_dir(dir.path().join("dir.snapshot.json")).unwrap();
        assert_eq!(
            remove_unused(dir.path(), "current", now),
            Removed::default()
        );
        assert!(outside.path().join("victim.image").exists());
        assert!(outside.path().join("victim.snapshot.json").exists());
    }
}
