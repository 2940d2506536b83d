//! [`Snapshot`]: where every sandbox of a turn-driven runtime starts: the
//! memory and globals of an instance of the code module after the
//! interpreter's start-up, the driver's set-up and the preloaded imports (see
//! [`super::preinit`]), kept in the module cache as an image file (pages of
//! zeros left as holes) and a small record.
//!
//! A sandbox starts by instantiating the code module and applying the
//! snapshot: its memory grows to the image's size, the image is mapped over
//! it copy-on-write (see [`super::guest_memory`]; where memories cannot be
//! mapped, it is read in), and its globals are set. Files are written under
//! a temporary name and renamed into place, and an image is never changed
//! once written, so instances that map it are never affected by another
//! server preparing the runtime again.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use wasmtime::{Instance, Store};

use super::file_view::FileView;
use super::globals::{GlobalValue, restore_globals};
use super::guest_memory::MemoryRegion;
use super::guest_state::GuestState;
use super::state_error::StateError;
use super::unused_snapshots::{IMAGE, LOCK, RECORD, mark_used};

/// The bytes of a 32-bit linear memory's page.
const WASM_PAGE: u64 = 64 << 10;

/// What the record beside an image says.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    /// Bytes of memory the image holds (a whole number of wasm pages).
    memory_bytes: u64,
    /// The globals' values.
    globals: Vec<(String, GlobalValue)>,
    /// The image's identity: a hash of what it holds (a snapshot made again
    /// under the same key is not the same image); empty in older records.
    #[serde(default)]
    id: String,
}

/// How often a server that keeps using a snapshot says so (see
/// [`super::unused_snapshots`]).
const STILL_USED_EVERY: u64 = 60 * 60;

/// A runtime's snapshot, its image open.
#[derive(Debug)]
pub(crate) struct Snapshot {
    image: File,
    memory_bytes: u64,
    globals: Vec<(String, GlobalValue)>,
    id: String,
    /// Its record, marked as used now and then while sandboxes start from it.
    record: PathBuf,
    /// When it was last marked (seconds since the Unix epoch).
    marked_at: AtomicU64,
    /// The image read in place, made when first asked for; one for every
    /// sandbox of the runtime.
    view: OnceLock<Option<FileView>>,
}

impl Snapshot {
    /// The snapshot stored under `key` in `cache_dir`, if there is a whole one.
    pub(crate) fn load(cache_dir: &Path, key: &str) -> Option<Self> {
        let (image_path, record_path) = paths(cache_dir, key);
        let record: Record = serde_json::from_slice(&std::fs::read(&record_path).ok()?).ok()?;
        let image = File::open(&image_path).ok()?;
        let length = image.metadata().ok()?.len();
        if length != record.memory_bytes || !length.is_multiple_of(WASM_PAGE) {
            tracing::warn!(path = %image_path.display(), "ignoring a snapshot image whose size does not match its record");
            return None;
        }
        mark_used(&record_path);
        Some(Self {
            image,
            memory_bytes: record.memory_bytes,
            globals: record.globals,
            id: record.id,
            record: record_path,
            marked_at: AtomicU64::new(unix_seconds()),
            view: OnceLock::new(),
        })
    }

    /// Holds the right to make the snapshot `key` in `cache_dir` while the
    /// returned file is open: servers sharing a cache make a snapshot one at
    /// a time, and a later one loads what the first made (two images under
    /// one key would leave one server's saved sandboxes on an image that is
    /// gone). `None` where no lock can be taken (a read-only cache).
    pub(crate) fn making(cache_dir: &Path, key: &str) -> Option<File> {
        std::fs::create_dir_all(cache_dir).ok()?;
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(cache_dir.join(format!("{key}{LOCK}")))
            .ok()?;
        lock.lock().ok()?;
        Some(lock)
    }

    /// Writes `memory` and `globals` as the snapshot `key` in `cache_dir`.
    pub(crate) fn store(
        cache_dir: &Path,
        key: &str,
        memory: &[u8],
        globals: Vec<(String, GlobalValue)>,
    ) -> std::io::Result<Self> {
        let (image_path, record_path) = paths(cache_dir, key);
        std::fs::create_dir_all(cache_dir)?;
        let temp = temp_beside(&image_path);
        write_sparse(&temp, memory)?;
        std::fs::rename(&temp, &image_path)?;
        let record = Record {
            memory_bytes: memory.len() as u64,
            globals,
            id: content_id(memory),
        };
        super::module_cache::write_atomically(&record_path, &serde_json::to_vec(&record)?)?;
        Self::load(cache_dir, key)
            .ok_or_else(|| std::io::Error::other("the snapshot just written cannot be read back"))
    }

    /// Bytes of memory a sandbox starts with.
    pub(crate) fn memory_bytes(&self) -> u64 {
        self.memory_bytes
    }

    /// The image's identity (empty for a snapshot stored before it had one).
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// Marks the snapshot as used, at most once an hour, so that a server
    /// that runs for weeks keeps it from being removed as unused.
    fn still_used(&self) {
        let now = unix_seconds();
        let last = self.marked_at.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= STILL_USED_EVERY
            && self
                .marked_at
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            mark_used(&self.record);
        }
    }

    /// The image file, open (it is never changed).
    pub(crate) fn image_file(&self) -> &File {
        &self.image
    }

    /// The image read in place, when it can be (see [`FileView`]).
    pub(crate) fn image_view(&self) -> Option<&FileView> {
        self.view
            .get_or_init(|| {
                // Reading past the file's end through a view would fault.
                let holds = self.image.metadata().map_or(0, |m| m.len());
                let len = usize::try_from(self.memory_bytes).ok()?;
                (holds >= self.memory_bytes)
                    .then(|| FileView::of(&self.image, len).ok())
                    .flatten()
            })
            .as_ref()
    }

    /// Makes `instance`, just instantiated from the code module, hold the
    /// snapshot's state.
    pub(crate) fn apply(
        &self,
        store: &mut Store<GuestState>,
        instance: &Instance,
    ) -> Result<(), StateError> {
        self.still_used();
        let memory = instance
            .get_memory(&mut *store, "memory")
            .ok_or(StateError::NoMemory)?;
        let have = memory.data_size(&*store) as u64;
        if have > self.memory_bytes {
            return Err(StateError::DoesNotFit {
                saved: self.memory_bytes as usize,
                have: have as usize,
            });
        }
        let pages = (self.memory_bytes - have) / WASM_PAGE;
        if pages > 0 {
            memory
                .grow(&mut *store, pages)
                .map_err(|e| StateError::CannotGrow(e.to_string()))?;
        }
        let bytes = self.memory_bytes as usize;
        match MemoryRegion::of(memory.data_ptr(&*store)) {
            // SAFETY: between instantiation and the first turn no guest code
            // runs and nothing borrows the memory; images are never changed.
            Some(region) => unsafe { region.map_file(0..bytes, &self.image, 0)? },
            None => read_into(&self.image, &mut memory.data_mut(&mut *store)[..bytes])?,
        }
        restore_globals(store, instance, &self.globals)
    }
}

/// A hash of an image's bytes, as its identity.
fn content_id(memory: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    crate::digest::hex(&Sha256::digest(memory)[..16])
}

fn unix_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn paths(cache_dir: &Path, key: &str) -> (PathBuf, PathBuf) {
    (
        cache_dir.join(format!("{key}{IMAGE}")),
        cache_dir.join(format!("{key}{RECORD}")),
    )
}

fn temp_beside(path: &Path) -> PathBuf {
    path.with_file_name(format!(
        ".{}.partial-{}",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ))
}

/// Writes `bytes` to a new file at `path`, leaving pages of zeros as holes.
fn write_sparse(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let file = File::create(path)?;
    const CHUNK: usize = 64 << 10;
    for (i, chunk) in bytes.chunks(CHUNK).enumerate() {
        if chunk.iter().any(|&b| b != 0) {
            file.write_all_at(chunk, (i * CHUNK) as u64)?;
        }
    }
    file.set_len(bytes.len() as u64)?;
    file.sync_all()
}

fn read_into(file: &File, into: &mut [u8]) -> Result<(), StateError> {
    use std::os::unix::fs::FileExt;
    file.read_exact_at(into, 0)
        .map_err(StateError::io("reading the runtime's snapshot image"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_snapshot_loads_back_and_a_cut_image_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let mut memory = vec![0u8; 3 * WASM_PAGE as usize];
        memory[5] = 1;
        memory[2 * WASM_PAGE as usize + 7] = 2;
        let globals = vec![("__wizer_global_0".to_owned(), GlobalValue::I32(-3))];
        let stored = Snapshot::store(dir.path(), "k", &memory, globals.clone()).unwrap();
        assert_eq!(stored.memory_bytes(), memory.len() as u64);
        let loaded = Snapshot::load(dir.path(), "k").unwrap();
        assert_eq!(loaded.globals, globals);
        let mut back = vec![0u8; memory.len()];
        read_into(&loaded.image, &mut back).unwrap();
        assert_eq!(back, memory);
        use std::os::unix::fs::MetadataExt;
        let on_disk = std::fs::metadata(dir.path().join("k.image")).unwrap();
        assert!(
            on_disk.blocks() * 512 < memory.len() as u64,
            "the page of zeros is a hole"
        );
        assert!(Snapshot::load(dir.path(), "other").is_none());
        let image = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join("k.image"))
            .unwrap();
        image.set_len(WASM_PAGE).unwrap();
        assert!(Snapshot::load(dir.path(), "k").is_none());
    }
}
