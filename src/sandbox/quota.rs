//! [`DiskQuota`]: how much a sandbox directory may hold; [`QuotaLedger`]: the
//! running account that keeps it there, shared by the guest's write gates, the
//! host's file tools, the output files and package installs, and charged to
//! the server-wide disk [`Budget`].

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cap_std::fs::Dir;

use super::allocation::Allocation;
use super::budget::Budget;
use super::disk_usage::{DiskUsage, MeasureError, measure};
use super::error::SandboxError;
use super::open_files::Freshness;
use super::server_files::{ServerFiles, Writer};
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
/// The account books each allowed write on top of the last measurement, by
/// the blocks it can take on the directory's file system (see
/// [`Allocation`]), never by the bytes it carries: one byte written into a
/// hole takes a whole block. It can only overstate use (a rewrite of
/// existing bytes, a write into blocks already held, a deleted file), so
/// when a request does not fit, the directory is measured again before
/// refusing; measuring is therefore rare while a sandbox is well under quota.
/// A measurement that fails refuses the request. Before the sandbox's own
/// write is refused, the files the server wrote for it give way (see
/// [`ServerFiles`]). What the account holds is charged to the server's disk
/// budget, and given back when the ledger goes.
pub struct QuotaLedger {
    dir: Arc<Dir>,
    host_path: PathBuf,
    quota: DiskQuota,
    allocation: Allocation,
    budget: Arc<Budget>,
    account: Mutex<Account>,
    server_files: ServerFiles,
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
    /// A ledger for `dir` (at `host_path` on the host, on a file system that
    /// allocates as `allocation` says) under `quota`, charging `budget`.
    pub fn new(
        dir: Arc<Dir>,
        host_path: &Path,
        quota: DiskQuota,
        allocation: Allocation,
        budget: Arc<Budget>,
    ) -> Arc<Self> {
        Arc::new(Self {
            dir,
            host_path: host_path.to_owned(),
            quota,
            allocation,
            budget,
            account: Mutex::new(Account::default()),
            server_files: ServerFiles::default(),
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

    /// How the directory's file system allocates disk.
    pub fn allocation(&self) -> Allocation {
        self.allocation
    }

    /// Books a write of `len` bytes at an offset the host cannot see (a
    /// guest's): every block it could touch (see [`Allocation::write_takes`]).
    pub fn reserve_write(&self, len: u64) -> bool {
        self.reserve(self.allocation.write_takes(len), 0)
    }

    /// Books one new entry that takes `len` bytes (0 for an empty file, a
    /// block's worth for a directory or a link), rounded up to whole blocks.
    pub fn reserve_entry(&self, len: u64) -> bool {
        self.reserve(self.allocation.round_up(len), 1)
    }

    fn account(&self) -> std::sync::MutexGuard<'_, Account> {
        self.account.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Books `bytes` more bytes (already in whole blocks: see
    /// [`QuotaLedger::reserve_write`]) and `entries` more entries for the
    /// sandbox's own write if they fit in the quota and the server's budget,
    /// once the server's files have given way if they must; returns whether
    /// they did (a refusal is remembered for [`QuotaLedger::take_refused`]).
    pub fn reserve(&self, bytes: u64, entries: u64) -> bool {
        self.reserve_for(Writer::Sandbox, bytes, entries)
    }

    /// [`QuotaLedger::reserve`] for a file the server writes on the
    /// sandbox's account (spilled output): only older finished server files
    /// give way to it.
    pub fn reserve_server(&self, bytes: u64, entries: u64) -> bool {
        self.reserve_for(Writer::Server, bytes, entries)
    }

    fn reserve_for(&self, writer: Writer, bytes: u64, entries: u64) -> bool {
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
        let mut fits = self.fits_measured(&mut account, bytes, entries);
        if !fits
            && let Some((short_bytes, short_entries)) = self.shortfall(&account, bytes, entries)
            && self
                .server_files
                .give_way(&self.dir, writer, short_bytes, short_entries)
        {
            fits = self.fits_measured(&mut account, bytes, entries);
        }
        if fits {
            account.pending_bytes = bytes;
            account.pending_entries = entries;
            account.charged += bytes;
        } else if writer == Writer::Sandbox {
            // What the sandbox wrote was refused: its call reports the quota.
            // A copy the server could not finish (a cut stream's full text)
            // says so where it is named, and refuses the sandbox nothing.
            self.refused.store(true, Ordering::SeqCst);
        }
        fits
    }

    /// Measures afresh; whether `bytes` and `entries` fit (and are charged
    /// to the server's budget) on top of what is there.
    fn fits_measured(&self, account: &mut Account, bytes: u64, entries: u64) -> bool {
        match self.remeasure(account) {
            Ok(()) => {
                let measured = account.measured.unwrap_or_default();
                self.fits(measured, account, bytes, entries) && self.budget.try_charge(bytes)
            }
            Err(e) => {
                tracing::debug!(error = %e, "refusing a write: the sandbox cannot be measured");
                false
            }
        }
    }

    /// What must be freed (bytes, entries) for `bytes` and `entries` more
    /// to fit the quota and the server's budget; none when unmeasured.
    fn shortfall(&self, account: &Account, bytes: u64, entries: u64) -> Option<(u64, u64)> {
        let measured = account.measured?;
        let over_quota = measured
            .bytes
            .saturating_add(account.pending_bytes)
            .saturating_add(bytes)
            .saturating_sub(self.quota.max_bytes);
        let over_budget = bytes.saturating_sub(self.budget.free());
        let over_files = measured
            .files
            .saturating_add(account.pending_entries)
            .saturating_add(entries)
            .saturating_sub(self.quota.max_files);
        Some((over_quota.max(over_budget), over_files))
    }

    /// Has server files give way until about `bytes` bytes and `entries`
    /// entries are free, for an install's staging (which books its writes
    /// itself); returns what was freed.
    pub fn reclaim(&self, bytes: u64, entries: u64) -> (u64, u64) {
        let before = self.server_files.given_way();
        self.server_files
            .give_way(&self.dir, Writer::Sandbox, bytes, entries);
        self.forget();
        let after = self.server_files.given_way();
        (after.bytes - before.bytes, after.files - before.files)
    }

    /// The files the server wrote into the sandbox.
    pub fn server_files(&self) -> &ServerFiles {
        &self.server_files
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
    /// directories for it, or refuses it with what to do. The file and each
    /// directory take whole blocks.
    pub fn check_write(
        &self,
        path: &str,
        new_size: u64,
        replaced: Option<u64>,
        new_dirs: u64,
    ) -> Result<(), SandboxError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        let write = HostWrite {
            path,
            new_size,
            takes: self
                .allocation
                .round_up(new_size)
                .saturating_add(new_dirs.saturating_mul(self.allocation.block)),
            frees: replaced.unwrap_or(0),
            new_entries: new_dirs + u64::from(replaced.is_none()),
        };
        let mut account = self.account();
        self.remeasure(&mut account).map_err(measure_error)?;
        let mut verdict = self.judge(&account, &write);
        if verdict.is_err()
            && let Some((short_bytes, short_entries)) =
                self.shortfall(&account, write.growth(), write.new_entries)
            && self
                .server_files
                .give_way(&self.dir, Writer::Sandbox, short_bytes, short_entries)
        {
            self.remeasure(&mut account).map_err(measure_error)?;
            verdict = self.judge(&account, &write);
        }
        let growth = verdict?;
        account.charged += growth;
        account.pending_bytes += growth;
        account.pending_entries += write.new_entries;
        Ok(())
    }

    /// Whether a host write fits on top of the fresh measurement in
    /// `account` (and then charges its growth to the server's budget), or
    /// the refusal with what to do.
    fn judge(&self, account: &Account, write: &HostWrite<'_>) -> Result<u64, SandboxError> {
        let usage = account.measured.unwrap_or_default();
        let path = write.path;
        let after = usage
            .bytes
            .saturating_sub(write.frees)
            .saturating_add(write.takes);
        if after > self.quota.max_bytes {
            return Err(SandboxError::QuotaExceeded(format!(
                "writing {} to '{path}' would take the sandbox to {}, over its disk quota of {}; delete files first",
                human_bytes(write.new_size),
                human_bytes(after),
                human_bytes(self.quota.max_bytes)
            )));
        }
        let files = usage.files.saturating_add(write.new_entries);
        if files > self.quota.max_files {
            return Err(SandboxError::QuotaExceeded(format!(
                "writing '{path}' would make {files} files and directories, over the sandbox's limit of {}; delete some first",
                self.quota.max_files
            )));
        }
        let growth = after.saturating_sub(usage.bytes);
        if !self.budget.try_charge(growth) {
            return Err(SandboxError::QuotaExceeded(format!(
                "writing {} to '{path}' does not fit in what the server may still hold on disk for all sandboxes ({} free of {}); delete files in this or other sandboxes, or close some",
                human_bytes(write.new_size),
                human_bytes(self.budget.free()),
                human_bytes(self.budget.limit())
            )));
        }
        Ok(growth)
    }
}

/// A write the host makes with a file tool, as the ledger books it.
struct HostWrite<'a> {
    path: &'a str,
    /// The bytes written.
    new_size: u64,
    /// What the file and its new directories take, in whole blocks.
    takes: u64,
    /// What the file it replaces held.
    frees: u64,
    /// Entries it adds.
    new_entries: u64,
}

impl HostWrite<'_> {
    /// What it adds to the sandbox's use.
    fn growth(&self) -> u64 {
        self.takes.saturating_sub(self.frees)
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
        QuotaLedger::new(dir, path, quota, Allocation::default(), budget)
    }

    #[test]
    fn the_ledger_books_writes_and_measures_again_before_refusing() {
        let tmp = tempfile::tempdir().unwrap();
        let ledger = ledger(tmp.path(), DiskQuota::new(40_000, 3), Budget::unlimited());
        assert!(ledger.reserve(24_000, 1));
        assert!(!ledger.take_refused());
        // The account says 24000 are used; 20000 more would not fit, and
        // measuring finds the directory still empty (nothing was written).
        assert!(ledger.reserve(20_000, 0));
        std::fs::write(tmp.path().join("f"), vec![1u8; 36_000]).unwrap();
        ledger.forget();
        assert!(!ledger.reserve(8_000, 0), "measured: 9 blocks on disk");
        assert!(ledger.take_refused());
        assert!(!ledger.take_refused(), "the refusal is reported once");
        assert!(ledger.reserve(3_000, 0));
        assert!(ledger.reserve(0, 2));
        std::fs::write(tmp.path().join("g"), b"").unwrap();
        std::fs::write(tmp.path().join("h"), b"").unwrap();
        assert!(!ledger.reserve(0, 1), "the entry limit counts too");
    }

    #[test]
    fn one_byte_writes_into_holes_are_booked_by_the_block_each_takes() {
        use std::os::unix::fs::FileExt;
        let tmp = tempfile::tempdir().unwrap();
        let quota = 64 * 4096;
        let ledger = ledger(tmp.path(), DiskQuota::new(quota, 10), Budget::unlimited());
        let file = std::fs::File::create(tmp.path().join("holes")).unwrap();
        let mut written = 0u64;
        while written < 1000 && ledger.reserve_write(1) {
            file.write_all_at(b"x", written * 4096).unwrap();
            written += 1;
        }
        assert!(written <= 64, "{written} blocks went through");
        let held = ledger.usage().unwrap().bytes;
        assert!(
            held <= quota,
            "{held} bytes held under a {quota}-byte quota"
        );
    }

    #[test]
    fn host_writes_are_checked_against_the_quota_and_replacing_frees_the_old_size() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("g"), vec![1u8; 500]).unwrap();
        let ledger = ledger(tmp.path(), DiskQuota::new(20_000, 10), Budget::unlimited());
        assert!(ledger.check_write("/x", 400, None, 0).is_ok());
        assert!(
            ledger.check_write("/x", 12_289, None, 0).is_err(),
            "a block for g and four for x are over 20000"
        );
        assert!(ledger.check_write("/g", 15_000, Some(4096), 0).is_ok());
        assert!(
            ledger.check_write("/x", 8_000, None, 3).is_err(),
            "three new directories take a block each"
        );
        let full = ledger_with_files(5);
        assert!(full.check_write("/new", 1, None, 0).is_err());
        assert!(
            full.check_write("/f0", 1, Some(4096), 0).is_ok(),
            "rewriting is no new file"
        );
    }

    fn ledger_with_files(n: usize) -> Arc<QuotaLedger> {
        let tmp = tempfile::tempdir().unwrap().keep();
        for i in 0..n {
            std::fs::write(tmp.join(format!("f{i}")), b"x").unwrap();
        }
        ledger(&tmp, DiskQuota::new(1 << 20, n as u64), Budget::unlimited())
    }

    /// A sandbox directory whose `/.outputs/` holds three spilled streams of
    /// 40 KB each (the oldest first).
    fn with_spilled_output() -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        let outputs = tmp.path().join(".outputs");
        std::fs::create_dir(&outputs).unwrap();
        for i in 1..=3u64 {
            let path = outputs.join(format!("exec-{i}-stdout.txt"));
            std::fs::write(&path, vec![b'o'; 40_000]).unwrap();
            let at = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(i);
            std::fs::File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_modified(at)
                .unwrap();
        }
        tmp
    }

    #[test]
    fn the_servers_files_give_way_to_the_sandboxs_own_writes_oldest_first() {
        let tmp = with_spilled_output();
        // 3 spills of 40 KB (10 blocks each) and their directory: 126976 held.
        let ledger = ledger(tmp.path(), DiskQuota::new(130_000, 8), Budget::unlimited());
        let outputs = tmp.path().join(".outputs");
        assert!(ledger.reserve(8192, 1), "a guest write makes room");
        std::fs::write(tmp.path().join("a"), vec![b'a'; 8192]).unwrap();
        assert!(!outputs.join("exec-1-stdout.txt").exists());
        assert!(
            outputs.join("exec-2-stdout.txt").exists(),
            "only as much as needed"
        );
        assert!(
            ledger.check_write("/mine.csv", 60_000, None, 0).is_ok(),
            "a file tool makes room too"
        );
        std::fs::write(tmp.path().join("mine.csv"), vec![b'm'; 60_000]).unwrap();
        assert!(!outputs.join("exec-2-stdout.txt").exists());
        assert!(outputs.join("exec-3-stdout.txt").exists());
        let err = ledger
            .check_write("/more.csv", 60_000, None, 0)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("disk quota"),
            "too little would be freed: {err}"
        );
        assert!(
            outputs.join("exec-3-stdout.txt").exists(),
            "nothing gives way to a write that fails anyway"
        );
        let given = ledger.server_files().given_way();
        assert_eq!(given.files, 2);
        assert!(given.bytes >= 80_000, "{given:?}");
        assert_eq!(std::fs::read(tmp.path().join("a")).unwrap().len(), 8192);
    }

    #[test]
    fn only_older_finished_server_files_give_way_to_a_server_write() {
        use std::io::Write;
        let tmp = with_spilled_output();
        let ledger = ledger(tmp.path(), DiskQuota::new(130_000, 6), Budget::unlimited());
        let file = ledger.dir().create(".outputs/exec-4-stdout.txt").unwrap();
        (&file).write_all(&[b'x'; 40_000]).unwrap();
        let live = ledger.server_files().live("exec-4-stdout.txt", file);
        assert!(ledger.reserve_server(8192, 0), "exec-1's file gives way");
        assert!(!tmp.path().join(".outputs/exec-1-stdout.txt").exists());
        assert!(!ledger.reserve_server(1 << 20, 0));
        assert!(
            !live.gave_way(),
            "the file being written never gives way to the server"
        );
        // The sandbox's own write: the stream being spilled gives way last.
        assert!(ledger.reserve(100_000, 0));
        assert!(live.gave_way());
        assert_eq!(ledger.server_files().given_way().files, 4);
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
