//! pip as notebook code runs it (`%pip`, `!pip`, subprocess, `pip.main`),
//! through the host's installer while the execution is in flight: the same
//! refusals and messages as the install_package tool, the sandbox's disk quota
//! and the execution's time holding, the install listed in the door's usage,
//! and the python-3.12 runtime (no door) pointing at install_package.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::index::IndexServer;
use crate::support::{Server, structured, text};
use crate::wheels::Wheel;

/// A scientific server installing from `index`.
async fn scientific(index: &IndexServer, env: &[(&str, &str)]) -> Server {
    crate::notebook::server(&index.url, env).await
}

async fn exec(server: &Server, id: &str, code: &str, timeout: u64) -> rmcp::model::CallToolResult {
    server
        .call(
            "execute_code",
            json!({"session_id": id, "code": code, "timeout_seconds": timeout}),
        )
        .await
}

fn stream<'a>(result: &'a Value, name: &str) -> &'a str {
    result[name]["text"].as_str().unwrap_or("")
}

#[tokio::test]
async fn pip_in_the_code_installs_as_install_package_does_and_is_listed_in_the_usage() {
    let index = IndexServer::start().await;
    index.add_wheel(&Wheel::module("tinylib", "1.2", "VALUE = 'tiny'\n").requires("sidecar"));
    index.add_wheel(&Wheel::module("sidecar", "0.3", "SIDE = True\n"));
    index.add_wheel(&Wheel::module("native", "1.0", "").tag("cp315-cp315-manylinux_2_17_x86_64"));
    let server = scientific(&index, &[]).await;

    let id = server.create_with(json!({})).await;
    let result = exec(
        &server,
        &id,
        "%pip install tinylib\nimport tinylib, sidecar\n(tinylib.VALUE, sidecar.SIDE)",
        120,
    )
    .await;
    let got = structured(&result);
    assert_ne!(result.is_error, Some(true), "{}", text(&result));
    assert_eq!(got["value"], "('tiny', True)", "{got}");
    assert!(
        stream(&got, "stdout").contains("Successfully installed ")
            && stream(&got, "stdout").contains("tinylib-1.2"),
        "{got}"
    );
    let calls = got["usage"]["door"]["tool_calls"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(calls.len(), 1, "{got}");
    assert_eq!(calls[0]["tool"], "install_package");
    assert!(calls[0]["failed"].is_null(), "{got}");

    // pip list and show see it; a second install finds it present.
    let got = structured(&exec(&server, &id, "%pip show tinylib\n%pip list", 60).await);
    let out = stream(&got, "stdout");
    assert!(
        out.contains("Name: tinylib\nVersion: 1.2\n") && out.contains("Requires: sidecar"),
        "{got}"
    );
    assert!(
        out.contains("\nPackage ") && out.contains("\nnumpy "),
        "{got}"
    );
    let got = structured(&exec(&server, &id, "!pip install tinylib", 60).await);
    assert!(
        stream(&got, "stdout").contains(
            "Requirement already satisfied: tinylib in /.local/lib/python3.15/site-packages (1.2)"
        ),
        "{got}"
    );

    // A refusal reads as the install_package tool's own message.
    let tool = server
        .call(
            "install_package",
            json!({"session_id": id, "package_name": "native"}),
        )
        .await;
    assert_eq!(tool.is_error, Some(true));
    let message = text(&tool);
    let got = structured(&exec(&server, &id, "%pip install native\nprint('carried on')", 60).await);
    assert_eq!(
        stream(&got, "stderr").trim(),
        format!("ERROR: {message}"),
        "{got}"
    );
    assert_eq!(stream(&got, "stdout"), "carried on\n", "{got}");
    let failed = &got["usage"]["door"]["tool_calls"][0];
    assert_eq!(failed["failed"], "tool_error", "{got}");

    // subprocess with python -m pip, and pip.main, as their callers expect.
    let got = structured(
        &exec(
            &server,
            &id,
            "import subprocess, sys\nr = subprocess.run([sys.executable, '-m', 'pip', 'install', 'native'], capture_output=True, text=True)\nimport pip\n(r.returncode, r.stderr.startswith('ERROR: '), pip.main(['install', 'sidecar']))",
            60,
        )
        .await,
    );
    assert_eq!(got["value"], "(1, True, 0)", "{got}");
    let got = structured(
        &exec(
            &server,
            &id,
            "import subprocess\nsubprocess.check_call(['pip', 'install', 'native'])",
            60,
        )
        .await,
    );
    assert_eq!(got["error"]["name"], "CalledProcessError", "{got}");
}

#[tokio::test]
async fn an_install_from_code_keeps_to_the_disk_quota_and_the_executions_time() {
    let index = IndexServer::start().await;
    let noise: Vec<u8> = (0..3u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    index.add_wheel(&Wheel::module("hefty", "1.0", "").file("hefty/blob.bin", noise));
    let slow = index.add_wheel(
        &Wheel::module("sluggish", "1.0", "X = 1\n").file("sluggish/pad.txt", vec![b'p'; 4096]),
    );
    index.trickle(&format!("/files/{slow}"), Duration::from_millis(50));
    let server = scientific(&index, &[("SANDBOX_DISK_QUOTA_MB", "2")]).await;
    let id = server.create_with(json!({})).await;

    let got = structured(&exec(&server, &id, "%pip install hefty\nimport os\nos.path.exists('/.local/lib/python3.15/site-packages/hefty')", 60).await);
    assert!(stream(&got, "stderr").contains("disk quota"), "{got}");
    assert_eq!(got["value"], "False", "nothing was left: {got}");

    // An execution of 8 s: the install is stopped before its end, the guest
    // says so, and the cell goes on.
    let started = std::time::Instant::now();
    let result = exec(&server, &id, "%pip install sluggish\nimport importlib.util\nimportlib.util.find_spec('sluggish') is None", 8).await;
    let got = structured(&result);
    assert_ne!(result.is_error, Some(true), "{}", text(&result));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert!(
        stream(&got, "stderr").contains("did not finish in the"),
        "{got}"
    );
    assert_eq!(got["value"], "True", "{got}");
    assert!(
        got["state_lost"].is_null(),
        "the interpreter was kept: {got}"
    );
}

#[tokio::test]
async fn the_runtime_without_a_door_names_install_package() {
    let server = Server::start_with(&[("SANDBOX_POOL_SIZE", "0")]).await;
    let id = server.create_with(json!({"runtime": "python-3.12"})).await;
    let result = server.exec(&id, "%pip install six").await;
    assert_eq!(result.is_error, Some(true));
    let got = structured(&result);
    assert_eq!(got["error"]["name"], "PipUnavailable", "{got}");
    assert!(
        got["error"]["value"]
            .as_str()
            .unwrap()
            .contains("install_package tool"),
        "{got}"
    );
    assert!(
        !got["error"]["traceback"]
            .as_str()
            .unwrap()
            .contains("File "),
        "told in one line, without frames: {got}"
    );
    let got = server
        .run(&id, "import subprocess, sys\nr = subprocess.run([sys.executable, '-m', 'pip', 'install', 'six'], capture_output=True, text=True)\n(r.returncode, 'install_package' in r.stderr)")
        .await;
    assert_eq!(got["value"], "(1, True)", "{got}");
    // The rest of the notebook syntax works there too.
    let got = server.run(&id, "%time x = 1\n!ls\nx").await;
    assert_eq!(got["value"], "1", "{got}");
    assert!(
        stream(&got, "stderr").contains("there is no shell in this sandbox"),
        "{got}"
    );
}
