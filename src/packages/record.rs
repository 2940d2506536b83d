//! A wheel's `RECORD`: one CSV row per file, `path,algorithm=digest,size`,
//! the digest in unpadded URL-safe base64. Every file a wheel installs must be
//! listed with a matching hash and size.

use std::collections::HashMap;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::Digest;

/// A hash algorithm RECORD may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HashAlgorithm {
    /// sha256 (what every tool writes).
    Sha256,
    /// sha384.
    Sha384,
    /// sha512.
    Sha512,
}

/// A running hash of one of the [`HashAlgorithm`]s.
pub enum Hasher {
    /// sha256.
    Sha256(sha2::Sha256),
    /// sha384.
    Sha384(sha2::Sha384),
    /// sha512.
    Sha512(sha2::Sha512),
}

impl HashAlgorithm {
    /// A fresh hasher.
    pub fn hasher(self) -> Hasher {
        match self {
            Self::Sha256 => Hasher::Sha256(sha2::Sha256::new()),
            Self::Sha384 => Hasher::Sha384(sha2::Sha384::new()),
            Self::Sha512 => Hasher::Sha512(sha2::Sha512::new()),
        }
    }
}

impl Hasher {
    /// Feeds bytes.
    pub fn update(&mut self, data: &[u8]) {
        match self {
            Self::Sha256(h) => h.update(data),
            Self::Sha384(h) => h.update(data),
            Self::Sha512(h) => h.update(data),
        }
    }

    /// The digest.
    pub fn finish(self) -> Vec<u8> {
        match self {
            Self::Sha256(h) => h.finalize().to_vec(),
            Self::Sha384(h) => h.finalize().to_vec(),
            Self::Sha512(h) => h.finalize().to_vec(),
        }
    }
}

/// One RECORD row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordEntry {
    /// The path as written.
    pub path: String,
    /// The hash, when given.
    pub hash: Option<(HashAlgorithm, Vec<u8>)>,
    /// The size, when given.
    pub size: Option<u64>,
}

/// A parsed RECORD, by path.
#[derive(Clone, Debug, Default)]
pub struct Record {
    /// Rows by path.
    pub entries: HashMap<String, RecordEntry>,
}

/// The `sha256=...` text RECORD uses for a sha256 digest.
pub fn record_hash(sha256: &[u8]) -> String {
    format!("sha256={}", URL_SAFE_NO_PAD.encode(sha256))
}

/// Why a `RECORD` is refused.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// A hash has no `algorithm=` part.
    #[error("RECORD line {0} has a hash without '='")]
    HashWithoutEquals(usize),
    /// A hash algorithm other than sha256, sha384 or sha512.
    #[error(
        "RECORD line {line} uses the hash '{algorithm}'; only sha256, sha384 and sha512 are accepted"
    )]
    UnknownHash {
        /// The line, from 1.
        line: usize,
        /// The algorithm named (escaped, shortened).
        algorithm: String,
    },
    /// A digest is not base64.
    #[error("RECORD line {0} has a digest that is not base64")]
    BadDigest(usize),
    /// A size is not a number.
    #[error("RECORD line {0} has a size that is not a number")]
    BadSize(usize),
    /// A path is listed twice.
    #[error("RECORD lists a path twice (line {0})")]
    Duplicate(usize),
    /// A quoted field does not end.
    #[error("RECORD has an unterminated quoted field")]
    Unterminated,
}

impl Record {
    /// Parses RECORD text. Rows with an unknown hash algorithm, a bad digest,
    /// a bad size or a repeated path are refused.
    pub fn parse(text: &str) -> Result<Self, RecordError> {
        let mut entries = HashMap::new();
        for (number, row) in csv_rows(text)?.into_iter().enumerate() {
            let line = number + 1;
            let mut fields = row.into_iter();
            let path = fields.next().unwrap_or_default();
            if path.is_empty() {
                continue;
            }
            let hash_text = fields.next().unwrap_or_default();
            let size_text = fields.next().unwrap_or_default();
            let hash = if hash_text.is_empty() {
                None
            } else {
                let (algorithm, digest) = hash_text
                    .split_once('=')
                    .ok_or(RecordError::HashWithoutEquals(line))?;
                let algorithm = match algorithm {
                    "sha256" => HashAlgorithm::Sha256,
                    "sha384" => HashAlgorithm::Sha384,
                    "sha512" => HashAlgorithm::Sha512,
                    other => {
                        return Err(RecordError::UnknownHash {
                            line,
                            algorithm: super::requirement::quote(other),
                        });
                    }
                };
                let digest = URL_SAFE_NO_PAD
                    .decode(digest.trim_end_matches('='))
                    .map_err(|_| RecordError::BadDigest(line))?;
                Some((algorithm, digest))
            };
            let size = if size_text.is_empty() {
                None
            } else {
                Some(
                    size_text
                        .parse::<u64>()
                        .map_err(|_| RecordError::BadSize(line))?,
                )
            };
            let entry = RecordEntry {
                path: path.clone(),
                hash,
                size,
            };
            if entries.insert(path, entry).is_some() {
                return Err(RecordError::Duplicate(line));
            }
        }
        Ok(Self { entries })
    }
}

/// Splits CSV text into rows of fields (RFC 4180 quoting with `"`).
fn csv_rows(text: &str) -> Result<Vec<Vec<String>>, RecordError> {
    let mut rows = Vec::new();
    let mut row = Vec::new();
    let mut field = String::new();
    let mut chars = text.chars().peekable();
    let mut in_quotes = false;
    let mut any = false;
    while let Some(c) = chars.next() {
        any = true;
        if in_quotes {
            match c {
                '"' if chars.peek() == Some(&'"') => {
                    chars.next();
                    field.push('"');
                }
                '"' => in_quotes = false,
                _ => field.push(c),
            }
            continue;
        }
        match c {
            '"' if field.is_empty() => in_quotes = true,
            ',' => row.push(std::mem::take(&mut field)),
            '\r' => {}
            '\n' => {
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
                any = false;
            }
            _ => field.push(c),
        }
    }
    if in_quotes {
        return Err(RecordError::Unterminated);
    }
    if any {
        row.push(field);
        rows.push(row);
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_parse_with_hashes_sizes_and_quotes() {
        let text = "six.py,sha256=1ZI5zxxZpl2O5Jz2xEeoZ8nxi5s_FVtaxUmDYjJBlPE,34549\r\n\"odd,name.py\",sha256=AAAA,3\nsix-1.17.0.dist-info/RECORD,,\n";
        let r = Record::parse(text).unwrap();
        assert_eq!(r.entries.len(), 3);
        let six = &r.entries["six.py"];
        assert_eq!(six.size, Some(34549));
        assert_eq!(six.hash.as_ref().unwrap().0, HashAlgorithm::Sha256);
        assert_eq!(six.hash.as_ref().unwrap().1.len(), 32);
        assert!(r.entries.contains_key("odd,name.py"));
        assert_eq!(r.entries["six-1.17.0.dist-info/RECORD"].hash, None);
    }

    #[test]
    fn bad_rows_are_refused() {
        let err = Record::parse("a.py,md5=abc,1\n").unwrap_err();
        assert!(
            matches!(&err, RecordError::UnknownHash { line: 1, algorithm } if algorithm == "md5"),
            "{err:?}"
        );
        assert!(err.to_string().contains("md5"));
        assert!(Record::parse("a.py,sha256,1\n").is_err());
        assert!(Record::parse("a.py,sha256=!!,1\n").is_err());
        assert!(Record::parse("a.py,,x\n").is_err());
        assert!(matches!(
            Record::parse("a.py,,\na.py,,\n"),
            Err(RecordError::Duplicate(2))
        ));
        assert!(Record::parse("\"a.py,,\n").is_err());
    }

    #[test]
    fn hashes_are_written_as_record_does() {
        let digest = sha2::Sha256::digest(b"");
        assert_eq!(
            record_hash(&digest),
            "sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"
        );
        let mut h = HashAlgorithm::Sha256.hasher();
        h.update(b"");
        assert_eq!(h.finish(), digest.to_vec());
    }
}
