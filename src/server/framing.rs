//! The stdio framing guard: it sits between the client's byte streams and
//! rmcp, so that every line the client sends gets an answer.
//!
//! rmcp ignores a line that is not JSON and drops one longer than its limit
//! without a word, which leaves the client waiting for a reply that never
//! comes. The guard checks each line first: a well-formed one goes on to rmcp;
//! one that is not UTF-8 JSON is answered with a JSON-RPC parse error, and one
//! that is JSON but not a JSON-RPC 2.0 message with an "invalid request"
//! error; one longer than the limit is answered with an "invalid request" error naming its
//! size (with its id when the start of the line shows it) while its bytes are
//! skipped as they arrive, never held in memory.

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Bytes of an oversized line kept to look for its id.
const ID_WINDOW: usize = 64 << 10;

/// Streams for rmcp, with the guard running between them and the client.
pub struct Guarded {
    /// What rmcp reads: the client's lines that passed the checks.
    pub reader: tokio::io::DuplexStream,
    /// What rmcp writes: forwarded to the client line by line.
    pub writer: tokio::io::DuplexStream,
    /// Cancelled once the client's input has ended and everything before
    /// its end was passed on.
    pub input_ended: CancellationToken,
}

/// Starts the guard between `input`/`output` (the client) and the returned
/// streams (rmcp); lines longer than `max_line` bytes are refused.
pub fn guard<R, W>(input: R, output: W, max_line: usize) -> Guarded
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (rmcp_reader, to_rmcp) = tokio::io::duplex(1 << 20);
    let (from_rmcp, rmcp_writer) = tokio::io::duplex(1 << 20);
    let (errors_tx, errors_rx) = mpsc::unbounded_channel();
    tokio::spawn(forward_output(from_rmcp, errors_rx, output));
    let input_ended = CancellationToken::new();
    let ended = input_ended.clone();
    tokio::spawn(async move {
        check_input(input, to_rmcp, errors_tx, max_line).await;
        ended.cancel();
    });
    Guarded {
        reader: rmcp_reader,
        writer: rmcp_writer,
        input_ended,
    }
}

/// Writes rmcp's lines and the guard's own error replies to the client, each
/// line whole.
async fn forward_output<W: AsyncWrite + Unpin>(
    from_rmcp: tokio::io::DuplexStream,
    mut errors: mpsc::UnboundedReceiver<String>,
    mut output: W,
) {
    let mut lines = BufReader::new(from_rmcp);
    let mut line = Vec::new();
    let mut errors_open = true;
    loop {
        tokio::select! {
            read = lines.read_until(b'\n', &mut line) => {
                match read {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
                            break;
                        }
                        line.clear();
                    }
                }
            }
            error = errors.recv(), if errors_open => {
                match error {
                    Some(reply) => {
                        let reply = reply + "\n";
                        if output.write_all(reply.as_bytes()).await.is_err() || output.flush().await.is_err() {
                            break;
                        }
                    }
                    None => errors_open = false,
                }
            }
        }
    }
}

/// Reads the client's lines, passes the good ones to rmcp and answers the rest.
async fn check_input<R: AsyncRead + Unpin>(
    mut input: R,
    mut to_rmcp: tokio::io::DuplexStream,
    errors: mpsc::UnboundedSender<String>,
    max_line: usize,
) {
    let mut chunk = vec![0u8; 64 << 10];
    let mut line: Vec<u8> = Vec::new();
    let mut oversized: Option<usize> = None;
    loop {
        let n = match input.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut rest = &chunk[..n];
        while !rest.is_empty() {
            let (part, ended) = match rest.iter().position(|&b| b == b'\n') {
                Some(i) => (&rest[..i], true),
                None => (rest, false),
            };
            rest = if ended { &rest[part.len() + 1..] } else { &[] };
            match oversized.as_mut() {
                Some(total) => *total += part.len(),
                None if line.len() + part.len() > max_line => {
                    oversized = Some(line.len() + part.len());
                    let keep = ID_WINDOW.saturating_sub(line.len()).min(part.len());
                    line.extend_from_slice(&part[..keep]);
                    line.truncate(ID_WINDOW);
                    line.shrink_to(ID_WINDOW);
                }
                None => line.extend_from_slice(part),
            }
            if !ended {
                continue;
            }
            let verdict = match oversized.take() {
                Some(total) => Some(too_large(&line, total, max_line)),
                None => check_line(&line),
            };
            match verdict {
                Some(reply) => {
                    tracing::warn!("refused a malformed or oversized request line");
                    let _ = errors.send(reply);
                }
                None if !line.iter().all(u8::is_ascii_whitespace) => {
                    line.push(b'\n');
                    if to_rmcp.write_all(&line).await.is_err() {
                        return;
                    }
                }
                None => {}
            }
            line.clear();
            // A giant request should not pin its buffer for the whole session.
            if line.capacity() > 1 << 20 {
                line.shrink_to(64 << 10);
            }
        }
    }
    let _ = to_rmcp.shutdown().await;
}

/// The members of a JSON-RPC message that say what kind it is; the rest
/// (params, result, error) is skipped, not built (rmcp parses it next).
#[derive(serde::Deserialize)]
struct Envelope {
    jsonrpc: Option<serde_json::Value>,
    /// `Some(Null)` for `"id": null`, which is not a valid id; `None` when absent.
    #[serde(default, deserialize_with = "present")]
    id: Option<serde_json::Value>,
    method: Option<serde_json::Value>,
    result: Option<serde::de::IgnoredAny>,
    error: Option<serde::de::IgnoredAny>,
}

/// A member that is present, even as `null`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<serde_json::Value>, D::Error> {
    serde::Deserialize::deserialize(d).map(Some)
}

/// The error reply for a line that is not a JSON-RPC message, if it is not.
fn check_line(line: &[u8]) -> Option<String> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    let is_object = line.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    let parsed = std::str::from_utf8(line)
        .map_err(|e| e.to_string())
        .and_then(|_| {
            if is_object {
                serde_json::from_slice::<Envelope>(line).map(Some)
            } else {
                serde_json::from_slice::<serde::de::IgnoredAny>(line).map(|_| None)
            }
            .map_err(|e| e.to_string())
        });
    let envelope = match parsed {
        Ok(Some(envelope)) => envelope,
        Ok(None) => {
            return Some(error_reply(
                None,
                -32600,
                "invalid request: a JSON-RPC message must be a JSON object",
            ));
        }
        Err(e) => {
            return Some(error_reply(
                None,
                -32700,
                &format!("parse error: the line is not valid UTF-8 JSON ({e})"),
            ));
        }
    };
    let problem = envelope_problem(&envelope)?;
    let id = envelope
        .id
        .filter(|id| id.is_string() || id.is_i64() || id.is_u64());
    Some(error_reply(
        id,
        -32600,
        &format!("invalid request: {problem}"),
    ))
}

/// What makes an object not a JSON-RPC 2.0 request, notification or
/// response, if anything does.
fn envelope_problem(message: &Envelope) -> Option<&'static str> {
    if message.jsonrpc.as_ref().and_then(|v| v.as_str()) != Some("2.0") {
        return Some("\"jsonrpc\" must be \"2.0\"");
    }
    let id_ok = |id: &serde_json::Value| id.is_string() || id.is_i64() || id.is_u64();
    match (&message.method, &message.id) {
        (Some(method), _) if !method.is_string() => Some("\"method\" must be a string"),
        (Some(_), Some(id)) if !id_ok(id) => Some("\"id\" must be a string or an integer"),
        (Some(_), _) => None,
        (None, Some(_)) if message.result.is_some() || message.error.is_some() => None,
        (None, _) => Some(
            "a message needs a \"method\" (a request or notification) or an \"id\" with a \"result\" or \"error\" (a response)",
        ),
    }
}

fn too_large(start: &[u8], total: usize, max_line: usize) -> String {
    error_reply(
        find_id(start),
        -32600,
        &format!(
            "request too large: {total} bytes, over this server's limit of {max_line} bytes \
             (SANDBOX_MAX_REQUEST_BYTES); send large files in smaller pieces"
        ),
    )
}

fn error_reply(id: Option<serde_json::Value>, code: i64, message: &str) -> String {
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": id.unwrap_or(serde_json::Value::Null),
        "error": {"code": code, "message": message},
    })
    .to_string()
}

/// The request id in the start of a line, when it can be read there.
fn find_id(start: &[u8]) -> Option<serde_json::Value> {
    let text = String::from_utf8_lossy(start);
    let mut search = &text[..];
    while let Some(at) = search.find("\"id\"") {
        let after = search[at + 4..].trim_start();
        if let Some(value) = after.strip_prefix(':') {
            let value = value.trim_start();
            if let Some(quoted) = value.strip_prefix('"') {
                if let Some(end) = quoted.find('"') {
                    return Some(serde_json::Value::String(quoted[..end].to_owned()));
                }
            } else {
                let digits: String = value
                    .chars()
                    .take_while(|c| c.is_ascii_digit() || *c == '-')
                    .collect();
                if let Ok(n) = digits.parse::<i64>() {
                    return Some(serde_json::Value::from(n));
                }
            }
        }
        search = &search[at + 4..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn run(input: Vec<u8>, max_line: usize) -> (String, String) {
        let (client_out, server_in) = tokio::io::duplex(1 << 16);
        let (server_out, mut client_in) = tokio::io::duplex(1 << 16);
        let mut guarded = guard(server_in, server_out, max_line);
        let writer = tokio::spawn(async move {
            let mut client_out = client_out;
            client_out.write_all(&input).await.unwrap();
            client_out.shutdown().await.unwrap();
        });
        let mut passed = String::new();
        guarded.reader.read_to_string(&mut passed).await.unwrap();
        writer.await.unwrap();
        drop(guarded.writer);
        let mut replies = String::new();
        client_in.read_to_string(&mut replies).await.unwrap();
        (passed, replies)
    }

    #[tokio::test]
    async fn good_lines_pass_and_bad_ones_are_answered() {
        let mut input = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n".to_vec();
        input.extend_from_slice(b"{not json\n");
        input.extend_from_slice(b"\xff\xfe\n");
        input.extend_from_slice(b"[1,2]\n\n");
        input.extend_from_slice(
            b"{\"jsonrpc\":\"2.0\",\"id\":\"big\",\"method\":\"x\",\"params\":\"",
        );
        input.extend_from_slice(&vec![b'a'; 5000]);
        input.extend_from_slice(b"\"}\n{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\n");
        let (passed, replies) = run(input, 1000).await;
        assert_eq!(
            passed,
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"}\n"
        );
        let replies: Vec<serde_json::Value> = replies
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(replies.len(), 4, "{replies:?}");
        assert_eq!(replies[0]["error"]["code"], -32700);
        assert_eq!(replies[1]["error"]["code"], -32700);
        assert_eq!(replies[2]["error"]["code"], -32600);
        assert_eq!(replies[3]["id"], "big");
        assert!(
            replies[3]["error"]["message"]
                .as_str()
                .unwrap()
                .contains("5053 bytes")
        );
    }

    #[test]
    fn objects_that_are_not_json_rpc_are_answered_with_their_id() {
        for (line, id) in [
            (r#"{"foo": 1}"#, serde_json::Value::Null),
            (r#"{"jsonrpc":"2.0","id":5}"#, 5.into()),
            (r#"{"jsonrpc":"1.0","id":"a","method":"ping"}"#, "a".into()),
            (r#"{"jsonrpc":"2.0","id":7,"method":5}"#, 7.into()),
            (
                r#"{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}"#,
                serde_json::Value::Null,
            ),
            (
                r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
                serde_json::Value::Null,
            ),
        ] {
            let reply = check_line(line.as_bytes()).unwrap_or_else(|| panic!("{line} passed"));
            let reply: serde_json::Value = serde_json::from_str(&reply).unwrap();
            assert_eq!(reply["error"]["code"], -32600, "{line}");
            assert_eq!(reply["id"], id, "{line}");
        }
        for good in [
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":[1,2]}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":"x","result":{}}"#,
            r#"{"jsonrpc":"2.0","id":3,"error":{"code":1,"message":"m"}}"#,
        ] {
            assert!(check_line(good.as_bytes()).is_none(), "{good}");
        }
    }

    #[test]
    fn ids_are_found_in_the_start_of_a_line() {
        assert_eq!(find_id(br#"{"jsonrpc":"2.0","id": 42,"#), Some(42.into()));
        assert_eq!(find_id(br#"{"id":"abc","#), Some("abc".into()));
        assert_eq!(find_id(br#"{"params":{"x":1}"#), None);
    }
}
