//! `mcp-code-sandbox exec`: run code once in a fresh sandbox and print what
//! it printed, so a newcomer can see the sandbox work without an MCP client.

use std::io::Write;

use tokio_util::sync::CancellationToken;

use crate::app::App;
use crate::sandbox::SandboxError;
use crate::sandbox::manager::CreateRequest;

/// Runs `code`; returns the process exit status (0 ok, 1 the code failed or
/// hit a limit).
pub async fn run(app: &App, code: String) -> Result<i32, SandboxError> {
    let (sandbox, _) = app.manager.create(CreateRequest::default()).await?;
    let id = sandbox.id().to_owned();
    let result = sandbox.execute(code, None, CancellationToken::new()).await;
    drop(sandbox);
    app.manager.close(&id).await?;
    let execution = result?;

    let mut stdout = std::io::stdout().lock();
    let mut stderr = std::io::stderr().lock();
    let _ = stdout.write_all(execution.stdout.text.as_bytes());
    let _ = stderr.write_all(execution.stderr.text.as_bytes());
    if let Some(value) = &execution.value {
        let _ = writeln!(stdout, "{value}");
    }
    if let Some(error) = &execution.error {
        if error.traceback.is_empty() {
            let _ = writeln!(stderr, "{}: {}", error.name, error.value);
        } else {
            let _ = stderr.write_all(error.traceback.as_bytes());
        }
    }
    for (i, image) in execution.images.iter().enumerate() {
        // An MCP client gets the picture itself; here it is only named.
        let bytes = image.data_base64.len() / 4 * 3;
        let _ = write!(
            stderr,
            "[image {}: {}, about {} returned as image content",
            i + 1,
            image.mime_type,
            crate::sandbox::human_bytes(bytes as u64)
        );
        match &image.path {
            Some(path) => {
                let _ = writeln!(stderr, "; full size in {path}]");
            }
            None => {
                let _ = writeln!(stderr, "]");
            }
        }
    }
    if let Some(limit) = &execution.limit {
        let _ = writeln!(stderr, "limit reached ({}): {}", limit.limit, limit.message);
    }
    let _ = stdout.flush();
    Ok(if execution.is_error() { 1 } else { 0 })
}
