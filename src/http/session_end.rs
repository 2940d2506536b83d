//! A session ended with `DELETE /mcp` is answered `204 No Content`. rmcp
//! answers `202 Accepted`, which the official Python client takes for a
//! failed termination (it logs "Session termination failed: 202"); the
//! Python and TypeScript clients both take 204.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

/// Turns the `202 Accepted` of an ended session into `204 No Content`.
pub async fn no_content(request: Request, next: Next) -> Response {
    let ending = request.method() == Method::DELETE;
    let mut response = next.run(request).await;
    if ending && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
        *response.body_mut() = Body::empty();
        response.headers_mut().remove(header::CONTENT_LENGTH);
        response.headers_mut().remove(header::CONTENT_TYPE);
    }
    response
}
