//! [`Capture`]: one output stream of a remote execution, bounded like the
//! local backend's: the first bytes inline, the whole stream (up to the file
//! limit) kept aside so it can be saved in the sandbox when the inline part
//! overflows.

use crate::sandbox::CapturedText;

/// A bounded capture of one output stream.
#[derive(Debug)]
pub(crate) struct Capture {
    inline_limit: usize,
    file_limit: usize,
    inline: String,
    full: Vec<u8>,
    total: u64,
}

impl Capture {
    /// Keeps `inline_limit` bytes inline and up to `file_limit` bytes in all.
    pub(crate) fn new(inline_limit: usize, file_limit: u64) -> Self {
        Self {
            inline_limit,
            file_limit: usize::try_from(file_limit).unwrap_or(usize::MAX),
            inline: String::new(),
            full: Vec::new(),
            total: 0,
        }
    }

    /// Takes a chunk of text the program wrote.
    pub(crate) fn push(&mut self, text: &str) {
        self.total = self.total.saturating_add(text.len() as u64);
        // Once cut, the inline text stays cut: it is a prefix of the stream.
        if self.total - text.len() as u64 == self.inline.len() as u64 {
            let room = self.inline_limit.saturating_sub(self.inline.len());
            let mut take = room.min(text.len());
            while !text.is_char_boundary(take) {
                take -= 1;
            }
            self.inline.push_str(&text[..take]);
        }
        let room = self.file_limit.saturating_sub(self.full.len());
        self.full
            .extend_from_slice(&text.as_bytes()[..room.min(text.len())]);
    }

    /// The captured text, and the whole stream when the inline part is cut.
    pub(crate) fn finish(self) -> (CapturedText, Option<Vec<u8>>) {
        let truncated = self.total > self.inline.len() as u64;
        let text = CapturedText {
            text: self.inline,
            total_bytes: self.total,
            truncated,
            full_output_path: None,
            saved_bytes: None,
        };
        (text, truncated.then_some(self.full))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_cut_on_a_character_boundary_and_kept_whole_up_to_the_file_limit() {
        let mut c = Capture::new(5, 9);
        c.push("abcdé");
        c.push("123456789");
        let (text, full) = c.finish();
        assert_eq!(text.text, "abcd");
        assert!(text.truncated);
        assert_eq!(text.total_bytes, 15);
        assert_eq!(full.unwrap(), "abcdé123".as_bytes());
        let mut short = Capture::new(10, 10);
        short.push("hi");
        let (text, full) = short.finish();
        assert_eq!(text.text, "hi");
        assert!(!text.truncated && full.is_none());
    }
}
