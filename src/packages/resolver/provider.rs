//! [`Provider`]: the PubGrub solver's view of the packages, over what has
//! been fetched so far ([`Known`]).
//!
//! The solver is synchronous and the index is not: when the solver asks
//! for something not fetched yet, the provider fails with a [`Need`], the
//! resolver fetches it and runs the solver again over the fuller
//! [`Known`]. Each run is cheap next to a fetch, and every dependency list
//! worked out is kept across runs.
//!
//! A version range is the set of versions a requirement admits among those
//! offered (so PEP 440's rules are pep440-rs's own, never re-derived); a
//! requirement with extras adds a node per extra that depends on its package
//! at the same version. A version whose dependency admits nothing, or whose
//! metadata rules out this Python, is unavailable, and the solver goes back
//! to older ones, as pip does.

use std::cmp::Reverse;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use pep440_rs::{Version, VersionSpecifiers};
use pep508_rs::{ExtraName, PackageName};
use pubgrub::{
    Dependencies, DependencyConstraints, DependencyProvider, PackageResolutionStatistics, Ranges,
};

use super::super::error::PackageError;
use super::super::requirement::{Requirement, specifiers};
use super::offer::{Offer, admitted};
use super::{Installed, Resolver, strip_marker};

/// Versions as the solver sees them: sets of versions.
pub(super) type Versions = Ranges<Version>;

/// Reads of metadata allowed per package before its older versions are
/// left untried.
pub(super) const MAX_READS_PER_PACKAGE: usize = 400;

/// A node of the solver's graph.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Node {
    /// What was asked for.
    Root,
    /// A package.
    Package(PackageName),
    /// A package with one of its extras (which depends on the package at
    /// the same version).
    Extra(PackageName, ExtraName),
}

impl Node {
    /// The package it is about (none for the root).
    pub fn package(&self) -> Option<&PackageName> {
        match self {
            Self::Root => None,
            Self::Package(name) | Self::Extra(name, _) => Some(name),
        }
    }
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Root => f.write_str("your request"),
            Self::Package(name) => write!(f, "{name}"),
            Self::Extra(name, extra) => write!(f, "{name}[{extra}]"),
        }
    }
}

/// Why a version cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Unusable {
    /// It requires a package of which no usable version fits.
    Dependency(PackageName),
    /// Its metadata rules out this Python.
    Python(String),
    /// Too many versions of the package were read already.
    NotTried,
    /// Its metadata or wheel cannot be read (pip skips such a version too).
    Broken(String),
}

impl fmt::Display for Unusable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Dependency(name) => {
                write!(f, "it requires {name}, of which no usable version fits")
            }
            Self::Python(why) => write!(f, "its {why} rules out this Python"),
            Self::NotTried => write!(f, "not tried (over {MAX_READS_PER_PACKAGE} versions were)"),
            Self::Broken(why) => f.write_str(why),
        }
    }
}

/// What the provider needs fetched before the solver can go on, or why it
/// cannot.
#[derive(Debug, thiserror::Error)]
pub(super) enum Need {
    /// The files of these packages (the wheelhouse's, or the index's too).
    #[error("the files of {} packages", .0.len())]
    Files(Vec<PackageName>),
    /// The index's files of a package the wheelhouse could not satisfy.
    #[error("the index's files of {0}")]
    Index(PackageName),
    /// The metadata of a version.
    #[error("the metadata of {0} {1}")]
    Metadata(PackageName, Version),
    /// A failure to report.
    #[error(transparent)]
    Fail(Box<PackageError>),
}

impl From<PackageError> for Need {
    fn from(e: PackageError) -> Self {
        Self::Fail(Box::new(e))
    }
}

/// What a version's metadata says, as far as resolving goes.
#[derive(Clone, Debug)]
pub(super) struct Facts {
    /// Its dependencies.
    pub requires_dist: Vec<Requirement>,
    /// The extras it defines (`None`: not known, for what is installed).
    pub provides_extra: Option<Vec<ExtraName>>,
    /// Its `Requires-Python`, when it rules out this Python.
    pub wrong_python: Option<String>,
    /// Why its metadata or wheel cannot be read, when it cannot.
    pub broken: Option<String>,
}

/// A requirement seen on a package, with who made it.
#[derive(Clone, Debug)]
pub(super) struct Constraint {
    /// What it admits.
    pub specifiers: VersionSpecifiers,
    /// Who asked, in words: "you asked for `x`", "`a 1.0` requires `x`".
    pub origin: String,
    /// The node and version that asked (the root for the user).
    pub from: (Node, Version),
}

impl Constraint {
    /// Whether the user asked for it.
    pub fn asked_by_user(&self) -> bool {
        self.from.0 == Node::Root
    }
}

/// The dependencies of one node at one version, worked out.
#[derive(Clone, Debug)]
pub(super) enum Worked {
    /// These nodes, in requirement order, with what each admits.
    Available(Vec<(Node, Versions)>),
    /// It cannot be used.
    Unavailable(Unusable),
}

/// Everything fetched and worked out so far, kept across solver runs.
#[derive(Default)]
pub(super) struct Known {
    /// What each package offers.
    pub offers: HashMap<PackageName, Arc<Offer>>,
    /// What each version's metadata says.
    pub facts: HashMap<(PackageName, Version), Arc<Facts>>,
    /// Metadata reads per package.
    pub reads: HashMap<PackageName, usize>,
    /// Requirements seen on each package (each once).
    pub constraints: HashMap<PackageName, Vec<Constraint>>,
    seen: HashSet<(PackageName, String, String)>,
    /// Dependencies worked out, by node and version.
    pub worked: HashMap<(Node, Version), Worked>,
    /// Notes for the user (each once).
    pub notes: Vec<String>,
}

impl Known {
    /// Records a requirement on `name`.
    fn constrain(&mut self, name: &PackageName, constraint: Constraint) {
        let key = (
            name.clone(),
            constraint.specifiers.to_string(),
            constraint.origin.clone(),
        );
        if self.seen.insert(key) {
            self.constraints
                .entry(name.clone())
                .or_default()
                .push(constraint);
        }
    }

    /// Adds a note, once.
    pub fn note(&mut self, note: String) {
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }

    /// The versions of `name` (offered, installed) that `versions` holds.
    pub fn versions_in(
        &self,
        name: &PackageName,
        installed: Option<&Installed>,
        versions: &Versions,
    ) -> Vec<Version> {
        let Some(offer) = self.offers.get(name) else {
            return Vec::new();
        };
        let mut all = admitted(offer, installed, &VersionSpecifiers::empty());
        all.retain(|v| versions.contains(v));
        all
    }
}

/// The version the root has.
pub(super) fn root_version() -> Version {
    Version::new([0])
}

/// The solver's view of one resolution.
pub(super) struct Provider<'r, 'a> {
    /// The resolver's inputs.
    pub resolver: &'r Resolver<'a>,
    /// What is known so far.
    pub known: &'r Mutex<Known>,
    /// What the user asked for.
    pub requirements: &'r [Requirement],
    /// When the solver must give up: the install's solving time is spent
    /// (the step budget counts the solver's decisions, not the work of
    /// each, which an index can make large).
    pub solving_until: std::time::Instant,
}

impl Provider<'_, '_> {
    fn known(&self) -> MutexGuard<'_, Known> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn installed(&self, name: &PackageName) -> Option<&Installed> {
        self.resolver.installed.get(name)
    }

    /// The newest version of `name` in `versions` to try: what is installed
    /// when it fits; else the wheelhouse's newest, then the index's; final
    /// releases before pre-releases.
    fn newest(&self, name: &PackageName, versions: &Versions) -> Result<Option<Version>, Need> {
        let installed = self.installed(name);
        if let Some(i) = installed
            && versions.contains(&i.version)
        {
            return Ok(Some(i.version.clone()));
        }
        let known = self.known();
        let Some(offer) = known.offers.get(name) else {
            return Err(Need::Files(vec![name.clone()]));
        };
        if installed.is_some_and(|i| i.compiled) {
            return Ok(None);
        }
        self.resolver.budget.spend(1)?;
        let fits = |u: &&super::offer::Usable| versions.contains(&u.version);
        let finals = offer.local.iter().chain(offer.index.iter().flatten());
        let pick = finals
            .clone()
            .filter(fits)
            .find(|u| !u.version.any_prerelease())
            .or_else(|| finals.clone().find(fits));
        Ok(pick.map(|u| u.version.clone()))
    }

    /// Works out the dependencies of `node` at `version`.
    fn work_out(&self, node: &Node, version: &Version) -> Result<Worked, Need> {
        let (requirements, extras, origin_of): (Vec<Requirement>, Vec<ExtraName>, String) =
            match node {
                Node::Root => (self.requirements.to_vec(), Vec::new(), String::new()),
                Node::Package(name) | Node::Extra(name, _) => {
                    let Some(facts) = self.facts(name, version)? else {
                        return Ok(Worked::Unavailable(Unusable::NotTried));
                    };
                    if let Some(why) = &facts.broken {
                        return Ok(Worked::Unavailable(Unusable::Broken(why.clone())));
                    }
                    if let Some(why) = &facts.wrong_python {
                        return Ok(Worked::Unavailable(Unusable::Python(why.clone())));
                    }
                    let extras = match node {
                        Node::Extra(_, extra) => {
                            if let Some(provided) = &facts.provides_extra
                                && !provided.contains(extra)
                            {
                                self.known().note(format!(
                                    "{name} {version} has no extra '{extra}'; it was ignored"
                                ));
                            }
                            vec![extra.clone()]
                        }
                        _ => Vec::new(),
                    };
                    (
                        facts.requires_dist.clone(),
                        extras,
                        format!("`{name} {version}` requires"),
                    )
                }
            };
        self.resolver.budget.spend(requirements.len() as u64)?;
        let mut deps: Vec<(Node, Versions)> = Vec::new();
        if let Node::Extra(name, _) = node {
            deps.push((
                Node::Package(name.clone()),
                Ranges::singleton(version.clone()),
            ));
        }
        let mut missing: Vec<PackageName> = Vec::new();
        let mut empty: Option<PackageName> = None;
        for req in &requirements {
            if !req.marker.evaluate(self.resolver.env, &extras) {
                if *node == Node::Root {
                    self.known().note(format!(
                        "skipped `{req}`: its marker does not hold in this sandbox (CPython on WASI)"
                    ));
                }
                continue;
            }
            // An extra's node carries only what the extra adds.
            if matches!(node, Node::Extra(..)) && req.marker.evaluate(self.resolver.env, &[]) {
                continue;
            }
            let specs = specifiers(req);
            let origin = if *node == Node::Root {
                format!("you asked for `{req}`")
            } else {
                format!("{origin_of} `{}`", strip_marker(req))
            };
            let mut known = self.known();
            known.constrain(
                &req.name,
                Constraint {
                    specifiers: specs.clone(),
                    origin,
                    from: (node.clone(), version.clone()),
                },
            );
            let Some(offer) = known.offers.get(&req.name).cloned() else {
                missing.push(req.name.clone());
                continue;
            };
            let admits = admitted(&offer, self.installed(&req.name), &specs);
            if admits.is_empty() {
                let fixed = self.installed(&req.name).is_some_and(|i| i.compiled);
                if offer.index.is_none() && !fixed {
                    drop(known);
                    return Err(Need::Index(req.name.clone()));
                }
                empty.get_or_insert_with(|| req.name.clone());
                continue;
            }
            let versions = admits
                .into_iter()
                .fold(Ranges::empty(), |set, v| set.union(&Ranges::singleton(v)));
            merge(&mut deps, Node::Package(req.name.clone()), versions.clone());
            for extra in &req.extras {
                merge(
                    &mut deps,
                    Node::Extra(req.name.clone(), extra.clone()),
                    versions.clone(),
                );
            }
        }
        if !missing.is_empty() {
            missing.sort();
            missing.dedup();
            return Err(Need::Files(missing));
        }
        // Requirements on one package that admit nothing together.
        let contradictory = deps
            .iter()
            .find(|(_, versions)| *versions == Ranges::empty())
            .and_then(|(n, _)| n.package().cloned());
        if let Some(name) = empty.or(contradictory) {
            return Ok(Worked::Unavailable(Unusable::Dependency(name)));
        }
        Ok(Worked::Available(deps))
    }

    /// What the metadata of `name` `version` says (what is installed says
    /// it itself): `None` when too many versions of it were read already.
    fn facts(&self, name: &PackageName, version: &Version) -> Result<Option<Arc<Facts>>, Need> {
        if let Some(i) = self.installed(name)
            && &i.version == version
        {
            return Ok(Some(Arc::new(Facts {
                requires_dist: i.requires_dist.clone(),
                provides_extra: None,
                wrong_python: None,
                broken: None,
            })));
        }
        let known = self.known();
        match known.facts.get(&(name.clone(), version.clone())) {
            Some(facts) => Ok(Some(facts.clone())),
            None if known.reads.get(name).copied().unwrap_or(0) >= MAX_READS_PER_PACKAGE => {
                Ok(None)
            }
            None => Err(Need::Metadata(name.clone(), version.clone())),
        }
    }
}

/// Adds `node` with `versions` to `deps`, narrowing it when already there.
fn merge(deps: &mut Vec<(Node, Versions)>, node: Node, versions: Versions) {
    match deps.iter_mut().find(|(n, _)| *n == node) {
        Some((_, existing)) => *existing = existing.intersection(&versions),
        None => deps.push((node, versions)),
    }
}

impl DependencyProvider for Provider<'_, '_> {
    type P = Node;
    type V = Version;
    type VS = Versions;
    type M = Unusable;
    type Err = Need;
    type Priority = (u32, Reverse<usize>);

    fn prioritize(
        &self,
        node: &Node,
        versions: &Versions,
        stats: &PackageResolutionStatistics,
    ) -> Self::Priority {
        // Packages in conflict first, then those with fewest versions left.
        let left = match node.package() {
            Some(name) => self
                .known()
                .versions_in(name, self.installed(name), versions)
                .len(),
            None => 0,
        };
        (stats.conflict_count(), Reverse(left))
    }

    fn choose_version(&self, node: &Node, versions: &Versions) -> Result<Option<Version>, Need> {
        match node.package() {
            None => Ok(Some(root_version())),
            Some(name) => self.newest(name, versions),
        }
    }

    fn get_dependencies(
        &self,
        node: &Node,
        version: &Version,
    ) -> Result<Dependencies<Node, Versions, Unusable>, Need> {
        let key = (node.clone(), version.clone());
        let cached = self.known().worked.get(&key).cloned();
        let worked = match cached {
            Some(worked) => worked,
            None => {
                let worked = self.work_out(node, version)?;
                self.known().worked.insert(key, worked.clone());
                worked
            }
        };
        Ok(match worked {
            Worked::Available(deps) => {
                Dependencies::Available(deps.into_iter().collect::<DependencyConstraints<_, _>>())
            }
            Worked::Unavailable(why) => Dependencies::Unavailable(why),
        })
    }

    fn should_cancel(&self) -> Result<(), Need> {
        if std::time::Instant::now() >= self.solving_until {
            return Err(Need::Fail(Box::new(PackageError::TooHardToSolve {
                seconds: self.resolver.budget.max_solving().as_secs_f64(),
            })));
        }
        self.resolver
            .budget
            .spend(1)
            .map_err(|e| Need::Fail(Box::new(e)))
    }
}
