//! install_package against pip, on a corpus of real requirements: a copy of
//! the parts of the public index that pip and this server read for them
//! (project pages and each wheel's METADATA, recorded through a proxy the
//! same day as pip's own decisions), served on loopback by range requests
//! (the public index serves no metadata files), with the scientific runtime
//! the decisions were recorded for.
//!
//! The fixture, tests/fixtures/pip-corpus.zip, holds `corpus.json` (each
//! requirement, pip's picks and this server's, and how they compare),
//! `builtins.json` (the runtime's distributions), `pages/NAME.json` and
//! `metadata/WHEEL-FILENAME`. Each wheel is rebuilt from its recorded
//! METADATA alone (no code), so installing checks the decision, not the
//! package; a wheel whose metadata was not recorded is listed but not served,
//! so a resolver that reads more than it did then fails loudly.

use std::collections::{BTreeMap, HashMap};
use std::io::{Cursor, Read, Write};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::support::index::{IndexServer, Listed};
use crate::support::{Server, scientific_cache, text};
use crate::wheels::sha256_hex;

const FIXTURE: &str = "tests/fixtures/pip-corpus.zip";

/// A row of the corpus.
#[derive(Debug, Deserialize)]
struct Row {
    requirement: String,
    /// pip's picks (name -> version); `None` when pip refused.
    pip: Option<BTreeMap<String, String>>,
    /// This server's picks when recorded; `None` when it refused.
    ours: Option<BTreeMap<String, String>>,
    /// "same", "both-refuse", "built-in", "pip-oddity", "our-bug", or
    /// "unrecorded" (the recorded pages cannot replay what this server reads
    /// now: left out, and counted).
    class: String,
    #[serde(default)]
    note: String,
}

/// A file as a recorded page lists it.
#[derive(Debug, Deserialize)]
struct PageFile {
    filename: String,
    #[serde(rename = "requires-python")]
    requires_python: Option<String>,
    yanked: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct Page {
    files: Vec<PageFile>,
}

struct Fixture {
    rows: Vec<Row>,
    builtins: HashMap<String, String>,
    pages: BTreeMap<String, Page>,
    metadata: HashMap<String, Vec<u8>>,
}

fn load() -> Fixture {
    let bytes = std::fs::read(FIXTURE).expect("the corpus fixture");
    let mut zip = zip::ZipArchive::new(Cursor::new(bytes)).unwrap();
    let mut rows = None;
    let mut builtins = None;
    let mut pages = BTreeMap::new();
    let mut metadata = HashMap::new();
    for i in 0..zip.len() {
        let mut member = zip.by_index(i).unwrap();
        if member.is_dir() {
            continue;
        }
        let name = member.name().to_owned();
        let mut data = Vec::new();
        member.read_to_end(&mut data).unwrap();
        let path = name.trim_start_matches("fixture/");
        if path == "corpus.json" {
            rows = Some(serde_json::from_slice(&data).unwrap());
        } else if path == "builtins.json" {
            builtins = Some(serde_json::from_slice(&data).unwrap());
        } else if let Some(project) = path
            .strip_prefix("pages/")
            .and_then(|p| p.strip_suffix(".json"))
        {
            pages.insert(project.to_owned(), serde_json::from_slice(&data).unwrap());
        } else if let Some(wheel) = path.strip_prefix("metadata/") {
            metadata.insert(wheel.to_owned(), data);
        }
    }
    Fixture {
        rows: rows.expect("corpus.json"),
        builtins: builtins.expect("builtins.json"),
        pages,
        metadata,
    }
}

/// A wheel holding only `metadata` (its dist-info named after `filename`).
fn wheel_of(filename: &str, metadata: &[u8]) -> Vec<u8> {
    let mut parts = filename.splitn(3, '-');
    let stem = format!("{}-{}", parts.next().unwrap(), parts.next().unwrap());
    let dist_info = format!("{stem}.dist-info");
    let wheel =
        b"Wheel-Version: 1.0\nGenerator: corpus\nRoot-Is-Purelib: true\nTag: py3-none-any\n";
    let files: [(String, &[u8]); 2] = [
        (format!("{dist_info}/METADATA"), metadata),
        (format!("{dist_info}/WHEEL"), wheel),
    ];
    let mut record = String::new();
    for (path, data) in &files {
        let hash = base64::Engine::encode(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
            <sha2::Sha256 as sha2::Digest>::digest(data),
        );
        record.push_str(&format!("{path},sha256={hash},{}\n", data.len()));
    }
    record.push_str(&format!("{dist_info}/RECORD,,\n"));
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default();
    for (path, data) in files
        .iter()
        .chain([(format!("{dist_info}/RECORD"), record.as_bytes())].iter())
    {
        zip.start_file(path.as_str(), options).unwrap();
        zip.write_all(data).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

/// Serves the fixture's pages, and a rebuilt wheel for each recorded
/// METADATA, by ranges and without metadata files.
fn publish(index: &IndexServer, fixture: &Fixture) {
    index.serve_ranges();
    for (project, page) in &fixture.pages {
        for file in &page.files {
            let yanked = file.yanked.as_ref().map(|y| match y {
                Value::String(reason) => reason.clone(),
                _ => String::new(),
            });
            let recorded = fixture.metadata.get(&file.filename);
            let bytes = match recorded {
                Some(metadata) if file.filename.ends_with(".whl") => {
                    wheel_of(&file.filename, metadata)
                }
                _ => Vec::new(),
            };
            let listed = Listed {
                filename: file.filename.clone(),
                sha256: sha256_hex(if bytes.is_empty() {
                    file.filename.as_bytes()
                } else {
                    &bytes
                }),
                requires_python: file.requires_python.clone(),
                yanked,
                metadata: None,
            };
            index.add_file(project, listed, bytes);
        }
    }
}

/// What one install picked (installed and already present), or its error.
async fn decide(
    server: &Server,
    id: &str,
    requirement: &str,
) -> Result<BTreeMap<String, String>, String> {
    let result = server
        .call(
            "install_package",
            json!({"session_id": id, "package_name": requirement}),
        )
        .await;
    if result.is_error == Some(true) {
        return Err(text(&result));
    }
    let report = result.structured_content.unwrap_or_default();
    let mut picks = BTreeMap::new();
    for list in ["installed", "already_present"] {
        for p in report[list].as_array().into_iter().flatten() {
            picks.insert(
                p["name"].as_str().unwrap().to_owned(),
                p["version"].as_str().unwrap().to_owned(),
            );
        }
    }
    Ok(picks)
}

/// Whether `ours` differs from `pip` only where a built-in decides: every
/// package on which they differ is a built-in, or is needed by one side
/// only while some built-in kept a version other than pip's.
fn only_built_ins_differ(
    ours: &BTreeMap<String, String>,
    pip: &BTreeMap<String, String>,
    builtins: &HashMap<String, String>,
) -> bool {
    let built_in_differs = ours
        .iter()
        .any(|(n, v)| builtins.get(n) == Some(v) && pip.get(n).is_some_and(|p| p != v));
    let names: std::collections::BTreeSet<&String> = ours.keys().chain(pip.keys()).collect();
    names.into_iter().all(|n| match (ours.get(n), pip.get(n)) {
        (Some(a), Some(b)) if a == b => true,
        (Some(a), Some(_)) => builtins.get(n) == Some(a),
        (Some(a), None) => builtins.get(n) == Some(a) || built_in_differs,
        (None, Some(_)) => built_in_differs,
        (None, None) => true,
    })
}

#[tokio::test]
async fn real_requirements_resolve_as_pip_decides_except_where_a_built_in_decides() {
    let fixture = load();
    let index = IndexServer::start().await;
    publish(&index, &fixture);
    scientific_cache();
    let server = Server::start_with(&[
        ("SANDBOX_INDEX_URL", index.url.as_str()),
        ("PIP_CONFIG_FILE", "/dev/null"),
        ("SANDBOX_POOL_SIZE", "0"),
        ("SANDBOX_RUNTIME", "scientific"),
    ])
    .await;
    let mut wrong = Vec::new();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for row in &fixture.rows {
        if row.class == "unrecorded" {
            eprintln!("left out: {} ({})", row.requirement, row.note);
            *counts.entry("unrecorded").or_default() += 1;
            continue;
        }
        let id = server.create().await;
        let decided = decide(&server, &id, &row.requirement).await;
        server.ok("close_sandbox", json!({"session_id": id})).await;
        *counts.entry(row.class.as_str()).or_default() += 1;
        let agrees = match (row.class.as_str(), &decided, &row.pip) {
            ("same", Ok(ours), Some(pip)) => ours == pip,
            ("both-refuse", Err(_), None) => true,
            // Where a built-in makes newer releases possible than pip can use
            // (langchain-core with the built-in pyyaml), the recorded answer.
            ("built-in", Ok(ours), Some(pip)) => {
                only_built_ins_differ(ours, pip, &fixture.builtins)
                    || Some(ours) == row.ours.as_ref()
            }
            // pip refuses for want of a compiled package the runtime has built
            // in: no pip answer to compare, so the recorded one.
            ("built-in", Ok(ours), None) => Some(ours) == row.ours.as_ref(),
            ("built-in", Err(_), _) => row.ours.is_none(),
            _ => false,
        };
        if !agrees {
            wrong.push(format!(
                "{} ({}; {}): ours {decided:?}, pip {:?}",
                row.requirement, row.class, row.note, row.pip
            ));
        }
    }
    server.stop().await;
    eprintln!("corpus of {} requirements: {counts:?}", fixture.rows.len());
    assert!(
        wrong.is_empty(),
        "{} disagree:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
