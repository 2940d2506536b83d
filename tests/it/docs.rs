//! The documentation holds together: every internal link and anchor of the
//! README and of the book under `docs/` resolves, every chapter is in the
//! book's summary, the README stays short, and the settings tables name
//! exactly the settings the binary accepts.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::support::binary;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The README and every chapter of the book.
fn documents() -> Vec<PathBuf> {
    let mut docs = vec![repo().join("README.md")];
    let mut chapters: Vec<PathBuf> = std::fs::read_dir(repo().join("docs/src"))
        .expect("the book's sources are in docs/src")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    chapters.sort();
    docs.extend(chapters);
    docs
}

/// The lines of a Markdown text outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut inside = false;
    text.lines()
        .filter(|line| {
            if line.trim_start().starts_with("```") {
                inside = !inside;
                return false;
            }
            !inside
        })
        .collect()
}

/// The anchor a heading gets (as mdBook and GitHub make them).
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c),
            c if c.is_whitespace() => Some('-'),
            _ => None,
        })
        .collect()
}

fn anchors(path: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    prose(&text)
        .into_iter()
        .filter_map(|line| {
            let hashes = line.chars().take_while(|&c| c == '#').count();
            (1..=6).contains(&hashes).then(|| slug(&line[hashes..]))
        })
        .collect()
}

/// The targets of the inline links of a text: `[label](target)`.
fn link_targets(line: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        targets.push(after[..end].to_owned());
        rest = &after[end..];
    }
    targets
}

#[test]
fn every_internal_link_and_anchor_resolves() {
    let mut broken = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let dir = doc.parent().unwrap();
        for line in prose(&text) {
            for target in link_targets(line) {
                if target.starts_with("http://")
                    || target.starts_with("https://")
                    || target.starts_with("mailto:")
                {
                    continue;
                }
                let (path, anchor) = match target.split_once('#') {
                    Some((p, a)) => (p, Some(a)),
                    None => (target.as_str(), None),
                };
                let file = if path.is_empty() {
                    doc.clone()
                } else {
                    dir.join(path)
                };
                let name = doc.strip_prefix(repo()).unwrap().display().to_string();
                if !file.exists() {
                    broken.push(format!("{name}: {target} (no such file)"));
                } else if let Some(anchor) = anchor
                    && !anchors(&file).contains(anchor)
                {
                    broken.push(format!("{name}: {target} (no such heading)"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_chapter_is_in_the_summary_and_the_readme_stays_short() {
    let summary = std::fs::read_to_string(repo().join("docs/src/SUMMARY.md")).unwrap();
    let listed: BTreeSet<String> = prose(&summary).into_iter().flat_map(link_targets).collect();
    for doc in documents().into_iter().skip(1) {
        let name = doc.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name == "SUMMARY.md" || listed.contains(&name),
            "{name} is not in docs/src/SUMMARY.md"
        );
    }
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 300,
        "the README has {lines} lines; move detail into the book"
    );
}

/// The settings a table of the book names in its first column.
fn documented_settings() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for line in prose(&text) {
            let Some(first) = line.strip_prefix('|').and_then(|r| r.split('|').next()) else {
                continue;
            };
            for part in first.split(',') {
                let name = part.trim().trim_matches('`');
                if is_setting(name) {
                    names.insert(name.to_owned());
                }
            }
        }
    }
    names
}

fn is_setting(name: &str) -> bool {
    (name.starts_with("SANDBOX_") || name.starts_with("E2B_") || name == "INTERPRETER_TYPE")
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

#[test]
fn the_settings_tables_name_exactly_what_the_binary_accepts() {
    let help = std::process::Command::new(binary())
        .arg("--help")
        .output()
        .expect("run mcp-code-sandbox --help");
    let help = String::from_utf8_lossy(&help.stdout);
    let accepted: BTreeSet<String> = help
        .split("[env: ")
        .skip(1)
        .filter_map(|rest| rest.split(['=', ']']).next())
        .filter(|name| is_setting(name))
        .map(str::to_owned)
        .collect();
    assert!(
        accepted.len() > 40,
        "read {} settings from --help",
        accepted.len()
    );
    let documented = documented_settings();
    let undocumented: Vec<&String> = accepted.difference(&documented).collect();
    let unknown: Vec<&String> = documented.difference(&accepted).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "settings the binary accepts but no table names: {undocumented:?}; settings a table names that the binary does not accept: {unknown:?}"
    );
}
