//! [`ManifestError`]: what is wrong with a runtime manifest; the source of
//! [`super::runtime::RuntimeError::BadManifest`], which names the file.

/// What is wrong with a runtime manifest.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The file could not be read.
    #[error("{0}")]
    Read(#[from] std::io::Error),

    /// The file is not TOML of a manifest's shape.
    #[error("{0}")]
    Toml(#[from] toml::de::Error),

    /// The runtime's name differs from its file's.
    #[error("it names the runtime '{inner}', but its file says '{file}'")]
    NameMismatch {
        /// The name inside.
        inner: String,
        /// The name of the file.
        file: String,
    },

    /// The module's sha256 is not a pin.
    #[error("sha256 must be 64 hex digits")]
    ModulePin,

    /// The module's path leaves the runtime directory.
    #[error("module: {0}")]
    ModulePath(#[source] OutsidePath),

    /// An artifact's path leaves the runtime directory.
    #[error("artifact {file}: {source}")]
    ArtifactPath {
        /// The artifact as the manifest names it.
        file: String,
        /// Why its path is refused.
        source: OutsidePath,
    },

    /// An artifact's sha256 is not a pin.
    #[error("artifact {0}: sha256 must be 64 hex digits")]
    ArtifactPin(String),

    /// A mount's guest path is not absolute and normalized.
    #[error("mount '{0}': guest must be an absolute, normalized path other than /")]
    MountGuest(String),

    /// A mount names an artifact the manifest does not list.
    #[error("mount '{guest}' names the artifact '{artifact}', which the manifest does not list")]
    MountArtifact {
        /// The mount's guest path.
        guest: String,
        /// The artifact it names.
        artifact: String,
    },
}

/// A manifest path that is not a relative path inside the runtime directory.
#[derive(Debug, thiserror::Error)]
#[error("'{0}' must be a relative path inside the runtime directory")]
pub struct OutsidePath(pub String);
