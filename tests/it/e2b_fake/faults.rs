//! How an injected fault answers in place of the real answer.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::*;

/// What an injected fault answers; `None` when the real answer follows
/// (after a stall, or for a patch that the handler applies).
pub(super) async fn misbehave(fault: &Fault, sandbox_id: &str) -> Option<Response> {
    let status = StatusCode::from_u16(fault.status).unwrap_or(StatusCode::OK);
    let mut response = match &fault.act {
        Act::Proxy(message) => json_response(
            status,
            json!({"sandboxId": sandbox_id, "message": message, "code": fault.status}),
        ),
        Act::Stall(silence) => {
            tokio::time::sleep(*silence).await;
            return None;
        }
        Act::Patch(_) => return None,
        Act::Error => api_error(
            status,
            if fault.status == 429 {
                "Rate limit exceeded"
            } else {
                "injected failure"
            },
        ),
        Act::Redirect(to) => {
            let mut r = status.into_response();
            r.headers_mut()
                .insert("location", HeaderValue::from_str(to).unwrap());
            r
        }
        Act::Trickle => {
            let bytes = futures::stream::unfold(0u64, |n| async move {
                if n > 0 {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                let byte: &'static [u8] = if n == 0 { b"{" } else { b" " };
                Some((Ok::<_, std::io::Error>(Bytes::from_static(byte)), n + 1))
            });
            (status, Body::from_stream(bytes)).into_response()
        }
        Act::Huge(size) => {
            let head = Bytes::from_static(b"{\"sandboxID\":\"ihuge\",\"padding\":\"");
            let chunk = Bytes::from(vec![b'a'; 64 << 10]);
            let chunks = size / chunk.len() + 1;
            let body = futures::stream::iter(
                std::iter::once(head)
                    .chain(std::iter::repeat_n(chunk, chunks))
                    .chain(std::iter::once(Bytes::from_static(b"\"}")))
                    .map(Ok::<_, std::io::Error>),
            );
            (
                status,
                [("content-type", "application/json")],
                Body::from_stream(body),
            )
                .into_response()
        }
        Act::Listing(entries) => {
            let entries = *entries;
            let body = futures::stream::iter(
                std::iter::once(Bytes::from_static(b"{\"entries\":["))
                    .chain((0..entries).map(move |i| {
                        let comma = if i + 1 < entries { "," } else { "" };
                        Bytes::from(format!(
                            "{{\"name\":\"f{i:08}\",\"type\":\"FILE_TYPE_FILE\",\"path\":\"/home/user/big/f{i:08}\",\"size\":\"1\"}}{comma}"
                        ))
                    }))
                    .chain(std::iter::once(Bytes::from_static(b"]}")))
                    .map(Ok::<_, std::io::Error>),
            );
            (
                StatusCode::OK,
                [("content-type", "application/json")],
                Body::from_stream(body),
            )
                .into_response()
        }
    };
    if let Some(seconds) = fault.retry_after {
        response
            .headers_mut()
            .insert("retry-after", HeaderValue::from(seconds));
    }
    Some(response)
}
