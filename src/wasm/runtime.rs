//! [`RuntimeManifest`]: what a WASI build of CPython is and how to start it,
//! and [`load_runtime`], which finds its module and checks it.
//!
//! Manifests are small TOML files. The ones in the repository's `runtime/`
//! directory are built into the binary; a manifest of the same name in the
//! runtime directory overrides it, and a new name there adds a runtime.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::{Digest, Sha256};

/// Manifests shipped with the binary: (name, TOML text).
const BUILT_IN: &[(&str, &str)] = &[(
    "python-3.12",
    include_str!("../../runtime/python-3.12.toml"),
)];

/// How the module is started.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Entry {
    /// A WASI command: `_start` runs `python` with its arguments.
    #[default]
    Command,
}

/// Description of one WASI CPython build.
#[derive(Clone, Debug, Deserialize)]
pub struct RuntimeManifest {
    /// Name users select it by, e.g. `python-3.12`.
    pub name: String,
    /// Full Python version, e.g. `3.12.0`.
    pub python_version: String,
    /// File name of the module in the runtime directory.
    pub module: String,
    /// Pinned sha256 of the module, in hex.
    pub sha256: String,
    /// How the module starts.
    #[serde(default)]
    pub entry: Entry,
    /// Guest directory where installed packages go.
    pub site_packages: String,
    /// Extra environment variables for the guest.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

impl RuntimeManifest {
    /// `major.minor` of the Python version, e.g. `3.12`.
    pub fn python_minor(&self) -> String {
        self.python_version
            .split('.')
            .take(2)
            .collect::<Vec<_>>()
            .join(".")
    }
}

/// Why a runtime could not be loaded; each message says how to fix it.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// No manifest of that name.
    #[error("unknown runtime '{name}': known runtimes are {known}")]
    Unknown {
        /// The name asked for.
        name: String,
        /// Names that exist.
        known: String,
    },
    /// The manifest is not valid.
    #[error("the runtime manifest {path} is invalid: {reason}")]
    BadManifest {
        /// Where it is.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The module file is not there.
    #[error(
        "the Python runtime is missing: {path} does not exist. Run ./fetch-python.sh{runtime_flag} in the repository to download it, or set SANDBOX_RUNTIME_DIR (--runtime-dir) to the directory that holds it"
    )]
    Missing {
        /// Expected location.
        path: PathBuf,
        /// ` --runtime NAME` for non-default runtimes.
        runtime_flag: String,
    },
    /// The module file does not match its pin.
    #[error(
        "the Python runtime {path} is corrupt or not the pinned build: its sha256 is {actual}, expected {expected}. Run ./fetch-python.sh --force{runtime_flag} to download it again"
    )]
    Corrupt {
        /// Its location.
        path: PathBuf,
        /// Its sha256.
        actual: String,
        /// The pinned sha256.
        expected: String,
        /// ` --runtime NAME` for non-default runtimes.
        runtime_flag: String,
    },
    /// The module could not be read.
    #[error("cannot read the Python runtime {path}: {source}")]
    Unreadable {
        /// Its location.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// A runtime whose module was found and verified.
#[derive(Clone, Debug)]
pub struct VerifiedRuntime {
    /// Its manifest.
    pub manifest: RuntimeManifest,
    /// The module file.
    pub module_path: PathBuf,
    /// The module's bytes.
    pub module_bytes: Vec<u8>,
}

/// Finds the manifest named `name` (runtime directory first, then built in).
pub fn find_manifest(dir: &Path, name: &str) -> Result<RuntimeManifest, RuntimeError> {
    let file = dir.join(format!("{name}.toml"));
    let (text, origin) = match std::fs::read_to_string(&file) {
        Ok(text) => (text, file.display().to_string()),
        Err(_) => match BUILT_IN.iter().find(|(n, _)| *n == name) {
            Some((_, text)) => ((*text).to_owned(), format!("built-in {name}.toml")),
            None => {
                return Err(RuntimeError::Unknown {
                    name: name.to_owned(),
                    known: known_names(dir).join(", "),
                });
            }
        },
    };
    let manifest: RuntimeManifest =
        toml::from_str(&text).map_err(|e| RuntimeError::BadManifest {
            path: origin.clone(),
            reason: e.to_string(),
        })?;
    if manifest.sha256.len() != 64 || !manifest.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(RuntimeError::BadManifest {
            path: origin,
            reason: "sha256 must be 64 hex digits".into(),
        });
    }
    Ok(manifest)
}

/// Names of all runtimes: built in and in `dir`.
pub fn known_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = BUILT_IN.iter().map(|(n, _)| (*n).to_owned()).collect();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(stem) = name.strip_suffix(".toml")
                && !names.iter().any(|n| n == stem)
            {
                names.push(stem.to_owned());
            }
        }
    }
    names.sort();
    names
}

/// Loads the runtime `name` from `dir` and checks its sha256.
pub fn load_runtime(
    dir: &Path,
    name: &str,
    default_name: &str,
) -> Result<VerifiedRuntime, RuntimeError> {
    let manifest = find_manifest(dir, name)?;
    let runtime_flag = if name == default_name {
        String::new()
    } else {
        format!(" --runtime {name}")
    };
    let module_path = dir.join(&manifest.module);
    let module_bytes = match std::fs::read(&module_path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(RuntimeError::Missing {
                path: module_path,
                runtime_flag,
            });
        }
        Err(source) => {
            return Err(RuntimeError::Unreadable {
                path: module_path,
                source,
            });
        }
    };
    let actual = hex(&Sha256::digest(&module_bytes));
    if !actual.eq_ignore_ascii_case(&manifest.sha256) {
        return Err(RuntimeError::Corrupt {
            path: module_path,
            actual,
            expected: manifest.sha256.clone(),
            runtime_flag,
        });
    }
    Ok(VerifiedRuntime {
        manifest,
        module_path,
        module_bytes,
    })
}

/// Lowercase hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_manifest_parses() {
        let tmp = tempfile::tempdir().unwrap();
        let m = find_manifest(tmp.path(), "python-3.12").unwrap();
        assert_eq!(m.python_minor(), "3.12");
        assert_eq!(m.entry, Entry::Command);
        assert!(m.site_packages.starts_with('/'));
    }

    #[test]
    fn missing_corrupt_and_unknown_runtimes_say_how_to_fix_them() {
        let tmp = tempfile::tempdir().unwrap();
        let err = load_runtime(tmp.path(), "python-3.12", "python-3.12").unwrap_err();
        assert!(matches!(err, RuntimeError::Missing { .. }));
        assert!(err.to_string().contains("./fetch-python.sh"), "{err}");

        std::fs::write(tmp.path().join("python-3.12.0.wasm"), b"not wasm").unwrap();
        let err = load_runtime(tmp.path(), "python-3.12", "python-3.12").unwrap_err();
        assert!(matches!(err, RuntimeError::Corrupt { .. }));
        assert!(err.to_string().contains("--force"), "{err}");

        let err = load_runtime(tmp.path(), "python-9", "python-3.12").unwrap_err();
        assert!(err.to_string().contains("python-3.12"), "{err}");
    }

    #[test]
    fn a_manifest_in_the_runtime_directory_adds_a_runtime() {
        let tmp = tempfile::tempdir().unwrap();
        let text = BUILT_IN[0]
            .1
            .replace("name = \"python-3.12\"", "name = \"custom\"");
        std::fs::write(tmp.path().join("custom.toml"), text).unwrap();
        assert!(known_names(tmp.path()).contains(&"custom".to_owned()));
        assert_eq!(find_manifest(tmp.path(), "custom").unwrap().name, "custom");
    }
}
