//! `mcp-code-sandbox exec`: run code once in a fresh sandbox and print what
//! it printed, so a newcomer can see the sandbox work without an MCP client.
//!
//! The sandbox is gone when the command ends, so nothing printed may point
//! into it: a stream cut for a model is printed whole here (read back from
//! the file that holds it), and figures are saved in the working directory.

use std::io::Write;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use tokio_util::sync::CancellationToken;

use crate::app::App;
use crate::sandbox::manager::{CreateRequest, Sandbox};
use crate::sandbox::{CapturedText, ExecImage, GuestPath, SandboxError};

/// Most bytes of a stream printed whole.
const MAX_PRINTED: u64 = 64 << 20;

/// Runs `code`; returns the process exit status (0 ok, 1 the code failed or
/// hit a limit).
pub async fn run(app: &App, code: String) -> Result<i32, SandboxError> {
    let request = CreateRequest {
        one_off: true,
        ..CreateRequest::default()
    };
    let (sandbox, _) = app.manager.create(request).await?;
    let id = sandbox.id().to_owned();
    let result = sandbox
        .execute(code, None, CancellationToken::new(), None)
        .await;
    let printed = match &result {
        Ok(execution) => Some((
            whole(&sandbox, &execution.stdout).await,
            whole(&sandbox, &execution.stderr).await,
            save_figures(&sandbox, &execution.images).await,
        )),
        Err(_) => None,
    };
    drop(sandbox);
    app.manager
        .close(&crate::sandbox::Owner::anyone(), &id)
        .await?;
    let execution = result?;
    let (stdout_text, stderr_text, figures) = printed.unwrap_or_default();

    let mut stdout = std::io::stdout().lock();
    let mut stderr = std::io::stderr().lock();
    let _ = stdout.write_all(&stdout_text);
    let _ = stderr.write_all(&stderr_text);
    if let Some(value) = &execution.value {
        if !stdout_text.is_empty() && !stdout_text.ends_with(b"\n") {
            let _ = writeln!(stdout);
        }
        let _ = writeln!(stdout, "{value}");
    }
    if let Some(error) = &execution.error {
        if error.traceback.is_empty() {
            let _ = writeln!(stderr, "{}: {}", error.name, error.value);
        } else {
            let _ = stderr.write_all(error.traceback.as_bytes());
        }
    }
    for line in figures {
        let _ = writeln!(stderr, "{line}");
    }
    if let Some(limit) = &execution.limit {
        let _ = writeln!(stderr, "limit reached ({}): {}", limit.limit, limit.message);
    }
    if let Some(lost) = &execution.state_lost {
        let _ = writeln!(stderr, "state lost: {lost}");
    }
    let _ = stdout.flush();
    Ok(if execution.is_error() { 1 } else { 0 })
}

/// A stream whole: from the file that holds it when the result's text is
/// cut (the file goes with the sandbox), else the text.
async fn whole(sandbox: &Sandbox, text: &CapturedText) -> Vec<u8> {
    if let Some(path) = text.full_output_path.as_deref()
        && let Ok(path) = GuestPath::parse(path)
        && let Ok(file) = sandbox.read(path, 0, MAX_PRINTED).await
    {
        return file.bytes;
    }
    text.text.clone().into_bytes()
}

/// Saves each figure in the working directory, full size when the sandbox
/// kept a full-size file; returns a line on each.
async fn save_figures(sandbox: &Sandbox, images: &[ExecImage]) -> Vec<String> {
    let mut lines = Vec::new();
    for (i, image) in images.iter().enumerate() {
        let full = match image.path.as_deref().map(GuestPath::parse) {
            Some(Ok(path)) => sandbox
                .read(path, 0, MAX_PRINTED)
                .await
                .ok()
                .map(|f| f.bytes),
            _ => None,
        };
        let bytes = match full {
            Some(bytes) => bytes,
            None => match base64::engine::general_purpose::STANDARD.decode(&image.data_base64) {
                Ok(bytes) => bytes,
                Err(_) => continue,
            },
        };
        let target = free_name(Path::new("."), i + 1);
        lines.push(match std::fs::write(&target, bytes) {
            Ok(()) => format!("[figure {} saved as {}]", i + 1, target.display()),
            Err(e) => format!(
                "[figure {} could not be saved as {}: {e}]",
                i + 1,
                target.display()
            ),
        });
    }
    lines
}

/// `figure-N.png` in `dir`, or `figure-N-K.png` when that exists.
fn free_name(dir: &Path, n: usize) -> PathBuf {
    let first = dir.join(format!("figure-{n}.png"));
    if !first.exists() {
        return first;
    }
    (2..)
        .map(|k| dir.join(format!("figure-{n}-{k}.png")))
        .find(|p| !p.exists())
        .unwrap_or(first)
}
