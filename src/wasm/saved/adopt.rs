//! Taking in the sandboxes of servers that died: a server killed outright
//! (SIGKILL, the machine's memory running out, a power cut) leaves each of
//! its durable sandboxes in its directory under the root, a memory
//! directory with a sealed record beside the sandbox's files. A server that
//! opens the root, or that is asked for a sandbox it does not find, moves
//! each such pair into the saved store, where the next call naming the
//! sandbox restores it as of its last completed execution.
//!
//! A server directory is dead when nobody holds its lock and its lease has
//! lapsed (see [`crate::sandbox::lease`]: at once for a process of this host
//! that is gone, after the lease's time for one elsewhere); the one taking
//! it in holds that lock meanwhile, so two servers never take in the same
//! one.
//! A memory directory without a record, or without files (a restore or a
//! fork cut short, whose sandbox lives on elsewhere), is left for the
//! directory's removal.

use std::fs::{self, File};
use std::path::Path;

use super::{FILES, META, SEAL, SavedMeta, SavedStore, read_meta, unix_now};
use crate::sandbox::lease;
use crate::sandbox::private_files::{create_private_dir, open_regular};
use crate::sandbox::remove_tree::remove_tree;
use crate::sandbox::root::{SERVER_PREFIX, lock_file_of};

impl SavedStore {
    /// Moves the durable sandboxes of dead servers under the root into the
    /// store; returns how many.
    pub(crate) fn adopt_abandoned(&self) -> usize {
        let Ok(servers) = fs::read_dir(&self.root) else {
            return 0;
        };
        let mut adopted = 0;
        for server in servers.flatten() {
            let name = server.file_name();
            if !name.to_string_lossy().starts_with(SERVER_PREFIX)
                || !server.file_type().is_ok_and(|t| t.is_dir())
            {
                continue;
            }
            let dir = server.path();
            // Held while the directory is taken in; a live server holds it.
            let Some(_lock) = take_lock(&dir) else {
                continue;
            };
            adopted += self.adopt_server(&dir);
        }
        note_adopted(adopted);
        adopted
    }

    /// Takes in the durable sandboxes of the dead server directory `dir`,
    /// whose lock the caller holds (it is about to remove the directory).
    pub(crate) fn take_in_server(&self, dir: &Path) {
        note_adopted(self.adopt_server(dir));
    }

    /// Takes in the sandboxes of the dead server directory `dir`.
    fn adopt_server(&self, dir: &Path) -> usize {
        let Ok(entries) = fs::read_dir(dir) else {
            return 0;
        };
        let mut adopted = 0;
        for entry in entries.flatten() {
            let memory = entry.path();
            if memory.extension().is_none_or(|e| e != "memory") {
                continue;
            }
            match self.adopt_sandbox(&memory) {
                Ok(true) => adopted += 1,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(path = %memory.display(), error = %e, "could not take in a sandbox of a server that died; it is removed with that server's directory")
                }
            }
        }
        adopted
    }

    /// Moves the sandbox of the memory directory `memory` into the store
    /// (whether it was one to take in).
    fn adopt_sandbox(&self, memory: &Path) -> std::io::Result<bool> {
        let Ok(record) = read_meta(&memory.join(META)) else {
            return Ok(false);
        };
        let Ok(mut meta) = serde_json::from_slice::<SavedMeta>(&record) else {
            return Ok(false);
        };
        let files = memory.with_extension("");
        let inside = memory.join(FILES);
        if fs::symlink_metadata(&files).is_ok_and(|m| m.is_dir()) {
            if inside.exists() {
                return Ok(false);
            }
            fs::rename(&files, &inside)?;
        } else if !fs::symlink_metadata(&inside).is_ok_and(|m| m.is_dir()) {
            return Ok(false);
        }
        create_private_dir(&self.dir)?;
        // Kept from now on for SANDBOX_KEEP_SAVED_SECONDS; a record whose
        // seal does not match is moved as it is (and refused at restore),
        // never sealed anew.
        let sealed = read_meta(&memory.join(SEAL))
            .ok()
            .and_then(|seal| String::from_utf8(seal).ok())
            .is_some_and(|seal| self.seal.verify(&record, &seal));
        let entry = self.entry(&meta.session_id);
        if self.has_newer(&entry, meta.saved_at) {
            // Two servers held this id at once (a create sent to another
            // replica): the copy saved later wins, this one goes.
            tracing::warn!(id = %meta.session_id, path = %memory.display(), "a server that died held an older copy of a sandbox saved since by another server; the older copy is dropped");
            remove_tree(memory)?;
            return Ok(false);
        }
        if sealed {
            meta.saved_at = unix_now();
            self.write_record(memory, &meta)
                .map_err(std::io::Error::other)?;
        }
        // An older save of the same sandbox is superseded.
        let _ = remove_tree(&entry);
        fs::rename(memory, &entry)?;
        let _ = self.trim(&entry);
        Ok(true)
    }
}

impl SavedStore {
    /// Whether the saved entry `entry` holds a record saved after `saved_at`.
    fn has_newer(&self, entry: &Path, saved_at: u64) -> bool {
        read_meta(&entry.join(META))
            .ok()
            .and_then(|bytes| serde_json::from_slice::<SavedMeta>(&bytes).ok())
            .is_some_and(|existing| existing.saved_at > saved_at)
    }
}

fn note_adopted(adopted: usize) {
    if adopted > 0 {
        tracing::info!(
            adopted,
            "took in the sandboxes of a server that did not shut down: each comes back as of its last completed execution when called"
        );
    }
}

/// The lock of the server directory `dir`, when nobody else holds it and
/// its lease has lapsed (its server is dead).
fn take_lock(dir: &Path) -> Option<File> {
    let lock = open_regular(&lock_file_of(dir)).ok()?;
    lock.try_lock().ok()?;
    lease::lapsed(dir).then_some(lock)
}
