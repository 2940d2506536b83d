//! [`DiskQuota`]: how much a sandbox directory may hold; [`QuotaLedger`]: the
//! running account that keeps it there, shared by the guest's write gates, the
//! host's file tools, the output files and package installs, and charged to
//! the server-wide disk [`Budget`].

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cap_std::fs::Dir;

use super::budget::Budget;
use super::disk_usage::{DiskUsage, MeasureError, measure};
use super::error::SandboxError;
use super::open_files::Freshness;
use super::types::human_bytes;

/// The limits on a sandbox's directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskQuota {
    max_bytes: u64,
    max_files: u64,
}

impl DiskQuota {
    /// A quota of `max_bytes` bytes and `max_files` entries.
    pub fn new(max_bytes: u64, max_files: u64) -> Self {
        Self {
            max_bytes,
            max_files,
        }
    }

    /// No limit (for tests).
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

    /// Where a measurement may stop: well past the quota, the caller only
    /// needs to know it is over.
    fn stop_at(&self) -> DiskUsage {
        DiskUsage {
            bytes: self.max_bytes.saturating_mul(2),
            files: self.max_files.saturating_mul(2),
        }
    }
}

/// What a sandbox may still add: within its quota and the server's budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Room {
    /// Bytes.
    pub bytes: u64,
    /// Files and directories.
    pub entries: u64,
}

/// A sandbox directory's quota and a running account of its use.
///
/// The account books each allowed write on top of the last measurement. It
/// can only overstate use (a rewrite of existing bytes, a deleted file), so
/// when a request does not fit, the directory is measured again before
/// refusing; measuring is therefore rare while a sandbox is well under quota.
/// A measurement that fails refuses the request. What the account holds is
/// charged to the server's disk budget, and given back when the ledger goes.
pub struct QuotaLedger {
    dir: Arc<Dir>,
    host_path: PathBuf,
    quota: DiskQuota,
    budget: Arc<Budget>,
    account: Mutex<Account>,
    refused: AtomicBool,
    /// Counts write and create requests booked (or refused), so a caller
    /// can tell whether anything was written between two moments.
    requests: AtomicU64,
}

#[derive(Default)]
struct Account {
    measured: Option<DiskUsage>,
    pending_bytes: u64,
    pending_entries: u64,
    /// Bytes charged to the server's budget for this sandbox.
    charged: u64,
}

impl QuotaLedger {
    /// A ledger for `dir` (at `host_path` on the host) under `quota`,
    /// charging `budget`.
    pub fn new(
        dir: Arc<Dir>,
        host_path: &Path,
        quota: DiskQuota,
        budget: Arc<Budget>,
    ) -> Arc<Self> {
        Arc::new(Self {
            dir,
            host_path: host_path.to_owned(),
            quota,
            budget,
            account: Mutex::new(Account::default()),
            refused: AtomicBool::new(false),
            requests: AtomicU64::new(0),
        })
    }

    /// How many write and create requests were booked so far: unchanged
    /// between two moments, nothing was written in between.
    pub fn write_requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
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

    /// Books `bytes` more bytes and `entries` more entries if they fit in the
    /// quota and the server's budget; returns whether they did (a refusal is
    /// remembered for [`QuotaLedger::take_refused`]).
    pub fn reserve(&self, bytes: u64, entries: u64) -> bool {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let mut account = self.account();
        if let Some(measured) = account.measured
            && self.fits(measured, &account, bytes, entries)
            && self.budget.try_charge(bytes)
        {
            account.pending_bytes += bytes;
            account.pending_entries += entries;
            account.charged += bytes;
            return true;
        }
        let fits = match self.remeasure(&mut account) {
            Ok(()) => {
                let measured = account.measured.unwrap_or_default();
                self.fits(measured, &account, bytes, entries) && self.budget.try_charge(bytes)
            }
            Err(e) => {
                tracing::debug!(error = %e, "refusing a write: the sandbox cannot be measured");
                false
            }
        };
        if fits {
            account.pending_bytes = bytes;
            account.pending_entries = entries;
            account.charged += bytes;
        } else {
            self.refused.store(true, Ordering::SeqCst);
        }
        fits
    }

    fn fits(&self, measured: DiskUsage, account: &Account, bytes: u64, entries: u64) -> bool {
        measured
            .bytes
            .saturating_add(account.pending_bytes)
            .saturating_add(bytes)
            <= self.quota.max_bytes
            && measured
                .files
                .saturating_add(account.pending_entries)
                .saturating_add(entries)
                <= self.quota.max_files
    }

    /// Measures afresh, replacing the account and its charge to the budget.
    /// A measurement that fails leaves the charge as it was (the bytes are
    /// still there) and the account empty, so every request measures again.
    fn remeasure(&self, account: &mut Account) -> Result<(), MeasureError> {
        let fresh = measure(
            &self.dir,
            &self.host_path,
            self.quota.stop_at(),
            Freshness::Now,
        );
        account.pending_bytes = 0;
        account.pending_entries = 0;
        account.measured = None;
        let fresh = fresh?;
        self.budget.release(account.charged);
        self.budget.charge(fresh.bytes);
        account.charged = fresh.bytes;
        account.measured = Some(fresh);
        Ok(())
    }

    /// Drops the account after writes it did not see; the next request
    /// measures afresh.
    pub fn forget(&self) {
        let mut account = self.account();
        account.measured = None;
    }

    /// The room the sandbox has now (see [`QuotaLedger::room`]), at most
    /// `most` bytes of it held in the server's budget until the returned
    /// hold is dropped, which measures what was written meanwhile.
    pub fn hold_room(self: &Arc<Self>, most: u64) -> Result<(Room, RoomHold), SandboxError> {
        let room = self.room()?;
        let held = room.bytes.min(most);
        self.budget.charge(held);
        let hold = RoomHold {
            ledger: self.clone(),
            held,
        };
        Ok((
            Room {
                bytes: held,
                entries: room.entries,
            },
            hold,
        ))
    }

    /// Whether a request was refused since the last call.
    pub fn take_refused(&self) -> bool {
        self.refused.swap(false, Ordering::SeqCst)
    }

    /// Measures the directory now (and brings the account up to date).
    pub fn usage(&self) -> Result<DiskUsage, MeasureError> {
        let mut account = self.account();
        self.remeasure(&mut account)?;
        Ok(account.measured.unwrap_or_default())
    }

    /// Measures the directory for a report, where a reading of the process's
    /// open files a few milliseconds old will do; the account is left as it
    /// is (quota decisions always measure afresh).
    pub fn reported_usage(&self) -> Result<DiskUsage, MeasureError> {
        measure(
            &self.dir,
            &self.host_path,
            self.quota.stop_at(),
            Freshness::Recent,
        )
    }

    /// What the sandbox may still add, measured now.
    pub fn room(&self) -> Result<Room, SandboxError> {
        let usage = self.usage().map_err(measure_error)?;
        Ok(Room {
            bytes: self
                .quota
                .max_bytes
                .saturating_sub(usage.bytes)
                .min(self.budget.free()),
            entries: self.quota.max_files.saturating_sub(usage.files),
        })
    }

    /// Books a host write of `new_size` bytes to `path`, replacing a file
    /// that frees `replaced` bytes (or none), after creating `new_dirs`
    /// directories for it, or refuses it with what to do.
    pub fn check_write(
        &self,
        path: &str,
        new_size: u64,
        replaced: Option<u64>,
        new_dirs: u64,
    ) -> Result<(), SandboxError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let mut account = self.account();
        self.remeasure(&mut account).map_err(measure_error)?;
        let usage = account.measured.unwrap_or_default();
        let after = usage
            .bytes
            .saturating_sub(replaced.unwrap_or(0))
            .saturating_add(new_size);
        if after > self.quota.max_bytes {
            return Err(SandboxError::QuotaExceeded(format!(
                "writing {} to '{path}' would take the sandbox to {}, over its disk quota of {}; delete files first",
                human_bytes(new_size),
                human_bytes(after),
                human_bytes(self.quota.max_bytes)
            )));
        }
        let new_entries = new_dirs + u64::from(replaced.is_none());
        if usage.files.saturating_add(new_entries) > self.quota.max_files {
            return Err(SandboxError::QuotaExceeded(format!(
                "writing '{path}' would make {} files and directories, over the sandbox's limit of {}; delete some first",
                usage.files.saturating_add(new_entries),
                self.quota.max_files
            )));
        }
        let growth = after.saturating_sub(usage.bytes);
        if !self.budget.try_charge(growth) {
            return Err(SandboxError::QuotaExceeded(format!(
                "writing {} to '{path}' does not fit in what the server may still hold on disk for all sandboxes ({} free of {}); delete files in this or other sandboxes, or close some",
                human_bytes(new_size),
                human_bytes(self.budget.free()),
                human_bytes(self.budget.limit())
            )));
        }
        account.charged += growth;
        account.pending_bytes += growth;
        account.pending_entries += new_entries;
        Ok(())
    }
}

/// Room held in the server's disk budget for writes the ledger does not see
/// one by one (an install's staging); dropping it measures the sandbox,
/// charging what was really written, and gives the hold back.
#[derive(Debug)]
pub struct RoomHold {
    ledger: Arc<QuotaLedger>,
    held: u64,
}

impl Drop for RoomHold {
    fn drop(&mut self) {
        if let Err(e) = self.ledger.usage() {
            tracing::debug!(error = %e, "measuring after an install failed; the next write measures again");
        }
        self.ledger.budget.release(self.held);
    }
}

impl std::fmt::Debug for QuotaLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuotaLedger")
            .field("host_path", &self.host_path)
            .field("quota", &self.quota)
            .finish_non_exhaustive()
    }
}

impl Drop for QuotaLedger {
    fn drop(&mut self) {
        self.budget.release(self.account().charged);
    }
}

/// A measurement that failed, as the error a file tool or install answers.
fn measure_error(e: MeasureError) -> SandboxError {
    SandboxError::QuotaExceeded(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cap_std::ambient_authority;

    fn ledger(path: &Path, quota: DiskQuota, budget: Arc<Budget>) -> Arc<QuotaLedger> {
        let dir = Arc::new(Dir::open_ambient_dir(path, ambient_authority()).unwrap());
        QuotaLedger::new(dir, path, quota, budget)
    }

    #[test]
    fn the_ledger_books_writes_and_measures_again_before_refusing() {
        let tmp = tempfile::tempdir().unwrap();
        let ledger = ledger(tmp.path(), DiskQuota::new(1000, 3), Budget::unlimited());
        assert!(ledger.reserve(600, 1));
        assert!(!ledger.take_refused());
        // The account says 600 are used; 500 more would not fit, and measuring
        // finds the directory still empty (nothing was written), so it fits.
        assert!(ledger.reserve(500, 0));
        std::fs::write(tmp.path().join("f"), vec![1u8; 900]).unwrap();
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

    #[test]
    fn host_writes_are_checked_against_the_quota_and_replacing_frees_the_old_size() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("g"), vec![1u8; 500]).unwrap();
        let ledger = ledger(tmp.path(), DiskQuota::new(2000, 10), Budget::unlimited());
        assert!(ledger.check_write("/x", 400, None, 0).is_ok());
        assert!(ledger.check_write("/x", 1600, None, 0).is_err());
        assert!(ledger.check_write("/g", 1500, Some(500), 0).is_ok());
        let full = ledger_with_files(5);
        assert!(full.check_write("/new", 1, None, 0).is_err());
        assert!(
            full.check_write("/f0", 1, Some(1), 0).is_ok(),
            "rewriting is no new file"
        );
    }

    fn ledger_with_files(n: usize) -> Arc<QuotaLedger> {
        let tmp = tempfile::tempdir().unwrap().keep();
        for i in 0..n {
            std::fs::write(tmp.join(format!("f{i}")), b"x").unwrap();
        }
        ledger(&tmp, DiskQuota::new(10_000, n as u64), Budget::unlimited())
    }

    #[test]
    fn every_sandbox_charges_the_server_budget_and_gives_it_back() {
        let budget = Budget::new(1000);
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let first = ledger(a.path(), DiskQuota::new(800, 100), budget.clone());
        let second = ledger(b.path(), DiskQuota::new(800, 100), budget.clone());
        assert!(first.reserve(700, 1));
        assert!(
            !second.reserve(400, 1),
            "each fits its quota, not the budget together"
        );
        assert!(second.take_refused());
        assert!(second.reserve(300, 1));
        drop(first);
        assert!(
            second.reserve(400, 1),
            "a closed sandbox gives its share back"
        );
        assert!(second.check_write("/big", 5000, None, 0).is_err());
    }

    #[test]
    fn room_held_for_an_install_is_charged_until_what_was_written_is_measured() {
        let budget = Budget::new(10_000);
        let tmp = tempfile::tempdir().unwrap();
        let ledger = ledger(tmp.path(), DiskQuota::new(8_000, 100), budget.clone());
        let (room, hold) = ledger.hold_room(6_000).unwrap();
        assert_eq!(room.bytes, 6_000);
        assert_eq!(budget.used(), 6_000, "held while the install runs");
        std::fs::write(tmp.path().join("installed"), vec![1u8; 3_000]).unwrap();
        drop(hold);
        let used = budget.used();
        assert!(
            (3_000..6_000).contains(&used),
            "what was written, measured: {used}"
        );
    }

    #[test]
    fn a_directory_that_cannot_be_measured_refuses_writes() {
        let tmp = tempfile::tempdir().unwrap();
        let mut path = tmp.path().to_owned();
        for _ in 0..=super::super::disk_usage::MAX_DEPTH {
            path.push("d");
        }
        std::fs::create_dir_all(&path).unwrap();
        let ledger = ledger(
            tmp.path(),
            DiskQuota::new(1 << 30, 1 << 20),
            Budget::unlimited(),
        );
        assert!(!ledger.reserve(1, 0), "never counted as zero");
        assert!(ledger.check_write("/x", 1, None, 0).is_err());
        assert!(ledger.usage().is_err());
    }
}
