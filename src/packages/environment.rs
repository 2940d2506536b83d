//! The PEP 508 marker environment of a sandbox: CPython compiled to WASI.
//!
//! The values are what the runtime itself reports (`sys.platform`,
//! `platform.system()`, ...), checked by an integration test that asks a
//! running sandbox, so `Requires-Dist: foo; sys_platform == "win32"` is left
//! out and `...; python_version >= "3.8"` is kept.

use pep508_rs::{MarkerEnvironment, MarkerEnvironmentBuilder};

/// `sys.platform` in a WASI CPython.
pub const SYS_PLATFORM: &str = "wasi";
/// `platform.system()` in a WASI CPython.
pub const PLATFORM_SYSTEM: &str = "wasi";
/// `platform.machine()` in a WASI CPython.
pub const PLATFORM_MACHINE: &str = "wasm32";
/// `platform.release()` and `platform.version()` in a WASI CPython.
pub const PLATFORM_RELEASE: &str = "0.0.0";

/// Why a runtime's Python version cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PythonVersionError {
    /// It is not dotted numbers.
    #[error("the runtime's python_version '{0}' is not of the form 3.12.0")]
    Form(String),
    /// It does not parse as a version.
    #[error("the runtime's python_version '{version}' is not a version: {source}")]
    NotAVersion {
        /// The version as the manifest gives it.
        version: String,
        /// Why it does not parse.
        source: pep440_rs::VersionParseError,
    },
}

/// The marker environment of a WASI CPython whose full version is
/// `python_full_version` (e.g. `3.12.0`).
pub fn wasi_environment(
    python_full_version: &str,
) -> Result<MarkerEnvironment, PythonVersionError> {
    let parts: Vec<&str> = python_full_version.split('.').collect();
    if parts.len() < 2 || parts.iter().any(|p| p.is_empty()) {
        return Err(PythonVersionError::Form(python_full_version.to_owned()));
    }
    let minor = format!("{}.{}", parts[0], parts[1]);
    MarkerEnvironment::try_from(MarkerEnvironmentBuilder {
        implementation_name: "cpython",
        implementation_version: python_full_version,
        os_name: "posix",
        platform_machine: PLATFORM_MACHINE,
        platform_python_implementation: "CPython",
        platform_release: PLATFORM_RELEASE,
        platform_system: PLATFORM_SYSTEM,
        platform_version: PLATFORM_RELEASE,
        python_full_version,
        python_version: &minor,
        sys_platform: SYS_PLATFORM,
    })
    .map_err(|source| PythonVersionError::NotAVersion {
        version: python_full_version.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pep508_rs::{ExtraName, Requirement};
    use std::str::FromStr;

    #[test]
    fn a_version_that_is_not_one_is_refused_by_kind() {
        assert!(matches!(
            wasi_environment("3"),
            Err(PythonVersionError::Form(v)) if v == "3"
        ));
        let err = wasi_environment("3.x.0").unwrap_err();
        assert!(
            matches!(&err, PythonVersionError::NotAVersion { version, .. } if version == "3.x.0"),
            "{err:?}"
        );
        assert!(std::error::Error::source(&err).is_some(), "{err:?}");
    }

    fn applies(req: &str, extras: &[&str]) -> bool {
        let env = wasi_environment("3.12.0").unwrap();
        let req = Requirement::<pep508_rs::VerbatimUrl>::from_str(req).unwrap();
        let extras: Vec<ExtraName> = extras
            .iter()
            .map(|e| ExtraName::from_str(e).unwrap())
            .collect();
        req.evaluate_markers(&env, &extras)
    }

    #[test]
    fn markers_are_evaluated_as_a_wasi_cpython_312() {
        assert!(applies("a; sys_platform == 'wasi'", &[]));
        assert!(!applies("a; sys_platform == 'win32'", &[]));
        assert!(!applies("a; platform_system == 'Windows'", &[]));
        assert!(applies("a; platform_system != 'Windows'", &[]));
        assert!(applies("a; os_name == 'posix'", &[]));
        assert!(applies("a; python_version >= '3.8'", &[]));
        assert!(!applies("a; python_version < '3.8'", &[]));
        assert!(applies("a; python_full_version == '3.12.0'", &[]));
        assert!(applies("a; implementation_name == 'cpython'", &[]));
        assert!(!applies("a; platform_python_implementation == 'PyPy'", &[]));
        assert!(!applies("a; platform_machine == 'x86_64'", &[]));
    }

    #[test]
    fn extra_markers_need_the_extra() {
        assert!(!applies("a; extra == 'socks'", &[]));
        assert!(applies("a; extra == 'socks'", &["socks"]));
        assert!(applies(
            "a; extra == 'Socks' and python_version > '3'",
            &["socks"]
        ));
    }

    #[test]
    fn bad_runtime_versions_are_reported() {
        assert!(wasi_environment("3").is_err());
        assert!(wasi_environment("x.y").is_err());
        assert!(wasi_environment("3.12").is_ok());
    }
}
