//! Results of the tools: the structured output (with its schema) and the
//! readable text block that goes with it.

use std::fmt::Write;

use base64::Engine as _;
use rmcp::model::{CallToolResult, ContentBlock};
use schemars::JsonSchema;
use serde::Serialize;

use crate::sandbox::budget::BudgetsView;
use crate::sandbox::manager::SandboxStatus;
use crate::sandbox::{
    CapturedText, Encoding, Execution, FileEntry, InstallReport, SandboxError, SavedSandbox,
    human_bytes,
};

/// Result of `execute_code` and `create_run_close`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ExecutionResult {
    /// The sandbox the code ran in.
    pub session_id: String,
    /// Everything about the run.
    #[serde(flatten)]
    pub execution: Execution,
}

/// Result of `create_sandbox`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CreateResult {
    /// True if this call created the sandbox; false if it already existed.
    pub created: bool,
    /// What happened, in words.
    pub message: String,
    /// The sandbox's status.
    #[serde(flatten)]
    pub status: SandboxStatus,
}

/// Result of `close_sandbox`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CloseResult {
    /// The id given.
    pub session_id: String,
    /// True if a sandbox was closed; false if none had that id.
    pub closed: bool,
    /// What happened, in words.
    pub message: String,
}

/// Result of `fork_sandbox`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ForkResult {
    /// The new sandbox's id.
    pub session_id: String,
    /// The sandbox it was copied from.
    pub source_session_id: String,
    /// Its runtime.
    pub runtime: String,
    /// Files and directories copied.
    pub files_copied: u64,
    /// Files the source's code held open, which the fork does not hold
    /// (Python file objects for them raise on use in the fork).
    pub open_files_not_carried: usize,
    /// How long the fork took, in milliseconds.
    pub elapsed_ms: u64,
    /// What happened, in words.
    pub message: String,
}

/// Result of `get_sandbox_status`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct StatusResult {
    /// Number of open sandboxes.
    pub count: usize,
    /// Ids of all open sandboxes.
    pub sandbox_ids: Vec<String>,
    /// Status of the sandbox asked about, or of every sandbox.
    pub sandboxes: Vec<SandboxStatus>,
    /// Sandboxes saved when the server last stopped, not restored yet (a
    /// call naming one restores it; close_sandbox deletes it).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub saved: Vec<SavedSandbox>,
    /// What all local sandboxes together use of the server's memory and
    /// disk budgets (a growth past them fails as one past a sandbox's own
    /// limit does).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budgets: Option<BudgetsView>,
}

/// Result of `list_files`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ListResult {
    /// The directory listed.
    pub path: String,
    /// Its entries, sorted by name.
    pub files: Vec<FileEntry>,
    /// True if entries were left out (very large directory).
    pub truncated: bool,
}

/// Result of `read_file`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ReadResult {
    /// The file read.
    pub path: String,
    /// Its content: text, or base64 when `encoding` is "base64" (the file is
    /// not valid UTF-8).
    pub content: String,
    /// How `content` is encoded.
    pub encoding: Encoding,
    /// The file's size in bytes.
    pub size: u64,
    /// The byte `content` starts at.
    pub offset: u64,
    /// Bytes of the file in `content`.
    pub length: u64,
    /// True if the file goes on past what is returned.
    pub truncated: bool,
    /// Where to continue reading, when the file goes on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_offset: Option<u64>,
}

/// Result of `write_file` and `upload_file`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct WriteResult {
    /// The file written.
    pub path: String,
    /// What happened, in words.
    pub message: String,
    /// Bytes written.
    pub size: u64,
}

/// Result of `install_package`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct InstallResult {
    /// The sandbox.
    pub session_id: String,
    /// The requirements as given.
    pub package: String,
    /// What was installed and what was already there.
    #[serde(flatten)]
    pub report: InstallReport,
    /// What happened, in words.
    pub message: String,
}

/// A successful result with structured content and a readable text block.
pub fn structured<T: Serialize>(value: &T, text: String, is_error: bool) -> CallToolResult {
    let json = serde_json::to_value(value).unwrap_or(serde_json::Value::Null);
    let mut result = if is_error {
        CallToolResult::structured_error(json)
    } else {
        CallToolResult::structured(json)
    };
    result.content = vec![ContentBlock::text(text)];
    result
}

/// A tool error the model can act on.
pub fn error(e: &SandboxError) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(e.to_string())])
}

/// The result of an execution, with its images as image content.
pub fn execution(session_id: &str, execution: Execution) -> CallToolResult {
    let text = render_execution(&execution);
    let images = execution.images.clone();
    let links = file_links(session_id, &execution);
    let is_error = execution.is_error();
    let mut result = structured(
        &ExecutionResult {
            session_id: session_id.to_owned(),
            execution,
        },
        text,
        is_error,
    );
    for image in images {
        result
            .content
            .push(ContentBlock::image(image.data_base64, image.mime_type));
    }
    result.content.extend(links);
    result
}

/// Links to the files an execution created or changed, and to where its
/// cut output and full-size figures were saved (whatever the backend could
/// tell), each once.
fn file_links(session_id: &str, e: &Execution) -> Vec<ContentBlock> {
    let mut files: Vec<(String, Option<u64>)> = e
        .files
        .iter()
        .map(|f| (f.path.clone(), Some(f.size)))
        .collect();
    let saved = [&e.stdout, &e.stderr]
        .into_iter()
        .filter_map(|s| s.full_output_path.clone().map(|p| (p, s.saved_bytes)))
        .chain(
            e.images
                .iter()
                .filter_map(|i| i.path.clone().map(|p| (p, None))),
        );
    for (path, size) in saved {
        if !files.iter().any(|(known, _)| *known == path) {
            files.push((path, size));
        }
    }
    files
        .into_iter()
        .map(|(path, size)| {
            let mut resource = super::resources::described(session_id, &path, 0);
            resource.size = size;
            ContentBlock::resource_link(resource)
        })
        .collect()
}

/// The readable form of an execution.
pub fn render_execution(e: &Execution) -> String {
    let mut out = String::new();
    stream(&mut out, "stdout", &e.stdout);
    stream(&mut out, "stderr", &e.stderr);
    if let Some(value) = &e.value {
        // A multi-line value (a table) starts on a line of its own, so its
        // first line lines up with the rest.
        let gap = if value.contains('\n') { "\n" } else { " " };
        let _ = writeln!(out, "Out:{gap}{}", value.trim_end_matches('\n'));
    }
    if let Some(error) = &e.error {
        if error.traceback.is_empty() {
            let _ = writeln!(out, "{}: {}", error.name, error.value);
        } else {
            out.push_str(error.traceback.trim_end());
            out.push('\n');
        }
    }
    for (i, image) in e.images.iter().enumerate() {
        let _ = write!(out, "Image {}: {}", i + 1, image.mime_type);
        if let Some((width, height)) = png_size(&image.data_base64) {
            let _ = write!(out, ", {width}x{height}");
        }
        out.push_str(", returned as image content");
        if let Some(path) = &image.path {
            let _ = write!(out, " (downscaled; full size in {path})");
        }
        out.push('\n');
    }
    if !e.files.is_empty() {
        let names: Vec<String> = e
            .files
            .iter()
            .map(|f| format!("{} ({})", f.path, human_bytes(f.size)))
            .collect();
        let _ = write!(out, "Files written: {}", names.join(", "));
        if e.files_not_listed > 0 {
            let _ = write!(out, " and {} more", e.files_not_listed);
        }
        out.push_str(" (linked as resources)\n");
    }
    if let Some(limit) = &e.limit {
        let _ = writeln!(out, "Limit reached ({}): {}", limit.limit, limit.message);
    }
    if let Some(lost) = &e.state_lost {
        let _ = writeln!(out, "State lost: {lost}.");
    }
    if let Some(notice) = &e.notice {
        let _ = writeln!(out, "Note: {notice}.");
    }
    if out.is_empty() {
        out.push_str("(no output)\n");
    }
    let mut usage = format!("[{:.1} ms", e.usage.wall_ms);
    if let Some(cpu) = e.usage.cpu_ms {
        let _ = write!(usage, ", CPU {cpu:.1} ms");
    }
    if let Some(fuel) = e.usage.fuel {
        let _ = write!(usage, ", fuel {fuel}");
    }
    if let Some(memory) = e.usage.memory_bytes {
        let _ = write!(usage, ", memory {}", human_bytes(memory));
    }
    if let Some(door) = &e.usage.door {
        let requests = door.requests.len() + door.requests_not_listed as usize;
        let refused = door.requests.iter().filter(|r| r.refused.is_some()).count();
        let _ = write!(usage, ", {requests} HTTP requests ({refused} refused)");
    }
    usage.push(']');
    out.push_str(&usage);
    out
}

/// Width and height of a base64 PNG, from its IHDR chunk.
fn png_size(data_base64: &str) -> Option<(u32, u32)> {
    let head = base64::engine::general_purpose::STANDARD
        .decode(data_base64.get(..32)?)
        .ok()?;
    if head.get(..8)? != b"\x89PNG\r\n\x1a\n" || head.get(12..16)? != b"IHDR" {
        return None;
    }
    let width = u32::from_be_bytes(head.get(16..20)?.try_into().ok()?);
    let height = u32::from_be_bytes(head.get(20..24)?.try_into().ok()?);
    Some((width, height))
}

fn stream(out: &mut String, name: &str, text: &CapturedText) {
    if text.text.is_empty() && !text.truncated {
        return;
    }
    let _ = writeln!(out, "{name}:");
    out.push_str(&text.text);
    if !text.text.ends_with('\n') {
        out.push('\n');
    }
}

/// Decodes file content sent by a client.
pub fn decode_content(
    content: String,
    encoding: Option<Encoding>,
) -> Result<Vec<u8>, SandboxError> {
    match encoding.unwrap_or_default() {
        Encoding::Utf8 => Ok(content.into_bytes()),
        Encoding::Base64 => {
            let cleaned: String = content
                .chars()
                .filter(|c| !c.is_ascii_whitespace())
                .collect();
            base64::engine::general_purpose::STANDARD
                .decode(cleaned.as_bytes())
                .map_err(|e| {
                    SandboxError::InvalidArgument(format!(
                        "content is not valid base64 ({e}); send text with encoding \"utf-8\" or standard base64"
                    ))
                })
        }
    }
}

/// Encodes file bytes for a client: text when they are UTF-8, else base64.
pub fn encode_content(bytes: Vec<u8>) -> (String, Encoding) {
    match String::from_utf8(bytes) {
        Ok(text) => (text, Encoding::Utf8),
        Err(e) => (
            base64::engine::general_purpose::STANDARD.encode(e.into_bytes()),
            Encoding::Base64,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_round_trips_in_both_encodings() {
        assert_eq!(
            decode_content("héllo".into(), None).unwrap(),
            "héllo".as_bytes()
        );
        let bytes = vec![0u8, 159, 146, 150, 255];
        let (text, enc) = encode_content(bytes.clone());
        assert_eq!(enc, Encoding::Base64);
        assert_eq!(decode_content(text, Some(Encoding::Base64)).unwrap(), bytes);
        assert_eq!(encode_content(b"plain".to_vec()).1, Encoding::Utf8);
        assert!(decode_content("not base64!".into(), Some(Encoding::Base64)).is_err());
    }

    #[test]
    fn images_are_named_in_the_text_with_their_size() {
        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
        png.extend_from_slice(&619u32.to_be_bytes());
        png.extend_from_slice(&431u32.to_be_bytes());
        png.extend_from_slice(b"\x08\x06\0\0\0");
        let mut e = Execution::default();
        e.images.push(crate::sandbox::ExecImage {
            mime_type: "image/png".into(),
            data_base64: base64::engine::general_purpose::STANDARD.encode(&png),
            path: Some("/.outputs/exec-1-figure-1.png".into()),
        });
        let text = render_execution(&e);
        assert!(
            text.starts_with("Image 1: image/png, 619x431, returned as image content (downscaled; full size in /.outputs/exec-1-figure-1.png)\n"),
            "{text}"
        );
        assert!(!text.contains("(no output)"), "{text}");
    }

    #[test]
    fn an_execution_reads_like_a_notebook_cell() {
        let mut e = Execution::default();
        e.stdout.text = "hi\n".into();
        e.value = Some("42".into());
        let text = render_execution(&e);
        assert!(text.starts_with("stdout:\nhi\nOut: 42\n"), "{text}");
        e.value = Some("   a  b\n0  1  2\n".into());
        let text = render_execution(&e);
        assert!(text.contains("Out:\n   a  b\n0  1  2\n["), "{text}");
    }
}
