//! What this machine offers the local sandboxes, read once at start: its
//! memory (or the control group's limit), the free space where sandboxes
//! live, and the number of descriptors the process may hold. The defaults of
//! the server-wide budgets are shares of these.

use std::path::Path;

/// Share of the machine's memory the sandboxes may grow to by default.
const MEMORY_SHARE: f64 = 0.5;
/// Share of the free disk the sandboxes may fill by default.
const DISK_SHARE: f64 = 0.5;
/// Descriptors kept for the server itself (its files, connections, walks).
pub const SERVER_DESCRIPTORS: u64 = 1024;

/// The default memory budget: half of the machine's memory, or of its
/// control group's limit when lower; `None` where neither can be read.
pub fn default_memory_budget() -> Option<u64> {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| meminfo_total(&text));
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok());
    let machine = match (total, cgroup) {
        (Some(t), Some(c)) => t.min(c),
        (t, c) => t.or(c)?,
    };
    Some((machine as f64 * MEMORY_SHARE) as u64)
}

/// The default disk budget: half of the space free at `path` (or its
/// nearest existing parent) now; `None` where it cannot be read.
pub fn default_disk_budget(path: &Path) -> Option<u64> {
    let existing = path.ancestors().find(|p| p.exists())?;
    let stat = rustix::fs::statvfs(existing).ok()?;
    let free = stat.f_bavail.saturating_mul(stat.f_frsize);
    Some((free as f64 * DISK_SHARE) as u64)
}

/// Makes the server's memory and environment unreadable to other processes
/// of its user (Linux: not dumpable, so `/proc/<pid>/environ`, `mem` and
/// `fd` are closed to them, and no core file is written); done when
/// upstream MCP commands, which run as the same user, are configured.
pub fn forbid_inspection() {
    #[cfg(target_os = "linux")]
    if let Err(e) =
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
    {
        tracing::warn!("could not make the server undumpable: {e}");
    }
}

/// Raises the process's soft limit on open descriptors to its hard limit,
/// and returns the limit now in force (`None` where it cannot be read).
pub fn raise_descriptor_limit() -> Option<u64> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if let Some(hard) = limit.maximum
        && limit.current.is_some_and(|soft| soft < hard)
    {
        limit.current = Some(hard);
        if setrlimit(Resource::Nofile, limit).is_err() {
            limit = getrlimit(Resource::Nofile);
        }
    }
    // `None` means unlimited.
    Some(limit.current.unwrap_or(u64::MAX))
}

/// `MemTotal` of a `/proc/meminfo` text, in bytes.
fn meminfo_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find_map(|l| l.strip_prefix("MemTotal:"))?;
    let mut parts = line.split_whitespace();
    let value: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") | None => value.checked_mul(1024),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_is_read_and_shared() {
        assert_eq!(
            meminfo_total("MemTotal:       24684084 kB\nMemFree: 1 kB\n"),
            Some(24684084 * 1024)
        );
        assert_eq!(meminfo_total("MemFree: 1 kB\n"), None);
        if cfg!(target_os = "linux") {
            assert!(default_memory_budget().is_some_and(|b| b > 0));
            let tmp = tempfile::tempdir().unwrap();
            assert!(default_disk_budget(&tmp.path().join("not/yet/there")).is_some());
            assert!(raise_descriptor_limit().is_some_and(|n| n >= 256));
        }
    }
}
