//! Real pure-Python wheels (requests, httpx, aiohttp, black, nltk... and their
//! dependencies) for the notebook tests, pinned with their sha256 in
//! `tests/fixtures/notebook-wheels.txt`. They are downloaded once by
//! `tests/fetch-notebook-wheels.sh` with the machine's own pip (its index and
//! proxy settings; nothing is named here) into `target/tmp/notebook-wheels`,
//! every file checked against its pinned hash, and then served from a
//! loopback index like the wheels the tests build.

use std::path::{Path, PathBuf};
use std::sync::Once;

use crate::support::index::IndexServer;
use crate::wheels::sha256_hex;

/// The pinned list.
fn pins() -> Vec<(String, String)> {
    let list = include_str!("../fixtures/notebook-wheels.txt");
    list.lines()
        .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
        .map(|line| {
            let (requirement, hash) = line.split_once(" --hash=sha256:").expect("a pinned line");
            (requirement.to_owned(), hash.trim().to_owned())
        })
        .collect()
}

/// The directory holding every pinned wheel, downloading what is missing.
pub fn dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("notebook-wheels");
    static FETCH: Once = Once::new();
    FETCH.call_once(|| {
        if !complete(&dir) {
            download(&dir);
        }
        assert!(
            complete(&dir),
            "the pinned wheels in {} do not match tests/fixtures/notebook-wheels.txt",
            dir.display()
        );
    });
    dir
}

/// Whether every pinned wheel is in `dir` with its pinned hash.
fn complete(dir: &Path) -> bool {
    let hashes: Vec<String> = wheels_in(dir)
        .iter()
        .filter_map(|p| std::fs::read(p).ok())
        .map(|bytes| sha256_hex(&bytes))
        .collect();
    pins().iter().all(|(_, hash)| hashes.contains(hash))
}

/// Downloads the pinned wheels with tests/fetch-notebook-wheels.sh (the
/// machine's pip, which checks each against its hash).
fn download(dir: &Path) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fetch-notebook-wheels.sh");
    let status = std::process::Command::new("sh")
        .arg(&script)
        .arg(dir)
        .status()
        .expect("run tests/fetch-notebook-wheels.sh");
    assert!(
        status.success(),
        "could not download the pinned wheels of tests/fixtures/notebook-wheels.txt with pip"
    );
}

fn wheels_in(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "whl"))
        .collect()
}

/// A loopback index serving every pinned wheel.
pub async fn index() -> IndexServer {
    let index = IndexServer::start().await;
    for path in wheels_in(&dir()) {
        let filename = path.file_name().unwrap().to_string_lossy().into_owned();
        let project = filename.split('-').next().unwrap().to_owned();
        index.add_wheel_file(&project, &filename, std::fs::read(&path).unwrap());
    }
    index
}
