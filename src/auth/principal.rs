//! [`Principal`]: the caller a request was authorized for, and its limits.

/// Who a request comes from, as authorization established it. Requests the
/// authorizer let through carry one in their `http::Extensions`.
///
/// Its name is the static token's principal, or the access token's `sub`
/// claim verbatim (no prefix): an operator who uses both modes keeps the two
/// sets of names apart. It never holds the token itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// The principal's name: owner of the sandboxes it creates.
    pub name: String,
    /// Limits on this principal's sandboxes, beside the server-wide ones.
    pub limits: PrincipalLimits,
}

/// Caps on what one principal's sandboxes may hold together; `None` leaves
/// only the server-wide limit.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrincipalLimits {
    /// Most sandboxes alive at once.
    pub max_sandboxes: Option<usize>,
    /// Most memory all of them together may use, in MiB.
    pub max_memory_mb: Option<u64>,
    /// Most disk all of them together may hold, in MiB.
    pub max_disk_mb: Option<u64>,
}
