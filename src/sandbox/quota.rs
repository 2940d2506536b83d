//! [`DiskQuota`]: how much a sandbox directory may hold, and measuring it.
//!
//! Usage is measured by walking the directory (iteratively, never following
//! symbolic links) and counting file sizes and entries. The walk stops early
//! once the quota is clearly exceeded, so a directory of a million files does
//! not make every check slow.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use cap_std::fs::Dir;

use super::error::SandboxError;
use super::types::human_bytes;

/// The limits on a sandbox's directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskQuota {
    max_bytes: u64,
    max_files: u64,
}

/// What a sandbox directory holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskUsage {
    /// Bytes of regular files.
    pub bytes: u64,
    /// Files, directories and links.
    pub files: u64,
}

impl DiskQuota {
    /// A quota of `max_bytes` bytes and `max_files` entries.
    pub fn new(max_bytes: u64, max_files: u64) -> Self {
        Self {
            max_bytes,
            max_files,
        }
    }

    /// No limit (for tests and remote sandboxes).
    pub fn unlimited() -> Self {
        Self::new(u64::MAX, u64::MAX)
    }

    /// The byte limit.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// The entry limit.
    pub fn max_files(&self) -> u64 {
        self.max_files
    }

    /// The limits in words, e.g. "256 MiB and 10000 files".
    pub fn describe(&self) -> String {
        format!(
            "{} and {} files",
            human_bytes(self.max_bytes),
            self.max_files
        )
    }

    /// Measures `dir`, stopping once usage passes twice the quota.
    pub fn usage(&self, dir: &Dir) -> DiskUsage {
        let byte_stop = self.max_bytes.saturating_mul(2);
        let file_stop = self.max_files.saturating_mul(2);
        let mut usage = DiskUsage::default();
        let mut pending: Vec<Dir> = match dir.try_clone() {
            Ok(d) => vec![d],
            Err(_) => return usage,
        };
        while let Some(current) = pending.pop() {
            let Ok(entries) = current.entries() else {
                continue;
            };
            for entry in entries.flatten() {
                usage.files += 1;
                let Ok(file_type) = entry.file_type() else {
                    continue;
                };
                if file_type.is_dir() {
                    if let Ok(sub) = entry.open_dir() {
                        pending.push(sub);
                    }
                } else if file_type.is_file()
                    && let Ok(meta) = entry.metadata()
                {
                    usage.bytes = usage.bytes.saturating_add(meta.len());
                }
                if usage.bytes > byte_stop || usage.files > file_stop {
                    return usage;
                }
            }
        }
        usage
    }

    /// The error for a sandbox found over its quota, if it is.
    pub fn exceeded(&self, usage: DiskUsage) -> Option<String> {
        if usage.bytes > self.max_bytes {
            Some(format!(
                "the sandbox holds {} of files, over its disk quota of {}",
                human_bytes(usage.bytes),
                human_bytes(self.max_bytes)
            ))
        } else if usage.files > self.max_files {
            Some(format!(
                "the sandbox holds {} files and directories, over its limit of {}",
                usage.files, self.max_files
            ))
        } else {
            None
        }
    }

    /// Refuses a write of `new_size` bytes to `path` (replacing a file of
    /// `replaced` bytes) that would take the sandbox over its quota.
    pub fn check_write(
        &self,
        dir: &Dir,
        path: &str,
        new_size: u64,
        replaced: u64,
    ) -> Result<(), SandboxError> {
        if self.max_bytes == u64::MAX && self.max_files == u64::MAX {
            return Ok(());
        }
        let usage = self.usage(dir);
        let after = usage
            .bytes
            .saturating_sub(replaced)
            .saturating_add(new_size);
        if after > self.max_bytes {
            return Err(SandboxError::QuotaExceeded(format!(
                "writing {} to '{path}' would take the sandbox to {}, over its disk quota of {}; delete files first",
                human_bytes(new_size),
                human_bytes(after),
                human_bytes(self.max_bytes)
            )));
        }
        if replaced == 0 && usage.files + 1 > self.max_files {
            return Err(SandboxError::QuotaExceeded(format!(
                "the sandbox already holds {} files and directories, its limit; delete some before writing '{path}'",
                usage.files
            )));
        }
        Ok(())
    }
}

/// A sandbox directory's quota and a running account of its use, shared by
/// the host's file tools and the guest's write gates.
///
/// The account books each allowed write on top of the last measurement. It
/// can only overstate use (a rewrite of existing bytes, a deleted file), so
/// when a request does not fit, the directory is measured again before
/// refusing; measuring is therefore rare while a sandbox is well under quota.
pub struct QuotaLedger {
    dir: Arc<Dir>,
    quota: DiskQuota,
    account: Mutex<Account>,
    refused: AtomicBool,
}

#[derive(Default)]
struct Account {
    measured: Option<DiskUsage>,
    pending_bytes: u64,
    pending_entries: u64,
}

impl QuotaLedger {
    /// A ledger for `dir` under `quota`.
    pub fn new(dir: Arc<Dir>, quota: DiskQuota) -> Arc<Self> {
        Arc::new(Self {
            dir,
            quota,
            account: Mutex::new(Account::default()),
            refused: AtomicBool::new(false),
        })
    }

    /// The quota.
    pub fn quota(&self) -> &DiskQuota {
        &self.quota
    }

    /// The directory it keeps account of.
    pub fn dir(&self) -> &Arc<Dir> {
        &self.dir
    }

    fn account(&self) -> std::sync::MutexGuard<'_, Account> {
        self.account.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Books `bytes` more bytes and `entries` more entries if they fit;
    /// returns whether they did (a refusal is remembered for
    /// [`QuotaLedger::take_refused`]).
    pub fn reserve(&self, bytes: u64, entries: u64) -> bool {
        let mut account = self.account();
        let fits = |usage: DiskUsage, pending_bytes: u64, pending_entries: u64| {
            usage
                .bytes
                .saturating_add(pending_bytes)
                .saturating_add(bytes)
                <= self.quota.max_bytes
                && usage
                    .files
                    .saturating_add(pending_entries)
                    .saturating_add(entries)
                    <= self.quota.max_files
        };
        if let Some(measured) = account.measured
            && fits(measured, account.pending_bytes, account.pending_entries)
        {
            account.pending_bytes += bytes;
            account.pending_entries += entries;
            return true;
        }
        let fresh = self.quota.usage(&self.dir);
        account.measured = Some(fresh);
        if fits(fresh, 0, 0) {
            account.pending_bytes = bytes;
            account.pending_entries = entries;
            true
        } else {
            account.pending_bytes = 0;
            account.pending_entries = 0;
            self.refused.store(true, Ordering::SeqCst);
            false
        }
    }

    /// Drops the account after writes it did not see (file tools, output
    /// files); the next request measures afresh.
    pub fn forget(&self) {
        *self.account() = Account::default();
    }

    /// Whether a request was refused since the last call.
    pub fn take_refused(&self) -> bool {
        self.refused.swap(false, Ordering::SeqCst)
    }

    /// Measures the directory now.
    pub fn usage(&self) -> DiskUsage {
        self.quota.usage(&self.dir)
    }

    /// Refuses a host write of `new_size` bytes to `path` (replacing a file of
    /// `replaced` bytes) that would take the sandbox over its quota.
    pub fn check_write(
        &self,
        path: &str,
        new_size: u64,
        replaced: u64,
    ) -> Result<(), SandboxError> {
        self.quota.check_write(&self.dir, path, new_size, replaced)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cap_std::ambient_authority;

    #[test]
    fn usage_counts_nested_files_and_writes_over_quota_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("a/b")).unwrap();
        std::fs::write(tmp.path().join("a/b/f"), vec![0u8; 1000]).unwrap();
        std::fs::write(tmp.path().join("g"), vec![0u8; 500]).unwrap();
        std::os::unix::fs::symlink("/", tmp.path().join("root-link")).unwrap();
        let dir = Dir::open_ambient_dir(tmp.path(), ambient_authority()).unwrap();
        let quota = DiskQuota::new(2000, 10);
        let usage = quota.usage(&dir);
        assert_eq!(usage.bytes, 1500, "links are not followed");
        assert_eq!(usage.files, 5);
        assert!(quota.check_write(&dir, "/x", 400, 0).is_ok());
        assert!(quota.check_write(&dir, "/x", 600, 0).is_err());
        assert!(
            quota.check_write(&dir, "/g", 1000, 500).is_ok(),
            "replacing frees the old size"
        );
        assert!(
            DiskQuota::new(10_000, 5)
                .check_write(&dir, "/new", 1, 0)
                .is_err()
        );
        assert!(quota.exceeded(usage).is_none());
        assert!(DiskQuota::new(100, 10).exceeded(usage).is_some());
    }
}

#[cfg(test)]
mod ledger_tests {
    use super::*;
    use cap_std::ambient_authority;

    #[test]
    fn the_ledger_books_writes_and_measures_again_before_refusing() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = Arc::new(Dir::open_ambient_dir(tmp.path(), ambient_authority()).unwrap());
        let ledger = QuotaLedger::new(dir, DiskQuota::new(1000, 3));
        assert!(ledger.reserve(600, 1));
        assert!(!ledger.take_refused());
        // The account says 600 are used; 500 more would not fit, and measuring
        // finds the directory still empty (nothing was written), so it fits.
        assert!(ledger.reserve(500, 0));
        // A write the ledger did not book (the host's file tools) is followed
        // by forget().
        std::fs::write(tmp.path().join("f"), vec![0u8; 900]).unwrap();
        ledger.forget();
        assert!(!ledger.reserve(200, 0), "measured: 900 on disk");
        assert!(ledger.take_refused());
        assert!(!ledger.take_refused(), "the refusal is reported once");
        assert!(ledger.reserve(100, 0));
        assert!(ledger.reserve(0, 2));
        std::fs::write(tmp.path().join("g"), b"").unwrap();
        std::fs::write(tmp.path().join("h"), b"").unwrap();
        assert!(!ledger.reserve(0, 1), "the entry limit counts too");
    }
}
