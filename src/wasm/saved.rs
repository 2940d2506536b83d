//! [`SavedStore`]: local sandboxes kept across a restart of the server.
//!
//! A sandbox kept across restarts is durable while it runs: beside its
//! directory, its memory directory holds a sealed record of whose it is
//! (`meta.json`, `meta.seal`), its page segments and the journal that says
//! which pages and globals its interpreter had after each execution (see
//! [`super::journal`]). Saving it is then a matter of moving: its files go
//! into the memory directory as `files/`, and the memory directory becomes
//! the entry `<SANDBOX_ROOT>/saved/<hash of its id>`. A server that stops
//! does that for each sandbox; a server killed outright leaves them in its
//! directory, and the next server to open the root (or one that is asked for
//! such a sandbox) moves them into the store ([`SavedStore::adopt_abandoned`]).
//! The entry's name is a hash of the sandbox's id, so a client's id never
//! becomes a host path; the record and pages sit beside the files, where
//! guest code cannot reach them.
//!
//! A call naming that id restores it, after checking the record's seal, the
//! server's version and the runtime's module, and reading the journal back
//! (a damaged or cut-short record is left out, with a note); a stale or
//! damaged entry is refused with the reason and kept (`close_sandbox`
//! deletes it). Entries older than `SANDBOX_KEEP_SAVED_SECONDS` are deleted
//! at start, and the oldest go first when all of them would take more than
//! `SANDBOX_SAVED_MAX_MB`.

mod adopt;

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::files_on_loan::recover_loans;
use super::journal::{JOURNAL, Replay, replay};
use super::record_seal::RecordSeal;
use super::save_error::SaveError;
use crate::sandbox::budget::Budget;
use crate::sandbox::private_files::create_private_dir;
use crate::sandbox::remove_tree::remove_tree;
use crate::sandbox::{SandboxError, SavedLimits, SavedSandbox};

pub(crate) const META: &str = "meta.json";
pub(crate) const SEAL: &str = "meta.seal";
pub(crate) const FILES: &str = "files";

/// What `meta.json` records about a sandbox kept across restarts.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct SavedMeta {
    /// The sandbox's id.
    pub session_id: String,
    /// Its runtime.
    pub runtime: String,
    /// The key of the snapshot its memory belongs to (see `GuestImage::state_key`).
    pub image_key: String,
    /// Which image of that snapshot (see [`ImageIdentity`]); empty when its
    /// record predates the field.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image_id: String,
    /// The version of the server that wrote the record.
    pub server_version: String,
    /// When it was saved, or adopted after its server died (seconds since
    /// the Unix epoch).
    pub saved_at: u64,
    /// Its memory cap, in bytes.
    pub memory_bytes: u64,
    /// Its wall-clock limit per execution, in milliseconds.
    pub timeout_ms: u64,
    /// Executions it had run when the record was written (the journal's
    /// records say how many since).
    pub executions: u64,
    /// The destinations it narrowed its HTTP to at create (none: the server's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_hosts: Option<Vec<String>>,
}

/// Which snapshot image a sandbox's memory was made from: the snapshot's key
/// (the runtime, the guest program, the preloads), and the image's own
/// identity (a hash of its content): a snapshot made again under the same
/// key, after the module cache was cleared or an unused snapshot removed, is
/// another image, onto which saved pages no longer fit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ImageIdentity {
    /// The snapshot's key.
    pub key: String,
    /// The image's identity (empty: not known).
    pub id: String,
}

/// A saved sandbox taken out of the store to be restored.
pub(crate) struct Restorable {
    /// What was recorded.
    pub meta: SavedMeta,
    /// Its interpreter's memory as the journal has it (none: only its files
    /// were kept).
    pub memory: Replay,
    /// Where its files are now (inside the entry).
    pub files: PathBuf,
    /// The entry (its memory directory), to remove once the sandbox runs again.
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
/// leaves nothing that looks saved; then the entry is renamed out of the
/// way (a save of the same sandbox may make a new entry of that name at any
/// moment after). Returns what is left to remove.
pub(crate) fn retire_entry(entry: &Path) -> PathBuf {
    let _ = fs::remove_file(entry.join(META));
    let name = entry.file_name().unwrap_or_default().to_string_lossy();
    let retired = entry.with_file_name(format!("{RETIRED}{name}-{:016x}", rand::random::<u64>()));
    match fs::rename(entry, &retired) {
        Ok(()) => retired,
        Err(_) => entry.to_owned(),
    }
}

/// Most bytes a saved record may take.
const MAX_META_BYTES: u64 = 64 << 10;

/// The bytes of a record (a regular file, bounded: a record is never a
/// link, a FIFO or a device planted by whoever else can write the root).
pub(crate) fn read_meta(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    crate::sandbox::private_files::read_regular(path, MAX_META_BYTES)
}

/// How the names of retired entries, not yet removed, begin.
const RETIRED: &str = ".retired-";

/// The saved sandboxes of one sandbox root.
#[derive(Debug)]
pub(crate) struct SavedStore {
    root: PathBuf,
    dir: PathBuf,
    keep: Duration,
    max_bytes: u64,
    seal: RecordSeal,
    /// The disk live sandboxes' journaled pages take (within `max_bytes`,
    /// with the saved entries).
    live: Arc<Budget>,
    /// Held while dead servers' sandboxes are taken in, so a call looking
    /// for one waits for a taking-in under way rather than missing it.
    taking_in: std::sync::Mutex<()>,
}

impl SavedStore {
    /// The store under `root`, or `None` when saving is off (either setting
    /// 0). Gives back files a killed server's restore left on loan (see
    /// [`super::files_on_loan`]), takes in the sandboxes of servers that
    /// died, then deletes entries older than `keep`.
    pub(crate) fn open(root: &Path, keep: Duration, max_bytes: u64) -> Option<Self> {
        if keep.is_zero() || max_bytes == 0 {
            return None;
        }
        let dir = root.join("saved");
        let seal = RecordSeal::new(&dir);
        let store = Self {
            root: root.to_owned(),
            dir,
            keep,
            max_bytes,
            seal,
            live: Budget::new(max_bytes),
            taking_in: std::sync::Mutex::new(()),
        };
        let recovered = recover_loans(root, &store.dir, |entry| entry.join(FILES));
        if recovered > 0 {
            tracing::info!(
                recovered,
                "moved back the files of saved sandboxes whose restore a killed server left unfinished"
            );
        }
        store.adopt_abandoned();
        store.expire();
        Some(store)
    }

    /// The disk the pages of live durable sandboxes may take: what
    /// `SANDBOX_SAVED_MAX_MB` allows, shared with the saved entries.
    pub(crate) fn disk_budget(&self) -> Arc<Budget> {
        self.live.clone()
    }

    fn entry(&self, id: &str) -> PathBuf {
        let digest = Sha256::digest(id.as_bytes());
        let name: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
        self.dir.join(name)
    }

    /// Writes the sealed record of a live sandbox into its memory directory
    /// `memory` (made if missing), so that it can be taken in if its server
    /// dies.
    pub(crate) fn write_record(&self, memory: &Path, meta: &SavedMeta) -> Result<(), SaveError> {
        create_private_dir(memory).map_err(SaveError::io("create", memory))?;
        let json = serde_json::to_vec_pretty(meta)?;
        let seal = self
            .seal
            .seal(&json)
            .map_err(SaveError::io("seal", memory))?;
        // The seal first: a record is never read without its seal, and a
        // record with a stale seal is refused, never trusted.
        write_replacing(&memory.join(SEAL), seal.as_bytes())?;
        write_replacing(&memory.join(META), &json)
    }

    /// Saves a live sandbox: its record rewritten as `meta`, its files (the
    /// directory `files`) moved into its memory directory `memory`, which
    /// becomes the entry. On failure nothing is kept and `files` is where
    /// it was.
    pub(crate) fn save(
        &self,
        meta: SavedMeta,
        files: &Path,
        memory: &Path,
    ) -> Result<(), SaveError> {
        create_private_dir(&self.dir).map_err(SaveError::io("create", &self.dir))?;
        let entry = self.entry(&meta.session_id);
        self.write_record(memory, &meta)?;
        fs::rename(files, memory.join(FILES)).map_err(SaveError::io("move", files))?;
        let _ = remove_tree(&entry);
        if let Err(e) = fs::rename(memory, &entry) {
            let _ = fs::rename(memory.join(FILES), files);
            return Err(SaveError::io("move", memory)(e));
        }
        self.trim(&entry)
    }

    /// The saved sandbox `id`, checked for use by a server whose snapshot
    /// for that runtime is `image`: `None` when nothing is saved under it.
    pub(crate) fn take(
        &self,
        id: &str,
        image: impl Fn(&str) -> Option<ImageIdentity>,
    ) -> Option<Result<Restorable, SandboxError>> {
        let entry = self.entry(id);
        let meta = read_meta(&entry.join(META)).ok()?;
        let sealed = self.seal_holds(&meta, read_meta(&entry.join(SEAL)));
        Some(check(id, &entry, &meta, sealed, image))
    }

    /// Whether `seal` (as read beside `record`) is the record's valid seal.
    fn seal_holds(&self, record: &[u8], seal: std::io::Result<Vec<u8>>) -> bool {
        seal.ok()
            .and_then(|seal| String::from_utf8(seal).ok())
            .is_some_and(|seal| self.seal.verify(record, &seal))
    }

    /// The runtime of the saved sandbox `id` when one is saved (inside:
    /// `None` when its record cannot be read).
    pub(crate) fn runtime_of(&self, id: &str) -> Option<Option<String>> {
        let meta = read_meta(&self.entry(id).join(META)).ok()?;
        Some(
            serde_json::from_slice::<SavedMeta>(&meta)
                .ok()
                .map(|m| m.runtime),
        )
    }

    /// The limits the saved sandbox `id` was saved with, when its record
    /// can be read.
    pub(crate) fn limits_of(&self, id: &str) -> Option<SavedLimits> {
        let meta = read_meta(&self.entry(id).join(META)).ok()?;
        let meta: SavedMeta = serde_json::from_slice(&meta).ok()?;
        Some(SavedLimits {
            memory_bytes: meta.memory_bytes,
            timeout: Duration::from_millis(meta.timeout_ms),
        })
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
                state_kept: fs::metadata(path.join(JOURNAL)).is_ok_and(|m| m.len() > 0),
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
                let meta = read_meta(&path.join(META)).ok()?;
                Some((path, serde_json::from_slice(&meta).ok()?))
            })
            .collect()
    }
}

impl SavedStore {
    /// Deletes entries older than the keeping time (and half-written ones).
    fn expire(&self) {
        let now = unix_now();
        let Ok(read) = fs::read_dir(&self.dir) else {
            return;
        };
        for entry in read.flatten() {
            // What a restore retired and a stop left.
            if entry.file_name().to_string_lossy().starts_with(RETIRED) {
                let _ = remove_tree(&entry.path());
                continue;
            }
            // The seal's key (and anything else not an entry) stays.
            if !is_entry(&entry) {
                continue;
            }
            let path = entry.path();
            let meta: Option<SavedMeta> = read_meta(&path.join(META))
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
        // Live sandboxes' journaled pages take their share first.
        let max_bytes = self.max_bytes.saturating_sub(self.live.used());
        let own = tree_bytes(newest).map_err(refuse)?;
        if own > max_bytes {
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
            if total <= max_bytes {
                break;
            }
            tracing::warn!(path = %path.display(), "deleting the oldest saved sandbox: saved sandboxes would take more than SANDBOX_SAVED_MAX_MB");
            let _ = remove_tree(&path);
            total -= bytes;
        }
        Ok(())
    }
}

/// Why a sandbox whose snapshot was made again comes back with its files only.
const IMAGE_MADE_AGAIN: &str = "the runtime's snapshot was made again since it was saved (the module cache was cleared, or a snapshot no server had used for a while was removed), and its memory was built on the old one";

/// Checks an entry before use.
fn check(
    id: &str,
    entry: &Path,
    meta: &[u8],
    sealed: bool,
    image: impl Fn(&str) -> Option<ImageIdentity>,
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
    let journal = entry.join(JOURNAL);
    let memory = if journal.exists() {
        match image(&meta.runtime) {
            Some(now) if now.key == meta.image_key && now.id != meta.image_id => {
                return Ok(Restorable {
                    memory: Replay {
                        damage: Some(IMAGE_MADE_AGAIN.to_owned()),
                        ..Replay::default()
                    },
                    files: entry.join(FILES),
                    entry: entry.to_owned(),
                    meta,
                });
            }
            Some(now) if now.key == meta.image_key => {}
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
        replay(entry).map_err(|e| refuse(format!("its memory's journal cannot be read ({e})")))?
    } else {
        Replay::default()
    };
    Ok(Restorable {
        meta,
        memory,
        files: entry.join(FILES),
        entry: entry.to_owned(),
    })
}

/// Writes `bytes` to `path` through a temporary file renamed over it, synced.
fn write_replacing(path: &Path, bytes: &[u8]) -> Result<(), SaveError> {
    let temp = path.with_extension("partial");
    let mut file = fs::File::create(&temp).map_err(SaveError::io("write", &temp))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(SaveError::io("write", &temp))?;
    fs::rename(&temp, path).map_err(SaveError::io("write", path))
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
mod tests;
