//! [`FilesOnLoan`]: a saved sandbox's files, lent to the restore that brings
//! it back, and returned to its saved entry unless that restore completes.
//!
//! A restore moves the files out of the entry into a sandbox directory of
//! this server before the interpreter starts on them. Until the restore
//! completes the entry still holds its record and state, and a note names
//! where the files went, so a stop at any moment loses nothing:
//! - a restore that fails, or is abandoned (the call cancelled, the server
//!   stopping), moves the files back when its loan is dropped;
//! - a server killed mid-restore leaves the note, and the next start's
//!   [`recover_loans`] moves the files back before the dead server's
//!   directory is removed.

use std::fs;
use std::path::{Path, PathBuf};

use crate::sandbox::SandboxError;
use crate::sandbox::root::{SANDBOX_PREFIX, SERVER_PREFIX, SandboxRoot, is_abandoned};

/// The note in a saved entry naming where its files are on loan.
const NOTE: &str = "restoring-to";

/// A saved sandbox's files, moved into a sandbox directory for a restore.
#[derive(Debug)]
pub(crate) struct FilesOnLoan {
    /// Where the files belong in the saved entry.
    home: PathBuf,
    /// The saved entry.
    entry: PathBuf,
    /// The sandbox directory they are in now.
    dir: PathBuf,
    /// Whether the restore completed (the files stay).
    kept: bool,
}

impl FilesOnLoan {
    /// Moves the files of the saved entry `entry` (its `home` directory)
    /// into a new sandbox directory of `root`, leaving a note of where.
    /// A refusal names no host path.
    pub(crate) fn lend(
        root: &SandboxRoot,
        entry: &Path,
        home: &Path,
    ) -> Result<Self, SandboxError> {
        let refuse = |what: &str, e: std::io::Error| {
            tracing::error!(entry = %entry.display(), error = %e, "cannot {what} a saved sandbox's files");
            SandboxError::InvalidArgument(format!(
                "the saved sandbox's files cannot be {what} ({}); it stays saved: try again, or close_sandbox deletes it",
                e.kind()
            ))
        };
        let dir = root.new_sandbox_path();
        let note = entry.join(NOTE);
        // The note is made only if there is none: another restore (of
        // another server on this root) that holds the entry keeps it.
        if let Err(e) = write_note(&note, &dir) {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                return Err(SandboxError::InvalidArgument(
                    "the saved sandbox is being restored by another server on this sandbox root right now; call it there, or try again in a moment".into(),
                ));
            }
            return Err(refuse("noted for restoring", e));
        }
        // Only a real directory is lent: a link in its place could hand the
        // guest any directory of the host.
        let is_dir = fs::symlink_metadata(home).map(|m| m.file_type().is_dir());
        match is_dir {
            Ok(true) => {}
            Ok(false) => {
                let _ = fs::remove_file(&note);
                return Err(refuse(
                    "used: they are not a directory",
                    std::io::Error::from(std::io::ErrorKind::InvalidData),
                ));
            }
            Err(e) => {
                let _ = fs::remove_file(&note);
                return Err(refuse("found", e));
            }
        }
        if let Err(e) = fs::rename(home, &dir) {
            let _ = fs::remove_file(&note);
            return Err(refuse("moved for restoring", e));
        }
        Ok(Self {
            home: home.to_owned(),
            entry: entry.to_owned(),
            dir,
            kept: false,
        })
    }

    /// The sandbox directory the files are in.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The restore completed: the files stay in their sandbox directory and
    /// the entry no longer names them (it is removed next).
    pub(crate) fn keep(mut self) {
        self.kept = true;
        let _ = fs::remove_file(self.entry.join(NOTE));
    }
}

impl Drop for FilesOnLoan {
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        match fs::rename(&self.dir, &self.home) {
            Ok(()) => {
                let _ = fs::remove_file(self.entry.join(NOTE));
            }
            // The note stays, so the next start tries again.
            Err(e) => {
                tracing::error!(entry = %self.entry.display(), error = %e, "cannot move a saved sandbox's files back after its restore stopped; the next start tries again")
            }
        }
    }
}

/// Moves back the files of every entry under `saved_dir` whose restore was
/// cut short by a server that died (its note names a directory of a server
/// no longer running, under `root`). Returns how many came back.
pub(crate) fn recover_loans(
    root: &Path,
    saved_dir: &Path,
    home_of: impl Fn(&Path) -> PathBuf,
) -> usize {
    let Ok(read) = fs::read_dir(saved_dir) else {
        return 0;
    };
    let mut recovered = 0;
    for entry in read.flatten() {
        // Retired entries (their sandbox runs elsewhere) are not lent from.
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let entry = entry.path();
        let Ok(note) = fs::read_to_string(entry.join(NOTE)) else {
            continue;
        };
        let home = home_of(&entry);
        let Some((server, sandbox)) = parse_note(&note) else {
            if home.exists() {
                let _ = fs::remove_file(entry.join(NOTE));
            } else {
                tracing::error!(entry = %entry.display(), "a saved sandbox's restoring note names no sandbox directory; left as it is");
            }
            continue;
        };
        let server_dir = root.join(server);
        // A running server's restore (on this root) is its own business.
        if !is_abandoned(&server_dir) {
            continue;
        }
        if home.exists() {
            // The files never left (a stop between the note and the move).
            let _ = fs::remove_file(entry.join(NOTE));
        } else if fs::rename(server_dir.join(sandbox), &home).is_ok() {
            let _ = fs::remove_file(entry.join(NOTE));
            recovered += 1;
        }
    }
    recovered
}

/// The server directory and sandbox directory names a note gives, when
/// both are plain names of the kinds a server makes.
fn parse_note(note: &str) -> Option<(&str, &str)> {
    let (server, sandbox) = note.split_once('/')?;
    let plain = |name: &str, prefix: &str| {
        name.starts_with(prefix)
            && name.len() > prefix.len()
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    (plain(server, SERVER_PREFIX) && plain(sandbox, SANDBOX_PREFIX)).then_some((server, sandbox))
}

/// Writes `dir` (a sandbox directory of a server under the root) to the
/// note as `<server dir name>/<sandbox dir name>`.
fn write_note(note: &Path, dir: &Path) -> std::io::Result<()> {
    use std::io::Write as _;
    let name = |p: Option<&Path>| {
        p.and_then(Path::file_name)
            .and_then(|n| n.to_str())
            .map(str::to_owned)
            .ok_or_else(|| std::io::Error::other("a sandbox directory without a plain name"))
    };
    let text = format!("{}/{}", name(dir.parent())?, name(Some(dir))?);
    let mut file = fs::File::create_new(note)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn saved_entry(root: &Path) -> (PathBuf, PathBuf) {
        let entry = root.join("saved").join("e1");
        let home = entry.join("files");
        fs::create_dir_all(home.join("tmp")).unwrap();
        fs::write(home.join("data.txt"), b"kept").unwrap();
        (entry, home)
    }

    #[test]
    fn a_restore_that_stops_gives_the_files_back() {
        let tmp = tempfile::tempdir().unwrap();
        let root = SandboxRoot::open(tmp.path(), None).unwrap();
        let (entry, home) = saved_entry(tmp.path());
        let loan = FilesOnLoan::lend(&root, &entry, &home).unwrap();
        assert!(!home.exists(), "the files moved");
        assert_eq!(fs::read(loan.dir().join("data.txt")).unwrap(), b"kept");
        drop(loan);
        assert_eq!(fs::read(home.join("data.txt")).unwrap(), b"kept");
        assert!(!entry.join(NOTE).exists());
    }

    #[test]
    fn a_second_restore_of_a_held_entry_is_refused_and_takes_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let root = SandboxRoot::open(tmp.path(), None).unwrap();
        let other = SandboxRoot::open(tmp.path(), None).unwrap();
        let (entry, home) = saved_entry(tmp.path());
        let first = FilesOnLoan::lend(&root, &entry, &home).unwrap();
        let refused = FilesOnLoan::lend(&other, &entry, &home).unwrap_err();
        assert!(refused.to_string().contains("another server"), "{refused}");
        assert!(entry.join(NOTE).exists(), "the first restore's note stays");
        drop(first);
        assert_eq!(fs::read(home.join("data.txt")).unwrap(), b"kept");
    }

    #[test]
    fn a_link_in_place_of_the_files_is_never_lent() {
        let tmp = tempfile::tempdir().unwrap();
        let root = SandboxRoot::open(tmp.path(), None).unwrap();
        let entry = tmp.path().join("saved").join("e1");
        fs::create_dir_all(&entry).unwrap();
        let outside = tmp.path().join("outside");
        fs::create_dir(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, entry.join("files")).unwrap();
        let refused = FilesOnLoan::lend(&root, &entry, &entry.join("files")).unwrap_err();
        assert!(refused.to_string().contains("not a directory"), "{refused}");
        assert!(!entry.join(NOTE).exists());
    }

    #[test]
    fn a_kept_loan_leaves_the_files_where_the_sandbox_runs() {
        let tmp = tempfile::tempdir().unwrap();
        let root = SandboxRoot::open(tmp.path(), None).unwrap();
        let (entry, home) = saved_entry(tmp.path());
        let loan = FilesOnLoan::lend(&root, &entry, &home).unwrap();
        let dir = loan.dir().to_owned();
        loan.keep();
        assert!(dir.join("data.txt").exists() && !home.exists());
        assert!(!entry.join(NOTE).exists());
    }

    #[test]
    fn a_server_killed_mid_restore_gets_the_files_back_at_the_next_start() {
        let tmp = tempfile::tempdir().unwrap();
        let saved = tmp.path().join("saved");
        let home_of = |e: &Path| e.join("files");
        // A running server's restore is left alone.
        let (entry, home) = saved_entry(tmp.path());
        let live = SandboxRoot::open(tmp.path(), None).unwrap();
        std::mem::forget(FilesOnLoan::lend(&live, &entry, &home).unwrap());
        assert_eq!(recover_loans(tmp.path(), &saved, home_of), 0);
        assert!(!home.exists());
        // What a kill leaves: the note, the files in a directory of a server
        // whose lock nobody holds.
        let dead = tmp.path().join("server-dead");
        fs::create_dir_all(dead.join("sb-1")).unwrap();
        fs::write(dead.join(".lock"), b"").unwrap();
        fs::write(dead.join("sb-1/data.txt"), b"kept").unwrap();
        fs::write(entry.join(NOTE), b"server-dead/sb-1").unwrap();
        assert_eq!(recover_loans(tmp.path(), &saved, home_of), 1);
        assert_eq!(fs::read(home.join("data.txt")).unwrap(), b"kept");
        assert!(!entry.join(NOTE).exists());
    }

    #[test]
    fn a_note_can_only_name_a_sandbox_directory_under_the_root() {
        assert_eq!(
            parse_note("server-ab12/sb-cd34"),
            Some(("server-ab12", "sb-cd34"))
        );
        for bad in [
            "../etc/sb-1",
            "server-1/../sb-1",
            "/etc/passwd",
            "server-1/sb-",
            "server-1/x",
            "server-1/sb-1/x",
        ] {
            assert_eq!(parse_note(bad), None, "{bad}");
        }
    }
}
