//! Sandbox files as MCP resources: `sandbox://{session_id}/{path}`.
//!
//! `resources/templates/list` gives the template; `resources/list` lists the
//! files of the open sandboxes, one sandbox per page; `resources/read` reads
//! one file whole, as text when it is UTF-8 and as a base64 blob otherwise.
//! Reads go through the same sandbox file interface as `read_file`: the same
//! confinement (a path cannot leave the sandbox, whatever it holds), and the
//! same size rule (at most `SANDBOX_MAX_FILE_BYTES`; a larger file is paged
//! with `read_file`). An execution's result links the files it created or
//! changed with these URIs, so a client can fetch them without the bytes
//! passing through the model.

use base64::Engine as _;
use percent_encoding::{AsciiSet, CONTROLS, percent_decode_str, utf8_percent_encode};
use rmcp::ErrorData;
use rmcp::model::{
    ListResourceTemplatesResult, ListResourcesResult, Resource, ResourceContents, ResourceTemplate,
};

use crate::sandbox::Owner;
use crate::sandbox::manager::SandboxManager;
use crate::sandbox::{BackendKind, EntryKind, GuestPath, SandboxError};
use crate::server::caller::Caller;

/// The scheme of sandbox file URIs.
pub const SCHEME: &str = "sandbox";
/// The URI template clients expand.
pub const TEMPLATE: &str = "sandbox://{session_id}/{+path}";
/// Most files listed for one sandbox (one page).
pub const MAX_LISTED: usize = 1_000;
/// Most directory entries looked at to list one sandbox.
const MAX_VISITED: usize = 10_000;
/// Most directory entries looked at to list a remote sandbox (each
/// directory is a request to it).
const MAX_VISITED_REMOTE: usize = 500;
/// Directories at the root of a remote sandbox (a whole VM) that hold the
/// system, not the code's files: not listed.
const SYSTEM_DIRS: &[&str] = &[
    "bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "opt", "proc", "run", "sbin",
    "snap", "srv", "sys", "usr", "var",
];

/// Bytes escaped in a path segment: controls, space and what would end or
/// change the meaning of a URI or a template.
const SEGMENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}')
    .add(b'\\')
    .add(b'^')
    .add(b'|');

/// The URI of `path` in sandbox `session_id`.
pub fn uri(session_id: &str, path: &str) -> String {
    let encoded: Vec<String> = path
        .split('/')
        .filter(|segment| !segment.is_empty())
        .map(|segment| utf8_percent_encode(segment, SEGMENT).to_string())
        .collect();
    format!("{SCHEME}://{session_id}/{}", encoded.join("/"))
}

/// The sandbox and path a URI names.
pub fn parse(uri: &str) -> Result<(String, GuestPath), ErrorData> {
    let rest = uri
        .strip_prefix(SCHEME)
        .and_then(|r| r.strip_prefix("://"))
        .ok_or_else(|| {
            ErrorData::invalid_params(
                format!("'{uri}' is not a sandbox file URI: they look like {TEMPLATE}"),
                None,
            )
        })?;
    let (session_id, path) = rest.split_once('/').unwrap_or((rest, ""));
    if session_id.is_empty() {
        return Err(ErrorData::invalid_params(
            format!("'{uri}' names no sandbox: {TEMPLATE}"),
            None,
        ));
    }
    let decoded = percent_decode_str(path).decode_utf8().map_err(|_| {
        ErrorData::invalid_params(format!("the path in '{uri}' is not UTF-8"), None)
    })?;
    let path = GuestPath::parse(&format!("/{decoded}")).map_err(|e| invalid(&e))?;
    Ok((session_id.to_owned(), path))
}

fn invalid(e: &SandboxError) -> ErrorData {
    ErrorData::invalid_params(e.to_string(), None)
}

/// A sandbox error, as the protocol error a resource request gets.
fn resource_error(uri: &str, e: SandboxError) -> ErrorData {
    match e {
        SandboxError::UnknownSandbox(_) | SandboxError::NotFound(_) => {
            ErrorData::resource_not_found(format!("{uri}: {e}"), None)
        }
        e => invalid(&e),
    }
}

/// The resource template of sandbox files.
pub fn templates() -> ListResourceTemplatesResult {
    let template = ResourceTemplate::new(TEMPLATE, "sandbox-file")
        .with_title("A file in a sandbox")
        .with_description(
            "A file in a sandbox, by its session_id and its path from the sandbox's root \
(e.g. sandbox://my-session/out/plot.png). Text files read as text, others as base64 blobs; \
files over the server's file limit are read in pages with read_file.",
        );
    ListResourceTemplatesResult::with_all_items(vec![template])
}

/// One page of the files of `owner`'s open sandboxes: the sandbox after the one
/// `cursor` names (the first without one).
pub async fn list(
    manager: &SandboxManager,
    owner: &Owner,
    cursor: Option<&str>,
) -> Result<ListResourcesResult, ErrorData> {
    let mut sandboxes = manager.all(owner);
    sandboxes.sort_by(|a, b| a.id().cmp(b.id()));
    let start = match cursor {
        None => 0,
        Some(after) => sandboxes
            .iter()
            .position(|s| s.id() > after)
            .unwrap_or(sandboxes.len()),
    };
    let Some(sandbox) = sandboxes.get(start) else {
        return Ok(ListResourcesResult::with_all_items(Vec::new()));
    };
    let files = walk(sandbox).await;
    let mut page = ListResourcesResult::with_all_items(files);
    if start + 1 < sandboxes.len() {
        page.next_cursor = Some(sandbox.id().to_owned());
    }
    Ok(page)
}

/// The files of one sandbox as resources, breadth first, skipping the
/// installed packages and bytecode caches.
async fn walk(sandbox: &crate::sandbox::manager::Sandbox) -> Vec<Resource> {
    let remote = sandbox.backend() == BackendKind::E2b;
    let budget = if remote {
        MAX_VISITED_REMOTE
    } else {
        MAX_VISITED
    };
    let skipped = |dir: &GuestPath, name: &str| {
        name == "__pycache__"
            || (dir.is_root() && (name == ".local" || (remote && SYSTEM_DIRS.contains(&name))))
    };
    let mut files = Vec::new();
    let mut queue = std::collections::VecDeque::from([GuestPath::root()]);
    let mut visited = 0;
    while let Some(dir) = queue.pop_front() {
        let Ok(listing) = sandbox.list(dir.clone(), budget - visited).await else {
            continue;
        };
        for entry in listing.entries {
            visited += 1;
            match entry.kind {
                EntryKind::Directory if !skipped(&dir, &entry.name) => {
                    if let Ok(child) = GuestPath::parse(&entry.path) {
                        queue.push_back(child);
                    }
                }
                EntryKind::File if files.len() < MAX_LISTED => {
                    files.push(described(sandbox.id(), &entry.path, entry.size));
                }
                _ => {}
            }
        }
        if visited >= budget || files.len() >= MAX_LISTED {
            break;
        }
    }
    files
}

/// The resource (or resource link) of a file.
pub fn described(session_id: &str, path: &str, size: u64) -> Resource {
    let name = path.rsplit('/').next().unwrap_or(path).to_owned();
    Resource::new(uri(session_id, path), name)
        .with_title(format!("{path} in sandbox {session_id}"))
        .with_mime_type(mime_type(path))
        .with_size(size)
}

/// The MIME type a file's name suggests.
fn mime_type(path: &str) -> String {
    mime_guess::from_path(path)
        .first_or_octet_stream()
        .essence_str()
        .to_owned()
}

/// Reads a file resource whole; at most `max_bytes`.
pub async fn read(
    manager: &SandboxManager,
    caller: &Caller,
    uri: &str,
    max_bytes: u64,
) -> Result<ResourceContents, ErrorData> {
    let (session_id, path) = parse(uri)?;
    let sandbox = manager
        .get_or_restore(&caller.owner, &caller.caps, &session_id)
        .await
        .map_err(|e| resource_error(uri, e))?;
    let file = sandbox
        .read(path.clone(), 0, max_bytes)
        .await
        .map_err(|e| resource_error(uri, e))?;
    if file.truncated {
        return Err(ErrorData::invalid_params(
            format!(
                "{path} is {} bytes, more than the {max_bytes} a resource read returns \
(SANDBOX_MAX_FILE_BYTES): read it in pages with read_file (offset, length)",
                file.size
            ),
            None,
        ));
    }
    let mime = mime_type(&path.to_string());
    Ok(match String::from_utf8(file.bytes) {
        Ok(text) if !text.contains('\0') => ResourceContents::text(text, uri).with_mime_type(mime),
        Ok(text) => blob(text.into_bytes(), uri, mime),
        Err(e) => blob(e.into_bytes(), uri, mime),
    })
}

fn blob(bytes: Vec<u8>, uri: &str, mime: String) -> ResourceContents {
    let data = base64::engine::general_purpose::STANDARD.encode(bytes);
    ResourceContents::blob(data, uri).with_mime_type(mime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_round_trip_with_awkward_names() {
        for path in ["/out/plot.png", "/a b/c#d?e%f.txt", "/ünï/cödé", "/x"] {
            let u = uri("sb-1", path);
            let (id, parsed) = parse(&u).unwrap();
            assert_eq!(
                (id.as_str(), parsed.to_string().as_str()),
                ("sb-1", path),
                "{u}"
            );
        }
        assert_eq!(uri("s", "/a b/c.txt"), "sandbox://s/a%20b/c.txt");
    }

    #[test]
    fn uris_cannot_leave_the_sandbox_or_name_another_scheme() {
        assert!(parse("file:///etc/passwd").is_err());
        assert!(parse("sandbox:///etc/passwd").is_err(), "no sandbox named");
        assert!(parse("sandbox://s/../../etc/passwd").is_err());
        assert!(parse("sandbox://s/%2e%2e/%2e%2e/etc").is_err());
        assert!(parse("sandbox://s/%2E%2E/etc").is_err());
        assert!(parse("sandbox://s/a%00b").is_err(), "NUL in a path");
    }
}
