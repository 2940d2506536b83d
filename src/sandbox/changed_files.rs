//! [`changed_since`]: the files of a sandbox directory written since a
//! moment (an execution's start), found by a bounded walk, so a result can
//! point at the files the code made (saved figures, written data, spilled
//! output) instead of carrying them.
//!
//! Files whose time lies in the future (set by the code) and files whose
//! names no path can carry (control characters, backslashes) are not
//! reported. The walk skips what is not the code's work product: the installed
//! packages (`/.local`) and bytecode caches (`__pycache__`). It never follows
//! symbolic links, visits at most [`MAX_VISITED`] entries and goes
//! [`MAX_DEPTH`] levels deep, so a sandbox with a huge tree costs a bounded
//! time and some changes may then go unreported.

use std::time::{Duration, SystemTime};

use cap_std::fs::Dir;

use super::types::ChangedFile;

/// Most directory entries one walk looks at.
pub const MAX_VISITED: usize = 5_000;
/// Deepest level the walk goes to.
pub const MAX_DEPTH: usize = 16;
/// Most files reported.
pub const MAX_REPORTED: usize = 20;

/// Now, on the clock file times are taken from: the coarse real-time clock
/// (it ticks every few milliseconds, and a file written just after a
/// precise "now" could carry an earlier time). A file written in the same
/// tick, just before, counts as written since.
pub fn file_clock_now() -> SystemTime {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse);
    let since_epoch = Duration::new(
        u64::try_from(now.tv_sec).unwrap_or(0),
        u32::try_from(now.tv_nsec).unwrap_or(0),
    );
    SystemTime::UNIX_EPOCH + since_epoch
}

/// How far past the walk's own time a file's time may be (clocks differ a
/// little); a time further on was set by the code, not by a write.
const FUTURE_SLACK: Duration = Duration::from_secs(1);

/// Whether a file of this name can be named in a path the file tools and
/// resource URIs take (no control characters, no backslash).
fn addressable(name: &str) -> bool {
    !name.chars().any(|c| c.is_control() || c == '\\')
}

/// Directories whose content is not reported.
fn skipped(parent: &str, name: &str) -> bool {
    name == "__pycache__" || (parent.is_empty() && name == ".local")
}

/// Files under `dir` modified at or after `since` (a [`file_clock_now`]), newest first, at most
/// [`MAX_REPORTED`]; with the number of such files left out.
pub fn changed_since(dir: &Dir, since: SystemTime) -> (Vec<ChangedFile>, usize) {
    let mut walk = Walk {
        since,
        until: SystemTime::now() + FUTURE_SLACK,
        visited: 0,
        found: Vec::new(),
    };
    walk.directory(dir, "", 0);
    let mut found = walk.found;
    found.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.path.cmp(&b.0.path)));
    let more = found.len().saturating_sub(MAX_REPORTED);
    found.truncate(MAX_REPORTED);
    (found.into_iter().map(|(file, _)| file).collect(), more)
}

struct Walk {
    since: SystemTime,
    /// Times past this were set by the code (`os.utime`), not by a write.
    until: SystemTime,
    visited: usize,
    found: Vec<(ChangedFile, SystemTime)>,
}

impl Walk {
    /// Looks through `dir`, whose guest path is `prefix` ("" for the root).
    fn directory(&mut self, dir: &Dir, prefix: &str, depth: usize) {
        let Ok(entries) = dir.entries() else { return };
        for entry in entries.flatten() {
            if self.visited >= MAX_VISITED {
                return;
            }
            self.visited += 1;
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(meta) = entry.metadata() else { continue };
            let path = format!("{prefix}/{name}");
            if meta.is_dir() {
                if depth + 1 < MAX_DEPTH
                    && !skipped(prefix, &name)
                    && let Ok(child) = entry.open_dir()
                {
                    self.directory(&child, &path, depth + 1);
                }
            } else if meta.is_file()
                && addressable(&name)
                && let Ok(modified) = meta.modified()
                && (self.since..=self.until).contains(&modified.into_std())
            {
                let file = ChangedFile {
                    path,
                    size: meta.len(),
                };
                self.found.push((file, modified.into_std()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cap_std::ambient_authority;

    #[test]
    fn only_files_written_since_the_start_are_reported() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("old.txt"), "old").unwrap();
        let old = SystemTime::now() - Duration::from_secs(60);
        let file = std::fs::File::options()
            .write(true)
            .open(tmp.path().join("old.txt"))
            .unwrap();
        file.set_modified(old).unwrap();
        let start = file_clock_now();
        std::fs::create_dir_all(tmp.path().join("out/deep")).unwrap();
        std::fs::write(tmp.path().join("out/deep/new.csv"), "a,b\n").unwrap();
        std::fs::create_dir_all(tmp.path().join(".local/lib")).unwrap();
        std::fs::write(tmp.path().join(".local/lib/pkg.py"), "").unwrap();
        std::fs::create_dir_all(tmp.path().join("__pycache__")).unwrap();
        std::fs::write(tmp.path().join("__pycache__/x.pyc"), "").unwrap();
        std::os::unix::fs::symlink("/etc", tmp.path().join("etc")).unwrap();
        std::fs::write(tmp.path().join("forged\nFiles written: x"), "").unwrap();
        let future = std::fs::File::create(tmp.path().join("future.txt")).unwrap();
        future
            .set_modified(SystemTime::now() + Duration::from_secs(3600))
            .unwrap();
        let dir = Dir::open_ambient_dir(tmp.path(), ambient_authority()).unwrap();
        let (files, more) = changed_since(&dir, start);
        assert_eq!(
            files,
            vec![ChangedFile {
                path: "/out/deep/new.csv".into(),
                size: 4
            }]
        );
        assert_eq!(more, 0);
    }

    #[test]
    fn a_crowd_of_new_files_is_reported_in_part_and_counted() {
        let tmp = tempfile::tempdir().unwrap();
        let start = file_clock_now();
        for i in 0..(MAX_REPORTED + 7) {
            std::fs::write(tmp.path().join(format!("f{i}")), "x").unwrap();
        }
        let dir = Dir::open_ambient_dir(tmp.path(), ambient_authority()).unwrap();
        let (files, more) = changed_since(&dir, start);
        assert_eq!(files.len(), MAX_REPORTED);
        assert_eq!(more, 7);
    }
}
