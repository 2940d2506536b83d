//! [`FileView`]: a page file's bytes read in place through a read-only
//! shared mapping, so that comparing a flush's written pages with their last
//! copies (see [`super::page_store`]) costs no system call per copy.

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
        if on_a_remote_filesystem(file) {
            return Err(std::io::Error::other(
                "read through system calls: a failed read of a mapping stops the process",
            ));
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

/// Whether `file` is on a network or FUSE filesystem (a shared
/// `SANDBOX_ROOT`, say), where a read can fail: through a mapping, a failed
/// read is a signal that stops the whole server, where `pread` returns an
/// error for one sandbox. Linux tells; elsewhere files are taken as local.
#[cfg(target_os = "linux")]
fn on_a_remote_filesystem(file: &File) -> bool {
    /// `f_type` of NFS, SMB, CIFS, SMB2, FUSE (GlusterFS, sshfs...), Ceph,
    /// 9p, AFS, Lustre and OCFS2.
    const REMOTE: [u64; 10] = [
        0x6969,
        0x517b,
        0xff53_4d42,
        0xfe53_4d42,
        0x6573_5546,
        0x00c3_6400,
        0x0102_1997,
        0x5346_414f,
        0x0bd0_0bd0,
        0x7461_636f,
    ];
    rustix::fs::fstatfs(file).map_or(true, |fs| REMOTE.contains(&(fs.f_type as u64)))
}

/// See the Linux version: elsewhere every file is taken as local.
#[cfg(not(target_os = "linux"))]
fn on_a_remote_filesystem(_: &File) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_view_reads_what_the_file_holds_and_nothing_past_the_view() {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"pages of a segment").unwrap();
        assert!(!on_a_remote_filesystem(&file), "a temporary file is local");
        let view = FileView::of(&file, 1 << 20).unwrap();
        // SAFETY: the file holds these bytes and is not cut short.
        unsafe {
            assert_eq!(view.bytes(6, 2), Some(&b"of"[..]));
            assert_eq!(view.bytes(0, 0), Some(&[][..]));
            assert_eq!(view.bytes((1 << 20) - 1, 2), None, "past the view");
        }
        // Bytes written after the view was made are seen through it.
        file.write_all(b"!").unwrap();
        // SAFETY: as above.
        assert_eq!(unsafe { view.bytes(18, 1) }, Some(&b"!"[..]));
    }
}
