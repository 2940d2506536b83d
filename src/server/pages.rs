//! [`Page`]: one page of a file as `read_file` returns it.

use crate::sandbox::FileContent;

/// Bytes of a text file `read_file` returns when no length is given.
pub const TEXT_PAGE_BYTES: u64 = 64 << 10;
/// Bytes of a binary file `read_file` returns when no length is given (as
/// base64, about 64 KiB).
pub const BINARY_PAGE_BYTES: u64 = 48 << 10;

/// Whether bytes read from a file look like text: UTF-8 (but for a character
/// cut at the end) without NUL bytes.
pub fn looks_like_text(bytes: &[u8]) -> bool {
    let valid = match std::str::from_utf8(bytes) {
        Ok(_) => true,
        Err(e) => e.error_len().is_none() && bytes.len() - e.valid_up_to() < 4,
    };
    valid && !bytes.contains(&0)
}

/// One page of a file, as `read_file` returns it.
pub struct Page {
    /// The bytes of the page.
    pub bytes: Vec<u8>,
    /// The file's size.
    pub size: u64,
    /// Bytes in the page.
    pub length: u64,
    /// Where the next page starts, when the file goes on.
    pub next_offset: Option<u64>,
}

impl Page {
    /// The page read at `offset`. A page of text the server chose the length
    /// of (`tidy`) ends at a character boundary, and at a line break when one
    /// is in its last quarter, so no line is split between two pages.
    pub fn of(file: FileContent, offset: u64, tidy: bool) -> Self {
        let mut bytes = file.bytes;
        if file.truncated && tidy && looks_like_text(&bytes) {
            let mut end = match std::str::from_utf8(&bytes) {
                Ok(_) => bytes.len(),
                Err(e) => e.valid_up_to(),
            };
            if let Some(newline) = bytes[..end].iter().rposition(|&b| b == b'\n')
                && newline + 1 >= end * 3 / 4
            {
                end = newline + 1;
            }
            bytes.truncate(end);
        }
        let length = bytes.len() as u64;
        let next = offset + length;
        Self {
            bytes,
            size: file.size,
            length,
            next_offset: (file.truncated || next < file.size).then_some(next),
        }
    }
}
