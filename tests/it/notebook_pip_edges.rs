//! pip as notebooks write it, at its edges (that an install stopped by the
//! execution's time has ended when the guest hears "nothing was changed" is
//! door::install's unit test: over MCP it is a race with the machine's speed):
//! `-U pip setuptools wheel` beside a real package skips what the sandbox
//! provides and installs the rest; options that change nothing here say so;
//! refusals are the install_package tool's words; a shell line is refused as
//! one; a requirements file including itself is an error, not a crash.

use serde_json::{Value, json};

use crate::support::index::IndexServer;
use crate::support::{Server, structured, text};
use crate::wheels::Wheel;

async fn exec(server: &Server, id: &str, code: &str, timeout: u64) -> Value {
    let result = server
        .call(
            "execute_code",
            json!({"session_id": id, "code": code, "timeout_seconds": timeout}),
        )
        .await;
    assert_ne!(result.is_error, Some(true), "{code}\n{}", text(&result));
    structured(&result)
}

fn stream<'a>(got: &'a Value, name: &str) -> &'a str {
    got[name]["text"].as_str().unwrap_or("")
}

#[tokio::test]
async fn notebook_pip_habits_skip_what_the_sandbox_provides_and_say_what_is_ignored() {
    let index = IndexServer::start().await;
    index.add_wheel(&Wheel::module("tidy", "1.0", "NAME = 'tidy'\n").requires("sidecar"));
    index.add_wheel(&Wheel::module("sidecar", "0.3", "SIDE = True\n"));
    let server = crate::notebook::server(&index.url, &[]).await;
    let id = server.create_with(json!({})).await;

    // The most common first line of a notebook, beside the package it wants.
    let got = exec(
        &server,
        &id,
        "%pip install -q -U pip setuptools wheel tidy\nimport tidy\ntidy.NAME",
        120,
    )
    .await;
    assert_eq!(got["value"], "'tidy'", "{got}");
    let stderr = stream(&got, "stderr");
    for part in [
        "note: pip skipped: pip here is the sandbox's installer",
        "note: setuptools skipped",
        "note: wheel skipped",
        "note: -U is not used here: an installed version that fits the requirement is kept",
    ] {
        assert!(stderr.contains(part), "{part:?}: {got}");
    }
    // pip alone installs nothing, and fails nothing.
    let got = exec(&server, &id, "%pip install --upgrade pip\n_exit_code", 60).await;
    assert_eq!(got["value"], "0", "{got}");

    // Options that change nothing here each get a note; the package goes to
    // site-packages, with its dependencies.
    let got = exec(
        &server,
        &id,
        "%pip install --no-deps --target /tmp/elsewhere sidecar\nimport os, sidecar\n(os.path.exists('/tmp/elsewhere'), sidecar.__file__.startswith('/.local/'))",
        60,
    )
    .await;
    assert_eq!(got["value"], "(False, True)", "{got}");
    let stderr = stream(&got, "stderr");
    assert!(
        stderr.contains("note: --no-deps is not used here: dependencies are installed too")
            && stderr.contains(
                "note: --target is not used here: packages go into the sandbox's own site-packages"
            ),
        "{got}"
    );

    // A shell line is refused as one, before any of it is read as pip's.
    let got = exec(&server, &id, "!pip install six; rm -rf /", 60).await;
    assert!(
        stream(&got, "stderr").contains(
            "`pip install six; rm -rf /` is a shell command line (`;`), and there is no shell here, so none of it ran"
        ),
        "{got}"
    );

    // A requirements file that includes itself.
    let got = exec(
        &server,
        &id,
        "open('/r.txt', 'w').write('tidy\\n-r /r.txt\\n')\n%pip install -r /r.txt\n_exit_code",
        60,
    )
    .await;
    assert_eq!(got["value"], "1", "{got}");
    assert!(
        stream(&got, "stderr")
            .contains("ERROR: requirements file /r.txt includes itself (through -r)"),
        "{got}"
    );
}

#[tokio::test]
async fn pip_refuses_locations_in_the_install_package_tools_words() {
    let index = IndexServer::start().await;
    let server = crate::notebook::server(&index.url, &[]).await;
    let id = server.create_with(json!({})).await;
    for (line, package_name) in [
        ("file:///etc/passwd", "file:///etc/passwd"),
        ("./x.whl", "./x.whl"),
        ("-e .", "-e ."),
    ] {
        let tool = server
            .err(
                "install_package",
                json!({"session_id": id, "package_name": package_name}),
            )
            .await;
        let got = exec(&server, &id, &format!("%pip install {line}"), 60).await;
        let stderr = stream(&got, "stderr");
        let words = stderr.trim().trim_start_matches("ERROR: ");
        assert!(
            !words.is_empty() && tool.contains(words),
            "{line}: %pip said {stderr:?}, the tool {tool:?}"
        );
    }
}
