//! [`Caller`]: who sent a request. Over HTTP with authorization, the layer in
//! front of `/mcp` attaches one to every request it lets through (rmcp hands
//! the request's HTTP parts to the tools); on stdio and unauthenticated HTTP
//! there is one user, who is anyone.

use rmcp::RoleServer;
use rmcp::service::RequestContext;

use crate::sandbox::{Owner, OwnerCaps, SandboxError};

/// Who sent a request, and what they may hold.
#[derive(Clone, Debug, Default)]
pub struct Caller {
    /// Whose sandboxes the request may see.
    pub owner: Owner,
    /// What that owner may hold at once.
    pub caps: OwnerCaps,
}

impl Caller {
    /// The caller attached to this request's HTTP parts, if any.
    pub fn attached(context: &RequestContext<RoleServer>) -> Option<Caller> {
        context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Caller>())
            .cloned()
    }

    /// The caller of this request: the attached one, or anyone when the
    /// server takes requests without authorization. With authorization on,
    /// a request that reached a tool without a caller is refused rather than
    /// served as anyone's.
    pub fn of(
        context: &RequestContext<RoleServer>,
        authorization: bool,
    ) -> Result<Caller, SandboxError> {
        match Self::attached(context) {
            Some(caller) => Ok(caller),
            None if !authorization => Ok(Caller::default()),
            None => Err(SandboxError::InvalidArgument(
                "this request carries no authorized caller; send it with a valid bearer token"
                    .into(),
            )),
        }
    }
}
