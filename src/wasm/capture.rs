//! [`OutputCapture`]: one output stream of one execution, bounded.
//!
//! Up to `inline` bytes are returned with the result: the whole stream when
//! it fits, else its head and its tail, with a marker between them saying how
//! much was left out and where the whole is. When the program writes more,
//! the whole stream is written to a file in the sandbox, up to `file_limit`
//! bytes, so the model can page through it with `read_file` instead of
//! flooding its context; bytes past that are only counted. The file is the
//! sandbox's like any other: every block it grows by is booked with its
//! quota ledger first, and the file stops where the quota
//! (or the server's disk budget) is full. The guest is never blocked or failed
//! by any of this.

use std::io::Write;
use std::sync::Arc;

use cap_std::fs::OpenOptions;

use crate::sandbox::quota::QuotaLedger;
use crate::sandbox::server_files::LiveFile;
use crate::sandbox::{CapturedText, OutputStream, OutputTap, StreamClip};

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
    /// What of the stream is returned inline.
    clip: StreamClip,
    spill: Option<SpillTarget>,
    file: Option<Arc<LiveFile>>,
    file_bytes: u64,
    file_failed: bool,
    /// The file gave way to the sandbox's own files (it is gone).
    gave_way: bool,
    tap: Option<(OutputTap, OutputStream)>,
}

impl OutputCapture {
    /// Keeps up to `inline_limit` bytes; spills to `spill` past that.
    pub(crate) fn new(inline_limit: usize, spill: Option<SpillTarget>) -> Self {
        Self {
            clip: StreamClip::new(inline_limit),
            spill,
            file: None,
            file_bytes: 0,
            file_failed: false,
            gave_way: false,
            tap: None,
        }
    }

    /// Also hands every write, as it happens, to `tap` as `stream`.
    pub(crate) fn tapped(mut self, tap: Option<OutputTap>, stream: OutputStream) -> Self {
        self.tap = tap.map(|tap| (tap, stream));
        self
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
        if let Some((tap, stream)) = &self.tap {
            tap.write(*stream, bytes);
        }
        let before = self.clip.total();
        self.clip.push(bytes);
        if self.clip.overflowed() && self.file.is_none() && !self.file_failed {
            self.open_spill(before);
        }
        if self.file.is_some() {
            self.spill_bytes(bytes);
        }
    }

    /// Starts the stream again, as a notebook clears a cell's output: the
    /// result holds what is written from now on, and the copy of the whole
    /// stream, if one was begun, goes (a later overflow begins another).
    pub(crate) fn clear_shown(&mut self) {
        self.clip.clear();
        if self.file.take().is_some()
            && let Some(target) = &self.spill
        {
            if let Err(e) = target.ledger.dir().remove_file(&target.relative) {
                tracing::debug!(error = %e, "could not remove a cleared output's copy");
            }
            // The file's blocks are free again: the next reservation measures.
            target.ledger.forget();
        }
        self.file_bytes = 0;
        self.file_failed = false;
        self.gave_way = false;
    }

    /// Opens the whole-output file and writes into it the `earlier` bytes the
    /// stream held before the write that overflowed it.
    fn open_spill(&mut self, earlier: u64) {
        let Some(target) = &self.spill else {
            self.file_failed = true;
            return;
        };
        // The file and its directory are entries of the sandbox (the
        // directory takes a block).
        let block = target.ledger.allocation().block;
        if !target.ledger.reserve_server(block, 2) {
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
            // Whatever the sandbox put at that name (a link to another of its
            // files, say) is replaced, never written through.
            match dir.remove_file(&target.relative) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
            let mut options = OpenOptions::new();
            options.write(true).create_new(true);
            dir.open_with(&target.relative, &options)
        })();
        match opened {
            Ok(file) => {
                let name = std::path::Path::new(&target.relative)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                self.file = Some(target.ledger.server_files().live(&name, file));
                let earlier = self.clip.head()[..earlier as usize].to_vec();
                self.spill_bytes(&earlier);
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
        // It gave way to the sandbox's own files: it is gone, and stops.
        if self.file.as_ref().is_some_and(|f| f.gave_way()) {
            self.file = None;
            self.file_failed = true;
            self.gave_way = true;
            return;
        }
        let room = target.file_limit.saturating_sub(self.file_bytes) as usize;
        let take = room.min(bytes.len());
        if take == 0 {
            return;
        }
        // The file only grows at its end, so it takes the blocks past those
        // it holds already.
        let takes = target
            .ledger
            .allocation()
            .append_takes(self.file_bytes, take as u64);
        if !target.ledger.reserve_server(takes, 0) {
            // The quota is full: the file ends here.
            self.file = None;
            self.file_failed = true;
            return;
        }
        if let Some(file) = &self.file {
            let mut out = file.file();
            if out.write_all(&bytes[..take]).is_err() {
                self.file = None;
                self.file_failed = true;
                return;
            }
            self.file_bytes += take as u64;
        }
    }

    /// The captured text: the whole stream, or its head and tail around a
    /// marker that says where the whole is.
    pub(crate) fn finish(self) -> CapturedText {
        let truncated = self.clip.is_cut();
        let gave_way = self.gave_way || self.file.as_ref().is_some_and(|f| f.gave_way());
        let full_output_path = match &self.spill {
            Some(target) if truncated && self.file_bytes > 0 && !gave_way => {
                Some(format!("/{}", target.relative))
            }
            _ => None,
        };
        let saved_bytes = full_output_path.as_ref().map(|_| self.file_bytes);
        let total = self.clip.total();
        CapturedText {
            text: self.clip.text(&if gave_way {
                "; its saved copy gave way to the sandbox's own files, which needed the room"
                    .to_owned()
            } else {
                whereabouts(full_output_path.as_deref(), saved_bytes, total)
            }),
            total_bytes: total,
            truncated,
            full_output_path,
            saved_bytes,
        }
    }
}

/// Where the whole of a cut stream is, for the marker in its text.
fn whereabouts(path: Option<&str>, saved: Option<u64>, total: u64) -> String {
    match (path, saved) {
        (Some(path), Some(saved)) if saved < total => format!(
            "; its first {saved} bytes are in {path} (the file limit or the disk quota stopped it)"
        ),
        (Some(path), _) => {
            format!(
                "; the whole stream is in {path}: read it in pages with read_file (offset, length)"
            )
        }
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::MARKER_ROOM;
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
    fn long_output_keeps_its_head_and_tail_and_is_spilled_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let mut c = OutputCapture::new(
            MARKER_ROOM + 200,
            Some(SpillTarget {
                ledger: ledger(tmp.path(), DiskQuota::unlimited()),
                relative: ".outputs/1-stdout.txt".into(),
                file_limit: 1000,
            }),
        );
        c.push("éééééé".as_bytes()); // two bytes each
        for i in 0..50 {
            c.push(format!("line {i:02}\n").as_bytes());
        }
        let t = c.finish();
        assert!(t.truncated);
        assert_eq!(t.total_bytes, 12 + 50 * 8);
        assert!(t.text.starts_with("ééééé"), "{}", t.text);
        assert!(
            t.text.ends_with("line 49\n"),
            "the tail is kept: {}",
            t.text
        );
        assert!(
            t.text
                .contains("bytes left out; the whole stream is in /.outputs/1-stdout.txt"),
            "{}",
            t.text
        );
        assert_eq!(
            t.full_output_path.as_deref(),
            Some("/.outputs/1-stdout.txt")
        );
        let saved = std::fs::read(tmp.path().join(".outputs/1-stdout.txt")).unwrap();
        assert_eq!(saved.len(), 412, "the file holds the whole stream");
    }

    fn ledger(path: &std::path::Path, quota: DiskQuota) -> Arc<QuotaLedger> {
        let dir = Arc::new(Dir::open_ambient_dir(path, ambient_authority()).unwrap());
        QuotaLedger::new(
            dir,
            path,
            quota,
            crate::sandbox::allocation::Allocation::default(),
            Budget::unlimited(),
        )
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
        assert!(t.text.contains("the disk quota stopped it"), "{}", t.text);
        // The code wrote nothing that failed: its call reports no disk limit.
        assert!(!ledger.take_refused());
    }

    #[test]
    fn links_planted_at_the_output_file_are_replaced_not_written_through() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join(".outputs")).unwrap();
        std::fs::write(tmp.path().join("precious.txt"), "keep me").unwrap();
        std::fs::write(tmp.path().join("linked.txt"), "keep me too").unwrap();
        std::os::unix::fs::symlink("../precious.txt", tmp.path().join(".outputs/1-stdout.txt"))
            .unwrap();
        std::fs::hard_link(
            tmp.path().join("linked.txt"),
            tmp.path().join(".outputs/1-stderr.txt"),
        )
        .unwrap();
        for stream in ["stdout", "stderr"] {
            let mut c = OutputCapture::new(
                10,
                Some(SpillTarget {
                    ledger: ledger(tmp.path(), DiskQuota::unlimited()),
                    relative: format!(".outputs/1-{stream}.txt"),
                    file_limit: 1 << 20,
                }),
            );
            c.push(&[b'x'; 1000]);
            assert!(c.finish().truncated);
            let saved = tmp.path().join(format!(".outputs/1-{stream}.txt"));
            assert!(!saved.symlink_metadata().unwrap().is_symlink());
            assert_eq!(std::fs::read(&saved).unwrap().len(), 1000);
        }
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("precious.txt")).unwrap(),
            "keep me"
        );
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("linked.txt")).unwrap(),
            "keep me too"
        );
    }

    #[test]
    fn without_a_spill_target_overflow_is_only_counted() {
        let mut c = OutputCapture::memory(MARKER_ROOM + 6);
        c.push(&[b'a'; 100]);
        c.push(b"xyz");
        let t = c.finish();
        assert_eq!(t.text, "aaa\n… [97 of 103 bytes left out] …\nxyz");
        assert!(t.truncated);
        assert!(t.full_output_path.is_none());
    }
}
