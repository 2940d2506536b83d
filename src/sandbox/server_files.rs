//! [`ServerFiles`]: the files the server writes into a sandbox on its own
//! account (spilled output, `exec-N-stdout.txt` and `exec-N-stderr.txt`, and
//! saved figures, `exec-N-figure-K.png`, all in `/.outputs/`). They count
//! against the sandbox's disk quota like its own files, but they must never
//! make a write of the sandbox's own fail: when one does not fit, the oldest
//! of them give way first (deleted, oldest modification first), and only
//! then is the write refused. Output still being spilled gives way last, and
//! only to the sandbox's own writes: it is cut to nothing and stops there.
//!
//! Only files directly in `/.outputs/` whose names the server makes count as
//! the server's; anything else there (or a `/.outputs` that is not a
//! directory) is the sandbox's own and is never touched.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::SystemTime;

use cap_fs_ext::DirExt;
use cap_std::fs::{Dir, File};

use super::disk_usage::held_bytes;
pub use super::server_file_names::{OUTPUT_DIR, is_server_name};
use super::types::ServerFilesUsage;

/// Most entries of `/.outputs/` looked at to find what may give way.
const MAX_SCANNED: usize = 10_000;

/// A file the server is writing now (output being spilled): what it is
/// called, and its handle, so that it can give way while still open.
#[derive(Debug)]
pub struct LiveFile {
    name: String,
    file: File,
    gave_way: AtomicBool,
}

impl LiveFile {
    /// The open file, for its writer.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Whether it gave way to the sandbox's own files (its writer stops).
    pub fn gave_way(&self) -> bool {
        self.gave_way.load(Ordering::SeqCst)
    }
}

/// What server-made files gave way so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GivenWay {
    /// Files deleted (or cut) to make room.
    pub files: u64,
    /// Bytes they held.
    pub bytes: u64,
}

/// The server-made files of one sandbox: those being written, and the
/// count of those that gave way.
#[derive(Debug, Default)]
pub struct ServerFiles {
    live: Mutex<Vec<Weak<LiveFile>>>,
    given_files: AtomicU64,
    given_bytes: AtomicU64,
}

/// Who a write that needs room is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Writer {
    /// The sandbox's own code or the file tools: everything the server
    /// wrote may give way to it.
    Sandbox,
    /// The server itself: only finished server files give way to it.
    Server,
}

impl ServerFiles {
    /// Registers `file`, just created as `/.outputs/<name>`, as being
    /// written by the server until the returned handle is dropped.
    pub fn live(&self, name: &str, file: File) -> Arc<LiveFile> {
        let live = Arc::new(LiveFile {
            name: name.to_owned(),
            file,
            gave_way: AtomicBool::new(false),
        });
        let mut all = self.live.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|w| w.strong_count() > 0);
        all.push(Arc::downgrade(&live));
        live
    }

    /// What gave way so far.
    pub fn given_way(&self) -> GivenWay {
        GivenWay {
            files: self.given_files.load(Ordering::Relaxed),
            bytes: self.given_bytes.load(Ordering::Relaxed),
        }
    }

    /// The server files in `dir` (a sandbox's root) now, and what gave way
    /// so far.
    pub fn usage(&self, dir: &Dir) -> ServerFilesUsage {
        let given = self.given_way();
        let mut usage = ServerFilesUsage {
            given_way_files: given.files,
            given_way_bytes: given.bytes,
            ..ServerFilesUsage::default()
        };
        if let Ok(outputs) = dir.open_dir_nofollow(OUTPUT_DIR) {
            for (_, held) in finished(&outputs, &[]) {
                usage.files += 1;
                usage.bytes += held;
            }
        }
        usage
    }

    /// Deletes server files of `dir` (a sandbox's root), oldest first, until
    /// `bytes` bytes and `entries` entries are freed, when those that may
    /// give way to `writer` free that much (else none goes, since the write
    /// would fail anyway); returns whether any went.
    pub fn give_way(&self, dir: &Dir, writer: Writer, bytes: u64, entries: u64) -> bool {
        let live: Vec<Arc<LiveFile>> = {
            let all = self.live.lock().unwrap_or_else(|p| p.into_inner());
            all.iter().filter_map(Weak::upgrade).collect()
        };
        let Ok(outputs) = dir.open_dir_nofollow(OUTPUT_DIR) else {
            return false;
        };
        let mut candidates: Vec<(Candidate<'_>, u64)> = finished(&outputs, &live)
            .into_iter()
            .map(|(name, held)| (Candidate::Finished(name), held))
            .collect();
        if writer == Writer::Sandbox {
            candidates.extend(live.iter().filter(|l| !l.gave_way()).map(|l| {
                (
                    Candidate::Live(l),
                    l.file.metadata().map_or(0, |m| held_bytes(&m)),
                )
            }));
        }
        let could_free: u64 = candidates.iter().map(|(_, held)| held).sum();
        if could_free < bytes || (candidates.len() as u64) < entries {
            return false;
        }
        let mut freed = GivenWay::default();
        for (candidate, held) in candidates {
            if freed.bytes >= bytes && freed.files >= entries {
                break;
            }
            let gone = match candidate {
                Candidate::Finished(name) => outputs.remove_file(&name).is_ok(),
                Candidate::Live(file) => cut(&outputs, file),
            };
            if gone {
                freed.files += 1;
                freed.bytes += held;
            }
        }
        if freed.files > 0 {
            self.given_files.fetch_add(freed.files, Ordering::Relaxed);
            self.given_bytes.fetch_add(freed.bytes, Ordering::Relaxed);
            tracing::debug!(
                files = freed.files,
                bytes = freed.bytes,
                "server-made files gave way to a write"
            );
        }
        freed.files > 0
    }
}

/// A server file that may give way.
enum Candidate<'a> {
    /// Finished, by its name in `/.outputs/`.
    Finished(String),
    /// Being written.
    Live(&'a LiveFile),
}

/// The server files in `outputs` but those in `live` (being written),
/// oldest first, with the bytes each holds.
fn finished(outputs: &Dir, live: &[Arc<LiveFile>]) -> Vec<(String, u64)> {
    let Ok(entries) = outputs.entries() else {
        return Vec::new();
    };
    let mut found: Vec<(SystemTime, String, u64)> = Vec::new();
    for entry in entries.take(MAX_SCANNED).flatten() {
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if !is_server_name(&name) || live.iter().any(|l| l.name == name) {
            continue;
        }
        // The entry itself, never what a link names.
        let Ok(meta) = entry.metadata() else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        let modified = meta
            .modified()
            .map_or(SystemTime::UNIX_EPOCH, |m| m.into_std());
        found.push((modified, name, held_bytes(&meta)));
    }
    found.sort();
    found
        .into_iter()
        .map(|(_, name, held)| (name, held))
        .collect()
}

/// Cuts a file being written to nothing and removes its name; returns
/// whether it had not given way before.
fn cut(outputs: &Dir, file: &LiveFile) -> bool {
    if file.gave_way.swap(true, Ordering::SeqCst) {
        return false;
    }
    let _ = file.file.set_len(0);
    let _ = outputs.remove_file(&file.name);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use cap_std::ambient_authority;

    #[test]
    fn only_the_names_the_server_makes_are_its_own() {
        for name in [
            "exec-1-stdout.txt",
            "exec-12-stderr.txt",
            "exec-3-figure-2.png",
        ] {
            assert!(is_server_name(name), "{name}");
        }
        for name in [
            "exec--stdout.txt",
            "exec-1-stdout.txt.bak",
            "exec-x-stdout.txt",
            "exec-1-figure-.png",
            "results.csv",
            "exec-1-figure-2.png/",
        ] {
            assert!(!is_server_name(name), "{name}");
        }
    }

    #[test]
    fn the_oldest_server_files_give_way_and_the_sandboxs_own_never_do() {
        let tmp = tempfile::tempdir().unwrap();
        let outputs = tmp.path().join(OUTPUT_DIR);
        std::fs::create_dir(&outputs).unwrap();
        for (i, name) in [
            "exec-1-stdout.txt",
            "exec-2-stdout.txt",
            "exec-3-figure-1.png",
        ]
        .iter()
        .enumerate()
        {
            let path = outputs.join(name);
            std::fs::write(&path, vec![b'o'; 10_000]).unwrap();
            let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1000 + i as u64);
            std::fs::File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_modified(at)
                .unwrap();
        }
        std::fs::write(outputs.join("mine.csv"), b"own").unwrap();
        std::os::unix::fs::symlink("../precious", outputs.join("exec-0-stdout.txt")).unwrap();
        std::fs::write(tmp.path().join("precious"), b"keep").unwrap();
        let dir = Dir::open_ambient_dir(tmp.path(), ambient_authority()).unwrap();
        let files = ServerFiles::default();

        assert!(files.give_way(&dir, Writer::Sandbox, 1, 0));
        let left: Vec<String> = std::fs::read_dir(&outputs)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(!left.contains(&"exec-1-stdout.txt".to_owned()), "{left:?}");
        assert!(left.contains(&"exec-2-stdout.txt".to_owned()), "{left:?}");
        assert_eq!(files.given_way().files, 1);
        assert!(files.given_way().bytes >= 10_000);

        assert!(
            !files.give_way(&dir, Writer::Sandbox, 1 << 30, 0),
            "nothing goes for a write that would not fit anyway"
        );
        assert!(outputs.join("exec-2-stdout.txt").exists());
        assert!(files.give_way(&dir, Writer::Sandbox, 20_000, 0));
        assert!(!files.give_way(&dir, Writer::Sandbox, 1, 0), "none left");
        assert_eq!(std::fs::read(outputs.join("mine.csv")).unwrap(), b"own");
        assert_eq!(std::fs::read(tmp.path().join("precious")).unwrap(), b"keep");
        assert!(
            outputs.join("exec-0-stdout.txt").symlink_metadata().is_ok(),
            "a link is not a file the server made"
        );
    }

    #[test]
    fn output_being_written_gives_way_last_and_only_to_the_sandbox() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join(OUTPUT_DIR)).unwrap();
        let dir = Dir::open_ambient_dir(tmp.path(), ambient_authority()).unwrap();
        let file = dir
            .create(format!("{OUTPUT_DIR}/exec-5-stdout.txt"))
            .unwrap();
        use std::io::Write;
        (&file).write_all(&vec![b'x'; 50_000]).unwrap();
        let files = ServerFiles::default();
        let live = files.live("exec-5-stdout.txt", file);
        assert!(!files.give_way(&dir, Writer::Server, 1, 0));
        assert!(!live.gave_way());
        assert!(files.give_way(&dir, Writer::Sandbox, 1, 0));
        assert!(live.gave_way());
        assert_eq!(live.file().metadata().unwrap().len(), 0);
        assert!(
            !tmp.path()
                .join(OUTPUT_DIR)
                .join("exec-5-stdout.txt")
                .exists()
        );
    }

    #[test]
    fn a_link_in_place_of_the_outputs_directory_is_never_followed() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("mine")).unwrap();
        std::fs::write(tmp.path().join("mine/exec-1-stdout.txt"), b"own").unwrap();
        std::os::unix::fs::symlink("mine", tmp.path().join(OUTPUT_DIR)).unwrap();
        let dir = Dir::open_ambient_dir(tmp.path(), ambient_authority()).unwrap();
        assert!(!ServerFiles::default().give_way(&dir, Writer::Sandbox, 1, 0));
        assert!(tmp.path().join("mine/exec-1-stdout.txt").exists());
    }
}
