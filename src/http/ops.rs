//! The operations routes: `/healthz` (the process answers), `/readyz` (new
//! sandboxes start without waiting for a compile) and `/metrics` (Prometheus
//! text format). They carry no sandbox data, so they need no token.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::app::App;

/// The operations routes over `app`.
pub fn routes(app: Arc<App>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(app)
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(app): State<Arc<App>>) -> impl IntoResponse {
    if app.is_ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: the default runtime is still loading (or failed to load; see the server's log)\n",
        )
    }
}

async fn metrics(State(app): State<Arc<App>>) -> impl IntoResponse {
    let text = app.metrics.render(&app.snapshot());
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
}
