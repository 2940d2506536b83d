//! Static bearer tokens: a TOML file of token hashes, each naming a
//! principal and its limits, and the minting of new tokens.
//!
//! The file holds only sha256 hashes of tokens, never tokens. A token is 32
//! random bytes, so its hash cannot be turned back into it: the file may be
//! readable by others. It must not be writable by every user, who could add
//! a token of their own; the server refuses to start then.
//!
//! ```toml
//! [[token]]
//! sha256 = "<64 hex digits>"   # of the whole token, prefix included
//! principal = "alice"
//! max_sandboxes = 4            # optional, each of the three
//! max_memory_mb = 2048
//! max_disk_mb = 1024
//! ```
//!
//! Several tokens may name one principal (to rotate them); they must then
//! give it the same limits.

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use base64::Engine;
use rand::RngCore;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use toml::Spanned;

use super::error::AuthError;
use super::principal::{Principal, PrincipalLimits};

/// What every minted token starts with, so that it is recognisable in a
/// leak scanner and in a configuration file where it should not be.
pub const TOKEN_PREFIX: &str = "mcs_";

/// The tokens the server accepts, by hash.
#[derive(Clone)]
pub struct TokenTable {
    entries: Vec<Entry>,
}

#[derive(Clone)]
struct Entry {
    hash: [u8; 32],
    principal: Principal,
}

impl std::fmt::Debug for TokenTable {
    /// Names the principals, never the hashes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenTable")
            .field("tokens", &self.entries.len())
            .finish()
    }
}

/// The file as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    token: Vec<Spanned<RawEntry>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    sha256: Spanned<String>,
    principal: Spanned<String>,
    max_sandboxes: Option<usize>,
    max_memory_mb: Option<u64>,
    max_disk_mb: Option<u64>,
}

impl TokenTable {
    /// Reads and checks the tokens file.
    pub fn load(path: &Path) -> Result<Self, AuthError> {
        refuse_world_writable(path)?;
        let text =
            std::fs::read_to_string(path).map_err(|source| AuthError::TokensFileUnreadable {
                path: path.to_owned(),
                source,
            })?;
        Self::parse(&text).map_err(|(span, message)| AuthError::TokensFileInvalid {
            path: path.to_owned(),
            line: line_of(&text, span.start),
            message,
        })
    }

    /// Parses the text of a tokens file; on error, where and what.
    fn parse(text: &str) -> Result<Self, (Range<usize>, String)> {
        let file: File =
            toml::from_str(text).map_err(|e| (e.span().unwrap_or(0..0), e.message().to_owned()))?;
        let mut entries: Vec<Entry> = Vec::with_capacity(file.token.len());
        let mut limits_of: HashMap<String, PrincipalLimits> = HashMap::new();
        for raw in file.token {
            let span = raw.span();
            let raw = raw.into_inner();
            let hash = parse_hash(raw.sha256.get_ref()).map_err(|m| (raw.sha256.span(), m))?;
            let name = raw.principal.get_ref().clone();
            check_principal_name(&name).map_err(|m| (raw.principal.span(), m))?;
            if entries.iter().any(|e| e.hash == hash) {
                return Err((raw.sha256.span(), "this hash is listed twice".into()));
            }
            let limits = PrincipalLimits {
                max_sandboxes: raw.max_sandboxes,
                max_memory_mb: raw.max_memory_mb,
                max_disk_mb: raw.max_disk_mb,
            };
            if let Some(earlier) = limits_of.get(&name)
                && *earlier != limits
            {
                return Err((
                    span,
                    format!(
                        "the principal '{name}' has other limits in an earlier entry; give all of its tokens the same limits"
                    ),
                ));
            }
            limits_of.insert(name.clone(), limits.clone());
            entries.push(Entry {
                hash,
                principal: Principal { name, limits },
            });
        }
        Ok(Self { entries })
    }

    /// The principal `token` belongs to. The token's hash is compared with
    /// every entry in constant time, whether or not one matched already.
    pub fn lookup(&self, token: &str) -> Option<&Principal> {
        let hash: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for entry in &self.entries {
            if bool::from(entry.hash.ct_eq(&hash)) {
                found = Some(&entry.principal);
            }
        }
        found
    }

    /// How many tokens the table holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table holds no token.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The 32 bytes of a hash written as 64 hex digits.
fn parse_hash(text: &str) -> Result<[u8; 32], String> {
    let text = text.trim();
    let bad = || {
        format!(
            "sha256 must be 64 hex digits (the hash of the token, as `mcp-code-sandbox token` prints it), not {} characters",
            text.len()
        )
    };
    if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let mut hash = [0u8; 32];
    for (i, byte) in hash.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(hash)
}

/// A principal name: 1 to 128 characters, letters, digits and `._@:-`.
pub fn check_principal_name(name: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "._@:-".contains(c);
    if name.is_empty() || name.len() > 128 || !name.chars().all(allowed) {
        return Err(format!(
            "the principal '{name}' is not a name; use 1 to 128 letters, digits and . _ @ : -"
        ));
    }
    Ok(())
}

/// Refuses a file every user may write to.
fn refuse_world_writable(path: &Path) -> Result<(), AuthError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(path).map_err(|source| AuthError::TokensFileUnreadable {
            path: path.to_owned(),
            source,
        })?;
        if meta.permissions().mode() & 0o002 != 0 {
            return Err(AuthError::TokensFileWorldWritable {
                path: PathBuf::from(path),
            });
        }
    }
    Ok(())
}

/// The line (from 1) of a byte offset.
fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// A freshly minted token and the entry that admits it.
pub struct Minted {
    /// The token: shown once, kept by the client, stored nowhere here.
    pub token: String,
    /// The `[[token]]` entry to add to the tokens file (its hash only).
    pub entry: String,
}

impl std::fmt::Debug for Minted {
    /// Shows the entry, never the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Minted")
            .field("entry", &self.entry)
            .finish_non_exhaustive()
    }
}

/// Mints a token for `principal`: [`TOKEN_PREFIX`] and 32 random bytes in
/// URL-safe base64, with its tokens-file entry.
pub fn mint(principal: &str, limits: &PrincipalLimits) -> Result<Minted, String> {
    check_principal_name(principal)?;
    let mut secret = [0u8; 32];
    rand::rng().fill_bytes(&mut secret);
    let token = format!(
        "{TOKEN_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret)
    );
    let hash = crate::digest::hex(&Sha256::digest(token.as_bytes()));
    let mut entry = format!("[[token]]\nsha256 = \"{hash}\"\nprincipal = \"{principal}\"\n");
    let optional = [
        ("max_sandboxes", limits.max_sandboxes.map(|v| v as u64)),
        ("max_memory_mb", limits.max_memory_mb),
        ("max_disk_mb", limits.max_disk_mb),
    ];
    for (key, value) in optional {
        if let Some(value) = value {
            entry.push_str(&format!("{key} = {value}\n"));
        }
    }
    Ok(Minted { token, entry })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash_of(token: &str) -> String {
        crate::digest::hex(&Sha256::digest(token.as_bytes()))
    }

    fn entry(hash: &str, principal: &str) -> String {
        format!("[[token]]\nsha256 = \"{hash}\"\nprincipal = \"{principal}\"\n")
    }

    #[test]
    fn a_minted_token_is_found_by_its_entry() {
        let limits = PrincipalLimits {
            max_sandboxes: Some(3),
            max_memory_mb: None,
            max_disk_mb: Some(100),
        };
        let minted = mint("alice", &limits).unwrap();
        assert!(minted.token.starts_with(TOKEN_PREFIX));
        assert_eq!(minted.token.len(), TOKEN_PREFIX.len() + 43);
        assert!(!minted.entry.contains(&minted.token));
        assert!(!format!("{minted:?}").contains(&minted.token));
        let table = TokenTable::parse(&minted.entry).unwrap();
        let principal = table.lookup(&minted.token).unwrap();
        assert_eq!(principal.name, "alice");
        assert_eq!(principal.limits, limits);
        assert!(
            table
                .lookup(&minted.token[..minted.token.len() - 1])
                .is_none()
        );
        assert!(table.lookup(&format!("{}x", minted.token)).is_none());
        assert!(table.lookup(&hash_of(&minted.token)).is_none());
    }

    #[test]
    fn two_mints_differ() {
        let a = mint("a", &PrincipalLimits::default()).unwrap();
        let b = mint("a", &PrincipalLimits::default()).unwrap();
        assert_ne!(a.token, b.token);
    }

    #[test]
    fn a_hash_that_differs_only_in_its_last_byte_does_not_match() {
        let token = "mcs_same-prefix";
        let mut near = hash_of(token);
        let last = if near.ends_with('0') { "1" } else { "0" };
        near.replace_range(63..64, last);
        let table = TokenTable::parse(&entry(&near, "bob")).unwrap();
        assert!(table.lookup(token).is_none());
        let exact = TokenTable::parse(&entry(&hash_of(token), "bob")).unwrap();
        assert_eq!(exact.lookup(token).unwrap().name, "bob");
    }

    #[test]
    fn uppercase_hex_is_accepted() {
        let table = TokenTable::parse(&entry(&hash_of("t").to_uppercase(), "c")).unwrap();
        assert_eq!(table.lookup("t").unwrap().name, "c");
    }

    fn error_line(text: &str) -> (usize, String) {
        let (span, message) = TokenTable::parse(text).expect_err("an error");
        (line_of(text, span.start), message)
    }

    #[test]
    fn errors_name_the_line() {
        let good = entry(&hash_of("a"), "alice");
        let (line, message) = error_line(&format!("{good}{}", entry("abc", "bob")));
        assert_eq!(line, 5);
        assert!(message.contains("64 hex digits"), "{message}");

        let (line, message) = error_line(&format!("{good}{}", entry(&hash_of("b"), "b ob")));
        assert_eq!(line, 6);
        assert!(message.contains("not a name"), "{message}");

        let (line, message) = error_line(&format!(
            "{good}[[token]]\nsha256 = \"x\"\nprincipl = \"c\"\n"
        ));
        assert_eq!(line, 6);
        assert!(message.contains("principl"), "{message}");

        let (line, _) = error_line(&format!("{good}{good}"));
        assert_eq!(line, 5);

        let (line, _) = error_line("[[token]\n");
        assert_eq!(line, 1);
    }

    #[test]
    fn one_principal_keeps_one_set_of_limits() {
        let a = entry(&hash_of("a"), "alice");
        let b = format!("{}max_sandboxes = 2\n", entry(&hash_of("b"), "alice"));
        let (line, message) = error_line(&format!("{a}{b}"));
        assert_eq!(line, 4);
        assert!(message.contains("other limits"), "{message}");
        let same = format!("{a}{}", entry(&hash_of("b"), "alice"));
        let table = TokenTable::parse(&same).unwrap();
        assert_eq!(table.lookup("b").unwrap().name, "alice");
        assert_eq!(table.len(), 2);
    }

    #[test]
    fn an_empty_file_admits_nobody() {
        let table = TokenTable::parse("").unwrap();
        assert!(table.is_empty());
        assert!(table.lookup("").is_none());
    }

    #[cfg(unix)]
    #[test]
    fn a_world_writable_file_is_refused_and_a_readable_one_is_not() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.toml");
        std::fs::write(&path, entry(&hash_of("a"), "alice")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(TokenTable::load(&path).unwrap().len(), 1);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let err = TokenTable::load(&path).unwrap_err();
        assert!(
            matches!(err, AuthError::TokensFileWorldWritable { .. }),
            "{err}"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::write(&path, format!("{}oops\n", entry(&hash_of("a"), "alice"))).unwrap();
        let err = TokenTable::load(&path).unwrap_err().to_string();
        assert!(err.contains("line 4"), "{err}");
        assert!(err.contains("tokens.toml"), "{err}");
    }
}
