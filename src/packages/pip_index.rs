//! [`ask_pip`]: the index this machine's pip would install from, for a server
//! with no index and no wheelhouse configured, so `install_package` works
//! wherever `pip install` does.
//!
//! pip's answer is its own: its configuration files (all of them, the
//! site-wide one of a virtual environment included), its `PIP_*`
//! environment variables, and its built-in default when nothing is set. The
//! server never names an index itself; it runs the configured Python with a
//! short program that asks pip's option parser for the `install` command's
//! effective `index-url` and `extra-index-url`, and reads them as JSON.
//! The answer is asked for once, by the first install that needs it, and
//! kept by the [`super::Installer`].

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::settings::{IndexUrl, IndexUrlError};

/// The program run by the Python whose pip is asked. It prints one JSON
/// object: the effective index settings of `pip install`, or why pip could
/// not be asked.
const PROGRAM: &str = r#"
import json
try:
    from pip._internal.commands import create_command
    options, _ = create_command("install").parse_args([])
    answer = {
        "index_url": options.index_url,
        "extra_index_urls": list(options.extra_index_urls or []),
        "no_index": bool(options.no_index),
    }
except BaseException as e:
    answer = {"error": "%s: %s" % (type(e).__name__, e)}
print(json.dumps(answer))
"#;

/// Longest pip may take to answer (it usually takes well under a second).
const PIP_TIMEOUT: Duration = Duration::from_secs(30);

/// Why pip could not supply an index.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PipIndexError {
    /// The install asking was cancelled (or its sandbox closed) first.
    #[error("the install was stopped while pip was being asked for its index")]
    Stopped,
    /// The configured Python could not be run.
    #[error(
        "no pip was found to ask for its index ({python} could not be run: {reason}); set SANDBOX_PIP_PYTHON (--pip-python) to a Python that has pip"
    )]
    NoPython {
        /// The command tried.
        python: String,
        /// Why it did not run.
        reason: String,
    },
    /// The Python ran, but pip could not be asked.
    #[error(
        "{python} has no usable pip to ask for its index ({reason}); install pip for it, or set SANDBOX_PIP_PYTHON (--pip-python) to a Python that has pip"
    )]
    NoPip {
        /// The command tried.
        python: String,
        /// What went wrong.
        reason: String,
    },
    /// pip is configured not to use any index (`no-index`).
    #[error("pip ({python}) is configured with no-index, so it names no index")]
    NoIndex {
        /// The command tried.
        python: String,
    },
    /// pip named an index this server cannot use.
    #[error("pip ({python}) names an unusable index: {reason}")]
    Unusable {
        /// The command tried.
        python: String,
        /// What is wrong with it.
        #[source]
        reason: IndexUrlError,
    },
}

/// pip's answer, as the program prints it.
#[derive(Debug, serde::Deserialize)]
struct Answer {
    #[serde(default)]
    index_url: Option<String>,
    #[serde(default)]
    extra_index_urls: Vec<String>,
    #[serde(default)]
    no_index: bool,
    #[serde(default)]
    error: Option<String>,
}

/// Asks the pip of `python` (a command on PATH or a path) for the indexes
/// `pip install` would use: its index-url first, then its extra-index-urls.
/// Blocks while the Python runs (well under a second); call it off the
/// async workers.
pub fn ask_pip(python: &str, stopped: &dyn Fn() -> bool) -> Result<Vec<IndexUrl>, PipIndexError> {
    let output = run(python, PIP_TIMEOUT, stopped)?;
    let answer = read_answer(python, &output)?;
    indexes_from(python, answer)
}

/// Kills the program and everything it started (its process group).
fn give_up(child: &mut std::process::Child) {
    if let Some(group) = rustix::process::Pid::from_raw(child.id() as i32) {
        let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Runs the program, waiting at most `timeout`; returns what it printed.
fn run(
    python: &str,
    timeout: Duration,
    stopped: &dyn Fn() -> bool,
) -> Result<String, PipIndexError> {
    let mut child = Command::new(python)
        .args(["-c", PROGRAM])
        // Not the server's working directory, whose files could shadow pip.
        .current_dir(std::env::temp_dir())
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .env("PIP_NO_INPUT", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so giving up stops whatever it started too.
        .process_group(0)
        .spawn()
        .map_err(|e| PipIndexError::NoPython {
            python: python.to_owned(),
            reason: e.to_string(),
        })?;
    let started = Instant::now();
    // The answer is a few hundred bytes, well within a pipe's buffer, so
    // waiting before reading cannot block the program.
    while child.try_wait().ok().flatten().is_none() {
        if stopped() {
            give_up(&mut child);
            return Err(PipIndexError::Stopped);
        }
        if started.elapsed() > timeout {
            give_up(&mut child);
            return Err(PipIndexError::NoPip {
                python: python.to_owned(),
                reason: format!("it did not answer within {} s", timeout.as_secs_f64()),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // It has exited; whatever it started is stopped too, so its pipes end
    // (a child left writing to them could not grow the server), and at most
    // MAX_OUTPUT bytes of each are read.
    if let Some(group) = rustix::process::Pid::from_raw(child.id() as i32) {
        let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
    }
    let output = std::process::Output {
        status: child.wait().map_err(|e| PipIndexError::NoPip {
            python: python.to_owned(),
            reason: e.to_string(),
        })?,
        stdout: read_capped(child.stdout.take()),
        stderr: read_capped(child.stderr.take()),
    };
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(PipIndexError::NoPip {
            python: python.to_owned(),
            reason: super::message_text::clip(stderr.trim(), 300),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Most bytes of the program's stdout or stderr read.
const MAX_OUTPUT: u64 = 1 << 20;

/// At most [`MAX_OUTPUT`] bytes of a pipe.
fn read_capped(pipe: Option<impl std::io::Read>) -> Vec<u8> {
    use std::io::Read;
    let mut bytes = Vec::new();
    if let Some(pipe) = pipe {
        let _ = pipe.take(MAX_OUTPUT).read_to_end(&mut bytes);
    }
    bytes
}

/// Reads the program's JSON line.
fn read_answer(python: &str, stdout: &str) -> Result<Answer, PipIndexError> {
    let line = stdout.lines().rev().find(|l| l.starts_with('{'));
    let answer: Answer = line
        .and_then(|l| serde_json::from_str(l).ok())
        .ok_or_else(|| PipIndexError::NoPip {
            python: python.to_owned(),
            reason: format!(
                "it printed no answer: '{}'",
                super::message_text::clip(stdout.trim(), 200)
            ),
        })?;
    match answer.error {
        Some(reason) => Err(PipIndexError::NoPip {
            python: python.to_owned(),
            reason: super::message_text::clip(&reason, 300),
        }),
        None => Ok(answer),
    }
}

/// The indexes in pip's answer, each marked as coming from pip.
fn indexes_from(python: &str, answer: Answer) -> Result<Vec<IndexUrl>, PipIndexError> {
    if answer.no_index {
        return Err(PipIndexError::NoIndex {
            python: python.to_owned(),
        });
    }
    let origin = format!("pip's index, as {python} -m pip reports it");
    answer
        .index_url
        .into_iter()
        .chain(answer.extra_index_urls)
        .map(|url| {
            IndexUrl::parse(&url, origin.clone()).map_err(|reason| PipIndexError::Unusable {
                python: python.to_owned(),
                reason,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_read_into_indexes_marked_as_pips() {
        let answer = read_answer(
            "py",
            "warning\n{\"index_url\": \"http://127.0.0.1:1/simple\", \"extra_index_urls\": [\"http://127.0.0.1:2/x/\"], \"no_index\": false}\n",
        )
        .unwrap();
        let urls = indexes_from("py", answer).unwrap();
        let shown: Vec<String> = urls.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "http://127.0.0.1:1/simple/ (from pip's index, as py -m pip reports it)",
                "http://127.0.0.1:2/x/ (from pip's index, as py -m pip reports it)"
            ]
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_python_that_never_answers_is_stopped() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let fake = tmp.path().join("python3");
        std::fs::write(&fake, "#!/bin/sh\nexec sleep 600\n").unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = run(fake.to_str().unwrap(), Duration::from_millis(200), &|| {
            false
        })
        .unwrap_err();
        assert!(err.to_string().contains("did not answer"), "{err}");
    }

    #[test]
    fn no_pip_no_index_and_garbage_are_errors_that_say_what_to_set() {
        let missing = ask_pip("/nonexistent/python3", &|| false).unwrap_err();
        assert!(matches!(missing, PipIndexError::NoPython { .. }));
        assert!(
            missing.to_string().contains("SANDBOX_PIP_PYTHON"),
            "{missing}"
        );
        let err = read_answer("py", "{\"error\": \"ModuleNotFoundError: pip\"}").unwrap_err();
        assert!(err.to_string().contains("no usable pip"), "{err}");
        assert!(read_answer("py", "nonsense").is_err());
        let no_index = read_answer("py", "{\"index_url\": null, \"no_index\": true}").unwrap();
        assert!(matches!(
            indexes_from("py", no_index),
            Err(PipIndexError::NoIndex { .. })
        ));
        let bad = read_answer("py", "{\"index_url\": \"file:///srv/wheels\"}").unwrap();
        assert!(matches!(
            indexes_from("py", bad),
            Err(PipIndexError::Unusable { .. })
        ));
    }
}
