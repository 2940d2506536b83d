//! [`Lease`]: a server's claim on its directory under a sandbox root that
//! other servers sharing the root (replicas, on one machine or on several
//! over a shared file system) can read: a file naming its host, process and
//! boot, and until when the claim holds. The server renews it every few
//! seconds; another server takes in a dead server's sandboxes only once its
//! lease has lapsed, or at once when the lease names a process of the same
//! host, boot and PID namespace that is gone (a process started since under
//! the same id is another: the lease names its holder's start time too).
//!
//! Fencing: a server that cannot renew its lease in time must assume
//! another replica will take its sandboxes. Guests check [`still_held`] at
//! every epoch tick and stop when it is false, and the renewal thread stops
//! the whole process once the lease has lapsed, so two replicas never run
//! the same sandbox at once. Wall clocks of the hosts sharing a root are
//! assumed to agree within [`CLOCK_SLACK`].

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::private_files::read_regular;
#[cfg(test)]
pub(crate) use processes::start_of;
#[cfg(all(test, target_os = "linux"))]
pub(crate) use processes::zombie;
use processes::{
    boot_id, exited_unreaped, host_name, own_start, pid_namespace, process_exists, process_stat,
    time_namespace,
};

mod processes;

/// The lease file in a server directory.
pub const LEASE_FILE: &str = "lease";
/// How long a lease holds after each renewal.
pub const LEASE_TIME: Duration = Duration::from_secs(30);
/// How often a lease is renewed.
const RENEW_EVERY: Duration = Duration::from_secs(5);
/// How far the wall clocks of hosts sharing a root may disagree.
pub const CLOCK_SLACK: Duration = Duration::from_secs(5);

/// What a lease file says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// The holder's host name.
    pub host: String,
    /// The holder's boot (`/proc/sys/kernel/random/boot_id` on Linux).
    pub boot: String,
    /// The holder's process id.
    pub pid: u32,
    /// The holder's PID namespace (the target of `/proc/self/ns/pid` on
    /// Linux): its process id means something only to a server in the same
    /// one. Empty where there is none, and in leases of older servers.
    #[serde(default)]
    pub pid_namespace: String,
    /// When the holder started, in clock ticks after boot (`/proc/<pid>/stat`
    /// on Linux), so that a process given its id since is not taken for it.
    /// 0 where it is not known, and in leases of older servers.
    #[serde(default)]
    pub started: u64,
    /// The holder's time namespace (`/proc/self/ns/time`), which shifts the
    /// start times its processes read: a start time is compared only by a
    /// server in the same one.
    #[serde(default)]
    pub time_namespace: String,
    /// Until when the claim holds (milliseconds since the Unix epoch).
    pub expires_at_ms: u64,
}

/// When this process's lease stops holding (an [`Instant`] as nanoseconds
/// since [`START`]; `u64::MAX` while no lease is held, so nothing is fenced).
static VALID_UNTIL: AtomicU64 = AtomicU64::new(u64::MAX);
static START: LazyLock<Instant> = LazyLock::new(Instant::now);

/// Whether this process may still run sandboxes: its lease (if it holds
/// one) has been renewed in time.
pub fn still_held() -> bool {
    let until = VALID_UNTIL.load(Ordering::Relaxed);
    until == u64::MAX || (START.elapsed().as_nanos() as u64) < until
}

/// Why a guest was stopped: this process's lease lapsed (see [`still_held`]).
#[derive(Debug, thiserror::Error)]
#[error(
    "this server could not renew its lease on its sandbox directory in time, so another replica may take this sandbox over: the execution was stopped; call the sandbox again (it comes back on the replica that takes it)"
)]
pub struct LeaseLost;

/// A lease held by this process on a server directory, renewed until dropped.
#[derive(Debug)]
pub struct Lease {
    path: PathBuf,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl Lease {
    /// Claims `server_dir` now and renews the claim on a thread of its own.
    pub fn take(server_dir: &Path) -> std::io::Result<Self> {
        let path = server_dir.join(LEASE_FILE);
        renew(&path)?;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (thread_path, thread_stop) = (path.clone(), stop.clone());
        std::thread::Builder::new()
            .name("lease".into())
            .spawn(move || keep_renewing(&thread_path, &thread_stop))?;
        Ok(Self { path, stop })
    }

    /// The lease file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        VALID_UNTIL.store(u64::MAX, Ordering::Relaxed);
    }
}

/// Writes the lease anew, valid for [`LEASE_TIME`] from now.
fn renew(path: &Path) -> std::io::Result<()> {
    let renewed_at = START.elapsed();
    let record = LeaseRecord {
        host: host_name(),
        boot: boot_id(),
        pid: std::process::id(),
        pid_namespace: pid_namespace(),
        started: own_start(),
        time_namespace: time_namespace(),
        expires_at_ms: unix_ms().saturating_add(LEASE_TIME.as_millis() as u64),
    };
    let temp = path.with_extension("new");
    fs::write(&temp, serde_json::to_vec(&record)?)?;
    fs::rename(&temp, path)?;
    // Held here a little less long than others will think: they wait for
    // the expiry plus the clocks' slack.
    let until = renewed_at + LEASE_TIME.saturating_sub(CLOCK_SLACK);
    VALID_UNTIL.store(until.as_nanos() as u64, Ordering::Relaxed);
    Ok(())
}

/// Renews the lease every [`RENEW_EVERY`] until `stop`; a process that
/// cannot renew it before it lapses stops, so that another replica may take
/// its sandboxes without two running them.
fn keep_renewing(path: &Path, stop: &std::sync::atomic::AtomicBool) {
    loop {
        std::thread::sleep(RENEW_EVERY);
        if stop.load(Ordering::Relaxed) {
            return;
        }
        match renew(path) {
            Ok(()) => {}
            Err(e) => {
                tracing::error!(path = %path.display(), error = %e, "could not renew this server's lease on its sandbox directory");
                if !still_held() {
                    tracing::error!(
                        "this server's lease has lapsed: another server may take its sandboxes now, so it stops"
                    );
                    std::process::exit(75);
                }
            }
        }
    }
}

/// Whether the lease in `server_dir` lets another server take it over: it
/// is missing, unreadable, lapsed (past its expiry and the clocks' slack),
/// or names a process of this host, boot and PID namespace that is gone.
pub fn lapsed(server_dir: &Path) -> bool {
    let Ok(bytes) = read_regular(&server_dir.join(LEASE_FILE), 4096) else {
        return true;
    };
    let Ok(record) = serde_json::from_slice::<LeaseRecord>(&bytes) else {
        return true;
    };
    let now = unix_ms();
    let slack = CLOCK_SLACK.as_millis() as u64;
    // A lease is never renewed further ahead than its time: one that says
    // more was not written by a server, and holds nothing.
    let forged = record.expires_at_ms > now + LEASE_TIME.as_millis() as u64 + slack;
    let expired = now > record.expires_at_ms.saturating_add(slack);
    // Where its holder can be looked up, a vanished holder lapses at once; a
    // live holder renews well before expiry, so an expired lease naming a
    // live process (its id taken by another since) has lapsed too.
    let gone_here = record.names_a_process_here() && !record.holder_runs();
    forged || expired || gone_here
}

impl LeaseRecord {
    /// Whether the holder's process id can be looked up here: it is of this
    /// host, boot and PID namespace (a lease that does not say its namespace
    /// is taken to share this one).
    fn names_a_process_here(&self) -> bool {
        self.host == host_name()
            && self.boot == boot_id()
            && (self.pid_namespace.is_empty() || self.pid_namespace == pid_namespace())
    }

    /// Whether the process the lease names (its id, and its start time when
    /// the lease says it) runs here.
    fn holder_runs(&self) -> bool {
        process_exists(self.pid) && self.is_the_holder(self.pid)
    }

    /// Whether the process now under `pid` is the one that wrote the lease:
    /// it started when the lease says. Where start times cannot be compared
    /// (the lease or this system says nothing of them, or they were read in
    /// another time namespace) any process under the id is taken for it.
    fn is_the_holder(&self, pid: u32) -> bool {
        if self.started == 0 || self.time_namespace != time_namespace() {
            return true;
        }
        process_stat(pid).is_none_or(|stat| stat.started == self.started)
    }
}

/// Whether the lease in `server_dir` names a process of this host, boot and
/// PID namespace that has exited but is not reaped yet: its leader is a
/// zombie, and its other threads may still be closing its files (and
/// letting go of its lock). A process gone altogether holds nothing, and a
/// zombie that started at another time than the lease says is another
/// process that was given the id since.
pub fn holder_exiting_here(server_dir: &Path) -> bool {
    read_regular(&server_dir.join(LEASE_FILE), 4096)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<LeaseRecord>(&bytes).ok())
        .is_some_and(|record| {
            record.names_a_process_here()
                && exited_unreaped(record.pid)
                && record.is_the_holder(record.pid)
        })
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_lapsed_when_missing_expired_or_its_process_is_gone() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(lapsed(tmp.path()), "no lease: nobody holds it");
        let lease = Lease::take(tmp.path()).unwrap();
        assert!(!lapsed(tmp.path()), "this process holds it");
        assert!(still_held());
        let write = |record: &LeaseRecord| put(tmp.path(), record);
        let elsewhere = LeaseRecord {
            host: "another-host".into(),
            boot: "another-boot".into(),
            pid: 1,
            pid_namespace: String::new(),
            started: 0,
            time_namespace: String::new(),
            expires_at_ms: unix_ms() + 10_000,
        };
        write(&elsewhere);
        assert!(!lapsed(tmp.path()), "another host's live lease holds");
        write(&LeaseRecord {
            expires_at_ms: unix_ms() - CLOCK_SLACK.as_millis() as u64 - 1,
            ..elsewhere.clone()
        });
        assert!(lapsed(tmp.path()), "past its expiry and the slack");
        write(&LeaseRecord {
            host: host_name(),
            boot: boot_id(),
            pid: u32::MAX - 7,
            expires_at_ms: unix_ms() + 10_000,
            ..elsewhere.clone()
        });
        assert!(lapsed(tmp.path()), "a process of this host that is gone");
        write(&LeaseRecord {
            host: host_name(),
            boot: boot_id(),
            pid: 1,
            expires_at_ms: unix_ms() - CLOCK_SLACK.as_millis() as u64 - 1,
            ..elsewhere.clone()
        });
        assert!(
            lapsed(tmp.path()),
            "expired, though its process id now names a live process"
        );
        write(&LeaseRecord {
            expires_at_ms: unix_ms() + 3_600_000,
            ..elsewhere.clone()
        });
        assert!(lapsed(tmp.path()), "an expiry no server writes");
        fs::write(tmp.path().join(LEASE_FILE), b"not json").unwrap();
        assert!(lapsed(tmp.path()));
        drop(lease);
    }

    /// A lease as this process would write it, naming `pid`.
    fn naming(pid: u32) -> LeaseRecord {
        LeaseRecord {
            host: host_name(),
            boot: boot_id(),
            pid,
            pid_namespace: pid_namespace(),
            started: start_of(pid),
            time_namespace: time_namespace(),
            expires_at_ms: unix_ms() + 10_000,
        }
    }

    /// Puts `record` in `dir` as its lease.
    fn put(dir: &Path, record: &LeaseRecord) {
        fs::write(dir.join(LEASE_FILE), serde_json::to_vec(record).unwrap()).unwrap();
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_holder_is_its_id_in_its_namespace_and_its_start_time() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let me = naming(std::process::id());
        assert!(!me.pid_namespace.is_empty() && me.started > 0);
        put(dir, &me);
        assert!(!lapsed(dir), "this process holds it");
        let reused = LeaseRecord {
            started: me.started + 1,
            ..me.clone()
        };
        // (the lease, whether it has lapsed, why)
        let cases = [
            (
                reused.clone(),
                true,
                "the id names a process that started after the holder: the holder is gone",
            ),
            (
                LeaseRecord {
                    time_namespace: "time:[1]".into(),
                    ..reused
                },
                false,
                "a start time read in another time namespace is not compared",
            ),
            (
                LeaseRecord {
                    pid: u32::MAX - 7,
                    pid_namespace: "pid:[1]".into(),
                    ..me.clone()
                },
                false,
                "a holder in another PID namespace cannot be looked up here: its lease holds until it expires",
            ),
            (
                LeaseRecord {
                    pid: u32::MAX - 7,
                    ..me.clone()
                },
                true,
                "gone from this namespace",
            ),
        ];
        for (record, lapses, why) in cases {
            put(dir, &record);
            assert_eq!(lapsed(dir), lapses, "{why}");
        }
        // A lease written by an older server says neither.
        let older = |pid: u32| {
            let text = format!(
                r#"{{"host":{:?},"boot":{:?},"pid":{pid},"expires_at_ms":{}}}"#,
                me.host, me.boot, me.expires_at_ms
            );
            fs::write(dir.join(LEASE_FILE), text).unwrap();
            lapsed(dir)
        };
        assert!(!older(std::process::id()));
        assert!(older(u32::MAX - 7));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn only_the_holder_itself_exiting_is_waited_for() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let mut child = zombie();
        let exiting = naming(child.id());
        put(dir, &exiting);
        assert!(holder_exiting_here(dir));
        put(
            dir,
            &LeaseRecord {
                started: exiting.started.saturating_sub(1),
                ..exiting.clone()
            },
        );
        assert!(
            !holder_exiting_here(dir),
            "a zombie given the holder's id after it is not the holder"
        );
        put(
            dir,
            &LeaseRecord {
                pid_namespace: "pid:[1]".into(),
                ..exiting.clone()
            },
        );
        assert!(
            !holder_exiting_here(dir),
            "the id means another process in another namespace"
        );
        child.wait().unwrap();
    }
}
