//! [`Capture`]: one output stream of a remote execution, bounded like the
//! local backend's: its head and tail inline (a [`StreamClip`]), the whole
//! stream (up to the file limit) kept aside so it can be saved in the sandbox
//! when the inline part is cut.

use crate::sandbox::{CapturedText, OutputStream, OutputTap, StreamClip};

/// A bounded capture of one output stream.
pub(crate) struct Capture {
    clip: StreamClip,
    file_limit: usize,
    full: Vec<u8>,
    tap: Option<(OutputTap, OutputStream)>,
}

impl Capture {
    /// Keeps `inline_limit` bytes inline and up to `file_limit` bytes in all.
    pub(crate) fn new(inline_limit: usize, file_limit: u64) -> Self {
        Self {
            clip: StreamClip::new(inline_limit),
            file_limit: usize::try_from(file_limit).unwrap_or(usize::MAX),
            full: Vec::new(),
            tap: None,
        }
    }

    /// Also hands every chunk, as it arrives, to `tap` as `stream`.
    pub(crate) fn tapped(mut self, tap: Option<OutputTap>, stream: OutputStream) -> Self {
        self.tap = tap.map(|tap| (tap, stream));
        self
    }

    /// Takes a chunk of text the program wrote.
    pub(crate) fn push(&mut self, text: &str) {
        if let Some((tap, stream)) = &self.tap {
            tap.write(*stream, text.as_bytes());
        }
        self.clip.push(text.as_bytes());
        let room = self.file_limit.saturating_sub(self.full.len());
        self.full
            .extend_from_slice(&text.as_bytes()[..room.min(text.len())]);
    }

    /// The whole stream (up to the file limit) when the inline part is cut,
    /// to be saved; then [`Capture::finish`] says where it went.
    pub(crate) fn whole_if_cut(&mut self) -> Option<Vec<u8>> {
        self.clip.is_cut().then(|| std::mem::take(&mut self.full))
    }

    /// The captured text; `saved` is where the whole stream was saved, and
    /// how many bytes of it.
    pub(crate) fn finish(self, saved: Option<(String, u64)>) -> CapturedText {
        let total = self.clip.total();
        let whereabouts = match &saved {
            Some((path, bytes)) if *bytes < total => {
                format!("; its first {bytes} bytes are in {path} (the file limit stopped it)")
            }
            Some((path, _)) => format!(
                "; the whole stream is in {path}: read it in pages with read_file (offset, length)"
            ),
            None => String::new(),
        };
        CapturedText {
            text: self.clip.text(&whereabouts),
            total_bytes: total,
            truncated: self.clip.is_cut(),
            full_output_path: saved.as_ref().map(|(path, _)| path.clone()),
            saved_bytes: saved.map(|(_, bytes)| bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_keeps_its_head_and_tail_and_is_kept_whole_up_to_the_file_limit() {
        let mut c = Capture::new(200, 1000);
        for i in 0..100 {
            c.push(&format!("line {i:02}\n"));
        }
        let whole = c.whole_if_cut().unwrap();
        assert_eq!(whole.len(), 800);
        let text = c.finish(Some(("/out.txt".into(), 800)));
        assert!(text.truncated && text.text.len() <= 200);
        assert!(text.text.starts_with("line 00\n") && text.text.ends_with("line 99\n"));
        assert!(text.text.contains("/out.txt"), "{}", text.text);
        let mut short = Capture::new(10, 10);
        short.push("hi");
        assert!(short.whole_if_cut().is_none());
        let text = short.finish(None);
        assert_eq!(text.text, "hi");
        assert!(!text.truncated);
    }
}
