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
//!   `.py` of a wheel gets a modification time drawn from the wheel's hash
//!   ([`source_time`]), so bytecode compiled once matches the sources of
//!   every install of that wheel and no other's. A source edited in the
//!   sandbox no longer matches, and CPython compiles it again, as it would
//!   anywhere. Bytecode a wheel ships in `__pycache__` for a source it
//!   installs is not installed (see `place.rs`): what is imported is the
//!   source, or the bytecode compiled here from it.
//! - Optional: a wheel whose bytecode cannot be had (a source that does not
//!   compile, a compile that fails or runs out of time, no room left in the
//!   sandbox's quota) is installed without it, and imports as before.

use std::collections::HashSet;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use super::cache::{keep_within, partial_in};
use super::project_file::sha256_hex;
pub use super::unpack::PythonSource;
use super::unpack::member_components;
use crate::digest::hash_reader;

/// The earliest time given to installed Python sources (2000-01-01 UTC,
/// in seconds since the epoch).
const EARLIEST_SOURCE_TIME: u64 = 946_684_800;

/// The modification time, in seconds since the epoch, that every Python
/// source of the wheel with this sha256 gets when installed, and that each
/// `.pyc` compiled for it records: the same for every install of that
/// wheel, and (but for one chance in 2^28) different from any other
/// wheel's, so bytecode another package left on the same path never
/// passes for this one's. Between 2000 and 2008, so an edit made in the
/// sandbox always gets a later one.
pub fn source_time(wheel_sha256: &str) -> u64 {
    let spread = wheel_sha256
        .get(..7)
        .and_then(|digits| u64::from_str_radix(digits, 16).ok())
        .unwrap_or(0);
    EARLIEST_SOURCE_TIME + spread
}

/// [`source_time`] as a time.
pub fn as_system_time(seconds: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(seconds)
}

/// Most source bytes one install compiles; the wheels past it are installed
/// without bytecode.
pub const MAX_SOURCE_BYTES: u64 = 32 << 20;

/// Most bytes of one wheel's cached bytecode that are read back.
const MAX_CACHED_BYTES: u64 = 256 << 20;

/// One compiled module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pyc {
    /// Its path relative to site-packages (`pkg/__pycache__/mod.cpython-315.pyc`).
    pub path: String,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

impl Pyc {
    /// The source this bytecode belongs to (see [`source_of`]).
    pub fn source_path(&self) -> Option<String> {
        source_of(&self.path)
    }
}

/// The source (`pkg/mod.py`) a bytecode path belongs to, when the path has
/// the form CPython gives it (`pkg/__pycache__/mod.cpython-315.pyc`).
pub fn source_of(pyc_path: &str) -> Option<String> {
    let (components, is_dir) = member_components(pyc_path).ok()?;
    let [dirs @ .., cache_dir, name] = components.as_slice() else {
        return None;
    };
    if is_dir || *cache_dir != "__pycache__" || !name.ends_with(".pyc") {
        return None;
    }
    // `{stem}.{tag}[.opt-N].pyc`; the tag (`cpython-315`) has no dot.
    let mut rest = name.strip_suffix(".pyc")?;
    if let Some((before, opt)) = rest.rsplit_once('.')
        && opt.starts_with("opt-")
    {
        rest = before;
    }
    let (stem, _tag) = rest.rsplit_once('.')?;
    let mut source: Vec<&str> = dirs.to_vec();
    let file = format!("{stem}.py");
    source.push(&file);
    Some(source.join("/"))
}

/// One wheel's sources, to be compiled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WheelSources {
    /// The modification time its sources get ([`source_time`]), which
    /// each `.pyc` records.
    pub time: u64,
    /// Its Python sources.
    pub sources: Vec<PythonSource>,
}

impl WheelSources {
    /// Bytes of source.
    pub fn bytes(&self) -> u64 {
        self.sources.iter().map(|s| s.text.len() as u64).sum()
    }
}

/// Compiles wheels' Python sources into bytecode for one runtime.
#[async_trait]
pub trait Compiler: Send + Sync + std::fmt::Debug {
    /// Names the runtime's bytecode (its name and build): the cache's key
    /// beside the wheel's hash.
    fn runtime_key(&self) -> String;

    /// Compiles each wheel's sources within `within`, answering for each
    /// wheel, in order, its [`Pyc`]s (a source that does not compile has
    /// none) or why it has none.
    async fn compile(
        &self,
        wheels: Vec<WheelSources>,
        within: Duration,
        cancel: &CancellationToken,
    ) -> Vec<Result<Vec<Pyc>, CompileFailure>>;
}

/// Why a wheel has no bytecode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileFailure {
    /// What went wrong.
    pub why: String,
    /// Whether it was this wheel's own compile that failed (rather than one
    /// it shared with others): only then is it not tried again.
    pub alone: bool,
}

/// Bytecode kept on the host, one file per wheel and runtime
/// (`<sha256>-<runtime>.pycs`, a zip archive), written under a temporary
/// name and renamed into place whole.
/// Wheels whose compile failed are remembered (for the server's life), so
/// a wheel built to be costly to compile costs that once.
#[derive(Clone, Debug)]
pub struct BytecodeCache {
    dir: PathBuf,
    max_bytes: u64,
    failed: Arc<Mutex<HashSet<PathBuf>>>,
}

impl BytecodeCache {
    /// A cache in `dir`, kept to about `max_bytes` on disk.
    pub fn new(dir: PathBuf, max_bytes: u64) -> Self {
        Self {
            dir,
            max_bytes,
            failed: Arc::default(),
        }
    }

    /// Whether compiling this wheel for this runtime failed before.
    fn failed_before(&self, wheel_sha256: &str, runtime_key: &str) -> bool {
        self.path_for(wheel_sha256, runtime_key)
            .is_some_and(|path| self.failed.lock().unwrap().contains(&path))
    }

    /// Remembers that compiling this wheel for this runtime failed.
    fn remember_failure(&self, wheel_sha256: &str, runtime_key: &str) {
        if let Some(path) = self.path_for(wheel_sha256, runtime_key) {
            self.failed.lock().unwrap().insert(path);
        }
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

/// What one fetched wheel gets for its Python sources.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WheelBytecode {
    /// The modification time its sources get ([`source_time`]); `None`
    /// when the wheel's hash could not be had (they keep the install's).
    pub source_time: Option<u64>,
    /// Its modules' bytecode (empty when it has none).
    pub pycs: Vec<Pyc>,
}

/// The bytecode of each wheel, from the cache or compiled now (all in one
/// call): `read_sources` reads a wheel's sources (`None` when they come to
/// more than the bytes it is given). Never fails: a wheel without bytecode
/// installs without it.
pub async fn for_wheels(
    wheels: &[(&File, Option<String>)],
    compiler: &dyn Compiler,
    cache: &BytecodeCache,
    within: Duration,
    cancel: &CancellationToken,
    mut read_sources: impl FnMut(&File, u64) -> Option<Vec<PythonSource>>,
) -> Vec<WheelBytecode> {
    let key = compiler.runtime_key();
    let hashes: Vec<Option<String>> = wheels
        .iter()
        .map(|(file, known)| known.clone().or_else(|| hash_file(file)))
        .collect();
    let mut found: Vec<WheelBytecode> = hashes
        .iter()
        .map(|sha| WheelBytecode {
            source_time: sha.as_deref().map(source_time),
            pycs: Vec::new(),
        })
        .collect();
    let mut to_compile = Vec::new();
    let mut sources = Vec::new();
    let mut budget = MAX_SOURCE_BYTES;
    for (i, (file, _)) in wheels.iter().enumerate() {
        let Some(sha) = hashes[i].as_deref() else {
            continue;
        };
        if let Some(pycs) = cache.get(sha, &key)
            && records_time(&pycs, source_time(sha))
        {
            found[i].pycs = pycs;
            continue;
        }
        if cache.failed_before(sha, &key) {
            continue;
        }
        let Some(read) = read_sources(file, budget) else {
            continue;
        };
        let wheel = WheelSources {
            time: source_time(sha),
            sources: read,
        };
        budget -= wheel.bytes();
        if !wheel.sources.is_empty() {
            to_compile.push(i);
            sources.push(wheel);
        }
    }
    if to_compile.is_empty() {
        return found;
    }
    let started = std::time::Instant::now();
    let modules: usize = sources.iter().map(|w| w.sources.len()).sum();
    let compiled = compiler.compile(sources, within, cancel).await;
    tracing::info!(
        modules,
        seconds = started.elapsed().as_secs_f64(),
        "compiled the bytecode of newly fetched wheels"
    );
    for (i, result) in to_compile.into_iter().zip(compiled) {
        let sha = hashes[i].as_deref().unwrap_or_default();
        match result {
            Ok(pycs) => {
                if let Err(e) = cache.put(sha, &key, &pycs) {
                    tracing::warn!(error = %e, "could not keep compiled bytecode");
                }
                found[i].pycs = pycs;
            }
            Err(failure) => {
                tracing::warn!(why = %failure.why, "installing a wheel without bytecode");
                if failure.alone && !cancel.is_cancelled() {
                    cache.remember_failure(sha, &key);
                }
            }
        }
    }
    found
}

/// Whether every `.pyc` is timestamp-checked against `time` (its header:
/// magic, flags 0, the source's time, its size), as those compiled for a
/// wheel are; bytecode kept by an older server that wrote other times is
/// compiled again.
fn records_time(pycs: &[Pyc], time: u64) -> bool {
    let time = (time as u32).to_le_bytes();
    pycs.iter()
        .all(|pyc| pyc.bytes.len() >= 16 && pyc.bytes[4..8] == [0; 4] && pyc.bytes[8..12] == time)
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
            ("pkg/__pycache__/x.y.cpython-315.pyc", Some("pkg/x.y.py")),
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

    #[test]
    fn each_wheel_gives_its_sources_a_time_of_its_own() {
        let a = source_time(&"0".repeat(64));
        let b = source_time(&format!("fffffff{}", "0".repeat(57)));
        let c = source_time(&format!("1234567{}", "a".repeat(57)));
        assert_eq!(a, 946_684_800);
        assert_eq!(b, 946_684_800 + 0x0fff_ffff);
        assert!(a < c && c < b);
        assert!(b < u64::from(u32::MAX), "fits the pyc header");
        assert_eq!(
            c,
            source_time(&format!("1234567{}", "b".repeat(57))),
            "set by the hash"
        );
    }

    /// A compiler that fails for wheels whose first source says so, and
    /// counts its calls.
    #[derive(Debug, Default)]
    struct Fake {
        calls: Mutex<usize>,
    }

    #[async_trait]
    impl Compiler for Fake {
        fn runtime_key(&self) -> String {
            "fake".into()
        }

        async fn compile(
            &self,
            wheels: Vec<WheelSources>,
            _: Duration,
            _: &CancellationToken,
        ) -> Vec<Result<Vec<Pyc>, CompileFailure>> {
            *self.calls.lock().unwrap() += 1;
            wheels
                .iter()
                .map(|w| match w.sources[0].text.as_slice() {
                    b"fail" => Err(CompileFailure {
                        why: "no".into(),
                        alone: true,
                    }),
                    _ => {
                        let mut bytes = vec![0u8; 16];
                        bytes[8..12].copy_from_slice(&(w.time as u32).to_le_bytes());
                        Ok(vec![Pyc {
                            path: "__pycache__/m.fake-1.pyc".into(),
                            bytes,
                        }])
                    }
                })
                .collect()
        }
    }

    #[tokio::test]
    async fn wheels_compile_once_and_a_failure_is_not_tried_again() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = BytecodeCache::new(tmp.path().join("bytecode"), u64::MAX);
        let (good, bad) = (tempfile::tempfile().unwrap(), tempfile::tempfile().unwrap());
        let wheels = [
            (&good, Some("aa".repeat(32))),
            (&bad, Some("bb".repeat(32))),
        ];
        let compiler = Fake::default();
        let read = |file: &File, _: u64| {
            let text = if std::ptr::eq(file, &bad) {
                "fail"
            } else {
                "X = 1"
            };
            Some(vec![PythonSource {
                path: "m.py".into(),
                text: text.into(),
            }])
        };
        let cancel = CancellationToken::new();
        let mut runs = Vec::new();
        for _ in 0..2 {
            let within = Duration::from_secs(1);
            runs.push(for_wheels(&wheels, &compiler, &cache, within, &cancel, read).await);
        }
        let (first, again) = (&runs[0], &runs[1]);
        assert_eq!(first[0].pycs.len(), 1);
        assert!(first[1].pycs.is_empty());
        assert_eq!(first[1].source_time, Some(source_time(&"bb".repeat(32))));
        assert_eq!(again, first);
        assert_eq!(
            *compiler.calls.lock().unwrap(),
            1,
            "the cache answered, and the failure was remembered"
        );
    }
}
