//! The host directory that holds sandbox directories.
//!
//! Each server process works in its own subdirectory `server-<random>` of the
//! root and holds an exclusive lock on a file inside it for as long as it runs,
//! and a [`Lease`] on it that servers on other hosts sharing the root can
//! read. A subdirectory whose lock nobody holds and whose lease has lapsed is
//! what a server that died left: its durable sandboxes are taken into the
//! saved store (see the local backend), and at start the rest is removed;
//! those of other running servers are left alone. Sandbox directories get random names: a client's sandbox id never
//! becomes part of a host path. Directories are removed however deep a guest
//! made them (see [`remove_tree`]).
//!
//! The root also holds the server-wide disk [`Budget`] of its sandboxes, and
//! how its file system allocates disk (see [`Allocation`]): one that gives
//! disk to the holes in files is refused, since there no booking of a write
//! could bound what it takes.

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;

use super::allocation::Allocation;
use super::budget::Budget;
use super::error::SandboxError;
use super::host_resources::default_disk_budget;
use super::lease::{self, Lease};
use super::quota::{DiskQuota, QuotaLedger};
use super::remove_tree::remove_tree;
use super::types::SandboxLimits;

/// How the directory of each server under the root begins.
pub const SERVER_PREFIX: &str = "server-";
/// How each sandbox directory begins.
pub const SANDBOX_PREFIX: &str = "sb-";
const LOCK_FILE: &str = ".lock";

/// This server's directory under the sandbox root.
#[derive(Debug)]
pub struct SandboxRoot {
    dir: PathBuf,
    disk_budget: Arc<Budget>,
    allocation: Allocation,
    _lease: Lease,
    _lock: File,
}

impl SandboxRoot {
    /// Creates the root if needed, removes what killed servers left, and claims
    /// a fresh directory for this server. Its sandboxes together may hold
    /// `disk_budget` bytes (`None`: half the space free there now).
    pub fn open(root: &Path, disk_budget: Option<u64>) -> Result<Self, SandboxError> {
        Self::open_taking_in(root, disk_budget, &|_| {})
    }

    /// [`SandboxRoot::open`], handing each dead server's directory to
    /// `take_in` before it is removed, while this server holds its lock (the
    /// wasm backend moves its durable sandboxes into the saved store there).
    pub fn open_taking_in(
        root: &Path,
        disk_budget: Option<u64>,
        take_in: &dyn Fn(&Path),
    ) -> Result<Self, SandboxError> {
        let err = |source| SandboxError::Root {
            path: root.to_owned(),
            source,
        };
        make_private_root(root)?;
        let removed = remove_stale(root, take_in);
        if removed > 0 {
            tracing::info!(removed, root = %root.display(), "removed sandbox directories left by a server that did not shut down");
        }
        let dir = root.join(format!("{SERVER_PREFIX}{}", random_name()));
        // For the server's user alone: no other user lists its sandboxes or
        // reads their files.
        super::private_files::create_private_dir(&dir).map_err(err)?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(LOCK_FILE))
            .map_err(err)?;
        lock.try_lock()
            .map_err(|e| err(std::io::Error::other(e.to_string())))?;
        let lease = Lease::take(&dir).map_err(err)?;
        let allocation = Allocation::probe(&dir).map_err(err)?;
        if !allocation.sparse {
            tracing::error!(root = %root.display(), "the sandbox root's file system gives disk to holes in files");
            return Err(SandboxError::RootFillsHoles);
        }
        let disk_budget = disk_budget
            .or_else(|| default_disk_budget(root))
            .unwrap_or(u64::MAX);
        Ok(Self {
            dir,
            disk_budget: Budget::new(disk_budget),
            allocation,
            _lease: lease,
            _lock: lock,
        })
    }

    /// This server's directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// How the root's file system allocates disk.
    pub fn allocation(&self) -> Allocation {
        self.allocation
    }

    /// What all sandboxes under this root may hold together.
    pub fn disk_budget(&self) -> &Arc<Budget> {
        &self.disk_budget
    }

    /// The quota account of the sandbox directory `host_dir` under this
    /// root, with `limits`' disk quota, charged to the root's disk budget.
    pub fn open_ledger(
        &self,
        host_dir: &Path,
        limits: &SandboxLimits,
    ) -> Result<Arc<QuotaLedger>, SandboxError> {
        let dir = cap_std::fs::Dir::open_ambient_dir(host_dir, cap_std::ambient_authority())
            .map_err(|source| SandboxError::Root {
                path: host_dir.to_owned(),
                source,
            })?;
        Ok(QuotaLedger::new(
            Arc::new(dir),
            host_dir,
            DiskQuota::new(limits.disk_bytes, limits.disk_files),
            self.allocation(),
            self.disk_budget().clone(),
        ))
    }

    /// Creates a new sandbox directory with a random name, holding only an
    /// empty `tmp/` (the guest's `/tmp`).
    pub fn create_sandbox_dir(&self) -> Result<PathBuf, SandboxError> {
        let path = self.dir.join(format!("{SANDBOX_PREFIX}{}", random_name()));
        let made = fs::create_dir(&path).and_then(|()| fs::create_dir(path.join("tmp")));
        if let Err(source) = made {
            let _ = remove_tree(&path);
            return Err(SandboxError::Root { path, source });
        }
        Ok(path)
    }

    /// A fresh path for a sandbox directory (nothing is there yet), for a
    /// directory to be moved in from the same file system.
    pub fn new_sandbox_path(&self) -> PathBuf {
        self.dir.join(format!("{SANDBOX_PREFIX}{}", random_name()))
    }

    /// Removes a sandbox directory and everything in it (symbolic links are
    /// removed, never followed), and its memory directory.
    pub fn remove_sandbox_dir(&self, path: &Path) {
        if path.parent() != Some(self.dir.as_path()) {
            tracing::error!(path = %path.display(), "refusing to remove a directory outside this server's sandbox root");
            return;
        }
        for dir in [path.to_owned(), memory_dir_of(path)] {
            if let Err(e) = remove_tree(&dir)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(path = %dir.display(), error = %e, "could not remove a sandbox directory; the next start removes what is left");
            }
        }
    }
}

impl Drop for SandboxRoot {
    fn drop(&mut self) {
        if let Err(e) = remove_tree(&self.dir) {
            tracing::warn!(path = %self.dir.display(), error = %e, "could not remove this server's sandbox directory");
        }
    }
}

/// The directory beside the sandbox directory `sandbox_dir` that holds its
/// interpreter's memory pages (outside what its guest can reach).
pub fn memory_dir_of(sandbox_dir: &Path) -> PathBuf {
    sandbox_dir.with_extension("memory")
}

/// Removes server directories whose lock is free and whose lease has lapsed,
/// each handed to `take_in` first; returns how many.
fn remove_stale(root: &Path, take_in: &dyn Fn(&Path)) -> usize {
    let Ok(entries) = fs::read_dir(root) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !name.starts_with(SERVER_PREFIX) || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let path = entry.path();
        // Held while it is taken in and removed: no other server takes in
        // the same directory meanwhile.
        let Some(_lock) = claim_abandoned(&path) else {
            continue;
        };
        take_in(&path);
        match remove_tree(&path) {
            Ok(()) => removed += 1,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "could not remove the directory of a server that died; it is looked at again at each start (remove it by hand if it is not this server user's)")
            }
        }
    }
    removed
}

/// The lock file of the server directory `server_dir`: its server holds
/// it for as long as it runs.
pub fn lock_file_of(server_dir: &Path) -> PathBuf {
    server_dir.join(LOCK_FILE)
}

/// How long a starting server waits for the lock of a server directory
/// whose holder is exiting (see [`lease::holder_exiting_here`]): a killed
/// process is a zombie, and its lease lapses, before its last thread has
/// given its memory back and closed its files, which takes about 60 ms per
/// GB it held. Only a start waits (a call naming an unknown sandbox looks
/// once, on the request path).
const EXITING_HOLDER_GRACE: Duration = Duration::from_secs(5);

/// Takes `lock`, the lock of `server_dir`, at once; or, when its lease names
/// a process of this host that is exiting, as soon as that process lets go
/// of it, within `grace`. False when another server holds it, or when the
/// directory is gone once the lock is free (another server took it in
/// meanwhile).
fn lock_unless_held(lock: &File, server_dir: &Path, grace: Duration) -> bool {
    if lock.try_lock().is_ok() {
        return true;
    }
    if !lease::holder_exiting_here(server_dir) {
        return false;
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
        if lock.try_lock().is_ok() {
            return server_dir.exists();
        }
    }
    false
}

/// Whether the server directory `server_dir` belongs to no running server
/// (its lock is free, or it never got one, and its lease has lapsed): what
/// is left in it is nobody's.
pub fn is_abandoned(server_dir: &Path) -> bool {
    claim_abandoned(server_dir).is_some()
}

/// The server directory `server_dir`'s lock, held, when the directory
/// belongs to no running server (`Some(None)`: it has no lock file, and was
/// made longer ago than a lease's time, so its server died while creating
/// it; a younger one is a server starting now).
fn claim_abandoned(server_dir: &Path) -> Option<Option<File>> {
    // Opened as a regular file only: a FIFO planted there would block, a
    // link would lock what it points to.
    let lock = match super::private_files::open_regular(&server_dir.join(LOCK_FILE)) {
        Ok(lock) if lock_unless_held(&lock, server_dir, EXITING_HOLDER_GRACE) => Some(lock),
        Ok(_) => return None,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && made_long_ago(server_dir) => None,
        Err(_) => return None,
    };
    lease::lapsed(server_dir).then_some(lock)
}

/// Whether `dir` was last changed longer ago than a lease's time.
fn made_long_ago(dir: &Path) -> bool {
    fs::metadata(dir)
        .and_then(|m| m.modified())
        .is_ok_and(|at| at.elapsed().is_ok_and(|age| age > lease::LEASE_TIME))
}

/// Makes the sandbox root if missing (for the server's user alone) and
/// refuses one, or a saved store in it, that another user owns or may write:
/// everything the server trusts about the root (locks, leases, sealed
/// records, the seal key) assumes nobody else can plant or swap entries.
pub fn make_private_root(root: &Path) -> Result<(), SandboxError> {
    super::private_files::create_private_dir(root).map_err(|source| SandboxError::Root {
        path: root.to_owned(),
        source,
    })?;
    for dir in [root.to_owned(), root.join("saved")] {
        if let Some(why) = shared_with_others(&dir) {
            return Err(SandboxError::SharedRoot { path: dir, why });
        }
    }
    Ok(())
}

/// Why `dir` is not the server user's alone (another owner, or writable
/// by group or others), if it exists and is not.
#[cfg(unix)]
fn shared_with_others(dir: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::metadata(dir).ok()?;
    let mode = meta.mode() & 0o7777;
    if meta.uid() != rustix::process::geteuid().as_raw() {
        Some(format!(
            "belongs to another user (uid {}, the server runs as {})",
            meta.uid(),
            rustix::process::geteuid().as_raw()
        ))
    } else if mode & 0o022 != 0 {
        Some(format!("can be written by other users (mode {mode:o})"))
    } else {
        None
    }
}

/// Elsewhere (Windows) a directory's access is its ACL's, which the user's
/// profile directory (the default root) keeps to its user.
#[cfg(not(unix))]
fn shared_with_others(_dir: &Path) -> Option<String> {
    None
}

fn random_name() -> String {
    let n: u64 = rand::rng().random();
    format!("{n:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leftovers_of_a_dead_server_are_removed_and_live_ones_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let live = SandboxRoot::open(tmp.path(), None).unwrap();
        let live_sandbox = live.create_sandbox_dir().unwrap();

        // A dead server: its directory exists but nobody holds the lock.
        let dead = tmp.path().join("server-dead");
        fs::create_dir_all(dead.join("sb-1")).unwrap();
        File::create(dead.join(LOCK_FILE)).unwrap();
        fs::write(dead.join("sb-1/data.txt"), "x").unwrap();
        // Something that is not ours.
        fs::create_dir(tmp.path().join("unrelated")).unwrap();

        let second = SandboxRoot::open(tmp.path(), None).unwrap();
        assert!(!dead.exists(), "a dead server's directory is removed");
        assert!(live_sandbox.exists(), "a live server's sandboxes are kept");
        assert!(tmp.path().join("unrelated").exists());
        drop(second);
        drop(live);
        assert!(
            !live_sandbox.exists(),
            "a clean shutdown removes its sandboxes"
        );
    }

    /// A server directory `server-<name>` whose lock is held (by the file
    /// returned) and whose lease names `pid`.
    fn server_dir_held(root: &Path, name: &str, pid: u32) -> (PathBuf, File) {
        let dir = root.join(format!("{SERVER_PREFIX}{name}"));
        fs::create_dir_all(dir.join("sb-1")).unwrap();
        let held = File::create(dir.join(LOCK_FILE)).unwrap();
        held.lock().unwrap();
        drop(Lease::take(&dir).unwrap());
        let lease = dir.join(lease::LEASE_FILE);
        let mut record: lease::LeaseRecord =
            serde_json::from_slice(&fs::read(&lease).unwrap()).unwrap();
        record.pid = pid;
        record.started = lease::start_of(pid);
        fs::write(&lease, serde_json::to_vec(&record).unwrap()).unwrap();
        (dir, held)
    }

    /// A killed server whose leader thread is a zombie (its lease lapses at
    /// once) while another of its threads still holds its files: a starting
    /// server waits for the lock, and takes the directory in.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_lock_of_a_server_that_exited_is_waited_for_while_it_lets_go() {
        let tmp = tempfile::tempdir().unwrap();
        let mut exited = lease::zombie();
        let (dying, still_held) = server_dir_held(tmp.path(), "dying", exited.id());
        assert!(lease::holder_exiting_here(&dying));
        let letting_go = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(still_held);
        });
        let started = Instant::now();
        let probe = File::open(dying.join(LOCK_FILE)).unwrap();
        assert!(probe.try_lock().is_err(), "still held when the start looks");
        drop(probe);
        let next = SandboxRoot::open(tmp.path(), None).unwrap();
        assert!(!dying.exists(), "taken in once its lock was let go");
        assert!(started.elapsed() >= Duration::from_millis(250));
        letting_go.join().unwrap();
        exited.wait().unwrap();
        drop(next);
    }

    /// The lock of a live holder is not waited for at all; an exiting
    /// holder's only for the grace.
    #[cfg(target_os = "linux")]
    #[test]
    fn only_an_exiting_holder_is_waited_for_and_only_for_the_grace() {
        let tmp = tempfile::tempdir().unwrap();
        let (live, _held) = server_dir_held(tmp.path(), "live", std::process::id());
        let lock = File::open(live.join(LOCK_FILE)).unwrap();
        let started = Instant::now();
        assert!(!lock_unless_held(&lock, &live, Duration::from_secs(5)));
        assert!(started.elapsed() < Duration::from_secs(1), "no wait");

        let mut exited = lease::zombie();
        let (stuck, _held) = server_dir_held(tmp.path(), "stuck", exited.id());
        let lock = File::open(stuck.join(LOCK_FILE)).unwrap();
        let started = Instant::now();
        assert!(!lock_unless_held(&lock, &stuck, Duration::from_millis(200)));
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(200) && waited < Duration::from_secs(2),
            "{waited:?}"
        );
        exited.wait().unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_root_or_saved_store_others_may_write_or_own_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let made = tmp.path().join("a/new/root");
        SandboxRoot::open(&made, None).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(
            mode(&made),
            0o700,
            "a root it makes is the server user's alone"
        );

        let shared = tmp.path().join("shared");
        fs::create_dir(&shared).unwrap();
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
        let Err(refused) = SandboxRoot::open(&shared, None) else {
            panic!("a shared root is refused")
        };
        assert!(
            matches!(refused, SandboxError::SharedRoot { .. }),
            "{refused}"
        );
        assert!(refused.to_string().contains("mode 1777"), "{refused}");
        assert_eq!(
            fs::read_dir(&shared).unwrap().count(),
            0,
            "nothing made there"
        );

        let planted = tmp.path().join("planted");
        fs::create_dir_all(planted.join("saved")).unwrap();
        fs::set_permissions(&planted, fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(planted.join("saved"), fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(
            SandboxRoot::open(&planted, None),
            Err(SandboxError::SharedRoot { .. })
        ));

        // Owned by another user (only root can make one here).
        if rustix::process::geteuid().is_root() {
            let foreign = tmp.path().join("foreign");
            fs::create_dir(&foreign).unwrap();
            std::os::unix::fs::chown(&foreign, Some(54_321), None).unwrap();
            let Err(refused) = SandboxRoot::open(&foreign, None) else {
                panic!("a foreign root is refused")
            };
            assert!(refused.to_string().contains("uid 54321"), "{refused}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_lock_that_is_a_fifo_or_a_link_is_not_waited_on_or_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let fifo_server = tmp.path().join("server-fifo");
        fs::create_dir(&fifo_server).unwrap();
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            fifo_server.join(LOCK_FILE),
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .unwrap();
        let live = SandboxRoot::open(tmp.path(), None).unwrap();
        let linked = tmp.path().join("server-linked");
        fs::create_dir(&linked).unwrap();
        std::os::unix::fs::symlink(live.path().join(LOCK_FILE), linked.join(LOCK_FILE)).unwrap();
        let (opened, done) = std::sync::mpsc::channel();
        let root = tmp.path().to_owned();
        std::thread::spawn(move || {
            let _ = opened.send(SandboxRoot::open(&root, None).map(|_| ()));
        });
        let result = done
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("opening the root does not block on a FIFO lock");
        assert!(result.is_ok());
        assert!(
            live.path().join(LOCK_FILE).exists(),
            "the live server keeps its lock"
        );
    }

    #[test]
    fn a_directory_without_a_lock_is_left_while_young_and_removed_once_old() {
        let tmp = tempfile::tempdir().unwrap();
        // A server starting now: its directory made, its lock not yet.
        let starting = tmp.path().join("server-starting");
        fs::create_dir(&starting).unwrap();
        let first = SandboxRoot::open(tmp.path(), None).unwrap();
        assert!(
            starting.exists(),
            "a server starting now keeps its directory"
        );
        drop(first);
        // One that died while creating its directory, long ago.
        let long_ago = std::time::SystemTime::now() - lease::LEASE_TIME * 2;
        File::open(&starting)
            .unwrap()
            .set_modified(long_ago)
            .unwrap();
        let second = SandboxRoot::open(tmp.path(), None).unwrap();
        assert!(!starting.exists(), "a dead server's directory is removed");
        drop(second);
    }

    #[test]
    fn removing_a_sandbox_does_not_follow_links_out_of_it() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("keep.txt"), "keep").unwrap();
        let root = SandboxRoot::open(&tmp.path().join("root"), None).unwrap();
        let sandbox = root.create_sandbox_dir().unwrap();
        std::os::unix::fs::symlink(&outside, sandbox.join("link")).unwrap();
        root.remove_sandbox_dir(&sandbox);
        assert!(!sandbox.exists());
        assert!(outside.join("keep.txt").exists());
        root.remove_sandbox_dir(&outside);
        assert!(
            outside.exists(),
            "only this server's sandbox directories are removed"
        );
    }
}
