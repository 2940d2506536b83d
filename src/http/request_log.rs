//! One log line per HTTP request: method, path, status, time, and the
//! principal and sandbox it concerns. Never the body, the query or a token.

use std::time::Instant;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;

use crate::server::caller::Caller;

/// Logs the request once it is answered.
pub async fn log(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let mcp_method = header(&request, "mcp-method");
    let sandbox = header(&request, "mcp-param-session-id");
    let principal = request
        .extensions()
        .get::<Caller>()
        .and_then(|caller| caller.owner.name().map(str::to_owned));
    let response = next.run(request).await;
    tracing::info!(
        target: "mcp_code_sandbox::http::request",
        %method,
        path,
        status = response.status().as_u16(),
        ms = started.elapsed().as_secs_f64() * 1000.0,
        principal = principal.as_deref().unwrap_or("-"),
        mcp_method = mcp_method.as_deref().unwrap_or("-"),
        sandbox = sandbox.as_deref().unwrap_or("-"),
        "request"
    );
    response
}

/// A header's value when it is short printable text (it is logged).
fn header(request: &Request, name: &str) -> Option<String> {
    let value = request.headers().get(name)?.to_str().ok()?;
    (value.len() <= 128 && value.chars().all(|c| c.is_ascii_graphic())).then(|| value.to_owned())
}
