//! [`WheelFilename`]: `{name}-{version}(-{build})?-{python}-{abi}-{platform}.whl`
//! parsed, and whether a WASI CPython can take the wheel.
//!
//! A WASI CPython loads no native extension built for another platform, so
//! only pure-Python wheels fit: ABI `none`, platform `any`, and a Python tag
//! that covers the runtime (`py3`, `py2.py3`, `py3N` with N at most the
//! runtime's minor version, or `cp3M` for exactly the runtime's version).

use std::fmt;
use std::str::FromStr;

use pep440_rs::Version;
use pep508_rs::PackageName;

/// A parsed wheel file name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WheelFilename {
    /// Normalized project name.
    pub name: PackageName,
    /// Version.
    pub version: Version,
    /// Build tag, if any (starts with a digit).
    pub build: Option<String>,
    /// Python tags, e.g. `py2`, `py3`.
    pub python: Vec<String>,
    /// ABI tags, e.g. `none`, `cp312`.
    pub abi: Vec<String>,
    /// Platform tags, e.g. `any`, `manylinux_2_17_x86_64`.
    pub platform: Vec<String>,
}

/// Why a file name is not a wheel name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("'{name}' is not a wheel file name: {reason}")]
pub struct WheelFilenameError {
    name: String,
    reason: &'static str,
}

/// A Python version as `major.minor`, for tag checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PythonMinor {
    /// Major version (3).
    pub major: u64,
    /// Minor version (12 for 3.12).
    pub minor: u64,
}

impl PythonMinor {
    /// Reads `3.12` or `3.12.0`; `None` for anything else.
    pub fn parse(version: &str) -> Option<Self> {
        let mut parts = version.split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some(Self { major, minor })
    }
}

impl fmt::Display for PythonMinor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// How a wheel fits a WASI CPython.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fit {
    /// Pure Python, and the Python tag covers the runtime.
    Pure,
    /// Pure Python, but for other Python versions only (e.g. `py2-none-any`).
    OtherPython,
    /// Built for particular platforms or ABIs (native code).
    Platform,
}

impl WheelFilename {
    /// Whether a WASI CPython of version `python` can take this wheel.
    pub fn fit(&self, python: PythonMinor) -> Fit {
        let pure = self.abi.iter().any(|a| a == "none") && self.platform.iter().any(|p| p == "any");
        if !pure {
            return Fit::Platform;
        }
        if self.python.iter().any(|tag| python_tag_fits(tag, python)) {
            Fit::Pure
        } else {
            Fit::OtherPython
        }
    }

    /// The tag triples this name stands for, e.g. `py2-none-any`, `py3-none-any`.
    pub fn tags(&self) -> Vec<String> {
        let mut out = Vec::new();
        for p in &self.python {
            for a in &self.abi {
                for pl in &self.platform {
                    out.push(format!("{p}-{a}-{pl}"));
                }
            }
        }
        out
    }

    /// The compressed tag set as it appears in the name, e.g. `py2.py3-none-any`.
    pub fn tag_text(&self) -> String {
        format!(
            "{}-{}-{}",
            self.python.join("."),
            self.abi.join("."),
            self.platform.join(".")
        )
    }
}

/// Whether one Python tag covers `python`.
fn python_tag_fits(tag: &str, python: PythonMinor) -> bool {
    let major = python.major.to_string();
    if let Some(rest) = tag.strip_prefix("py") {
        let Some(minor) = rest.strip_prefix(major.as_str()) else {
            return false;
        };
        return minor.is_empty() || minor.parse::<u64>().is_ok_and(|m| m <= python.minor);
    }
    if let Some(rest) = tag.strip_prefix("cp") {
        return rest == format!("{}{}", python.major, python.minor);
    }
    false
}

impl FromStr for WheelFilename {
    type Err = WheelFilenameError;

    fn from_str(filename: &str) -> Result<Self, Self::Err> {
        let err = |reason| WheelFilenameError {
            name: filename
                .chars()
                .take(200)
                .flat_map(char::escape_debug)
                .collect(),
            reason,
        };
        let stem = filename
            .strip_suffix(".whl")
            .ok_or_else(|| err("it does not end in .whl"))?;
        if stem.contains(['/', '\\']) || stem.chars().any(char::is_control) {
            return Err(err("it contains a path separator or control character"));
        }
        let parts: Vec<&str> = stem.split('-').collect();
        let (name, version, build, tags) = match parts.as_slice() {
            [name, version, py, abi, plat] => (*name, *version, None, [*py, *abi, *plat]),
            [name, version, build, py, abi, plat] => {
                (*name, *version, Some(*build), [*py, *abi, *plat])
            }
            _ => return Err(err("it must have 5 or 6 parts separated by '-'")),
        };
        if parts.iter().any(|p| p.is_empty()) {
            return Err(err("a part is empty"));
        }
        let name = PackageName::from_str(name).map_err(|_| err("the project name is invalid"))?;
        let version = Version::from_str(version).map_err(|_| err("the version is invalid"))?;
        if let Some(build) = build
            && !build.starts_with(|c: char| c.is_ascii_digit())
        {
            return Err(err("the build tag must start with a digit"));
        }
        let split = |set: &str| -> Result<Vec<String>, WheelFilenameError> {
            let tags: Vec<String> = set.split('.').map(str::to_owned).collect();
            if tags
                .iter()
                .any(|t| t.is_empty() || !t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
            {
                return Err(err(
                    "a tag is empty or has characters other than letters, digits and '_'",
                ));
            }
            Ok(tags)
        };
        Ok(Self {
            name,
            version,
            build: build.map(str::to_owned),
            python: split(tags[0])?,
            abi: split(tags[1])?,
            platform: split(tags[2])?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const PY312: PythonMinor = PythonMinor {
        major: 3,
        minor: 12,
    };

    fn wheel(name: &str) -> WheelFilename {
        name.parse().unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn names_parse_into_their_parts() {
        let w = wheel("python_dateutil-2.9.0.post0-py2.py3-none-any.whl");
        assert_eq!(w.name.as_ref(), "python-dateutil");
        assert_eq!(w.version.to_string(), "2.9.0.post0");
        assert_eq!(w.build, None);
        assert_eq!(w.python, ["py2", "py3"]);
        assert_eq!(w.tags(), ["py2-none-any", "py3-none-any"]);
        assert_eq!(w.tag_text(), "py2.py3-none-any");

        let b = wheel("Foo.Bar-1.0-1abc-py3-none-any.whl");
        assert_eq!(b.name.as_ref(), "foo-bar");
        assert_eq!(b.build.as_deref(), Some("1abc"));
    }

    #[test]
    fn malformed_names_are_refused() {
        for bad in [
            "six-1.0-py3-none-any.zip",
            "six-1.0-py3-none.whl",
            "six-1.0-x-py3-none-any.whl",
            "six-notaversion!-py3-none-any.whl",
            "-1.0-py3-none-any.whl",
            "six-1.0-py3--any.whl",
            "six-1.0-py3-no ne-any.whl",
            "../six-1.0-py3-none-any.whl",
            "six-1.0-1-2-py3-none-any.whl",
            "",
            ".whl",
        ] {
            assert!(bad.parse::<WheelFilename>().is_err(), "{bad}");
        }
    }

    #[test]
    fn which_wheels_a_wasi_cpython_312_takes() {
        let table = [
            ("six-1.17.0-py2.py3-none-any.whl", Fit::Pure),
            ("attrs-23.2.0-py3-none-any.whl", Fit::Pure),
            ("x-1.0-py312-none-any.whl", Fit::Pure),
            ("x-1.0-py36-none-any.whl", Fit::Pure),
            ("x-1.0-py30-none-any.whl", Fit::Pure),
            ("x-1.0-cp312-none-any.whl", Fit::Pure),
            ("x-1.0-py313-none-any.whl", Fit::OtherPython),
            ("x-1.0-cp311-none-any.whl", Fit::OtherPython),
            ("x-1.0-py2-none-any.whl", Fit::OtherPython),
            ("x-1.0-py4-none-any.whl", Fit::OtherPython),
            (
                "numpy-2.1.0-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
                Fit::Platform,
            ),
            ("x-1.0-cp312-abi3-any.whl", Fit::Platform),
            ("x-1.0-py3-none-win_amd64.whl", Fit::Platform),
            ("x-1.0-py3-none-wasi_0_0_0_wasm32.whl", Fit::Platform),
        ];
        for (name, fit) in table {
            assert_eq!(wheel(name).fit(PY312), fit, "{name}");
        }
        assert_eq!(
            wheel("x-1.0-py313-none-any.whl").fit(PythonMinor {
                major: 3,
                minor: 13
            }),
            Fit::Pure
        );
    }

    #[test]
    fn python_versions_parse() {
        assert_eq!(PythonMinor::parse("3.12.0"), Some(PY312));
        assert_eq!(PythonMinor::parse("3.12"), Some(PY312));
        assert_eq!(PythonMinor::parse("3"), None);
        assert_eq!(PY312.to_string(), "3.12");
    }

    proptest! {
        #[test]
        fn any_text_parses_or_fails_without_panicking(s in "\\PC{0,80}") {
            let _ = s.parse::<WheelFilename>();
        }

        #[test]
        fn well_formed_names_round_trip(
            name in "[A-Za-z][A-Za-z0-9_.]{0,20}[A-Za-z0-9]",
            major in 0u32..100,
            minor in 0u32..100,
            build in proptest::option::of("[0-9][a-z0-9]{0,4}"),
            py in proptest::collection::vec("(py2|py3|py3[0-9]{1,2}|cp3[0-9]{1,2})", 1..3),
            abi in "(none|abi3|cp312)",
            plat in "(any|manylinux_2_17_x86_64|win_amd64)",
        ) {
            let build_part = build.as_ref().map(|b| format!("-{b}")).unwrap_or_default();
            let text = format!("{name}-{major}.{minor}{build_part}-{}-{abi}-{plat}.whl", py.join("."));
            let parsed: WheelFilename = text.parse().unwrap();
            let tag_text = parsed.tag_text();
            prop_assert_eq!(tag_text.split('-').nth(1).unwrap(), abi.as_str());
            prop_assert_eq!(&parsed.name, &PackageName::from_str(&name).unwrap());
            prop_assert_eq!(parsed.version.to_string(), format!("{major}.{minor}"));
            prop_assert_eq!(&parsed.build, &build);
            prop_assert_eq!(&parsed.python, &py);
        }
    }
}
