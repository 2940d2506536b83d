//! [`Offer`]: the versions of one package a WASI CPython can take, from the
//! wheelhouse and (when asked) the index, each with its best wheel.

use pep440_rs::{Operator, Version, VersionSpecifiers};
use pep508_rs::PackageName;

use super::super::project_file::{FileKind, ProjectFile};
use super::super::wheel_name::{Fit, PythonMinor, WheelFilename};
use super::Installed;

/// One version that can be installed: its best wheel.
#[derive(Clone, Debug)]
pub(super) struct Usable {
    /// The version.
    pub version: Version,
    /// Its wheel's parsed name.
    pub wheel: WheelFilename,
    /// Its wheel.
    pub file: ProjectFile,
    /// Whether it is yanked (taken only when pinned with `==`).
    pub yanked: bool,
}

/// What the wheelhouse and the index offer for one package.
#[derive(Clone, Debug, Default)]
pub(super) struct Offer {
    /// Every file looked at, wheelhouse first (for messages).
    pub files: Vec<ProjectFile>,
    /// Usable versions from the wheelhouse, newest first.
    pub local: Vec<Usable>,
    /// Usable versions from the index, newest first: `None` while the index
    /// has not been asked (the wheelhouse had something).
    pub index: Option<Vec<Usable>>,
}

impl Offer {
    /// The offer of the wheelhouse's `files` alone.
    pub fn local(
        name: &PackageName,
        files: Vec<ProjectFile>,
        python: PythonMinor,
        python_full: &Version,
    ) -> Self {
        let local = usable(name, &files, python, python_full);
        Self {
            files,
            local,
            index: None,
        }
    }

    /// Adds what the index lists.
    pub fn with_index(
        mut self,
        name: &PackageName,
        files: Vec<ProjectFile>,
        python: PythonMinor,
        python_full: &Version,
    ) -> Self {
        self.index = Some(usable(name, &files, python, python_full));
        self.files.extend(files);
        self
    }

    /// Every usable version, wheelhouse first, each newest first.
    pub fn all(&self) -> impl Iterator<Item = &Usable> {
        self.local.iter().chain(self.index.iter().flatten())
    }

    /// The best wheel of `version`: the wheelhouse's when it has one.
    pub fn wheel_of(&self, version: &Version) -> Option<&Usable> {
        self.all().find(|u| &u.version == version)
    }
}

/// The versions of a package a requirement with `specifiers` admits: those
/// usable (a yanked one only when pinned with `==`, a pre-release only when
/// asked for or alone), and what is installed.
/// A built-in with compiled parts admits only itself.
pub(super) fn admitted(
    offer: &Offer,
    installed: Option<&Installed>,
    specifiers: &VersionSpecifiers,
) -> Vec<Version> {
    let pinned = specifiers
        .iter()
        .any(|s| matches!(s.operator(), Operator::Equal | Operator::ExactEqual));
    let mut versions: Vec<Version> = match installed {
        Some(i) if i.compiled => vec![i.version.clone()],
        _ => offer
            .all()
            .filter(|u| !u.yanked || pinned)
            .map(|u| u.version.clone())
            .chain(installed.map(|i| i.version.clone()))
            .collect(),
    };
    versions.retain(|v| specifiers.contains(v));
    // As pip: pre-releases only when asked for, or when nothing else fits
    // (what is installed stays a candidate).
    let asks_pre = specifiers.iter().any(|s| s.any_prerelease());
    if !asks_pre && versions.iter().any(|v| !v.any_prerelease()) {
        versions.retain(|v| !v.any_prerelease() || installed.is_some_and(|i| &i.version == v));
    }
    versions.sort();
    versions.dedup();
    versions
}

/// The usable versions among `files`, newest first, one wheel each (the
/// first listed).
fn usable(
    name: &PackageName,
    files: &[ProjectFile],
    python: PythonMinor,
    python_full: &Version,
) -> Vec<Usable> {
    let mut found: Vec<Usable> = Vec::new();
    for file in files {
        let FileKind::Wheel(wheel) = file.kind(name) else {
            continue;
        };
        if wheel.fit(python) != Fit::Pure {
            continue;
        }
        if let Some(rp) = file.requires_python.as_deref()
            && let Ok(spec) = rp.parse::<VersionSpecifiers>()
            && !spec.contains(python_full)
        {
            continue;
        }
        if found.iter().any(|u| u.version == wheel.version) {
            continue;
        }
        found.push(Usable {
            version: wheel.version.clone(),
            wheel,
            file: file.clone(),
            yanked: file.yanked.is_some(),
        });
    }
    found.sort_by(|a, b| b.version.cmp(&a.version));
    found
}
