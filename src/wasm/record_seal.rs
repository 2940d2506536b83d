//! [`RecordSeal`]: a keyed MAC (HMAC-SHA256) over each kept sandbox's
//! record, so that a record changed after it was written (its limits
//! raised, its hosts widened, its runtime swapped) is refused at restore, as
//! is a record copied from another server's root.
//!
//! The key is 32 random bytes in `<SANDBOX_ROOT>/saved/.seal-key`, made by
//! the first server to save there and readable by its user only. The seal
//! covers the record, not the memory's pages: their journal's checksums
//! find what a crash leaves, not a change made on purpose.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rand::Rng;
use ring::hmac;

use crate::digest::hex;

const KEY_FILE: &str = ".seal-key";
const KEY_BYTES: usize = 32;

/// The key that seals the records of one saved store: read (or made) on
/// first use, so a store nothing was ever saved in holds no key file.
pub(crate) struct RecordSeal {
    dir: PathBuf,
    key: Mutex<Option<hmac::Key>>,
}

impl std::fmt::Debug for RecordSeal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecordSeal(..)")
    }
}

impl RecordSeal {
    /// The seal of the store in `dir`.
    pub(crate) fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_owned(),
            key: Mutex::new(None),
        }
    }

    /// The seal of `record`, as hex (the key is made when there is none).
    pub(crate) fn seal(&self, record: &[u8]) -> std::io::Result<String> {
        let key = self
            .key(true)?
            .ok_or_else(|| std::io::Error::other("no key"))?;
        Ok(hex(hmac::sign(&key, record).as_ref()))
    }

    /// Whether `seal` (hex) is this store's seal of `record`, compared in
    /// constant time (never, when the key is missing or unreadable).
    pub(crate) fn verify(&self, record: &[u8], seal: &str) -> bool {
        let (Ok(Some(key)), Some(tag)) = (self.key(false), unhex(seal.trim())) else {
            return false;
        };
        hmac::verify(&key, record, &tag).is_ok()
    }

    /// The key, read from its file (made first when `create` and there is
    /// none).
    fn key(&self, create: bool) -> std::io::Result<Option<hmac::Key>> {
        let mut slot = self.key.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(key) = slot.as_ref() {
            return Ok(Some(key.clone()));
        }
        let path = self.dir.join(KEY_FILE);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                crate::sandbox::private_files::create_private_dir(&self.dir)?;
                make_key(&self.dir, &path)?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let bytes = if bytes.len() == KEY_BYTES {
            bytes
        } else if create {
            // A damaged key seals nothing that can be checked: a save makes
            // a fresh one rather than fail (and lose its sandbox).
            tracing::error!(path = %path.display(), len = bytes.len(), "replacing a damaged seal key; records sealed with it will be refused");
            fs::remove_file(&path)?;
            make_key(&self.dir, &path)?
        } else {
            return Err(std::io::Error::other(format!(
                "{} holds {} bytes, not {KEY_BYTES}",
                path.display(),
                bytes.len()
            )));
        };
        let key = hmac::Key::new(hmac::HMAC_SHA256, &bytes);
        *slot = Some(key.clone());
        Ok(Some(key))
    }
}

/// Writes a fresh key to `path`, unless another server got there first (the
/// key is written aside and linked in, which never replaces one).
fn make_key(dir: &Path, path: &Path) -> std::io::Result<Vec<u8>> {
    let mut bytes = vec![0u8; KEY_BYTES];
    rand::rng().fill(&mut bytes[..]);
    let aside = dir.join(format!("{KEY_FILE}.{:016x}", rand::rng().random::<u64>()));
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let written = options
        .open(&aside)
        .and_then(|mut f| f.write_all(&bytes).and_then(|()| f.sync_all()));
    let linked = written.and_then(|()| fs::hard_link(&aside, path));
    let _ = fs::remove_file(&aside);
    match linked {
        Ok(()) => Ok(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => fs::read(path),
        Err(e) => Err(e),
    }
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_verifies_only_unchanged_and_under_its_own_key() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let seal = RecordSeal::new(a.path());
        let record = br#"{"memory_bytes": 536870912}"#;
        assert!(!seal.verify(record, "00"), "no key yet: nothing verifies");
        assert!(
            !a.path().join(KEY_FILE).exists(),
            "nor is a key made to check"
        );
        let tag = seal.seal(record).unwrap();
        assert!(seal.verify(record, &tag));
        assert!(!seal.verify(br#"{"memory_bytes": 4294967296}"#, &tag));
        assert!(!seal.verify(record, "00"));
        assert!(!seal.verify(record, "not hex"));
        let again = RecordSeal::new(a.path());
        assert!(again.verify(record, &tag), "the key is kept on disk");
        let other = RecordSeal::new(b.path());
        other.seal(b"x").unwrap();
        assert!(!other.verify(record, &tag), "another root's key");
    }
}
