//! [`LocalFiles`]: the file tools on a sandbox directory of this machine.
//!
//! Every operation goes through one `cap_std::fs::Dir` opened on the sandbox
//! directory, so no path can resolve outside it, whatever `..` or symbolic
//! links the guest planted; there is no check-then-use by name. Writes go to
//! a temporary file beside the target and are renamed over it, so a reader
//! never sees half a file, and they never follow a symbolic link at the last
//! component.

use std::io::{Read, Seek, SeekFrom, Write};
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use cap_std::fs::{Dir, MetadataExt, OpenOptions};
use rand::Rng;

use super::FileInterface;
use super::changed_files::changed_since;
use super::error::SandboxError;
use super::guest_path::GuestPath;
use super::types::{ChangedFile, EntryKind, FileContent, FileEntry, Listing};
use crate::sandbox::disk_usage::held_bytes;
use crate::sandbox::quota::QuotaLedger;

/// File access to one sandbox directory on this machine.
#[derive(Clone)]
pub struct LocalFiles {
    dir: Arc<Dir>,
    ledger: Arc<QuotaLedger>,
}

impl LocalFiles {
    /// Works on `dir`, keeping the sandbox within the quota `ledger` keeps.
    pub fn new(dir: Arc<Dir>, ledger: Arc<QuotaLedger>) -> Self {
        Self { dir, ledger }
    }

    /// Runs a blocking file operation off the async threads.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Dir, &QuotaLedger) -> Result<T, SandboxError> + Send + 'static,
    ) -> Result<T, SandboxError> {
        let dir = self.dir.clone();
        let ledger = self.ledger.clone();
        tokio::task::spawn_blocking(move || f(&dir, &ledger))
            .await
            .map_err(|source| SandboxError::Task {
                what: "file operation",
                source,
            })?
    }
}

#[async_trait]
impl FileInterface for LocalFiles {
    async fn list(&self, path: &GuestPath, max_entries: usize) -> Result<Listing, SandboxError> {
        let path = path.clone();
        self.blocking(move |dir, _| list(dir, &path, max_entries))
            .await
    }

    async fn read(
        &self,
        path: &GuestPath,
        offset: u64,
        max_bytes: u64,
    ) -> Result<FileContent, SandboxError> {
        let path = path.clone();
        self.blocking(move |dir, _| read(dir, &path, offset, max_bytes))
            .await
    }

    async fn write(&self, path: &GuestPath, data: Vec<u8>) -> Result<u64, SandboxError> {
        let path = path.clone();
        self.blocking(move |dir, quota| write(dir, quota, &path, &data))
            .await
    }

    fn write_count(&self) -> Option<u64> {
        Some(self.ledger.write_requests())
    }

    async fn changed_since(&self, since: SystemTime) -> (Vec<ChangedFile>, usize) {
        self.blocking(move |dir, _| Ok(changed_since(dir, since)))
            .await
            .unwrap_or_default()
    }
}

fn list(dir: &Dir, path: &GuestPath, max_entries: usize) -> Result<Listing, SandboxError> {
    let shown = path.to_string();
    let meta = dir
        .metadata(path.relative())
        .map_err(|e| SandboxError::io("list", &shown, e))?;
    if !meta.is_dir() {
        return Err(SandboxError::WrongKind {
            path: shown,
            what: "a file, not a directory; use read_file to read it".into(),
        });
    }
    let mut entries = Vec::new();
    let mut truncated = false;
    let reader = dir
        .read_dir(path.relative())
        .map_err(|e| SandboxError::io("list", &shown, e))?;
    for entry in reader {
        let entry = entry.map_err(|e| SandboxError::io("list", &shown, e))?;
        if entries.len() >= max_entries {
            truncated = true;
            break;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(meta) = entry.metadata() else { continue };
        let file_type = meta.file_type();
        let kind = if file_type.is_symlink() {
            EntryKind::Symlink
        } else if file_type.is_dir() {
            EntryKind::Directory
        } else if file_type.is_file() {
            EntryKind::File
        } else {
            EntryKind::Other
        };
        let child = if path.is_root() {
            format!("/{name}")
        } else {
            format!("{shown}/{name}")
        };
        entries.push(FileEntry {
            name,
            path: child,
            kind,
            size: meta.len(),
            modified: meta.modified().ok().map(|t| rfc3339(t.into_std())),
        });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Listing { entries, truncated })
}

fn read(
    dir: &Dir,
    path: &GuestPath,
    offset: u64,
    max_bytes: u64,
) -> Result<FileContent, SandboxError> {
    let shown = path.to_string();
    if path.is_root() {
        return Err(SandboxError::WrongKind {
            path: shown,
            what: "the sandbox's root directory; use list_files to see what it holds".into(),
        });
    }
    let file = dir
        .open(path.relative())
        .map_err(|e| SandboxError::io("read", &shown, e))?;
    let meta = file
        .metadata()
        .map_err(|e| SandboxError::io("read", &shown, e))?;
    if meta.is_dir() {
        return Err(SandboxError::io(
            "read",
            &shown,
            std::io::Error::from(std::io::ErrorKind::IsADirectory),
        ));
    }
    let mut file = file;
    file.seek(SeekFrom::Start(offset))
        .map_err(|e| SandboxError::io("read", &shown, e))?;
    let mut bytes = Vec::new();
    // Read one byte past the limit to learn whether the file goes on; the size
    // from metadata is not trusted (sparse files, files that grow).
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| SandboxError::io("read", &shown, e))?;
    let truncated = bytes.len() as u64 > max_bytes;
    bytes.truncate(max_bytes as usize);
    Ok(FileContent {
        size: meta.len().max(offset.saturating_add(bytes.len() as u64)),
        bytes,
        truncated,
    })
}

/// How many directories of `parent` (a directory path) do not exist yet.
fn missing_directories(dir: &Dir, parent: &GuestPath) -> u64 {
    if parent.is_root() {
        return 0;
    }
    let relative = parent.relative();
    let components: Vec<_> = relative.components().collect();
    let mut prefix = std::path::PathBuf::new();
    for (i, component) in components.iter().enumerate() {
        prefix.push(component);
        if dir.symlink_metadata(&prefix).is_err() {
            return (components.len() - i) as u64;
        }
    }
    0
}

fn write(
    dir: &Dir,
    ledger: &QuotaLedger,
    path: &GuestPath,
    data: &[u8],
) -> Result<u64, SandboxError> {
    let shown = path.to_string();
    let Some(name) = path.file_name() else {
        return Err(SandboxError::WrongKind {
            path: shown,
            what: "the sandbox's root directory; give a file name".into(),
        });
    };
    let parent = path.parent();
    // Everything the write adds is checked before anything is created.
    let new_dirs = missing_directories(dir, &parent);
    let replaced = if new_dirs > 0 {
        None
    } else {
        match dir.symlink_metadata(path.relative()) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(SandboxError::WrongKind {
                    path: shown,
                    what: "a symbolic link; write to the file it points to instead".into(),
                });
            }
            Ok(meta) if meta.is_dir() => {
                return Err(SandboxError::io(
                    "write",
                    &shown,
                    std::io::Error::from(std::io::ErrorKind::IsADirectory),
                ));
            }
            // Replacing a file frees its bytes only when no other name keeps them.
            Ok(meta) if meta.nlink() > 1 => Some(0),
            Ok(meta) => Some(held_bytes(&meta)),
            Err(_) => None,
        }
    };
    ledger.check_write(&shown, data.len() as u64, replaced, new_dirs)?;
    if !parent.is_root() {
        dir.create_dir_all(parent.relative()).map_err(|e| {
            // Say why: a link that leads out, or a file in the way.
            match dir.open_dir(parent.relative()) {
                Err(why) => SandboxError::io("open the directory of", &shown, why),
                Ok(_) => SandboxError::io("create the directories of", &shown, e),
            }
        })?;
    }
    let parent_dir = dir
        .open_dir(parent.relative())
        .map_err(|e| SandboxError::io("open the directory of", &shown, e))?;

    let temp = format!(".{name}.partial-{:08x}", rand::rng().random::<u32>());
    let temp = if temp.len() > 255 {
        format!(".partial-{:08x}", rand::rng().random::<u32>())
    } else {
        temp
    };
    let result = (|| {
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        let mut file = parent_dir.open_with(&temp, &options)?;
        file.write_all(data)?;
        file.flush()?;
        drop(file);
        parent_dir.rename(&temp, &parent_dir, name)
    })();
    if let Err(e) = result {
        let _ = parent_dir.remove_file(&temp);
        return Err(SandboxError::io("write", &shown, e));
    }
    Ok(data.len() as u64)
}

/// Formats a time as RFC 3339 in UTC, to the second.
fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cap_std::ambient_authority;
    use std::os::unix::fs::symlink;

    fn sandbox() -> (tempfile::TempDir, std::path::PathBuf, LocalFiles) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("sandbox");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(tmp.path().join("secret.txt"), "host secret").unwrap();
        let dir = Arc::new(Dir::open_ambient_dir(&root, ambient_authority()).unwrap());
        let ledger = crate::sandbox::quota::QuotaLedger::new(
            dir.clone(),
            &root,
            crate::sandbox::quota::DiskQuota::unlimited(),
            crate::sandbox::allocation::Allocation::default(),
            crate::sandbox::budget::Budget::unlimited(),
        );
        let files = LocalFiles::new(dir, ledger);
        (tmp, root, files)
    }

    fn p(s: &str) -> GuestPath {
        GuestPath::parse(s).unwrap()
    }

    #[tokio::test]
    async fn write_creates_parents_and_read_returns_the_bytes() {
        let (_tmp, root, files) = sandbox();
        files
            .write(&p("/a/b/c.txt"), b"hello".to_vec())
            .await
            .unwrap();
        assert_eq!(std::fs::read(root.join("a/b/c.txt")).unwrap(), b"hello");
        let got = files.read(&p("a/b/c.txt"), 0, 100).await.unwrap();
        assert_eq!(got.bytes, b"hello");
        assert!(!got.truncated);
        let cut = files.read(&p("a/b/c.txt"), 0, 2).await.unwrap();
        assert_eq!(cut.bytes, b"he");
        assert!(cut.truncated);
        assert_eq!(cut.size, 5);
        let page = files.read(&p("a/b/c.txt"), 2, 2).await.unwrap();
        assert_eq!(page.bytes, b"ll");
        assert!(page.truncated);
        let last = files.read(&p("a/b/c.txt"), 4, 100).await.unwrap();
        assert_eq!(last.bytes, b"o");
        assert!(!last.truncated);
        let past = files.read(&p("a/b/c.txt"), 50, 100).await.unwrap();
        assert!(past.bytes.is_empty() && !past.truncated);
        let listing = files.list(&p("/a/b"), 10).await.unwrap();
        assert_eq!(listing.entries.len(), 1);
        assert_eq!(listing.entries[0].path, "/a/b/c.txt");
        assert_eq!(listing.entries[0].kind, EntryKind::File);
        let leftovers: Vec<_> = std::fs::read_dir(root.join("a/b")).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temporary file is left behind");
    }

    #[tokio::test]
    async fn links_that_lead_out_are_refused_for_reading_and_writing() {
        let (tmp, root, files) = sandbox();
        symlink(tmp.path().join("secret.txt"), root.join("abs")).unwrap();
        symlink("../secret.txt", root.join("rel")).unwrap();
        symlink("..", root.join("up")).unwrap();
        for name in ["abs", "rel", "up/secret.txt"] {
            let err = files.read(&p(name), 0, 100).await.unwrap_err();
            assert!(matches!(err, SandboxError::Escape(_)), "{name}: {err}");
        }
        let err = files
            .write(&p("up/secret.txt"), b"x".to_vec())
            .await
            .unwrap_err();
        assert!(matches!(err, SandboxError::Escape(_)), "{err}");
        let err = files.write(&p("rel"), b"x".to_vec()).await.unwrap_err();
        assert!(matches!(err, SandboxError::WrongKind { .. }), "{err}");
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("secret.txt")).unwrap(),
            "host secret"
        );
    }

    #[tokio::test]
    async fn links_inside_the_sandbox_work_for_reading() {
        let (_tmp, root, files) = sandbox();
        std::fs::write(root.join("real.txt"), "inside").unwrap();
        symlink("real.txt", root.join("alias")).unwrap();
        assert_eq!(
            files.read(&p("alias"), 0, 100).await.unwrap().bytes,
            b"inside"
        );
        let listing = files.list(&GuestPath::root(), 10).await.unwrap();
        let alias = listing.entries.iter().find(|e| e.name == "alias").unwrap();
        assert_eq!(alias.kind, EntryKind::Symlink);
    }

    #[tokio::test]
    async fn wrong_kinds_and_missing_files_get_clear_errors() {
        let (_tmp, root, files) = sandbox();
        std::fs::create_dir(root.join("d")).unwrap();
        std::fs::write(root.join("f"), "x").unwrap();
        assert!(matches!(
            files.read(&p("d"), 0, 10).await.unwrap_err(),
            SandboxError::WrongKind { .. }
        ));
        assert!(matches!(
            files.list(&p("f"), 10).await.unwrap_err(),
            SandboxError::WrongKind { .. }
        ));
        assert!(matches!(
            files.read(&p("nope"), 0, 10).await.unwrap_err(),
            SandboxError::NotFound(_)
        ));
        assert!(matches!(
            files.write(&p("d"), vec![]).await.unwrap_err(),
            SandboxError::WrongKind { .. }
        ));
        assert!(matches!(
            files.write(&p("f/x"), vec![]).await.unwrap_err(),
            SandboxError::WrongKind { .. } | SandboxError::Io { .. }
        ));
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(64))]
        /// Whatever path the file tools are given, and whatever links the
        /// guest planted, nothing outside the sandbox is read or written.
        #[test]
        fn no_path_reaches_outside_the_sandbox(
            tokens in proptest::collection::vec(
                proptest::sample::select(vec!["up", "abs", "loop", "chain", "..", ".", "d", "f", "secret.txt", "new"]),
                1..8,
            )
        ) {
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let (tmp, root, files) = sandbox();
            std::fs::create_dir(root.join("d")).unwrap();
            std::fs::write(root.join("f"), "inside").unwrap();
            symlink("..", root.join("up")).unwrap();
            symlink(tmp.path(), root.join("abs")).unwrap();
            symlink("loop", root.join("loop")).unwrap();
            symlink("d/../up/", root.join("chain")).unwrap();
            let raw = tokens.join("/");
            if let Ok(path) = GuestPath::parse(&raw) {
                if let Ok(content) = rt.block_on(files.read(&path, 0, 1 << 20)) {
                    proptest::prop_assert_ne!(content.bytes, b"host secret".to_vec(), "{} read the host", raw);
                }
                let _ = rt.block_on(files.write(&path, b"pwned".to_vec()));
                let _ = rt.block_on(files.list(&path, 100));
            }
            proptest::prop_assert_eq!(std::fs::read_to_string(tmp.path().join("secret.txt")).unwrap(), "host secret");
            let outside: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().flatten().map(|e| e.file_name()).collect();
            proptest::prop_assert_eq!(outside.len(), 2, "nothing new beside the sandbox: {:?}", outside);
        }
    }

    #[tokio::test]
    async fn listings_are_capped() {
        let (_tmp, root, files) = sandbox();
        for i in 0..20 {
            std::fs::write(root.join(format!("f{i}")), "").unwrap();
        }
        let listing = files.list(&GuestPath::root(), 5).await.unwrap();
        assert_eq!(listing.entries.len(), 5);
        assert!(listing.truncated);
    }
}
