//! Sessions of the 2025-11-25 protocol belong to the principal that opened
//! them: a request naming another principal's `Mcp-Session-Id` (to send in
//! it, read its stream, or end it) gets the answer for a session that does
//! not exist. Only in use with authorization on.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::sandbox::Owner;
use crate::server::caller::Caller;

/// The header a session travels in.
const SESSION_HEADER: &str = "mcp-session-id";

/// Sessions unused this long are forgotten (rmcp closes them sooner).
const FORGET_AFTER: Duration = Duration::from_secs(3600);

/// Who opened each session, and when it was last used.
#[derive(Default)]
pub struct SessionOwners {
    opened: Mutex<HashMap<String, (Owner, Instant)>>,
}

impl SessionOwners {
    /// Whether `owner` may use `session`: it opened it, or nobody we know did
    /// (rmcp then answers for an unknown session itself).
    fn admits(&self, session: &str, owner: &Owner) -> bool {
        let mut opened = self.opened.lock().unwrap_or_else(|p| p.into_inner());
        match opened.get_mut(session) {
            Some((opener, used)) if opener == owner => {
                *used = Instant::now();
                true
            }
            Some(_) => false,
            None => true,
        }
    }

    /// Records that `owner` opened `session`.
    fn opened_by(&self, session: &str, owner: &Owner) {
        let mut opened = self.opened.lock().unwrap_or_else(|p| p.into_inner());
        opened.retain(|_, (_, used)| used.elapsed() < FORGET_AFTER);
        opened
            .entry(session.to_owned())
            .or_insert_with(|| (owner.clone(), Instant::now()));
    }
}

/// Refuses a request in another principal's session; records the sessions
/// a principal opens.
pub async fn guard(
    State(owners): State<Arc<SessionOwners>>,
    request: Request,
    next: Next,
) -> Response {
    let owner = request
        .extensions()
        .get::<Caller>()
        .map(|caller| caller.owner.clone())
        .unwrap_or_default();
    let named = session_of(request.headers());
    if let Some(session) = &named
        && !owners.admits(session, &owner)
    {
        // What rmcp answers for a session it does not know.
        return (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response();
    }
    let response = next.run(request).await;
    if named.is_none()
        && let Some(session) = session_of(response.headers())
    {
        owners.opened_by(&session, &owner);
    }
    response
}

fn session_of(headers: &axum::http::HeaderMap) -> Option<String> {
    headers
        .get(SESSION_HEADER)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}
