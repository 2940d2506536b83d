//! A package index on loopback for the tests: the simple API (PEP 691 JSON,
//! or PEP 503 HTML on request) and the files it links to, served by a few
//! lines of HTTP/1.1 over tokio. It records every request path (and the
//! `Authorization` header each carried) so tests can check what was (not)
//! downloaded and where credentials went; it can answer 503 a few times to
//! test retries, demand credentials, redirect, serve a raw page, and trickle
//! a file out slowly.

use std::time::Duration;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::wheels::{Wheel, sha256_hex};

/// One file as the index lists it.
#[derive(Clone, Debug)]
pub struct Listed {
    pub filename: String,
    /// The sha256 the index publishes (normally that of the bytes).
    pub sha256: String,
    pub requires_python: Option<String>,
    pub yanked: Option<String>,
    /// Whether a PEP 658 metadata file is served beside it.
    pub metadata: Option<Vec<u8>>,
}

#[derive(Default)]
struct State {
    projects: BTreeMap<String, Vec<Listed>>,
    files: HashMap<String, Vec<u8>>,
    requests: Vec<String>,
    authorizations: Vec<(String, Option<String>)>,
    failures: HashMap<String, u32>,
    html: bool,
    /// `Basic ...` header every request must carry, when set.
    required_auth: Option<String>,
    /// Absolute URLs listed for files instead of `../../files/NAME`.
    links: HashMap<String, String>,
    /// Paths answered with a redirect to the given location.
    redirects: HashMap<String, String>,
    /// Project pages served as given: (content type, body).
    raw_pages: HashMap<String, (String, Vec<u8>)>,
    /// Paths whose body is sent one byte per interval.
    trickles: HashMap<String, Duration>,
    /// Whether files are served by ranges (`Range: bytes=...`).
    ranges: bool,
    /// Bytes served for range requests of a path instead of its own.
    range_lies: HashMap<String, Vec<u8>>,
    /// Range requests: (path, the `Range` header).
    range_requests: Vec<(String, String)>,
    /// Paths whose ranges come from a made-up file: (its size, its first
    /// bytes, its last bytes; zeros between).
    made_up: HashMap<String, (u64, Vec<u8>, Vec<u8>)>,
    /// Bytes of file bodies sent (whole or ranges).
    bytes_served: u64,
}

/// One answer.
struct Reply {
    status: &'static str,
    content_type: String,
    body: Vec<u8>,
    location: Option<String>,
    trickle: Option<Duration>,
    content_range: Option<String>,
}

impl Reply {
    fn new(status: &'static str, content_type: &str, body: Vec<u8>) -> Self {
        Self {
            status,
            content_type: content_type.to_owned(),
            body,
            location: None,
            trickle: None,
            content_range: None,
        }
    }
}

/// A running index.
pub struct IndexServer {
    /// `http://127.0.0.1:PORT/simple/`.
    pub url: String,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for IndexServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn normalize(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

impl IndexServer {
    /// Starts serving on a free loopback port.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let state = shared.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 65536 {
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&buf).into_owned();
                    let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
                    let authorization = head.lines().find_map(|line| {
                        let (name, value) = line.split_once(':')?;
                        name.trim()
                            .eq_ignore_ascii_case("authorization")
                            .then(|| value.trim().to_owned())
                    });
                    let range = head.lines().find_map(|line| {
                        let (name, value) = line.split_once(':')?;
                        name.trim()
                            .eq_ignore_ascii_case("range")
                            .then(|| value.trim().to_owned())
                    });
                    let reply = respond(&state, &path, authorization, range);
                    let mut location = reply
                        .location
                        .as_ref()
                        .map(|l| format!("Location: {l}\r\n"))
                        .unwrap_or_default();
                    if let Some(range) = &reply.content_range {
                        location.push_str(&format!("Content-Range: {range}\r\n"));
                    }
                    let header = format!(
                        "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{location}Connection: close\r\n\r\n",
                        reply.status,
                        reply.content_type,
                        reply.body.len()
                    );
                    let _ = stream.write_all(header.as_bytes()).await;
                    match reply.trickle {
                        Some(interval) => {
                            for byte in &reply.body {
                                if stream.write_all(&[*byte]).await.is_err()
                                    || stream.flush().await.is_err()
                                {
                                    return;
                                }
                                tokio::time::sleep(interval).await;
                            }
                        }
                        None => {
                            let _ = stream.write_all(&reply.body).await;
                        }
                    }
                    let _ = stream.shutdown().await;
                });
            }
        });
        Self {
            url: format!("http://127.0.0.1:{port}/simple/"),
            state,
            task,
        }
    }

    /// Publishes a wheel (with a correct hash and a PEP 658 metadata file).
    pub fn add_wheel(&self, wheel: &Wheel) -> String {
        let bytes = wheel.build();
        let metadata = metadata_of(&bytes);
        let filename = wheel.filename();
        self.add_file(
            &wheel.name,
            Listed {
                filename: filename.clone(),
                sha256: sha256_hex(&bytes),
                requires_python: None,
                yanked: None,
                metadata,
            },
            bytes,
        );
        filename
    }

    /// Publishes a wheel file as it is (a real one, read from disk), with its
    /// hash and its METADATA as a PEP 658 file.
    pub fn add_wheel_file(&self, project: &str, filename: &str, bytes: Vec<u8>) {
        let listed = Listed {
            filename: filename.to_owned(),
            sha256: sha256_hex(&bytes),
            requires_python: None,
            yanked: None,
            metadata: metadata_of(&bytes),
        };
        self.add_file(project, listed, bytes);
    }

    /// Publishes any file of `project` as listed.
    pub fn add_file(&self, project: &str, listed: Listed, bytes: Vec<u8>) {
        let mut state = self.state.lock().unwrap();
        if let Some(m) = &listed.metadata {
            state
                .files
                .insert(format!("/files/{}.metadata", listed.filename), m.clone());
        }
        state
            .files
            .insert(format!("/files/{}", listed.filename), bytes);
        state
            .projects
            .entry(normalize(project))
            .or_default()
            .push(listed);
    }

    /// Serves project pages as HTML instead of JSON.
    pub fn serve_html(&self) {
        self.state.lock().unwrap().html = true;
    }

    /// Answers the next `n` requests for `path` with 503.
    pub fn fail_next(&self, path: &str, n: u32) {
        self.state
            .lock()
            .unwrap()
            .failures
            .insert(path.to_owned(), n);
    }

    /// Every request path so far.
    pub fn requests(&self) -> Vec<String> {
        self.state.lock().unwrap().requests.clone()
    }

    /// Every request path so far with the `Authorization` header it carried.
    pub fn authorizations(&self) -> Vec<(String, Option<String>)> {
        self.state.lock().unwrap().authorizations.clone()
    }

    /// Answers 401 to every request without HTTP Basic credentials
    /// `user:password`.
    pub fn require_auth(&self, user: &str, password: &str) {
        use base64::Engine;
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        self.state.lock().unwrap().required_auth = Some(format!("Basic {token}"));
    }

    /// The root URL with `user:password` in it.
    pub fn url_with_credentials(&self, user: &str, password: &str) -> String {
        self.url
            .replacen("http://", &format!("http://{user}:{password}@"), 1)
    }

    /// The URL of this server's file `filename`.
    pub fn file_url(&self, filename: &str) -> String {
        self.url.replace("/simple/", &format!("/files/{filename}"))
    }

    /// Lists `filename` on its project page with this absolute URL.
    pub fn link(&self, filename: &str, url: &str) {
        self.state
            .lock()
            .unwrap()
            .links
            .insert(filename.to_owned(), url.to_owned());
    }

    /// Answers requests for `path` with a redirect to `location`.
    pub fn redirect(&self, path: &str, location: &str) {
        self.state
            .lock()
            .unwrap()
            .redirects
            .insert(path.to_owned(), location.to_owned());
    }

    /// Serves `body` as the project page of `project`, as it is.
    pub fn raw_page(&self, project: &str, content_type: &str, body: Vec<u8>) {
        self.state
            .lock()
            .unwrap()
            .raw_pages
            .insert(normalize(project), (content_type.to_owned(), body));
    }

    /// Sends the body of `path` one byte per `interval`.
    pub fn trickle(&self, path: &str, interval: Duration) {
        self.state
            .lock()
            .unwrap()
            .trickles
            .insert(path.to_owned(), interval);
    }

    /// How many requests asked for exactly `path`.
    /// Serves files by ranges from now on.
    pub fn serve_ranges(&self) {
        self.state.lock().unwrap().ranges = true;
    }

    /// Serves `bytes` instead of the file's own to range requests of `path`.
    pub fn lie_in_ranges(&self, path: &str, bytes: Vec<u8>) {
        self.state
            .lock()
            .unwrap()
            .range_lies
            .insert(path.to_owned(), bytes);
    }

    /// Answers range requests of `path` from a made-up file of `total`
    /// bytes starting with `head` and ending with `tail` (whole requests
    /// still get the real file).
    pub fn make_up_ranges(&self, path: &str, total: u64, head: Vec<u8>, tail: Vec<u8>) {
        self.state
            .lock()
            .unwrap()
            .made_up
            .insert(path.to_owned(), (total, head, tail));
    }

    /// Bytes of files sent so far, whole or by ranges (not a whole file
    /// sent for a range request, which the client leaves unread).
    pub fn bytes_served(&self) -> u64 {
        self.state.lock().unwrap().bytes_served
    }

    /// Range requests so far, served or not: (path, `Range` header).
    pub fn range_requests(&self) -> Vec<(String, String)> {
        self.state.lock().unwrap().range_requests.clone()
    }

    pub fn count(&self, path: &str) -> usize {
        self.requests().iter().filter(|p| *p == path).count()
    }
}

/// The METADATA member of a wheel, for the PEP 658 file.
fn metadata_of(wheel: &[u8]) -> Option<Vec<u8>> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(wheel)).ok()?;
    let name = archive
        .file_names()
        .find(|n| n.ends_with(".dist-info/METADATA"))?
        .to_owned();
    let mut data = Vec::new();
    std::io::Read::read_to_end(&mut archive.by_name(&name).ok()?, &mut data).ok()?;
    Some(data)
}

fn respond(
    state: &Mutex<State>,
    path: &str,
    authorization: Option<String>,
    range: Option<String>,
) -> Reply {
    let asked_range = range.is_some();
    let reply = ranged(state, path, authorization, range);
    // A whole file sent for a range request is left unread by the client.
    let read = !asked_range || reply.status.starts_with("206");
    if path.starts_with("/files/") && read {
        state.lock().unwrap().bytes_served += reply.body.len() as u64;
    }
    reply
}

fn ranged(
    state: &Mutex<State>,
    path: &str,
    authorization: Option<String>,
    range: Option<String>,
) -> Reply {
    let mut reply = answer(state, path, authorization);
    if reply.status.starts_with("200") {
        let mut state = state.lock().unwrap();
        reply.trickle = state.trickles.get(path).copied();
        if let Some(range) = &range {
            state.range_requests.push((path.to_owned(), range.clone()));
        }
        if let Some(range) = &range
            && let Some((total, head, tail)) = state.made_up.get(path)
            && let Some((start, end)) = byte_range(range, *total as usize)
        {
            let (total, head, tail) = (*total as usize, head.clone(), tail.clone());
            let byte = |at: usize| {
                if at < head.len() {
                    head[at]
                } else if at >= total - tail.len() {
                    tail[at - (total - tail.len())]
                } else {
                    0
                }
            };
            reply.body = (start..=end).map(byte).collect();
            reply.content_range = Some(format!("bytes {start}-{end}/{total}"));
            reply.status = "206 Partial Content";
            return reply;
        }
        if let Some(range) = range
            && state.ranges
            && state.files.contains_key(path)
        {
            let body = state.range_lies.get(path).unwrap_or(&reply.body);
            if let Some((start, end)) = byte_range(&range, body.len()) {
                reply.content_range = Some(format!("bytes {start}-{end}/{}", body.len()));
                reply.body = body[start..=end].to_vec();
                reply.status = "206 Partial Content";
            }
        }
    }
    reply
}

/// The bytes `bytes=A-B` or `bytes=-N` asks for in a file of `len` bytes.
fn byte_range(header: &str, len: usize) -> Option<(usize, usize)> {
    let spec = header.strip_prefix("bytes=")?;
    let (first, last) = spec.split_once('-')?;
    if len == 0 {
        return None;
    }
    if first.is_empty() {
        let n: usize = last.parse().ok()?;
        return Some((len.saturating_sub(n), len - 1));
    }
    let first: usize = first.parse().ok()?;
    let last: usize = last.parse::<usize>().ok()?.min(len - 1);
    (first <= last).then_some((first, last))
}

fn answer(state: &Mutex<State>, path: &str, authorization: Option<String>) -> Reply {
    let mut state = state.lock().unwrap();
    state.requests.push(path.to_owned());
    state
        .authorizations
        .push((path.to_owned(), authorization.clone()));
    if let Some(required) = &state.required_auth
        && authorization.as_ref() != Some(required)
    {
        return Reply::new(
            "401 Unauthorized",
            "text/plain",
            b"credentials needed".to_vec(),
        );
    }
    if let Some(left) = state.failures.get_mut(path)
        && *left > 0
    {
        *left -= 1;
        return Reply::new(
            "503 Service Unavailable",
            "text/plain",
            b"try later".to_vec(),
        );
    }
    if let Some(location) = state.redirects.get(path) {
        let mut reply = Reply::new("302 Found", "text/plain", Vec::new());
        reply.location = Some(location.clone());
        return reply;
    }
    if let Some(bytes) = state.files.get(path) {
        return Reply::new("200 OK", "application/octet-stream", bytes.clone());
    }
    let Some(project) = path
        .strip_prefix("/simple/")
        .and_then(|p| p.strip_suffix('/'))
    else {
        return Reply::new("404 Not Found", "text/plain", b"not found".to_vec());
    };
    if let Some((content_type, body)) = state.raw_pages.get(project) {
        return Reply::new("200 OK", content_type, body.clone());
    }
    let Some(files) = state.projects.get(project) else {
        return Reply::new("404 Not Found", "text/plain", b"not found".to_vec());
    };
    let href = |filename: &str| {
        state
            .links
            .get(filename)
            .cloned()
            .unwrap_or_else(|| format!("../../files/{filename}"))
    };
    if state.html {
        let mut html = format!("<!DOCTYPE html>\n<html><body><h1>Links for {project}</h1>\n");
        for f in files {
            let mut attrs = String::new();
            if let Some(rp) = &f.requires_python {
                attrs.push_str(&format!(
                    " data-requires-python=\"{}\"",
                    rp.replace('>', "&gt;").replace('<', "&lt;")
                ));
            }
            if let Some(reason) = &f.yanked {
                attrs.push_str(&format!(" data-yanked=\"{reason}\""));
            }
            if let Some(m) = &f.metadata {
                attrs.push_str(&format!(" data-core-metadata=\"sha256={}\"", sha256_hex(m)));
            }
            html.push_str(&format!(
                "<a href=\"{2}#sha256={1}\"{attrs}>{0}</a><br/>\n",
                f.filename,
                f.sha256,
                href(&f.filename)
            ));
        }
        html.push_str("</body></html>\n");
        return Reply::new("200 OK", "text/html", html.into_bytes());
    }
    let files: Vec<_> = files
        .iter()
        .map(|f| {
            let mut file = json!({
                "filename": f.filename,
                "url": href(&f.filename),
                "hashes": {"sha256": f.sha256},
            });
            if let Some(rp) = &f.requires_python {
                file["requires-python"] = json!(rp);
            }
            if let Some(reason) = &f.yanked {
                file["yanked"] = json!(reason);
            }
            if let Some(m) = &f.metadata {
                file["core-metadata"] = json!({"sha256": sha256_hex(m)});
            }
            file
        })
        .collect();
    let page = json!({"meta": {"api-version": "1.1"}, "name": project, "files": files});
    Reply::new(
        "200 OK",
        "application/vnd.pypi.simple.v1+json",
        serde_json::to_vec(&page).unwrap(),
    )
}
