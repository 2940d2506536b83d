//! Core metadata (`METADATA`) and the `WHEEL` file: RFC 822-style headers.
//!
//! Only what installing needs is read: `Name`, `Version`, `Requires-Dist`,
//! `Requires-Python`, `Provides-Extra`; and from `WHEEL`, `Wheel-Version` and
//! `Root-Is-Purelib`. The description body after the first blank line is
//! ignored.
//!
//! These files come from indexes and from guests (a sandbox's own
//! site-packages), so reading one is linear and bounded: at most
//! [`MAX_REQUIRES_DIST`] requirements, each at most
//! [`MAX_REQUIREMENT_TEXT`] bytes, and no deeper than the PEP 508 parser
//! may safely recurse (see `requirement.rs`).

use std::str::FromStr;

use pep440_rs::{Version, VersionSpecifiers};
use pep508_rs::{ExtraName, PackageName};

use super::metadata_error::MetadataError;
use super::requirement::Requirement;

/// Most `Requires-Dist` entries one distribution may list.
pub const MAX_REQUIRES_DIST: usize = 2000;
/// Longest `Requires-Dist`, `Requires-Python`, `Name` or `Version` value, in bytes.
pub const MAX_REQUIREMENT_TEXT: usize = 2048;

/// What installing needs from a `METADATA` file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoreMetadata {
    /// Normalized project name.
    pub name: PackageName,
    /// Version.
    pub version: Version,
    /// Dependencies, with their markers.
    pub requires_dist: Vec<Requirement>,
    /// The Python versions it supports, when it says.
    pub requires_python: Option<VersionSpecifiers>,
    /// Extras it defines.
    pub provides_extra: Vec<ExtraName>,
}

/// The headers of an RFC 822-style text: (lowercased name, value) in order,
/// continuation lines joined with a space.
pub fn headers(text: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        // Only an empty line ends the headers: a line of nothing but spaces
        // continues the one before (as Python's email parser, and so pip,
        // read it), as in licence texts pasted into `License:`.
        if line.is_empty() {
            break;
        }
        if line.starts_with([' ', '\t']) {
            if let Some((_, value)) = out.last_mut() {
                value.push(' ');
                value.push_str(line.trim());
            }
            continue;
        }
        if let Some((name, value)) = line.split_once(':') {
            out.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
    out
}

/// Refuses a value longer than [`MAX_REQUIREMENT_TEXT`].
fn bounded<'a>(key: &str, value: &'a str) -> Result<&'a str, MetadataError> {
    if value.len() > MAX_REQUIREMENT_TEXT {
        return Err(MetadataError::TooLong {
            key: key.to_owned(),
            len: value.len(),
            limit: MAX_REQUIREMENT_TEXT,
        });
    }
    Ok(value)
}

impl CoreMetadata {
    /// Parses a `METADATA` file.
    pub fn parse(text: &str) -> Result<Self, MetadataError> {
        let mut name = None;
        let mut version = None;
        let mut requires_dist = Vec::new();
        let mut requires_python = None;
        let mut provides_extra = Vec::new();
        for (key, value) in headers(text) {
            if matches!(
                key.as_str(),
                "name" | "version" | "requires-dist" | "requires-python" | "provides-extra"
            ) {
                bounded(&key, &value)?;
            }
            match key.as_str() {
                "name" => {
                    name = Some(
                        PackageName::from_str(&value)
                            .map_err(|_| MetadataError::BadName(short(&value)))?,
                    );
                }
                "version" => {
                    version = Some(
                        Version::from_str(&value)
                            .map_err(|_| MetadataError::BadVersion(short(&value)))?,
                    );
                }
                "requires-dist" => {
                    if requires_dist.len() >= MAX_REQUIRES_DIST {
                        return Err(MetadataError::TooManyRequirements(MAX_REQUIRES_DIST));
                    }
                    if !value.is_ascii() {
                        return Err(MetadataError::NonAsciiRequirement(short(&value)));
                    }
                    let requirement =
                        super::requirement::parse_pep508(&value).map_err(|reason| {
                            MetadataError::BadRequirement {
                                value: short(&value),
                                reason,
                            }
                        })?;
                    requires_dist.push(requirement);
                }
                "requires-python" => {
                    let specifiers = VersionSpecifiers::from_str(&value)
                        .map_err(|_| MetadataError::BadRequiresPython(short(&value)))?;
                    requires_python = Some(specifiers);
                }
                "provides-extra" => {
                    if let Ok(extra) = ExtraName::from_str(&value) {
                        provides_extra.push(extra);
                    }
                }
                _ => {}
            }
        }
        Ok(Self {
            name: name.ok_or(MetadataError::Missing("Name"))?,
            version: version.ok_or(MetadataError::Missing("Version"))?,
            requires_dist,
            requires_python,
            provides_extra,
        })
    }
}

/// What the `WHEEL` file says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WheelInfo {
    /// `Wheel-Version`, e.g. `1.0`.
    pub wheel_version: String,
    /// `Root-Is-Purelib`.
    pub root_is_purelib: bool,
}

impl WheelInfo {
    /// Parses a `WHEEL` file, refusing versions other than 1.x and wheels
    /// whose root is not purelib.
    pub fn parse(text: &str) -> Result<Self, MetadataError> {
        let headers = headers(text);
        let get = |key: &str| {
            headers
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        let wheel_version = get("wheel-version").ok_or(MetadataError::NoWheelVersion)?;
        if wheel_version.split('.').next() != Some("1") {
            return Err(MetadataError::UnsupportedWheelVersion(short(wheel_version)));
        }
        let root_is_purelib =
            get("root-is-purelib").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        if !root_is_purelib {
            return Err(MetadataError::NotPurelib);
        }
        Ok(Self {
            wheel_version: wheel_version.to_owned(),
            root_is_purelib,
        })
    }
}

/// A value from a file, shortened and escaped for a message.
fn short(value: &str) -> String {
    super::requirement::quote(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packages::requirement::Pep508Error;

    const REQUESTS: &str = "Metadata-Version: 2.1
Name: requests
Version: 2.32.3
Summary: Python HTTP for Humans.
Requires-Python: >=3.8
License: Apache-2.0
Requires-Dist: charset-normalizer <4,>=2
Requires-Dist: idna <4,>=2.5
Requires-Dist: urllib3 <3,>=1.21.1
Requires-Dist: certifi >=2017.4.17
Provides-Extra: security
Provides-Extra: socks
Requires-Dist: PySocks !=1.5.7,>=1.5.6 ; extra == 'socks'
Provides-Extra: use_chardet_on_py3
Requires-Dist: chardet <6,>=3.0.2 ; extra == 'use_chardet_on_py3'

Requires-Dist: not-a-header-this-is-the-description
";

    #[test]
    fn metadata_yields_name_version_and_dependencies() {
        let m = CoreMetadata::parse(REQUESTS).unwrap();
        assert_eq!(m.name.as_ref(), "requests");
        assert_eq!(m.version.to_string(), "2.32.3");
        assert_eq!(m.requires_python.unwrap().to_string(), ">=3.8");
        let deps: Vec<&str> = m.requires_dist.iter().map(|r| r.name.as_ref()).collect();
        assert_eq!(
            deps,
            [
                "charset-normalizer",
                "idna",
                "urllib3",
                "certifi",
                "pysocks",
                "chardet"
            ]
        );
        assert_eq!(m.provides_extra.len(), 3);
    }

    #[test]
    fn continuation_lines_and_crlf_are_handled() {
        let text = "Name: x\r\nVersion: 1.0\r\nRequires-Dist: a\r\n  >=1\r\n";
        let m = CoreMetadata::parse(text).unwrap();
        assert_eq!(m.requires_dist[0].to_string(), "a>=1");
    }

    #[test]
    fn a_line_of_spaces_inside_a_header_does_not_end_the_headers() {
        // As polars 2.1.0's METADATA has it: a licence with blank-looking
        // lines, and its one required dependency after it.
        let text = "Name: polars\nVersion: 2.1.0\nLicense: Copyright\n        \n        Permission\n\
                    Requires-Dist: polars-runtime-32==2.1.0\n\nbody\nRequires-Dist: not-a-header\n";
        let m = CoreMetadata::parse(text).unwrap();
        let deps: Vec<String> = m.requires_dist.iter().map(|r| r.to_string()).collect();
        assert_eq!(deps, ["polars-runtime-32==2.1.0"]);
    }

    #[test]
    fn broken_metadata_is_refused_with_the_reason() {
        assert!(
            CoreMetadata::parse("Version: 1.0\n")
                .unwrap_err()
                .to_string()
                .contains("Name")
        );
        assert!(
            CoreMetadata::parse("Name: x\n")
                .unwrap_err()
                .to_string()
                .contains("Version")
        );
        assert!(
            CoreMetadata::parse("Name: x\nVersion: one\n")
                .unwrap_err()
                .to_string()
                .contains("PEP 440")
        );
        let err = CoreMetadata::parse("Name: x\nVersion: 1\nRequires-Dist: !!!\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("Requires-Dist"), "{err}");
        assert!(CoreMetadata::parse("").is_err());
    }

    proptest::proptest! {
        /// Whatever an index serves as METADATA, parsing ends in a value or an
        /// error, never a panic.
        #[test]
        fn arbitrary_metadata_never_panics(
            lines in proptest::collection::vec("(Name|Version|Requires-Dist|Requires-Python|Provides-Extra|X): [ -~]{0,40}", 0..8)
        ) {
            let _ = CoreMetadata::parse(&lines.join("\n"));
        }

        /// The same for version and specifier text.
        #[test]
        fn arbitrary_versions_never_panic(v in "[0-9a-z.!+*<>=~ ,-]{0,24}", w in "[0-9.]{1,12}") {
            let _ = Version::from_str(&v);
            if let (Ok(spec), Ok(version)) = (VersionSpecifiers::from_str(&v), Version::from_str(&w)) {
                let _ = spec.contains(&version);
            }
        }
    }

    #[test]
    fn metadata_built_to_be_slow_or_deep_is_refused_quickly() {
        let head = "Name: x\nVersion: 1.0\n";
        let many: String = (0..=MAX_REQUIRES_DIST)
            .map(|i| format!("Requires-Dist: dep>=0.{i}\n"))
            .collect();
        let err = CoreMetadata::parse(&format!("{head}{many}"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("more than 2000 requirements"), "{err}");
        let fine: String = (0..MAX_REQUIRES_DIST)
            .map(|i| format!("Requires-Dist: dep>=0.{i}\n"))
            .collect();
        assert_eq!(
            CoreMetadata::parse(&format!("{head}{fine}"))
                .unwrap()
                .requires_dist
                .len(),
            MAX_REQUIRES_DIST
        );

        // The PEP 508 parser recurses once per parenthesis: a deep marker
        // would overflow the stack and abort the server.
        let deep = format!(
            "{head}Requires-Dist: a; {}python_version > '3'{}\n",
            "(".repeat(100_000),
            ")".repeat(100_000)
        );
        let started = std::time::Instant::now();
        let err = CoreMetadata::parse(&deep).unwrap_err().to_string();
        assert!(err.contains("bytes long") || err.contains("nest"), "{err}");
        let nested = format!(
            "{head}Requires-Dist: a; {}python_version > '3'{}\n",
            "(".repeat(40),
            ")".repeat(40)
        );
        assert!(
            CoreMetadata::parse(&nested)
                .unwrap_err()
                .to_string()
                .contains("nest")
        );
        let err = CoreMetadata::parse(&nested).unwrap_err();
        assert!(
            matches!(
                &err,
                MetadataError::BadRequirement {
                    reason: Pep508Error::TooDeep(_),
                    ..
                }
            ),
            "{err}"
        );
        assert!(std::error::Error::source(&err).is_some_and(|s| s.is::<Pep508Error>()));
        let long = format!(
            "{head}Requires-Dist: a; python_version > '{}'\n",
            "3".repeat(5000)
        );
        assert!(
            CoreMetadata::parse(&long)
                .unwrap_err()
                .to_string()
                .contains("bytes long")
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        let ok = format!("{head}Requires-Dist: a; ((python_version > '3'))\n");
        assert_eq!(CoreMetadata::parse(&ok).unwrap().requires_dist.len(), 1);
    }

    #[test]
    fn wheel_files_must_be_v1_and_purelib() {
        let ok = WheelInfo::parse("Wheel-Version: 1.0\nGenerator: bdist_wheel\nRoot-Is-Purelib: true\nTag: py3-none-any\n").unwrap();
        assert!(ok.root_is_purelib);
        assert!(WheelInfo::parse("Wheel-Version: 1.0\nRoot-Is-Purelib: false\n").is_err());
        assert!(WheelInfo::parse("Wheel-Version: 1.0\n").is_err());
        assert!(WheelInfo::parse("Wheel-Version: 2.0\nRoot-Is-Purelib: true\n").is_err());
        assert!(WheelInfo::parse("Root-Is-Purelib: true\n").is_err());
    }
}
