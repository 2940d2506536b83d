//! [`copy_tree`]: copies one sandbox directory into another (a fork's
//! files), charging every entry to the destination's quota ledger before it
//! is written, by the blocks it will hold there (a directory or a link one
//! block, a file the blocks the source holds).
//!
//! The walk is depth first with one directory open per level (source and
//! destination), and stops past [`super::disk_usage::MAX_DEPTH`] levels.
//! Files are read through their directory entry, never through a link; links
//! are copied as links (the destination's confinement applies to them as to
//! the source's); anything else (a FIFO, a socket) is left out and counted.

use std::io;

use cap_std::fs::{Dir, OpenOptions, ReadDir};

use super::disk_usage::{MAX_DEPTH, held_bytes};
use super::quota::QuotaLedger;

/// What a copy left out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopyReport {
    /// Entries copied.
    pub copied: u64,
    /// Entries that are neither files, directories nor links.
    pub skipped: u64,
}

/// Why a copy stopped.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// The destination's quota (or the server's disk budget) has no room.
    #[error("the files do not fit the new sandbox's disk quota or the server's disk budget")]
    NoRoom,
    /// The tree is nested deeper than the walk goes.
    #[error("the directories are nested more than {MAX_DEPTH} levels deep")]
    TooDeep,
    /// Reading or writing failed.
    #[error("copying the files failed: {0}")]
    Io(#[from] io::Error),
}

/// One level of the walk: the source directory, its entries, and the
/// destination directory they go to.
struct Level {
    from: Dir,
    entries: ReadDir,
    to: Dir,
    /// How many levels deep this directory is (the top is 1).
    depth: usize,
}

/// Copies everything in `from` into the empty `to`, charging `ledger`.
pub fn copy_tree(from: &Dir, to: &Dir, ledger: &QuotaLedger) -> Result<CopyReport, CopyError> {
    let mut report = CopyReport::default();
    let mut levels = vec![Level {
        from: from.try_clone()?,
        entries: from.entries()?,
        to: to.try_clone()?,
        depth: 1,
    }];
    while let Some(level) = levels.last_mut() {
        let depth = level.depth;
        let Some(entry) = level.entries.next() else {
            levels.pop();
            continue;
        };
        let entry = entry?;
        let name = entry.file_name();
        let file_type = entry.file_type()?;
        if file_type.is_dir() {
            if depth >= MAX_DEPTH {
                return Err(CopyError::TooDeep);
            }
            charge(ledger, ledger.allocation().block)?;
            match level.to.create_dir(&name) {
                // A directory every sandbox starts with (its `/tmp`).
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                done => done?,
            }
            let from = entry.open_dir()?;
            let to = level.to.open_dir(&name)?;
            let entries = from.entries()?;
            levels.push(Level {
                from,
                entries,
                to,
                depth: depth + 1,
            });
        } else if file_type.is_file() {
            // The copy leaves holes (see copy_data), so it takes the
            // blocks the source holds, not its length.
            let meta = entry.metadata()?;
            charge(ledger, held_bytes(&meta))?;
            let source = entry.open()?.into_std();
            let mut options = OpenOptions::new();
            options.write(true).create_new(true);
            let target = level.to.open_with(&name, &options)?.into_std();
            copy_data(&source, &target, meta.len())?;
            // As `cp -p` does: the installed modules' bytecode, checked
            // against their sources' times, stays valid in the copy.
            if let Ok(modified) = meta.modified() {
                target.set_modified(modified.into_std())?;
            }
        } else if file_type.is_symlink() {
            charge(ledger, ledger.allocation().block)?;
            let target = level.from.read_link(&name)?;
            level.to.symlink(&target, &name)?;
        } else {
            report.skipped += 1;
            continue;
        }
        report.copied += 1;
    }
    Ok(report)
}

/// Copies the data of `source` (`len` bytes long) into the empty `target`,
/// leaving its holes holes: only the ranges that hold data are read and
/// written, so the copy holds no more disk than the source (a sparse file of
/// gigabytes that holds nothing stays that way).
fn copy_data(source: &std::fs::File, target: &std::fs::File, len: u64) -> io::Result<()> {
    use rustix::fs::{SeekFrom, seek};
    use std::os::unix::fs::FileExt;
    let mut buffer = vec![0u8; 256 << 10];
    let mut at = 0u64;
    while at < len {
        let start = match seek(source, SeekFrom::Data(at)) {
            Ok(start) => start,
            // No data past `at`: the rest is a hole.
            Err(rustix::io::Errno::NXIO) => break,
            Err(e) => return Err(e.into()),
        };
        let end = seek(source, SeekFrom::Hole(start))?.min(len);
        let mut offset = start;
        while offset < end {
            let want = ((end - offset) as usize).min(buffer.len());
            let got = source.read_at(&mut buffer[..want], offset)?;
            if got == 0 {
                break;
            }
            target.write_all_at(&buffer[..got], offset)?;
            offset += got as u64;
        }
        at = end.max(start + 1);
    }
    target.set_len(len)
}

fn charge(ledger: &QuotaLedger, bytes: u64) -> Result<(), CopyError> {
    if ledger.reserve(bytes, 1) {
        Ok(())
    } else {
        Err(CopyError::NoRoom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::budget::Budget;
    use crate::sandbox::quota::DiskQuota;
    use cap_std::ambient_authority;
    use std::sync::Arc;

    fn open(path: &std::path::Path) -> Dir {
        Dir::open_ambient_dir(path, ambient_authority()).unwrap()
    }

    #[test]
    fn files_directories_and_links_are_copied_within_the_quota() {
        let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::create_dir_all(src.path().join("a/b")).unwrap();
        std::fs::write(src.path().join("a/b/data.txt"), "hello").unwrap();
        std::fs::write(src.path().join("top.bin"), [0u8, 1, 2]).unwrap();
        let installed_at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(946_684_800);
        std::fs::File::options()
            .write(true)
            .open(src.path().join("top.bin"))
            .unwrap()
            .set_modified(installed_at)
            .unwrap();
        std::os::unix::fs::symlink("a/b/data.txt", src.path().join("link")).unwrap();
        let ledger = QuotaLedger::new(
            Arc::new(open(dst.path())),
            dst.path(),
            DiskQuota::new(1 << 20, 100),
            crate::sandbox::allocation::Allocation::default(),
            Budget::unlimited(),
        );
        let report = copy_tree(&open(src.path()), &open(dst.path()), &ledger).unwrap();
        assert_eq!(report.copied, 5);
        assert_eq!(
            std::fs::read_to_string(dst.path().join("a/b/data.txt")).unwrap(),
            "hello"
        );
        assert_eq!(
            std::fs::read(dst.path().join("top.bin")).unwrap(),
            [0, 1, 2]
        );
        assert_eq!(
            std::fs::metadata(dst.path().join("top.bin"))
                .unwrap()
                .modified()
                .unwrap(),
            installed_at,
            "modification times are kept (installed bytecode stays valid)"
        );
        assert_eq!(
            std::fs::read_link(dst.path().join("link")).unwrap(),
            std::path::Path::new("a/b/data.txt")
        );

        let small = tempfile::tempdir().unwrap();
        let ledger = QuotaLedger::new(
            Arc::new(open(small.path())),
            small.path(),
            DiskQuota::new(4, 100),
            crate::sandbox::allocation::Allocation::default(),
            Budget::unlimited(),
        );
        assert!(matches!(
            copy_tree(&open(src.path()), &open(small.path()), &ledger),
            Err(CopyError::NoRoom)
        ));
    }

    #[test]
    fn a_sparse_file_stays_sparse_and_keeps_its_data() {
        use std::os::unix::fs::{FileExt, MetadataExt};
        let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let sparse = std::fs::File::create(src.path().join("sparse")).unwrap();
        sparse.set_len(8 << 30).unwrap();
        sparse.write_all_at(b"start", 0).unwrap();
        sparse.write_all_at(b"end", (8 << 30) - 3).unwrap();
        let ledger = QuotaLedger::new(
            Arc::new(open(dst.path())),
            dst.path(),
            DiskQuota::new(1 << 20, 100),
            crate::sandbox::allocation::Allocation::default(),
            Budget::unlimited(),
        );
        copy_tree(&open(src.path()), &open(dst.path()), &ledger).unwrap();
        let copy = std::fs::File::open(dst.path().join("sparse")).unwrap();
        let meta = copy.metadata().unwrap();
        assert_eq!(meta.len(), 8 << 30);
        assert!(
            meta.blocks() * 512 < 1 << 20,
            "{} bytes held",
            meta.blocks() * 512
        );
        let mut end = [0u8; 3];
        copy.read_exact_at(&mut end, (8 << 30) - 3).unwrap();
        assert_eq!(&end, b"end");
        let mut start = [0u8; 5];
        copy.read_exact_at(&mut start, 0).unwrap();
        assert_eq!(&start, b"start");
    }
}
