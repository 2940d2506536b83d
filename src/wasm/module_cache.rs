//! Compiled modules cached on disk, so only the first start pays the compile.
//!
//! A cache file's name holds the module's sha256, the wasmtime version and a
//! hash of the engine's settings, so a change to any of them compiles anew.
//! Files are written to a temporary name and renamed into place, so a crash
//! never leaves half a file under a valid name.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::Instant;

use wasmtime::{Engine, Module};

/// wasmtime's version, part of every cache key.
const WASMTIME_VERSION: &str = "48.0";

/// The cache file for a module with this key (its sha256, plus what was done
/// to it) under this engine.
pub fn cache_path(cache_dir: &Path, engine: &Engine, key: &str) -> PathBuf {
    let mut hasher = DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    cache_dir.join(format!(
        "{key}-wasmtime{WASMTIME_VERSION}-{:016x}.cwasm",
        hasher.finish()
    ))
}

/// Whether the cache holds the module `key` compiled for an engine with
/// other settings (fuel metering on or off, another stack size): a start
/// that compiles it again says why.
pub fn built_for_other_settings(cache_dir: &Path, engine: &Engine, key: &str) -> bool {
    let ours = cache_path(cache_dir, engine, key);
    let prefix = format!("{key}-wasmtime{WASMTIME_VERSION}-");
    let Ok(entries) = std::fs::read_dir(cache_dir) else {
        return false;
    };
    entries.flatten().any(|entry| {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        name.starts_with(&prefix) && name.ends_with(".cwasm") && entry.path() != ours
    })
}

/// The cached compiled module for `key`, if there is a usable one.
pub fn load(engine: &Engine, cache_dir: &Path, key: &str) -> Option<Module> {
    let path = cache_path(cache_dir, engine, key);
    if !path.exists() {
        return None;
    }
    // SAFETY: the file was written by `Module::serialize` of this program
    // into the user's own cache directory; its name carries the engine's
    // compatibility hash, and wasmtime checks the header on load.
    match unsafe { Module::deserialize_file(engine, &path) } {
        Ok(module) => Some(module),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "ignoring an unusable cached module");
            None
        }
    }
}

/// Compiles `wasm` and caches the result under `key`. The compiled bytes
/// go to the cache file and the module is mapped from it, so they are held
/// in memory once, not twice.
pub fn compile_and_store(
    engine: &Engine,
    cache_dir: &Path,
    key: &str,
    wasm: &[u8],
) -> wasmtime::Result<Module> {
    let started = Instant::now();
    tracing::debug!(bytes = wasm.len(), key, "compiling a module");
    let compiled = engine.precompile_module(wasm)?;
    tracing::info!(
        seconds = started.elapsed().as_secs_f64(),
        "compiled the Python runtime"
    );
    let path = cache_path(cache_dir, engine, key);
    if let Err(e) = write_atomically(&path, &compiled) {
        tracing::warn!(path = %path.display(), error = %e, "could not cache the compiled module; the next start compiles again");
        // SAFETY: the bytes were just made by this engine's precompile_module.
        return unsafe { Module::deserialize(engine, &compiled) };
    }
    drop(compiled);
    load(engine, cache_dir, key).ok_or_else(|| {
        wasmtime::Error::msg("the module just compiled cannot be read back from the cache")
    })
}

/// Writes `bytes` under a temporary name beside `path` and renames it into
/// place, so a reader (another server sharing the cache) never sees half a
/// file.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let temp = dir.join(format!(
        ".{}.partial-{}",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    std::fs::write(&temp, bytes)?;
    std::fs::rename(&temp, path)
}
