//! Guests' HTTP under a name whose answers switch between an allowed and a
//! refused address, and under many parallel requests: driven through the
//! library's `http_request` tool with real loopback servers on 127.0.0.1
//! (allowed) and 127.0.0.2 (loopback, not allowed), the name answered by a
//! resolver that alternates between them.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use mcp_code_sandbox::door::allowlist::AllowList;
use mcp_code_sandbox::door::http::{HttpDoor, HttpSettings};
use mcp_code_sandbox::door::ranges::AddressPolicy;
use mcp_code_sandbox::door::resolve::Lookup;
use mcp_code_sandbox::door::{FailureKind, RequestLog};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Answers lookups in turn from `answers`, round and round.
struct Switching {
    answers: Vec<Vec<IpAddr>>,
    next: AtomicUsize,
}

impl Lookup for Switching {
    fn lookup(&self, _name: String) -> BoxFuture<'static, std::io::Result<Vec<IpAddr>>> {
        let i = self.next.fetch_add(1, Ordering::SeqCst) % self.answers.len();
        let answer = self.answers[i].clone();
        Box::pin(async move { Ok(answer) })
    }
}

/// A bare HTTP server on `ip:port` answering every request with `body`
/// (and closing, so each request is a new connection); counts connections.
async fn serve(ip: &str, port: u16, body: &'static str) -> Arc<AtomicUsize> {
    let listener = tokio::net::TcpListener::bind((ip, port)).await.unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf).await;
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(reply.as_bytes()).await;
            });
        }
    });
    connections
}

fn get(url: &str) -> Map<String, Value> {
    let mut args = Map::new();
    args.insert("url".into(), json!(url));
    args
}

#[tokio::test]
async fn switching_answers_and_parallel_requests_never_reach_the_refused_address() {
    // The same port on both addresses; the refused one holds "the secret".
    let probe = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = probe.local_addr().unwrap().port();
    drop(probe);
    let allowed_hits = serve("127.0.0.1", port, "public").await;
    let secret_hits = serve("127.0.0.2", port, "secret").await;

    let one: IpAddr = "127.0.0.1".parse().unwrap();
    let two: IpAddr = "127.0.0.2".parse().unwrap();
    let lookup = Switching {
        answers: vec![vec![one], vec![two], vec![two, one], vec![two]],
        next: AtomicUsize::new(0),
    };
    let settings = HttpSettings {
        allow_hosts: AllowList::parse(&format!("http://rebind.test:{port}")).unwrap(),
        addresses: Arc::new(AddressPolicy::new(vec!["127.0.0.1/32".parse().unwrap()])),
        ..HttpSettings::default()
    };
    let door = Arc::new(HttpDoor::with_lookup(settings.clone(), Arc::new(lookup)).unwrap());
    let tool = door.handler(settings.allow_hosts.clone());
    let url = format!("http://rebind.test:{port}/");

    // Sixty-four requests at once: each is served by the allowed address or
    // refused with the rule; none reaches the other.
    let log = RequestLog::default();
    let calls =
        (0..64).map(|_| tool.call("http_request", get(&url), Duration::from_secs(20), &log));
    let outcomes = futures::future::join_all(calls).await;
    let (mut served, mut refused) = (0, 0);
    for outcome in outcomes {
        match outcome {
            Ok(value) => {
                assert_eq!(value.value["status"], 200, "{}", value.value);
                let body = value.value["body"]["$bytes"].as_str().unwrap_or_default();
                assert_eq!(body, "cHVibGlj", "the body is 'public': {}", value.value);
                served += 1;
            }
            Err(failure) => {
                assert_eq!(failure.kind, FailureKind::Denied, "{failure}");
                assert!(
                    failure
                        .message
                        .contains("127.0.0.2 in 127.0.0.0/8 (loopback)"),
                    "{failure}"
                );
                refused += 1;
            }
        }
    }
    assert!(
        served > 0 && refused > 0,
        "served {served}, refused {refused}"
    );
    assert_eq!(
        secret_hits.load(Ordering::SeqCst),
        0,
        "the refused address was reached"
    );
    assert_eq!(allowed_hits.load(Ordering::SeqCst), served);
    assert_eq!(log.take().len(), 64, "every request is in the usage");
}
