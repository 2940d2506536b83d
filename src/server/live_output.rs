//! [`LiveOutput`]: an execution's output sent to the client while the code
//! runs, as progress messages, at a bounded rate and size.
//!
//! The guest's writes land in a small buffer per stream (the tap only copies
//! bytes and returns, so a chatty program is not slowed); a ticker sends what
//! gathered every [`TICK`], at most [`CHUNK_BYTES`] per stream per tick, and
//! at most [`MAX_LIVE_BYTES`] per execution. What does not fit is counted and
//! said; the result always holds the output as usual.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::sandbox::{OutputStream, OutputTap, Progress};

/// How often gathered output is sent.
pub const TICK: Duration = Duration::from_millis(250);
/// Most bytes of one stream sent in one message.
pub const CHUNK_BYTES: usize = 8 << 10;
/// Most bytes sent live for one execution.
pub const MAX_LIVE_BYTES: u64 = 256 << 10;

/// Output waiting to be sent.
#[derive(Default)]
struct Pending {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    /// Bytes that did not fit in a chunk since the last message.
    left_out: u64,
    /// Bytes accepted for sending so far.
    accepted: u64,
    /// Set once [`MAX_LIVE_BYTES`] was reached (and said).
    exhausted: bool,
}

impl Pending {
    fn take(&mut self, stream: OutputStream, bytes: &[u8]) {
        if self.exhausted {
            return;
        }
        let buffer = match stream {
            OutputStream::Stdout => &mut self.stdout,
            OutputStream::Stderr => &mut self.stderr,
        };
        let room = CHUNK_BYTES
            .saturating_sub(buffer.len())
            .min(usize::try_from(MAX_LIVE_BYTES - self.accepted).unwrap_or(usize::MAX));
        let kept = room.min(bytes.len());
        buffer.extend_from_slice(&bytes[..kept]);
        self.accepted += kept as u64;
        self.left_out += (bytes.len() - kept) as u64;
    }

    /// The messages to send now.
    fn drain(&mut self) -> Vec<String> {
        let mut messages = Vec::new();
        if let Some(text) = complete_text(&mut self.stdout) {
            messages.push(text);
        }
        if let Some(text) = complete_text(&mut self.stderr) {
            messages.push(format!("[stderr] {text}"));
        }
        if self.accepted >= MAX_LIVE_BYTES && !self.exhausted {
            self.exhausted = true;
            messages.push(format!(
                "[live output stops here, after {} KiB; the result has the output]",
                MAX_LIVE_BYTES >> 10
            ));
        } else if self.left_out > 0 {
            messages.push(format!(
                "[{} bytes not shown live (too fast); the result has them]",
                self.left_out
            ));
        }
        self.left_out = 0;
        messages
    }
}

/// The UTF-8 text at the start of `buffer`, taken out of it; an incomplete
/// character at the end waits for the rest. Invalid bytes are shown as �.
fn complete_text(buffer: &mut Vec<u8>) -> Option<String> {
    let end = match std::str::from_utf8(buffer) {
        Ok(_) => buffer.len(),
        Err(e) if e.error_len().is_none() && buffer.len() - e.valid_up_to() < 4 => e.valid_up_to(),
        Err(_) => buffer.len(),
    };
    if end == 0 {
        return None;
    }
    let rest = buffer.split_off(end);
    let text = String::from_utf8_lossy(buffer).into_owned();
    *buffer = rest;
    Some(text)
}

/// Output of one execution on its way to the client.
pub struct LiveOutput {
    pending: Arc<Mutex<Pending>>,
    ticker: tokio::task::JoinHandle<()>,
    sink: Progress,
}

impl LiveOutput {
    /// Starts sending output given to the returned tap as messages to `sink`.
    pub fn start(sink: Progress) -> (Self, OutputTap) {
        let pending = Arc::new(Mutex::new(Pending::default()));
        let tap = {
            let pending = pending.clone();
            OutputTap::new(move |stream, bytes| lock(&pending).take(stream, bytes))
        };
        let ticker = {
            let pending = pending.clone();
            let sink = sink.clone();
            tokio::spawn(async move {
                let mut ticks = tokio::time::interval(TICK);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    ticks.tick().await;
                    send(&pending, &sink);
                }
            })
        };
        (
            Self {
                pending,
                ticker,
                sink,
            },
            tap,
        )
    }

    /// Stops the ticker and sends what is left.
    pub fn finish(self) {
        self.ticker.abort();
        send(&self.pending, &self.sink);
    }
}

fn send(pending: &Mutex<Pending>, sink: &Progress) {
    let messages = lock(pending).drain();
    for message in messages {
        sink.report(message);
    }
}

fn lock(pending: &Mutex<Pending>) -> MutexGuard<'_, Pending> {
    pending
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_sent_in_bounded_chunks_and_the_rest_is_counted() {
        let mut pending = Pending::default();
        pending.take(OutputStream::Stdout, b"hello\n");
        pending.take(OutputStream::Stderr, b"oops\n");
        assert_eq!(pending.drain(), vec!["hello\n", "[stderr] oops\n"]);
        pending.take(OutputStream::Stdout, &vec![b'x'; CHUNK_BYTES + 10]);
        let messages = pending.drain();
        assert_eq!(messages[0].len(), CHUNK_BYTES);
        assert!(
            messages[1].contains("10 bytes not shown live"),
            "{messages:?}"
        );
        assert!(pending.drain().is_empty());
    }

    #[test]
    fn a_character_split_between_writes_waits_for_its_end() {
        let mut pending = Pending::default();
        let e_acute = "é".as_bytes();
        pending.take(OutputStream::Stdout, &[b'a', e_acute[0]]);
        assert_eq!(pending.drain(), vec!["a"]);
        pending.take(OutputStream::Stdout, &e_acute[1..]);
        assert_eq!(pending.drain(), vec!["é"]);
    }

    #[test]
    fn live_output_stops_at_its_total() {
        let mut pending = Pending::default();
        let mut sent = 0;
        let mut notes = Vec::new();
        for _ in 0..(MAX_LIVE_BYTES as usize / CHUNK_BYTES + 5) {
            pending.take(OutputStream::Stdout, &vec![b'y'; CHUNK_BYTES]);
            for m in pending.drain() {
                if m.starts_with('[') {
                    notes.push(m);
                } else {
                    sent += m.len() as u64;
                }
            }
        }
        assert_eq!(sent, MAX_LIVE_BYTES);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("live output stops here"));
    }
}
