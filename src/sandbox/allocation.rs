//! [`Allocation`]: how the file system under the sandbox root hands out disk,
//! so that quotas count what a sandbox really holds (its blocks), never the
//! bytes it asked to write.
//!
//! A file system gives disk in whole blocks: one byte written into a hole
//! takes a block, however few bytes it carries, and a file of one byte holds
//! a block. So every booking rounds up to whole blocks, and a write whose
//! offset the host cannot see is booked as every block it could touch. What
//! a file holds is its allocated blocks (`st_blocks`), where the system says
//! (Unix); elsewhere its length rounded up to whole blocks.
//!
//! Holes must be free: a file grown with `truncate`, or written far past its
//! end, holds only the blocks written. [`Allocation::probe`] checks that on
//! the root's file system at start (ext4, XFS, btrfs, tmpfs, ZFS and APFS
//! keep holes free; FAT and HFS+ do not), since on one that fills holes no
//! booking of a write could bound what it takes.

use std::io;
use std::path::Path;

/// The least block size booked, whatever a file system reports.
const MIN_BLOCK: u64 = 4096;
/// The hole the probe writes one byte into the middle of.
const PROBE_HOLE: u64 = 8 << 20;
/// The probe file's name in the root (never inside a sandbox).
const PROBE_NAME: &str = ".allocation-probe";

/// How a file system allocates disk to files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// Bytes of the unit it allocates in: what one byte written into a hole
    /// takes.
    pub block: u64,
    /// Whether holes in files hold no disk.
    pub sparse: bool,
}

impl Default for Allocation {
    /// 4 KiB blocks and free holes: what the common file systems do.
    fn default() -> Self {
        Self {
            block: MIN_BLOCK,
            sparse: true,
        }
    }
}

impl Allocation {
    /// Measures the file system under `dir`: writes one byte into the middle
    /// of an 8 MiB hole in a probe file there, syncs it, and reads what the
    /// file then holds (the probe file is removed again).
    pub fn probe(dir: &Path) -> io::Result<Self> {
        let path = dir.join(PROBE_NAME);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)?;
        let measured = (|| -> io::Result<Self> {
            file.set_len(PROBE_HOLE)?;
            write_at(&file, b"x", PROBE_HOLE / 2)?;
            file.sync_all()?;
            let meta = file.metadata()?;
            Ok(Self::from_probe(allocated(&meta), preferred_block(&meta)))
        })();
        drop(file);
        let removed = std::fs::remove_file(&path);
        let measured = measured?;
        removed?;
        Ok(measured)
    }

    /// What a probe's reading means: the file held `held` bytes after one
    /// byte was written into its hole (`None`: the system does not say), on
    /// a file system that prefers blocks of `preferred` bytes.
    fn from_probe(held: Option<u64>, preferred: u64) -> Self {
        match held {
            Some(held) => Self {
                block: held.max(preferred).max(MIN_BLOCK),
                sparse: held < PROBE_HOLE / 2,
            },
            // Nothing says holes are free: they are assumed not to be.
            None => Self {
                block: preferred.max(MIN_BLOCK),
                sparse: false,
            },
        }
    }

    /// `bytes` rounded up to whole blocks.
    pub fn round_up(&self, bytes: u64) -> u64 {
        bytes.div_ceil(self.block).saturating_mul(self.block)
    }

    /// The most a write of `len` bytes at an offset the host cannot see can
    /// newly take: every block it could touch (a write into holes takes each
    /// block it lands in, whole).
    pub fn write_takes(&self, len: u64) -> u64 {
        if len == 0 {
            return 0;
        }
        // A write not aligned to a block touches one block more than an
        // aligned one: at most ceil((len + block - 1) / block) blocks.
        self.round_up(len.saturating_add(self.block - 1))
    }

    /// What appending `len` bytes to a file now `at` bytes long (and holding
    /// no holes) newly takes: the blocks past those it holds.
    pub fn append_takes(&self, at: u64, len: u64) -> u64 {
        self.round_up(at.saturating_add(len)) - self.round_up(at)
    }
}

/// Bytes a file holds on disk, from its length and, where the system says,
/// its allocated 512-byte units (`st_blocks`).
pub fn file_held(len: u64, blocks: Option<u64>) -> u64 {
    match blocks {
        Some(blocks) => blocks.saturating_mul(512),
        None => Allocation::default().round_up(len),
    }
}

/// What a file holds, as the system reports it.
fn allocated(meta: &std::fs::Metadata) -> Option<u64> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        Some(meta.blocks().saturating_mul(512))
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        None
    }
}

/// The block size the file system prefers for I/O (`st_blksize`), where the
/// system says.
fn preferred_block(meta: &std::fs::Metadata) -> u64 {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        meta.blksize()
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        MIN_BLOCK
    }
}

fn write_at(file: &std::fs::File, bytes: &[u8], offset: u64) -> io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::write_all_at(file, bytes, offset)
    }
    #[cfg(not(unix))]
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut file = file;
        file.seek(SeekFrom::Start(offset))?;
        file.write_all(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machines_file_system_keeps_holes_free_and_allocates_in_blocks() {
        let tmp = tempfile::tempdir().unwrap();
        let found = Allocation::probe(tmp.path()).unwrap();
        assert!(found.sparse, "{found:?}");
        assert!(found.block >= 4096 && found.block <= 1 << 20, "{found:?}");
        assert!(
            std::fs::read_dir(tmp.path()).unwrap().next().is_none(),
            "the probe file is gone"
        );
    }

    #[test]
    fn a_probe_says_whether_holes_are_free_and_what_a_block_is() {
        assert_eq!(
            Allocation::from_probe(Some(4096), 4096),
            Allocation {
                block: 4096,
                sparse: true
            }
        );
        // ZFS prefers whole records; a file system reporting 1 KiB blocks is
        // still booked by 4 KiB.
        assert_eq!(
            Allocation::from_probe(Some(512), 128 << 10).block,
            128 << 10
        );
        assert_eq!(Allocation::from_probe(Some(1024), 1024).block, 4096);
        // The hole took disk: FAT, HFS+.
        assert!(!Allocation::from_probe(Some(PROBE_HOLE), 4096).sparse);
        assert!(!Allocation::from_probe(None, 4096).sparse);
    }

    #[test]
    fn writes_are_booked_by_the_blocks_they_can_touch() {
        let a = Allocation::default();
        assert_eq!(a.write_takes(0), 0);
        assert_eq!(a.write_takes(1), 4096, "one byte into a hole takes a block");
        assert_eq!(a.write_takes(4096), 8192, "unaligned, it spans two");
        assert_eq!(a.write_takes(4097), 8192);
        assert_eq!(a.write_takes(8193), 12288);
        assert_eq!(a.append_takes(0, 1), 4096);
        assert_eq!(a.append_takes(1, 4095), 0, "the block is held already");
        assert_eq!(a.append_takes(4096, 4097), 8192);
        assert_eq!(a.round_up(0), 0);
        assert_eq!(a.round_up(1), 4096);
        assert_eq!(file_held(1, None), 4096);
        assert_eq!(file_held(1, Some(8)), 4096);
        assert_eq!(file_held(1 << 40, Some(0)), 0, "a hole holds nothing");
    }
}
