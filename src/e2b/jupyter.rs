//! The code interpreter's `/execute` call: a POST that answers with a stream
//! of newline-delimited JSON objects, each tagged by `type`, read as it comes
//! ([`LineSplitter`]) and bounded by the execution's deadline, its
//! cancellation, and [`StreamLimits`] (a line too long is skipped, a stream
//! too long is dropped). Unknown line types are skipped, as E2B's SDKs do.

use std::time::Duration;

use reqwest::{Client, Method, StatusCode};
use serde::{Deserialize, Deserializer};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::error::{E2bError, network_error};
use super::route::{JUPYTER_PORT, Route};
use super::transport::{Failure, parse_off_workers, refuse_redirect};
use crate::sandbox::ExecLimits;

/// The least room a line gets, whatever the limits (a result line carries
/// its value and every format of an image).
const MIN_LINE_BYTES: usize = 8 << 20;
/// The least room a whole stream gets, whatever the limits.
const MIN_STREAM_BYTES: u64 = 32 << 20;
/// How many bytes at the start of a skipped line are kept to tell its type.
const TYPE_PEEK_BYTES: usize = 256;

/// Bounds of one `/execute` stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StreamLimits {
    /// Longest line read; a longer one is skipped (and reported).
    pub max_line: usize,
    /// Most bytes read in all; past it the connection is dropped, which
    /// interrupts the code.
    pub max_total: u64,
}

impl Default for StreamLimits {
    /// The least bounds: 8 MiB a line, 32 MiB in all (for pip's log).
    fn default() -> Self {
        Self {
            max_line: MIN_LINE_BYTES,
            max_total: MIN_STREAM_BYTES,
        }
    }
}

impl StreamLimits {
    /// Bounds that fit what an execution under `limits` may return: a line
    /// holds an image in two formats (4 × the image limit covers base64 of
    /// both), and the stream eight times the output kept of each stream,
    /// every returnable image in three formats, and two of the longest lines.
    pub(crate) fn for_execution(limits: &ExecLimits) -> Self {
        let max_line = MIN_LINE_BYTES.max(limits.image_bytes.saturating_mul(4));
        let outputs = limits.output_file_bytes.saturating_mul(2 * 8);
        let images = (limits.max_images as u64).saturating_mul(3 * limits.image_bytes as u64);
        let lines = 2 * max_line as u64;
        Self {
            max_line,
            max_total: MIN_STREAM_BYTES.max(outputs.saturating_add(images).saturating_add(lines)),
        }
    }
}

/// One line of the `/execute` stream.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Line {
    /// The kernel accepted the cell.
    NumberOfExecutions {},
    /// A chunk of standard output.
    Stdout {
        /// The text (any part of a line, or several lines).
        #[serde(default)]
        text: String,
    },
    /// A chunk of standard error.
    Stderr {
        /// The text.
        #[serde(default)]
        text: String,
    },
    /// A rich value: the cell's final expression or a displayed object.
    Result(RichResult),
    /// The cell raised.
    Error {
        /// Exception class.
        #[serde(default)]
        name: String,
        /// Its message.
        #[serde(default)]
        value: String,
        /// The formatted traceback.
        #[serde(default, deserialize_with = "traceback")]
        traceback: String,
    },
    /// Sent during silences so that dead clients are noticed; ignored.
    Keepalive,
    /// The last line of a finished execution.
    EndOfExecution,
    /// A line longer than the stream's line limit, skipped unread (never
    /// sent by E2B as such).
    #[serde(skip)]
    Skipped {
        /// Its length in bytes.
        bytes: u64,
        /// Its `type`, when the start of the line said.
        kind: Option<String>,
    },
    /// Any other type (newer bridges may add some).
    #[serde(other)]
    Unknown,
}

/// A `result` line: one field per MIME type the value was rendered as.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default)]
pub(crate) struct RichResult {
    /// `text/plain` (one pair of surrounding quotes stripped by the bridge).
    pub text: Option<String>,
    /// `image/png`, base64.
    pub png: Option<String>,
    /// `image/jpeg`, base64.
    pub jpeg: Option<String>,
    /// `image/svg+xml`, as text.
    pub svg: Option<String>,
    /// `text/html`.
    pub html: Option<String>,
    /// `text/markdown`.
    pub markdown: Option<String>,
    /// Whether this is the value of the cell's final expression.
    pub is_main_result: bool,
}

/// A traceback, sent as one string (or, by older bridges, a list of lines).
fn traceback<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(match serde_json::Value::deserialize(d)? {
        serde_json::Value::String(s) => s,
        serde_json::Value::Array(lines) => lines
            .iter()
            .map(|l| l.as_str().map_or_else(|| l.to_string(), str::to_owned))
            .collect::<Vec<_>>()
            .join("\n"),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    })
}

/// What [`LineSplitter`] cut from the stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Piece {
    /// A whole line, not parsed yet.
    Line(Vec<u8>),
    /// A line over the limit, dropped as it came: its length and its type,
    /// when its start said.
    Skipped {
        /// Its length in bytes.
        bytes: u64,
        /// Its `type`.
        kind: Option<String>,
    },
}

/// Cuts a byte stream into lines, keeping a partial tail of at most
/// `max_line` bytes: a longer line is dropped as it arrives and reported as
/// [`Piece::Skipped`]. Linear in the bytes pushed.
#[derive(Debug)]
pub(crate) struct LineSplitter {
    max_line: usize,
    partial: Vec<u8>,
    /// Set while a line over the limit is being dropped: its length so far
    /// and its type.
    skipping: Option<(u64, Option<String>)>,
}

impl LineSplitter {
    /// A splitter that keeps lines of at most `max_line` bytes.
    pub(crate) fn new(max_line: usize) -> Self {
        Self {
            max_line,
            partial: Vec::new(),
            skipping: None,
        }
    }

    /// Takes the next chunk; returns the lines it completed.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Vec<Piece> {
        let mut pieces = Vec::new();
        let mut rest = chunk;
        loop {
            let end = rest.iter().position(|&b| b == b'\n');
            let segment = &rest[..end.unwrap_or(rest.len())];
            self.take_segment(segment);
            match end {
                Some(end) => {
                    pieces.extend(self.end_line());
                    rest = &rest[end + 1..];
                }
                None => return pieces,
            }
        }
    }

    /// Adds part of a line, or counts it when the line is being skipped.
    fn take_segment(&mut self, segment: &[u8]) {
        if let Some((bytes, _)) = &mut self.skipping {
            *bytes += segment.len() as u64;
        } else if self.partial.len() + segment.len() > self.max_line {
            let bytes = (self.partial.len() + segment.len()) as u64;
            // The line's start says its type; the rest of it is let go.
            let mut start = std::mem::take(&mut self.partial);
            start.truncate(TYPE_PEEK_BYTES);
            let peek = TYPE_PEEK_BYTES
                .saturating_sub(start.len())
                .min(segment.len());
            start.extend_from_slice(&segment[..peek]);
            self.skipping = Some((bytes, line_type(&start)));
        } else {
            self.partial.extend_from_slice(segment);
        }
    }

    /// Ends the current line.
    fn end_line(&mut self) -> Option<Piece> {
        if let Some((bytes, kind)) = self.skipping.take() {
            return Some(Piece::Skipped { bytes, kind });
        }
        let line = std::mem::take(&mut self.partial);
        (!line.iter().all(u8::is_ascii_whitespace)).then_some(Piece::Line(line))
    }

    /// The last line when the stream ended without a newline after it.
    pub(crate) fn finish(&mut self) -> Option<Piece> {
        self.end_line()
    }
}

/// The `type` a line's start names (`{"type": "error", ...`), if it does.
fn line_type(start: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(start);
    let after = &text[text.find("\"type\"")? + 6..];
    let after = after.trim_start().strip_prefix(':')?.trim_start();
    let value = after.strip_prefix('"')?;
    let name = &value[..value.find('"')?];
    (name.len() <= 64 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        .then(|| name.to_owned())
}

/// Parses a piece into a line (on a blocking thread when it is long).
async fn parse(piece: Piece) -> Line {
    match piece {
        Piece::Skipped { bytes, kind } => Line::Skipped { bytes, kind },
        Piece::Line(line) => parse_off_workers("running code", line, parse_line)
            .await
            .unwrap_or(Line::Unknown),
    }
}

fn parse_line(line: &[u8]) -> Line {
    match serde_json::from_slice(line) {
        Ok(parsed) => parsed,
        Err(e) => {
            tracing::debug!(error = %e, "skipping an unreadable line of the execution stream");
            Line::Unknown
        }
    }
}

/// How an execution's stream ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// With `end_of_execution`.
    Finished,
    /// The deadline passed; the connection was dropped.
    TimedOut,
    /// The caller cancelled; the connection was dropped.
    Cancelled,
    /// The stream broke off before `end_of_execution` (why, in words).
    Cut(String),
    /// The stream went past its total limit (this many bytes); the
    /// connection was dropped.
    Overflow(u64),
}

/// Runs `code` in the sandbox's default Python context, handing each line to
/// `on_line` as it arrives, until the stream ends, `deadline` passes,
/// `cancel` fires or the stream goes past `limits`. Dropping the connection
/// (on a timeout, a cancellation or an overflow) makes the interpreter
/// interrupt the code. `connect_bound` is the connect timeout `http` has,
/// named when a connection could not be opened in time.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn execute(
    http: &Client,
    connect_bound: Duration,
    route: &Route,
    code: &str,
    deadline: Instant,
    cancel: &CancellationToken,
    limits: StreamLimits,
    mut on_line: impl FnMut(Line),
) -> Result<Ended, E2bError> {
    let what = "running code";
    let request = route
        .request(http, Method::POST, JUPYTER_PORT, "/execute")
        .json(&serde_json::json!({ "code": code }))
        .send();
    let mut response = tokio::select! {
        sent = request => sent.map_err(|e| network_error(what, e, connect_bound))?,
        _ = tokio::time::sleep_until(deadline) => return Ok(Ended::TimedOut),
        _ = cancel.cancelled() => return Ok(Ended::Cancelled),
    };
    refuse_redirect(what, &response)?;
    if !response.status().is_success() {
        let failure = Failure::read(response).await;
        if failure.status == StatusCode::NOT_FOUND {
            return Err(E2bError::Protocol {
                what: what.to_owned(),
                detail: format!(
                    "the code interpreter has no such context ({})",
                    failure.message
                ),
            });
        }
        return Err(failure.into_sandbox_error(&route.id, what));
    }
    let mut splitter = LineSplitter::new(limits.max_line);
    let mut total: u64 = 0;
    loop {
        let chunk = tokio::select! {
            chunk = response.chunk() => chunk,
            _ = tokio::time::sleep_until(deadline) => return Ok(Ended::TimedOut),
            _ = cancel.cancelled() => return Ok(Ended::Cancelled),
        };
        let pieces = match chunk {
            Ok(Some(bytes)) => {
                total += bytes.len() as u64;
                if total > limits.max_total {
                    return Ok(Ended::Overflow(limits.max_total));
                }
                splitter.push(&bytes)
            }
            Ok(None) => {
                if let Some(piece) = splitter.finish() {
                    match parse(piece).await {
                        Line::EndOfExecution => return Ok(Ended::Finished),
                        line => on_line(line),
                    }
                }
                return Ok(Ended::Cut(
                    "the stream ended without end_of_execution".into(),
                ));
            }
            Err(e) => {
                return Ok(Ended::Cut(
                    network_error(what, e, connect_bound).to_string(),
                ));
            }
        };
        for piece in pieces {
            match parse(piece).await {
                Line::EndOfExecution => return Ok(Ended::Finished),
                line => on_line(line),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(pieces: Vec<Piece>) -> Vec<Line> {
        pieces
            .into_iter()
            .map(|p| match p {
                Piece::Line(l) => parse_line(&l),
                Piece::Skipped { bytes, kind } => Line::Skipped { bytes, kind },
            })
            .collect()
    }

    #[test]
    fn lines_are_parsed_across_chunk_boundaries() {
        let stream = concat!(
            "{\"type\": \"number_of_executions\", \"execution_count\": 3}\n",
            "{\"type\": \"stdout\", \"text\": \"hi\\n\", \"timestamp\": \"2026-08-21T10:00:00.123456+00:00\"}\n",
            "{\"type\": \"keepalive\"}\n",
            "{\"type\": \"some_future_type\", \"x\": 1}\n",
            "not json\n",
            "\n",
            "{\"type\": \"result\", \"text\": \"2\", \"png\": \"iVBO\", \"extra\": {}, \"is_main_result\": true}\n",
            "{\"type\": \"error\", \"name\": \"ValueError\", \"value\": \"x\", \"traceback\": [\"a\", \"b\"]}\n",
            "{\"type\": \"end_of_execution\"}\n",
        );
        for cut in [1, 7, 50, 1000] {
            let mut splitter = LineSplitter::new(1 << 20);
            let mut pieces = Vec::new();
            for chunk in stream.as_bytes().chunks(cut) {
                pieces.extend(splitter.push(chunk));
            }
            assert!(splitter.finish().is_none());
            let lines = lines(pieces);
            assert_eq!(lines.len(), 8, "chunks of {cut}");
            assert_eq!(lines[0], Line::NumberOfExecutions {});
            assert_eq!(
                lines[1],
                Line::Stdout {
                    text: "hi\n".into()
                }
            );
            assert_eq!(lines[2], Line::Keepalive);
            assert_eq!(lines[3], Line::Unknown);
            assert_eq!(lines[4], Line::Unknown);
            let Line::Result(r) = &lines[5] else {
                panic!("{:?}", lines[5])
            };
            assert_eq!(r.text.as_deref(), Some("2"));
            assert_eq!(r.png.as_deref(), Some("iVBO"));
            assert!(r.is_main_result);
            assert_eq!(
                lines[6],
                Line::Error {
                    name: "ValueError".into(),
                    value: "x".into(),
                    traceback: "a\nb".into()
                }
            );
            assert_eq!(lines[7], Line::EndOfExecution);
        }
    }

    #[test]
    fn a_last_line_without_newline_is_kept() {
        let mut splitter = LineSplitter::new(1 << 20);
        assert!(splitter.push(b"{\"type\": \"end_of_exec").is_empty());
        assert!(splitter.push(b"ution\"}").is_empty());
        let last = lines(splitter.finish().into_iter().collect());
        assert_eq!(last, [Line::EndOfExecution]);
    }

    #[test]
    fn a_line_over_the_limit_is_skipped_as_it_comes_and_its_type_told() {
        let long = format!(
            "{{\"type\": \"error\", \"value\": \"{}\"}}",
            "x".repeat(5000)
        );
        let stream = format!(
            "{{\"type\": \"stdout\", \"text\": \"a\"}}\n{long}\n{{\"type\": \"keepalive\"}}\n"
        );
        for cut in [1, 100, 3000, 100_000] {
            let mut splitter = LineSplitter::new(1000);
            let mut pieces = Vec::new();
            for chunk in stream.as_bytes().chunks(cut) {
                pieces.extend(splitter.push(chunk));
                assert!(splitter.partial.len() <= 1000, "chunks of {cut}");
            }
            let lines = lines(pieces);
            assert_eq!(lines.len(), 3, "chunks of {cut}");
            assert_eq!(
                lines[1],
                Line::Skipped {
                    bytes: long.len() as u64,
                    kind: Some("error".into())
                },
                "chunks of {cut}"
            );
            assert_eq!(lines[2], Line::Keepalive);
        }
        assert_eq!(line_type(b"{\"text\": 1}"), None);
        assert_eq!(line_type(b"{ \"type\" :\"result\""), Some("result".into()));
    }

    #[test]
    fn stream_limits_grow_with_the_execution_limits() {
        let mut limits = ExecLimits {
            timeout: Duration::from_secs(30),
            fuel: None,
            cpu: None,
            output_bytes: 1 << 20,
            output_file_bytes: 16 << 20,
            image_bytes: 512 << 10,
            max_images: 8,
        };
        let defaults = StreamLimits::for_execution(&limits);
        assert_eq!(defaults.max_line, 8 << 20);
        assert_eq!(defaults.max_total, (256 << 20) + (12 << 20) + (16 << 20));
        limits.output_file_bytes = 1 << 10;
        assert_eq!(StreamLimits::for_execution(&limits).max_total, 32 << 20);
        limits.image_bytes = 10 << 20;
        assert_eq!(StreamLimits::for_execution(&limits).max_line, 40 << 20);
    }
}
