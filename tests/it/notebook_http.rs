//! The HTTP clients people use, through the door: requests, httpx (sync and
//! async), urllib3 and aiohttp, installed from real wheels on a loopback
//! index, against a loopback site over HTTP and HTTPS (TLS done by the host,
//! which trusts the test CA through SSL_CERT_FILE), with the door's rules:
//! what is allowed works as in CPython, what is refused raises the library's
//! connection error naming the rule, and every request is in the usage.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use serde_json::{Value, json};

use crate::notebook::{Idiom, run_corpus, server, value_is};
use crate::support::{Server, structured, text};

/// Bytes of `/1mb`.
const MIB: usize = 1 << 20;

fn site() -> Router {
    Router::new()
        .route(
            "/json",
            get(|| async { axum::Json(json!({"hello": "world", "n": 3})) }),
        )
        .route("/1mb", get(|| async { vec![b'x'; MIB] }))
        .route("/echo", any(echo))
        .route(
            "/redirect",
            get(|| async { (StatusCode::FOUND, [(header::LOCATION, "/json")], "") }),
        )
        .route(
            "/missing",
            get(|| async { (StatusCode::NOT_FOUND, "no such thing") }),
        )
        .route(
            "/cookie",
            get(|| async { ([(header::SET_COOKIE, "flavour=oat; Path=/")], "set") }),
        )
        .route(
            "/chunked",
            get(|| async {
                let chunks = ["part one, ", "part two"]
                    .map(|c| Ok::<_, std::io::Error>(c.as_bytes().to_vec()));
                Body::from_stream(futures::stream::iter(chunks))
            }),
        )
        .route("/flaky", get(flaky))
        .route("/headers", get(header_echo))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(20)).await;
                "late"
            }),
        )
}

/// `X-Name`'s bytes back as `X-Echo`, and `X-Utf8: café` in UTF-8 bytes.
async fn header_echo(request: Request) -> Response {
    let mut answer = Response::new(Body::from("ok"));
    if let Some(name) = request.headers().get("x-name") {
        answer.headers_mut().insert("x-echo", name.clone());
    }
    let utf8 = header::HeaderValue::from_bytes("caf\u{e9}".as_bytes()).unwrap();
    answer.headers_mut().insert("x-utf8", utf8);
    answer
}

/// Every other answer a 503: the first request of each pair fails.
async fn flaky() -> Response {
    static ASKED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    if ASKED
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        .is_multiple_of(2)
    {
        (StatusCode::SERVICE_UNAVAILABLE, "try again").into_response()
    } else {
        "ok after a 503".into_response()
    }
}

/// The method, some headers and the body it got, as JSON.
async fn echo(request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let (content_type, cookie) = (header("content-type"), header("cookie"));
    let body = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    axum::Json(json!({
        "method": parts.method.to_string(),
        "content_type": content_type,
        "cookie": cookie,
        "body": String::from_utf8_lossy(&body),
    }))
    .into_response()
}

/// The site over HTTP on loopback.
pub async fn serve_http() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, site()).await.unwrap() });
    addr
}

/// The site over HTTPS on loopback, with a certificate from a test CA.
pub async fn serve_https(cert: &std::path::Path, key: &std::path::Path) -> SocketAddr {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(key).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let service = hyper_util::service::TowerToHyperService::new(site());
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                .await;
            });
        }
    });
    addr
}

/// The door's records of the last run.
pub fn door_requests(result: &Value) -> Vec<Value> {
    result["usage"]["door"]["requests"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// A server started with `env` on top of the notebook tests' settings, and
/// one sandbox in it that has run `setup` (its `%pip install` and imports),
/// which must succeed.
pub async fn door_sandbox(index: &str, env: &[(&str, &str)], setup: &str) -> (Server, String) {
    let server = server(index, env).await;
    let id = server.create_with(json!({})).await;
    let installed = server
        .call(
            "execute_code",
            json!({"session_id": id, "code": setup, "timeout_seconds": 240}),
        )
        .await;
    assert_ne!(installed.is_error, Some(true), "{}", text(&installed));
    (server, id)
}

#[tokio::test]
async fn requests_httpx_urllib3_and_aiohttp_go_through_the_door() {
    let index = crate::real_wheels::index().await;
    let http = serve_http().await;
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = crate::http::test_certificate(dir.path());
    let https = serve_https(&cert, &key).await;
    let allowed = format!("http://{http}, https://localhost:{}", https.port());
    let (server, id) = door_sandbox(
        &index.url,
        &[
            ("SANDBOX_ALLOW_HOSTS", &allowed),
            ("SANDBOX_ALLOW_NETWORKS", "127.0.0.1/32, ::1/128"),
            ("SSL_CERT_FILE", ca.to_str().unwrap()),
        ],
        "%pip install -q requests httpx aiohttp\nimport requests, httpx, urllib3, aiohttp\n'ready'",
    )
    .await;
    let base = format!("http://{http}");
    let secure = format!("https://localhost:{}", https.port());
    let run = |code: String| {
        let (server, id) = (&server, &id);
        async move {
            let result = server
                .call(
                    "execute_code",
                    json!({"session_id": id, "code": code, "timeout_seconds": 120}),
                )
                .await;
            assert_ne!(result.is_error, Some(true), "{}", text(&result));
            structured(&result)
        }
    };

    // requests: JSON, a POST, a redirect followed by requests itself (each
    // hop through the door), cookies kept by a session, a 404.
    let got = run(format!(
        "r = requests.get('{base}/json')\n(r.status_code, r.json(), r.headers['content-type'])"
    ))
    .await;
    assert_eq!(
        got["value"], "(200, {'hello': 'world', 'n': 3}, 'application/json')",
        "{got}"
    );
    assert_eq!(door_requests(&got).len(), 1, "{got}");
    assert_eq!(door_requests(&got)[0]["status"], 200);
    let got = run(format!(
        "r = requests.post('{base}/echo', json={{'a': 1}})\n(r.json()['method'], r.json()['content_type'], r.json()['body'])"
    ))
    .await;
    assert_eq!(
        got["value"], "('POST', 'application/json', '{\"a\": 1}')",
        "{got}"
    );
    let got = run(format!(
        "r = requests.get('{base}/redirect')\n(r.status_code, r.url, [h.status_code for h in r.history])"
    ))
    .await;
    assert_eq!(
        got["value"],
        format!("(200, '{base}/json', [302])"),
        "{got}"
    );
    assert_eq!(
        door_requests(&got).len(),
        2,
        "each hop goes through the door: {got}"
    );
    let got = run(format!(
        "s = requests.Session()\ns.get('{base}/cookie')\n(s.cookies.get('flavour'), s.get('{base}/echo').json()['cookie'])"
    ))
    .await;
    assert_eq!(got["value"], "('oat', 'flavour=oat')", "{got}");
    // What urllib3 would change (retries, here on a 503) still works, and a
    // form, a stream and a string body give what they give natively.
    let got = run(format!(
        "from requests.adapters import HTTPAdapter\nfrom urllib3.util import Retry\ns = requests.Session()\ns.mount('http://', HTTPAdapter(max_retries=Retry(total=3, status_forcelist=[503], backoff_factor=0)))\nr = s.get('{base}/flaky')\n(r.status_code, r.text, len(r.raw.retries.history))"
    ))
    .await;
    assert_eq!(got["value"], "(200, 'ok after a 503', 1)", "{got}");
    assert_eq!(door_requests(&got).len(), 2, "{got}");
    let got = run(format!(
        "f = requests.post('{base}/echo', data={{'a': 'b c'}}).json()\nr = requests.get('{base}/1mb', stream=True)\n(f['content_type'], f['body'], sum(len(c) for c in r.iter_content(65536)), requests.put('{base}/echo', data='text').json()['body'])"
    ))
    .await;
    assert_eq!(
        got["value"],
        format!("('application/x-www-form-urlencoded', 'a=b+c', {MIB}, 'text')"),
        "{got}"
    );
    // A stream read in chunks of no fixed size ends once the body is read (it
    // went on asking for more, until the execution's time ran out).
    let got = run(format!(
        "r = requests.get('{base}/1mb', stream=True)\nn = sum(len(c) for c in r.iter_content(None))\np = urllib3.PoolManager().request('GET', '{base}/1mb', preload_content=False)\n(n, [len(c) for c in p.stream(None)], r.raw.read(), r.raw.closed, p.closed)"
    ))
    .await;
    assert_eq!(
        got["value"],
        format!("({MIB}, [{MIB}], b'', True, True)"),
        "{got}"
    );
    // urllib's response has what http.client's has: the length left, whether
    // it is read to its end, a peek, and it passes for one.
    let got = run(format!(
        "import urllib.request, http.client\nr = urllib.request.urlopen('{base}/1mb')\nbefore = (r.length, r.isclosed(), r.peek(3)[:3], r.version, r.will_close)\nr.read()\n(before, r.length, r.isclosed(), isinstance(r, http.client.HTTPResponse), r.seekable())"
    ))
    .await;
    assert_eq!(
        got["value"],
        format!("(({MIB}, False, b'xxx', 11, True), 0, True, True, False)"),
        "{got}"
    );
    let got = run(format!(
        "r = requests.get('{base}/missing')\ntry:\n    r.raise_for_status()\nexcept requests.HTTPError as e:\n    err = str(e)\n(r.status_code, r.text, err[:13])"
    ))
    .await;
    assert_eq!(
        got["value"], "(404, 'no such thing', '404 Client Er')",
        "{got}"
    );
    let got = run(format!("requests.get('{base}/chunked').text")).await;
    assert_eq!(got["value"], "'part one, part two'", "{got}");
    let got = run(format!(
        "import time\nt = time.time()\ntry:\n    requests.get('{base}/slow', timeout=1)\nexcept requests.exceptions.Timeout as e:\n    kind = (type(e).__name__, type(e.args[0]).__name__)\n(kind, round(time.time() - t) < 10)"
    ))
    .await;
    assert_eq!(
        got["value"], "(('ReadTimeout', 'ReadTimeoutError'), True)",
        "{got}"
    );
    // An adapter that retries reads (Retry(0)) wraps the timeout as urllib3
    // does; retries set as a number, and a hook replaced on the instance,
    // are honoured.
    let got = run(format!(
        "from requests.adapters import HTTPAdapter\nfrom urllib3.util import Retry\ns = requests.Session()\ns.mount('http://', HTTPAdapter(max_retries=Retry(0)))\ntry:\n    s.get('{base}/slow', timeout=1)\nexcept requests.ConnectionError as e:\n    wrapped = (type(e).__name__, type(e.args[0]).__name__)\na = HTTPAdapter()\na.max_retries = 3\nb = HTTPAdapter()\nb.request_url = lambda request, proxies: '/json'\ns.mount('http://', a)\nfirst = s.get('{base}/json').json()['n']\ns.mount('http://', b)\n(wrapped, first, s.get('{base}/echo').json())"
    ))
    .await;
    assert_eq!(
        got["value"], "(('ConnectionError', 'MaxRetryError'), 3, {'hello': 'world', 'n': 3})",
        "{got}"
    );

    // Header bytes as each client reads them natively: requests (http.client)
    // as latin-1, httpx as UTF-8 when every value is.
    let got = run(format!(
        "r = requests.get('{base}/headers', headers={{'X-Name': 'caf\\xe9'}})\nx = httpx.get('{base}/headers', headers={{'X-Name': 'M\\xfcller'.encode()}})\ntry:\n    requests.get('{base}/headers', headers={{'X-Name': 'a\\ud800'}})\nexcept UnicodeEncodeError:\n    lone = 'UnicodeEncodeError'\n(r.headers['x-echo'], r.headers['x-utf8'], x.headers['x-echo'], x.headers['x-utf8'], lone)"
    ))
    .await;
    // httpx sends its header bytes as they are, and reads an answer whose
    // values are all UTF-8 as UTF-8; a lone surrogate fails to encode, as it
    // does natively, before anything is asked.
    assert_eq!(
        got["value"],
        "('caf\u{e9}', 'caf\u{c3}\u{a9}', 'M\u{fc}ller', 'caf\u{e9}', 'UnicodeEncodeError')",
        "{got}"
    );
    assert_eq!(door_requests(&got).len(), 2, "{got}");

    // HTTPS: the host does TLS.
    let got = run(format!("requests.get('{secure}/json').json()['hello']")).await;
    assert_eq!(got["value"], "'world'", "{got}");

    // httpx, sync and async: its own redirect rule (not followed by default).
    let got = run(format!(
        "r = httpx.get('{base}/json')\nr2 = httpx.get('{base}/redirect')\nr3 = httpx.get('{base}/redirect', follow_redirects=True)\n(r.json()['n'], r2.status_code, r3.status_code, str(r3.url))"
    ))
    .await;
    assert_eq!(
        got["value"],
        format!("(3, 302, 200, '{base}/json')"),
        "{got}"
    );
    let got = run(format!(
        "import asyncio\nasync with httpx.AsyncClient() as client:\n    a, b = await asyncio.gather(client.get('{base}/json'), client.get('{secure}/json'))\n(a.status_code, b.json()['hello'])"
    ))
    .await;
    assert_eq!(got["value"], "(200, 'world')", "{got}");
    let got = run(format!(
        "r = httpx.post('{base}/echo', content=b'raw bytes')\nr.json()['body']"
    ))
    .await;
    assert_eq!(got["value"], "'raw bytes'", "{got}");

    // urllib3 directly.
    let got = run(format!(
        "http = urllib3.PoolManager()\nr = http.request('GET', '{base}/1mb')\n(r.status, len(r.data))"
    ))
    .await;
    assert_eq!(got["value"], format!("(200, {MIB})"), "{got}");

    // aiohttp.
    let got = run(format!(
        "async with aiohttp.ClientSession() as session:\n    async with session.get('{base}/json') as r:\n        data = await r.json()\n    async with session.post('{base}/echo', data=b'abc') as r2:\n        echoed = (await r2.json())['body']\n    async with session.get('{secure}/json') as r3:\n        secure = r3.status\n(r.status, data['hello'], echoed, secure)"
    ))
    .await;
    assert_eq!(got["value"], "(200, 'world', 'abc', 200)", "{got}");
}

#[tokio::test]
async fn every_client_is_refused_what_the_rules_refuse_naming_the_rule() {
    let index = crate::real_wheels::index().await;
    let http = serve_http().await;
    let other = serve_http().await;
    let server = server(
        &index.url,
        &[
            ("SANDBOX_ALLOW_HOSTS", &format!("http://{http}")),
            ("SANDBOX_ALLOW_NETWORKS", "127.0.0.1/32"),
        ],
    )
    .await;
    let id = server.create_with(json!({})).await;
    let setup = server
        .call(
            "execute_code",
            json!({"session_id": id, "code": "%pip install -q requests httpx aiohttp\nimport requests, httpx, urllib3, aiohttp", "timeout_seconds": 240}),
        )
        .await;
    assert_ne!(setup.is_error, Some(true), "{}", text(&setup));
    let refused = format!("http://{other}/json");
    // The class is named as a traceback names it: its module, then its name.
    for (client, class, code) in [
        (
            "requests",
            "requests.exceptions.NetworkRefused",
            format!(
                "try:\n    requests.get('{refused}')\nexcept requests.exceptions.ConnectionError as e:\n    caught = (f'{{type(e).__module__}}.{{type(e).__qualname__}}', str(e))\ncaught"
            ),
        ),
        (
            "httpx",
            "httpx.NetworkRefused",
            format!(
                "try:\n    httpx.get('{refused}')\nexcept httpx.ConnectError as e:\n    caught = (f'{{type(e).__module__}}.{{type(e).__qualname__}}', str(e))\ncaught"
            ),
        ),
        (
            "urllib3",
            "urllib3.exceptions.NetworkRefused",
            format!(
                "try:\n    urllib3.PoolManager().request('GET', '{refused}')\nexcept urllib3.exceptions.HTTPError as e:\n    caught = (f'{{type(e).__module__}}.{{type(e).__qualname__}}', str(e))\ncaught"
            ),
        ),
        (
            "aiohttp",
            "aiohttp.NetworkRefused",
            format!(
                "try:\n    async with aiohttp.ClientSession() as s:\n        await s.get('{refused}')\nexcept aiohttp.ClientConnectionError as e:\n    caught = (f'{{type(e).__module__}}.{{type(e).__qualname__}}', str(e))\ncaught"
            ),
        ),
    ] {
        let result = server
            .call(
                "execute_code",
                json!({"session_id": id, "code": code, "timeout_seconds": 120}),
            )
            .await;
        assert_ne!(result.is_error, Some(true), "{client}: {}", text(&result));
        let got = structured(&result);
        let value = got["value"].as_str().unwrap_or_default();
        assert!(
            // A long tuple is laid out over lines, as a notebook shows it.
            value.starts_with(&format!("('{class}',")) && value.contains("SANDBOX_ALLOW_HOSTS"),
            "{client}: {got}"
        );
        let records = door_requests(&got);
        assert_eq!(
            records.len(),
            1,
            "{client} asked once, with no retry: {got}"
        );
        assert!(records[0]["refused"].is_string(), "{client}: {got}");
    }
}

const HTTP_IDIOMS: &[Idiom] = &[Idiom {
    name: "pd.read_csv(url) still goes through urllib",
    cells: &[
        "import pandas as pd\ntry:\n    pd.read_csv('http://192.0.2.1/x.csv')\nexcept Exception as e:\n    kind = f'{type(e).__module__}.{type(e).__qualname__}'\nkind",
    ],
    check: |o| value_is(o, "'urllib.error.NetworkRefused'"),
}];

#[tokio::test]
async fn urllib_keeps_its_refusals() {
    let index = crate::real_wheels::index().await;
    let server: Server = server(&index.url, &[]).await;
    run_corpus(&server, HTTP_IDIOMS).await;
}

/// Code written against http.client (and what is built on it, such as
/// xmlrpc.client) goes through the door too, one connection serving several
/// requests; a refused host raises ConnectionRefusedError naming the rule, and
/// a body larger than the door carries is refused as it is written; a raw
/// socket says there are none, and what to use.
#[tokio::test]
async fn http_client_goes_through_the_door_and_sockets_say_what_to_use() {
    let http = serve_http().await;
    let other = serve_http().await;
    let server = server(
        "none",
        &[
            ("SANDBOX_ALLOW_HOSTS", &format!("http://{http}")),
            ("SANDBOX_ALLOW_NETWORKS", "127.0.0.1/32"),
        ],
    )
    .await;
    let id = server.create_with(json!({})).await;
    let (host, port) = (http.ip(), http.port());
    let code = format!(
        "import http.client, json, socket\n\
         c = http.client.HTTPConnection('{host}', {port}, timeout=30)\n\
         c.request('GET', '/json')\n\
         r = c.getresponse()\n\
         first = (r.status, json.loads(r.read()))\n\
         c.request('POST', '/echo', body=b'a=1', headers={{'Content-Type': 'text/plain'}})\n\
         r = c.getresponse()\n\
         echo = json.loads(r.read())\n\
         c.request('GET', '/missing')\n\
         r = c.getresponse()\n\
         missing = (r.status, r.read())\n\
         c.request('GET', '/headers', headers={{'X-Name': 'caf\\xe9'}})\n\
         r = c.getresponse()\n\
         r.read()\n\
         marks = (r.getheader('X-Echo'), r.getheader('X-Utf8'))\n\
         c.close()\n\
         try:\n    d = http.client.HTTPConnection('{other_host}', {other_port}, timeout=30)\n    d.request('GET', '/json')\n    refused = None\n\
         except ConnectionRefusedError as e:\n    refused = str(e)\n\
         try:\n    socket.create_connection(('{host}', {port}))\n    raw = None\n\
         except OSError as e:\n    raw = str(e)\n\
         try:\n    http.client.HTTPConnection('{host}', {port}).request('POST', '/echo', body=b'x' * 4_000_000)\n    big = None\n\
         except ConnectionError as e:\n    big = 'more than the door carries' in str(e)\n\
         (first, (echo['method'], echo['body']), missing, marks, ('SANDBOX_ALLOW_HOSTS' in refused, big), raw)",
        other_host = other.ip(),
        other_port = other.port(),
    );
    let got = server.run(&id, &code).await;
    let value = got["value"].as_str().unwrap_or_default();
    assert!(
        value.starts_with("((200, {'hello': 'world', 'n': 3}),")
            && value.contains("('POST', 'a=1')")
            && value.contains("(404, b'no such thing')")
            // As native http.client: the header's latin-1 byte goes out and comes
            // back as itself, UTF-8 bytes read as latin-1.
            && value.contains("('caf\u{e9}', 'caf\u{c3}\u{a9}')")
            && value.contains("(True, True)")
            && value.contains("there are no network sockets in this sandbox"),
        "{got}"
    );
    let records = door_requests(&got);
    assert_eq!(records.len(), 5, "four fetched, one refused: {got}");
    assert!(records[4]["refused"].is_string(), "{got}");
}
