//! Serving MCP over Streamable HTTP (`mcp-code-sandbox serve --http ADDR`):
//! the same tools as on stdio at `/mcp` (rmcp's Streamable HTTP service, for
//! clients of the 2026-07-28 protocol, served without sessions, and of the
//! session protocol before it), beside the operations routes `/healthz`,
//! `/readyz` and `/metrics`.
//!
//! Secure by default: loopback unless told otherwise, and an address other
//! than loopback is refused unless authorization is configured; Host and
//! Origin headers are checked against DNS rebinding on every route (the
//! operations routes and the OAuth metadata too); every request is logged
//! with its principal and sandbox, never its body or token.

mod bind;
mod callers;
mod connections;
mod ops;
mod rebinding;
mod request_log;
mod session_end;
mod sessions;
mod tls;

use std::sync::Arc;

use axum::Router;
use axum::serve::ListenerExt as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use crate::app::{App, shutdown_signal};
use crate::auth::Authorizer;
use crate::config::HttpSettings;

pub use self::bind::BindError;

/// Serves MCP over HTTP until SIGINT or SIGTERM, then saves or closes every
/// sandbox as the stdio server does. With authorization configured, every
/// request to `/mcp` needs a valid token, and its principal owns the
/// sandboxes it creates.
pub async fn serve(app: App, settings: HttpSettings) -> anyhow::Result<()> {
    let authorizer = Arc::new(Authorizer::new(app.config.auth.clone())?);
    bind::check(settings.addr, authorizer.is_configured())?;
    let app = Arc::new(app);
    app.preload_in_background();
    let stop = CancellationToken::new();
    app.manager.spawn_reaper(stop.clone());
    let listener = tokio::net::TcpListener::bind(settings.addr).await?;
    let local = listener.local_addr()?;
    let router = routes(&app, &settings, authorizer, local, stop.child_token());
    tracing::info!(
        "serving MCP at {}://{local}/mcp",
        if settings.tls.is_some() {
            "https"
        } else {
            "http"
        }
    );
    let shutdown = {
        let stop = stop.clone();
        async move {
            let signal = shutdown_signal().await;
            tracing::info!("received {signal}; shutting down");
            stop.cancel();
        }
    };
    tokio::spawn(shutdown);
    let limits = settings.connections;
    match &settings.tls {
        Some(files) => {
            let listener = tls::TlsListener::new(listener, files)?;
            connections::serve(listener, router, limits, stop.clone()).await;
        }
        None => {
            let listener = listener.tap_io(no_delay);
            connections::serve(listener, router, limits, stop.clone()).await;
        }
    }
    app.shut_down().await;
    Ok(())
}

/// Sends small writes at once: an answer over SSE goes out as several small
/// writes (a priming event, then the message), which Nagle's algorithm
/// would hold back until the client's delayed ACK, about 40 ms each.
pub(crate) fn no_delay(tcp: &mut tokio::net::TcpStream) {
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!("could not set TCP_NODELAY: {e}");
    }
}

/// The routes: `/mcp` (behind authorization when configured, and logged)
/// and the operations routes; `local` is where the server listens (its own
/// origin is always allowed).
fn routes(
    app: &Arc<App>,
    settings: &HttpSettings,
    authorizer: Arc<Authorizer>,
    local: std::net::SocketAddr,
    stop: CancellationToken,
) -> Router {
    let mut server = app.server();
    if authorizer.is_configured() {
        server = server.requiring_authorization();
    }
    let auth = &app.config.auth;
    let config = StreamableHttpServerConfig::default()
        .with_cancellation_token(stop)
        .with_max_request_body_bytes(app.config.requests.max_request_bytes)
        .with_legacy_session_mode(!settings.stateless);
    let hosts = bind::allowed_hosts(settings, auth);
    let origins = bind::allowed_origins(settings, auth, local);
    let allowed = Arc::new(rebinding::Allowed::new(&hosts, &origins));
    let config = config
        .with_allowed_hosts(hosts)
        .with_allowed_origins(origins)
        .enforce_origin_validation();
    let session_manager = Arc::new(LocalSessionManager::default());
    let mcp =
        StreamableHttpService::new(move || Ok(server.clone()), session_manager.clone(), config);
    // A request passes authorization, gets its caller, is refused in a
    // session another caller opened (or opening one past the caps), and is
    // logged (with its caller) and served (an ended session's answer made
    // one every client takes).
    let owners = Arc::new(sessions::SessionOwners::new(
        session_manager,
        settings.sessions,
    ));
    let mcp = Router::new()
        .nest_service("/mcp", mcp)
        .layer(axum::middleware::from_fn(session_end::no_content))
        .layer(axum::middleware::from_fn(request_log::log))
        .layer(axum::middleware::from_fn_with_state(
            owners,
            sessions::guard,
        ))
        .layer(axum::middleware::from_fn(callers::attach));
    // Every route answers only the server's names and origins.
    authorizer
        .protect(mcp)
        .merge(ops::routes(app.clone()))
        .layer(axum::middleware::from_fn_with_state(
            allowed,
            rebinding::guard,
        ))
}
