//! The connection loop: accepts connections up to a cap, gives each client
//! a bounded time to send its request headers (a client that opens
//! connections and never finishes a request cannot hold the server's
//! descriptors), serves HTTP/1.1 and HTTP/2, and on shutdown lets open
//! streams end for a moment before closing them.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::config::ConnectionLimits;

/// How long open streams get to finish once shutdown starts.
const DRAIN: Duration = Duration::from_secs(5);

/// Serves `router` on `listener` until `stop` is cancelled.
pub async fn serve<L>(
    mut listener: L,
    router: Router,
    limits: ConnectionLimits,
    stop: CancellationToken,
) where
    L: axum::serve::Listener,
{
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    builder.http2().timer(TokioTimer::new());
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    loop {
        let permit = tokio::select! {
            () = stop.cancelled() => break,
            permit = slots.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
        };
        let (io, _) = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let service = TowerToHyperService::new(router.clone());
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(io), service)
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("a connection ended with an error: {e}");
            }
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            "some connections were still open {}s after shutdown began; closing them",
            DRAIN.as_secs()
        );
    }
}
