//! HTTP for guests through the scientific runtime's door: a loopback axum
//! server, allowed or not by SANDBOX_ALLOW_HOSTS / SANDBOX_ALLOW_NETWORKS,
//! reached with urllib and pandas; refusals name their rule, every request
//! is in the execution's usage, and none reaches what the rules refuse.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

use crate::support::{Server, scientific_cache, structured, text};

/// The CSV the loopback server serves at `/data.csv`.
const CSV: &str = "region,units\nnorth,10\nsouth,32\nnorth,5\n";

/// A loopback HTTP server that notes every request it gets.
struct Site {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Clone)]
struct SiteState {
    seen: Arc<Mutex<Vec<String>>>,
    /// Where `/away` redirects to.
    away: String,
}

impl Site {
    /// Serves `/data.csv`, `/big` (2 MiB), `/slow` (never answers in time),
    /// `/echo` (the request's headers), `/home` (a redirect to `/data.csv`)
    /// and `/away` (a redirect to `away`).
    async fn start(away: &str) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let state = SiteState {
            seen: seen.clone(),
            away: away.to_owned(),
        };
        let app = Router::new()
            .route("/data.csv", get(|| async { CSV }))
            .route("/big", get(|| async { vec![b'x'; 2 << 20] }))
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(600)).await;
                    "late"
                }),
            )
            .route("/echo", get(echo))
            .route("/home", get(|| async { redirect("/data.csv") }))
            .route(
                "/away",
                get(|State(s): State<SiteState>| async move { redirect(&s.away) }),
            )
            .layer(axum::middleware::from_fn_with_state(state.clone(), note))
            .with_state(state);
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self { addr, seen, task }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn note(
    State(s): State<SiteState>,
    request: Request,
    next: axum::middleware::Next,
) -> Response {
    s.seen.lock().unwrap().push(request.uri().path().to_owned());
    next.run(request).await
}

async fn echo(request: Request) -> String {
    let mut names: Vec<String> = request
        .headers()
        .iter()
        .map(|(k, v)| format!("{k}={}", v.to_str().unwrap_or("?")))
        .collect();
    names.sort();
    names.join("\n")
}

fn redirect(to: &str) -> Response {
    (StatusCode::FOUND, [(header::LOCATION, to.to_owned())], "").into_response()
}

pub(crate) async fn start(env: &[(&str, &str)]) -> Server {
    scientific_cache();
    let mut env = env.to_vec();
    env.push(("SANDBOX_POOL_SIZE", "0"));
    env.push(("SANDBOX_RUNTIME", "scientific"));
    Server::start_with(&env).await
}

/// A loopback site, a scientific server that allows it (and loopback for
/// it), and a sandbox there.
async fn allowed_site() -> (Site, Server, String) {
    let site = Site::start("/").await;
    let (server, id) = sandbox_allowing(&site.origin()).await;
    (site, server, id)
}

/// A scientific server that allows `origin` (and loopback for it), and a
/// sandbox there.
async fn sandbox_allowing(origin: &str) -> (Server, String) {
    let server = start(&[
        ("SANDBOX_ALLOW_HOSTS", origin),
        ("SANDBOX_ALLOW_NETWORKS", "127.0.0.1/32"),
    ])
    .await;
    let id = server.create_with(json!({})).await;
    (server, id)
}

/// Runs code with a generous timeout; the structured result.
pub(crate) async fn run(server: &Server, id: &str, code: &str) -> Value {
    let result = server
        .call(
            "execute_code",
            json!({"session_id": id, "code": code, "timeout_seconds": 240}),
        )
        .await;
    structured(&result)
}

/// What a cell prints when it catches the exception `code` raises.
fn caught(code: &str) -> String {
    format!(
        "import urllib.request, urllib.error\n\
         try:\n    {code}\n    print('no error')\n\
         except Exception as e:\n    print(type(e).__name__, '|', e)"
    )
}

#[tokio::test]
async fn allowed_hosts_are_fetched_with_urllib_and_pandas_and_everything_else_is_refused_by_name() {
    let elsewhere = Site::start("/").await;
    let site = Site::start(&elsewhere.url("/secret")).await;
    let allowed = site.origin();
    let server = start(&[
        ("SANDBOX_ALLOW_HOSTS", &allowed),
        ("SANDBOX_ALLOW_NETWORKS", "127.0.0.1/32"),
        ("SANDBOX_GUEST_HTTP_MAX_BYTES", "1048576"),
    ])
    .await;
    let id = server.create_with(json!({})).await;

    // An allowed GET with urllib, then with pandas; both in the usage.
    let fetched = run(
        &server,
        &id,
        &format!(
            "import urllib.request, pandas as pd\n\
             r = urllib.request.urlopen('{}')\n\
             print(r.status, r.read().decode().count('north'))\n\
             df = pd.read_csv('{}')\n\
             df.groupby('region').units.sum().to_dict()",
            site.url("/data.csv"),
            site.url("/home"),
        ),
    )
    .await;
    assert_eq!(fetched["stdout"]["text"], "200 2\n", "{fetched}");
    assert_eq!(fetched["value"], "{'north': 15, 'south': 32}", "{fetched}");
    let requests = fetched["usage"]["door"]["requests"].as_array().unwrap();
    let host = format!("http://{}", site.addr);
    let listed: Vec<(String, String, Value, u64)> = requests
        .iter()
        .map(|r| {
            (
                r["method"].as_str().unwrap().to_owned(),
                r["host"].as_str().unwrap().to_owned(),
                r["status"].clone(),
                r["bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    let size = CSV.len() as u64;
    assert_eq!(
        listed,
        vec![
            ("GET".into(), host.clone(), json!(200), size),
            ("GET".into(), host.clone(), json!(302), 0),
            ("GET".into(), host.clone(), json!(200), size),
        ],
        "{fetched}"
    );
    assert_eq!(fetched["usage"]["door"]["calls"], 2);

    // A host not in the list; a redirect to one; a port not in the list.
    let other = run(
        &server,
        &id,
        &caught(&format!(
            "urllib.request.urlopen('{}')",
            elsewhere.url("/x")
        )),
    )
    .await;
    let said = other["stdout"]["text"].as_str().unwrap();
    assert!(
        said.starts_with("NetworkRefused |")
            && said.contains("SANDBOX_ALLOW_HOSTS")
            && said.contains(&elsewhere.origin()),
        "{other}"
    );
    let away = run(
        &server,
        &id,
        &caught(&format!("urllib.request.urlopen('{}')", site.url("/away"))),
    )
    .await;
    let said = away["stdout"]["text"].as_str().unwrap();
    assert!(
        said.starts_with("NetworkRefused |") && said.contains("a redirect was refused"),
        "{away}"
    );
    assert!(
        elsewhere.seen().is_empty(),
        "the refused host got {:?}",
        elsewhere.seen()
    );
    let refused = &away["usage"]["door"]["requests"][1];
    assert!(
        refused["refused"]
            .as_str()
            .unwrap()
            .contains("SANDBOX_ALLOW_HOSTS"),
        "{away}"
    );

    // Header injection never leaves the host; a plain header does.
    let before = site.seen().len();
    let injected = run(
        &server,
        &id,
        &caught(&format!(
            "urllib.request.urlopen(urllib.request.Request('{}', headers={{'X-A': 'v\\r\\nX-Evil: 1'}}))",
            site.url("/echo")
        )),
    )
    .await;
    let said = injected["stdout"]["text"].as_str().unwrap();
    assert!(
        said.starts_with("NetworkRefused |") && said.contains("header injection"),
        "{injected}"
    );
    assert_eq!(site.seen().len(), before, "nothing was sent");
    let echoed = run(
        &server,
        &id,
        &format!(
            "print(urllib.request.urlopen(urllib.request.Request('{}', headers={{'X-Mine': 'yes'}})).read().decode())",
            site.url("/echo")
        ),
    )
    .await;
    let said = echoed["stdout"]["text"].as_str().unwrap();
    assert!(said.contains("x-mine=yes"), "{echoed}");
    assert!(
        !said.contains("proxy") && !said.contains("authorization"),
        "{echoed}"
    );

    // A response over SANDBOX_GUEST_HTTP_MAX_BYTES is cut off and said.
    let big = run(
        &server,
        &id,
        &caught(&format!(
            "urllib.request.urlopen('{}').read()",
            site.url("/big")
        )),
    )
    .await;
    let said = big["stdout"]["text"].as_str().unwrap();
    assert!(said.contains("SANDBOX_GUEST_HTTP_MAX_BYTES"), "{big}");
    assert!(
        big["usage"]["door"]["requests"][0]["bytes"]
            .as_u64()
            .unwrap()
            <= 1 << 20,
        "{big}"
    );

    // The sandbox still works and the server too.
    assert_eq!(run(&server, &id, "1 + 1").await["value"], "2");
}

#[tokio::test]
async fn loopback_is_refused_unless_its_network_is_allowed_even_for_an_allowed_host() {
    let site = Site::start("/").await;
    let port = site.addr.port();
    let hosts = format!("{},http://localhost:{port}", site.origin());
    let server = start(&[("SANDBOX_ALLOW_HOSTS", &hosts)]).await;
    let id = server.create_with(json!({})).await;
    for url in [
        site.url("/data.csv"),
        format!("http://localhost:{port}/data.csv"),
    ] {
        let out = run(
            &server,
            &id,
            &caught(&format!("urllib.request.urlopen('{url}')")),
        )
        .await;
        let said = out["stdout"]["text"].as_str().unwrap();
        assert!(
            said.starts_with("NetworkRefused |")
                && said.contains("loopback")
                && said.contains("SANDBOX_ALLOW_NETWORKS"),
            "{url}: {out}"
        );
    }
    assert!(site.seen().is_empty(), "loopback got {:?}", site.seen());
}

#[tokio::test]
async fn a_sandbox_narrows_the_hosts_and_cannot_widen_them() {
    let one = Site::start("/").await;
    let two = Site::start("/").await;
    let hosts = format!("{},{}", one.origin(), two.origin());
    let server = start(&[
        ("SANDBOX_ALLOW_HOSTS", &hosts),
        ("SANDBOX_ALLOW_NETWORKS", "127.0.0.1/32"),
    ])
    .await;
    let id = server
        .create_with(json!({"allow_hosts": [one.origin()]}))
        .await;
    let ok = run(
        &server,
        &id,
        &caught(&format!(
            "urllib.request.urlopen('{}')",
            one.url("/data.csv")
        )),
    )
    .await;
    assert_eq!(ok["stdout"]["text"], "no error\n", "{ok}");
    let no = run(
        &server,
        &id,
        &caught(&format!(
            "urllib.request.urlopen('{}')",
            two.url("/data.csv")
        )),
    )
    .await;
    assert!(
        no["stdout"]["text"]
            .as_str()
            .unwrap()
            .starts_with("NetworkRefused |"),
        "{no}"
    );
    assert!(two.seen().is_empty());
    let wider = server
        .err(
            "create_sandbox",
            json!({"allow_hosts": ["http://127.0.0.1:1"]}),
        )
        .await;
    assert!(wider.contains("only narrow"), "{wider}");
}

#[tokio::test]
async fn a_slow_response_is_stopped_by_the_execution_timeout() {
    let (site, server, id) = allowed_site().await;
    // Warm the imports up first, so the timeout below only waits on the door.
    run(&server, &id, "import urllib.request").await;
    let result = server
        .call(
            "execute_code",
            json!({"session_id": id, "code": format!("urllib.request.urlopen('{}')", site.url("/slow")), "timeout_seconds": 3}),
        )
        .await;
    let out = structured(&result);
    assert_eq!(out["limit"]["kind"], "timeout", "{}", text(&result));
    assert_eq!(site.seen(), vec!["/slow".to_owned()]);
    // The request it was waiting on is in the usage all the same.
    let door = &out["usage"]["door"];
    assert_eq!(door["requests"][0]["cut"], true, "{out}");
    assert_eq!(door["requests"][0]["method"], "GET", "{out}");
    assert_eq!(door["tool_calls"][0]["tool"], "http_request", "{out}");
    assert_eq!(door["tool_calls"][0]["failed"], "cut", "{out}");
    // A fresh interpreter answers afterwards.
    assert_eq!(run(&server, &id, "1 + 1").await["value"], "2");
}

/// A loopback server that writes `answer(path)`'s bytes, as they are, to each
/// request (one per connection) and closes; its address.
pub(crate) async fn raw_server(answer: fn(&str) -> &'static [u8]) -> SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut request = [0u8; 4096];
            let read = stream.read(&mut request).await.unwrap_or(0);
            let head = String::from_utf8_lossy(&request[..read]);
            let path = head.split(' ').nth(1).unwrap_or("/");
            let _ = stream.write_all(answer(path)).await;
        }
    });
    addr
}

#[tokio::test]
async fn a_malformed_answer_is_said_to_be_one_not_an_unreachable_server() {
    // Every answer carries a header HTTP does not allow (a DEL byte).
    let addr =
        raw_server(|_| b"HTTP/1.1 200 OK\r\nX-Bad: a\x7fb\r\nContent-Length: 2\r\n\r\nok").await;
    let origin = format!("http://{addr}");
    let (server, id) = sandbox_allowing(&origin).await;
    let got = run(
        &server,
        &id,
        &caught(&format!("urllib.request.urlopen('{origin}/')")),
    )
    .await;
    let said = got["stdout"]["text"].as_str().unwrap_or_default();
    assert!(
        said.contains(&format!("the answer of {origin} is not valid HTTP")),
        "{got}"
    );
}

#[tokio::test]
async fn a_runtime_without_a_door_says_it_has_no_network() {
    let site = Site::start("/").await;
    let server = Server::start_with(&[
        ("SANDBOX_ALLOW_HOSTS", &site.origin()),
        ("SANDBOX_ALLOW_NETWORKS", "127.0.0.1/32"),
    ])
    .await;
    let id = server.create().await;
    let out = server
        .run(
            &id,
            &caught(&format!(
                "urllib.request.urlopen('{}')",
                site.url("/data.csv")
            )),
        )
        .await;
    let said = out["stdout"]["text"].as_str().unwrap();
    assert!(
        said.starts_with("URLError |")
            && said.contains("no network")
            && said.contains("scientific"),
        "{out}"
    );
    let refused = server
        .err("create_sandbox", json!({"allow_hosts": [site.origin()]}))
        .await;
    assert!(
        refused.contains("no door") && refused.contains("scientific"),
        "{refused}"
    );
    assert!(site.seen().is_empty());
}

#[tokio::test]
async fn a_guest_waiting_on_a_slow_response_is_stopped_by_a_cancel() {
    let (site, server, id) = allowed_site().await;
    let code = format!(
        "import urllib.request\nurllib.request.urlopen('{}')",
        site.url("/slow")
    );
    let handle = server
        .call_cancellable(
            "execute_code",
            json!({"session_id": id, "code": code, "timeout_seconds": 300}),
        )
        .await;
    // Cancelled once the request is waiting at the server.
    while site.seen().is_empty() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    handle.cancel(Some("test".into())).await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(120), run(&server, &id, "6 * 7"))
        .await
        .expect("the cancelled execution stopped");
    assert_eq!(next["value"], "42", "{next}");
    assert!(next["state_lost"].is_string(), "{next}");
}

#[tokio::test]
async fn the_runtimes_own_tool_package_sees_the_door_tools() {
    let (site, server, id) = allowed_site().await;
    // `from host import tools` lists the tools through the door; a call
    // returns the tool's value with bytes decoded; a refusal is ToolDenied.
    let out = run(
        &server,
        &id,
        &format!(
            "import host\n\
             from host import tools\n\
             r = tools.http_request(url='{}')\n\
             print(r['status'], r['body'].decode().splitlines()[0], 'allowed' in tools.http_request.__doc__)\n\
             try:\n    tools.http_request(url='http://127.0.0.1:1/')\n\
             except host.ToolDenied as e:\n    print('denied', 'SANDBOX_ALLOW_HOSTS' in str(e))",
            site.url("/data.csv")
        ),
    )
    .await;
    assert_eq!(
        out["stdout"]["text"], "200 region,units True\ndenied True\n",
        "{out}"
    );
}
