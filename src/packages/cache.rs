//! [`WheelCache`]: downloaded wheels kept on the host by their sha256
//! (`<cache>/wheels/<sha256>.whl`), so a wheel is fetched once per machine.
//!
//! Files are written to a temporary name in the same directory and renamed
//! into place only after their hash was checked, so a reader never sees a
//! partial or unverified file. A cached file is hashed again before use; one
//! that no longer matches is deleted and fetched again. Only hex digests name
//! files: nothing from an index becomes part of a host path.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use rand::Rng;
use sha2::{Digest, Sha256};

use super::project_file::sha256_hex;

/// The host cache of downloaded wheels.
#[derive(Clone, Debug)]
pub struct WheelCache {
    dir: PathBuf,
}

/// The sha256 of a file in lowercase hex, and its size.
pub fn hash_file(path: &Path) -> std::io::Result<(String, u64)> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        size += n as u64;
        hasher.update(&buf[..n]);
    }
    Ok((hex(&hasher.finalize()), size))
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    crate::wasm::runtime::hex(bytes)
}

impl WheelCache {
    /// A cache in `dir` (created on first write).
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path_for(&self, sha256: &str) -> Option<PathBuf> {
        let sha256 = sha256_hex(sha256)?;
        Some(self.dir.join(format!("{sha256}.whl")))
    }

    /// The cached file with this sha256, after checking it still has it.
    pub fn get(&self, sha256: &str) -> Option<PathBuf> {
        let path = self.path_for(sha256)?;
        if !path.is_file() {
            return None;
        }
        match hash_file(&path) {
            Ok((actual, _)) if actual == sha256.to_ascii_lowercase() => Some(path),
            Ok(_) => {
                tracing::warn!(path = %path.display(), "a cached wheel no longer matches its hash; fetching it again");
                let _ = std::fs::remove_file(&path);
                None
            }
            Err(_) => None,
        }
    }

    /// A new temporary file in the cache directory.
    pub fn temp_file(&self) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(&self.dir)?;
        let name = format!(".partial-{:016x}", rand::rng().random::<u64>());
        let path = self.dir.join(name);
        File::options().write(true).create_new(true).open(&path)?;
        Ok(path)
    }

    /// Moves a verified temporary file into place as the wheel with this sha256.
    pub fn commit(&self, temp: &Path, sha256: &str) -> std::io::Result<PathBuf> {
        let path = self.path_for(sha256).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a sha256 digest")
        })?;
        std::fs::rename(temp, &path)?;
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_kept_by_hash_and_rechecked() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = WheelCache::new(tmp.path().join("wheels"));
        let temp = cache.temp_file().unwrap();
        std::fs::write(&temp, b"wheel bytes").unwrap();
        let (sha, size) = hash_file(&temp).unwrap();
        assert_eq!(size, 11);
        assert!(cache.get(&sha).is_none());
        let path = cache.commit(&temp, &sha).unwrap();
        assert!(!temp.exists());
        assert_eq!(cache.get(&sha.to_ascii_uppercase()), Some(path.clone()));
        std::fs::write(&path, b"tampered").unwrap();
        assert!(
            cache.get(&sha).is_none(),
            "a file that lost its hash is dropped"
        );
        assert!(!path.exists());
        assert!(cache.get("../../etc/passwd").is_none());
        assert!(cache.commit(&temp, "nothex").is_err());
    }
}
