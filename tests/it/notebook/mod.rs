//! Code a model writes for a notebook, run as written: a corpus of notebook
//! idioms (magics, shell lines, pip, IPython.display, threads, POSIX lookups,
//! and the ones that worked before), each run over MCP in a fresh scientific
//! sandbox and checked against what a notebook user sees (the output IPython
//! gives for it, checked with IPython natively where it could be). The HTTP
//! clients have their own file (notebook_http.rs), and so do pip's routes and
//! refusals (notebook_pip.rs).

use rmcp::model::CallToolResult;
use serde_json::{Value, json};

use crate::support::{Server, scientific_cache, structured, text};

mod display;
mod libraries;
mod magics;
mod programs;

/// What one idiom's last cell gave, as a client reads it.
pub struct Outcome {
    pub result: CallToolResult,
    pub json: Value,
}

impl Outcome {
    pub fn stdout(&self) -> &str {
        self.json["stdout"]["text"].as_str().unwrap_or("")
    }

    pub fn stderr(&self) -> &str {
        self.json["stderr"]["text"].as_str().unwrap_or("")
    }

    pub fn value(&self) -> &str {
        self.json["value"].as_str().unwrap_or("")
    }

    pub fn has_value(&self) -> bool {
        self.json["value"].is_string()
    }

    pub fn error(&self) -> &str {
        self.json["error"]["name"].as_str().unwrap_or("")
    }

    pub fn error_text(&self) -> String {
        format!(
            "{}: {}\n{}",
            self.error(),
            self.json["error"]["value"].as_str().unwrap_or(""),
            self.json["error"]["traceback"].as_str().unwrap_or("")
        )
    }

    /// The MIME types of the image content, in order.
    pub fn images(&self) -> Vec<String> {
        self.result
            .content
            .iter()
            .filter_map(|c| c.as_image().map(|i| i.mime_type.clone()))
            .collect()
    }

    /// The widths in pixels of the PNG images, in order.
    pub fn png_widths(&self) -> Vec<u32> {
        use base64::Engine;
        self.result
            .content
            .iter()
            .filter_map(|c| c.as_image())
            .filter_map(|i| {
                base64::engine::general_purpose::STANDARD
                    .decode(&i.data)
                    .ok()
            })
            .filter(|png| png.len() > 24 && png.starts_with(b"\x89PNG"))
            .map(|png| u32::from_be_bytes([png[16], png[17], png[18], png[19]]))
            .collect()
    }

    pub fn is_error(&self) -> bool {
        self.result.is_error == Some(true)
    }
}

/// One idiom: its cells (run in order in one fresh sandbox) and what the last
/// must show; `check` says what is wrong, if anything.
pub struct Idiom {
    pub name: &'static str,
    pub cells: &'static [&'static str],
    pub check: fn(&Outcome) -> Result<(), String>,
}

/// `Err(why)` unless `ok`.
pub fn expect(ok: bool, why: impl FnOnce() -> String) -> Result<(), String> {
    if ok { Ok(()) } else { Err(why()) }
}

/// The run finished without an exception or a limit.
pub fn clean(o: &Outcome) -> Result<(), String> {
    expect(!o.is_error(), || format!("failed: {}", text(&o.result)))
}

/// Clean, and the value is `value`.
pub fn value_is(o: &Outcome, value: &str) -> Result<(), String> {
    clean(o)?;
    expect(o.value() == value, || {
        format!(
            "value {:?}, wanted {value:?}; {}",
            o.value(),
            text(&o.result)
        )
    })
}

/// Clean, and stdout holds every one of `parts`.
pub fn stdout_has(o: &Outcome, parts: &[&str]) -> Result<(), String> {
    clean(o)?;
    for part in parts {
        expect(o.stdout().contains(part), || {
            format!("stdout lacks {part:?}: {}", text(&o.result))
        })?;
    }
    Ok(())
}

/// The run finished cleanly and printed exactly `wanted`.
pub fn stdout_is(o: &Outcome, wanted: &str) -> Result<(), String> {
    clean(o)?;
    expect(o.stdout() == wanted, || {
        format!("stdout {:?}, wanted {wanted:?}", o.stdout())
    })
}

/// Clean, and stderr holds `part`.
pub fn stderr_has(o: &Outcome, part: &str) -> Result<(), String> {
    clean(o)?;
    expect(o.stderr().contains(part), || {
        format!("stderr lacks {part:?}: {}", text(&o.result))
    })
}

/// A server for the corpus: the scientific runtime, the real wheels on a
/// loopback index, no warm pool.
pub async fn server(index_url: &str, env: &[(&str, &str)]) -> Server {
    scientific_cache();
    let mut all = vec![
        ("SANDBOX_RUNTIME", "scientific"),
        ("SANDBOX_POOL_SIZE", "0"),
        ("SANDBOX_INDEX_URL", index_url),
        ("PIP_CONFIG_FILE", "/dev/null"),
    ];
    all.extend_from_slice(env);
    Server::start_with(&all).await
}

/// Runs each idiom in a fresh sandbox; every failure is listed at the end.
pub async fn run_corpus<'a>(server: &Server, corpus: impl IntoIterator<Item = &'a Idiom>) {
    let mut failures = Vec::new();
    let mut count = 0;
    for idiom in corpus {
        count += 1;
        let id = server.create_with(json!({})).await;
        let mut last = None;
        for cell in idiom.cells {
            let result = server
                .call(
                    "execute_code",
                    json!({"session_id": id, "code": cell, "timeout_seconds": 120}),
                )
                .await;
            last = Some(result);
        }
        let result = last.expect("an idiom has a cell");
        let outcome = Outcome {
            json: structured(&result),
            result,
        };
        if let Err(why) = (idiom.check)(&outcome) {
            failures.push(format!("{}: {why}", idiom.name));
        }
        server.ok("close_sandbox", json!({"session_id": id})).await;
    }
    assert!(
        failures.is_empty(),
        "{} of {} idioms failed:\n{}",
        failures.len(),
        count,
        failures.join("\n\n")
    );
}

#[tokio::test]
async fn notebook_idioms_run_as_written() {
    let index = crate::real_wheels::index().await;
    let server = server(&index.url, &[]).await;
    let corpus: Vec<&Idiom> = [
        magics::IDIOMS,
        display::IDIOMS,
        libraries::IDIOMS,
        programs::IDIOMS,
    ]
    .into_iter()
    .flatten()
    .collect();
    assert!(corpus.len() >= 40, "the corpus has {} idioms", corpus.len());
    run_corpus(&server, corpus).await;
}
