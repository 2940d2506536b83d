//! Test support: build wheels in memory with the `zip` crate, well formed or
//! broken in one chosen way.

use std::io::{Cursor, Write};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};
use zip::CompressionMethod;
use zip::write::SimpleFileOptions;

/// One way to break a wheel.
#[derive(Clone, Debug)]
pub enum Tweak {
    /// Name the .dist-info directory `<stem>.dist-info`.
    DistInfoName(String),
    /// Write this version into METADATA.
    MetadataVersion(String),
    /// Set Root-Is-Purelib.
    RootIsPurelib(bool),
    /// Leave RECORD out.
    NoRecord,
    /// Add a file RECORD does not list.
    Unlisted(String),
    /// Give this file a wrong hash in RECORD.
    WrongHash(String),
    /// Give this file a wrong size in RECORD.
    WrongSize(String),
    /// List an extra path in RECORD.
    RecordExtra(String),
    /// Declare a size of 1 byte for members whose name contains "bomb".
    LieAboutSizes,
    /// Append bytes after the archive.
    Append(Vec<u8>),
    /// Put bytes before the archive.
    Prepend(Vec<u8>),
    /// Replace the whole file.
    Replace(Vec<u8>),
    /// Store members uncompressed and flip a byte of this content.
    CorruptStored(String),
    /// Rewrite a member name in the archive (same length), e.g. to make a
    /// duplicate the zip writer would refuse.
    RenameMember(String, String),
    /// Write METADATA as the first member, far from the directory at the end.
    MetadataFirst,
}

/// A wheel under construction.
#[derive(Clone, Debug)]
pub struct TestWheel {
    name: String,
    version: String,
    files: Vec<(String, Vec<u8>)>,
    symlinks: Vec<(String, String)>,
    requires: Vec<String>,
    tweaks: Vec<Tweak>,
}

fn b64(digest: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(digest)
}

impl TestWheel {
    /// A wheel of project `name` at `version` with just its metadata.
    pub fn new(name: &str, version: &str) -> Self {
        Self {
            name: name.to_owned(),
            version: version.to_owned(),
            files: Vec::new(),
            symlinks: Vec::new(),
            requires: Vec::new(),
            tweaks: Vec::new(),
        }
    }

    /// Adds a file.
    pub fn file(mut self, path: &str, content: impl Into<Vec<u8>>) -> Self {
        self.files.push((path.to_owned(), content.into()));
        self
    }

    /// Adds a symbolic link entry.
    pub fn symlink(mut self, path: &str, target: &str) -> Self {
        self.symlinks.push((path.to_owned(), target.to_owned()));
        self
    }

    /// Adds a `Requires-Dist` line.
    pub fn requires(mut self, requirement: &str) -> Self {
        self.requires.push(requirement.to_owned());
        self
    }

    /// Breaks it one way.
    pub fn tweak(mut self, tweak: Tweak) -> Self {
        self.tweaks.push(tweak);
        self
    }

    /// The METADATA text.
    pub fn metadata(&self) -> String {
        let version = self
            .tweaks
            .iter()
            .find_map(|t| match t {
                Tweak::MetadataVersion(v) => Some(v.clone()),
                _ => None,
            })
            .unwrap_or_else(|| self.version.clone());
        let mut text = format!(
            "Metadata-Version: 2.1\nName: {}\nVersion: {version}\n",
            self.name
        );
        for r in &self.requires {
            text.push_str(&format!("Requires-Dist: {r}\n"));
        }
        text
    }

    /// The archive's bytes.
    pub fn build(&self) -> Vec<u8> {
        let has = |f: &dyn Fn(&Tweak) -> bool| self.tweaks.iter().any(f);
        let stem = self
            .tweaks
            .iter()
            .find_map(|t| match t {
                Tweak::DistInfoName(s) => Some(s.clone()),
                _ => None,
            })
            .unwrap_or_else(|| format!("{}-{}", self.name.replace('-', "_"), self.version));
        let dist_info = format!("{stem}.dist-info");
        let purelib = !self
            .tweaks
            .iter()
            .any(|t| matches!(t, Tweak::RootIsPurelib(false)));
        let mut files = self.files.clone();
        files.push((
            format!("{dist_info}/METADATA"),
            self.metadata().into_bytes(),
        ));
        files.push((
            format!("{dist_info}/WHEEL"),
            format!(
                "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: {purelib}\nTag: py3-none-any\n"
            )
            .into_bytes(),
        ));
        if has(&|t| matches!(t, Tweak::MetadataFirst)) {
            let metadata = files.len() - 2;
            files[..=metadata].rotate_right(1);
        }
        let mut record = String::new();
        for (path, data) in &files {
            if has(&|t| matches!(t, Tweak::Unlisted(p) if p == path)) {
                continue;
            }
            let mut hash = b64(&Sha256::digest(data));
            let mut size = data.len();
            if has(&|t| matches!(t, Tweak::WrongHash(p) if p == path)) {
                hash = b64(&Sha256::digest(b"something else"));
            }
            if has(&|t| matches!(t, Tweak::WrongSize(p) if p == path)) {
                size += 1;
            }
            record.push_str(&format!("{path},sha256={hash},{size}\n"));
        }
        for t in &self.tweaks {
            if let Tweak::RecordExtra(p) = t {
                record.push_str(&format!("{p},sha256={},0\n", b64(&Sha256::digest(b""))));
            }
            if let Tweak::Unlisted(p) = t
                && !files.iter().any(|(f, _)| f == p)
            {
                files.push((p.clone(), b"hidden".to_vec()));
            }
        }
        record.push_str(&format!("{dist_info}/RECORD,,\n"));
        if !has(&|t| matches!(t, Tweak::NoRecord)) {
            files.push((format!("{dist_info}/RECORD"), record.into_bytes()));
        }

        let stored = has(&|t| matches!(t, Tweak::CorruptStored(_)));
        let options = SimpleFileOptions::default().compression_method(if stored {
            CompressionMethod::Stored
        } else {
            CompressionMethod::Deflated
        });
        let mut writer = zip::ZipWriter::new(Cursor::new(Vec::new()));
        for (path, data) in &files {
            writer.start_file(path.as_str(), options).unwrap();
            writer.write_all(data).unwrap();
        }
        for (path, target) in &self.symlinks {
            writer
                .add_symlink(path.as_str(), target.as_str(), options)
                .unwrap();
        }
        let mut bytes = writer.finish().unwrap().into_inner();

        for t in &self.tweaks {
            match t {
                Tweak::LieAboutSizes => lie_about_sizes(&mut bytes),
                Tweak::Append(extra) => bytes.extend_from_slice(extra),
                Tweak::Prepend(extra) => {
                    let mut v = extra.clone();
                    v.extend_from_slice(&bytes);
                    bytes = v;
                }
                Tweak::Replace(all) => bytes = all.clone(),
                Tweak::RenameMember(from, to) => {
                    assert_eq!(from.len(), to.len());
                    let mut i = 0;
                    while let Some(pos) = bytes[i..]
                        .windows(from.len())
                        .position(|w| w == from.as_bytes())
                    {
                        let at = i + pos;
                        bytes[at..at + to.len()].copy_from_slice(to.as_bytes());
                        i = at + to.len();
                    }
                }
                Tweak::CorruptStored(content) => {
                    let needle = content.as_bytes();
                    if let Some(pos) = bytes.windows(needle.len()).position(|w| w == needle) {
                        bytes[pos] ^= 0x20;
                    }
                }
                _ => {}
            }
        }
        bytes
    }
}

/// Sets the declared uncompressed size of members named `*bomb*` to 1 in
/// both their local and central headers.
fn lie_about_sizes(bytes: &mut [u8]) {
    let mut i = 0;
    while i + 46 <= bytes.len() {
        let sig = &bytes[i..i + 4];
        let (size_at, name_len_at, header) = if sig == b"PK\x03\x04" {
            (22, 26, 30)
        } else if sig == b"PK\x01\x02" {
            (24, 28, 46)
        } else {
            i += 1;
            continue;
        };
        let name_len =
            u16::from_le_bytes([bytes[i + name_len_at], bytes[i + name_len_at + 1]]) as usize;
        let start = i + header;
        if start + name_len <= bytes.len()
            && bytes[start..start + name_len]
                .windows(4)
                .any(|w| w == b"bomb")
        {
            bytes[i + size_at..i + size_at + 4].copy_from_slice(&1u32.to_le_bytes());
        }
        i += 4;
    }
}
