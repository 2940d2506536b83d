//! install_package against hostile inputs: wheels that inflate past the
//! quota, guests that plant metadata, index pages built to be slow or huge,
//! transfers that never end, cancellation, caches that would grow without
//! bound, index credentials, and files that run at interpreter start.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest};
use rmcp::service::PeerRequestOptions;
use serde_json::json;

use crate::packages::{install, install_err};
use crate::support::index::{IndexServer, Listed};
use crate::support::{Server, shared_cache, text};
use crate::wheels::{Wheel, sha256_hex};

/// Where the runtime's site-packages is, relative to a sandbox directory.
const SITE: &str = ".local/lib/python3.12/site-packages";

/// The settings every test here starts with: only `index`, no pip
/// configuration, no warm pool.
fn index_env(url: &str) -> Vec<(&str, &str)> {
    vec![
        ("SANDBOX_INDEX_URL", url),
        ("PIP_CONFIG_FILE", "/dev/null"),
        ("SANDBOX_POOL_SIZE", "0"),
    ]
}

/// A cache directory of the test's own (so its wheel cache holds only what
/// the test put there), sharing the compiled runtime with the other tests.
fn own_cache(tmp: &Path) -> PathBuf {
    let dir = tmp.join("cache");
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(shared_cache().join("modules"), dir.join("modules")).unwrap();
    dir
}

/// The names of the files in a directory (none when it does not exist).
fn names(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    out.sort();
    out
}

/// Bytes of the regular files beneath `dir` (entries vanishing meanwhile
/// are skipped).
fn bytes_under(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() {
                total += meta.len();
            }
        }
    }
    total
}

/// Publishes a wheel from its bytes (no PEP 658 metadata file); returns its
/// sha256.
fn publish(index: &IndexServer, wheel: &Wheel) -> String {
    let bytes = wheel.build();
    let sha = sha256_hex(&bytes);
    index.add_file(
        &wheel.name,
        Listed {
            filename: wheel.filename(),
            sha256: sha.clone(),
            requires_python: None,
            yanked: None,
            metadata: None,
        },
        bytes,
    );
    sha
}

/// Bytes that do not compress.
fn noise(len: usize) -> Vec<u8> {
    (0..len).map(|_| rand::random::<u8>()).collect()
}

#[tokio::test]
async fn staging_stops_at_the_disk_quota_as_bytes_are_inflated() {
    let index = IndexServer::start().await;
    let mut wheel = Wheel::module("inflates", "1.0", "");
    for i in 0..3 {
        wheel = wheel.file(&format!("inflates/zeros{i}.bin"), vec![0u8; 40 << 20]);
    }
    index.add_wheel(&wheel);
    let mut env = index_env(&index.url);
    env.push(("SANDBOX_DISK_QUOTA_MB", "4"));
    let server = Server::start_with(&env).await;
    let id = server.create().await;
    let dir = server.sandbox_dirs()[0].clone();

    let peak = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (peak, done, dir) = (peak.clone(), done.clone(), dir.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                peak.fetch_max(bytes_under(&dir), Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let err = install_err(&server, &id, "inflates").await;
    done.store(true, Ordering::SeqCst);
    watcher.join().unwrap();

    assert!(err.contains("disk quota"), "{err}");
    let peak = peak.load(Ordering::SeqCst);
    eprintln!("staging: at most {peak} bytes in the sandbox under a 4 MiB quota");
    assert!(
        peak <= 5 << 20,
        "the wheel inflates to 120 MiB; at most the 4 MiB quota and a buffer may be written, but {peak} bytes were"
    );
    assert!(
        !dir.join(".local").exists(),
        "nothing was left behind: {:?}",
        names(&dir)
    );
    server.stop().await;
}

#[tokio::test]
async fn guest_planted_metadata_neither_stalls_the_install_nor_other_sandboxes() {
    let index = IndexServer::start().await;
    index.add_wheel(&Wheel::module("bloatdep", "1.0", ""));
    let server = Server::start_with(&index_env(&index.url)).await;
    let victim = server.create().await;
    let other = server.create().await;
    server
        .run(
            &victim,
            &format!(
                "import os\nd = '/{SITE}/bloat-1.0.dist-info'\nos.makedirs(d)\n\
                 lines = ''.join(f'Requires-Dist: bloatdep>=0.{{i}}\\n' for i in range(40000))\n\
                 open(d + '/METADATA', 'w').write('Metadata-Version: 2.1\\nName: bloat\\nVersion: 1.0\\n' + lines)"
            ),
        )
        .await;

    let started = Instant::now();
    let installing = install(&server, &victim, "bloat");
    let status = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let asked = Instant::now();
        server
            .ok("get_sandbox_status", json!({"session_id": other}))
            .await;
        asked.elapsed()
    };
    let (result, status_took) = tokio::time::timeout(Duration::from_secs(120), async {
        tokio::join!(installing, status)
    })
    .await
    .expect("the install ended");
    let install_took = started.elapsed();
    eprintln!(
        "planted metadata: install {install_took:?}, another sandbox's status {status_took:?}"
    );
    assert!(
        status_took < Duration::from_secs(2),
        "another sandbox's status took {status_took:?} while the install ran"
    );
    assert!(
        install_took < Duration::from_secs(10),
        "the install took {install_took:?}"
    );
    assert_eq!(result["already_present"][0]["name"], "bloat", "{result}");
    server.stop().await;
}

#[tokio::test]
async fn an_index_page_over_the_size_cap_is_refused_and_says_the_cap() {
    let index = IndexServer::start().await;
    let wheel = Wheel::module("bigpage", "1.0", "");
    let filename = index.add_wheel(&wheel);
    let bytes = wheel.build();
    let entry = json!({
        "filename": filename,
        "url": format!("../../files/{filename}"),
        "hashes": {"sha256": sha256_hex(&bytes)},
    });
    let page = format!(
        r#"{{"meta": {{"api-version": "1.1"}}, "files": [{entry}], "padding": "{}"}}"#,
        "x".repeat(9 << 20)
    );
    index.raw_page(
        "bigpage",
        "application/vnd.pypi.simple.v1+json",
        page.into_bytes(),
    );
    let server = Server::start_with(&index_env(&index.url)).await;
    let id = server.create().await;
    let err = install_err(&server, &id, "bigpage").await;
    assert!(err.contains("larger than 8 MiB"), "{err}");
    assert!(
        err.len() < 1000,
        "the message is short: {} bytes",
        err.len()
    );
    server.stop().await;
}

#[tokio::test]
async fn pages_built_to_be_slow_parse_quickly_and_off_the_async_workers() {
    let index = IndexServer::start().await;
    index.raw_page("angles", "text/html", "<".repeat(400_000).into_bytes());
    index.raw_page("tagnames", "text/html", "<a".repeat(200_000).into_bytes());
    let server = Server::start_with(&index_env(&index.url)).await;
    let a = server.create().await;
    let b = server.create().await;
    let other = server.create().await;
    let started = Instant::now();
    let status = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let asked = Instant::now();
        server
            .ok("get_sandbox_status", json!({"session_id": other}))
            .await;
        asked.elapsed()
    };
    let (first, second, status_took) = tokio::time::timeout(Duration::from_secs(180), async {
        tokio::join!(
            install_err(&server, &a, "angles"),
            install_err(&server, &b, "tagnames"),
            status
        )
    })
    .await
    .expect("the installs ended");
    eprintln!(
        "hostile pages: installs {:?}, another sandbox's status {status_took:?}",
        started.elapsed()
    );
    assert!(first.contains("no package named 'angles'"), "{first}");
    assert!(second.contains("no package named 'tagnames'"), "{second}");
    assert!(
        status_took < Duration::from_secs(2),
        "another sandbox's status took {status_took:?}"
    );
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "the installs took {took:?}");
    server.stop().await;
}

#[tokio::test]
async fn an_unparsable_page_is_reported_in_a_bounded_message() {
    let index = IndexServer::start().await;
    let page = format!(r#"{{"files": "{}"}}"#, "A".repeat(1 << 20));
    index.raw_page(
        "oddpage",
        "application/vnd.pypi.simple.v1+json",
        page.into_bytes(),
    );
    let server = Server::start_with(&index_env(&index.url)).await;
    let id = server.create().await;
    let err = install_err(&server, &id, "oddpage").await;
    assert!(err.contains("could not be read"), "{err}");
    assert!(
        err.len() < 2000,
        "the message quotes a bounded part of the page: {} bytes",
        err.len()
    );
    server.stop().await;
}

/// A published wheel whose file is sent one byte per 200 ms (its metadata
/// file comes at once, so resolving is quick and the download is slow).
fn slow_wheel(index: &IndexServer, name: &str) {
    let filename = index.add_wheel(&Wheel::module(name, "1.0", "X = 1\n"));
    index.trickle(&format!("/files/{filename}"), Duration::from_millis(200));
}

#[tokio::test]
async fn a_trickling_download_ends_at_the_install_deadline() {
    let index = IndexServer::start().await;
    slow_wheel(&index, "slowpoke");
    let tmp = tempfile::tempdir().unwrap();
    let cache = own_cache(tmp.path());
    let mut env = index_env(&index.url);
    env.push(("SANDBOX_CACHE_DIR", cache.to_str().unwrap()));
    env.push(("SANDBOX_INSTALL_TIMEOUT_SECONDS", "3"));
    let server = Server::start_with(&env).await;
    let id = server.create().await;
    let started = Instant::now();
    let err = tokio::time::timeout(
        Duration::from_secs(60),
        install_err(&server, &id, "slowpoke"),
    )
    .await
    .expect("the install ended");
    let took = started.elapsed();
    eprintln!("trickle: the install ended after {took:?}");
    assert!(err.contains("longer than 3 s"), "{err}");
    assert!(
        err.contains("SANDBOX_INSTALL_TIMEOUT_SECONDS"),
        "says which setting: {err}"
    );
    assert!(took < Duration::from_secs(8), "it took {took:?}");
    assert!(
        names(&cache.join("wheels")).is_empty(),
        "no partial download is left: {:?}",
        names(&cache.join("wheels"))
    );
    assert!(!server.sandbox_dirs()[0].join(SITE).exists());
    server.stop().await;
}

#[tokio::test]
async fn a_cancelled_install_stops_and_leaves_the_sandbox_as_it_was() {
    let index = IndexServer::start().await;
    slow_wheel(&index, "slowcancel");
    let tmp = tempfile::tempdir().unwrap();
    let cache = own_cache(tmp.path());
    let mut env = index_env(&index.url);
    env.push(("SANDBOX_CACHE_DIR", cache.to_str().unwrap()));
    let server = Server::start_with(&env).await;
    let id = server.create().await;
    let params = CallToolRequestParams::new("install_package").with_arguments(
        json!({"session_id": id, "package_name": "slowcancel"})
            .as_object()
            .unwrap()
            .clone(),
    );
    let handle = server
        .client
        .send_cancellable_request(
            ClientRequest::CallToolRequest(CallToolRequest::new(params)),
            PeerRequestOptions::no_options(),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        index
            .requests()
            .iter()
            .any(|p| p.starts_with("/files/slowcancel-1.0")),
        "the download started: {:?}",
        index.requests()
    );
    handle.cancel(Some("test".into())).await.unwrap();
    // The next call waits its turn behind the cancelled install, which must stop.
    let next = tokio::time::timeout(
        Duration::from_secs(15),
        server.exec(&id, "import slowcancel"),
    )
    .await
    .expect("the cancelled install stopped");
    assert!(
        text(&next).contains("ModuleNotFoundError"),
        "{}",
        text(&next)
    );
    assert!(
        names(&cache.join("wheels")).is_empty(),
        "no partial download is left: {:?}",
        names(&cache.join("wheels"))
    );
    assert!(!server.sandbox_dirs()[0].join(SITE).exists());
    server.stop().await;
}

#[tokio::test]
async fn closing_a_sandbox_stops_its_install() {
    let index = IndexServer::start().await;
    slow_wheel(&index, "slowclose");
    let server = Server::start_with(&index_env(&index.url)).await;
    let id = server.create().await;
    let installing = server.call(
        "install_package",
        json!({"session_id": id, "package_name": "slowclose"}),
    );
    let closing = async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        server.ok("close_sandbox", json!({"session_id": id})).await
    };
    let (installed, _) = tokio::time::timeout(Duration::from_secs(20), async {
        tokio::join!(installing, closing)
    })
    .await
    .expect("the install stopped when its sandbox closed");
    assert_eq!(installed.is_error, Some(true), "{}", text(&installed));
    server.stop().await;
}

#[tokio::test]
async fn refused_wheels_are_not_kept_in_the_wheel_cache() {
    let index = IndexServer::start().await;
    let slip =
        Wheel::module("slipcache", "1.0", "").file("../../../../escaped.py", "print('out')\n");
    let bomb = Wheel::module("bombcache", "1.0", "").file("bomb/zeros.bin", vec![0u8; 60 << 20]);
    let slip_sha = publish(&index, &slip);
    let bomb_sha = publish(&index, &bomb);
    let server = Server::start_with(&index_env(&index.url)).await;
    let id = server.create().await;
    let wheels = shared_cache().join("wheels");
    assert!(
        install_err(&server, &id, "slipcache")
            .await
            .contains("refused")
    );
    assert!(
        install_err(&server, &id, "bombcache")
            .await
            .contains("refused")
    );
    for sha in [slip_sha, bomb_sha] {
        assert!(
            !wheels.join(format!("{sha}.whl")).exists(),
            "a refused wheel stays out of the cache"
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn the_wheel_cache_stays_under_its_bound_dropping_the_least_recently_used() {
    let index = IndexServer::start().await;
    let mut shas = Vec::new();
    for name in ["bulky-one", "bulky-two", "bulky-three"] {
        shas.push(publish(
            &index,
            &Wheel::module(name, "1.0", "").file(
                &format!("{}/blob.bin", name.replace('-', "_")),
                noise(400 << 10),
            ),
        ));
    }
    let tmp = tempfile::tempdir().unwrap();
    let cache = own_cache(tmp.path());
    let mut env = index_env(&index.url);
    env.push(("SANDBOX_CACHE_DIR", cache.to_str().unwrap()));
    env.push(("SANDBOX_WHEEL_CACHE_MB", "1"));
    let server = Server::start_with(&env).await;
    let id = server.create().await;
    install(&server, &id, "bulky-one").await;
    install(&server, &id, "bulky-two").await;
    // Using bulky-one again makes bulky-two the least recently used.
    let again = server.create().await;
    let reused = install(&server, &again, "bulky-one").await;
    assert_eq!(reused["installed"][0]["source"], "cache", "{reused}");
    install(&server, &again, "bulky-three").await;
    let wheels = cache.join("wheels");
    let kept = names(&wheels);
    assert!(
        bytes_under(&wheels) <= 1 << 20,
        "the cache holds {} bytes: {kept:?}",
        bytes_under(&wheels)
    );
    let mut expected = vec![format!("{}.whl", shas[0]), format!("{}.whl", shas[2])];
    expected.sort();
    assert_eq!(
        kept, expected,
        "bulky-two, the least recently used, was dropped"
    );
    server.stop().await;
}

#[tokio::test]
async fn index_credentials_go_to_every_url_of_its_origin_and_nowhere_else() {
    let index = IndexServer::start().await;
    index.require_auth("reader", "s3cret");
    let other = IndexServer::start().await;
    index.add_wheel(&Wheel::module("private", "1.0", "P = 1\n").requires("elsewhere"));
    // A dependency whose file the index links on another origin.
    let dep = Wheel::module("elsewhere", "1.0", "E = 1\n");
    let dep_bytes = dep.build();
    let listed = Listed {
        filename: dep.filename(),
        sha256: sha256_hex(&dep_bytes),
        requires_python: None,
        yanked: None,
        metadata: None,
    };
    index.add_file("elsewhere", listed.clone(), dep_bytes.clone());
    other.add_file("elsewhere", listed, dep_bytes);
    index.link(&dep.filename(), &other.file_url(&dep.filename()));
    // A file whose URL leaves the origin and redirects back to it.
    let hop = Wheel::module("hop", "1.0", "");
    let hop_bytes = hop.build();
    let hop_listed = Listed {
        filename: hop.filename(),
        sha256: sha256_hex(&hop_bytes),
        requires_python: None,
        yanked: None,
        metadata: None,
    };
    index.add_file("hop", hop_listed, hop_bytes);
    let hop_path = format!("/files/{}", hop.filename());
    index.redirect("/files/bounce", &other.file_url("bounce"));
    other.redirect("/files/bounce", &index.file_url(&hop.filename()));
    index.link(&hop.filename(), &index.file_url("bounce"));

    let url = index.url_with_credentials("reader", "s3cret");
    let server = Server::start_with(&index_env(&url)).await;
    let id = server.create().await;
    let result = install(&server, &id, "private").await;
    assert_eq!(result["installed"].as_array().unwrap().len(), 2, "{result}");
    assert_eq!(
        server
            .run(&id, "import private, elsewhere; private.P + elsewhere.E")
            .await["value"],
        "2"
    );
    let to_index = index.authorizations();
    assert!(
        to_index
            .iter()
            .any(|(p, a)| p.starts_with("/files/private") && a.is_some()),
        "files on the index's origin get the credentials: {to_index:?}"
    );
    assert!(
        to_index.iter().all(|(_, a)| a.is_some()),
        "every request to the index carried them: {to_index:?}"
    );

    let err = install_err(&server, &id, "hop").await;
    assert!(err.contains("401"), "{err}");
    assert!(!err.contains("s3cret"), "{err}");
    let back = index
        .authorizations()
        .into_iter()
        .filter(|(p, _)| *p == hop_path)
        .collect::<Vec<_>>();
    assert!(!back.is_empty(), "the redirect came back to the index");
    assert!(
        back.iter().all(|(_, a)| a.is_none()),
        "no credentials after a redirect off the origin: {back:?}"
    );
    let to_other = other.authorizations();
    assert!(!to_other.is_empty());
    assert!(
        to_other.iter().all(|(_, a)| a.is_none()),
        "another origin never gets them: {to_other:?}"
    );
    server.stop().await;
}

#[tokio::test]
async fn sitecustomize_and_usercustomize_are_reported_like_pth_files() {
    let index = IndexServer::start().await;
    index.add_wheel(
        &Wheel::module("startup", "1.0", "")
            .file("sitecustomize.py", "import os\n")
            .file("usercustomize.py", "import os\n")
            .file("startup.pth", "import startup\n"),
    );
    let server = Server::start_with(&index_env(&index.url)).await;
    let id = server.create().await;
    let result = install(&server, &id, "startup").await;
    let output = result["output"].as_str().unwrap_or_default();
    for file in ["startup.pth", "sitecustomize.py", "usercustomize.py"] {
        assert!(output.contains(file), "{file} is reported: {output}");
    }
    assert!(
        output.contains("runs when the interpreter starts"),
        "{output}"
    );
    server.stop().await;
}

#[tokio::test]
async fn guest_planted_records_and_links_stay_inside_site_packages() {
    let index = IndexServer::start().await;
    index.add_wheel(&Wheel::module("planted", "2.0", "V = 2\n"));
    let server = Server::start_with(&index_env(&index.url)).await;
    let id = server.create().await;
    let dir = server.sandbox_dirs()[0].clone();
    let canary = dir.parent().unwrap().join("canary.txt");
    std::fs::write(&canary, "keep me").unwrap();
    // What guest code could leave in its own site-packages.
    let dist = dir.join(SITE).join("planted-1.0.dist-info");
    std::fs::create_dir_all(&dist).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", dist.join("METADATA")).unwrap();
    let up = "../".repeat(8);
    std::fs::write(
        dist.join("RECORD"),
        format!(
            "{up}canary.txt,,\n/etc/hostname,,\n{}/canary.txt,,\nplanted-1.0.dist-info/RECORD,,\n",
            canary.parent().unwrap().display()
        ),
    )
    .unwrap();
    std::os::unix::fs::symlink(&canary, dir.join(SITE).join("planted")).unwrap();

    let result = install(&server, &id, "planted>=2").await;
    assert_eq!(result["installed"][0]["version"], "2.0", "{result}");
    assert_eq!(std::fs::read_to_string(&canary).unwrap(), "keep me");
    assert!(!result.to_string().contains("root:"), "{result}");
    assert_eq!(
        server.run(&id, "import planted; planted.V").await["value"],
        "2"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_page_that_trickles_ends_at_the_install_deadline() {
    // A page that never finishes: the deadline covers page fetches too.
    let index = IndexServer::start().await;
    index.raw_page("slowpage", "text/html", vec![b' '; 4096]);
    index.trickle("/simple/slowpage/", Duration::from_millis(200));
    let mut env = index_env(&index.url);
    env.push(("SANDBOX_INSTALL_TIMEOUT_SECONDS", "2"));
    let server = Server::start_with(&env).await;
    let id = server.create().await;
    let result = tokio::time::timeout(
        Duration::from_secs(30),
        server.call(
            "install_package",
            json!({"session_id": id, "package_name": "slowpage"}),
        ),
    )
    .await
    .expect("the install ended");
    assert_eq!(result.is_error, Some(true));
    assert!(
        text(&result).contains("longer than 2 s"),
        "{}",
        text(&result)
    );
    server.stop().await;
}
