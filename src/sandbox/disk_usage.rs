//! [`measure`]: what a sandbox directory holds on disk, for its quota and its
//! status.
//!
//! The walk is depth first and holds one directory open per level, so a
//! directory with thousands of subdirectories costs a handful of descriptors;
//! a tree deeper than [`MAX_DEPTH`] levels is not measured at all. An entry
//! counts the blocks it really holds (`st_blocks`, see
//! [`super::allocation`]): a file grown with `truncate` holds nothing for its
//! hole, a file of one byte holds a whole block, and one written a byte
//! every 4 KiB holds a block per byte; a file with several names counts once. Files deleted while still open keep their bytes
//! until closed, and count too (found through the process's open descriptors,
//! on Linux). Anything that cannot be read is an error, never a zero: a
//! caller that cannot measure refuses the write.

use std::collections::HashSet;
use std::io;
use std::path::Path;

use cap_std::fs::{Dir, Metadata, MetadataExt, ReadDir};

use super::allocation::file_held;
use super::open_files::{Freshness, deleted_open_files};

/// Deepest directory tree measured: deeper than any path the file tools
/// accept ([`super::guest_path::MAX_DEPTH`]), so only a tree a guest nested
/// on purpose is too deep.
pub const MAX_DEPTH: usize = super::guest_path::MAX_DEPTH + 32;

/// What a sandbox directory holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskUsage {
    /// Bytes held on disk (whole blocks; a sparse file's holes are free).
    pub bytes: u64,
    /// Files, directories and links.
    pub files: u64,
}

/// Why a sandbox directory could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    /// A directory or file could not be read (descriptors exhausted, say).
    #[error(
        "the sandbox's files could not be measured ({what}: {source}); writes are refused until they can be: close files the code keeps open, or delete files"
    )]
    Unreadable {
        /// What was being read.
        what: &'static str,
        /// The error.
        source: io::Error,
    },
    /// The tree is too deep to walk.
    #[error(
        "the sandbox's directories are nested more than {MAX_DEPTH} levels deep, too deep to measure; writes are refused until the tree is flattened (move or delete nested directories)"
    )]
    TooDeep,
}

fn unreadable(what: &'static str) -> impl FnOnce(io::Error) -> MeasureError {
    move |source| MeasureError::Unreadable { what, source }
}

/// Measures `dir` (whose host path is `host_path`, to find its deleted files
/// that are still open), stopping early once usage passes `stop_at` in bytes
/// or entries: the caller only needs to know it is over.
pub fn measure(
    dir: &Dir,
    host_path: &Path,
    stop_at: DiskUsage,
    freshness: Freshness,
) -> Result<DiskUsage, MeasureError> {
    let mut usage = DiskUsage {
        bytes: deleted_open_files(host_path, freshness).map_err(unreadable("open files"))?,
        files: 0,
    };
    let mut linked: HashSet<(u64, u64)> = HashSet::new();
    let mut levels: Vec<ReadDir> = vec![dir.entries().map_err(unreadable("a directory"))?];
    while let Some(level) = levels.last_mut() {
        let Some(entry) = level.next() else {
            levels.pop();
            continue;
        };
        let entry = entry.map_err(unreadable("a directory"))?;
        usage.files += 1;
        let file_type = match entry.file_type() {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(unreadable("an entry")(e)),
        };
        match entry.metadata() {
            Ok(meta) => usage.bytes = usage.bytes.saturating_add(held(&meta, &mut linked)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(unreadable("an entry")(e)),
        }
        if file_type.is_dir() {
            if levels.len() >= MAX_DEPTH {
                return Err(MeasureError::TooDeep);
            }
            match entry.open_dir().and_then(|sub| sub.entries()) {
                Ok(entries) => levels.push(entries),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(unreadable("a directory")(e)),
            }
        }
        if usage.bytes > stop_at.bytes || usage.files > stop_at.files {
            break;
        }
    }
    Ok(usage)
}

/// Bytes an entry holds on disk (see [`held_bytes`]); 0 for a second name
/// of a file already counted.
fn held(meta: &Metadata, linked: &mut HashSet<(u64, u64)>) -> u64 {
    if meta.is_file() && meta.nlink() > 1 && !linked.insert((meta.dev(), meta.ino())) {
        return 0;
    }
    held_bytes(meta)
}

/// Bytes an entry holds on disk: the blocks the file system gave it (see
/// [`super::allocation`]), so a sparse file's holes are free and a file of
/// one byte holds a whole block.
pub fn held_bytes(meta: &Metadata) -> u64 {
    #[cfg(unix)]
    let blocks = Some(meta.blocks());
    #[cfg(not(unix))]
    let blocks = None;
    file_held(meta.len(), blocks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cap_std::ambient_authority;

    const NO_STOP: DiskUsage = DiskUsage {
        bytes: u64::MAX,
        files: u64::MAX,
    };

    fn open(path: &Path) -> Dir {
        Dir::open_ambient_dir(path, ambient_authority()).unwrap()
    }

    #[test]
    fn files_count_what_they_hold_once_and_links_are_not_followed() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("a/b")).unwrap();
        std::fs::write(tmp.path().join("a/b/f"), vec![1u8; 10_000]).unwrap();
        std::fs::hard_link(tmp.path().join("a/b/f"), tmp.path().join("g")).unwrap();
        std::os::unix::fs::symlink("/", tmp.path().join("root-link")).unwrap();
        let sparse = std::fs::File::create(tmp.path().join("sparse")).unwrap();
        sparse.set_len(1 << 40).unwrap();
        let usage = measure(&open(tmp.path()), tmp.path(), NO_STOP, Freshness::Now).unwrap();
        assert_eq!(usage.files, 6, "a, a/b, a/b/f, g, root-link, sparse");
        assert!(
            (10_000..40_000).contains(&usage.bytes),
            "one copy of f, the two directories' blocks, nothing for the hole: {}",
            usage.bytes
        );
    }

    #[test]
    fn many_subdirectories_need_few_descriptors_and_deep_trees_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        for i in 0..1500 {
            std::fs::create_dir(tmp.path().join(format!("d{i}"))).unwrap();
        }
        let usage = measure(&open(tmp.path()), tmp.path(), NO_STOP, Freshness::Now).unwrap();
        assert_eq!(usage.files, 1500);

        let deep = tempfile::tempdir().unwrap();
        let mut path = deep.path().to_owned();
        for _ in 0..=MAX_DEPTH {
            path.push("d");
        }
        std::fs::create_dir_all(&path).unwrap();
        let err = measure(&open(deep.path()), deep.path(), NO_STOP, Freshness::Now).unwrap_err();
        assert!(matches!(err, MeasureError::TooDeep), "{err}");
    }

    #[test]
    fn a_deleted_file_still_open_keeps_counting() {
        use std::io::Write;
        let tmp = tempfile::tempdir().unwrap();
        let mut file = std::fs::File::create(tmp.path().join("gone")).unwrap();
        file.write_all(&vec![7u8; 1 << 20]).unwrap();
        file.sync_all().unwrap();
        std::fs::remove_file(tmp.path().join("gone")).unwrap();
        let usage = measure(&open(tmp.path()), tmp.path(), NO_STOP, Freshness::Now).unwrap();
        if cfg!(target_os = "linux") {
            assert!(usage.bytes >= 1 << 20, "{usage:?}");
        }
        drop(file);
        let usage = measure(&open(tmp.path()), tmp.path(), NO_STOP, Freshness::Now).unwrap();
        assert_eq!(usage.bytes, 0);
    }
}
