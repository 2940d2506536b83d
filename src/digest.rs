//! sha256 in lowercase hex, of bytes, readers and files: the one place the
//! package installer, the runtime loader and bundles hash what they check.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use sha2::{Digest, Sha256};

/// Lowercase hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The sha256 of what `reader` holds in lowercase hex, and its size.
pub fn hash_reader(reader: &mut impl Read) -> std::io::Result<(String, u64)> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut size = 0u64;
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        size += n as u64;
        hasher.update(&buf[..n]);
    }
    Ok((hex(&hasher.finalize()), size))
}

/// The sha256 of a file in lowercase hex, and its size.
pub fn hash_file(path: &Path) -> std::io::Result<(String, u64)> {
    hash_reader(&mut File::open(path)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_lowercase_hex_with_the_size() {
        let (sha, size) = hash_reader(&mut &b"abc"[..]).unwrap();
        assert_eq!(
            sha,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(size, 3);
        assert_eq!(hex(&[0, 255]), "00ff");
    }
}
