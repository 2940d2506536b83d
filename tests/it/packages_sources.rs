//! Where packages come from: a wheelhouse alone, one filled by
//! `wheelhouse add`, the index pip names when nothing is configured, and an
//! index that fails or cannot be reached.

use crate::support::index::IndexServer;
use crate::support::{Server, binary};
use crate::wheels::Wheel;

use crate::packages::{install, install_err, installed, start};

#[tokio::test]
async fn a_wheelhouse_alone_works_without_any_index() {
    let house = tempfile::tempdir().unwrap();
    for wheel in [
        Wheel::module("offline", "1.0", "import offdep\nOK = offdep.OK\n").requires("offdep"),
        Wheel::module("offdep", "0.1", "OK = 'offline'\n"),
    ] {
        std::fs::write(house.path().join(wheel.filename()), wheel.build()).unwrap();
    }
    let server = Server::start_with(&[
        ("SANDBOX_WHEELHOUSE", house.path().to_str().unwrap()),
        ("PIP_CONFIG_FILE", "/dev/null"),
    ])
    .await;
    let id = server.create().await;
    let result = install(&server, &id, "offline").await;
    assert_eq!(
        installed(&result),
        ["offline 1.0 wheelhouse", "offdep 0.1 wheelhouse"]
    );
    assert_eq!(
        server.run(&id, "import offline; offline.OK").await["value"],
        "'offline'"
    );
    let missing = install_err(&server, &id, "elsewhere").await;
    assert!(missing.contains("in the wheelhouse"), "{missing}");
    server.stop().await;
}

#[tokio::test]
async fn wheelhouse_add_fills_a_directory_that_then_works_offline() {
    let index = IndexServer::start().await;
    index.add_wheel(
        &Wheel::module("carry", "2.0", "import carrydep\nOK = carrydep.OK\n")
            .requires("carrydep>=1"),
    );
    index.add_wheel(&Wheel::module("carrydep", "1.5", "OK = 'carried'\n"));
    let tmp = tempfile::tempdir().unwrap();
    let house = tmp.path().join("house");
    let run = || {
        tokio::process::Command::new(binary())
            .args(["wheelhouse", "add", "carry", "--dir"])
            .arg(&house)
            .env_clear()
            .env("HOME", tmp.path())
            .env("SANDBOX_CACHE_DIR", tmp.path().join("cache"))
            .env("SANDBOX_ROOT", tmp.path().join("root"))
            .env("SANDBOX_RUNTIME", "python-3.12")
            .env("SANDBOX_INDEX_URL", &index.url)
            .env("PIP_CONFIG_FILE", "/dev/null")
            .env("SANDBOX_LOG", "warn")
            .output()
    };
    let out = run().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("added  carry-2.0-py3-none-any.whl"),
        "{stdout}"
    );
    assert!(
        stdout.contains("added  carrydep-1.5-py3-none-any.whl"),
        "{stdout}"
    );
    let mut files: Vec<String> = std::fs::read_dir(&house)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "carry-2.0-py3-none-any.whl",
            "carrydep-1.5-py3-none-any.whl"
        ]
    );
    let again = run().await.unwrap();
    assert!(String::from_utf8_lossy(&again.stdout).contains("already there  carry-2.0"));

    drop(index);
    let server = Server::start_with(&[
        ("SANDBOX_WHEELHOUSE", house.to_str().unwrap()),
        ("PIP_CONFIG_FILE", "/dev/null"),
        ("SANDBOX_POOL_SIZE", "0"),
    ])
    .await;
    let id = server.create().await;
    assert_eq!(
        installed(&install(&server, &id, "carry").await),
        ["carry 2.0 wheelhouse", "carrydep 1.5 wheelhouse"]
    );
    assert_eq!(
        server.run(&id, "import carry; carry.OK").await["value"],
        "'carried'"
    );
    server.stop().await;
}

#[tokio::test]
async fn without_an_index_or_wheelhouse_it_says_how_to_configure_one() {
    let server = Server::start_with(&[("PIP_CONFIG_FILE", "/dev/null")]).await;
    let id = server.create().await;
    let err = install_err(&server, &id, "six").await;
    assert!(err.contains("SANDBOX_INDEX_URL"), "{err}");
    assert!(err.contains("SANDBOX_WHEELHOUSE"), "{err}");
    assert!(err.contains("wheelhouse add"), "{err}");
    server.stop().await;
}

#[tokio::test]
async fn with_nothing_configured_the_index_pip_names_is_used_and_named() {
    let index = IndexServer::start().await;
    index.add_wheel(&Wheel::module("frompip", "1.0", "WHERE = 'pip'\n"));
    // pip reads XDG_CONFIG_DIRS/pip/pip.conf; the server reads no such file
    // itself, so only pip's own answer leads to this index.
    let xdg = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(xdg.path().join("pip")).unwrap();
    std::fs::write(
        xdg.path().join("pip").join("pip.conf"),
        format!("[global]\nindex-url = {}\n", index.url),
    )
    .unwrap();
    let server = Server::start_with(&[
        ("SANDBOX_PIP_PYTHON", "python3"),
        ("XDG_CONFIG_DIRS", xdg.path().to_str().unwrap()),
        ("SANDBOX_POOL_SIZE", "0"),
    ])
    .await;
    let id = server.create().await;
    let result = install(&server, &id, "frompip").await;
    assert_eq!(installed(&result), ["frompip 1.0 index"]);
    let named = format!(
        "Downloaded from {} (from pip's index, as python3 -m pip reports it).",
        index.url
    );
    for field in ["output", "message"] {
        assert!(
            result[field].as_str().unwrap_or_default().contains(&named),
            "the result names the index and that pip chose it: {result}"
        );
    }
    assert_eq!(
        server.run(&id, "import frompip; frompip.WHERE").await["value"],
        "'pip'"
    );
    server.stop().await;

    let no_pip = Server::start_with(&[("SANDBOX_PIP_PYTHON", "/nonexistent/python3")]).await;
    let id = no_pip.create().await;
    let err = install_err(&no_pip, &id, "six").await;
    for what in [
        "no pip was found",
        "SANDBOX_PIP_PYTHON",
        "SANDBOX_INDEX_URL",
        "SANDBOX_WHEELHOUSE",
    ] {
        assert!(err.contains(what), "{what}: {err}");
    }
    no_pip.stop().await;
}

#[tokio::test]
async fn transient_failures_are_retried_and_an_unreachable_index_is_named() {
    let index = IndexServer::start().await;
    index.add_wheel(&Wheel::module("flaky", "1.0", ""));
    index.serve_html();
    index.fail_next("/simple/flaky/", 2);
    let server = start(&index).await;
    let id = server.create().await;
    assert_eq!(
        installed(&install(&server, &id, "flaky").await),
        ["flaky 1.0 index"]
    );
    assert_eq!(
        index.count("/simple/flaky/"),
        3,
        "two 503s, then the page (served as HTML)"
    );
    server.stop().await;

    let dead = Server::start_with(&[
        ("SANDBOX_INDEX_URL", "http://127.0.0.1:9/simple/"),
        ("PIP_CONFIG_FILE", "/dev/null"),
    ])
    .await;
    let id = dead.create().await;
    let err = install_err(&dead, &id, "six").await;
    assert!(
        err.contains("cannot reach the package index http://127.0.0.1:9/simple/"),
        "{err}"
    );
    dead.stop().await;
}
