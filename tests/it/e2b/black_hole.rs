//! An E2B address that never completes a connection: the messages name the
//! connect bound the server runs with and say what to do, and no call hangs.
//!
//! The black hole is a loopback socket that listens with a backlog of one and
//! never accepts: once its accept queue is full, Linux drops further SYNs, so
//! a connect to it neither succeeds nor is refused until the client gives up.

use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde_json::json;
use tokio::net::{TcpListener, TcpSocket};

use super::server;
use crate::e2b_fake::FakeE2b;
use crate::support::Server;

/// Most connects tried while filling the accept queue.
const FILL_ATTEMPTS: usize = 16;
/// How long one filling connect may take before the queue counts as full.
const FILL_PROBE: Duration = Duration::from_millis(300);
/// Longest a whole test may take before it is failed instead of hanging.
const TEST_BOUND: Duration = Duration::from_secs(120);

/// A loopback address whose connects hang: the listener (never accepted
/// from) and the connections that fill its accept queue, kept open.
struct BlackHole {
    _listener: TcpListener,
    _queued: Vec<TcpStream>,
    addr: SocketAddr,
}

impl BlackHole {
    /// Binds, listens with a backlog of one, and connects until a connect
    /// does not complete: proof that further connects hang here.
    fn open() -> Self {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = socket.listen(1).unwrap();
        let addr = listener.local_addr().unwrap();
        let mut queued = Vec::new();
        for _ in 0..FILL_ATTEMPTS {
            match TcpStream::connect_timeout(&addr, FILL_PROBE) {
                Ok(stream) => queued.push(stream),
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                    return Self {
                        _listener: listener,
                        _queued: queued,
                        addr,
                    };
                }
                Err(e) => panic!("connecting to the black hole failed otherwise: {e}"),
            }
        }
        panic!(
            "{FILL_ATTEMPTS} connects to a listener with a backlog of one all completed: this kernel does not drop SYNs on a full accept queue"
        );
    }

    /// Its address as an http URL.
    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// Runs `test`, failing it if it has not ended within [`TEST_BOUND`].
async fn bounded<F: std::future::Future<Output = ()>>(test: F) {
    tokio::time::timeout(TEST_BOUND, test)
        .await
        .expect("the test hung: a connect to the black hole was never given up");
}

#[tokio::test]
async fn running_code_where_no_connection_opens_names_the_connect_bound() {
    bounded(async {
        let hole = tokio::task::spawn_blocking(BlackHole::open).await.unwrap();
        let fake = FakeE2b::start().await;
        // The connect bound is the request bound when that is shorter.
        let server = server(
            &fake,
            &[
                ("SANDBOX_E2B_REQUEST_TIMEOUT_SECONDS", "3"),
                ("E2B_SANDBOX_URL", &hole.url()),
            ],
        )
        .await;
        let id = server.create().await;
        let msg = server
            .err(
                "execute_code",
                json!({"session_id": id, "code": "1", "timeout_seconds": 60}),
            )
            .await;
        assert!(
            msg.contains("E2B did not answer running code within 3 s"),
            "{msg}"
        );
        assert!(msg.contains("try again"), "{msg}");
        server.stop().await;
    })
    .await;
}

#[tokio::test]
async fn creating_where_no_connection_opens_names_the_request_bound() {
    bounded(async {
        let hole = tokio::task::spawn_blocking(BlackHole::open).await.unwrap();
        let url = hole.url();
        let server = Server::start_with(&[
            ("INTERPRETER_TYPE", "e2b"),
            ("E2B_API_KEY", "e2b_1234"),
            ("E2B_API_URL", &url),
            ("E2B_SANDBOX_URL", &url),
            ("SANDBOX_E2B_REQUEST_TIMEOUT_SECONDS", "3"),
        ])
        .await;
        let msg = server.err("create_sandbox", json!({})).await;
        assert!(
            msg.contains("E2B did not answer") && msg.contains("within 3 s"),
            "{msg}"
        );
        assert!(msg.contains("try again"), "{msg}");
        server.stop().await;
    })
    .await;
}
