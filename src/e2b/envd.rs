//! [`Envd`]: the file side of an E2B sandbox, through envd, the daemon in
//! every sandbox: bytes with `GET`/`POST /files`, listings and metadata with
//! the `filesystem.Filesystem` Connect RPCs (unary, JSON).
//!
//! Paths: the file tools' `/` is [`HOME`] in the VM, the code interpreter's
//! working directory, so a relative path names the same file in code and in
//! the file tools. A [`GuestPath`] is lexically confined to it (no `..` above
//! it); links made by code inside the VM are followed by envd, but the VM is
//! the sandbox: nothing on this machine is reachable through them.

use std::time::Duration;

use async_trait::async_trait;
use reqwest::multipart::{Form, Part};
use reqwest::{Client, Method, StatusCode};
use serde::Deserialize;
use serde::de::{self, Deserializer};

use super::error::E2bError;
use super::route::{ENVD_PORT, Route};
use super::transport::{Failure, Retry, read_capped, send};
use crate::sandbox::{
    EntryKind, FileContent, FileEntry, FileInterface, GuestPath, Listing, SandboxError,
};

/// Furthest offset `read_file` reads from (envd sends a file from its start).
const MAX_READ_OFFSET: u64 = 256 << 20;

/// The directory of the VM that the file tools call `/`: the default user's
/// home, where the code interpreter runs.
pub(crate) const HOME: &str = "/home/user";

/// The path in the VM for a guest path.
pub(crate) fn vm_path(path: &GuestPath) -> String {
    if path.is_root() {
        HOME.to_owned()
    } else {
        format!("{HOME}{path}")
    }
}

/// The guest path for a path in the VM, when it lies under [`HOME`].
fn guest_path_of(vm: &str) -> Option<String> {
    if vm == HOME {
        return Some("/".to_owned());
    }
    vm.strip_prefix(HOME)
        .filter(|rest| rest.starts_with('/'))
        .map(str::to_owned)
}

/// File access to one E2B sandbox.
#[derive(Clone, Debug)]
pub(crate) struct Envd {
    http: Client,
    route: Route,
    bound: Duration,
}

/// A file's metadata as envd describes it (proto-JSON `EntryInfo`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct EntryInfo {
    name: String,
    #[serde(rename = "type", deserialize_with = "file_type")]
    kind: Option<EntryKind>,
    path: String,
    #[serde(deserialize_with = "int64")]
    size: u64,
    modified_time: Option<String>,
    symlink_target: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ListDirResponse {
    entries: Vec<EntryInfo>,
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

/// Reads a proto-JSON enum `FileType`, by name or number.
fn file_type<'de, D: Deserializer<'de>>(d: D) -> Result<Option<EntryKind>, D::Error> {
    let value = serde_json::Value::deserialize(d)?;
    Ok(match &value {
        serde_json::Value::String(s) => match s.as_str() {
            "FILE_TYPE_FILE" => Some(EntryKind::File),
            "FILE_TYPE_DIRECTORY" => Some(EntryKind::Directory),
            "FILE_TYPE_SYMLINK" => Some(EntryKind::Symlink),
            "FILE_TYPE_UNSPECIFIED" => None,
            _ => Some(EntryKind::Other),
        },
        serde_json::Value::Number(n) => match n.as_u64() {
            Some(1) => Some(EntryKind::File),
            Some(2) => Some(EntryKind::Directory),
            Some(3) => Some(EntryKind::Symlink),
            Some(0) | None => None,
            Some(_) => Some(EntryKind::Other),
        },
        _ => None,
    })
}

/// Reads a proto-JSON 64-bit integer, sent as a string or a number.
fn int64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::String(s) => s.trim().parse().map_err(de::Error::custom),
        serde_json::Value::Number(n) => n
            .as_u64()
            .ok_or_else(|| de::Error::custom(format!("{n} is not a size"))),
        serde_json::Value::Null => Ok(0),
        other => Err(de::Error::custom(format!("{other} is not a size"))),
    }
}

/// An RFC 3339 time (envd sends nanoseconds) cut to seconds, like local listings.
fn to_seconds(time: &str) -> String {
    match humantime::parse_rfc3339_weak(time.trim_end_matches('Z')) {
        Ok(t) if time.ends_with('Z') => humantime::format_rfc3339_seconds(t).to_string(),
        _ => time.to_owned(),
    }
}

impl Envd {
    /// File access through `route`, each request bounded by `bound`.
    pub(crate) fn new(http: Client, route: Route, bound: Duration) -> Self {
        Self { http, route, bound }
    }

    /// Reads a file, at most `max_bytes` of it.
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
        let vm = vm_path(path);
        let what = format!("reading '{shown}'");
        let response = send(&what, Retry::Idempotent, self.bound, || {
            self.route
                .request(&self.http, Method::GET, ENVD_PORT, "/files")
                .query(&[("path", vm.as_str())])
        })
        .await?;
        if !response.status().is_success() {
            return Err(self.file_error(Failure::read(response).await, &shown, &what));
        }
        // envd sends the whole file: read up to the end of the page (and a
        // byte more, to learn whether the file goes on), then keep the page.
        if offset > MAX_READ_OFFSET {
            return Err(SandboxError::InvalidArgument(format!(
                "offset {offset} is past the {} that read_file pages through on the e2b backend; read the end of a larger file with execute_code (e.g. print(open(path).read()[-2000:]))",
                crate::sandbox::human_bytes(MAX_READ_OFFSET)
            )));
        }
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
        let response = send(&what, Retry::Idempotent, self.bound, || {
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
                .query(&[("path", vm.as_str())])
                .multipart(Form::new().part("file", part))
        })
        .await?;
        if !response.status().is_success() {
            return Err(self.file_error(Failure::read(response).await, &shown, &what));
        }
        Ok(size)
    }

    /// Lists a directory, at most `max_entries` entries, sorted by name.
    pub(crate) async fn list(
        &self,
        path: &GuestPath,
        max_entries: usize,
    ) -> Result<Listing, SandboxError> {
        let shown = path.to_string();
        let what = format!("listing '{shown}'");
        let body = serde_json::json!({ "path": vm_path(path), "depth": 1 });
        let listed: ListDirResponse = self
            .rpc("/filesystem.Filesystem/ListDir", &body, &shown, &what)
            .await?;
        let mut entries: Vec<FileEntry> = listed
            .entries
            .into_iter()
            .filter_map(|e| {
                let kind = if e.symlink_target.as_deref().is_some_and(|t| !t.is_empty()) {
                    EntryKind::Symlink
                } else {
                    e.kind?
                };
                let guest = guest_path_of(&e.path).unwrap_or_else(|| {
                    if path.is_root() {
                        format!("/{}", e.name)
                    } else {
                        format!("{shown}/{}", e.name)
                    }
                });
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
        let truncated = entries.len() > max_entries;
        entries.truncate(max_entries);
        Ok(Listing { entries, truncated })
    }

    /// A file's metadata.
    async fn stat(&self, path: &GuestPath) -> Result<EntryInfo, SandboxError> {
        let shown = path.to_string();
        let what = format!("looking up '{shown}'");
        let body = serde_json::json!({ "path": vm_path(path) });
        let stat: StatResponse = self
            .rpc("/filesystem.Filesystem/Stat", &body, &shown, &what)
            .await?;
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
        response.json().await.ok()
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

    /// A unary Connect call with the JSON codec.
    async fn rpc<T: for<'de> Deserialize<'de>>(
        &self,
        method: &str,
        body: &serde_json::Value,
        shown: &str,
        what: &str,
    ) -> Result<T, SandboxError> {
        let deadline_ms = self.bound.as_millis().to_string();
        let response = send(what, Retry::Idempotent, self.bound, || {
            self.route
                .request(&self.http, Method::POST, ENVD_PORT, method)
                .header("Connect-Protocol-Version", "1")
                .header("Connect-Timeout-Ms", deadline_ms.as_str())
                .json(body)
        })
        .await?;
        if !response.status().is_success() {
            return Err(self.file_error(Failure::read(response).await, shown, what));
        }
        let text = response
            .bytes()
            .await
            .map_err(|e| super::error::network_error(what, e, self.bound))?;
        let text = if text.iter().all(u8::is_ascii_whitespace) {
            &b"{}"[..]
        } else {
            &text[..]
        };
        serde_json::from_slice(text).map_err(|e| {
            E2bError::Protocol {
                what: what.to_owned(),
                detail: format!("the answer is not the expected JSON: {e}"),
            }
            .into()
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_paths_map_under_the_home_directory_and_back() {
        let p = |s: &str| GuestPath::parse(s).unwrap();
        assert_eq!(vm_path(&p("/")), "/home/user");
        assert_eq!(vm_path(&p("data/a.csv")), "/home/user/data/a.csv");
        assert_eq!(
            guest_path_of("/home/user/data/a.csv").as_deref(),
            Some("/data/a.csv")
        );
        assert_eq!(guest_path_of("/home/user").as_deref(), Some("/"));
        assert_eq!(guest_path_of("/home/username"), None);
        assert_eq!(guest_path_of("/etc/passwd"), None);
    }

    #[test]
    fn entries_are_read_in_proto_json() {
        let listed: ListDirResponse = serde_json::from_str(
            r#"{"entries":[{"name":"a.csv","type":"FILE_TYPE_FILE","path":"/home/user/a.csv","size":"8","mode":420,"modifiedTime":"2026-08-21T10:00:00.5Z","future":1},
                {"name":"d","type":2,"path":"/home/user/d","size":4096},
                {"name":"l","type":"FILE_TYPE_FILE","path":"/home/user/l","symlinkTarget":"/home/user/a.csv"}]}"#,
        )
        .unwrap();
        assert_eq!(listed.entries.len(), 3);
        assert_eq!(listed.entries[0].kind, Some(EntryKind::File));
        assert_eq!(listed.entries[0].size, 8);
        assert_eq!(listed.entries[1].kind, Some(EntryKind::Directory));
        assert_eq!(listed.entries[1].size, 4096);
        assert_eq!(
            to_seconds(listed.entries[0].modified_time.as_deref().unwrap()),
            "2026-08-21T10:00:00Z"
        );
        let empty: ListDirResponse = serde_json::from_str("{}").unwrap();
        assert!(empty.entries.is_empty());
    }
}
