//! [`deleted_open_files`]: bytes held by files of a sandbox that were deleted
//! while still open. Such a file has no name left to walk to, but keeps its
//! disk until the last descriptor closes, and guest code can go on writing to
//! it. On Linux the process's descriptors (`/proc/self/fd`) say which files
//! they are; elsewhere they cannot be seen, and count as nothing.
//!
//! Reading every descriptor of the process costs a system call each, so a
//! caller that only reports (status of many sandboxes at once) may share a
//! reading a few milliseconds old ([`Freshness::Recent`]), unless a guest has
//! closed a descriptor since ([`note_closed`]); a quota decision always reads
//! afresh.

use std::io;
use std::path::Path;

/// How fresh a reading of the process's descriptors must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freshness {
    /// Read now (a quota decision).
    Now,
    /// A reading up to [`RECENT`] old will do (a status report).
    Recent,
}

/// How old a reading may be for [`Freshness::Recent`].
#[cfg(target_os = "linux")]
const RECENT: std::time::Duration = std::time::Duration::from_millis(50);

/// Counts descriptors closed by guests (or dropped with an interpreter): a
/// reading taken before the last close is not reused.
static CLOSES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Notes that a guest closed descriptors, so that shared readings are redone.
pub fn note_closed() {
    CLOSES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// Bytes held by deleted-but-open files under `sandbox` (a host directory).
#[cfg(target_os = "linux")]
pub fn deleted_open_files(sandbox: &Path, freshness: Freshness) -> io::Result<u64> {
    use std::collections::HashSet;

    let Some(prefix) = sandbox
        .to_str()
        .map(|p| format!("{}/", p.trim_end_matches('/')))
    else {
        return Ok(0);
    };
    let files = match freshness {
        Freshness::Now => std::sync::Arc::new(read_deleted()?),
        Freshness::Recent => recent_reading()?,
    };
    let mut seen = HashSet::new();
    Ok(files
        .iter()
        .filter(|f| f.target.starts_with(&prefix) && seen.insert((f.dev, f.ino)))
        .map(|f| f.bytes)
        .fold(0u64, u64::saturating_add))
}

/// Bytes held by deleted-but-open files: not visible on this system.
#[cfg(not(target_os = "linux"))]
pub fn deleted_open_files(_sandbox: &Path, _freshness: Freshness) -> io::Result<u64> {
    Ok(0)
}

/// One deleted file the process holds open.
#[cfg(target_os = "linux")]
struct DeletedFile {
    target: String,
    dev: u64,
    ino: u64,
    bytes: u64,
}

/// The last reading, shared by reports made within [`RECENT`] of it.
#[cfg(target_os = "linux")]
fn recent_reading() -> io::Result<std::sync::Arc<Vec<DeletedFile>>> {
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    type Reading = Option<(Instant, u64, Arc<Vec<DeletedFile>>)>;
    static LAST: Mutex<Reading> = Mutex::new(None);
    let closes = CLOSES.load(std::sync::atomic::Ordering::Relaxed);
    let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((taken, seen_closes, files)) = last.as_ref()
        && taken.elapsed() < RECENT
        && *seen_closes == closes
    {
        return Ok(files.clone());
    }
    let files = Arc::new(read_deleted()?);
    *last = Some((Instant::now(), closes, files.clone()));
    Ok(files)
}

/// Every deleted regular file the process holds open now.
#[cfg(target_os = "linux")]
fn read_deleted() -> io::Result<Vec<DeletedFile>> {
    use std::os::unix::fs::MetadataExt;

    let mut files = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let entry = entry?;
        // A descriptor closed since the listing is not an error.
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        let Some(target) = target.to_str() else {
            continue;
        };
        let Some(target) = target.strip_suffix(" (deleted)") else {
            continue;
        };
        let Ok(meta) = std::fs::metadata(entry.path()) else {
            continue;
        };
        if meta.is_file() && meta.nlink() == 0 {
            files.push(DeletedFile {
                target: target.to_owned(),
                dev: meta.dev(),
                ino: meta.ino(),
                bytes: super::allocation::file_held(meta.len(), Some(meta.blocks())),
            });
        }
    }
    Ok(files)
}
