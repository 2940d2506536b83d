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
//! one. Within a server, one taking-in runs at a time: a call naming a
//! sandbox while the root's opening (at start, as the warm pool fills) is
//! taking in its server waits for it, rather than finding the lock taken
//! and the sandbox not yet in the store.
//! A memory directory without a record, or without files (a restore or a
//! fork cut short, whose sandbox lives on elsewhere), is left for the
//! directory's removal.

use std::fs::{self, File};
use std::path::Path;

use cap_fs_ext::DirExt;
use cap_std::ambient_authority;
use cap_std::fs::Dir;

use super::{FILES, MAX_META_BYTES, META, SEAL, SavedMeta, SavedStore, read_meta, unix_now};
use crate::sandbox::lease;
use crate::sandbox::private_files::{create_private_dir, open_regular, read_regular_in};
use crate::sandbox::remove_tree::remove_tree_in;
use crate::sandbox::root::{SERVER_PREFIX, lock_file_of};

impl SavedStore {
    /// Moves the durable sandboxes of dead servers under the root into the
    /// store; returns how many.
    pub(crate) fn adopt_abandoned(&self) -> usize {
        let _one_at_a_time = self.one_taking_in();
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

    /// Runs `open_root` (which removes dead servers' directories, handing
    /// each to the function it is given, while it holds that directory's
    /// lock, before removing it) as the one taking-in under way: a call
    /// that looks for a sandbox meanwhile ([`SavedStore::adopt_abandoned`])
    /// waits for it, and then finds the sandbox in the store.
    pub(crate) fn while_taking_in<R>(&self, open_root: impl FnOnce(&dyn Fn(&Path)) -> R) -> R {
        let _one_at_a_time = self.one_taking_in();
        open_root(&|dir| note_adopted(self.adopt_server(dir)))
    }

    fn one_taking_in(&self) -> std::sync::MutexGuard<'_, ()> {
        self.taking_in
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes in the sandboxes of the dead server directory `dir`, worked on
    /// through one descriptor opened without following a link (a directory
    /// swapped for a link meanwhile is not entered), taking only memory
    /// directories that are directories, not links to one.
    fn adopt_server(&self, dir: &Path) -> usize {
        let Some(server) = open_dir_nofollow(dir) else {
            return 0;
        };
        let Ok(entries) = server.entries() else {
            return 0;
        };
        let Some(store) = self.store_dir() else {
            return 0;
        };
        let (mut adopted, mut failed) = (0, 0);
        let mut first_failure = None;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let memory = Path::new(&name);
            if memory.extension().is_none_or(|e| e != "memory")
                || !entry.file_type().is_ok_and(|t| t.is_dir())
            {
                continue;
            }
            match self.adopt_sandbox(&server, &store, memory) {
                Ok(true) => adopted += 1,
                Ok(false) => {}
                Err(e) => {
                    failed += 1;
                    first_failure.get_or_insert_with(|| (dir.join(memory), e));
                }
            }
        }
        // One line per server directory, however many entries it holds.
        if let Some((path, error)) = first_failure {
            tracing::warn!(failed, first = %path.display(), %error, "could not take in sandboxes of a server that died; they are removed with that server's directory");
        }
        adopted
    }

    /// The store's directory (made for the server's user alone if missing),
    /// opened.
    fn store_dir(&self) -> Option<Dir> {
        create_private_dir(&self.dir).ok()?;
        Dir::open_ambient_dir(&self.dir, ambient_authority()).ok()
    }

    /// Moves the sandbox of the memory directory `memory` of `server` into
    /// the store (whether it was one to take in). An unsealed record (not
    /// written by a server of this root) never displaces a saved sandbox,
    /// and a sealed one only an older save.
    fn adopt_sandbox(&self, server: &Dir, store: &Dir, memory: &Path) -> std::io::Result<bool> {
        let Ok(record) = read_regular_in(server, &memory.join(META), MAX_META_BYTES) else {
            return Ok(false);
        };
        let Ok(mut meta) = serde_json::from_slice::<SavedMeta>(&record) else {
            return Ok(false);
        };
        let sealed = self.seal_holds(
            &record,
            read_regular_in(server, &memory.join(SEAL), MAX_META_BYTES),
        );
        let entry = self.entry(&meta.session_id);
        let entry_name = entry.file_name().expect("an entry is named by a digest");
        if store.symlink_metadata(entry_name).is_ok()
            && (!sealed || self.has_newer(&entry, meta.saved_at))
        {
            // Two servers held this id at once (a create sent to another
            // replica): the copy saved later wins, this one goes; or a
            // record nobody sealed names a saved sandbox: it goes.
            tracing::warn!(id = %meta.session_id, sealed, "a server that died held an older or unsealed copy of a saved sandbox; that copy is dropped and the saved one kept");
            remove_tree_in(server, memory)?;
            return Ok(false);
        }
        let files = memory.with_extension("");
        let inside = memory.join(FILES);
        if server.symlink_metadata(&files).is_ok_and(|m| m.is_dir()) {
            if server.symlink_metadata(&inside).is_ok() {
                return Ok(false);
            }
            server.rename(&files, server, &inside)?;
        } else if !server.symlink_metadata(&inside).is_ok_and(|m| m.is_dir()) {
            return Ok(false);
        }
        // An older save of the same sandbox is superseded.
        let _ = remove_tree_in(store, entry_name);
        server.rename(memory, store, entry_name)?;
        // Kept from now on for SANDBOX_KEEP_SAVED_SECONDS; a record whose
        // seal does not match is moved as it is (and refused at restore),
        // never sealed anew.
        if sealed {
            meta.saved_at = unix_now();
            self.write_record(&entry, &meta)
                .map_err(std::io::Error::other)?;
        }
        if let Err(e) = self.trim(&entry) {
            tracing::warn!(id = %meta.session_id, error = %e, "a sandbox of a server that died did not fit in SANDBOX_SAVED_MAX_MB with the others and is lost; raise the setting to keep such sandboxes");
            return Ok(false);
        }
        Ok(true)
    }
}

/// The directory `dir`, opened without following a link at its last part.
fn open_dir_nofollow(dir: &Path) -> Option<Dir> {
    let parent = Dir::open_ambient_dir(dir.parent()?, ambient_authority()).ok()?;
    parent.open_dir_nofollow(dir.file_name()?).ok()
}

impl SavedStore {
    /// Whether the saved entry `entry` holds a sealed record saved after
    /// `saved_at` (an unsealed one proves no time).
    fn has_newer(&self, entry: &Path, saved_at: u64) -> bool {
        let Ok(record) = read_meta(&entry.join(META)) else {
            return false;
        };
        self.seal_holds(&record, read_meta(&entry.join(SEAL)))
            && serde_json::from_slice::<SavedMeta>(&record)
                .is_ok_and(|existing| existing.saved_at > saved_at)
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
