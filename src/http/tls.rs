//! HTTPS from certificate files: a listener that hands axum connections
//! whose TLS handshake has finished. Handshakes run in tasks of their own,
//! so a slow or silent client holds up nobody else.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::config::TlsFiles;

/// Longest a client may take to finish its handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// Why HTTPS cannot start.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file is missing or holds nothing usable.
    #[error(
        "cannot read {what} from {path}: {source}; give PEM files with SANDBOX_TLS_CERT and SANDBOX_TLS_KEY"
    )]
    Pem {
        /// The certificate chain or the key.
        what: &'static str,
        /// The file.
        path: String,
        /// What the PEM reader said.
        source: rustls::pki_types::pem::Error,
    },
    /// The certificate and key do not make a server configuration.
    #[error("the certificate and key in SANDBOX_TLS_CERT/SANDBOX_TLS_KEY do not fit together: {0}")]
    Config(#[from] rustls::Error),
}

/// Connections that finished their TLS handshake.
pub struct TlsListener {
    local: SocketAddr,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
}

impl TlsListener {
    /// Serves TLS with `files` on `listener`.
    pub fn new(listener: TcpListener, files: &TlsFiles) -> Result<Self, TlsError> {
        let acceptor = TlsAcceptor::from(Arc::new(server_config(files)?));
        let local = listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let (sender, ready) = mpsc::channel(64);
        tokio::spawn(accept_loop(listener, acceptor, sender));
        Ok(Self { local, ready })
    }
}

fn server_config(files: &TlsFiles) -> Result<rustls::ServerConfig, TlsError> {
    let pem = |what, path: &std::path::Path, source| TlsError::Pem {
        what,
        path: path.display().to_string(),
        source,
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|certs| certs.collect())
        .map_err(|e| pem("the certificate chain", &files.cert, e))?;
    let key =
        PrivateKeyDer::from_pem_file(&files.key).map_err(|e| pem("the key", &files.key, e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    ready: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    loop {
        let (mut tcp, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!("accepting a connection failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if ready.is_closed() {
            return;
        }
        super::no_delay(&mut tcp);
        let acceptor = acceptor.clone();
        let ready = ready.clone();
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => {
                    let _ = ready.send((stream, peer)).await;
                }
                Ok(Err(e)) => tracing::debug!(%peer, "TLS handshake failed: {e}"),
                Err(_) => tracing::debug!(%peer, "TLS handshake took too long"),
            }
        });
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accept loop only ends with the listener; wait for shutdown.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
