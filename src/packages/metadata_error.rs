//! [`MetadataError`]: why a wheel's `METADATA` or `WHEEL` file is refused,
//! quoting the value at fault (shortened and escaped).

use super::requirement::Pep508Error;

/// Why a `METADATA` or `WHEEL` file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    /// A header's value is longer than the installer reads.
    #[error("a {key} value is {len} bytes long, over the {limit} this installer reads")]
    TooLong {
        /// The header, lower-cased.
        key: String,
        /// The value's length.
        len: usize,
        /// The most read.
        limit: usize,
    },
    /// `Name` is not a valid project name.
    #[error("Name '{0}' is not a valid name")]
    BadName(String),
    /// `Version` is not a PEP 440 version.
    #[error("Version '{0}' is not a PEP 440 version")]
    BadVersion(String),
    /// More `Requires-Dist` lines than the installer reads.
    #[error("it lists more than {0} requirements (Requires-Dist), more than this installer reads")]
    TooManyRequirements(usize),
    /// A `Requires-Dist` value has non-ASCII characters.
    #[error("Requires-Dist '{0}' has non-ASCII characters")]
    NonAsciiRequirement(String),
    /// A `Requires-Dist` value does not parse.
    #[error("Requires-Dist '{value}' does not parse: {reason}")]
    BadRequirement {
        /// The value.
        value: String,
        /// What is wrong with it.
        #[source]
        reason: Pep508Error,
    },
    /// `Requires-Python` does not parse.
    #[error("Requires-Python '{0}' does not parse")]
    BadRequiresPython(String),
    /// A header every `METADATA` has is missing.
    #[error("it has no {0}")]
    Missing(&'static str),
    /// `Name` and `Version` are not those the wheel's file name gives.
    #[error("it says it is {found}, but the file name says {expected}")]
    NameMismatch {
        /// Name and version, as `METADATA` gives them.
        found: String,
        /// Name and version, as the file name gives them.
        expected: String,
    },
    /// `WHEEL` has no `Wheel-Version`.
    #[error("WHEEL has no Wheel-Version")]
    NoWheelVersion,
    /// `WHEEL` names a major version other than 1.
    #[error("WHEEL says Wheel-Version {0}; only 1.x is understood")]
    UnsupportedWheelVersion(String),
    /// The metadata the index gave for a wheel is not what the wheel says.
    #[error(
        "the wheel's own METADATA differs from the metadata read before downloading it (the index's metadata file, or ranges of the wheel from its file host): the index is inconsistent. Tell its owner, or use another index"
    )]
    Differs,
    /// The wheel is not pure Python.
    #[error("WHEEL does not say Root-Is-Purelib: true, so it is not a pure-Python wheel")]
    NotPurelib,
}
