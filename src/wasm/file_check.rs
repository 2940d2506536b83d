//! The sha256 of a runtime file, without reading the whole file at every
//! start: once a file is hashed, its sha256 is recorded beside its
//! fingerprint (size, modification and change times, inode and device), and
//! a later start whose file has that same fingerprint takes the recorded
//! sha256. Any write to the file, or a file swapped in by rename, changes its
//! change time or inode (which no user call can set back), so it is hashed
//! again and checked against the pinned sha256 like the first time.
//!
//! A file is recorded only when it did not change while it was hashed and
//! its last change is older than [`SETTLED`], so a change that follows
//! within one tick of a coarse file-system clock cannot keep the old
//! fingerprint. Records live in the module cache, which is trusted like the
//! compiled modules in it.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// How long a file must have been left alone before its sha256 is recorded.
pub const SETTLED: Duration = Duration::from_secs(1);

/// What identifies one version of a file without reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Fingerprint {
    len: u64,
    modified_ns: i64,
    changed_ns: i64,
    inode: u64,
    device: u64,
}

impl Fingerprint {
    fn of(path: &Path) -> io::Result<Self> {
        let meta = std::fs::metadata(path)?;
        let ns = |secs: i64, nanos: i64| secs.saturating_mul(1_000_000_000).saturating_add(nanos);
        Ok(Self {
            len: meta.len(),
            modified_ns: ns(meta.mtime(), meta.mtime_nsec()),
            changed_ns: ns(meta.ctime(), meta.ctime_nsec()),
            inode: meta.ino(),
            device: meta.dev(),
        })
    }

    /// Whether the file has been left alone for [`SETTLED`].
    fn settled(&self) -> bool {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
        now.saturating_sub(self.changed_ns.max(self.modified_ns)) >= SETTLED.as_nanos() as i64
    }
}

/// A file's recorded sha256 and the fingerprint it was taken at.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    path: PathBuf,
    fingerprint: Fingerprint,
    sha256: String,
}

/// How [`sha256_of`] knew the sha256.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Checked {
    /// From the record: the file has not changed since it was hashed.
    Recorded,
    /// Read and hashed now.
    Hashed,
}

/// The lowercase hex sha256 of the file at `path`: the one recorded under
/// `records` when the file still has the fingerprint it was hashed at, else
/// hashed now (and recorded, when `records` is given).
pub fn sha256_of(path: &Path, records: Option<&Path>) -> io::Result<(String, Checked)> {
    let before = Fingerprint::of(path)?;
    let record_path = records.map(|dir| record_path(dir, path));
    if let Some(record) = record_path.as_deref().and_then(read_record)
        && record.path == path
        && record.fingerprint == before
    {
        return Ok((record.sha256, Checked::Recorded));
    }
    let (sha256, _) = crate::digest::hash_file(path)?;
    if let Some(record_path) = record_path
        && before.settled()
        && Fingerprint::of(path).is_ok_and(|after| after == before)
    {
        let record = Record {
            path: path.to_owned(),
            fingerprint: before,
            sha256: sha256.clone(),
        };
        if let Err(e) = write_record(&record_path, &record) {
            tracing::debug!(path = %record_path.display(), error = %e, "could not record a runtime file's sha256; the next start hashes it again");
        }
    }
    Ok((sha256, Checked::Hashed))
}

/// The record of `path` under `dir`, named by a hash of the path.
fn record_path(dir: &Path, path: &Path) -> PathBuf {
    let digest = Sha256::digest(path.as_os_str().as_encoded_bytes());
    let name: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    dir.join(format!("{name}.json"))
}

fn read_record(path: &Path) -> Option<Record> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// Writes the record under a temporary name and renames it into place.
fn write_record(path: &Path, record: &Record) -> io::Result<()> {
    super::module_cache::write_atomically(path, &serde_json::to_vec(record)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `bytes` at `path` and waits until the file counts as settled.
    fn settled_file(path: &Path, bytes: &[u8]) {
        std::fs::write(path, bytes).unwrap();
        std::thread::sleep(SETTLED + Duration::from_millis(100));
    }

    fn hex_sha(bytes: &[u8]) -> String {
        crate::digest::hex(&Sha256::digest(bytes))
    }

    #[test]
    fn an_unchanged_file_is_hashed_once_then_taken_from_its_record() {
        let tmp = tempfile::tempdir().unwrap();
        let (file, records) = (tmp.path().join("python.wasm"), tmp.path().join("verified"));
        settled_file(&file, b"the pinned build");
        let first = sha256_of(&file, Some(&records)).unwrap();
        assert_eq!(first, (hex_sha(b"the pinned build"), Checked::Hashed));
        let second = sha256_of(&file, Some(&records)).unwrap();
        assert_eq!(second, (hex_sha(b"the pinned build"), Checked::Recorded));
        // Without records, always hashed.
        assert_eq!(sha256_of(&file, None).unwrap().1, Checked::Hashed);
    }

    #[test]
    fn a_file_swapped_behind_the_record_is_hashed_again() {
        let tmp = tempfile::tempdir().unwrap();
        let (file, records) = (tmp.path().join("python.wasm"), tmp.path().join("verified"));
        settled_file(&file, b"the pinned build");
        sha256_of(&file, Some(&records)).unwrap();
        // Same size, same modification time: only the change time tells.
        let modified = std::fs::metadata(&file).unwrap().modified().unwrap();
        std::fs::write(&file, b"the evil!! build").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_modified(modified)
            .unwrap();
        let swapped = sha256_of(&file, Some(&records)).unwrap();
        assert_eq!(swapped, (hex_sha(b"the evil!! build"), Checked::Hashed));
        // Renamed into place (a new inode), with the old times.
        let other = tmp.path().join("other.wasm");
        std::fs::write(&other, b"the other build").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&other)
            .unwrap()
            .set_modified(modified)
            .unwrap();
        std::fs::rename(&other, &file).unwrap();
        let renamed = sha256_of(&file, Some(&records)).unwrap();
        assert_eq!(renamed, (hex_sha(b"the other build"), Checked::Hashed));
    }

    #[test]
    fn a_file_changed_a_moment_ago_is_not_recorded() {
        let tmp = tempfile::tempdir().unwrap();
        let (file, records) = (tmp.path().join("python.wasm"), tmp.path().join("verified"));
        std::fs::write(&file, b"just written").unwrap();
        sha256_of(&file, Some(&records)).unwrap();
        assert_eq!(sha256_of(&file, Some(&records)).unwrap().1, Checked::Hashed);
    }
}
