//! This server's OAuth protected-resource metadata (RFC 9728), served at
//! `/.well-known/oauth-protected-resource/mcp` (the resource's path
//! inserted, as the RFC says) and at the root form
//! `/.well-known/oauth-protected-resource`, for clients that look there.

use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use serde::Serialize;

use super::settings::{MCP_PATH, METADATA_PREFIX, OAuthSettings};

/// The metadata document.
#[derive(Clone, Debug, Serialize)]
pub struct ResourceMetadata {
    /// This server's resource identifier, `<public_url>/mcp`.
    pub resource: String,
    /// The issuer whose tokens are accepted.
    pub authorization_servers: Vec<String>,
    /// The scopes a token needs.
    pub scopes_supported: Vec<String>,
    /// Tokens go in the `Authorization` header only.
    pub bearer_methods_supported: Vec<String>,
    /// A name for people.
    pub resource_name: String,
}

impl ResourceMetadata {
    /// The document for these settings.
    pub fn new(settings: &OAuthSettings) -> Self {
        Self {
            resource: settings.resource(),
            authorization_servers: vec![settings.issuer_id()],
            scopes_supported: settings.scopes.clone(),
            bearer_methods_supported: vec!["header".into()],
            resource_name: "mcp-code-sandbox".into(),
        }
    }
}

/// The routes that serve the document; they need no token.
pub fn routes(settings: &OAuthSettings) -> Router {
    let doc = Arc::new(ResourceMetadata::new(settings));
    let serve = move || {
        let doc = doc.clone();
        async move { axum::Json((*doc).clone()) }
    };
    Router::new()
        .route(&format!("{METADATA_PREFIX}{MCP_PATH}"), get(serve.clone()))
        .route(METADATA_PREFIX, get(serve))
}
