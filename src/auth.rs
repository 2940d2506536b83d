//! Authorization for the HTTP server: who is calling, and whether they may.
//!
//! An [`Authorizer`] is built from [`AuthSettings`] and put in front of the
//! MCP routes with [`Authorizer::protect`]. A request that gets through carries
//! the caller's [`Principal`] in its `http::Extensions`; every other request is
//! answered here (401 or 403, with the `WWW-Authenticate` challenge the MCP
//! authorization specification asks for) and never reaches the routes.
//!
//! Two modes, each optional, both may be on (static tokens are checked first):
//!
//! - [`tokens`]: static bearer tokens, a TOML file of their sha256 hashes, each
//!   naming a principal and its limits; `mcp-code-sandbox token` mints one.
//! - [`oauth`]: an OAuth 2.1 resource server. Access tokens are JWTs signed by
//!   the configured issuer, whose keys ([`jwks`]) are found through its
//!   metadata ([`fetch`] bounds those requests); this server describes itself
//!   at the RFC 9728 well-known paths ([`metadata`]).
//!
//! [`layer`] is the middleware that ties them together; [`challenge`] writes
//! the refusals.

pub mod challenge;
pub mod error;
pub mod fetch;
pub mod jwks;
pub mod layer;
pub mod metadata;
pub mod oauth;
pub mod principal;
pub mod settings;
pub mod tokens;

pub use error::AuthError;
pub use layer::Authorizer;
pub use principal::{Principal, PrincipalLimits};
pub use settings::{AuthSettings, OAuthSettings};
