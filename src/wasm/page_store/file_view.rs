//! [`FileView`]: a page file's bytes read in place through a read-only
//! shared mapping, so that comparing a flush's written pages with their last
//! copies (see [`super::changes`]) costs no system call per copy.

use std::fs::File;

/// A read-only view of the first `len` bytes of a file that only ever
/// grows (a segment) or never changes (the image).
#[derive(Debug)]
pub(crate) struct FileView {
    base: usize,
    len: usize,
}

impl FileView {
    /// A view of `file`'s first `len` bytes (more than the file holds now
    /// may be mapped, for a file that grows; only bytes it holds may be
    /// read).
    pub(crate) fn of(file: &File, len: usize) -> std::io::Result<Self> {
        use rustix::mm::{MapFlags, ProtFlags, mmap};
        if len == 0 {
            return Ok(Self { base: 0, len: 0 });
        }
        // SAFETY: a new shared read-only mapping at an address the system
        // picks; nothing else refers to it.
        let base = unsafe {
            mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ,
                MapFlags::SHARED,
                file,
                0,
            )
        }
        .map_err(std::io::Error::from)?;
        Ok(Self {
            base: base as usize,
            len,
        })
    }

    /// Bytes the view covers.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The `len` bytes from `at`, when the view covers them.
    ///
    /// # Safety
    ///
    /// The file must hold those bytes (reading past its end faults), and
    /// must not be cut short while the slice is alive.
    pub(crate) unsafe fn bytes(&self, at: u64, len: usize) -> Option<&[u8]> {
        let at = usize::try_from(at).ok()?;
        if at.checked_add(len)? > self.len {
            return None;
        }
        if len == 0 {
            return Some(&[]);
        }
        // SAFETY: inside the mapping (checked); the caller vouches for the
        // file's bytes.
        Some(unsafe { std::slice::from_raw_parts((self.base + at) as *const u8, len) })
    }
}

impl Drop for FileView {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: the mapping made in `of`, no longer used (slices of it
            // borrow the view).
            let _ = unsafe { rustix::mm::munmap(self.base as *mut _, self.len) };
        }
    }
}
