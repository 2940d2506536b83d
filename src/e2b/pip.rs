//! `install_package` on E2B: the cell that runs pip inside the sandbox's own
//! interpreter, and reading what pip installed from its log.
//!
//! Requirements are checked first, by the same parser local installs use
//! (`packages::requirement`: PEP 508, printable ASCII, bounded length and
//! nesting, at most 64 at once, no options, URLs or paths, so nothing that pip
//! would read as an option gets through), and passed to pip as a list of
//! Python string literals, never as shell text.

use super::pip_error::PipError;
use crate::packages::PackageError;
use crate::packages::requirement::parse_requirements;
use crate::sandbox::{InstalledPackage, PackageSource, SandboxError};

/// Most requirements installed at once.
const MAX_REQUIREMENTS: usize = 64;

/// Checks the requirements and returns the cell that installs them; the
/// cell's value is pip's exit status, its output is pip's log.
pub(crate) fn install_cell(requirements: &[String]) -> Result<String, SandboxError> {
    parse_requirements(requirements, MAX_REQUIREMENTS).map_err(PackageError::from)?;
    // A JSON array of strings is also a Python list literal of str.
    let list = serde_json::to_string(requirements).map_err(PipError::Encode)?;
    Ok(format!(
        r#"def _mcp_pip_install(requirements):
    import importlib, subprocess, sys
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--disable-pip-version-check",
         "--no-input", "--progress-bar", "off", *requirements],
        capture_output=True, text=True)
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    importlib.invalidate_caches()
    return done.returncode
globals().pop("_mcp_pip_install")({list})
"#
    ))
}

/// What pip's log says: packages it installed ("Successfully installed a-1.0
/// b-2.0") and requirements already satisfied ("Requirement already
/// satisfied: a in /path (1.0)").
pub(crate) fn parse_log(log: &str) -> (Vec<InstalledPackage>, Vec<InstalledPackage>) {
    let mut installed = Vec::new();
    let mut present = Vec::new();
    for line in log.lines() {
        let line = line.trim();
        if let Some(list) = line.strip_prefix("Successfully installed ") {
            for item in list.split_whitespace() {
                if let Some((name, version)) = item.rsplit_once('-') {
                    installed.push(InstalledPackage {
                        name: normalize(name),
                        version: version.to_owned(),
                        source: Some(PackageSource::Remote),
                        replaces_built_in: None,
                    });
                }
            }
        } else if let Some(rest) = line.strip_prefix("Requirement already satisfied: ") {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
                .collect();
            let version = rest
                .rsplit_once('(')
                .and_then(|(_, v)| v.strip_suffix(')'))
                .unwrap_or_default();
            if !name.is_empty()
                && !present
                    .iter()
                    .any(|p: &InstalledPackage| p.name == normalize(&name))
            {
                present.push(InstalledPackage {
                    name: normalize(&name),
                    version: version.to_owned(),
                    source: None,
                    replaces_built_in: None,
                });
            }
        }
    }
    (installed, present)
}

/// A project name normalized as PEP 503 says: lower case, runs of `-`, `_`
/// and `.` as one `-`.
fn normalize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_and_garbage_are_refused_before_reaching_pip() {
        let long = "a".repeat(1025);
        for bad in [
            "--index-url=http://evil",
            "-e .",
            "a b",
            "x; rm -rf /",
            "",
            "x\"]); import os #",
            "a\0b",
            long.as_str(),
            "a_~",
            "a[x_]",
            "https://files.test/a-1.0-py3-none-any.whl",
        ] {
            assert!(install_cell(&[bad.to_owned()]).is_err(), "{bad}");
        }
        assert!(install_cell(&vec!["attrs".to_owned(); 65]).is_err());
        let cell = install_cell(&["a\u{2028}".to_owned()]);
        assert!(cell.is_err(), "only what PEP 508 reads reaches the cell");
        let cell = install_cell(&["attrs==23.2.0".into(), "requests[socks]".into()]).unwrap();
        assert!(
            cell.contains(r#"(["attrs==23.2.0","requests[socks]"])"#),
            "{cell}"
        );
    }

    #[test]
    fn pip_logs_are_read() {
        let log = "Collecting cowsay\n  Downloading cowsay-6.1-py3-none-any.whl (25 kB)\nRequirement already satisfied: six in /usr/local/lib/python3.13/site-packages (1.16.0)\nRequirement already satisfied: Python_Dateutil>=2.8 in /usr/local/lib (2.9.0.post0)\nInstalling collected packages: cowsay\nSuccessfully installed cowsay-6.1 zope.interface-7.0\n";
        let (installed, present) = parse_log(log);
        let names: Vec<_> = installed
            .iter()
            .map(|p| (p.name.as_str(), p.version.as_str()))
            .collect();
        assert_eq!(names, [("cowsay", "6.1"), ("zope-interface", "7.0")]);
        assert_eq!(installed[0].source, Some(PackageSource::Remote));
        let names: Vec<_> = present
            .iter()
            .map(|p| (p.name.as_str(), p.version.as_str()))
            .collect();
        assert_eq!(
            names,
            [("six", "1.16.0"), ("python-dateutil", "2.9.0.post0")]
        );
    }
}
