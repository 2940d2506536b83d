//! Sessions of the 2025-11-25 protocol belong to the principal that opened
//! them: a request naming another principal's `Mcp-Session-Id` (to send in
//! it, read its stream, or end it) gets the answer for a session that does
//! not exist. Each principal holds at most so many sessions at once, and
//! the server so many in all: a session opened past either cap is closed at
//! once and its `initialize` answered `429` with what to do.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::common::server_side_http::SessionId;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

use crate::config::SessionLimits;
use crate::sandbox::Owner;
use crate::server::caller::Caller;

/// The header a session travels in.
const SESSION_HEADER: &str = "mcp-session-id";

/// Who opened each session still open, and when it was last used.
pub struct SessionOwners {
    opened: Mutex<HashMap<String, (Owner, Instant)>>,
    manager: Arc<LocalSessionManager>,
    limits: SessionLimits,
}

impl SessionOwners {
    /// The owners of the sessions `manager` holds, within `limits`.
    pub fn new(manager: Arc<LocalSessionManager>, limits: SessionLimits) -> Self {
        Self {
            opened: Mutex::new(HashMap::new()),
            manager,
            limits,
        }
    }

    fn opened(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Owner, Instant)>> {
        self.opened.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `owner` may use `session`: it opened it, or nobody we know did
    /// (rmcp then answers for an unknown session itself).
    fn admits(&self, session: &str, owner: &Owner) -> bool {
        match self.opened().get_mut(session) {
            Some((opener, used)) if opener == owner => {
                *used = Instant::now();
                true
            }
            Some(_) => false,
            None => true,
        }
    }

    /// Records that `owner` opened `session`, unless that takes it (or the
    /// server) past its cap: then the refusal to answer with.
    async fn opened_by(&self, session: &str, owner: &Owner) -> Result<(), String> {
        let live = self.live_sessions().await;
        let refusal = {
            let mut opened = self.opened();
            // Sessions rmcp has closed (ended, idle, failed) are forgotten.
            opened.retain(|id, _| live.contains(id.as_str()) || id == session);
            let held = opened.values().filter(|(o, _)| o == owner).count();
            if held >= self.limits.per_principal {
                Some(format!(
                    "Too Many Requests: this principal already holds {held} sessions, the most it may hold at once (SANDBOX_HTTP_MAX_SESSIONS_PER_PRINCIPAL); end one (DELETE /mcp with its Mcp-Session-Id) or wait until an idle one is closed, then initialize again"
                ))
            } else if opened.len() >= self.limits.total {
                Some(format!(
                    "Too Many Requests: the server already holds {} sessions, the most it holds at once (SANDBOX_HTTP_MAX_SESSIONS); try again when some have ended",
                    opened.len()
                ))
            } else {
                opened.insert(session.to_owned(), (owner.clone(), Instant::now()));
                None
            }
        };
        match refusal {
            Some(why) => {
                let id: SessionId = session.into();
                if let Err(e) = self.manager.close_session(&id).await {
                    tracing::debug!(error = %e, "closing a session over the cap");
                }
                Err(why)
            }
            None => Ok(()),
        }
    }

    /// The sessions rmcp holds now.
    async fn live_sessions(&self) -> HashSet<String> {
        let sessions = self.manager.sessions.read().await;
        sessions.keys().map(|id| id.to_string()).collect()
    }
}

/// Refuses a request in another principal's session; records the sessions
/// a principal opens, and closes one past the caps.
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
        && let Err(why) = owners.opened_by(&session, &owner).await
    {
        tracing::info!(principal = ?owner, "a session over the cap was closed");
        return (StatusCode::TOO_MANY_REQUESTS, why).into_response();
    }
    response
}

fn session_of(headers: &axum::http::HeaderMap) -> Option<String> {
    headers
        .get(SESSION_HEADER)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}
