//! [`Envd`]: the file side of an E2B sandbox, through envd, the daemon in
//! every sandbox: bytes with `GET`/`POST /files`, listings and metadata with
//! the `filesystem.Filesystem` Connect RPCs (unary, JSON).
//!
//! Paths follow the rule in [`super::paths`]: a guest path is the same path
//! in the VM, and requests run as the user the code runs as. Links made by
//! code inside the VM are followed by envd, but the VM is the sandbox:
//! nothing on this machine is reachable through them.

use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::AUTHORIZATION;
use reqwest::multipart::{Form, Part};
use reqwest::{Client, Method, StatusCode};
use serde::Deserialize;

use super::error::E2bError;
use super::listing::{EntryInfo, parse_listing, to_seconds};
use super::paths::{FILE_USER, guest_path_of, vm_path};
use super::route::{ENVD_PORT, Route};
use super::transport::{Failure, Retry, parse_off_workers, read_body, read_capped, send};
use crate::sandbox::{
    EntryKind, FileContent, FileEntry, FileInterface, GuestPath, Listing, SandboxError,
};

/// Furthest offset `read_file` reads from (envd sends a file from its start).
const MAX_READ_OFFSET: u64 = 256 << 20;
/// Most bytes of a `ListDir` answer read: about 100 000 entries.
const MAX_LISTING_BYTES: usize = 32 << 20;
/// Most bytes of any other answer of envd read (`Stat`, `/metrics`).
const MAX_SMALL_ANSWER_BYTES: usize = 64 << 10;

/// File access to one E2B sandbox.
#[derive(Clone, Debug)]
pub(crate) struct Envd {
    http: Client,
    route: Route,
    bound: Duration,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct StatResponse {
    entry: Option<EntryInfo>,
}

/// Memory and disk of the VM, from envd's `/metrics`.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Metrics {
    /// Memory in use, in bytes.
    pub mem_used: Option<u64>,
    /// Disk in use, in bytes.
    pub disk_used: Option<u64>,
}

/// The error for an answer that is not the JSON expected.
fn unexpected(what: &str, e: &serde_json::Error) -> SandboxError {
    E2bError::Protocol {
        what: what.to_owned(),
        detail: format!("the answer is not the expected JSON: {e}"),
    }
    .into()
}

impl Envd {
    /// File access through `route`, each request bounded by `bound`.
    pub(crate) fn new(http: Client, route: Route, bound: Duration) -> Self {
        Self { http, route, bound }
    }

    /// Reads at most `max_bytes` of a file, from byte `offset`.
    pub(crate) async fn read(
        &self,
        path: &GuestPath,
        offset: u64,
        max_bytes: u64,
    ) -> Result<FileContent, SandboxError> {
        let shown = path.to_string();
        if path.is_root() {
            return Err(SandboxError::WrongKind {
                path: shown,
                what: "the sandbox's root directory; use list_files to see what it holds".into(),
            });
        }
        if offset > MAX_READ_OFFSET {
            return Err(SandboxError::InvalidArgument(format!(
                "offset {offset} is past the {} that read_file pages through on the e2b backend; read the end of a larger file with execute_code (e.g. print(open(path).read()[-2000:]))",
                crate::sandbox::human_bytes(MAX_READ_OFFSET)
            )));
        }
        let vm = vm_path(path);
        let what = format!("reading '{shown}'");
        let response = send(&what, Retry::Envd, self.bound, || {
            self.route
                .request(&self.http, Method::GET, ENVD_PORT, "/files")
                .query(&[("path", vm.as_str()), ("username", FILE_USER)])
        })
        .await?;
        if !response.status().is_success() {
            return Err(self.file_error(Failure::read(response).await, &shown, &what));
        }
        // envd sends the whole file: read up to the end of the page (and a
        // byte more, to learn whether the file goes on), then keep the page.
        let end = offset.saturating_add(max_bytes);
        let cap = usize::try_from(end.saturating_add(1)).unwrap_or(usize::MAX);
        let (mut bytes, ended) = read_capped(response, cap).await;
        ended.map_err(|e| super::error::network_error(&what, e, self.bound))?;
        let truncated = bytes.len() as u64 > end;
        bytes.truncate(usize::try_from(end).unwrap_or(usize::MAX));
        let read = bytes.len() as u64;
        bytes.drain(..usize::try_from(offset.min(read)).unwrap_or(usize::MAX));
        let size = if truncated {
            match self.stat(path).await {
                Ok(entry) => entry.size.max(read + 1),
                Err(_) => read + 1,
            }
        } else {
            read
        };
        Ok(FileContent {
            bytes,
            size,
            truncated,
        })
    }

    /// Writes a file (envd creates the parent directories); returns its size.
    pub(crate) async fn write(&self, path: &GuestPath, data: Vec<u8>) -> Result<u64, SandboxError> {
        let shown = path.to_string();
        if path.is_root() {
            return Err(SandboxError::WrongKind {
                path: shown,
                what: "the sandbox's root directory; give a file name".into(),
            });
        }
        let vm = vm_path(path);
        let what = format!("writing '{shown}'");
        let size = data.len() as u64;
        let data = bytes::Bytes::from(data);
        let response = send(&what, Retry::Envd, self.bound, || {
            // One part named "file" whose file name is the full path, as the
            // SDK sends it; `path` in the query says the same for envd.
            let part = Part::stream_with_length(reqwest::Body::from(data.clone()), size)
                .file_name(vm.clone());
            let part = match part.mime_str("application/octet-stream") {
                Ok(p) => p,
                Err(_) => Part::bytes(data.to_vec()).file_name(vm.clone()),
            };
            self.route
                .request(&self.http, Method::POST, ENVD_PORT, "/files")
                .query(&[("path", vm.as_str()), ("username", FILE_USER)])
                .multipart(Form::new().part("file", part))
        })
        .await?;
        if !response.status().is_success() {
            return Err(self.file_error(Failure::read(response).await, &shown, &what));
        }
        Ok(size)
    }

    /// Lists a directory, at most `max_entries` entries, sorted by name.
    /// envd sends a directory whole: its answer is read up to 32 MiB, and of
    /// that only the first `max_entries` entries are built.
    pub(crate) async fn list(
        &self,
        path: &GuestPath,
        max_entries: usize,
    ) -> Result<Listing, SandboxError> {
        let shown = path.to_string();
        let what = format!("listing '{shown}'");
        let body = serde_json::json!({ "path": vm_path(path), "depth": 1 });
        let answer = self
            .rpc(
                "/filesystem.Filesystem/ListDir",
                &body,
                &shown,
                &what,
                MAX_LISTING_BYTES,
                "; the directory has too many entries to list: list a subdirectory, or count them with execute_code",
            )
            .await?;
        let listed = parse_off_workers(&what, answer, move |b| parse_listing(b, max_entries))
            .await?
            .map_err(|e| unexpected(&what, &e))?;
        let truncated = listed.total > listed.kept.len();
        let mut entries: Vec<FileEntry> = listed
            .kept
            .into_iter()
            .filter_map(|e| {
                let kind = if e.symlink_target.as_deref().is_some_and(|t| !t.is_empty()) {
                    EntryKind::Symlink
                } else {
                    e.kind?
                };
                let guest = if e.path.is_empty() {
                    path.join(&e.name)
                        .map(|p| p.to_string())
                        .unwrap_or_default()
                } else {
                    guest_path_of(&e.path)
                };
                Some(FileEntry {
                    name: e.name,
                    path: guest,
                    kind,
                    size: e.size,
                    modified: e.modified_time.as_deref().map(to_seconds),
                })
            })
            .collect();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Listing { entries, truncated })
    }

    /// A file's metadata.
    async fn stat(&self, path: &GuestPath) -> Result<EntryInfo, SandboxError> {
        let shown = path.to_string();
        let what = format!("looking up '{shown}'");
        let body = serde_json::json!({ "path": vm_path(path) });
        let answer = self
            .rpc(
                "/filesystem.Filesystem/Stat",
                &body,
                &shown,
                &what,
                MAX_SMALL_ANSWER_BYTES,
                "",
            )
            .await?;
        let stat: StatResponse = if answer.iter().all(u8::is_ascii_whitespace) {
            StatResponse::default()
        } else {
            serde_json::from_slice(&answer).map_err(|e| unexpected(&what, &e))?
        };
        stat.entry.ok_or_else(|| {
            E2bError::Protocol {
                what,
                detail: "the answer has no entry".into(),
            }
            .into()
        })
    }

    /// The VM's memory and disk use; `None` when envd does not say (this is
    /// only for status, so it is asked once, quickly, and never retried).
    pub(crate) async fn metrics(&self) -> Option<Metrics> {
        let response = self
            .route
            .request(&self.http, Method::GET, ENVD_PORT, "/metrics")
            .timeout(Duration::from_secs(3))
            .send()
            .await
            .ok()?;
        if !response.status().is_success() {
            return None;
        }
        let (body, ended) = read_capped(response, MAX_SMALL_ANSWER_BYTES + 1).await;
        if ended.is_err() || body.len() > MAX_SMALL_ANSWER_BYTES {
            return None;
        }
        serde_json::from_slice(&body).ok()
    }

    /// Whether the sandbox still answers: `Some(false)` when E2B's edge says
    /// it is gone (502), `None` when that cannot be told. Asked once, quickly.
    pub(crate) async fn alive(&self) -> Option<bool> {
        let response = self
            .route
            .request(&self.http, Method::GET, ENVD_PORT, "/health")
            .timeout(Duration::from_secs(3))
            .send()
            .await
            .ok()?;
        match response.status() {
            s if s.is_success() => Some(true),
            StatusCode::BAD_GATEWAY => Some(false),
            _ => None,
        }
    }

    /// A unary Connect call with the JSON codec; returns the answer's body,
    /// refused when it is over `limit` bytes (`hint` says what to do then).
    async fn rpc(
        &self,
        method: &str,
        body: &serde_json::Value,
        shown: &str,
        what: &str,
        limit: usize,
        hint: &str,
    ) -> Result<Vec<u8>, SandboxError> {
        let deadline_ms = self.bound.as_millis().to_string();
        let response = send(what, Retry::Envd, self.bound, || {
            self.route
                .request(&self.http, Method::POST, ENVD_PORT, method)
                .header("Connect-Protocol-Version", "1")
                .header(AUTHORIZATION, rpc_user())
                .header("Connect-Timeout-Ms", deadline_ms.as_str())
                .json(body)
        })
        .await?;
        if !response.status().is_success() {
            return Err(self.file_error(Failure::read(response).await, shown, what));
        }
        Ok(read_body(response, limit, self.bound, what, hint).await?)
    }

    /// The error for a failed file request: not found, wrong kind, disk full,
    /// or the sandbox's own trouble.
    fn file_error(&self, failure: Failure, shown: &str, what: &str) -> SandboxError {
        let message = failure.message.to_ascii_lowercase();
        let code = failure.connect_code.as_deref();
        if code == Some("not_found")
            || (failure.status == StatusCode::NOT_FOUND && !failure.from_proxy && code.is_none())
        {
            return SandboxError::NotFound(shown.to_owned());
        }
        let client_side = failure.status == StatusCode::BAD_REQUEST
            || matches!(code, Some("invalid_argument" | "failed_precondition"));
        if client_side && message.contains("not a directory") {
            return SandboxError::WrongKind {
                path: shown.to_owned(),
                what: if what.starts_with("listing") {
                    "a file, not a directory; use read_file to read it".into()
                } else {
                    "not a directory (a file is in the way)".into()
                },
            };
        }
        if client_side && message.contains("directory") {
            return SandboxError::WrongKind {
                path: shown.to_owned(),
                what: "a directory; use list_files to see what it holds".into(),
            };
        }
        if failure.status == StatusCode::INTERNAL_SERVER_ERROR && message.contains("path is a file")
        {
            // envd's answer to a write under a file, dressed as its own trouble.
            return SandboxError::WrongKind {
                path: shown.to_owned(),
                what: "under a file: a file is in the way where a directory of its path should be; write elsewhere, or remove that file first".into(),
            };
        }
        if failure.status == StatusCode::INSUFFICIENT_STORAGE {
            return SandboxError::QuotaExceeded(format!(
                "the E2B sandbox's disk is full ({}): delete files before writing '{shown}'",
                failure.message
            ));
        }
        failure.into_sandbox_error(&self.route.id, what).into()
    }
}

#[async_trait]
impl FileInterface for Envd {
    async fn list(&self, path: &GuestPath, max_entries: usize) -> Result<Listing, SandboxError> {
        Envd::list(self, path, max_entries).await
    }

    async fn read(
        &self,
        path: &GuestPath,
        offset: u64,
        max_bytes: u64,
    ) -> Result<FileContent, SandboxError> {
        Envd::read(self, path, offset, max_bytes).await
    }

    async fn write(&self, path: &GuestPath, data: Vec<u8>) -> Result<u64, SandboxError> {
        Envd::write(self, path, data).await
    }
}

/// The `Authorization` header that makes an RPC run as [`FILE_USER`]
/// (Basic, the user and an empty password). envd before 0.4.0 refuses RPCs
/// that name no user.
fn rpc_user() -> String {
    use base64::Engine;
    let credentials = base64::engine::general_purpose::STANDARD.encode(format!("{FILE_USER}:"));
    format!("Basic {credentials}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rpcs_name_the_file_user() {
        assert_eq!(rpc_user(), "Basic cm9vdDo=");
    }
}
