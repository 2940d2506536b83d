//! Why a resolution failed, in words a model can act on: the one package
//! to blame with the precise reason (compiled code only, a source archive
//! only, another Python, yanked, no such version, a built-in in the way),
//! or two requirements that cannot both hold, or, failing both, the chain
//! of PubGrub's derivation cut short.

use std::collections::{BTreeMap, BTreeSet};

use pep440_rs::{Operator, Version, VersionSpecifiers};
use pep508_rs::PackageName;
use pubgrub::{DerivationTree, External};

use super::super::error::PackageError;
use super::super::message_text::{clip, some_of};
use super::super::project_file::{FileKind, ProjectFile};
use super::super::wheel_name::{Fit, WheelFilename};
use super::provider::{Constraint, Known, Node, Unusable, Versions, Worked};
use super::{Resolver, SAMPLE_TAGS, SHOWN_ORIGINS, SHOWN_TEXT_CHARS};

/// Lines of a derivation quoted in one message.
const SHOWN_LINES: usize = 6;
/// Characters of one explanation.
const MAX_EXPLANATION_CHARS: usize = 1500;

type Tree = DerivationTree<Node, Versions, Unusable>;
type Leaf = External<Node, Versions, Unusable>;

impl Resolver<'_> {
    /// The error for a derivation that ends in no solution.
    pub(super) fn failure(&self, tree: &Tree, known: &Known) -> PackageError {
        let mut leaves: Vec<&Leaf> = Vec::new();
        collect(tree, &mut leaves);
        let mut culprits: BTreeSet<PackageName> = BTreeSet::new();
        let mut other_leaves = false;
        for leaf in &leaves {
            match leaf {
                External::Custom(_, _, Unusable::Dependency(on)) => {
                    culprits.insert(on.clone());
                }
                External::Custom(node, _, Unusable::Python(_) | Unusable::Broken(_)) => {
                    culprits.extend(node.package().cloned());
                }
                External::Custom(_, _, Unusable::NotTried) | External::NoVersions(..) => {
                    other_leaves = true;
                }
                External::NotRoot(..) | External::FromDependencyOf(..) => {}
            }
        }
        if let Some(gave_up) = self.gave_up(&leaves, known) {
            return gave_up;
        }
        if culprits.len() == 1
            && !other_leaves
            && let Some(culprit) = culprits.first()
        {
            return self.blame(culprit, &leaves, known);
        }
        if culprits.is_empty()
            && let Some(conflict) = self.conflict(&leaves, known)
        {
            return conflict;
        }
        self.no_solution(&leaves, known)
    }

    /// When the solver ran out of versions it may read, which package, and
    /// why the versions it read could not be used (the commonest reason).
    fn gave_up(&self, leaves: &[&Leaf], known: &Known) -> Option<PackageError> {
        let name = leaves.iter().find_map(|leaf| match leaf {
            External::Custom(node, _, Unusable::NotTried) => node.package(),
            _ => None,
        })?;
        let read: Vec<&Version> = known
            .facts
            .keys()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v)
            .collect();
        let oldest = read.iter().min()?.to_string();
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        for ((node, _), worked) in &known.worked {
            if let (Node::Package(n), Worked::Unavailable(why)) = (node, worked)
                && n == name
            {
                let reason = match why {
                    Unusable::Dependency(on) => {
                        let on_it = known.constraints.get(on).map_or(&[][..], Vec::as_slice);
                        let first: Vec<Constraint> = on_it.iter().take(1).cloned().collect();
                        format!(
                            "they need {on}, and {}",
                            self.explain_package(on, &first, known)
                        )
                    }
                    other => format!("they cannot be used: {other}"),
                };
                *reasons.entry(reason).or_default() += 1;
            }
        }
        let why = reasons
            .into_iter()
            .max_by_key(|(_, count)| *count)
            .map_or_else(|| "none of them could be used".to_owned(), |(r, _)| r);
        Some(PackageError::GaveUp {
            name: name.to_string(),
            reads: read.len(),
            oldest,
            why: clip(&why, MAX_EXPLANATION_CHARS / 2),
        })
    }

    /// The precise reason `name` cannot be had, for the requirements on it
    /// that the derivation used (the user's, else the first one's asker's).
    fn blame(&self, name: &PackageName, leaves: &[&Leaf], known: &Known) -> PackageError {
        let all = known.constraints.get(name).map_or(&[][..], Vec::as_slice);
        let askers: Vec<(&Node, &Versions)> = leaves
            .iter()
            .filter_map(|leaf| match leaf {
                External::Custom(node, versions, Unusable::Dependency(on)) if on == name => {
                    Some((node, versions))
                }
                External::FromDependencyOf(node, versions, dep, _)
                    if dep.package() == Some(name) =>
                {
                    Some((node, versions))
                }
                _ => None,
            })
            .collect();
        let users: Vec<Constraint> = all.iter().filter(|c| c.asked_by_user()).cloned().collect();
        let used = if !users.is_empty() {
            users
        } else {
            // What the first asker's newest version asked, as the solver saw it.
            askers
                .iter()
                .map(|(node, versions)| constraints_from(known, name, node, versions))
                .find(|made| !made.is_empty())
                .unwrap_or_else(|| all.iter().take(1).cloned().collect())
        };
        self.explain_package(name, &used, known)
    }

    /// Why `name` has no usable version under `constraints`.
    pub(super) fn explain_package(
        &self,
        name: &PackageName,
        constraints: &[Constraint],
        known: &Known,
    ) -> PackageError {
        if let Some(installed) = self.installed.get(name)
            && installed.compiled
            && let Some(c) = constraints
                .iter()
                .find(|c| !c.specifiers.contains(&installed.version))
        {
            return PackageError::BuiltIn {
                name: name.to_string(),
                version: installed.version.to_string(),
                wanted: c.specifiers.to_string(),
                origin: c.origin.clone(),
            };
        }
        let files = known
            .offers
            .get(name)
            .map(|o| o.files.clone())
            .unwrap_or_default();
        let selection = match self.select(name, &files, constraints) {
            Ok(selection) => selection,
            Err(e) => return e,
        };
        let mut skipped: Vec<(Version, String)> = known
            .facts
            .iter()
            .filter(|((n, _), _)| n == name)
            .filter_map(|((_, v), f)| Some((v.clone(), f.wrong_python.clone()?)))
            .filter(|(v, _)| constraints.iter().all(|c| c.specifiers.contains(v)))
            .collect();
        skipped.sort_by(|a, b| b.0.cmp(&a.0));
        if skipped.is_empty()
            && let Some((version, detail)) = known
                .facts
                .iter()
                .filter(|((n, v), _)| {
                    n == name && constraints.iter().all(|c| c.specifiers.contains(v))
                })
                .filter_map(|((_, v), f)| Some((v, f.broken.as_ref()?)))
                .max_by(|a, b| a.0.cmp(b.0))
        {
            return PackageError::UnreadableVersion {
                name: name.to_string(),
                version: version.to_string(),
                detail: detail.clone(),
            };
        }
        self.explain(name, &files, &selection, constraints, &skipped)
    }

    /// Two requirements on one package that no version satisfies together.
    fn conflict(&self, leaves: &[&Leaf], known: &Known) -> Option<PackageError> {
        let edges: Vec<(&Node, &Versions, &PackageName, &Versions)> = leaves
            .iter()
            .filter_map(|leaf| match leaf {
                External::FromDependencyOf(from, fv, to, tv) => Some((from, fv, to.package()?, tv)),
                _ => None,
            })
            .collect();
        for (i, (from1, fv1, to1, tv1)) in edges.iter().enumerate() {
            for (from2, fv2, to2, tv2) in &edges[i + 1..] {
                if to1 == to2 && from1 != from2 && tv1.intersection(tv2) == Versions::empty() {
                    let first = origin_of(known, to1, from1, fv1)?;
                    let second = origin_of(known, to2, from2, fv2)?;
                    let (first, second) = if from2 == &&Node::Root {
                        (second, first)
                    } else {
                        (first, second)
                    };
                    return Some(PackageError::Conflict {
                        name: to1.to_string(),
                        first,
                        second,
                    });
                }
            }
        }
        None
    }

    /// The derivation in a few lines, with the reasons of its dead ends.
    fn no_solution(&self, leaves: &[&Leaf], known: &Known) -> PackageError {
        let mut lines: Vec<String> = Vec::new();
        let mut push = |line: String| {
            if !lines.contains(&line) {
                lines.push(line);
            }
        };
        // What was asked for first, its newest releases' reasons first: after
        // a long walk back, those of ancient releases matter least.
        let asked = |name: &PackageName| {
            known
                .constraints
                .get(name)
                .is_some_and(|cs| cs.iter().any(Constraint::asked_by_user))
        };
        let mut ordered: Vec<&Leaf> = leaves.to_vec();
        ordered.sort_by_key(|leaf| {
            let (name, newest) = match leaf {
                External::Custom(node, versions, _)
                | External::NoVersions(node, versions)
                | External::FromDependencyOf(node, versions, _, _) => match node.package() {
                    Some(n) => (
                        Some(n),
                        known.versions_in(n, self.installed.get(n), versions).pop(),
                    ),
                    None => (None, None),
                },
                External::NotRoot(..) => (None, None),
            };
            (
                !name.is_some_and(asked),
                newest.is_none(),
                std::cmp::Reverse(newest),
            )
        });
        let mut repeats: BTreeMap<(Node, PackageName), usize> = BTreeMap::new();
        for leaf in ordered {
            match leaf {
                External::FromDependencyOf(from, fv, to, _) => {
                    if let Some(name) = to.package()
                        && let Some(origin) = origin_of(known, name, from, fv)
                    {
                        push(origin);
                    }
                }
                External::Custom(node, versions, why) => {
                    // One line per release needing the same thing: the newest.
                    if let Unusable::Dependency(on) = why {
                        let pair = (node.clone(), on.clone());
                        if let Some(count) = repeats.get_mut(&pair) {
                            *count += 1;
                            continue;
                        }
                        repeats.insert(pair, 0);
                    }
                    let what = self.summary(node, versions, known);
                    let line = match why {
                        Unusable::Dependency(on) => {
                            let reason = self.explain_package(
                                on,
                                &constraints_from(known, on, node, versions),
                                known,
                            );
                            format!("{what} cannot be used: {reason}")
                        }
                        other => format!("{what} cannot be used: {other}"),
                    };
                    push(line);
                }
                External::NoVersions(node, versions) => {
                    push(format!(
                        "no usable version of {}",
                        self.summary(node, versions, known)
                    ));
                }
                External::NotRoot(..) => {}
            }
        }
        let older = repeats.values().sum::<usize>();
        if older > 0 {
            lines.push(format!(
                "{older} older releases cannot be used for the same reasons"
            ));
        }
        let explanation = clip(&some_of(&lines, SHOWN_LINES, "; "), MAX_EXPLANATION_CHARS);
        PackageError::NoSolution { explanation }
    }

    /// `node` at `versions`, in words: "x 1.0", "x 1.0 to 2.3 (5 versions)".
    fn summary(&self, node: &Node, versions: &Versions, known: &Known) -> String {
        let Some(name) = node.package() else {
            return node.to_string();
        };
        let held = known.versions_in(name, self.installed.get(name), versions);
        match held.as_slice() {
            [] => node.to_string(),
            [one] => format!("{node} {one}"),
            [oldest, .., newest] => {
                format!("{node} {oldest} to {newest} ({} versions)", held.len())
            }
        }
    }
}

/// The leaves of a derivation, depth first, each once.
fn collect<'t>(tree: &'t Tree, leaves: &mut Vec<&'t Leaf>) {
    match tree {
        DerivationTree::External(leaf) => {
            if !leaves.iter().any(|l| std::ptr::eq(*l, leaf)) {
                leaves.push(leaf);
            }
        }
        DerivationTree::Derived(derived) => {
            collect(&derived.cause1, leaves);
            collect(&derived.cause2, leaves);
        }
    }
}

/// The requirements on `name` that `from` made at versions in `versions`.
fn constraints_from(
    known: &Known,
    name: &PackageName,
    from: &Node,
    versions: &Versions,
) -> Vec<Constraint> {
    let all = known.constraints.get(name).map_or(&[][..], Vec::as_slice);
    let mut made: Vec<Constraint> = all
        .iter()
        .filter(|c| c.from.0 == *from && versions.contains(&c.from.1))
        .cloned()
        .collect();
    // The newest asking version's own, as one reason.
    if let Some(newest) = made.iter().map(|c| c.from.1.clone()).max() {
        made.retain(|c| c.from.1 == newest);
    }
    made
}

/// Who asked for `name` among `from` at `versions`, in words.
fn origin_of(
    known: &Known,
    name: &PackageName,
    from: &Node,
    versions: &Versions,
) -> Option<String> {
    let made = constraints_from(known, name, from, versions);
    let origins: Vec<&str> = made.iter().map(|c| c.origin.as_str()).collect();
    (!origins.is_empty()).then(|| some_of(&origins, SHOWN_ORIGINS, " and "))
}

/// The files of one package sorted into what can be installed and why the
/// rest cannot.
#[derive(Default)]
pub(super) struct Selection {
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
    /// Sorts `files` into installable wheels (best first) and reasons,
    /// paying one step per file and per version check.
    pub(super) fn select(
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
    pub(super) fn explain(
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
        .filter(|c| !c.asked_by_user())
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
