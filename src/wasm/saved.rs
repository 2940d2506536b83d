//! [`SavedStore`]: local sandboxes kept across a restart of the server.
//!
//! When the server stops, each local sandbox is saved as one entry of
//! `<SANDBOX_ROOT>/saved/`: its directory (moved, not copied), its
//! interpreter's state (a [`StateImage`], for runtimes driven turn by turn)
//! and a `meta.json` saying whose it is, what runtime and server made it,
//! and the sha256 of the state. The entry's name is a hash of the sandbox's
//! id, so a client's id never becomes a host path; the state sits beside the
//! sandbox's files, where guest code cannot reach it.
//!
//! At the next start a call naming that id restores it, after checking the
//! state's hash, the server's version and the runtime; a stale or damaged
//! entry is refused with the reason and kept (`close_sandbox` deletes it).
//! Entries older than `SANDBOX_KEEP_SAVED_SECONDS` are deleted at start, and
//! the oldest go first when all of them would take more than
//! `SANDBOX_SAVED_MAX_MB`.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::files_on_loan::recover_loans;
use super::record_seal::RecordSeal;
use super::save_error::SaveError;
use super::state_image::StateImage;
use crate::digest::hex;
use crate::sandbox::remove_tree::remove_tree;
use crate::sandbox::{SandboxError, SavedLimits, SavedSandbox};

const META: &str = "meta.json";
const STATE: &str = "state.bin";
const FILES: &str = "files";
const SEAL: &str = "meta.seal";

/// What `meta.json` records about a saved sandbox.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct SavedMeta {
    /// The sandbox's id.
    pub session_id: String,
    /// Its runtime.
    pub runtime: String,
    /// The key of the module its state belongs to (see `GuestImage::state_key`).
    pub image_key: String,
    /// The version of the server that saved it.
    pub server_version: String,
    /// When it was saved (seconds since the Unix epoch).
    pub saved_at: u64,
    /// The sha256 of `state.bin`, when the interpreter's state was saved.
    pub state_sha256: Option<String>,
    /// Its memory cap, in bytes.
    pub memory_bytes: u64,
    /// Its wall-clock limit per execution, in milliseconds.
    pub timeout_ms: u64,
    /// Executions it had run.
    pub executions: u64,
    /// The destinations it narrowed its HTTP to at create (none: the server's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_hosts: Option<Vec<String>>,
}

/// A saved sandbox taken out of the store to be restored.
pub(crate) struct Restorable {
    /// What was recorded.
    pub meta: SavedMeta,
    /// The interpreter's state, checked against its hash.
    pub state: Option<StateImage>,
    /// Where its files are now (inside the entry).
    pub files: PathBuf,
    /// The entry, to remove once the sandbox runs again.
    pub entry: PathBuf,
}

/// How long a half-written entry (no record yet) is left alone: another
/// server on the root may be writing it.
const HALF_WRITTEN_GRACE: Duration = Duration::from_secs(3600);

/// Whether `path` was last changed more than `age` ago (unknown: no).
fn older_than(path: &Path, age: Duration) -> bool {
    fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|elapsed| elapsed > age)
}

/// Whether a directory entry of the store is a saved sandbox's (or a
/// half-written one): a directory not named with a dot.
fn is_entry(entry: &fs::DirEntry) -> bool {
    entry.file_type().is_ok_and(|t| t.is_dir())
        && !entry.file_name().to_string_lossy().starts_with('.')
}

/// Marks the saved entry `entry` as no longer saved, once its sandbox runs
/// again: its record goes first, so that a stop while the rest is removed
/// leaves nothing that looks saved.
pub(crate) fn retire_record(entry: &Path) {
    let _ = fs::remove_file(entry.join(META));
}

/// The saved sandboxes of one sandbox root.
#[derive(Debug)]
pub(crate) struct SavedStore {
    dir: PathBuf,
    keep: Duration,
    max_bytes: u64,
    seal: RecordSeal,
}

impl SavedStore {
    /// The store under `root`, or `None` when saving is off (either setting
    /// 0). Gives back files a killed server's restore left on loan (see
    /// [`super::files_on_loan`]), then deletes entries older than `keep`.
    pub(crate) fn open(root: &Path, keep: Duration, max_bytes: u64) -> Option<Self> {
        if keep.is_zero() || max_bytes == 0 {
            return None;
        }
        let dir = root.join("saved");
        let seal = RecordSeal::new(&dir);
        let store = Self {
            dir,
            keep,
            max_bytes,
            seal,
        };
        let recovered = recover_loans(root, &store.dir, |entry| entry.join(FILES));
        if recovered > 0 {
            tracing::info!(
                recovered,
                "moved back the files of saved sandboxes whose restore a killed server left unfinished"
            );
        }
        store.expire();
        Some(store)
    }

    fn entry(&self, id: &str) -> PathBuf {
        let digest = Sha256::digest(id.as_bytes());
        let name: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
        self.dir.join(name)
    }

    /// Saves a sandbox: `state` (if any) and the directory `files`, which is
    /// moved into the store. On failure nothing is kept and `files` is
    /// where it was.
    pub(crate) fn save(
        &self,
        mut meta: SavedMeta,
        state: Option<&StateImage>,
        files: &Path,
    ) -> Result<(), SaveError> {
        fs::create_dir_all(&self.dir).map_err(SaveError::io("create", &self.dir))?;
        let entry = self.entry(&meta.session_id);
        let _ = remove_tree(&entry);
        let partial = entry.with_extension("partial");
        let _ = remove_tree(&partial);
        fs::create_dir(&partial).map_err(SaveError::io("create", &partial))?;
        let written = (|| {
            if let Some(state) = state {
                meta.state_sha256 = Some(write_state(&partial.join(STATE), state)?);
            }
            let json = serde_json::to_vec_pretty(&meta)?;
            write_synced(&partial.join(META), &json)?;
            let seal = self
                .seal
                .seal(&json)
                .map_err(SaveError::io("seal", &partial))?;
            write_synced(&partial.join(SEAL), seal.as_bytes())?;
            fs::rename(files, partial.join(FILES)).map_err(SaveError::io("move", files))?;
            fs::rename(&partial, &entry).map_err(SaveError::io("move", &partial))
        })();
        if let Err(e) = written {
            let _ = fs::rename(partial.join(FILES), files);
            let _ = remove_tree(&partial);
            return Err(e);
        }
        self.trim(&entry)
    }

    /// The saved sandbox `id`, checked for use by a server whose module for
    /// that runtime has `image_key`: `None` when nothing is saved under it.
    pub(crate) fn take(
        &self,
        id: &str,
        image_key: impl Fn(&str) -> Option<String>,
    ) -> Option<Result<Restorable, SandboxError>> {
        let entry = self.entry(id);
        let meta = fs::read(entry.join(META)).ok()?;
        let sealed =
            fs::read_to_string(entry.join(SEAL)).is_ok_and(|s| self.seal.verify(&meta, &s));
        Some(check(id, &entry, &meta, sealed, image_key))
    }

    /// The runtime of the saved sandbox `id` when one is saved (inside:
    /// `None` when its record cannot be read).
    pub(crate) fn runtime_of(&self, id: &str) -> Option<Option<String>> {
        let meta = fs::read(self.entry(id).join(META)).ok()?;
        Some(
            serde_json::from_slice::<SavedMeta>(&meta)
                .ok()
                .map(|m| m.runtime),
        )
    }

    /// The limits the saved sandbox `id` was saved with, when its record
    /// can be read.
    pub(crate) fn limits_of(&self, id: &str) -> Option<SavedLimits> {
        let meta = fs::read(self.entry(id).join(META)).ok()?;
        let meta: SavedMeta = serde_json::from_slice(&meta).ok()?;
        Some(SavedLimits {
            memory_bytes: meta.memory_bytes,
            timeout: Duration::from_millis(meta.timeout_ms),
        })
    }

    /// The size of the saved sandbox `id`'s state file (0: none).
    pub(crate) fn state_bytes(&self, id: &str) -> u64 {
        fs::metadata(self.entry(id).join(STATE)).map_or(0, |m| m.len())
    }

    /// Deletes the saved sandbox `id`; whether there was one.
    pub(crate) fn delete(&self, id: &str) -> bool {
        let entry = self.entry(id);
        entry.join(META).exists() && remove_tree(&entry).is_ok()
    }

    /// Every saved sandbox, oldest first.
    pub(crate) fn list(&self) -> Vec<SavedSandbox> {
        let mut all: Vec<SavedSandbox> = self
            .entries()
            .into_iter()
            .map(|(path, meta)| SavedSandbox {
                session_id: meta.session_id,
                runtime: meta.runtime,
                saved_at: meta.saved_at,
                // Unmeasurable: shown as the most it could be, never less.
                bytes: tree_bytes(&path).unwrap_or(u64::MAX),
                state_kept: meta.state_sha256.is_some(),
            })
            .collect();
        all.sort_by_key(|s| s.saved_at);
        all
    }

    fn entries(&self) -> Vec<(PathBuf, SavedMeta)> {
        let Ok(read) = fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        read.flatten()
            .filter_map(|e| {
                let path = e.path();
                let meta = fs::read(path.join(META)).ok()?;
                Some((path, serde_json::from_slice(&meta).ok()?))
            })
            .collect()
    }

    /// Deletes entries older than the keeping time (and half-written ones).
    fn expire(&self) {
        let now = unix_now();
        let Ok(read) = fs::read_dir(&self.dir) else {
            return;
        };
        for entry in read.flatten() {
            // The seal's key (and anything else not an entry) stays.
            if !is_entry(&entry) {
                continue;
            }
            let path = entry.path();
            let meta: Option<SavedMeta> = fs::read(path.join(META))
                .ok()
                .and_then(|m| serde_json::from_slice(&m).ok());
            let stale = match meta {
                Some(meta) => now.saturating_sub(meta.saved_at) > self.keep.as_secs(),
                // Half-written: another server on this root may be saving
                // it right now, so only an old one is left over.
                None => older_than(&path, HALF_WRITTEN_GRACE),
            };
            if stale {
                tracing::info!(path = %path.display(), "deleting a saved sandbox past SANDBOX_KEEP_SAVED_SECONDS");
                let _ = remove_tree(&path);
            }
        }
    }

    /// Makes room for `newest` (the entry just saved) by deleting the oldest
    /// others; when it alone is over the size limit, it is deleted instead
    /// and nothing else is touched.
    fn trim(&self, newest: &Path) -> Result<(), SaveError> {
        let refuse = |e: std::io::Error| {
            let _ = remove_tree(newest);
            SaveError::Unmeasurable(e)
        };
        let own = tree_bytes(newest).map_err(refuse)?;
        if own > self.max_bytes {
            let _ = remove_tree(newest);
            return Err(SaveError::TooLarge {
                mib: own >> 20,
                max_mib: self.max_bytes >> 20,
            });
        }
        let mut others: Vec<(PathBuf, u64, u64)> = Vec::new();
        for (path, meta) in self.entries() {
            if path != newest {
                // Another entry may be deleted meanwhile (closed, restored,
                // trimmed by another save): what is gone holds nothing.
                let bytes = other_entry_bytes(&path).map_err(refuse)?;
                others.push((path, meta.saved_at, bytes));
            }
        }
        others.sort_by_key(|(_, saved_at, _)| *saved_at);
        let mut total: u64 = own.saturating_add(others.iter().map(|(_, _, b)| b).sum::<u64>());
        for (path, _, bytes) in others {
            if total <= self.max_bytes {
                break;
            }
            tracing::warn!(path = %path.display(), "deleting the oldest saved sandbox: saved sandboxes would take more than SANDBOX_SAVED_MAX_MB");
            let _ = remove_tree(&path);
            total -= bytes;
        }
        Ok(())
    }
}

/// Checks an entry before use.
fn check(
    id: &str,
    entry: &Path,
    meta: &[u8],
    sealed: bool,
    image_key: impl Fn(&str) -> Option<String>,
) -> Result<Restorable, SandboxError> {
    let refuse = |why: String| {
        SandboxError::InvalidArgument(format!(
            "sandbox '{id}' was saved when the server last stopped, but cannot be restored: {why}. Its files are kept; close_sandbox deletes it"
        ))
    };
    if !sealed {
        return Err(refuse(
            "its record does not match its seal (it was changed after the save, or saved under another sandbox root)".into(),
        ));
    }
    let meta: SavedMeta = serde_json::from_slice(meta)
        .map_err(|e| refuse(format!("its record is unreadable ({e})")))?;
    if meta.session_id != id {
        return Err(refuse("its record names another sandbox".into()));
    }
    let version = env!("CARGO_PKG_VERSION");
    if meta.server_version != version {
        return Err(refuse(format!(
            "it was saved by version {} of this server, and this is {version}",
            meta.server_version
        )));
    }
    let state = match &meta.state_sha256 {
        None => None,
        Some(expected) => {
            match image_key(&meta.runtime) {
                Some(key) if key == meta.image_key => {}
                Some(_) => {
                    return Err(refuse(format!(
                        "the runtime '{}' has changed since (another build, or another SANDBOX_PRELOAD)",
                        meta.runtime
                    )));
                }
                None => {
                    return Err(refuse(format!(
                        "this server has no runtime '{}'",
                        meta.runtime
                    )));
                }
            }
            let bytes = fs::read(entry.join(STATE))
                .map_err(|e| refuse(format!("its state cannot be read ({e})")))?;
            if hex(&Sha256::digest(&bytes)) != *expected {
                return Err(refuse(
                    "its state is damaged (the sha256 does not match)".into(),
                ));
            }
            Some(
                StateImage::from_bytes(&bytes)
                    .map_err(|e| refuse(format!("its state is damaged ({e})")))?,
            )
        }
    };
    Ok(Restorable {
        meta,
        state,
        files: entry.join(FILES),
        entry: entry.to_owned(),
    })
}

/// Writes `state` to a new file at `path`, leaving pages of zeros as holes
/// (they hold no disk); returns the sha256 of its bytes.
fn write_state(path: &Path, state: &StateImage) -> Result<String, SaveError> {
    struct Sparse {
        file: fs::File,
        hash: Sha256,
        at: u64,
    }
    impl std::io::Write for Sparse {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            use std::os::unix::fs::FileExt;
            self.hash.update(buf);
            if buf.iter().any(|&b| b != 0) {
                self.file.write_all_at(buf, self.at)?;
            }
            self.at += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let failed = || SaveError::io("write", path);
    let mut out = Sparse {
        file: fs::File::create(path).map_err(failed())?,
        hash: Sha256::new(),
        at: 0,
    };
    state.write_to(&mut out).map_err(failed())?;
    out.file.set_len(out.at).map_err(failed())?;
    out.file.sync_all().map_err(failed())?;
    Ok(hex(&out.hash.finalize()))
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), SaveError> {
    let mut file = fs::File::create(path).map_err(SaveError::io("write", path))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(SaveError::io("write", path))
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Bytes the files under `path` hold on disk (holes are free; links are
/// not followed; a file with several names counts each time, which can only
/// overstate). The walk goes through every directory however many or deep
/// they are; one that cannot be read is an error, never a smaller number.
fn tree_bytes(path: &Path) -> std::io::Result<u64> {
    walk_bytes(path, false)
}

/// [`tree_bytes`] of another entry, which another call may be deleting:
/// what vanishes during the walk holds nothing; other errors still stop it.
fn other_entry_bytes(path: &Path) -> std::io::Result<u64> {
    walk_bytes(path, true)
}

fn walk_bytes(path: &Path, vanished_is_empty: bool) -> std::io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let skip = |e: &std::io::Error| vanished_is_empty && e.kind() == std::io::ErrorKind::NotFound;
    let mut total: u64 = 0;
    let mut stack = vec![path.to_owned()];
    while let Some(dir) = stack.pop() {
        let read = match fs::read_dir(&dir) {
            Ok(read) => read,
            Err(e) if skip(&e) => continue,
            Err(e) => return Err(e),
        };
        for entry in read {
            let path = match entry {
                Ok(entry) => entry.path(),
                Err(e) if skip(&e) => continue,
                Err(e) => return Err(e),
            };
            let meta = match path.symlink_metadata() {
                Ok(meta) => meta,
                Err(e) if skip(&e) => continue,
                Err(e) => return Err(e),
            };
            total = total.saturating_add(meta.blocks().saturating_mul(512));
            if meta.is_dir() {
                stack.push(path);
            }
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::super::state_image::GlobalValue;
    use super::*;

    fn meta(id: &str) -> SavedMeta {
        SavedMeta {
            session_id: id.into(),
            runtime: "scientific".into(),
            image_key: "key-1".into(),
            server_version: env!("CARGO_PKG_VERSION").into(),
            saved_at: unix_now(),
            state_sha256: None,
            memory_bytes: 1 << 29,
            timeout_ms: 30_000,
            executions: 3,
            allow_hosts: None,
        }
    }

    #[test]
    fn another_entry_deleted_mid_walk_counts_as_nothing_and_a_young_half_written_one_stays() {
        let root = tempfile::tempdir().unwrap();
        let gone = root.path().join("gone");
        assert_eq!(other_entry_bytes(&gone).unwrap(), 0);
        assert!(
            tree_bytes(&gone).is_err(),
            "the entry saved itself must be measured"
        );
        // Another server is writing this one right now.
        let partial = root.path().join("saved").join("0123.partial");
        fs::create_dir_all(&partial).unwrap();
        let _store = SavedStore::open(root.path(), Duration::from_secs(60), 1 << 30).unwrap();
        assert!(
            partial.exists(),
            "a half-written entry of a running save is kept"
        );
    }

    #[test]
    fn a_saved_sandbox_comes_back_once_checked_and_a_damaged_one_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let store = SavedStore::open(root.path(), Duration::from_secs(60), 1 << 30).unwrap();
        let files = root.path().join("sb");
        fs::create_dir(&files).unwrap();
        fs::write(files.join("data.txt"), "kept").unwrap();
        let state = StateImage {
            memory: vec![1; 64 << 10],
            globals: vec![("__wizer_global_0".into(), GlobalValue::I32(7))],
            open_files: 0,
        };
        store.save(meta("../../etc"), Some(&state), &files).unwrap();
        assert!(!files.exists(), "the files moved into the store");
        let listed = store.list();
        assert_eq!(listed.len(), 1);
        assert!(listed[0].state_kept && listed[0].session_id == "../../etc");
        let key = |_: &str| Some("key-1".to_owned());
        let back = store.take("../../etc", key).unwrap().unwrap();
        assert_eq!(
            back.state.unwrap(),
            StateImage {
                open_files: 0,
                ..state
            }
        );
        assert_eq!(
            fs::read_to_string(back.files.join("data.txt")).unwrap(),
            "kept"
        );
        assert!(
            back.entry.starts_with(root.path().join("saved")),
            "the id is not a path"
        );

        let other_key = |_: &str| Some("key-2".to_owned());
        let stale = match store.take("../../etc", other_key).unwrap() {
            Err(e) => e.to_string(),
            Ok(_) => panic!("a state of another runtime build must be refused"),
        };
        assert!(
            stale.contains("has changed") && stale.contains("files are kept"),
            "{stale}"
        );
        let record = back.entry.join(META);
        let saved = fs::read(&record).unwrap();
        let raised = String::from_utf8(saved.clone())
            .unwrap()
            .replace("536870912", "4294967296");
        fs::write(&record, raised).unwrap();
        let changed = match store.take("../../etc", key).unwrap() {
            Err(e) => e.to_string(),
            Ok(_) => panic!("a record changed after its save must be refused"),
        };
        assert!(changed.contains("does not match its seal"), "{changed}");
        fs::write(&record, saved).unwrap();
        fs::write(back.entry.join(STATE), b"tampered").unwrap();
        let damaged = match store.take("../../etc", key).unwrap() {
            Err(e) => e.to_string(),
            Ok(_) => panic!("a damaged state must be refused"),
        };
        assert!(damaged.contains("damaged"), "{damaged}");
        assert!(store.take("nobody", key).is_none());
        assert!(store.delete("../../etc"));
        assert!(store.list().is_empty());
    }

    #[test]
    fn old_entries_expire_and_the_size_limit_drops_the_oldest() {
        let root = tempfile::tempdir().unwrap();
        let store = SavedStore::open(root.path(), Duration::from_secs(60), 150_000).unwrap();
        for (i, id) in ["a", "b"].iter().enumerate() {
            let files = root.path().join(id);
            fs::create_dir(&files).unwrap();
            fs::write(files.join("blob"), vec![0u8; 100_000]).unwrap();
            let mut m = meta(id);
            m.saved_at -= 10 - i as u64;
            store.save(m, None, &files).unwrap();
        }
        let ids: Vec<String> = store.list().into_iter().map(|s| s.session_id).collect();
        assert_eq!(ids, ["b"], "the older entry made room");
        let big = root.path().join("big");
        fs::create_dir(&big).unwrap();
        fs::write(big.join("blob"), vec![1u8; 200_000]).unwrap();
        let refused = store.save(meta("big"), None, &big);
        assert!(
            matches!(refused, Err(SaveError::TooLarge { max_mib: 0, .. })),
            "{refused:?}"
        );
        let ids: Vec<String> = store.list().into_iter().map(|s| s.session_id).collect();
        assert_eq!(ids, ["b"], "a sandbox over the limit alone is not kept");
        let mut old = meta("c");
        old.saved_at -= 3600;
        let files = root.path().join("c");
        fs::create_dir(&files).unwrap();
        store.save(old, None, &files).unwrap();
        let reopened = SavedStore::open(root.path(), Duration::from_secs(60), 1 << 30).unwrap();
        let ids: Vec<String> = reopened.list().into_iter().map(|s| s.session_id).collect();
        assert_eq!(
            ids,
            ["b"],
            "an entry past the keeping time is deleted at start"
        );
        assert!(
            reopened.take("b", |_| None).unwrap().is_ok(),
            "the seal's key survives a restart, so the record still verifies"
        );
        assert!(SavedStore::open(root.path(), Duration::ZERO, 1).is_none());
    }

    #[test]
    fn the_size_limit_counts_every_directory_however_many() {
        // 1,500 directories of 64 KiB each (the review's attack): the walk
        // counts them all, so the sandbox is over a limit of 88 MiB.
        let root = tempfile::tempdir().unwrap();
        let store = SavedStore::open(root.path(), Duration::from_secs(60), 88 << 20).unwrap();
        let files = root.path().join("many");
        fs::create_dir(&files).unwrap();
        for i in 0..1500 {
            let d = files.join(format!("d{i}"));
            fs::create_dir(&d).unwrap();
            fs::write(d.join("blob"), vec![7u8; 64 << 10]).unwrap();
        }
        let refused = store.save(meta("many"), None, &files);
        assert!(
            matches!(refused, Err(SaveError::TooLarge { max_mib: 88, .. })),
            "{refused:?}"
        );
        assert!(store.list().is_empty(), "nothing over the limit is kept");
    }

    #[test]
    fn a_walk_that_cannot_finish_is_an_error_never_a_smaller_number() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let shut = tmp.path().join("shut");
        fs::create_dir(&shut).unwrap();
        fs::write(shut.join("blob"), vec![1u8; 1 << 20]).unwrap();
        fs::set_permissions(&shut, fs::Permissions::from_mode(0o000)).unwrap();
        let unreadable = fs::read_dir(&shut).is_err();
        let measured = tree_bytes(tmp.path());
        fs::set_permissions(&shut, fs::Permissions::from_mode(0o755)).unwrap();
        if unreadable {
            assert!(measured.is_err(), "{measured:?}");
        } else {
            // Running as root: every directory can be read.
            assert!(measured.unwrap() >= 1 << 20);
        }
        assert!(tree_bytes(&tmp.path().join("absent")).is_err());
    }
}
