//! The code interpreter's side of the fake: `/execute` as an NDJSON stream
//! from one real `python3` kernel per sandbox, and its interruption.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime};

use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use super::*;

/// One line of the stream, or the signal to cut the connection.
type Chunk = Result<Bytes, std::io::Error>;

fn ndjson(value: &Value) -> Chunk {
    Ok(Bytes::from(format!("{value}\n")))
}

pub(super) fn execute(
    shared: &Arc<Shared>,
    id: String,
    root: &Path,
    kernel: Arc<tokio::sync::Mutex<Option<Kernel>>>,
    pid: Arc<AtomicU32>,
    body: &[u8],
) -> Response {
    let Ok(body) = serde_json::from_slice::<Value>(body) else {
        return json_response(
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({"detail": [{"msg": "invalid JSON"}]}),
        );
    };
    let Some(code) = body["code"].as_str().map(str::to_owned) else {
        return json_response(
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({"detail": [{"msg": "code is required"}]}),
        );
    };
    let context = body["context_id"].as_str();
    if context.is_some() && body["language"].as_str().is_some() {
        return (
            StatusCode::BAD_REQUEST,
            "Only one of context_id or language can be provided",
        )
            .into_response();
    }
    if let Some(context) = context {
        return (
            StatusCode::NOT_FOUND,
            format!("Context {context} not found"),
        )
            .into_response();
    }
    let (tx, rx) = mpsc::channel::<Chunk>(16);
    let shared = shared.clone();
    let home = root.join("home/user");
    let vm_root = root.to_path_buf();
    tokio::spawn(async move {
        let mut guard = kernel.lock().await;
        if guard.is_none() {
            match start_kernel(&shared, &vm_root, &home) {
                Ok((k, id)) => {
                    pid.store(id, Ordering::SeqCst);
                    *guard = Some(k);
                }
                Err(e) => {
                    let _ = tx.send(ndjson(&json!({"type": "error", "name": "KernelError", "value": e, "traceback": ""}))).await;
                    return;
                }
            }
        }
        let k = guard.as_mut().unwrap();
        let request = format!("{}\n", json!({"code": code}));
        if k.stdin.write_all(request.as_bytes()).await.is_err() {
            return;
        }
        let cut = code.contains("#fake:cut");
        let expire = code.contains("#fake:expire");
        let mut sent = 0;
        let mut client_gone = tx
            .send(ndjson(
                &json!({"type": "number_of_executions", "execution_count": 1}),
            ))
            .await
            .is_err();
        // Lines the kernel has written, and how many it had written at the
        // last interrupt: an interrupt can be lost (one that lands while the
        // kernel is still reading the request is swallowed there), so a
        // kernel that stays silent after one gets another.
        let mut lines = 0usize;
        let mut lines_at_interrupt = None;
        loop {
            let line = tokio::time::timeout(KEEPALIVE, k.stdout.next_line()).await;
            let event = match line {
                Err(_) => {
                    if client_gone {
                        if lines_at_interrupt == Some(lines) {
                            interrupt(&shared, &pid);
                        }
                    } else if tx
                        .send(ndjson(&json!({"type": "keepalive"})))
                        .await
                        .is_err()
                    {
                        client_gone = true;
                        lines_at_interrupt = Some(lines);
                        interrupt(&shared, &pid);
                    }
                    continue;
                }
                // The kernel died (the sandbox was killed): the stream breaks.
                Ok(Ok(None)) | Ok(Err(_)) => {
                    *guard = None;
                    let _ = tx.send(Err(std::io::Error::other("kernel died"))).await;
                    return;
                }
                Ok(Ok(Some(line))) => {
                    lines += 1;
                    line
                }
            };
            let event: Value = serde_json::from_str(&event).unwrap_or(Value::Null);
            if event["type"] == "done" {
                if expire {
                    // The sandbox's lifetime runs out mid-stream.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    if let Some(s) = shared.state().sandboxes.get_mut(&id) {
                        s.end_at = SystemTime::now();
                    }
                    let _ = tx.send(Err(std::io::Error::other("sandbox expired"))).await;
                } else if cut {
                    // The connection breaks before end_of_execution (after
                    // a pause, so that what was sent is flushed first).
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let _ = tx.send(Err(std::io::Error::other("cut by the test"))).await;
                } else if !client_gone {
                    let _ = tx.send(ndjson(&json!({"type": "end_of_execution"}))).await;
                }
                return;
            }
            if client_gone {
                continue;
            }
            if sent < DELAYED_LINES {
                sent += 1;
                tokio::time::sleep(LINE_DELAY).await;
            }
            if tx.send(ndjson(&event)).await.is_err() {
                client_gone = true;
                lines_at_interrupt = Some(lines);
                interrupt(&shared, &pid);
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    });
    // The bridge sets no Content-Type on the stream.
    let mut response = Response::new(Body::from_stream(stream));
    response.headers_mut().remove("content-type");
    response
}

/// Interrupts the running code, as the bridge does when its client leaves.
pub(super) fn interrupt(shared: &Shared, pid: &AtomicU32) {
    shared.state().disconnects += 1;
    let pid = pid.load(Ordering::SeqCst);
    if pid != 0 {
        let _ = std::process::Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status();
    }
}

/// Starts the kernel of a sandbox whose VM's `/` is `root`, in `home`.
pub(super) fn start_kernel(
    shared: &Shared,
    root: &Path,
    home: &Path,
) -> Result<(Kernel, u32), String> {
    let mut child = tokio::process::Command::new("python3")
        .arg("-u")
        .arg(shared.dir.path().join("kernel.py"))
        .current_dir(home)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", "/root")
        .env("FAKE_VM_ROOT", root)
        .env("PYTHONPATH", shared.dir.path().join("site"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start python3: {e}"))?;
    let pid = child.id().unwrap_or(0);
    let stdin = child.stdin.take().ok_or("no stdin")?;
    let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
    Ok((
        Kernel {
            _child: child,
            stdin,
            stdout,
        },
        pid,
    ))
}
