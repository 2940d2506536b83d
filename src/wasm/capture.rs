//! [`OutputCapture`]: one output stream of one execution, bounded.
//!
//! The first `inline` bytes are kept in memory and returned with the result.
//! When the program writes more, the whole stream (inline part included) is
//! written to a file in the sandbox, up to `file_limit` bytes, so the model can
//! page through it with `read_file` instead of flooding its context; bytes past
//! that are only counted. The file is the sandbox's like any other: every byte
//! is booked with its quota ledger first, and the file stops where the quota
//! (or the server's disk budget) is full. The guest is never blocked or failed
//! by any of this.

use std::io::Write;
use std::sync::Arc;

use cap_std::fs::{File, OpenOptions};

use crate::sandbox::CapturedText;
use crate::sandbox::quota::QuotaLedger;

/// Where a stream's full text goes once it overflows the inline part.
#[derive(Clone)]
pub(crate) struct SpillTarget {
    /// The sandbox's quota ledger (and through it, its directory).
    pub ledger: Arc<QuotaLedger>,
    /// Path of the file, relative to the sandbox directory.
    pub relative: String,
    /// Most bytes the file may hold.
    pub file_limit: u64,
}

/// A bounded capture of one output stream.
pub(crate) struct OutputCapture {
    inline_limit: usize,
    inline: Vec<u8>,
    total: u64,
    spill: Option<SpillTarget>,
    file: Option<File>,
    file_bytes: u64,
    file_failed: bool,
}

impl OutputCapture {
    /// Keeps up to `inline_limit` bytes; spills to `spill` past that.
    pub(crate) fn new(inline_limit: usize, spill: Option<SpillTarget>) -> Self {
        Self {
            inline_limit,
            inline: Vec::new(),
            total: 0,
            spill,
            file: None,
            file_bytes: 0,
            file_failed: false,
        }
    }

    /// Keeps up to `limit` bytes in memory and nothing else.
    pub(crate) fn memory(limit: usize) -> Self {
        Self::new(limit, None)
    }

    /// Counts output without keeping it (between executions).
    pub(crate) fn discard() -> Self {
        Self::new(0, None)
    }

    /// Takes bytes written by the program.
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        self.total = self.total.saturating_add(bytes.len() as u64);
        let room = self.inline_limit.saturating_sub(self.inline.len());
        let overflowing = bytes.len() > room || self.file.is_some();
        if overflowing && self.file.is_none() && !self.file_failed {
            self.open_spill();
        }
        if self.file.is_some() {
            self.spill_bytes(bytes);
        }
        self.inline
            .extend_from_slice(&bytes[..room.min(bytes.len())]);
    }

    fn open_spill(&mut self) {
        let Some(target) = &self.spill else {
            self.file_failed = true;
            return;
        };
        // The file and its directory are entries of the sandbox.
        if !target.ledger.reserve(0, 2) {
            self.file_failed = true;
            return;
        }
        let dir = target.ledger.dir();
        let opened = (|| {
            if let Some(parent) = std::path::Path::new(&target.relative).parent()
                && !parent.as_os_str().is_empty()
            {
                dir.create_dir_all(parent)?;
            }
            let mut options = OpenOptions::new();
            options.write(true).create(true).truncate(true);
            dir.open_with(&target.relative, &options)
        })();
        match opened {
            Ok(file) => {
                self.file = Some(file);
                let inline = std::mem::take(&mut self.inline);
                self.spill_bytes(&inline);
                self.inline = inline;
            }
            Err(e) => {
                tracing::debug!(error = %e, "could not create the full-output file");
                self.file_failed = true;
            }
        }
    }

    fn spill_bytes(&mut self, bytes: &[u8]) {
        let Some(target) = &self.spill else {
            return;
        };
        let room = target.file_limit.saturating_sub(self.file_bytes) as usize;
        let take = room.min(bytes.len());
        if take == 0 {
            return;
        }
        if !target.ledger.reserve(take as u64, 0) {
            // The quota is full: the file ends here.
            self.file = None;
            self.file_failed = true;
            return;
        }
        if let Some(file) = &mut self.file {
            if file.write_all(&bytes[..take]).is_err() {
                self.file = None;
                self.file_failed = true;
                return;
            }
            self.file_bytes += take as u64;
        }
    }

    /// The captured text.
    pub(crate) fn finish(self) -> CapturedText {
        let truncated = self.total > self.inline.len() as u64;
        let mut bytes = self.inline;
        if truncated {
            // Do not end on half of a UTF-8 character.
            let valid = match std::str::from_utf8(&bytes) {
                Ok(_) => bytes.len(),
                Err(e) if e.error_len().is_none() => e.valid_up_to(),
                Err(_) => bytes.len(),
            };
            bytes.truncate(valid);
        }
        let full_output_path = match &self.spill {
            Some(target) if self.file_bytes > 0 => Some(format!("/{}", target.relative)),
            _ => None,
        };
        CapturedText {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            total_bytes: self.total,
            truncated,
            full_output_path: if truncated { full_output_path } else { None },
            saved_bytes: (truncated && self.file_bytes > 0).then_some(self.file_bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::budget::Budget;
    use crate::sandbox::quota::DiskQuota;
    use cap_std::ambient_authority;
    use cap_std::fs::Dir;

    #[test]
    fn short_output_is_kept_whole() {
        let mut c = OutputCapture::memory(10);
        c.push(b"abc");
        c.push(b"def");
        let t = c.finish();
        assert_eq!(t.text, "abcdef");
        assert!(!t.truncated);
        assert_eq!(t.total_bytes, 6);
    }

    #[test]
    fn long_output_is_cut_on_a_character_boundary_and_spilled_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let mut c = OutputCapture::new(
            5,
            Some(SpillTarget {
                ledger: ledger(tmp.path(), DiskQuota::unlimited()),
                relative: ".outputs/1-stdout.txt".into(),
                file_limit: 9,
            }),
        );
        c.push("abcdé".as_bytes()); // 6 bytes: é is two
        c.push(b"123456789");
        let t = c.finish();
        assert_eq!(t.text, "abcd");
        assert!(t.truncated);
        assert_eq!(t.total_bytes, 15);
        assert_eq!(
            t.full_output_path.as_deref(),
            Some("/.outputs/1-stdout.txt")
        );
        let saved = std::fs::read(tmp.path().join(".outputs/1-stdout.txt")).unwrap();
        assert_eq!(
            saved,
            "abcdé123".as_bytes(),
            "the file holds the stream up to its own limit"
        );
    }

    fn ledger(path: &std::path::Path, quota: DiskQuota) -> Arc<QuotaLedger> {
        let dir = Arc::new(Dir::open_ambient_dir(path, ambient_authority()).unwrap());
        QuotaLedger::new(dir, path, quota, Budget::unlimited())
    }

    #[test]
    fn the_output_file_stops_at_the_disk_quota() {
        let tmp = tempfile::tempdir().unwrap();
        let ledger = ledger(tmp.path(), DiskQuota::new(20_000, 100));
        let mut c = OutputCapture::new(
            10,
            Some(SpillTarget {
                ledger: ledger.clone(),
                relative: ".outputs/1-stdout.txt".into(),
                file_limit: 1 << 20,
            }),
        );
        for _ in 0..100 {
            c.push(&[b'x'; 1000]);
        }
        let t = c.finish();
        assert_eq!(t.total_bytes, 100_000);
        let on_disk = std::fs::metadata(tmp.path().join(".outputs/1-stdout.txt"))
            .unwrap()
            .len();
        assert!(
            on_disk <= 20_000,
            "{on_disk} bytes under a 20000-byte quota"
        );
        assert_eq!(t.saved_bytes, Some(on_disk));
        assert!(ledger.take_refused());
    }

    #[test]
    fn without_a_spill_target_overflow_is_only_counted() {
        let mut c = OutputCapture::memory(3);
        c.push(b"abcdef");
        let t = c.finish();
        assert_eq!(t.text, "abc");
        assert!(t.truncated);
        assert!(t.full_output_path.is_none());
    }
}
