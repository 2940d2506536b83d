//! The HTTP clients at their edges: a proxy setting (HTTPS_PROXY,
//! `proxies=`, urllib3's ProxyManager) is not used, and the request goes to
//! its own target through the door, never to the proxy's address; aiohttp's
//! `expect100=True` gets its `100 Continue` and its answer; empty, chunked and
//! self-contradicting answers read as they do natively.

use serde_json::{Value, json};

use crate::notebook_http::{door_requests, door_sandbox, serve_http, serve_https};
use crate::support::{Server, structured, text};

async fn run(server: &Server, id: &str, code: &str) -> Value {
    let result = server
        .call(
            "execute_code",
            json!({"session_id": id, "code": code, "timeout_seconds": 30}),
        )
        .await;
    assert_ne!(result.is_error, Some(true), "{code}\n{}", text(&result));
    structured(&result)
}

fn hosts(got: &Value) -> Vec<String> {
    door_requests(got)
        .iter()
        .map(|r| r["host"].as_str().unwrap_or("?").to_owned())
        .collect()
}

#[tokio::test]
async fn a_proxy_setting_is_not_used_and_requests_reach_their_own_target() {
    let index = crate::real_wheels::index().await;
    let http = serve_http().await;
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = crate::http::test_certificate(dir.path());
    let target = serve_https(&cert, &key).await;
    let proxy = serve_https(&cert, &key).await;
    let allowed = format!(
        "http://{http}, https://localhost:{}, https://localhost:{}",
        target.port(),
        proxy.port()
    );
    let (server, id) = door_sandbox(
        &index.url,
        &[
            ("SANDBOX_ALLOW_HOSTS", &allowed),
            ("SANDBOX_ALLOW_NETWORKS", "127.0.0.1/32, ::1/128"),
            ("SSL_CERT_FILE", ca.to_str().unwrap()),
        ],
        "%pip install -q requests aiohttp\nimport requests, urllib3, aiohttp\n'ready'",
    )
    .await;
    let secure = format!("https://localhost:{}", target.port());
    let via = format!("localhost:{}", proxy.port());

    // HTTPS_PROXY in the environment, with credentials for the proxy.
    let got = run(
        &server,
        &id,
        &format!(
            "import os\nos.environ['HTTPS_PROXY'] = 'http://user:secret@{via}'\nr = requests.get('{secure}/echo', headers={{'Authorization': 'Bearer for-the-target'}})\n(r.status_code, r.json()['method'])"
        ),
    )
    .await;
    assert_eq!(got["value"], "(200, 'GET')", "{got}");
    assert_eq!(hosts(&got), std::slice::from_ref(&secure), "{got}");
    let stderr = got["stderr"]["text"].as_str().unwrap_or("");
    assert!(
        stderr.contains(&format!("[the proxy {via} is not used")),
        "{got}"
    );
    assert!(!stderr.contains("secret"), "{got}");

    // proxies= and ProxyManager.
    let got = run(
        &server,
        &id,
        &format!(
            "del os.environ['HTTPS_PROXY']\na = requests.get('{secure}/json', proxies={{'https': 'http://{via}'}}).json()['n']\nb = urllib3.ProxyManager('http://{via}').request('GET', '{secure}/json').json()['n']\n(a, b)"
        ),
    )
    .await;
    assert_eq!(got["value"], "(3, 3)", "{got}");
    assert_eq!(hosts(&got), [secure.clone(), secure.clone()], "{got}");
}

#[tokio::test]
async fn aiohttp_expect100_gets_its_answer() {
    let index = crate::real_wheels::index().await;
    let http = serve_http().await;
    let (server, id) = door_sandbox(
        &index.url,
        &[
            ("SANDBOX_ALLOW_HOSTS", &format!("http://{http}")),
            ("SANDBOX_ALLOW_NETWORKS", "127.0.0.1/32"),
        ],
        "%pip install -q aiohttp\nimport aiohttp\n'ready'",
    )
    .await;
    let got = run(
        &server,
        &id,
        &format!(
            "async with aiohttp.ClientSession() as s:\n    async with s.post('http://{http}/echo', data=b'x' * 10, expect100=True) as r:\n        echoed = await r.json()\n(r.status, echoed['method'], echoed['body'])"
        ),
    )
    .await;
    assert_eq!(got["value"], "(200, 'POST', 'xxxxxxxxxx')", "{got}");
}

/// The answers of the odd server: empty, chunked, a length beside a transfer
/// coding (which HTTP/1.1 ignores), and a body shorter than its length.
fn odd_answer(path: &str) -> &'static [u8] {
    match path {
        "/empty" => b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n",
        "/chunked" => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n4\r\na,b\n\r\n4\r\n1,2\n\r\n0\r\n\r\n",
        "/short" => b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close\r\n\r\nonly half of it",
        "/cut" => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\nf\r\nonly half of it\r\n",
        _ => b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n6\r\nabcdef\r\n0\r\n\r\n",
    }
}

#[tokio::test]
async fn empty_chunked_and_contradicting_answers_read_as_natively() {
    let index = crate::real_wheels::index().await;
    let odd = crate::network::raw_server(odd_answer).await;
    let origin = format!("http://{odd}");
    let (server, id) = door_sandbox(
        &index.url,
        &[
            ("SANDBOX_ALLOW_HOSTS", &origin),
            ("SANDBOX_ALLOW_NETWORKS", "127.0.0.1/32"),
        ],
        "%pip install -q requests httpx aiohttp\nimport requests, httpx, urllib3, aiohttp\n'ready'",
    )
    .await;
    // An empty answer is not closed before it is read (a file wrapper refused
    // it), a chunked one is read line by line through a text wrapper (it was
    // taken for closed after its last byte), a length beside a transfer
    // coding is not held against the body, and an http.client connection the
    // server closes opens again for the next request while the answer it
    // gave is still read (it was not ready).
    let got = run(
        &server,
        &id,
        &format!(
            "import io, csv\ne = requests.get('{origin}/empty', stream=True)\nc = requests.get('{origin}/chunked', stream=True)\nimport http.client\nh = http.client.HTTPConnection('{odd}')\nh.request('GET', '/both')\nfirst = h.getresponse()\nh.request('GET', '/both')\n(e.raw.closed, io.TextIOWrapper(e.raw).read(), list(csv.reader(io.TextIOWrapper(c.raw, encoding='utf-8'))), requests.get('{origin}/both').text, first.read(), h.getresponse().read())"
        ),
    )
    .await;
    assert_eq!(
        got["value"], "(False, '', [['a', 'b'], ['1', '2']], 'abcdef', b'abcdef', b'abcdef')",
        "{got}"
    );
    // A body that breaks off raises what each client raises natively for one,
    // where it does: when the body is read, after the status and headers came
    // (urllib3, reading it at once, retries as it does natively, then gives
    // up; requests reads it after its adapter, so nothing is sent twice).
    let got = run(
        &server,
        &id,
        &format!(
            "u = '{origin}/short'\ndef kind(f):\n    try:\n        f()\n    except Exception as e:\n        return type(e).__name__\nasync def with_aiohttp():\n    async with aiohttp.ClientSession() as s:\n        async with s.get(u) as r:\n            await r.read()\ntry:\n    await with_aiohttp()\nexcept Exception as e:\n    by_aiohttp = type(e).__name__\nimport urllib.request, http.client\nstreamed = requests.get(u, stream=True)\nc = http.client.HTTPConnection('{odd}')\nc.request('GET', '/short')\nnames = [kind(lambda: requests.get(u)), kind(lambda: httpx.get(u)), kind(lambda: urllib3.request('GET', u)), by_aiohttp, kind(lambda: urllib.request.urlopen(u).read()), kind(c.getresponse().read), str(streamed.status_code), kind(lambda: streamed.content), kind(lambda: list(io.TextIOWrapper(urllib.request.urlopen('{origin}/cut'))))]\n' '.join(names)"
        ),
    )
    .await;
    assert_eq!(
        got["value"],
        "'ChunkedEncodingError RemoteProtocolError MaxRetryError ClientPayloadError IncompleteRead IncompleteRead 200 ChunkedEncodingError IncompleteRead'",
        "{got}"
    );
    // The usage records say each answer broke off, and what came.
    let records = door_requests(&got);
    assert!(
        records
            .iter()
            .all(|r| r["broken"] == true && r["bytes"] == 15),
        "{got}"
    );
}
