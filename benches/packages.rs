//! install_package's resolution and install of a 30-package closure from a
//! loopback index (PEP 691 pages, PEP 658 metadata files), into a fresh
//! sandbox each time: once with every newest release usable, once with the
//! two newest releases of every package needing a dependency that has only
//! compiled wheels, so the solver goes back through 60 releases. Wheels come
//! from the host's wheel cache after the first sample, as on a server that
//! has installed them before; pages and metadata are asked of the index
//! every time. And the first import of real installed packages in a fresh
//! scientific sandbox, with the bytecode the install wrote.

mod common;

use std::collections::HashMap;
use std::io::{Cursor, Write};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use criterion::{Criterion, criterion_group, criterion_main};
use mcp_code_sandbox::sandbox::manager::CreateRequest;
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

/// Packages in the closure.
const PACKAGES: usize = 30;
/// Releases of each.
const RELEASES: usize = 4;

/// What the index serves: path -> (content type, body).
type Files = Arc<HashMap<String, (&'static str, Vec<u8>)>>;

fn hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A pure wheel of `name` `version` with a one-line module.
fn wheel(name: &str, version: &str, requires: &[String]) -> (Vec<u8>, String) {
    let dist_info = format!("{name}-{version}.dist-info");
    let mut metadata = format!("Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n");
    for r in requires {
        metadata.push_str(&format!("Requires-Dist: {r}\n"));
    }
    let files = [
        (
            format!("{name}/__init__.py"),
            format!("VERSION = '{version}'\n"),
        ),
        (format!("{dist_info}/METADATA"), metadata.clone()),
        (
            format!("{dist_info}/WHEEL"),
            "Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
                .to_owned(),
        ),
    ];
    let mut record = String::new();
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    for (path, data) in &files {
        let hash = b64.encode(Sha256::digest(data.as_bytes()));
        record.push_str(&format!("{path},sha256={hash},{}\n", data.len()));
    }
    record.push_str(&format!("{dist_info}/RECORD,,\n"));
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default();
    for (path, data) in files
        .iter()
        .chain([(format!("{dist_info}/RECORD"), record)].iter())
    {
        zip.start_file(path.as_str(), options).unwrap();
        zip.write_all(data.as_bytes()).unwrap();
    }
    (zip.finish().unwrap().into_inner(), metadata)
}

/// The index: `p00` needs `p01`..`p05`, and each `pNN` the next two, so
/// installing `p00` takes all 30. With `backtrack`, each package's two
/// newest releases also need `native`, which has only a compiled wheel.
fn index_files(backtrack: bool) -> Files {
    let mut files = HashMap::new();
    let mut page = |name: &str, entries: Vec<serde_json::Value>| {
        let body = json!({"meta": {"api-version": "1.1"}, "name": name, "files": entries});
        files.insert(
            format!("/simple/{name}/"),
            (
                "application/vnd.pypi.simple.v1+json",
                serde_json::to_vec(&body).unwrap(),
            ),
        );
    };
    let mut bodies: Vec<(String, Vec<u8>, String)> = Vec::new();
    for n in 0..PACKAGES {
        let name = format!("p{n:02}");
        let mut entries = Vec::new();
        for r in 1..=RELEASES {
            let version = format!("{r}.0");
            let next: Vec<usize> = if n == 0 {
                (1..=5).collect()
            } else {
                (n + 1..=n + 2).filter(|m| *m < PACKAGES).collect()
            };
            let mut requires: Vec<String> = next.iter().map(|m| format!("p{m:02}>=1")).collect();
            if backtrack && r > RELEASES - 2 {
                requires.push("native".into());
            }
            let (bytes, metadata) = wheel(&name, &version, &requires);
            let filename = format!("{name}-{version}-py3-none-any.whl");
            entries.push(json!({
                "filename": filename,
                "url": format!("/files/{filename}"),
                "hashes": {"sha256": hex(&bytes)},
                "core-metadata": {"sha256": hex(metadata.as_bytes())},
            }));
            bodies.push((filename, bytes, metadata));
        }
        page(&name, entries);
    }
    page(
        "native",
        vec![json!({
            "filename": "native-1.0-cp312-cp312-manylinux_2_17_x86_64.whl",
            "url": "/files/native-1.0-cp312-cp312-manylinux_2_17_x86_64.whl",
            "hashes": {"sha256": hex(b"native")},
        })],
    );
    for (filename, bytes, metadata) in bodies {
        files.insert(
            format!("/files/{filename}.metadata"),
            ("text/plain", metadata.into_bytes()),
        );
        files.insert(
            format!("/files/{filename}"),
            ("application/octet-stream", bytes),
        );
    }
    Arc::new(files)
}

async fn serve(State(files): State<Files>, Path(path): Path<String>) -> Response {
    match files.get(&format!("/{path}")) {
        Some((kind, body)) => ([(header::CONTENT_TYPE, *kind)], body.clone()).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// Serves `files` on loopback; returns the simple index's URL.
async fn start_index(files: Files) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = axum::Router::new()
        .route("/{*path}", axum::routing::get(serve))
        .with_state(files);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://127.0.0.1:{port}/simple/")
}

fn closure(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut group = c.benchmark_group("install_closure_30");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(20));
    for (name, backtrack) in [("newest_fit", false), ("two_newest_unusable", true)] {
        let url = rt.block_on(start_index(index_files(backtrack)));
        let app = common::app(&rt, "packages", &["--pool-size", "0", "--index-url", &url]);
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let (sandbox, _) =
                            app.manager.create(CreateRequest::default()).await.unwrap();
                        let started = std::time::Instant::now();
                        let report = sandbox
                            .install(vec!["p00".into()], &|_| {}, CancellationToken::new())
                            .await
                            .unwrap();
                        total += started.elapsed();
                        assert_eq!(report.installed.len(), PACKAGES);
                        let expected = if backtrack { "2.0" } else { "4.0" };
                        assert!(report.installed.iter().all(|p| p.version == expected));
                        common::close(&app, sandbox).await;
                    }
                    total
                })
            })
        });
        rt.block_on(app.manager.close_all());
    }
    group.finish();
}

/// The first import of installed packages in a fresh scientific sandbox:
/// `requests` (with urllib3, idna, certifi), `click` and `humanize` from
/// the pinned real wheels (tests/fetch-notebook-wheels.sh), installed with
/// their bytecode (the first install compiles it; each later one copies it
/// from the host's cache). Only the import is timed.
fn first_import(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let wheels = common::notebook_wheels();
    let wheels = wheels.to_str().unwrap();
    let flags = [
        "--pool-size",
        "0",
        "--runtime",
        "scientific",
        "--wheelhouse",
        wheels,
        "--index-url",
        "none",
    ];
    let Some(app) = common::try_app(&rt, "packages-import", &flags) else {
        return;
    };
    let mut group = c.benchmark_group("first_import_after_install");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(20));
    group.bench_function("requests_click_humanize", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let (sandbox, _) = app.manager.create(CreateRequest::default()).await.unwrap();
                    sandbox
                        .install(
                            vec!["requests".into(), "click".into(), "humanize".into()],
                            &|_| {},
                            CancellationToken::new(),
                        )
                        .await
                        .unwrap();
                    let started = std::time::Instant::now();
                    common::run_ok(&sandbox, "import requests, click, humanize").await;
                    total += started.elapsed();
                    common::close(&app, sandbox).await;
                }
                total
            })
        })
    });
    group.finish();
    rt.block_on(app.manager.close_all());
}

criterion_group!(benches, closure, first_import);
criterion_main!(benches);
