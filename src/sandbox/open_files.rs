//! [`deleted_open_files`]: bytes held by files of a sandbox that were deleted
//! while still open. Such a file has no name left to walk to, but keeps its
//! disk until the last descriptor closes, and guest code can go on writing to
//! it. On Linux the process's descriptors (`/proc/self/fd`) say which files
//! they are; elsewhere they cannot be seen, and count as nothing.

use std::io;
use std::path::Path;

/// Bytes held by deleted-but-open files under `sandbox` (a host directory).
#[cfg(target_os = "linux")]
pub fn deleted_open_files(sandbox: &Path) -> io::Result<u64> {
    use std::collections::HashSet;
    use std::os::unix::fs::MetadataExt;

    let Some(prefix) = sandbox
        .to_str()
        .map(|p| format!("{}/", p.trim_end_matches('/')))
    else {
        return Ok(0);
    };
    let mut seen = HashSet::new();
    let mut bytes = 0u64;
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let entry = entry?;
        // A descriptor closed since the listing is not an error.
        let Ok(target) = std::fs::read_link(entry.path()) else {
            continue;
        };
        let Some(target) = target.to_str() else {
            continue;
        };
        if !(target.starts_with(&prefix) && target.ends_with(" (deleted)")) {
            continue;
        }
        let Ok(meta) = std::fs::metadata(entry.path()) else {
            continue;
        };
        if meta.is_file() && meta.nlink() == 0 && seen.insert((meta.dev(), meta.ino())) {
            bytes = bytes.saturating_add(meta.len().min(meta.blocks().saturating_mul(512)));
        }
    }
    Ok(bytes)
}

/// Bytes held by deleted-but-open files: not visible on this system.
#[cfg(not(target_os = "linux"))]
pub fn deleted_open_files(_sandbox: &Path) -> io::Result<u64> {
    Ok(0)
}
