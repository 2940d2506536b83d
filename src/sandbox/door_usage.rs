//! What one execution asked of the guest's door to the host (HTTP requests,
//! tool calls), as its result's usage lists it: records the door fills in
//! and every backend's results carry.

use schemars::JsonSchema;
use serde::Serialize;

/// What one execution asked through the guest's door to the host.
#[derive(Clone, Debug, Default, PartialEq, Serialize, JsonSchema)]
pub struct DoorUsage {
    /// Frames the guest sent (lists and calls, answered or refused).
    pub frames: u32,
    /// Tool calls the host ran.
    pub calls: u32,
    /// Time the host spent on them, in milliseconds (no fuel burns meanwhile).
    pub host_ms: f64,
    /// Each HTTP request made for the guest, redirect hops included, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<RequestRecord>,
    /// Requests made but not listed (past the first 100).
    #[serde(skip_serializing_if = "is_zero_u32")]
    pub requests_not_listed: u32,
    /// Each tool call the host ran, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallRecord>,
    /// Tool calls run but not listed (past the first 100).
    #[serde(skip_serializing_if = "is_zero_u32")]
    pub tool_calls_not_listed: u32,
}

/// One tool call the host ran for a guest.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
pub struct ToolCallRecord {
    /// The tool's name, as the guest called it (e.g. `http_request`, or an
    /// upstream's `<server>_<tool>`).
    pub tool: String,
    /// Time it took, in milliseconds.
    pub ms: f64,
    /// The failure's kind (`tool_error`, `timeout`, `denied`, ...) when it
    /// failed, or `cut` when the execution ended (timeout, cancel) during it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

/// One HTTP request made for a guest, or refused before it was sent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct RequestRecord {
    /// The method, e.g. `GET`.
    pub method: String,
    /// `scheme://host:port` of the request.
    pub host: String,
    /// The response's status (`None`: no response; see `refused` or `error`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Bytes of the response body read.
    pub bytes: u64,
    /// The rule that refused it, when one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// Sent, but the execution ended (its timeout, a cancel) before the
    /// response came.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cut: bool,
    /// The answer broke off before its body ended (`bytes` is what came).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub broken: bool,
}
