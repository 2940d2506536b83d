//! [`WheelCache`]: downloaded wheels kept on the host by their sha256
//! (`<cache>/wheels/<sha256>.whl`), so a wheel is fetched once per machine.
//!
//! - Files are written to a temporary name in the same directory
//!   ([`PartialWheel`], deleted if dropped) and renamed into place only after
//!   their hash was checked, so a reader never sees a partial or unverified
//!   file. A cached file is hashed again before use; one that no longer
//!   matches is deleted and fetched again.
//! - Wheels are handed out as open files, so a wheel deleted from the cache
//!   meanwhile can still be read by the install that holds it.
//! - The cache is bounded on disk: after each new wheel, the least recently
//!   used wheels (by modification time, renewed on each use) are deleted
//!   until it fits; partial downloads left by a crash are deleted after an
//!   hour. A wheel an install refused is deleted ([`WheelCache::discard`]).
//! - Only hex digests name files: nothing from an index becomes part of a
//!   host path.

use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rand::Rng;

use super::project_file::sha256_hex;
use crate::digest::hash_reader;

/// Age after which a partial download is taken for a leftover of a crash.
const STALE_PARTIAL: Duration = Duration::from_secs(3600);
/// Name prefix of partial downloads.
const PARTIAL_PREFIX: &str = ".partial-";

/// The host cache of downloaded wheels.
#[derive(Clone, Debug)]
pub struct WheelCache {
    dir: PathBuf,
    max_bytes: u64,
}

/// A download in progress: a temporary file in the cache directory, deleted
/// when dropped unless [`WheelCache::commit`] took it.
#[derive(Debug)]
pub struct PartialWheel {
    path: Option<PathBuf>,
    file: File,
}

impl PartialWheel {
    /// The file being written.
    pub fn file(&self) -> &File {
        &self.file
    }
}

impl Drop for PartialWheel {
    fn drop(&mut self) {
        if let Some(path) = self.path.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl WheelCache {
    /// A cache in `dir` (created on first write) holding at most `max_bytes`.
    pub fn new(dir: PathBuf, max_bytes: u64) -> Self {
        Self { dir, max_bytes }
    }

    fn path_for(&self, sha256: &str) -> Option<PathBuf> {
        let sha256 = sha256_hex(sha256)?;
        Some(self.dir.join(format!("{sha256}.whl")))
    }

    /// The cached wheel with this sha256, open at its start, after checking
    /// it still has that hash; its use is recorded.
    pub fn get(&self, sha256: &str) -> Option<File> {
        let path = self.path_for(sha256)?;
        let mut file = File::open(&path).ok()?;
        if !file.metadata().is_ok_and(|m| m.is_file()) {
            return None;
        }
        match hash_reader(&mut file) {
            Ok((actual, _)) if actual == sha256.to_ascii_lowercase() => {
                let _ = file.set_modified(SystemTime::now());
                file.seek(SeekFrom::Start(0)).ok()?;
                Some(file)
            }
            Ok(_) => {
                tracing::warn!(path = %path.display(), "a cached wheel no longer matches its hash; fetching it again");
                let _ = std::fs::remove_file(&path);
                None
            }
            Err(_) => None,
        }
    }

    /// Whether a wheel with this sha256 is cached (without checking it).
    pub fn contains(&self, sha256: &str) -> bool {
        self.path_for(sha256).is_some_and(|p| p.is_file())
    }

    /// A new partial download in the cache directory.
    pub fn partial(&self) -> std::io::Result<PartialWheel> {
        partial_in(&self.dir)
    }

    pub fn commit(&self, mut partial: PartialWheel, sha256: &str) -> std::io::Result<File> {
        let path = self.path_for(sha256).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a sha256 digest")
        })?;
        let temp = partial.path.take().ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "already committed")
        })?;
        if let Err(e) = std::fs::rename(&temp, &path) {
            let _ = std::fs::remove_file(&temp);
            return Err(e);
        }
        let mut file = partial.file.try_clone()?;
        file.seek(SeekFrom::Start(0))?;
        self.evict();
        Ok(file)
    }

    /// Deletes the wheel with this sha256 (one an install refused).
    pub fn discard(&self, sha256: &str) {
        if let Some(path) = self.path_for(sha256) {
            match std::fs::remove_file(&path) {
                Ok(()) => tracing::info!(%sha256, "deleted a refused wheel from the cache"),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!(%sha256, error = %e, "could not delete a refused wheel"),
            }
        }
    }

    /// Deletes the least recently used wheels until the cache fits its
    /// bound, and partial downloads left by a crash. Downloads in progress
    /// count towards the bound.
    pub fn evict(&self) {
        keep_within(&self.dir, self.max_bytes, |name| {
            name.strip_suffix(".whl")
                .is_some_and(|stem| sha256_hex(stem).as_deref() == Some(stem))
        });
    }
}

/// A new temporary file in `dir` (created if missing), deleted when dropped
/// unless renamed into place.
pub fn partial_in(dir: &Path) -> std::io::Result<PartialWheel> {
    std::fs::create_dir_all(dir)?;
    let name = format!("{PARTIAL_PREFIX}{:016x}", rand::rng().random::<u64>());
    let path = dir.join(name);
    let file = File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    Ok(PartialWheel {
        path: Some(path),
        file,
    })
}

impl PartialWheel {
    /// Renames the file to `path` (replacing what is there), so readers see
    /// it whole or not at all.
    pub fn persist(mut self, path: &Path) -> std::io::Result<()> {
        let temp = self.path.take().ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "already persisted")
        })?;
        std::fs::rename(&temp, path).inspect_err(|_| {
            let _ = std::fs::remove_file(&temp);
        })
    }
}

/// Keeps the files of `dir` that `is_entry` names to `max_bytes` in all,
/// deleting the least recently used first (by modification time, which a
/// use renews); partial files left by a crash are deleted after an hour.
pub fn keep_within(dir: &Path, max_bytes: u64, is_entry: impl Fn(&str) -> bool) {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "could not list a cache to keep it in bounds");
            return;
        }
    };
    let now = SystemTime::now();
    let mut kept = Vec::new();
    let mut total = 0u64;
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let modified = meta.modified().unwrap_or(now);
        if name.starts_with(PARTIAL_PREFIX) {
            if now.duration_since(modified).unwrap_or_default() > STALE_PARTIAL {
                let _ = std::fs::remove_file(entry.path());
            } else {
                total += meta.len();
            }
            continue;
        }
        if is_entry(&name) {
            total += meta.len();
            kept.push((modified, meta.len(), entry.path()));
        }
    }
    kept.sort();
    for (_, len, path) in kept {
        if total <= max_bytes {
            break;
        }
        if std::fs::remove_file(&path).is_ok() {
            total -= len;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn store(cache: &WheelCache, bytes: &[u8]) -> (String, File) {
        let partial = cache.partial().unwrap();
        partial.file().write_all(bytes).unwrap();
        let (sha, _) = hash_reader(&mut &bytes[..]).unwrap();
        let file = cache.commit(partial, &sha).unwrap();
        (sha, file)
    }

    #[test]
    fn files_are_kept_by_hash_and_rechecked() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = WheelCache::new(tmp.path().join("wheels"), u64::MAX);
        let (sha, mut file) = store(&cache, b"wheel bytes");
        let mut read = String::new();
        file.read_to_string(&mut read).unwrap();
        assert_eq!(read, "wheel bytes", "handed out open at its start");
        assert!(cache.get(&sha.to_ascii_uppercase()).is_some());
        let path = tmp.path().join("wheels").join(format!("{sha}.whl"));
        std::fs::write(&path, b"tampered").unwrap();
        assert!(
            cache.get(&sha).is_none(),
            "a file that lost its hash is dropped"
        );
        assert!(!path.exists());
        assert!(cache.get("../../etc/passwd").is_none());
        assert!(cache.commit(cache.partial().unwrap(), "nothex").is_err());
        assert_eq!(
            std::fs::read_dir(tmp.path().join("wheels"))
                .unwrap()
                .count(),
            0,
            "no partial file is left"
        );
    }

    #[test]
    fn a_dropped_partial_download_leaves_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = WheelCache::new(tmp.path().to_path_buf(), u64::MAX);
        let partial = cache.partial().unwrap();
        partial.file().write_all(b"half a wheel").unwrap();
        drop(partial);
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    }

    #[test]
    fn the_least_recently_used_wheels_go_first_and_open_ones_stay_readable() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = WheelCache::new(tmp.path().to_path_buf(), 2500);
        let old = SystemTime::now() - Duration::from_secs(100);
        let (a, _) = store(&cache, &[1u8; 1000]);
        let (b, _) = store(&cache, &[2u8; 1000]);
        for sha in [&a, &b] {
            File::options()
                .write(true)
                .open(tmp.path().join(format!("{sha}.whl")))
                .unwrap()
                .set_modified(old)
                .unwrap();
        }
        assert!(cache.get(&a).is_some(), "a is used again");
        let (c, mut held) = store(&cache, &[3u8; 1000]);
        assert!(cache.contains(&a) && cache.contains(&c));
        assert!(!cache.contains(&b), "b was the least recently used");
        let (_, mut huge) = store(&cache, &[4u8; 3000]);
        assert!(
            !cache.contains(&c),
            "a wheel over the bound empties the cache"
        );
        let mut bytes = Vec::new();
        held.read_to_end(&mut bytes).unwrap();
        assert_eq!(bytes, [3u8; 1000], "an open wheel can still be read");
        bytes.clear();
        huge.read_to_end(&mut bytes).unwrap();
        assert_eq!(bytes.len(), 3000);
    }

    #[test]
    fn refused_wheels_are_discarded() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = WheelCache::new(tmp.path().to_path_buf(), u64::MAX);
        let (sha, _) = store(&cache, b"refused");
        cache.discard(&sha);
        assert!(!cache.contains(&sha));
        cache.discard("../../etc/passwd");
    }
}
