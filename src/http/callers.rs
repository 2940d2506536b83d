//! Turns the [`Principal`] authorization attached to a request into the
//! [`Caller`] the tools read: its sandboxes' owner and its caps.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;

use crate::auth::Principal;
use crate::sandbox::{Owner, OwnerCaps};
use crate::server::caller::Caller;

/// Attaches the caller of a request that carries a principal.
pub async fn attach(mut request: Request, next: Next) -> Response {
    if let Some(principal) = request.extensions().get::<Principal>() {
        let caller = caller_of(principal);
        request.extensions_mut().insert(caller);
    }
    next.run(request).await
}

/// The caller a principal is.
pub fn caller_of(principal: &Principal) -> Caller {
    let limits = &principal.limits;
    Caller {
        owner: Owner::principal(&principal.name),
        caps: OwnerCaps {
            max_sandboxes: limits.max_sandboxes,
            max_memory_bytes: limits.max_memory_mb.map(|mb| mb.saturating_mul(1 << 20)),
            max_disk_bytes: limits.max_disk_mb.map(|mb| mb.saturating_mul(1 << 20)),
        },
    }
}
