//! [`for_each_line`]: reads a stream another program writes (an upstream's
//! stderr) line by line in memory bounded by the longest line kept, however
//! long its lines are: the head of a longer line is kept and the rest is
//! skipped as it arrives, never gathered first.

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// Bytes read from the stream at a time.
const CHUNK: usize = 8 << 10;

/// Hands `each` every line of `stream` (without its newline), cut to its
/// first `max` bytes, and whether it was cut; until the stream ends or fails.
/// At most `max` bytes of a line and one chunk of the stream are held.
pub async fn for_each_line<R: AsyncRead + Unpin>(
    stream: R,
    max: usize,
    mut each: impl FnMut(&[u8], bool),
) {
    let mut reader = BufReader::with_capacity(CHUNK, stream);
    let mut line: Vec<u8> = Vec::with_capacity(max.min(CHUNK));
    let mut cut = false;
    loop {
        let chunk = match reader.fill_buf().await {
            Ok(chunk) if !chunk.is_empty() => chunk,
            _ => break,
        };
        let newline = chunk.iter().position(|&b| b == b'\n');
        let piece = &chunk[..newline.unwrap_or(chunk.len())];
        let room = max.saturating_sub(line.len());
        if piece.len() > room {
            cut = true;
        }
        line.extend_from_slice(&piece[..piece.len().min(room)]);
        let used = newline.map_or(chunk.len(), |at| at + 1);
        reader.consume(used);
        if newline.is_some() {
            each(&line, cut);
            line.clear();
            cut = false;
        }
    }
    if !line.is_empty() || cut {
        each(&line, cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines_of(input: &[u8], max: usize) -> Vec<(String, bool)> {
        let mut seen = Vec::new();
        for_each_line(input, max, |line, cut| {
            seen.push((String::from_utf8_lossy(line).into_owned(), cut));
        })
        .await;
        seen
    }

    #[tokio::test]
    async fn lines_are_cut_to_their_head_and_the_rest_is_skipped() {
        assert_eq!(
            lines_of(b"one\ntwo\n", 10).await,
            [("one".into(), false), ("two".into(), false)]
        );
        assert_eq!(
            lines_of(b"abcdefghijkl\nshort\ntail", 5).await,
            [
                ("abcde".into(), true),
                ("short".into(), false),
                ("tail".into(), false)
            ]
        );
        assert_eq!(lines_of(b"", 5).await, []);
    }

    #[tokio::test]
    async fn a_line_of_many_megabytes_without_a_newline_holds_only_its_head() {
        // A reader that hands out 64 MiB of one line, a chunk at a time,
        // then a short line: only the head of the first is ever held.
        struct Flood {
            left: u64,
            ended: bool,
        }
        impl AsyncRead for Flood {
            fn poll_read(
                mut self: std::pin::Pin<&mut Self>,
                _: &mut std::task::Context<'_>,
                buf: &mut tokio::io::ReadBuf<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                if self.left > 0 {
                    let n = (buf.remaining() as u64).min(self.left) as usize;
                    buf.put_slice(&vec![b'e'; n]);
                    self.left -= n as u64;
                } else if !self.ended {
                    buf.put_slice(b"\nafter\n");
                    self.ended = true;
                }
                std::task::Poll::Ready(Ok(()))
            }
        }
        let mut seen = Vec::new();
        let flood = Flood {
            left: 64 << 20,
            ended: false,
        };
        for_each_line(flood, 1000, |line, cut| {
            seen.push((line.len(), cut));
        })
        .await;
        assert_eq!(seen, [(1000, true), (5, false)]);
    }
}
