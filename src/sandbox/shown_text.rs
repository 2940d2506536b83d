//! [`ShownText`]: an output stream as a notebook shows it, taken in as it
//! is written, of which only the head and the tail are kept.
//!
//! A carriage return followed by more text on the same line starts that
//! line again (a progress bar redrawn shows its last state, as Jupyter shows
//! it); carriage returns just before a line break are that line break
//! (`\r\n`, `\r\r\n`). The stream is read this way as it arrives, so whether
//! a result is cut depends on what a notebook would show, not on how many
//! times a line was redrawn.

use std::collections::VecDeque;

/// The shown text of a stream: its first bytes, its last bytes, and its
/// length.
#[derive(Debug)]
pub struct ShownText {
    /// Most bytes of the head kept.
    head_room: usize,
    /// Most bytes of the tail kept.
    tail_room: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    /// Bytes shown in all.
    shown: u64,
    /// Bytes shown of the line being written.
    line: u64,
    /// A carriage return was written and what follows it not yet.
    after_return: bool,
}

impl ShownText {
    /// Keeps up to `head_room` bytes of its start and `tail_room` of its end.
    pub fn new(head_room: usize, tail_room: usize) -> Self {
        Self {
            head_room,
            tail_room,
            head: Vec::new(),
            tail: VecDeque::new(),
            shown: 0,
            line: 0,
            after_return: false,
        }
    }

    /// Takes bytes the program wrote.
    pub fn push(&mut self, bytes: &[u8]) {
        let mut rest = bytes;
        while let Some(at) = rest.iter().position(|&b| b == b'\r') {
            self.take(&rest[..at]);
            self.after_return = true;
            rest = &rest[at + 1..];
        }
        self.take(rest);
    }

    /// Takes `piece` (no carriage return in it), which follows a carriage
    /// return when `after_return` is set.
    fn take(&mut self, piece: &[u8]) {
        let Some(&first) = piece.first() else {
            return;
        };
        if std::mem::take(&mut self.after_return) && first != b'\n' {
            self.start_line_again();
        }
        if self.head.len() as u64 == self.shown {
            let room = self.head_room.saturating_sub(self.head.len());
            self.head.extend_from_slice(&piece[..room.min(piece.len())]);
        }
        self.tail
            .extend(&piece[piece.len().saturating_sub(self.tail_room)..]);
        let excess = self.tail.len().saturating_sub(self.tail_room);
        self.tail.drain(..excess);
        self.shown += piece.len() as u64;
        self.line = match piece.iter().rposition(|&b| b == b'\n') {
            Some(at) => (piece.len() - at - 1) as u64,
            None => self.line + piece.len() as u64,
        };
    }

    /// Forgets the line being written (a carriage return came back to its
    /// start, and more text follows).
    fn start_line_again(&mut self) {
        self.shown = self.shown.saturating_sub(self.line);
        if self.head.len() as u64 > self.shown {
            self.head.truncate(self.shown as usize);
        }
        let drop = usize::try_from(self.line).map_or(self.tail.len(), |n| n.min(self.tail.len()));
        self.tail.truncate(self.tail.len() - drop);
        self.line = 0;
    }

    /// Bytes the stream shows.
    pub fn len(&self) -> u64 {
        self.shown
    }

    /// Whether it shows nothing.
    pub fn is_empty(&self) -> bool {
        self.shown == 0
    }

    /// Its first bytes (all of it when it is not cut).
    pub fn head(&self) -> &[u8] {
        &self.head
    }

    /// Its last bytes.
    pub fn tail(&self) -> Vec<u8> {
        self.tail.iter().copied().collect()
    }

    /// Whether it shows more than its head holds.
    pub fn is_cut(&self) -> bool {
        self.shown > self.head.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a stream shows, read all at once: each line is what follows its
    /// last carriage return that more text follows (returns at its end are
    /// part of its line break, or nothing).
    fn reference(bytes: &[u8]) -> Vec<u8> {
        let mut shown = Vec::new();
        for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
            if i > 0 {
                shown.push(b'\n');
            }
            let end = line
                .iter()
                .rposition(|&b| b != b'\r')
                .map_or(0, |at| at + 1);
            let line = &line[..end];
            let start = line
                .iter()
                .rposition(|&b| b == b'\r')
                .map_or(0, |at| at + 1);
            shown.extend_from_slice(&line[start..]);
        }
        shown
    }

    proptest::proptest! {
        /// However a stream is split into writes and however small the room,
        /// its head is the start of what it shows (all of it when it is not
        /// cut) and its tail an end of it.
        #[test]
        fn the_shown_text_does_not_depend_on_how_the_stream_was_written(
            bytes in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just(b'a'),
                    proptest::strategy::Just(b'b'),
                    proptest::strategy::Just(b'\r'),
                    proptest::strategy::Just(b'\n'),
                ],
                0..300,
            ),
            cuts in proptest::collection::vec(0usize..300, 0..8),
            room in 1usize..64,
        ) {
            let expected = reference(&bytes);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(bytes.len())).collect();
            cuts.sort_unstable();
            for (head_room, tail_room) in [(1 << 20, 1 << 19), (room, room / 2 + 1)] {
                let mut text = ShownText::new(head_room, tail_room);
                let mut at = 0;
                for &cut in cuts.iter().chain([bytes.len()].iter()) {
                    text.push(&bytes[at..cut]);
                    at = cut;
                }
                proptest::prop_assert_eq!(text.len(), expected.len() as u64);
                proptest::prop_assert_eq!(text.is_cut(), expected.len() > head_room);
                proptest::prop_assert!(expected.starts_with(text.head()));
                if !text.is_cut() {
                    proptest::prop_assert_eq!(text.head(), &expected[..]);
                }
                proptest::prop_assert!(expected.ends_with(&text.tail()));
            }
        }
    }

    fn shown(chunks: &[&str]) -> String {
        let mut text = ShownText::new(1 << 20, 1 << 19);
        for chunk in chunks {
            text.push(chunk.as_bytes());
        }
        String::from_utf8(text.head().to_vec()).unwrap()
    }

    #[test]
    fn a_line_started_again_shows_its_last_version() {
        assert_eq!(shown(&["step 1\rstep 2\rstep 3\ndone\n"]), "step 3\ndone\n");
        assert_eq!(shown(&["\r0%", "\r50%", "\r100%"]), "100%");
        assert_eq!(shown(&["é\rü\n"]), "ü\n");
        assert_eq!(shown(&["plain\ntext"]), "plain\ntext");
        // A return written at the end of one chunk and the text after it in
        // the next.
        assert_eq!(shown(&["loading\r", "ready\n"]), "ready\n");
    }

    #[test]
    fn returns_before_a_line_break_are_that_line_break() {
        assert_eq!(shown(&["a,b\r\n1,2\r\n"]), "a,b\n1,2\n");
        assert_eq!(shown(&["hello\r\r\nworld\r\r\n"]), "hello\nworld\n");
        assert_eq!(shown(&["hello\r", "\nworld"]), "hello\nworld");
    }

    #[test]
    fn what_is_cut_is_what_a_notebook_would_show() {
        // 10 epochs of 101 redrawn progress states each: 68 KB written, about
        // 1 KB shown, so nothing is cut.
        let mut text = ShownText::new(16 << 10, 8 << 10);
        for epoch in 0..10 {
            for step in 0..=100 {
                text.push(
                    format!(
                        "\repoch {epoch} [{}{}] {step}%",
                        "#".repeat(step / 2),
                        ".".repeat(50 - step / 2)
                    )
                    .as_bytes(),
                );
            }
            text.push(format!("\nepoch {epoch} done: loss=0.{epoch}\n").as_bytes());
        }
        assert!(!text.is_cut(), "{} bytes shown", text.len());
        let head = String::from_utf8(text.head().to_vec()).unwrap();
        for epoch in 0..10 {
            assert!(head.contains(&format!("epoch {epoch} done")), "{head}");
        }
        assert!(!head.contains("99%"), "{head}");

        // A line longer than the head, started again: the head has room again.
        let mut text = ShownText::new(100, 50);
        text.push(&[b'x'; 500]);
        assert!(text.is_cut());
        text.push(b"\rdone\n");
        assert!(!text.is_cut());
        assert_eq!(text.head(), b"done\n");
        assert_eq!(text.tail(), b"done\n");
    }
}
