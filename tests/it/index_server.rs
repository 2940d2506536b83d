//! A package index on loopback for the tests: the simple API (PEP 691 JSON,
//! or PEP 503 HTML on request) and the files it links to, served by a few
//! lines of HTTP/1.1 over tokio. It records every request path so tests can
//! check what was (not) downloaded, and can answer 503 a few times to test
//! retries.

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
    failures: HashMap<String, u32>,
    html: bool,
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
                    let (status, content_type, body) = respond(&state, &path);
                    let header = format!(
                        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = stream.write_all(header.as_bytes()).await;
                    let _ = stream.write_all(&body).await;
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

    /// How many requests asked for exactly `path`.
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

fn respond(state: &Mutex<State>, path: &str) -> (&'static str, &'static str, Vec<u8>) {
    let mut state = state.lock().unwrap();
    state.requests.push(path.to_owned());
    if let Some(left) = state.failures.get_mut(path)
        && *left > 0
    {
        *left -= 1;
        return (
            "503 Service Unavailable",
            "text/plain",
            b"try later".to_vec(),
        );
    }
    if let Some(bytes) = state.files.get(path) {
        return ("200 OK", "application/octet-stream", bytes.clone());
    }
    let Some(project) = path
        .strip_prefix("/simple/")
        .and_then(|p| p.strip_suffix('/'))
    else {
        return ("404 Not Found", "text/plain", b"not found".to_vec());
    };
    let Some(files) = state.projects.get(project) else {
        return ("404 Not Found", "text/plain", b"not found".to_vec());
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
                "<a href=\"../../files/{0}#sha256={1}\"{attrs}>{0}</a><br/>\n",
                f.filename, f.sha256
            ));
        }
        html.push_str("</body></html>\n");
        return ("200 OK", "text/html", html.into_bytes());
    }
    let files: Vec<_> = files
        .iter()
        .map(|f| {
            let mut file = json!({
                "filename": f.filename,
                "url": format!("../../files/{}", f.filename),
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
    (
        "200 OK",
        "application/vnd.pypi.simple.v1+json",
        serde_json::to_vec(&page).unwrap(),
    )
}
