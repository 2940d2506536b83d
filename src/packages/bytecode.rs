//! Bytecode for installed wheels, written at install as pip writes it, so
//! the first import of an installed package reads compiled code instead of
//! compiling every module in the sandbox.
//!
//! - Compiled once per wheel and runtime by the backend's [`Compiler`] (for
//!   the WASI backend, an interpreter of the sandbox's runtime that no guest
//!   code has touched), from the sources of the verified wheel itself, never
//!   from what a sandbox holds: nothing a guest writes reaches the cache or
//!   another sandbox.
//! - Kept on the host by the wheel's sha256 and the runtime
//!   ([`BytecodeCache`], `<cache>/bytecode/` beside `<cache>/wheels/`),
//!   bounded on disk like the wheel cache, so later installs of the wheel only copy it.
//! - Timestamp-checked `.pyc` files, as CPython writes them: every installed
//!   `.py` gets the same modification time ([`SOURCE_MTIME_SECONDS`]), so bytecode
//!   compiled once matches the sources of every install of that wheel. A
//!   source edited in the sandbox no longer matches, and CPython compiles it
//!   again, as it would anywhere.
//! - Optional: a wheel whose bytecode cannot be had (a source that does not
//!   compile, a compile that fails or runs out of time, no room left in the
//!   sandbox's quota) is installed without it, and imports as before.

use std::collections::HashSet;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use super::cache::{keep_within, partial_in};
use super::project_file::sha256_hex;
use super::unpack::member_components;
use crate::digest::hash_reader;

/// The modification time of every installed Python source, in seconds
/// since the epoch (2000-01-01 UTC): what each `.pyc` written for it records.
pub const SOURCE_MTIME_SECONDS: u64 = 946_684_800;

/// [`SOURCE_MTIME_SECONDS`] as a time.
pub fn source_mtime() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(SOURCE_MTIME_SECONDS)
}

/// Most source bytes one install compiles; the wheels past it are installed
/// without bytecode.
pub const MAX_SOURCE_BYTES: u64 = 64 << 20;

/// Most bytes of one wheel's cached bytecode that are read back.
const MAX_CACHED_BYTES: u64 = 256 << 20;

/// One Python source of a wheel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PythonSource {
    /// Its path relative to site-packages, `/`-separated (`pkg/mod.py`).
    pub path: String,
    /// Its bytes.
    pub text: Vec<u8>,
}

/// One compiled module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pyc {
    /// Its path relative to site-packages (`pkg/__pycache__/mod.cpython-315.pyc`).
    pub path: String,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

impl Pyc {
    /// The source this bytecode belongs to (`pkg/mod.py`), when its path has
    /// the form CPython gives it.
    pub fn source_path(&self) -> Option<String> {
        let (components, is_dir) = member_components(&self.path).ok()?;
        let [dirs @ .., cache_dir, name] = components.as_slice() else {
            return None;
        };
        if is_dir || *cache_dir != "__pycache__" || !name.ends_with(".pyc") {
            return None;
        }
        let (stem, _) = name.split_once('.')?;
        let mut source: Vec<&str> = dirs.to_vec();
        let file = format!("{stem}.py");
        source.push(&file);
        Some(source.join("/"))
    }
}

/// Compiles wheels' Python sources into bytecode for one runtime.
#[async_trait]
pub trait Compiler: Send + Sync + std::fmt::Debug {
    /// Names the runtime's bytecode (its name and build): the cache's key
    /// beside the wheel's hash.
    fn runtime_key(&self) -> String;

    /// Compiles each wheel's sources (one list per wheel) within `time`,
    /// answering one list of [`Pyc`]s per wheel, in order (a source that
    /// does not compile has none). Errors say why nothing was compiled.
    async fn compile(
        &self,
        wheels: Vec<Vec<PythonSource>>,
        time: Duration,
        cancel: &CancellationToken,
    ) -> Result<Vec<Vec<Pyc>>, String>;
}

/// Bytecode kept on the host, one file per wheel and runtime
/// (`<sha256>-<runtime>.pycs`, a zip archive), written under a temporary
/// name and renamed into place whole.
#[derive(Clone, Debug)]
pub struct BytecodeCache {
    dir: PathBuf,
    max_bytes: u64,
}

impl BytecodeCache {
    /// A cache in `dir`, kept to about `max_bytes` on disk.
    pub fn new(dir: PathBuf, max_bytes: u64) -> Self {
        Self { dir, max_bytes }
    }

    /// Where a wheel's bytecode for a runtime is kept; `None` for a hash
    /// that is not a sha256 digest.
    fn path_for(&self, wheel_sha256: &str, runtime_key: &str) -> Option<PathBuf> {
        let wheel = sha256_hex(wheel_sha256)?;
        let runtime: String = Sha256::digest(runtime_key.as_bytes())[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Some(self.dir.join(format!("{wheel}-{runtime}.pycs")))
    }

    /// A wheel's bytecode for a runtime, when the cache has it whole.
    pub fn get(&self, wheel_sha256: &str, runtime_key: &str) -> Option<Vec<Pyc>> {
        let path = self.path_for(wheel_sha256, runtime_key)?;
        let file = File::open(&path).ok()?;
        match read_archive(&file) {
            Ok(pycs) => {
                let _ = file.set_modified(SystemTime::now());
                Some(pycs)
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cached bytecode is unreadable; compiling again");
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Keeps a wheel's bytecode for a runtime, then trims the cache.
    pub fn put(&self, wheel_sha256: &str, runtime_key: &str, pycs: &[Pyc]) -> std::io::Result<()> {
        let path = self.path_for(wheel_sha256, runtime_key).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a sha256 digest")
        })?;
        let partial = partial_in(&self.dir)?;
        write_archive(partial.file(), pycs)?;
        partial.persist(&path)?;
        keep_within(&self.dir, self.max_bytes, |name| name.ends_with(".pycs"));
        Ok(())
    }
}

/// Writes `pycs` as a zip archive (stored, each member checked by its CRC
/// when read back).
fn write_archive(file: &File, pycs: &[Pyc]) -> std::io::Result<()> {
    let mut zip = zip::ZipWriter::new(file);
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .large_file(false);
    for pyc in pycs {
        zip.start_file(pyc.path.as_str(), options)
            .map_err(std::io::Error::other)?;
        zip.write_all(&pyc.bytes)?;
    }
    zip.finish().map_err(std::io::Error::other)?;
    Ok(())
}

/// Reads back what [`write_archive`] wrote, at most [`MAX_CACHED_BYTES`].
fn read_archive(mut file: &File) -> Result<Vec<Pyc>, String> {
    file.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
    let mut archive = zip::ZipArchive::new(file).map_err(|e| e.to_string())?;
    let mut pycs = Vec::with_capacity(archive.len());
    let mut total: u64 = 0;
    for i in 0..archive.len() {
        let member = archive.by_index(i).map_err(|e| e.to_string())?;
        let path = member.name().to_owned();
        let mut bytes = Vec::new();
        member
            .take(MAX_CACHED_BYTES - total + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| e.to_string())?;
        total += bytes.len() as u64;
        if total > MAX_CACHED_BYTES {
            return Err("it holds more than the most read back".into());
        }
        pycs.push(Pyc { path, bytes });
    }
    Ok(pycs)
}

/// The bytecode of each wheel, from the cache or compiled now in one call
/// (`None` for a wheel that has none): `read_sources` reads a wheel's
/// sources (`None` when they are too many to compile). Never fails: a
/// wheel without bytecode installs without it.
pub async fn for_wheels(
    wheels: &[&File],
    sha256s: &[Option<String>],
    compiler: &dyn Compiler,
    cache: &BytecodeCache,
    time: Duration,
    cancel: &CancellationToken,
    mut read_sources: impl FnMut(&File, u64) -> Option<Vec<PythonSource>>,
) -> Vec<Option<Vec<Pyc>>> {
    let key = compiler.runtime_key();
    let hashes: Vec<Option<String>> = wheels
        .iter()
        .zip(sha256s)
        .map(|(file, known)| known.clone().or_else(|| hash_file(file)))
        .collect();
    let mut found: Vec<Option<Vec<Pyc>>> = hashes
        .iter()
        .map(|sha| sha.as_deref().and_then(|sha| cache.get(sha, &key)))
        .collect();
    let mut to_compile = Vec::new();
    let mut sources = Vec::new();
    let mut budget = MAX_SOURCE_BYTES;
    for (i, file) in wheels.iter().enumerate() {
        if found[i].is_some() {
            continue;
        }
        let Some(read) = read_sources(file, budget) else {
            continue;
        };
        budget -= read.iter().map(|s| s.text.len() as u64).sum::<u64>();
        if read.is_empty() {
            found[i] = Some(Vec::new());
            continue;
        }
        to_compile.push(i);
        sources.push(read);
    }
    if to_compile.is_empty() {
        return found;
    }
    let started = std::time::Instant::now();
    let modules: usize = sources.iter().map(Vec::len).sum();
    match compiler.compile(sources, time, cancel).await {
        Ok(compiled) => {
            tracing::info!(
                modules,
                pycs = compiled.iter().map(Vec::len).sum::<usize>(),
                seconds = started.elapsed().as_secs_f64(),
                "compiled the bytecode of newly fetched wheels"
            );
            for (i, pycs) in to_compile.into_iter().zip(compiled) {
                if let Some(sha) = &hashes[i]
                    && let Err(e) = cache.put(sha, &key, &pycs)
                {
                    tracing::warn!(error = %e, "could not keep compiled bytecode");
                }
                found[i] = Some(pycs);
            }
        }
        Err(why) => tracing::warn!(%why, "installing without bytecode"),
    }
    found
}

/// A file's sha256, read from its start (the file is left at its start).
fn hash_file(mut file: &File) -> Option<String> {
    file.seek(SeekFrom::Start(0)).ok()?;
    let (sha, _) = hash_reader(&mut file).ok()?;
    file.seek(SeekFrom::Start(0)).ok()?;
    Some(sha)
}

/// The `.pyc` files among `pycs` whose sources were installed (paths in
/// `installed`), each once.
pub fn matching<'p>(pycs: &'p [Pyc], installed: &HashSet<&str>) -> Vec<&'p Pyc> {
    let mut seen = HashSet::new();
    pycs.iter()
        .filter(|pyc| {
            pyc.source_path()
                .is_some_and(|source| installed.contains(source.as_str()))
                && seen.insert(pyc.path.as_str())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pyc(path: &str) -> Pyc {
        Pyc {
            path: path.into(),
            bytes: path.as_bytes().to_vec(),
        }
    }

    #[test]
    fn a_pyc_names_its_source() {
        let cases = [
            ("pkg/__pycache__/mod.cpython-315.pyc", Some("pkg/mod.py")),
            ("__pycache__/six.cpython-312.pyc", Some("six.py")),
            (
                "a/b/__pycache__/__init__.cpython-315.opt-1.pyc",
                Some("a/b/__init__.py"),
            ),
            ("pkg/mod.cpython-315.pyc", None),
            ("pkg/__pycache__/mod.py", None),
            ("../__pycache__/x.cpython-315.pyc", None),
            ("/abs/__pycache__/x.cpython-315.pyc", None),
        ];
        for (path, source) in cases {
            assert_eq!(pyc(path).source_path().as_deref(), source, "{path}");
        }
    }

    #[test]
    fn only_pycs_of_installed_sources_are_written() {
        let pycs = [
            pyc("pkg/__pycache__/mod.cpython-315.pyc"),
            pyc("pkg/__pycache__/gone.cpython-315.pyc"),
            pyc("pkg/__pycache__/mod.cpython-315.pyc"),
            pyc("../__pycache__/mod.cpython-315.pyc"),
        ];
        let installed: HashSet<&str> = ["pkg/mod.py", "pkg/other.py"].into();
        let kept: Vec<&str> = matching(&pycs, &installed)
            .iter()
            .map(|p| p.path.as_str())
            .collect();
        assert_eq!(kept, ["pkg/__pycache__/mod.cpython-315.pyc"]);
    }

    #[test]
    fn the_cache_keeps_bytecode_by_wheel_and_runtime() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = BytecodeCache::new(tmp.path().join("bytecode"), u64::MAX);
        let sha = "ab".repeat(32);
        let pycs = vec![
            pyc("pkg/__pycache__/mod.cpython-315.pyc"),
            pyc("__pycache__/top.cpython-315.pyc"),
        ];
        assert!(cache.get(&sha, "scientific").is_none());
        cache.put(&sha, "scientific", &pycs).unwrap();
        assert_eq!(cache.get(&sha, "scientific"), Some(pycs));
        assert!(
            cache.get(&sha, "python-3.12").is_none(),
            "another runtime compiles its own"
        );
        assert!(cache.get("../../etc/passwd", "scientific").is_none());
        assert!(cache.put("nothex", "scientific", &[]).is_err());
        let files: Vec<_> = std::fs::read_dir(tmp.path().join("bytecode"))
            .unwrap()
            .collect();
        assert_eq!(files.len(), 1, "no partial file is left");
        let path = files[0].as_ref().unwrap().path();
        std::fs::write(&path, b"damaged").unwrap();
        assert!(
            cache.get(&sha, "scientific").is_none(),
            "a damaged file is dropped"
        );
        assert!(!path.exists());
    }
}
