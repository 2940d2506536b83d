//! Cutting text to a model-sized bound by leaving out its middle: values,
//! messages and tracebacks ([`cap_value_text`]), and output streams as they
//! are written ([`StreamClip`]). Both backends use these, so a result reads
//! the same whichever ran it (the local driver mirrors `cap_value_text` in
//! Python).

use super::shown_text::ShownText;
use super::types::ExecError;

/// Room [`cap_value_text`] keeps for its marker line, in bytes.
pub const MARKER_ROOM: usize = 80;

/// Cuts text to at most `limit` bytes by leaving out its middle: the head
/// and the tail are kept (each ending or starting at a line break when one is
/// near), with a marker line between them saying how much was left out. Both
/// backends cut values, exception messages and tracebacks with it (the local
/// backend's driver does the same in Python), so a result reads the same
/// whichever ran it, and a traceback keeps its last line.
pub fn cap_value_text(text: String, limit: usize) -> String {
    if rendered_len(text.as_bytes()) <= limit {
        return text;
    }
    let half = limit.saturating_sub(MARKER_ROOM) / 2;
    let bytes = text.as_bytes();
    head_and_tail(
        &bytes[..half],
        &bytes[bytes.len() - half..],
        bytes.len() as u64,
        "",
    )
}

/// The text of something `total` bytes long of which only `head` (its first
/// bytes) and `tail` (its last bytes) were kept: the head up to its last line
/// break when one is in its second half, a marker line saying how many bytes
/// are left out (followed by `whereabouts`, e.g. where the whole is), and the
/// tail from its first line break when one is in its first half. Neither
/// part ends in half a character.
pub fn head_and_tail(head: &[u8], tail: &[u8], total: u64, whereabouts: &str) -> String {
    let mut head_end = match std::str::from_utf8(head) {
        Ok(_) => head.len(),
        Err(e) => e.valid_up_to(),
    };
    if let Some(newline) = head[..head_end].iter().rposition(|&b| b == b'\n')
        && newline >= head_end / 2
    {
        head_end = newline + 1;
    }
    let mut tail_start = tail
        .iter()
        .position(|&b| b & 0xC0 != 0x80)
        .unwrap_or(tail.len());
    if let Some(newline) = tail[tail_start..].iter().position(|&b| b == b'\n')
        && newline < (tail.len() - tail_start) / 2
    {
        tail_start += newline + 1;
    }
    // What the model receives is escaped JSON: control characters and bytes
    // that are not UTF-8 take more room there than here, so each part is
    // cut to the room its raw length would take.
    head_end = fit_prefix(&head[..head_end], head.len());
    tail_start = tail.len() - fit_suffix(&tail[tail_start..], tail.len());
    let (head, tail) = (&head[..head_end], &tail[tail_start..]);
    let left_out = total.saturating_sub((head.len() + tail.len()) as u64);
    let break_before = if head.is_empty() || head.ends_with(b"\n") {
        ""
    } else {
        "\n"
    };
    format!(
        "{}{break_before}… [{left_out} of {total} bytes left out{whereabouts}] …\n{}",
        String::from_utf8_lossy(head),
        String::from_utf8_lossy(tail)
    )
}

/// Bytes `bytes` take in a result once decoded (a byte that is not UTF-8
/// becomes a 3-byte replacement character) and escaped in JSON (a control
/// character other than a line break or a tab becomes `\u00XX`).
pub fn rendered_len(bytes: &[u8]) -> usize {
    bytes
        .utf8_chunks()
        .map(|c| chunk_cost(c.valid()) + 3 * c.invalid().len())
        .sum()
}

fn chunk_cost(text: &str) -> usize {
    text.chars().map(char_cost).sum()
}

fn char_cost(c: char) -> usize {
    match c {
        '\n' | '\t' => 1,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// How many of the first bytes of `bytes` fit in `room` rendered bytes,
/// ending at a character boundary.
fn fit_prefix(bytes: &[u8], room: usize) -> usize {
    let (mut used, mut kept) = (0, 0);
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            used += char_cost(c);
            if used > room {
                return kept;
            }
            kept += c.len_utf8();
        }
        for _ in chunk.invalid() {
            used += 3;
            if used > room {
                return kept;
            }
            kept += 1;
        }
    }
    kept
}

/// How many of the last bytes of `bytes` fit in `room` rendered bytes,
/// starting at a character boundary.
fn fit_suffix(bytes: &[u8], room: usize) -> usize {
    // (raw length, rendered cost) of each character or stray byte, in order.
    let mut pieces: Vec<(usize, usize)> = Vec::new();
    for chunk in bytes.utf8_chunks() {
        pieces.extend(chunk.valid().chars().map(|c| (c.len_utf8(), char_cost(c))));
        pieces.extend(chunk.invalid().iter().map(|_| (1, 3)));
    }
    let (mut used, mut kept) = (0, 0);
    for (raw, cost) in pieces.into_iter().rev() {
        used += cost;
        if used > room {
            break;
        }
        kept += raw;
    }
    kept
}

/// An exception with its message and traceback cut to `limit` bytes each.
pub fn cap_exec_error(error: ExecError, limit: usize) -> ExecError {
    ExecError {
        name: cap_value_text(error.name, 256),
        value: cap_value_text(error.value, limit),
        traceback: cap_value_text(error.traceback, limit),
    }
}

/// An output stream as it is written, for a result of at most `limit`
/// bytes: what a notebook would show of it ([`ShownText`]: its head and
/// tail), and the first bytes as written, for a copy of the whole stream.
#[derive(Debug)]
pub struct StreamClip {
    limit: usize,
    /// The first `limit` bytes as written.
    written_head: Vec<u8>,
    /// Bytes written in all.
    total: u64,
    shown: ShownText,
}

impl StreamClip {
    /// Keeps enough of a stream for `limit` bytes of result.
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            written_head: Vec::new(),
            total: 0,
            shown: ShownText::new(limit, limit / 2),
        }
    }

    /// Takes bytes the program wrote.
    pub fn push(&mut self, bytes: &[u8]) {
        self.total = self.total.saturating_add(bytes.len() as u64);
        let room = self.limit.saturating_sub(self.written_head.len());
        self.written_head
            .extend_from_slice(&bytes[..room.min(bytes.len())]);
        self.shown.push(bytes);
    }

    /// Starts the stream again (a notebook's `clear_output()`): what is
    /// written from now on is all it holds.
    pub fn clear(&mut self) {
        *self = Self::new(self.limit);
    }

    /// The first bytes written, up to the limit, as written.
    pub fn head(&self) -> &[u8] {
        &self.written_head
    }

    /// Bytes written in all.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Whether more was written than the limit (what was written then
    /// deserves a copy of its own, whether or not what it shows is cut).
    pub fn overflowed(&self) -> bool {
        self.total > self.written_head.len() as u64
    }

    /// Whether what the stream shows is longer than the limit.
    pub fn is_cut(&self) -> bool {
        self.shown.is_cut()
    }

    /// The stream's text as a notebook shows it (see [`ShownText`]): whole,
    /// or its head and tail (with `whereabouts` after the marker, e.g. where
    /// the whole stream is) within the limit.
    pub fn text(&self, whereabouts: &str) -> String {
        let head = self.shown.head();
        if !self.shown.is_cut() && rendered_len(head) <= self.limit {
            return String::from_utf8_lossy(head).into_owned();
        }
        let half = self.limit.saturating_sub(MARKER_ROOM + whereabouts.len()) / 2;
        let tail = if self.shown.is_cut() {
            self.shown.tail()
        } else {
            head.to_vec()
        };
        head_and_tail(
            &head[..half.min(head.len())],
            &tail[tail.len().saturating_sub(half)..],
            self.shown.len(),
            whereabouts,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_text_keeps_its_head_and_tail_within_the_limit() {
        let rows: String = (0..1000).map(|i| format!("row {i:04}\n")).collect();
        let cut = cap_value_text(rows.clone(), 400);
        assert!(cut.len() <= 400, "{}", cut.len());
        assert!(cut.starts_with("row 0000\nrow 0001\n"), "{cut}");
        assert!(cut.ends_with("row 0998\nrow 0999\n"), "{cut}");
        assert!(
            cut.contains("bytes left out] …\nrow"),
            "the tail starts a line: {cut}"
        );
        let left_out: usize = cut
            .split("… [")
            .nth(1)
            .and_then(|m| m.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap();
        let kept = cut.len() - cut.lines().find(|l| l.contains("left out")).unwrap().len() - 1;
        assert_eq!(
            left_out + kept,
            rows.len(),
            "the marker counts what is missing"
        );
        assert_eq!(cap_value_text(rows.clone(), rows.len()), rows);
    }

    #[test]
    fn one_long_line_is_cut_in_its_middle_on_character_boundaries() {
        let line = "é".repeat(10_000);
        let cut = cap_value_text(line.clone(), 300);
        assert!(cut.len() <= 300);
        assert!(cut.starts_with("éé") && cut.ends_with("éé"), "{cut}");
        assert!(
            cut.contains(&format!("of {} bytes left out", line.len())),
            "{cut}"
        );
        assert!(
            cap_value_text(line, 10).starts_with("… ["),
            "a tiny limit keeps the marker"
        );
    }

    #[test]
    fn a_long_stream_keeps_its_head_and_tail_within_the_limit() {
        let mut clip = StreamClip::new(300);
        for i in 0..1000 {
            clip.push(format!("line {i:04}\n").as_bytes());
        }
        let text = clip.text("; the whole stream is in /x");
        assert!(text.len() <= 300, "{}", text.len());
        assert!(text.starts_with("line 0000\n"), "{text}");
        assert!(text.ends_with("line 0999\n"), "{text}");
        assert!(
            text.contains("bytes left out; the whole stream is in /x] …\nline"),
            "{text}"
        );
        let mut short = StreamClip::new(300);
        short.push(b"hi\n");
        assert!(!short.is_cut());
        assert_eq!(short.text("ignored"), "hi\n");
    }

    #[test]
    fn bytes_that_grow_in_a_result_are_cut_to_the_room_they_take_there() {
        for (what, bytes) in [
            ("not UTF-8", vec![0xffu8; 4000]),
            ("control characters", vec![0x01u8; 4000]),
        ] {
            let mut clip = StreamClip::new(1000);
            clip.push(&bytes);
            let text = clip.text("");
            let rendered = serde_json::to_string(&text).unwrap().len();
            assert!(rendered <= 1000 + 100, "{what}: {rendered} bytes in JSON");
            assert!(text.contains("bytes left out"), "{what}: {text}");
        }
        let mut short = StreamClip::new(1000);
        short.push(&[0xff; 400]);
        let text = short.text("");
        assert!(serde_json::to_string(&text).unwrap().len() <= 1100);
        assert!(
            text.contains("left out"),
            "under the limit raw, over it rendered"
        );
        let value = cap_value_text("\u{1}".repeat(4000), 1000);
        assert!(serde_json::to_string(&value).unwrap().len() <= 1100);
        let plain = cap_value_text("line\n".repeat(100), 1000);
        assert_eq!(plain, "line\n".repeat(100), "ordinary text is not cut");
    }
}
