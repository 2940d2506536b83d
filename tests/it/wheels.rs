//! Wheels built by the tests with the `zip` crate: METADATA, WHEEL, RECORD
//! and package files, well formed or broken on purpose.
//!
//! Each wheel's METADATA carries a random header, so its bytes (and sha256)
//! differ from run to run and the shared test cache never serves a wheel a
//! test expects to download.

use std::io::{Cursor, Write};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};
use zip::CompressionMethod;
use zip::write::SimpleFileOptions;

/// A wheel under construction.
#[derive(Clone, Debug)]
pub struct Wheel {
    pub name: String,
    pub version: String,
    files: Vec<(String, Vec<u8>)>,
    metadata: Vec<String>,
    tag: String,
}

impl Wheel {
    /// A wheel of `name` `version` (tag py3-none-any) with just its metadata.
    pub fn new(name: &str, version: &str) -> Self {
        Self {
            name: name.to_owned(),
            version: version.to_owned(),
            files: Vec::new(),
            metadata: vec![format!("X-Test-Nonce: {:016x}", rand::random::<u64>())],
            tag: "py3-none-any".into(),
        }
    }

    /// A pure-Python package `name` whose `__init__.py` is `source`.
    pub fn module(name: &str, version: &str, source: &str) -> Self {
        Self::new(name, version).file(&format!("{}/__init__.py", name.replace('-', "_")), source)
    }

    /// Adds a member.
    pub fn file(mut self, path: &str, content: impl Into<Vec<u8>>) -> Self {
        self.files.push((path.to_owned(), content.into()));
        self
    }

    /// Adds a `Requires-Dist`.
    pub fn requires(mut self, requirement: &str) -> Self {
        self.metadata.push(format!("Requires-Dist: {requirement}"));
        self
    }

    /// Adds a METADATA header line.
    pub fn header(mut self, line: &str) -> Self {
        self.metadata.push(line.to_owned());
        self
    }

    /// Uses another tag set (e.g. `cp312-cp312-manylinux_2_17_x86_64`).
    pub fn tag(mut self, tag: &str) -> Self {
        self.tag = tag.to_owned();
        self
    }

    /// The wheel's file name.
    pub fn filename(&self) -> String {
        format!(
            "{}-{}-{}.whl",
            self.name.replace('-', "_"),
            self.version,
            self.tag
        )
    }

    /// The archive.
    pub fn build(&self) -> Vec<u8> {
        let dist_info = format!("{}-{}.dist-info", self.name.replace('-', "_"), self.version);
        let mut metadata = format!(
            "Metadata-Version: 2.1\nName: {}\nVersion: {}\n",
            self.name, self.version
        );
        for line in &self.metadata {
            metadata.push_str(line);
            metadata.push('\n');
        }
        let mut files = self.files.clone();
        files.push((format!("{dist_info}/METADATA"), metadata.into_bytes()));
        files.push((
            format!("{dist_info}/WHEEL"),
            b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
                .to_vec(),
        ));
        let mut record = String::new();
        for (path, data) in &files {
            let hash = URL_SAFE_NO_PAD.encode(Sha256::digest(data));
            record.push_str(&format!("{path},sha256={hash},{}\n", data.len()));
        }
        record.push_str(&format!("{dist_info}/RECORD,,\n"));
        files.push((format!("{dist_info}/RECORD"), record.into_bytes()));
        let options = SimpleFileOptions::default()
            .compression_method(CompressionMethod::Deflated)
            .compression_level(Some(1));
        let mut writer = zip::ZipWriter::new(Cursor::new(Vec::new()));
        for (path, data) in &files {
            writer.start_file(path.as_str(), options).unwrap();
            writer.write_all(data).unwrap();
        }
        writer.finish().unwrap().into_inner()
    }
}

/// The sha256 of bytes in hex.
pub fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
