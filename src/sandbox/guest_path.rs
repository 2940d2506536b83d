//! [`GuestPath`]: the one way to name a file inside a sandbox.
//!
//! Paths arrive from MCP clients as text. They are read as the guest sees them:
//! `/` is the sandbox's root directory, and a relative path is relative to it
//! (the guest's working directory is `/`). Parsing is purely lexical and refuses
//! anything that could mean something else on the host: NUL and control
//! characters, backslashes and drive letters, `..` that climbs above the root,
//! and overlong names. What remains is a list of plain components that is joined
//! under a `cap_std::fs::Dir`, which also refuses symbolic links that lead out.

use std::fmt;
use std::path::PathBuf;

use super::error::SandboxError;

/// Longest accepted path, in bytes.
pub const MAX_PATH_BYTES: usize = 4096;
/// Longest accepted path component, in bytes.
pub const MAX_COMPONENT_BYTES: usize = 255;
/// Deepest accepted path, in components.
pub const MAX_DEPTH: usize = 128;

/// A normalized path inside a sandbox: zero or more plain components under `/`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GuestPath {
    components: Vec<String>,
}

impl GuestPath {
    /// The sandbox root, `/`.
    pub fn root() -> Self {
        Self {
            components: Vec::new(),
        }
    }

    /// Parses a path given by a client. An empty string is the root.
    pub fn parse(raw: &str) -> Result<Self, SandboxError> {
        let invalid = |reason: &str| SandboxError::InvalidPath {
            path: printable(raw),
            reason: reason.to_owned(),
        };
        if raw.len() > MAX_PATH_BYTES {
            return Err(invalid(&format!(
                "it is {} bytes long; paths are limited to {MAX_PATH_BYTES} bytes",
                raw.len()
            )));
        }
        if raw.chars().any(char::is_control) {
            return Err(invalid("it contains a NUL or control character"));
        }
        if raw.contains('\\') {
            return Err(invalid(
                "it contains a backslash; use '/' to separate directories",
            ));
        }
        let bytes = raw.as_bytes();
        if bytes.len() >= 2 && bytes[1] == b':' && bytes[0].is_ascii_alphabetic() {
            return Err(invalid(
                "it looks like a Windows drive path; sandbox paths start at '/'",
            ));
        }
        let mut components: Vec<String> = Vec::new();
        for part in raw.split('/') {
            match part {
                "" | "." => {}
                ".." => {
                    if components.pop().is_none() {
                        return Err(SandboxError::Escape(printable(raw)));
                    }
                }
                name => {
                    if name.len() > MAX_COMPONENT_BYTES {
                        return Err(invalid(&format!(
                            "a name in it is {} bytes long; names are limited to {MAX_COMPONENT_BYTES} bytes",
                            name.len()
                        )));
                    }
                    components.push(name.to_owned());
                }
            }
        }
        if components.len() > MAX_DEPTH {
            return Err(invalid(&format!(
                "it is {} directories deep; the limit is {MAX_DEPTH}",
                components.len()
            )));
        }
        Ok(Self { components })
    }

    /// Whether this is the sandbox root.
    pub fn is_root(&self) -> bool {
        self.components.is_empty()
    }

    /// The last component, if any.
    pub fn file_name(&self) -> Option<&str> {
        self.components.last().map(String::as_str)
    }

    /// The parent directory (the root is its own parent).
    pub fn parent(&self) -> GuestPath {
        let mut components = self.components.clone();
        components.pop();
        Self { components }
    }

    /// This path with `name` (one or more components) appended.
    pub fn join(&self, name: &str) -> Result<GuestPath, SandboxError> {
        Self::parse(&format!("{self}/{name}"))
    }

    /// The path relative to the sandbox root, for use with a `cap_std::fs::Dir`
    /// opened on it. The root is `.`.
    pub fn relative(&self) -> PathBuf {
        if self.components.is_empty() {
            PathBuf::from(".")
        } else {
            self.components.iter().collect()
        }
    }

    /// The components, outermost first.
    pub fn components(&self) -> &[String] {
        &self.components
    }
}

impl fmt::Display for GuestPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.components.is_empty() {
            return f.write_str("/");
        }
        for c in &self.components {
            write!(f, "/{c}")?;
        }
        Ok(())
    }
}

/// A client-supplied string made safe to quote in a message.
fn printable(raw: &str) -> String {
    let mut out: String = raw.chars().take(200).flat_map(char::escape_debug).collect();
    if raw.chars().count() > 200 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_and_relative_paths_name_the_same_file() {
        let a = GuestPath::parse("/data/x.csv").unwrap();
        let b = GuestPath::parse("data/./x.csv").unwrap();
        let c = GuestPath::parse("data//y/../x.csv").unwrap();
        assert_eq!(a, b);
        assert_eq!(a, c);
        assert_eq!(a.to_string(), "/data/x.csv");
        assert_eq!(a.relative(), PathBuf::from("data/x.csv"));
    }

    #[test]
    fn the_root_has_several_spellings() {
        for raw in ["", "/", ".", "/./", "a/.."] {
            assert!(GuestPath::parse(raw).unwrap().is_root(), "{raw}");
        }
        assert_eq!(GuestPath::root().relative(), PathBuf::from("."));
    }

    #[test]
    fn climbing_above_the_root_is_an_escape() {
        for raw in ["..", "../etc/passwd", "/a/../../b", "a/b/../../../c"] {
            assert!(
                matches!(GuestPath::parse(raw), Err(SandboxError::Escape(_))),
                "{raw}"
            );
        }
    }

    #[test]
    fn host_spellings_and_control_characters_are_refused() {
        for raw in [
            "ok.txt\0/../../etc/passwd",
            "a\nb",
            "..\\..\\etc\\passwd",
            "C:/Windows",
            "c:\\x",
            "\u{1b}[31m",
        ] {
            assert!(
                matches!(GuestPath::parse(raw), Err(SandboxError::InvalidPath { .. })),
                "{raw:?}"
            );
        }
    }

    #[test]
    fn overlong_names_paths_and_depths_are_refused() {
        assert!(GuestPath::parse(&"a".repeat(256)).is_err());
        assert!(GuestPath::parse(&"a".repeat(255)).is_ok());
        assert!(GuestPath::parse(&"a/".repeat(2049)).is_err());
        assert!(GuestPath::parse(&"a/".repeat(129)).is_err());
    }

    proptest::proptest! {
        /// Whatever a client sends, a parsed path is plain components under
        /// the root: no empty, `.` or `..` component, no separator, no NUL.
        #[test]
        fn parsed_paths_are_plain_components_under_the_root(
            tokens in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just(".".to_owned()),
                    proptest::strategy::Just("..".to_owned()),
                    proptest::strategy::Just("/".to_owned()),
                    proptest::strategy::Just("\\".to_owned()),
                    proptest::strategy::Just("\0".to_owned()),
                    proptest::strategy::Just("C:".to_owned()),
                    proptest::strategy::Just("a".repeat(256)),
                    "[a-z]{1,3}",
                    "\\PC{0,4}",
                ],
                0..24,
            )
        ) {
            let raw = tokens.concat();
            if let Ok(path) = GuestPath::parse(&raw) {
                for c in path.components() {
                    proptest::prop_assert!(!c.is_empty() && c != "." && c != "..");
                    proptest::prop_assert!(!c.contains('/') && !c.contains('\\') && !c.contains('\0'));
                    proptest::prop_assert!(c.len() <= MAX_COMPONENT_BYTES);
                }
                proptest::prop_assert!(path.relative().is_relative());
                proptest::prop_assert_eq!(GuestPath::parse(&path.to_string()).unwrap(), path);
            }
        }
    }

    #[test]
    fn parent_and_join_stay_normalized() {
        let p = GuestPath::parse("/a/b").unwrap();
        assert_eq!(p.parent().to_string(), "/a");
        assert_eq!(p.join("c").unwrap().to_string(), "/a/b/c");
        assert!(GuestPath::root().join("..").is_err());
        assert_eq!(p.file_name(), Some("b"));
    }
}
