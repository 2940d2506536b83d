//! [`Resolver`]: picks one version of every package an install needs.
//!
//! Requirements are taken breadth first. Each package gets the newest version
//! that satisfies every specifier seen for it so far and has a wheel a WASI
//! CPython can take (pure Python, `Requires-Python` admitting the runtime,
//! not yanked unless pinned with `==`); an installed version that satisfies
//! them is kept. Dependencies come from the chosen wheel's metadata, with
//! markers evaluated for the sandbox and the extras asked for.
//!
//! There is no full backtracking: when a later requirement rules out a
//! version already picked, resolution starts again with the combined
//! requirement applied from the start (a few times at most); if no version
//! satisfies both sides, the error names both. The wheelhouse is asked before
//! any index: when it has a fitting wheel, the index is not contacted.
//!
//! Requirements come from indexes and from guests (site-packages), so the
//! work is linear in them and paid for from the install's [`InstallBudget`]:
//! one step per requirement taken from the queue, per file sorted and per
//! version check. A requirement repeated with the same specifiers adds
//! nothing; messages quote a bounded number of requirements.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use async_trait::async_trait;
use pep440_rs::{Operator, Version, VersionSpecifiers};
use pep508_rs::{ExtraName, MarkerEnvironment, PackageName};

use super::budget::InstallBudget;
use super::error::{PackageError, clip, some_of};
use super::metadata::CoreMetadata;
use super::metadata_error::MetadataError;
use super::project_file::{FileKind, ProjectFile};
use super::requirement::{Requirement, specifiers};
use super::wheel_name::{Fit, PythonMinor, WheelFilename};

/// Restarts allowed when a later requirement rules out an earlier pick.
const MAX_RESTARTS: usize = 8;
/// Candidate versions whose metadata is read before giving up on a package.
const MAX_METADATA_TRIES: usize = 5;
/// Tags quoted in a "not pure" refusal.
const SAMPLE_TAGS: usize = 6;
/// Requirements quoted in one message.
const SHOWN_ORIGINS: usize = 4;
/// Notes one resolution reports.
const MAX_NOTES: usize = 20;
/// Characters of text from an index (a yank reason, a `Requires-Python`)
/// quoted in a message.
const SHOWN_TEXT_CHARS: usize = 200;

/// What the resolver asks of the world (the installer, or a test double).
#[async_trait]
pub trait Source: Send + Sync {
    /// Files the wheelhouse holds for `name` (none without a wheelhouse).
    fn local_files(&self, name: &PackageName) -> Vec<ProjectFile>;
    /// Files the index lists for `name`: `Ok(None)` when no index knows it
    /// or none is configured.
    async fn index_files(
        &self,
        name: &PackageName,
    ) -> Result<Option<Arc<Vec<ProjectFile>>>, PackageError>;
    /// The core metadata of a wheel.
    async fn metadata(
        &self,
        file: &ProjectFile,
        wheel: &WheelFilename,
    ) -> Result<CoreMetadata, PackageError>;
    /// Where names are looked for, in words, for "not found" messages.
    fn searched(&self) -> String;
}

/// A distribution already in the sandbox.
#[derive(Clone, Debug)]
pub struct Installed {
    /// Its version.
    pub version: Version,
    /// Its dependencies.
    pub requires_dist: Vec<Requirement>,
    /// Whether the runtime itself carries it (it can be used, not replaced).
    pub built_in: bool,
}

/// How a resolved package is satisfied.
#[derive(Clone, Debug)]
pub enum Choice {
    /// By what is installed.
    Installed,
    /// By this wheel.
    New {
        /// The file.
        file: Box<ProjectFile>,
        /// Its parsed name.
        wheel: Box<WheelFilename>,
    },
}

/// One package of a resolution.
#[derive(Clone, Debug)]
pub struct Resolved {
    /// Its name.
    pub name: PackageName,
    /// The version picked.
    pub version: Version,
    /// Installed already, or a wheel to install.
    pub choice: Choice,
}

/// The result of resolving.
#[derive(Clone, Debug, Default)]
pub struct Resolution {
    /// Every package needed, in the order they were picked.
    pub packages: Vec<Resolved>,
    /// Things worth telling the user (skipped markers, unknown extras).
    pub notes: Vec<String>,
}

/// The resolver's fixed inputs.
pub struct Resolver<'a> {
    /// Where files and metadata come from.
    pub source: &'a dyn Source,
    /// The sandbox's marker environment.
    pub env: &'a MarkerEnvironment,
    /// The sandbox's Python, for tags.
    pub python: PythonMinor,
    /// The sandbox's full Python version, for `Requires-Python`.
    pub python_full: Version,
    /// What is installed already.
    pub installed: &'a HashMap<PackageName, Installed>,
    /// Most packages one resolution may pick.
    pub max_packages: usize,
    /// What the resolution may spend, and when it must stop.
    pub budget: &'a InstallBudget,
    /// Progress messages.
    pub progress: &'a (dyn Fn(String) + Send + Sync),
}

/// One requirement on a package and who made it.
#[derive(Clone, Debug)]
struct Constraint {
    specifiers: VersionSpecifiers,
    origin: String,
    from_user: bool,
}

/// A requirement waiting to be processed.
struct Pending {
    requirement: Requirement,
    origin: String,
    from_user: bool,
    parent_extras: Arc<[ExtraName]>,
}

/// The notes of a resolution, at most [`MAX_NOTES`] of them.
#[derive(Default)]
struct Notes {
    kept: Vec<String>,
    dropped: usize,
}

impl Notes {
    fn push(&mut self, note: String) {
        if self.kept.len() < MAX_NOTES {
            self.kept.push(note);
        } else {
            self.dropped += 1;
        }
    }

    fn into_vec(mut self) -> Vec<String> {
        if self.dropped > 0 {
            self.kept.push(format!("and {} more notes", self.dropped));
        }
        self.kept
    }
}

/// The constraints seen on each package in one attempt; a repeated one
/// (same package, same specifiers) is kept once.
#[derive(Default)]
struct Constraints {
    by_name: HashMap<PackageName, Vec<Constraint>>,
    seen: HashSet<(PackageName, String)>,
}

impl Constraints {
    /// Records `constraint` on `name`; whether it was new.
    fn add(&mut self, name: &PackageName, constraint: Constraint) -> bool {
        if !self
            .seen
            .insert((name.clone(), constraint.specifiers.to_string()))
        {
            return false;
        }
        self.by_name
            .entry(name.clone())
            .or_default()
            .push(constraint);
        true
    }

    fn on(&self, name: &PackageName) -> &[Constraint] {
        self.by_name.get(name).map_or(&[], Vec::as_slice)
    }
}

/// A package picked in this attempt.
struct Picked {
    name: PackageName,
    version: Version,
    choice: Choice,
    requires_dist: Vec<Requirement>,
    extras: BTreeSet<ExtraName>,
}

/// One attempt's state: what is still to look at, the constraints seen,
/// the packages picked so far, and the notes.
#[derive(Default)]
struct Attempt {
    queue: VecDeque<Pending>,
    constraints: Constraints,
    picked: Vec<Picked>,
    by_name: HashMap<PackageName, usize>,
    notes: Notes,
}

impl Attempt {
    /// An attempt that starts from the user's requirements.
    fn new(requirements: &[Requirement]) -> Self {
        let queue = requirements
            .iter()
            .map(|r| Pending {
                requirement: r.clone(),
                origin: format!("you asked for `{r}`"),
                from_user: true,
                parent_extras: Arc::from(Vec::new()),
            })
            .collect();
        Self {
            queue,
            ..Self::default()
        }
    }

    /// The packages picked, in order, and the notes.
    fn into_resolution(self) -> Resolution {
        Resolution {
            packages: self
                .picked
                .into_iter()
                .map(|p| Resolved {
                    name: p.name,
                    version: p.version,
                    choice: p.choice,
                })
                .collect(),
            notes: self.notes.into_vec(),
        }
    }
}

/// Why an attempt stopped.
enum Stop {
    /// Start again with these constraints on a package applied from the start.
    Restart {
        name: PackageName,
        constraints: Vec<Constraint>,
        conflict: PackageError,
    },
    Fail(PackageError),
}

impl From<PackageError> for Stop {
    fn from(e: PackageError) -> Self {
        Self::Fail(e)
    }
}

/// The files of one package sorted into what can be installed and why the
/// rest cannot.
#[derive(Default)]
struct Selection {
    /// Installable wheels, best first.
    candidates: Vec<(WheelFilename, ProjectFile)>,
    /// Every version there is, newest first.
    versions: Vec<Version>,
    /// Whether any version matched the specifiers.
    any_match: bool,
    yanked: Option<(Version, String)>,
    wrong_python: Option<(Version, String)>,
    platform: Option<(Version, Vec<String>)>,
    sdist: Option<Version>,
}

impl Resolver<'_> {
    /// Resolves `requirements` (the user's).
    pub async fn resolve(&self, requirements: &[Requirement]) -> Result<Resolution, PackageError> {
        let mut hints: HashMap<PackageName, Vec<Constraint>> = HashMap::new();
        let mut last_conflict = None;
        for _ in 0..=MAX_RESTARTS {
            match self.attempt(requirements, &hints).await {
                Ok(resolution) => return Ok(resolution),
                Err(Stop::Fail(e)) => return Err(e),
                Err(Stop::Restart {
                    name,
                    constraints,
                    conflict,
                }) => {
                    hints.insert(name, constraints);
                    last_conflict = Some(conflict);
                }
            }
        }
        Err(last_conflict.unwrap_or(PackageError::Internal("resolution did not settle".into())))
    }

    /// One pass over the requirements and their dependencies, breadth
    /// first: each requirement whose marker holds adds its constraint, then
    /// either widens a package already picked or picks a new one.
    async fn attempt(
        &self,
        requirements: &[Requirement],
        hints: &HashMap<PackageName, Vec<Constraint>>,
    ) -> Result<Resolution, Stop> {
        let mut state = Attempt::new(requirements);
        while let Some(pending) = state.queue.pop_front() {
            self.budget.spend(1)?;
            let Some(constraint) = self.admit(&pending, &mut state.notes) else {
                continue;
            };
            let req = &pending.requirement;
            let is_new = state.constraints.add(&req.name, constraint.clone());
            match state.by_name.get(&req.name).copied() {
                Some(i) => self.widen(&mut state, i, req, is_new, &constraint).await?,
                None => self.pick(&mut state, req, hints).await?,
            }
        }
        Ok(state.into_resolution())
    }

    /// The constraint a pending requirement adds, or `None` when its marker
    /// does not hold in the sandbox (noted for the user's own requirements).
    fn admit(&self, pending: &Pending, notes: &mut Notes) -> Option<Constraint> {
        let req = &pending.requirement;
        if !req.marker.evaluate(self.env, &pending.parent_extras) {
            if pending.from_user {
                notes.push(format!(
                    "skipped `{req}`: its marker does not hold in this sandbox (CPython on WASI)"
                ));
            }
            return None;
        }
        Some(Constraint {
            specifiers: specifiers(req),
            origin: pending.origin.clone(),
            from_user: pending.from_user,
        })
    }

    /// A package picked already is required again: a new constraint must
    /// admit the version picked (else the conflict decides), and extras it
    /// did not have yet queue the dependencies they add.
    async fn widen(
        &self,
        state: &mut Attempt,
        i: usize,
        req: &Requirement,
        is_new: bool,
        constraint: &Constraint,
    ) -> Result<(), Stop> {
        let p = &mut state.picked[i];
        if is_new && !constraint.specifiers.contains(&p.version) {
            let all = state.constraints.on(&req.name);
            return Err(self.conflict(&req.name, &p.version, all, constraint).await);
        }
        let old: Vec<ExtraName> = p.extras.iter().cloned().collect();
        let new: Vec<ExtraName> = req
            .extras
            .iter()
            .filter(|e| !p.extras.contains(*e))
            .cloned()
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        p.extras.extend(new);
        let now: Arc<[ExtraName]> = p.extras.iter().cloned().collect();
        self.budget.spend(p.requires_dist.len() as u64)?;
        for dep in &p.requires_dist {
            if dep.marker.evaluate(self.env, &now) && !dep.marker.evaluate(self.env, &old) {
                state.queue.push_back(Pending {
                    requirement: dep.clone(),
                    origin: format!(
                        "`{} {}` requires `{}`",
                        p.name,
                        p.version,
                        strip_marker(dep)
                    ),
                    from_user: false,
                    parent_extras: now.clone(),
                });
            }
        }
        Ok(())
    }

    /// A package not picked yet: choose its version under every constraint
    /// seen on it (and the hints of earlier attempts), note extras it does
    /// not provide, and queue the dependencies that apply.
    async fn pick(
        &self,
        state: &mut Attempt,
        req: &Requirement,
        hints: &HashMap<PackageName, Vec<Constraint>>,
    ) -> Result<(), Stop> {
        let name = req.name.clone();
        let mut effective = state.constraints.on(&name).to_vec();
        if let Some(h) = hints.get(&name) {
            effective.extend(h.iter().cloned());
        }
        let (version, choice, requires_dist, provides_extra) =
            self.choose(&name, &effective).await?;
        (self.progress)(format!("resolved {name} {version}"));
        let extras: BTreeSet<ExtraName> = req.extras.iter().cloned().collect();
        if let Some(provided) = &provides_extra {
            let provided: HashSet<&ExtraName> = provided.iter().collect();
            for extra in extras.iter().filter(|e| !provided.contains(e)) {
                state.notes.push(format!(
                    "{name} {version} has no extra '{extra}'; it was ignored"
                ));
            }
        }
        let extra_list: Arc<[ExtraName]> = extras.iter().cloned().collect();
        self.budget.spend(requires_dist.len() as u64)?;
        for dep in requires_dist
            .iter()
            .filter(|dep| dep.marker.evaluate(self.env, &extra_list))
        {
            state.queue.push_back(Pending {
                requirement: dep.clone(),
                origin: format!("`{name} {version}` requires `{}`", strip_marker(dep)),
                from_user: false,
                parent_extras: extra_list.clone(),
            });
        }
        state.by_name.insert(name.clone(), state.picked.len());
        state.picked.push(Picked {
            name,
            version,
            choice,
            requires_dist,
            extras,
        });
        if state.picked.len() > self.max_packages {
            return Err(Stop::Fail(PackageError::TooManyPackages {
                limit: self.max_packages,
            }));
        }
        Ok(())
    }

    /// A later constraint rules out the version picked for `name`: restart
    /// if some version satisfies everything, else report both sides.
    async fn conflict(
        &self,
        name: &PackageName,
        picked: &Version,
        all: &[Constraint],
        newest: &Constraint,
    ) -> Stop {
        let earlier: Vec<&str> = all[..all.len() - 1]
            .iter()
            .map(|c| c.origin.as_str())
            .collect();
        let first = format!(
            "{} ({name} {picked} was picked)",
            some_of(&earlier, SHOWN_ORIGINS, " and ")
        );
        let conflict = PackageError::Conflict {
            name: name.to_string(),
            first,
            second: newest.origin.clone(),
        };
        let installed_fits = self
            .installed
            .get(name)
            .is_some_and(|i| all.iter().all(|c| c.specifiers.contains(&i.version)));
        let mut files = self.source.local_files(name);
        match self.source.index_files(name).await {
            Ok(Some(index)) => files.extend(index.iter().cloned()),
            Ok(None) => {}
            Err(e) => return Stop::Fail(e),
        }
        let selection = match self.select(name, &files, all) {
            Ok(selection) => selection,
            Err(e) => return Stop::Fail(e),
        };
        let satisfiable = installed_fits || !selection.candidates.is_empty();
        if satisfiable {
            Stop::Restart {
                name: name.clone(),
                constraints: all.to_vec(),
                conflict,
            }
        } else {
            Stop::Fail(conflict)
        }
    }

    /// Picks a version of `name` satisfying `constraints`: what is installed
    /// if it fits, else the newest fitting wheel (wheelhouse first).
    async fn choose(
        &self,
        name: &PackageName,
        constraints: &[Constraint],
    ) -> Result<(Version, Choice, Vec<Requirement>, Option<Vec<ExtraName>>), PackageError> {
        if let Some(installed) = self.installed.get(name) {
            let refusing = constraints
                .iter()
                .find(|c| !c.specifiers.contains(&installed.version));
            match refusing {
                None => {
                    return Ok((
                        installed.version.clone(),
                        Choice::Installed,
                        installed.requires_dist.clone(),
                        None,
                    ));
                }
                Some(c) if installed.built_in => {
                    return Err(PackageError::BuiltIn {
                        name: name.to_string(),
                        version: installed.version.to_string(),
                        wanted: c.specifiers.to_string(),
                        origin: c.origin.clone(),
                    });
                }
                Some(_) => {}
            }
        }
        let local = self.source.local_files(name);
        let mut skipped = Vec::new();
        if !local.is_empty() {
            let selection = self.select(name, &local, constraints)?;
            if let Some(found) = self.first_usable(name, &selection, &mut skipped).await? {
                return Ok(found);
            }
        }
        let index = self.source.index_files(name).await?;
        let mut files = local;
        let from_index = index.is_some();
        if let Some(index) = index {
            files.extend(index.iter().cloned());
        }
        let selection = self.select(name, &files, constraints)?;
        if from_index && let Some(found) = self.first_usable(name, &selection, &mut skipped).await?
        {
            return Ok(found);
        }
        Err(self.explain(name, &files, &selection, constraints, &skipped))
    }

    /// The first candidate whose metadata admits this Python.
    async fn first_usable(
        &self,
        name: &PackageName,
        selection: &Selection,
        skipped: &mut Vec<(Version, String)>,
    ) -> Result<Option<(Version, Choice, Vec<Requirement>, Option<Vec<ExtraName>>)>, PackageError>
    {
        let mut tried = BTreeSet::new();
        for (wheel, file) in &selection.candidates {
            if tried.contains(&wheel.version) || skipped.iter().any(|(v, _)| v == &wheel.version) {
                continue;
            }
            if tried.len() >= MAX_METADATA_TRIES {
                break;
            }
            tried.insert(wheel.version.clone());
            let metadata = self.source.metadata(file, wheel).await?;
            if &metadata.name != name || metadata.version != wheel.version {
                return Err(PackageError::BadMetadata {
                    filename: file.filename.clone(),
                    reason: MetadataError::NameMismatch {
                        found: format!("{} {}", metadata.name, metadata.version),
                        expected: format!("{} {}", wheel.name, wheel.version),
                    },
                });
            }
            if let Some(rp) = &metadata.requires_python
                && !rp.contains(&self.python_full)
            {
                skipped.push((
                    wheel.version.clone(),
                    clip(&format!("Requires-Python {rp}"), SHOWN_TEXT_CHARS),
                ));
                continue;
            }
            return Ok(Some((
                wheel.version.clone(),
                Choice::New {
                    file: Box::new(file.clone()),
                    wheel: Box::new(wheel.clone()),
                },
                metadata.requires_dist,
                Some(metadata.provides_extra),
            )));
        }
        Ok(None)
    }

    /// Sorts `files` into installable wheels (best first) and reasons,
    /// paying one step per file and per version check.
    fn select(
        &self,
        name: &PackageName,
        files: &[ProjectFile],
        constraints: &[Constraint],
    ) -> Result<Selection, PackageError> {
        self.budget.spend(files.len() as u64)?;
        let mut by_version: BTreeMap<Version, Vec<(FileKind, &ProjectFile)>> = BTreeMap::new();
        for file in files {
            match file.kind(name) {
                FileKind::Wheel(w) => by_version
                    .entry(w.version.clone())
                    .or_default()
                    .push((FileKind::Wheel(w), file)),
                FileKind::Sdist(Some(v)) => by_version
                    .entry(v.clone())
                    .or_default()
                    .push((FileKind::Sdist(Some(v)), file)),
                _ => {}
            }
        }
        self.budget
            .spend((by_version.len() as u64).saturating_mul(constraints.len() as u64))?;
        let mut selection = Selection {
            versions: by_version.keys().rev().cloned().collect(),
            ..Selection::default()
        };
        let allow_pre_asked = constraints
            .iter()
            .any(|c| c.specifiers.iter().any(|s| s.any_prerelease()));
        let pinned = constraints.iter().any(|c| {
            c.specifiers
                .iter()
                .any(|s| matches!(s.operator(), Operator::Equal | Operator::ExactEqual))
        });
        let matching: Vec<&Version> = by_version
            .keys()
            .rev()
            .filter(|v| constraints.iter().all(|c| c.specifiers.contains(v)))
            .collect();
        selection.any_match = !matching.is_empty();
        let finals: Vec<&Version> = matching
            .iter()
            .copied()
            .filter(|v| !v.any_prerelease())
            .collect();
        let matching = if allow_pre_asked || finals.is_empty() {
            matching
        } else {
            finals
        };
        for version in matching {
            for (kind, file) in &by_version[version] {
                match kind {
                    FileKind::Wheel(wheel) => match wheel.fit(self.python) {
                        Fit::Platform => {
                            let entry = selection
                                .platform
                                .get_or_insert_with(|| (version.clone(), Vec::new()));
                            if &entry.0 == version {
                                entry.1.push(wheel.tag_text());
                            }
                        }
                        Fit::OtherPython => {
                            selection.wrong_python.get_or_insert_with(|| {
                                (version.clone(), format!("tags {}", wheel.tag_text()))
                            });
                        }
                        Fit::Pure => {
                            if let Some(rp) = file.requires_python.as_deref()
                                && let Ok(spec) = rp.parse::<VersionSpecifiers>()
                                && !spec.contains(&self.python_full)
                            {
                                selection.wrong_python.get_or_insert_with(|| {
                                    (
                                        version.clone(),
                                        clip(&format!("Requires-Python {spec}"), SHOWN_TEXT_CHARS),
                                    )
                                });
                                continue;
                            }
                            if let Some(reason) = &file.yanked
                                && !pinned
                            {
                                selection.yanked.get_or_insert_with(|| {
                                    (version.clone(), clip(reason, SHOWN_TEXT_CHARS))
                                });
                                continue;
                            }
                            selection.candidates.push((wheel.clone(), (*file).clone()));
                        }
                    },
                    FileKind::Sdist(_) => {
                        selection.sdist.get_or_insert_with(|| version.clone());
                    }
                    FileKind::Other => {}
                }
            }
        }
        Ok(selection)
    }

    /// The error for a package with no installable version.
    fn explain(
        &self,
        name: &PackageName,
        files: &[ProjectFile],
        selection: &Selection,
        constraints: &[Constraint],
        skipped: &[(Version, String)],
    ) -> PackageError {
        let wanted_by = wanted_by(name, constraints);
        let python = self.python_full.to_string();
        if files.is_empty() {
            return PackageError::UnknownPackage {
                name: name.to_string(),
                searched: self.source.searched(),
                wanted_by,
            };
        }
        if !selection.any_match {
            let wanted: Vec<String> = constraints
                .iter()
                .filter(|c| !c.specifiers.is_empty())
                .map(|c| c.specifiers.to_string())
                .collect();
            let mut available: Vec<String> = selection
                .versions
                .iter()
                .take(12)
                .map(ToString::to_string)
                .collect();
            if selection.versions.len() > 12 {
                available.push(format!("and {} older", selection.versions.len() - 12));
            }
            let origins: Vec<&str> = constraints.iter().map(|c| c.origin.as_str()).collect();
            return PackageError::NoMatchingVersion {
                name: name.to_string(),
                wanted: some_of(&wanted, SHOWN_ORIGINS, ", "),
                origin: some_of(&origins, SHOWN_ORIGINS, "; "),
                available: if available.is_empty() {
                    "none".into()
                } else {
                    available.join(", ")
                },
            };
        }
        if let Some((version, detail)) = skipped.first().or(selection.wrong_python.as_ref()) {
            return PackageError::WrongPython {
                name: name.to_string(),
                version: version.to_string(),
                detail: detail.clone(),
                python,
                wanted_by,
            };
        }
        if let Some((version, reason)) = &selection.yanked {
            return PackageError::Yanked {
                name: name.to_string(),
                version: version.to_string(),
                reason: if reason.is_empty() {
                    String::new()
                } else {
                    format!(": {reason}")
                },
            };
        }
        if let Some((version, tags)) = &selection.platform {
            let own = format!("cp{}{}", self.python.major, self.python.minor);
            let mut tags = tags.clone();
            tags.sort_by_key(|t| !t.starts_with(&own));
            let mut sample: Vec<String> = tags.iter().take(SAMPLE_TAGS).cloned().collect();
            if tags.len() > SAMPLE_TAGS {
                sample.push(format!("and {} more", tags.len() - SAMPLE_TAGS));
            }
            return PackageError::NotPure {
                name: name.to_string(),
                version: version.to_string(),
                python,
                offers: format!(
                    "wheels built for particular platforms ({}){}",
                    sample.join(", "),
                    if selection.sdist.is_some() {
                        ", besides a source archive that would need a compiler and running its build on the server"
                    } else {
                        ""
                    }
                ),
                wanted_by,
            };
        }
        let version = selection
            .sdist
            .clone()
            .or_else(|| selection.versions.first().cloned())
            .map(|v| v.to_string())
            .unwrap_or_default();
        PackageError::SdistOnly {
            name: name.to_string(),
            version,
            python,
            wanted_by,
        }
    }
}

/// `; it is needed because ...` when some constraint came from a dependency.
fn wanted_by(name: &PackageName, constraints: &[Constraint]) -> String {
    let deps: Vec<&str> = constraints
        .iter()
        .filter(|c| !c.from_user)
        .map(|c| c.origin.as_str())
        .collect();
    if deps.is_empty() {
        String::new()
    } else {
        format!(
            " ({name} is needed because {})",
            some_of(&deps, SHOWN_ORIGINS, " and ")
        )
    }
}

/// A requirement without its marker, for messages.
fn strip_marker(requirement: &Requirement) -> String {
    let mut plain = requirement.clone();
    plain.marker = pep508_rs::MarkerTree::TRUE;
    plain.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packages::environment::wasi_environment;
    use crate::packages::project_file::FileLocation;
    use crate::packages::settings::InstallLimits;
    use crate::packages::stop::InstallStop;
    use crate::sandbox::PackageSource;
    use std::path::PathBuf;
    use std::str::FromStr;
    use std::sync::Mutex;

    /// An in-memory index: (file name, metadata text, yanked, requires-python).
    #[derive(Default)]
    struct FakeSource {
        files: HashMap<String, Vec<(ProjectFile, String)>>,
        local: HashMap<String, Vec<(ProjectFile, String)>>,
        metadata_reads: Mutex<Vec<String>>,
    }

    impl FakeSource {
        fn add(&mut self, filename: &str, requires: &[&str]) -> &mut ProjectFile {
            self.add_to(false, filename, requires)
        }

        fn add_to(&mut self, local: bool, filename: &str, requires: &[&str]) -> &mut ProjectFile {
            let (name, version) = match filename.parse::<WheelFilename>() {
                Ok(w) => (w.name.to_string(), w.version.to_string()),
                Err(_) => {
                    let stem = filename.trim_end_matches(".tar.gz");
                    let (n, v) = stem.rsplit_once('-').unwrap();
                    (PackageName::from_str(n).unwrap().to_string(), v.to_owned())
                }
            };
            let mut metadata = format!("Name: {name}\nVersion: {version}\n");
            for r in requires {
                metadata.push_str(&format!("Requires-Dist: {r}\n"));
            }
            let file = ProjectFile {
                filename: filename.into(),
                location: FileLocation::Path(PathBuf::from(filename)),
                sha256: None,
                requires_python: None,
                yanked: None,
                metadata: None,
                source: if local {
                    PackageSource::Wheelhouse
                } else {
                    PackageSource::Index
                },
            };
            let map = if local {
                &mut self.local
            } else {
                &mut self.files
            };
            let list = map.entry(name).or_default();
            list.push((file, metadata));
            &mut list.last_mut().unwrap().0
        }
    }

    #[async_trait]
    impl Source for FakeSource {
        fn local_files(&self, name: &PackageName) -> Vec<ProjectFile> {
            self.local
                .get(name.as_ref())
                .map(|l| l.iter().map(|(f, _)| f.clone()).collect())
                .unwrap_or_default()
        }

        async fn index_files(
            &self,
            name: &PackageName,
        ) -> Result<Option<Arc<Vec<ProjectFile>>>, PackageError> {
            Ok(self
                .files
                .get(name.as_ref())
                .map(|l| Arc::new(l.iter().map(|(f, _)| f.clone()).collect())))
        }

        async fn metadata(
            &self,
            file: &ProjectFile,
            _: &WheelFilename,
        ) -> Result<CoreMetadata, PackageError> {
            self.metadata_reads
                .lock()
                .unwrap()
                .push(file.filename.clone());
            let text = self
                .files
                .values()
                .chain(self.local.values())
                .flatten()
                .find(|(f, _)| f == file)
                .map(|(_, m)| m.clone())
                .unwrap();
            CoreMetadata::parse(&text).map_err(|reason| PackageError::BadMetadata {
                filename: file.filename.clone(),
                reason,
            })
        }

        fn searched(&self) -> String {
            "the test index".into()
        }
    }

    fn reqs(text: &[&str]) -> Vec<Requirement> {
        text.iter()
            .map(|t| Requirement::from_str(t).unwrap())
            .collect()
    }

    async fn resolve_with(
        source: &FakeSource,
        installed: &HashMap<PackageName, Installed>,
        wanted: &[&str],
    ) -> Result<Resolution, PackageError> {
        resolve_within(source, installed, wanted, &InstallLimits::default()).await
    }

    async fn resolve_within(
        source: &FakeSource,
        installed: &HashMap<PackageName, Installed>,
        wanted: &[&str],
        limits: &InstallLimits,
    ) -> Result<Resolution, PackageError> {
        let env = wasi_environment("3.12.0").unwrap();
        let budget = InstallBudget::new(InstallStop::never(), limits);
        let resolver = Resolver {
            source,
            env: &env,
            python: PythonMinor {
                major: 3,
                minor: 12,
            },
            python_full: Version::from_str("3.12.0").unwrap(),
            installed,
            max_packages: 10,
            budget: &budget,
            progress: &|_| {},
        };
        resolver.resolve(&reqs(wanted)).await
    }

    async fn resolve(source: &FakeSource, wanted: &[&str]) -> Result<Resolution, PackageError> {
        resolve_with(source, &HashMap::new(), wanted).await
    }

    fn picked(r: &Resolution) -> Vec<String> {
        r.packages
            .iter()
            .map(|p| format!("{} {}", p.name, p.version))
            .collect()
    }

    #[tokio::test]
    async fn a_dependency_chain_resolves_to_the_newest_versions() {
        let mut s = FakeSource::default();
        s.add("a-1.0-py3-none-any.whl", &["b>=1"]);
        s.add("a-2.0-py3-none-any.whl", &["b>=2"]);
        s.add("b-1.0-py3-none-any.whl", &[]);
        s.add("b-2.0-py3-none-any.whl", &["c"]);
        s.add("c-0.1-py3-none-any.whl", &[]);
        let r = resolve(&s, &["a"]).await.unwrap();
        assert_eq!(picked(&r), ["a 2.0", "b 2.0", "c 0.1"]);
        let r = resolve(&s, &["A==1.0"]).await.unwrap();
        assert_eq!(picked(&r), ["a 1.0", "b 2.0", "c 0.1"]);
    }

    #[tokio::test]
    async fn markers_and_extras_decide_which_dependencies_count() {
        let mut s = FakeSource::default();
        s.add(
            "app-1.0-py3-none-any.whl",
            &[
                "winonly; sys_platform == 'win32'",
                "wasidep; sys_platform == 'wasi'",
                "old; python_version < '3.8'",
                "fast; extra == 'speed'",
            ],
        );
        s.add("wasidep-1.0-py3-none-any.whl", &[]);
        s.add("fast-1.0-py3-none-any.whl", &[]);
        let r = resolve(&s, &["app"]).await.unwrap();
        assert_eq!(picked(&r), ["app 1.0", "wasidep 1.0"]);
        let r = resolve(&s, &["app[speed]"]).await.unwrap();
        assert_eq!(picked(&r), ["app 1.0", "wasidep 1.0", "fast 1.0"]);
        let r = resolve(&s, &["app", "app[speed]"]).await.unwrap();
        assert_eq!(
            picked(&r),
            ["app 1.0", "wasidep 1.0", "fast 1.0"],
            "an extra asked later still counts"
        );
    }

    #[tokio::test]
    async fn a_later_requirement_restarts_with_the_combined_one() {
        let mut s = FakeSource::default();
        s.add("top-1.0-py3-none-any.whl", &["lib", "other"]);
        s.add("other-1.0-py3-none-any.whl", &["lib<2"]);
        s.add("lib-1.0-py3-none-any.whl", &[]);
        s.add("lib-2.0-py3-none-any.whl", &[]);
        let r = resolve(&s, &["top"]).await.unwrap();
        assert_eq!(picked(&r), ["top 1.0", "lib 1.0", "other 1.0"]);
    }

    #[tokio::test]
    async fn an_impossible_conflict_names_both_sides() {
        let mut s = FakeSource::default();
        s.add("x-1.0-py3-none-any.whl", &["lib>=2"]);
        s.add("lib-1.0-py3-none-any.whl", &[]);
        s.add("lib-2.0-py3-none-any.whl", &[]);
        let err = resolve(&s, &["lib==1.0", "x"]).await.unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, PackageError::Conflict { .. }), "{text}");
        assert!(text.contains("you asked for `lib==1.0`"), "{text}");
        assert!(text.contains("`x 1.0` requires `lib>=2`"), "{text}");
    }

    #[tokio::test]
    async fn yanked_files_are_skipped_unless_pinned() {
        let mut s = FakeSource::default();
        s.add("y-1.0-py3-none-any.whl", &[]);
        s.add("y-2.0-py3-none-any.whl", &[]).yanked = Some("broken".into());
        assert_eq!(picked(&resolve(&s, &["y"]).await.unwrap()), ["y 1.0"]);
        assert_eq!(picked(&resolve(&s, &["y==2.0"]).await.unwrap()), ["y 2.0"]);
        let err = resolve(&s, &["y>1.5"]).await.unwrap_err().to_string();
        assert!(
            err.contains("yanked") && err.contains("broken") && err.contains("y==2.0"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn text_from_the_index_is_quoted_cut() {
        let mut s = FakeSource::default();
        s.add("y-2.0-py3-none-any.whl", &[]).yanked = Some("why ".repeat(50_000));
        let err = resolve(&s, &["y"]).await.unwrap_err().to_string();
        assert!(err.contains("why why"), "{err}");
        assert!(err.len() < 1000, "{} bytes", err.len());
        let mut s = FakeSource::default();
        s.add("r-2.0-py3-none-any.whl", &[]).requires_python =
            Some(format!(">=4{}", ",!=1.0".repeat(20_000)));
        let err = resolve(&s, &["r"]).await.unwrap_err().to_string();
        assert!(err.contains("(Requires-Python "), "{err}");
        assert!(err.len() < 1000, "{} bytes", err.len());
    }

    #[tokio::test]
    async fn pre_releases_only_when_asked_or_alone() {
        let mut s = FakeSource::default();
        s.add("p-1.0-py3-none-any.whl", &[]);
        s.add("p-2.0b1-py3-none-any.whl", &[]);
        s.add("q-1.0rc1-py3-none-any.whl", &[]);
        assert_eq!(picked(&resolve(&s, &["p"]).await.unwrap()), ["p 1.0"]);
        assert_eq!(
            picked(&resolve(&s, &["p>=2.0b1"]).await.unwrap()),
            ["p 2.0b1"]
        );
        assert_eq!(picked(&resolve(&s, &["q"]).await.unwrap()), ["q 1.0rc1"]);
    }

    #[tokio::test]
    async fn requires_python_excludes_versions_from_the_page_or_the_metadata() {
        let mut s = FakeSource::default();
        s.add("r-1.0-py3-none-any.whl", &[]);
        s.add("r-2.0-py3-none-any.whl", &[]).requires_python = Some(">=3.13".into());
        assert_eq!(picked(&resolve(&s, &["r"]).await.unwrap()), ["r 1.0"]);
        let mut s = FakeSource::default();
        s.add("t-1.0-py3-none-any.whl", &["fine"]);
        let err = resolve(&s, &["t>=2", "missing"]).await.unwrap_err();
        assert!(
            matches!(err, PackageError::NoMatchingVersion { .. }),
            "{err}"
        );
        let mut s = FakeSource::default();
        s.add("only-2.0-py3-none-any.whl", &[]).requires_python = Some(">=4".into());
        let err = resolve(&s, &["only"]).await.unwrap_err().to_string();
        assert!(
            err.contains("Requires-Python >=4") && err.contains("3.12.0"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn native_and_source_only_packages_are_refused_with_reasons() {
        let mut s = FakeSource::default();
        for tag in [
            "cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64",
            "cp312-cp312-win_amd64",
            "cp312-cp312-macosx_11_0_arm64",
            "cp311-cp311-win_amd64",
        ] {
            s.add(&format!("numpy-2.1.0-{tag}.whl"), &[]);
        }
        s.add("numpy-2.1.0.tar.gz", &[]);
        s.add("docopt-0.6.2.tar.gz", &[]);
        s.add("needsnative-1.0-py3-none-any.whl", &["numpy"]);
        let err = resolve(&s, &["numpy"]).await.unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, PackageError::NotPure { .. }), "{text}");
        assert!(
            text.contains("pure-Python wheels") && text.contains("WASI"),
            "{text}"
        );
        assert!(
            text.contains("cp312-cp312-win_amd64"),
            "a sample of tags: {text}"
        );
        assert!(text.contains("source archive"), "{text}");
        let err = resolve(&s, &["docopt"]).await.unwrap_err();
        assert!(matches!(err, PackageError::SdistOnly { .. }), "{err}");
        let text = resolve(&s, &["needsnative"]).await.unwrap_err().to_string();
        assert!(
            text.contains("needed because `needsnative 1.0` requires `numpy`"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn unknown_packages_and_versions_get_their_own_messages() {
        let mut s = FakeSource::default();
        s.add("known-1.0-py3-none-any.whl", &[]);
        let err = resolve(&s, &["nosuchthing"]).await.unwrap_err();
        assert!(matches!(err, PackageError::UnknownPackage { .. }), "{err}");
        let err = resolve(&s, &["known==9"]).await.unwrap_err().to_string();
        assert!(err.contains("==9") && err.contains("1.0"), "{err}");
    }

    #[tokio::test]
    async fn installed_versions_are_kept_when_they_fit() {
        let mut s = FakeSource::default();
        s.add("lib-1.0-py3-none-any.whl", &[]);
        s.add("lib-2.0-py3-none-any.whl", &[]);
        s.add("dep-1.0-py3-none-any.whl", &[]);
        let mut installed = HashMap::new();
        installed.insert(
            PackageName::from_str("lib").unwrap(),
            Installed {
                version: Version::from_str("1.0").unwrap(),
                requires_dist: reqs(&["dep"]),
                built_in: false,
            },
        );
        let r = resolve_with(&s, &installed, &["lib"]).await.unwrap();
        assert!(matches!(r.packages[0].choice, Choice::Installed));
        assert_eq!(picked(&r), ["lib 1.0", "dep 1.0"]);
        let r = resolve_with(&s, &installed, &["lib>=2"]).await.unwrap();
        assert!(matches!(r.packages[0].choice, Choice::New { .. }));
        assert_eq!(picked(&r), ["lib 2.0"]);
    }

    #[tokio::test]
    async fn a_built_in_package_satisfies_dependencies_and_is_never_replaced() {
        let mut s = FakeSource::default();
        s.add("plotter-1.0-py3-none-any.whl", &["numpy>=2"]);
        s.add("oldplotter-1.0-py3-none-any.whl", &["numpy<2"]);
        s.add("numpy-1.26.0-py3-none-any.whl", &[]);
        let mut installed = HashMap::new();
        installed.insert(
            PackageName::from_str("numpy").unwrap(),
            Installed {
                version: Version::from_str("2.5.2").unwrap(),
                requires_dist: Vec::new(),
                built_in: true,
            },
        );
        let r = resolve_with(&s, &installed, &["plotter"]).await.unwrap();
        assert_eq!(picked(&r), ["plotter 1.0", "numpy 2.5.2"]);
        assert!(matches!(r.packages[1].choice, Choice::Installed));
        let err = resolve_with(&s, &installed, &["oldplotter"])
            .await
            .unwrap_err();
        assert!(matches!(err, PackageError::BuiltIn { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("numpy 2.5.2 is built into") && text.contains("<2"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn the_wheelhouse_is_used_before_the_index() {
        let mut s = FakeSource::default();
        s.add_to(true, "w-1.0-py3-none-any.whl", &[]);
        s.add("w-2.0-py3-none-any.whl", &[]);
        let r = resolve(&s, &["w"]).await.unwrap();
        assert_eq!(picked(&r), ["w 1.0"], "a fitting local wheel wins");
        let r = resolve(&s, &["w>=2"]).await.unwrap();
        assert_eq!(picked(&r), ["w 2.0"], "the index fills in");
    }

    #[tokio::test]
    async fn dependency_explosions_stop_at_the_cap() {
        let mut s = FakeSource::default();
        for i in 0..20 {
            let next = format!("p{}", i + 1);
            s.add(&format!("p{i}-1.0-py3-none-any.whl"), &[next.as_str()]);
        }
        let err = resolve(&s, &["p0"]).await.unwrap_err();
        assert!(
            matches!(err, PackageError::TooManyPackages { limit: 10 }),
            "{err}"
        );
    }

    /// `installed` holding `bloat 1.0` that requires `dep>=0.{i}` for each
    /// `i` below `count` (what a guest can plant in its site-packages).
    fn bloated(count: usize) -> HashMap<PackageName, Installed> {
        let mut installed = HashMap::new();
        installed.insert(
            PackageName::from_str("bloat").unwrap(),
            Installed {
                version: Version::from_str("1.0").unwrap(),
                requires_dist: (0..count)
                    .map(|i| Requirement::from_str(&format!("dep>=0.{i}")).unwrap())
                    .collect(),
                built_in: false,
            },
        );
        installed
    }

    #[tokio::test]
    async fn thousands_of_requirements_on_one_package_resolve_in_linear_time() {
        let mut s = FakeSource::default();
        s.add("dep-1.0-py3-none-any.whl", &[]);
        let installed = bloated(40_000);
        let started = std::time::Instant::now();
        let r = resolve_with(&s, &installed, &["bloat"]).await.unwrap();
        let took = started.elapsed();
        assert_eq!(picked(&r), ["bloat 1.0", "dep 1.0"]);
        assert!(
            took < std::time::Duration::from_secs(2),
            "40,000 requirements took {took:?}"
        );
    }

    #[tokio::test]
    async fn the_work_of_one_resolution_is_bounded() {
        let mut s = FakeSource::default();
        s.add("dep-1.0-py3-none-any.whl", &[]);
        let limits = InstallLimits {
            max_resolver_steps: 1000,
            ..InstallLimits::default()
        };
        let err = resolve_within(&s, &bloated(5000), &["bloat"], &limits)
            .await
            .unwrap_err();
        assert!(
            matches!(err, PackageError::TooComplex { limit: 1000 }),
            "{err}"
        );
    }

    #[tokio::test]
    async fn messages_quote_a_bounded_number_of_requirements() {
        let mut s = FakeSource::default();
        let mut many: Vec<String> = (0..200).map(|i| format!("lib<2.0.{i}")).collect();
        many.push("lib>=3".into());
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        s.add("hub-1.0-py3-none-any.whl", &many);
        s.add("lib-1.0-py3-none-any.whl", &[]);
        s.add("lib-3.0-py3-none-any.whl", &[]);
        let err = resolve(&s, &["hub"]).await.unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, PackageError::Conflict { .. }), "{text}");
        assert!(text.contains("(and 196 more)"), "{text}");
        assert!(text.len() < 1500, "{} bytes: {text}", text.len());
    }

    #[tokio::test]
    async fn a_cycle_terminates() {
        let mut s = FakeSource::default();
        s.add("ping-1.0-py3-none-any.whl", &["pong"]);
        s.add("pong-1.0-py3-none-any.whl", &["ping"]);
        assert_eq!(
            picked(&resolve(&s, &["ping"]).await.unwrap()),
            ["ping 1.0", "pong 1.0"]
        );
    }

    #[tokio::test]
    async fn metadata_that_contradicts_the_file_name_is_refused() {
        let mut s = FakeSource::default();
        s.add("liar-1.0-py3-none-any.whl", &[]);
        s.files.get_mut("liar").unwrap()[0].1 = "Name: other\nVersion: 1.0\n".into();
        let err = resolve(&s, &["liar"]).await.unwrap_err();
        assert!(
            matches!(
                &err,
                PackageError::BadMetadata {
                    reason: MetadataError::NameMismatch { found, expected },
                    ..
                } if found == "other 1.0" && expected == "liar 1.0"
            ),
            "{err}"
        );
        assert!(
            err.to_string().contains(
                "is unusable: it says it is other 1.0, but the file name says liar 1.0; nothing was installed"
            ),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_false_marker_on_a_user_requirement_is_noted() {
        let mut s = FakeSource::default();
        s.add("six-1.0-py3-none-any.whl", &[]);
        let r = resolve(&s, &["six; sys_platform == 'win32'"])
            .await
            .unwrap();
        assert!(r.packages.is_empty());
        assert!(r.notes[0].contains("marker"), "{:?}", r.notes);
    }
}
