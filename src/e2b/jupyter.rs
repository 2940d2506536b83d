//! The code interpreter's `/execute` call: a POST that answers with a stream
//! of newline-delimited JSON objects, each tagged by `type`, read as it comes
//! ([`LineSplitter`]) and bounded by the execution's deadline and its
//! cancellation. Unknown line types are skipped, as E2B's SDKs do.

use std::time::Duration;

use reqwest::{Client, Method, StatusCode};
use serde::{Deserialize, Deserializer};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::error::{E2bError, network_error};
use super::route::{JUPYTER_PORT, Route};
use super::transport::{Failure, refuse_redirect};

/// Longest single line accepted (a result may carry a large image).
const MAX_LINE_BYTES: usize = 64 << 20;

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

/// Cuts a byte stream into lines and parses each, keeping a partial tail.
#[derive(Debug, Default)]
pub(crate) struct LineSplitter {
    partial: Vec<u8>,
}

impl LineSplitter {
    /// Takes the next chunk; returns the lines it completed.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Result<Vec<Line>, String> {
        let mut lines = Vec::new();
        let mut rest = chunk;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            self.partial.extend_from_slice(&rest[..end]);
            rest = &rest[end + 1..];
            let line = std::mem::take(&mut self.partial);
            if let Some(parsed) = parse(&line) {
                lines.push(parsed);
            }
        }
        self.partial.extend_from_slice(rest);
        if self.partial.len() > MAX_LINE_BYTES {
            return Err(format!(
                "a line of the stream is longer than {} MiB",
                MAX_LINE_BYTES >> 20
            ));
        }
        Ok(lines)
    }

    /// The last line when the stream ended without a newline after it.
    pub(crate) fn finish(&mut self) -> Option<Line> {
        let line = std::mem::take(&mut self.partial);
        parse(&line)
    }
}

fn parse(line: &[u8]) -> Option<Line> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    match serde_json::from_slice(line) {
        Ok(parsed) => Some(parsed),
        Err(e) => {
            tracing::debug!(error = %e, "skipping an unreadable line of the execution stream");
            Some(Line::Unknown)
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
}

/// Runs `code` in the sandbox's default Python context, handing each line to
/// `on_line` as it arrives, until the stream ends, `deadline` passes or
/// `cancel` fires. Dropping the connection (on a timeout or cancellation)
/// makes the interpreter interrupt the code.
pub(crate) async fn execute(
    http: &Client,
    route: &Route,
    code: &str,
    deadline: Instant,
    cancel: &CancellationToken,
    mut on_line: impl FnMut(Line),
) -> Result<Ended, E2bError> {
    let what = "running code";
    let request = route
        .request(http, Method::POST, JUPYTER_PORT, "/execute")
        .json(&serde_json::json!({ "code": code }))
        .send();
    let mut response = tokio::select! {
        sent = request => sent.map_err(|e| network_error(what, e, Duration::ZERO))?,
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
    let mut splitter = LineSplitter::default();
    loop {
        let chunk = tokio::select! {
            chunk = response.chunk() => chunk,
            _ = tokio::time::sleep_until(deadline) => return Ok(Ended::TimedOut),
            _ = cancel.cancelled() => return Ok(Ended::Cancelled),
        };
        match chunk {
            Ok(Some(bytes)) => {
                let lines = splitter.push(&bytes).map_err(|detail| E2bError::Protocol {
                    what: what.to_owned(),
                    detail,
                })?;
                for line in lines {
                    if line == Line::EndOfExecution {
                        return Ok(Ended::Finished);
                    }
                    on_line(line);
                }
            }
            Ok(None) => {
                return Ok(match splitter.finish() {
                    Some(Line::EndOfExecution) => Ended::Finished,
                    other => {
                        if let Some(line) = other {
                            on_line(line);
                        }
                        Ended::Cut("the stream ended without end_of_execution".into())
                    }
                });
            }
            Err(e) => {
                return Ok(Ended::Cut(
                    network_error(what, e, Duration::ZERO).to_string(),
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            let mut splitter = LineSplitter::default();
            let mut lines = Vec::new();
            for chunk in stream.as_bytes().chunks(cut) {
                lines.extend(splitter.push(chunk).unwrap());
            }
            assert!(splitter.finish().is_none());
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
        let mut splitter = LineSplitter::default();
        assert!(
            splitter
                .push(b"{\"type\": \"end_of_exec")
                .unwrap()
                .is_empty()
        );
        assert!(splitter.push(b"ution\"}").unwrap().is_empty());
        assert_eq!(splitter.finish(), Some(Line::EndOfExecution));
    }
}
