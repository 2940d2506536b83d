//! [`make_bundle`]: `mcp-code-sandbox bundle --runtime NAME --out DIR`, run
//! on a connected machine, as a sequence of steps: start an empty
//! directory, copy the runtime's verified files, prepare (compile, and for a
//! snapshot runtime pre-initialise) the runtime from that copy into the
//! bundle's own module cache, copy the wheelhouse, the binary and
//! `fetch-python.sh`, then write `bundle.toml` and `SHA256SUMS`.

use std::path::{Path, PathBuf};

use super::App;
use crate::bundle::info::{BundleInfo, INFO_FILE};
use crate::bundle::sums::{SUMS_FILE, render, sum_tree};
use crate::config::Config;
use crate::sandbox::SandboxError;
use crate::wasm::runtime::{RuntimeCatalog, RuntimeError, built_in_manifest_text, load_runtime};

/// The script that installs a runtime from a bundle (`--from DIR`).
const FETCH_SCRIPT: &str = include_str!("../../fetch-python.sh");

/// Why a bundle could not be made.
#[derive(Debug, thiserror::Error)]
pub enum MakeError {
    /// The output directory exists and is not empty.
    #[error("{0} already exists and is not empty; give --out a new or empty directory")]
    NotEmpty(PathBuf),
    /// Reading or writing a file failed.
    #[error("cannot {what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The runtime cannot be found or checked.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// A runtime known only by its files has no manifest text to copy.
    #[error("no manifest text for '{0}'")]
    NoManifestText(String),
    /// The runtime could not be prepared in the bundle's module cache
    /// (boxed: the sandbox error is large next to the others).
    #[error(transparent)]
    Prepare(Box<SandboxError>),
}

impl From<SandboxError> for MakeError {
    fn from(e: SandboxError) -> Self {
        Self::Prepare(Box::new(e))
    }
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> MakeError {
    let path = path.to_path_buf();
    move |source| MakeError::Io { what, path, source }
}

/// What was put in a bundle.
#[derive(Debug)]
pub struct Made {
    /// What `bundle.toml` says.
    pub info: BundleInfo,
    /// Files in it (`SHA256SUMS` included).
    pub files: usize,
    /// Their bytes in all.
    pub bytes: u64,
}

/// Makes a bundle of the configured default runtime in `out`, with the
/// configured wheelhouse when there is one. `progress` hears each step.
pub async fn make_bundle(
    config: Config,
    out: &Path,
    progress: &dyn Fn(&str),
) -> Result<Made, MakeError> {
    let name = config.wasm.default_runtime.clone();
    start_empty(out)?;
    progress(&format!("copying the runtime '{name}'"));
    copy_runtime(&config.wasm.runtime_dir, &name, &out.join("runtime"))?;
    progress(&format!(
        "preparing '{name}' for this machine (python-3.12: seconds; scientific: about 90 seconds)"
    ));
    prepare(&config, out, &name).await?;
    let wheelhouse = match &config.packages.wheelhouse {
        Some(from) => {
            progress(&format!("copying the wheelhouse {}", from.display()));
            copy_wheels(from, &out.join("wheelhouse"))?;
            true
        }
        None => false,
    };
    copy_programs(out)?;
    let info = BundleInfo {
        runtime: name,
        server_version: env!("CARGO_PKG_VERSION").to_owned(),
        preload: config.wasm.preload.clone(),
        wheelhouse,
    };
    write(&out.join(INFO_FILE), info.render().as_bytes())?;
    progress("hashing every file into SHA256SUMS");
    let sums = sum_tree(out).map_err(io("hash the files of", out))?;
    write(&out.join(SUMS_FILE), render(&sums).as_bytes())?;
    let bytes = sums
        .iter()
        .map(|s| std::fs::metadata(out.join(&s.path)).map_or(0, |m| m.len()))
        .sum();
    Ok(Made {
        info,
        files: sums.len() + 1,
        bytes,
    })
}

/// Creates `out`, refusing one that holds anything.
fn start_empty(out: &Path) -> Result<(), MakeError> {
    if let Ok(mut entries) = std::fs::read_dir(out)
        && entries.next().is_some()
    {
        return Err(MakeError::NotEmpty(out.to_path_buf()));
    }
    std::fs::create_dir_all(out).map_err(io("create", out))
}

/// Copies the runtime's manifest, and its module and artifacts once their
/// sha256 matched the manifest's pins.
fn copy_runtime(from: &Path, name: &str, to: &Path) -> Result<(), MakeError> {
    let catalog = RuntimeCatalog::scan(from)?;
    let manifest = catalog.get(name)?;
    let verified = load_runtime(from, manifest, name, None)?;
    let manifest_file = format!("{name}.toml");
    let text = match std::fs::read(from.join(&manifest_file)) {
        Ok(text) => text,
        Err(_) => built_in_manifest_text(name)
            .ok_or_else(|| MakeError::NoManifestText(name.to_owned()))?
            .as_bytes()
            .to_vec(),
    };
    write(&to.join(&manifest_file), &text)?;
    copy(&verified.module_path, &to.join(&manifest.module))?;
    for (artifact, path) in manifest.artifacts.iter().zip(&verified.artifact_paths) {
        copy(path, &to.join(&artifact.file))?;
    }
    Ok(())
}

/// Prepares the runtime from the bundle's own copy into the bundle's module
/// cache, as a server started with `--bundle` will look for it.
async fn prepare(config: &Config, out: &Path, name: &str) -> Result<(), MakeError> {
    let mut config = config.clone();
    config.wasm.runtime_dir = out.join("runtime");
    config.wasm.cache_dir = out.join("modules");
    config.wasm.pool_size = 0;
    let app = App::build(config)?;
    app.wasm.preload(Some(name)).await?;
    Ok(())
}

/// Copies the wheels (`*.whl`) of a wheelhouse.
fn copy_wheels(from: &Path, to: &Path) -> Result<(), MakeError> {
    std::fs::create_dir_all(to).map_err(io("create", to))?;
    for entry in std::fs::read_dir(from).map_err(io("read", from))? {
        let path = entry.map_err(io("read", from))?.path();
        let is_wheel = path.extension().is_some_and(|e| e == "whl") && path.is_file();
        if let (true, Some(file)) = (is_wheel, path.file_name()) {
            copy(&path, &to.join(file))?;
        }
    }
    Ok(())
}

/// Copies this binary to `bin/` and writes `fetch-python.sh`.
fn copy_programs(out: &Path) -> Result<(), MakeError> {
    let exe = std::env::current_exe().map_err(io("find", Path::new("this program")))?;
    copy(&exe, &out.join("bin").join("mcp-code-sandbox"))?;
    let script = out.join("fetch-python.sh");
    write(&script, FETCH_SCRIPT.as_bytes())?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))
            .map_err(io("make executable", &script))?;
    }
    Ok(())
}

fn copy(from: &Path, to: &Path) -> Result<(), MakeError> {
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir).map_err(io("create", dir))?;
    }
    std::fs::copy(from, to).map_err(io("copy", from))?;
    Ok(())
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), MakeError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io("create", dir))?;
    }
    std::fs::write(path, bytes).map_err(io("write", path))
}
