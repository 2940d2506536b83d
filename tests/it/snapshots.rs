//! Sandboxes of the scientific runtime start from a pre-initialised snapshot
//! (numpy, pandas and matplotlib already imported), each with randomness of
//! its own, and can be forked: the fork has the source's variables, imports
//! and files, and the two then diverge.

use serde_json::{Value, json};

use crate::support::{Server, scientific_cache, structured, text};

async fn start() -> Server {
    scientific_cache();
    Server::start_with(&[("SANDBOX_POOL_SIZE", "0")]).await
}

async fn create(server: &Server) -> String {
    server.create_with(json!({"runtime": "scientific"})).await
}

async fn value(server: &Server, id: &str, code: &str) -> String {
    let result = server
        .call(
            "execute_code",
            json!({"session_id": id, "code": code, "timeout_seconds": 120}),
        )
        .await;
    assert_ne!(result.is_error, Some(true), "{}", text(&result));
    structured(&result)["value"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn a_new_sandbox_has_the_preloaded_modules_and_randomness_of_its_own() {
    let server = start().await;
    let (a, b) = (create(&server).await, create(&server).await);
    let probe = "import sys\nsorted(m for m in ('numpy', 'pandas', 'matplotlib.pyplot') if m in sys.modules)";
    assert_eq!(
        value(&server, &a, probe).await,
        "['matplotlib.pyplot', 'numpy', 'pandas']",
        "the snapshot carries the preloaded imports"
    );
    assert_eq!(
        value(&server, &a, "'np' in dir() or 'numpy' in dir()").await,
        "False",
        "preloading binds no name in the user's namespace"
    );
    let draw = "import random, numpy as np\n(random.random(), float(np.random.random()))";
    let (first, second) = (
        value(&server, &a, draw).await,
        value(&server, &b, draw).await,
    );
    assert_ne!(
        first, second,
        "two sandboxes from one snapshot draw different numbers"
    );
    let names = "import tempfile\ntempfile.mktemp()";
    assert_ne!(
        value(&server, &a, names).await,
        value(&server, &b, names).await
    );
    server.stop().await;
}

#[tokio::test]
async fn a_fork_has_the_source_state_and_then_goes_its_own_way() {
    let server = start().await;
    let source = create(&server).await;
    value(
        &server,
        &source,
        "import pandas as pd\ndf = pd.DataFrame({'x': [1, 2, 3]})\nopen('notes.txt', 'w').write('from the source')\nkept_open = open('notes.txt')\ncounter = 1\nimport time\nwhile time.process_time() < 0.2:\n    pass\ncpu_at_fork = time.process_time()",
    )
    .await;
    let forked = server
        .ok(
            "fork_sandbox",
            json!({"session_id": source, "new_session_id": "the-fork"}),
        )
        .await;
    assert_eq!(forked["session_id"], "the-fork");
    assert_eq!(
        forked["open_files_not_carried"], 1,
        "the open file is reported: {forked}"
    );
    assert!(
        forked["message"]
            .as_str()
            .unwrap()
            .contains("held 1 files open"),
        "{forked}"
    );
    assert_eq!(
        value(
            &server,
            "the-fork",
            "(int(df.x.sum()), counter, open('notes.txt').read())"
        )
        .await,
        "(6, 1, 'from the source')"
    );
    assert_eq!(
        value(&server, "the-fork", "time.process_time() >= cpu_at_fork").await,
        "True",
        "the fork's CPU time goes on from the source's, never back"
    );
    value(
        &server,
        "the-fork",
        "counter = 100\nopen('notes.txt', 'w').write('changed in the fork')",
    )
    .await;
    assert_eq!(
        value(&server, &source, "(counter, open('notes.txt').read())").await,
        "(1, 'from the source')",
        "the source is untouched by the fork"
    );
    assert_eq!(
        value(&server, "the-fork", "counter").await,
        "100",
        "the fork keeps its own state"
    );

    // Refusals: an existing id, an unknown source, the sandbox cap.
    let taken = server
        .err(
            "fork_sandbox",
            json!({"session_id": source, "new_session_id": "the-fork"}),
        )
        .await;
    assert!(taken.contains("already exists"), "{taken}");
    let unknown = server
        .err("fork_sandbox", json!({"session_id": "nope"}))
        .await;
    assert!(unknown.contains("no sandbox with id 'nope'"), "{unknown}");
    let bad = server
        .err(
            "fork_sandbox",
            json!({"session_id": source, "new_session_id": "../x"}),
        )
        .await;
    assert!(!bad.is_empty());
    server.stop().await;
}

#[tokio::test]
async fn a_fork_is_refused_while_the_source_runs_over_the_cap_and_for_python_3_12() {
    scientific_cache();
    let server =
        Server::start_with(&[("SANDBOX_POOL_SIZE", "0"), ("SANDBOX_MAX_SANDBOXES", "3")]).await;
    let too_small = server
        .err(
            "create_sandbox",
            json!({"runtime": "scientific", "memory_mb": 64}),
        )
        .await;
    assert!(
        too_small.contains("memory_mb must be at least"),
        "the snapshot's memory is named: {too_small}"
    );
    let source = create(&server).await;
    let plain = server.create_with(json!({"runtime": "python-3.12"})).await;
    let refused = server
        .err("fork_sandbox", json!({"session_id": plain}))
        .await;
    assert!(refused.contains("cannot be forked"), "{refused}");
    let filler = server.create_with(json!({"runtime": "python-3.12"})).await;
    let cap = server
        .err("fork_sandbox", json!({"session_id": source}))
        .await;
    assert!(cap.contains("maximum of 3"), "the cap is named: {cap}");
    for id in [&plain, &filler] {
        server.ok("close_sandbox", json!({"session_id": id})).await;
    }

    let busy = {
        let running = server.call(
            "execute_code",
            json!({"session_id": source, "code": "import time\ntime.sleep(3)"}),
        );
        let fork = async {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            server
                .err("fork_sandbox", json!({"session_id": source}))
                .await
        };
        let (ran, busy) = tokio::join!(running, fork);
        assert_ne!(ran.is_error, Some(true), "{}", text(&ran));
        busy
    };
    assert!(busy.contains("running a call"), "{busy}");
    let status: Value = server.ok("get_sandbox_status", json!({})).await;
    assert_eq!(
        status["count"], 1,
        "a refused fork leaves nothing: {status}"
    );
    server.stop().await;
}

/// The entries saved under `root` once there are `count` of them (or after
/// 20 s, whatever there is then).
async fn saved_once_there(
    root: &std::path::Path,
    count: usize,
) -> Vec<(String, std::path::PathBuf)> {
    for _ in 0..200 {
        if saved_entries(root).len() == count {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    saved_entries(root)
}

/// The saved sandbox `id` answers with its files and without its variables
/// (`total` is gone, `data.txt` holds 'saved file'), saying it came back with
/// its files only and why (`why` is in the message).
async fn back_with_files_only(server: &Server, id: &str, why: &str) {
    let back = server
        .call("execute_code", json!({"session_id": id, "code": "total"}))
        .await;
    assert_eq!(structured(&back)["error"]["name"], "NameError");
    let said = text(&back);
    assert!(said.contains(why) && said.contains("files only"), "{said}");
    assert_eq!(
        server.run(id, "open('data.txt').read()").await["value"],
        "'saved file'",
        "its files are kept"
    );
}

/// The entries saved under `root`, by the id their record names.
fn saved_entries(root: &std::path::Path) -> Vec<(String, std::path::PathBuf)> {
    let Ok(read) = std::fs::read_dir(root.join("saved")) else {
        return Vec::new();
    };
    read.flatten()
        .filter_map(|e| {
            let meta: Value =
                serde_json::from_slice(&std::fs::read(e.path().join("meta.json")).ok()?).ok()?;
            Some((meta["session_id"].as_str()?.to_owned(), e.path()))
        })
        .collect()
}

/// A module cache of the test's own holding `shared`'s compiled modules
/// (hard links) but not its snapshots, which the test's servers make.
fn cache_without_snapshots(shared: &std::path::Path, cache: &std::path::Path) {
    fn link_tree(from: &std::path::Path, to: &std::path::Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() && !name.starts_with("preinit-") {
                link_tree(&entry.path(), &to.join(&name));
            } else if kind.is_file()
                && !name.ends_with(".image")
                && !name.ends_with(".snapshot.json")
                && !name.contains(".partial-")
            {
                // A link where it can be, a copy across file systems.
                std::fs::hard_link(entry.path(), to.join(&name))
                    .or_else(|_| std::fs::copy(entry.path(), to.join(&name)).map(|_| ()))
                    .unwrap();
            }
        }
    }
    link_tree(&shared.join("modules"), &cache.join("modules"));
}

/// A snapshot made again under the same key (the module cache cleared, or a
/// snapshot no server used for a week removed) is another image, on which a
/// saved memory's pages no longer fit: the sandbox comes back at once with
/// its files only, and says why (it used to hang until its start timed out).
#[tokio::test]
async fn a_sandbox_saved_on_a_snapshot_made_again_comes_back_with_its_files_and_says_why() {
    // Beside the shared cache, so its compiled modules can be linked, not copied.
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let cache = tmp.path().join("cache");
    cache_without_snapshots(&scientific_cache(), &cache);
    let root = tmp.path().join("root");
    let cache_dir = cache.to_string_lossy().into_owned();
    let env = [
        ("SANDBOX_POOL_SIZE", "0"),
        ("SANDBOX_CACHE_DIR", cache_dir.as_str()),
    ];
    let first = Server::start_in(tempfile::tempdir().unwrap(), root.clone(), &env).await;
    first
        .create_with(json!({"runtime": "scientific", "session_id": "remade"}))
        .await;
    value(
        &first,
        "remade",
        "total = 41\nopen('data.txt', 'w').write('saved file')",
    )
    .await;
    first.stop().await;
    let saved = saved_once_there(&root, 1).await;
    assert_eq!(saved.len(), 1, "the sandbox is saved");
    for entry in std::fs::read_dir(cache.join("modules")).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".image") || name.ends_with(".snapshot.json") {
            std::fs::remove_file(entry.path()).unwrap();
        }
    }

    let second = Server::start_in(tempfile::tempdir().unwrap(), root.clone(), &env).await;
    let started = std::time::Instant::now();
    back_with_files_only(&second, "remade", "snapshot was made again").await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(45),
        "the restore waited {:?}",
        started.elapsed()
    );
    second.stop().await;
}

#[tokio::test]
async fn sandboxes_survive_a_restart_and_a_damaged_save_comes_back_with_its_files_and_says_so() {
    scientific_cache();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let env = [("SANDBOX_POOL_SIZE", "0")];
    let first = Server::start_in(tempfile::tempdir().unwrap(), root.clone(), &env).await;
    for id in ["keep-me", "tamper-me"] {
        first
            .create_with(json!({"runtime": "scientific", "session_id": id}))
            .await;
        value(
            &first,
            id,
            "import pandas as pd\ntotal = 41\nframe = pd.DataFrame({'a': [1, 2]})\nopen('data.txt', 'w').write('saved file')",
        )
        .await;
    }
    first
        .create_with(json!({"runtime": "python-3.12", "session_id": "plain"}))
        .await;
    first
        .run("plain", "y = 1\nopen('/p.txt', 'w').write('plain file')")
        .await;
    first.stop().await;
    let saved = saved_once_there(&root, 3).await;
    assert_eq!(saved.len(), 3, "every sandbox is saved: {saved:?}");
    for (id, path) in &saved {
        assert!(
            !path.to_string_lossy().contains(id.as_str()),
            "a sandbox id never becomes a host path"
        );
    }
    let tampered = &saved.iter().find(|(id, _)| id == "tamper-me").unwrap().1;
    // Its memory's pages cut short on disk, as a torn write leaves them (a
    // byte changed inside pages already noted on disk is not looked for:
    // the checksums find what a crash does, not what someone who can
    // write the root does on purpose).
    let segment = std::fs::read_dir(tampered)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("segment-")
        })
        .expect("the memory's pages are kept");
    let bytes = std::fs::read(&segment).unwrap();
    std::fs::write(&segment, &bytes[..bytes.len() / 2]).unwrap();

    // One sandbox at a time, to see a restore refused at the cap lose nothing.
    let second = Server::start_in(
        tempfile::tempdir().unwrap(),
        root.clone(),
        &[("SANDBOX_POOL_SIZE", "0"), ("SANDBOX_MAX_SANDBOXES", "1")],
    )
    .await;
    let status = second.ok("get_sandbox_status", json!({})).await;
    let listed: Vec<&str> = status["saved"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(listed.len(), 3, "{status}");
    assert_eq!(status["count"], 0, "nothing runs until a call names it");

    let filler = second.create().await;
    let full = second
        .err(
            "execute_code",
            json!({"session_id": "keep-me", "code": "total"}),
        )
        .await;
    assert!(full.contains("maximum of 1"), "{full}");
    assert_eq!(
        saved_entries(&root).len(),
        3,
        "a refused restore keeps the saved sandbox"
    );
    second
        .ok("close_sandbox", json!({"session_id": filler}))
        .await;

    assert_eq!(
        value(
            &second,
            "keep-me",
            "(total + 1, int(frame.a.sum()), open('data.txt').read())"
        )
        .await,
        "(42, 3, 'saved file')",
        "variables, imports and files come back"
    );
    second
        .ok("close_sandbox", json!({"session_id": "keep-me"}))
        .await;

    let again = second
        .ok("create_sandbox", json!({"session_id": "plain"}))
        .await;
    assert_eq!(
        again["created"], false,
        "a saved id is the existing sandbox: {again}"
    );
    let plain = second
        .call("execute_code", json!({"session_id": "plain", "code": "y"}))
        .await;
    assert_eq!(
        structured(&plain)["error"]["name"],
        "NameError",
        "python-3.12 keeps files only"
    );
    assert_eq!(
        second.run("plain", "open('/p.txt').read()").await["value"],
        "'plain file'"
    );
    second
        .ok("close_sandbox", json!({"session_id": "plain"}))
        .await;
    // Damaged pages are never mapped: it comes back with its files only,
    // and says why.
    back_with_files_only(&second, "tamper-me", "damaged").await;
    let closed = second
        .ok("close_sandbox", json!({"session_id": "tamper-me"}))
        .await;
    assert_eq!(closed["closed"], true);
    assert!(
        saved_entries(&root).is_empty(),
        "restored and deleted entries are gone"
    );
    second.stop().await;
}

#[tokio::test]
async fn an_idle_sandbox_is_saved_and_comes_back_when_named() {
    scientific_cache();
    let server = Server::start_with(&[
        ("SANDBOX_POOL_SIZE", "0"),
        ("SANDBOX_IDLE_TIMEOUT_SECONDS", "1"),
    ])
    .await;
    let id = create(&server).await;
    value(&server, &id, "kept = 'across idle expiry'").await;
    let mut saved = false;
    for _ in 0..100 {
        let status = server.ok("get_sandbox_status", json!({})).await;
        if status["count"] == 0 && status["saved"][0]["session_id"] == json!(id) {
            saved = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(saved, "the idle sandbox was released and saved");
    assert_eq!(value(&server, &id, "kept").await, "'across idle expiry'");
    server.stop().await;
}
