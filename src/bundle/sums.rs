//! `SHA256SUMS`: one line per file of a bundle, `<sha256>  <path>`, paths
//! relative to the bundle with `/` separators, sorted; the format
//! `sha256sum -c` checks.

use std::path::{Path, PathBuf};

/// The manifest's file name.
pub const SUMS_FILE: &str = "SHA256SUMS";

/// One listed file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sum {
    /// Its sha256, lower-case hex.
    pub sha256: String,
    /// Its path inside the bundle, `/`-separated.
    pub path: String,
}

/// The sha256 of a file, in lower-case hex.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    crate::digest::hash_file(path).map(|(sha, _)| sha)
}

/// Every file under `dir` but the manifest itself, hashed, sorted by path.
pub fn sum_tree(dir: &Path) -> std::io::Result<Vec<Sum>> {
    let mut files = Vec::new();
    walk(dir, dir, &mut files)?;
    files.sort();
    files
        .into_iter()
        .filter(|(rel, _)| rel != SUMS_FILE)
        .map(|(rel, path)| {
            Ok(Sum {
                sha256: sha256_file(&path)?,
                path: rel,
            })
        })
        .collect()
}

/// Every entry that is not a directory (files, symbolic links, anything
/// else) under `root/sub`, as paths relative to `root`; none when `sub` is
/// not there.
pub fn entries_under(root: &Path, sub: &str) -> std::io::Result<Vec<String>> {
    let dir = root.join(sub);
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    collect_entries(root, &dir, &mut out)?;
    Ok(out)
}

fn collect_entries(root: &Path, dir: &Path, out: &mut Vec<String>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            collect_entries(root, &path, out)?;
        } else {
            out.push(relative(root, &path));
        }
    }
    Ok(())
}

fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let kind = entry.file_type()?;
        if kind.is_dir() {
            walk(root, &path, out)?;
        } else if kind.is_file() {
            out.push((relative(root, &path), path));
        }
    }
    Ok(())
}

/// The manifest's text.
pub fn render(sums: &[Sum]) -> String {
    sums.iter()
        .map(|s| format!("{}  {}\n", s.sha256, s.path))
        .collect()
}

/// A line of `SHA256SUMS` that is not `<64 hex digits>  <relative path
/// inside the bundle>`.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {number} is not '<sha256>  <path>': '{text}'")]
pub struct BadLine {
    /// Its number, from 1.
    pub number: usize,
    /// The line.
    pub text: String,
}

/// Reads the manifest's text; an error names the first line that is not
/// `<64 hex digits>  <relative path inside the bundle>`.
pub fn parse(text: &str) -> Result<Vec<Sum>, BadLine> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            let bad = || BadLine {
                number: i + 1,
                text: line.to_owned(),
            };
            let (sha256, path) = line.split_once("  ").ok_or_else(bad)?;
            let is_hex = sha256.len() == 64 && sha256.bytes().all(|b| b.is_ascii_hexdigit());
            if !is_hex || !is_inside(path) {
                return Err(bad());
            }
            Ok(Sum {
                sha256: sha256.to_ascii_lowercase(),
                path: path.to_owned(),
            })
        })
        .collect()
}

/// Whether a listed path stays inside the bundle.
fn is_inside(path: &str) -> bool {
    !path.is_empty()
        && !path.starts_with('/')
        && !path.contains('\\')
        && path
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_round_trip_and_paths_stay_inside() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("a/b")).unwrap();
        std::fs::write(tmp.path().join("a/b/c.txt"), "abc").unwrap();
        std::fs::write(tmp.path().join(SUMS_FILE), "old").unwrap();
        let sums = sum_tree(tmp.path()).unwrap();
        assert_eq!(
            render(&sums),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad  a/b/c.txt\n"
        );
        assert_eq!(parse(&render(&sums)).unwrap(), sums);
        let zero = "0".repeat(64);
        for bad in ["../x", "/etc/passwd", "a//b", "a\\b", ""] {
            let line = format!("{zero}  {bad}");
            assert_eq!(
                parse(&format!("{line}\n")),
                Err(BadLine {
                    number: 1,
                    text: line.clone()
                }),
                "{bad}"
            );
        }
        assert!(parse("abc  x\n").is_err());
    }
}
