//! What this host says of its processes, for leases: whether a process
//! runs, has exited unreaped, and when it started, and which host, boot and
//! namespaces this process is in. Linux answers from `/proc`; elsewhere the
//! answers that need it are "unknown", and a lease then lapses with its time.

use std::fs;
use std::sync::LazyLock;

/// Whether the process `pid` of this host still runs. One that has exited
/// but that its parent has not reaped yet (a zombie: a server killed by a
/// client that has not waited for it) runs no more: it holds no lock and
/// renews nothing.
pub(super) fn process_exists(pid: u32) -> bool {
    let Some(id) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return false;
    };
    let signalled = match rustix::process::test_kill_process(id) {
        Ok(()) => true,
        Err(e) => e != rustix::io::Errno::SRCH,
    };
    signalled && !exited_unreaped(pid)
}

/// Whether `pid` is a zombie, from `/proc/<pid>/stat` (where there is no
/// `/proc`, as on macOS, a zombie counts as running until it is reaped, and
/// its lease lapses with its time).
pub(super) fn exited_unreaped(pid: u32) -> bool {
    process_stat(pid).is_some_and(|stat| stat.state == "Z" || stat.state == "X")
}

/// What `/proc/<pid>/stat` says of a process.
pub(super) struct ProcessStat {
    /// Its state (`R`, `S`, `Z`...).
    pub(super) state: String,
    /// When it started, in clock ticks after boot.
    pub(super) started: u64,
}

/// `/proc/<pid>/stat` read; `None` where the process or `/proc` is missing,
/// or where the `/proc` mounted is another PID namespace's (its ids are not
/// this process's).
pub(super) fn process_stat(pid: u32) -> Option<ProcessStat> {
    if !proc_is_ours() {
        return None;
    }
    parse_stat(&fs::read(format!("/proc/{pid}/stat")).ok()?)
}

/// "pid (command) state ...": the command may hold any bytes, spaces and
/// parentheses too; the state is the third field and the start time the
/// twenty-second.
fn parse_stat(stat: &[u8]) -> Option<ProcessStat> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.to_owned();
    let started = fields.nth(18)?.parse().ok()?;
    Some(ProcessStat { state, started })
}

/// Whether `/proc` shows this process under its own id (not so when the
/// `/proc` mounted belongs to another PID namespace).
fn proc_is_ours() -> bool {
    static OURS: LazyLock<bool> = LazyLock::new(|| {
        fs::read("/proc/self/stat").ok().is_some_and(|stat| {
            let id = stat.split(|&b| b == b' ').next().unwrap_or_default();
            id == std::process::id().to_string().as_bytes()
        })
    });
    *OURS
}

/// When `pid` started (clock ticks after boot), or 0 where unknown.
pub(crate) fn start_of(pid: u32) -> u64 {
    process_stat(pid).map_or(0, |stat| stat.started)
}

/// A child process that has exited and is not reaped yet (a zombie), for
/// tests of what a lease naming one means.
#[cfg(all(test, target_os = "linux"))]
pub(crate) fn zombie() -> std::process::Child {
    use std::time::{Duration, Instant};

    let child = std::process::Command::new("true").spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !exited_unreaped(child.id()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    child
}

/// This host's name.
pub(super) fn host_name() -> String {
    static NAME: LazyLock<String> = LazyLock::new(|| {
        rustix::system::uname()
            .nodename()
            .to_string_lossy()
            .into_owned()
    });
    NAME.clone()
}

/// This process's PID namespace, or empty where there is none to read.
pub(super) fn pid_namespace() -> String {
    static NAMESPACE: LazyLock<String> = LazyLock::new(|| own_namespace("pid"));
    NAMESPACE.clone()
}

/// This process's time namespace, or empty where there is none to read.
pub(super) fn time_namespace() -> String {
    static NAMESPACE: LazyLock<String> = LazyLock::new(|| own_namespace("time"));
    NAMESPACE.clone()
}

/// What `/proc/self/ns/<kind>` names (`pid:[4026531836]`), or empty.
fn own_namespace(kind: &str) -> String {
    fs::read_link(format!("/proc/self/ns/{kind}"))
        .map(|target| target.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// When this process started (clock ticks after boot), or 0 where unknown.
pub(super) fn own_start() -> u64 {
    static STARTED: LazyLock<u64> = LazyLock::new(|| start_of(std::process::id()));
    *STARTED
}

/// This boot's id (empty where the system does not say it).
pub(super) fn boot_id() -> String {
    static BOOT: LazyLock<String> = LazyLock::new(|| {
        fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    });
    BOOT.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_is_read_whatever_the_command_holds() {
        let rest = " S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 4242 20 21";
        for command in [
            &b"a) b (c) 1 2 3"[..],
            b") ) ) )",
            b"\xff\xfe bad)",
            b"x\ny)z",
        ] {
            let mut line = b"77 (".to_vec();
            line.extend_from_slice(command);
            line.extend_from_slice(b")");
            line.extend_from_slice(rest.as_bytes());
            let stat = parse_stat(&line).unwrap();
            assert_eq!((stat.state.as_str(), stat.started), ("S", 4242));
        }
        assert!(parse_stat(b"77 (cut) S 1 2").is_none());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_process_that_exited_and_was_not_reaped_is_gone() {
        let mut child = zombie();
        let pid = child.id();
        assert!(!process_exists(pid), "a zombie runs no more");
        child.wait().unwrap();
        assert!(!process_exists(pid));
        assert!(process_exists(std::process::id()));
    }
}
