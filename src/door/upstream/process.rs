//! An upstream command's process: started in a process group of its own,
//! with only its own environment, its stderr logged line by line (each cut
//! to its first 1,000 bytes as it is read, so a line of any length costs
//! the server no more memory than that); watched,
//! so that its exit is noticed at once (even when a child it started still
//! holds its stdout open); and its whole group killed when it exits or the
//! connection is dropped.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;

use rmcp::RoleClient;
use rmcp::transport::async_rw::AsyncRwTransport;
use tokio::process::{ChildStdin, ChildStdout};
use tokio_util::sync::CancellationToken;

use super::bounded_lines::for_each_line;

/// Longest stderr line of an upstream command that is logged (bytes).
const MAX_LOG_LINE: usize = 1000;

/// The transport to a command's stdin and stdout.
pub type CommandTransport = AsyncRwTransport<RoleClient, ChildStdout, ChildStdin>;

/// A running command: dropping it kills its process group.
pub struct CommandProcess {
    group: Option<rustix::process::Pid>,
    exited: CancellationToken,
    watcher: tokio::task::JoinHandle<()>,
}

impl CommandProcess {
    /// Starts `argv` with exactly `env`, in `cwd` (`/` when unset); lines
    /// longer than `max_line` from it are not read.
    pub fn spawn(
        name: &str,
        argv: &[String],
        env: &BTreeMap<String, String>,
        cwd: Option<&Path>,
        max_line: usize,
    ) -> Result<(Self, CommandTransport), String> {
        let mut command = tokio::process::Command::new(&argv[0]);
        command
            .args(&argv[1..])
            .env_clear()
            .envs(env)
            .current_dir(cwd.unwrap_or(Path::new("/")))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot run {:?}: {e}", argv[0]))?;
        let group = child
            .id()
            .and_then(|id| rustix::process::Pid::from_raw(id as i32));
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("its stdin or stdout could not be opened".into());
        };
        if let Some(stderr) = child.stderr.take() {
            let name = name.to_owned();
            tokio::spawn(async move {
                for_each_line(stderr, MAX_LOG_LINE, |line, cut| {
                    let line = String::from_utf8_lossy(line);
                    let more = if cut {
                        " [the rest of the line left out]"
                    } else {
                        ""
                    };
                    tracing::info!(upstream = %name, "{line}{more}");
                })
                .await;
            });
        }
        let exited = CancellationToken::new();
        let watcher = tokio::spawn({
            let (exited, name) = (exited.clone(), name.to_owned());
            async move {
                let status = child.wait().await;
                tracing::warn!(upstream = %name, "the upstream MCP server exited ({status:?})");
                kill_group(group);
                exited.cancel();
            }
        });
        let transport = AsyncRwTransport::new_client(stdout, stdin).with_max_line_length(max_line);
        let process = Self {
            group,
            exited,
            watcher,
        };
        Ok((process, transport))
    }

    /// Cancelled when the process has exited.
    pub fn exited(&self) -> &CancellationToken {
        &self.exited
    }
}

impl Drop for CommandProcess {
    fn drop(&mut self) {
        // Once it has exited the watcher has killed the group (and the id may
        // since belong to another); before that, the group is killed here,
        // and aborting the watcher drops the child, which kills it too.
        if !self.exited.is_cancelled() {
            kill_group(self.group);
        }
        self.watcher.abort();
    }
}

fn kill_group(group: Option<rustix::process::Pid>) {
    if let Some(group) = group {
        let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
    }
}
