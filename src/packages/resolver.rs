//! [`Resolver`]: picks one version of every package an install needs, on
//! the PubGrub algorithm (the `pubgrub` crate), with full backtracking.
//!
//! Each package is offered the versions a WASI CPython can take: pure-Python
//! wheels whose `Requires-Python` admits the runtime, not yanked unless
//! pinned with `==`, from the wheelhouse first (the index is asked only for
//! what the wheelhouse cannot satisfy). What is installed is kept when it
//! fits; a pure-Python built-in of the runtime gives way to another version
//! when it does not, while one with compiled parts is the one version of its
//! package.
//! Dependencies come from each version's metadata, with markers evaluated
//! for the sandbox and the extras asked for. When the newest version of a
//! package needs something that cannot be had (compiled code, another
//! Python), the solver goes back to older versions, as pip does; when no
//! set of versions fits, PubGrub's derivation becomes a short explanation
//! (the one package to blame, with today's precise reason, when there is
//! one).
//!
//! Requirements come from indexes and from guests (site-packages), so the
//! work is paid for from the install's [`InstallBudget`]: one step per
//! requirement worked out, per file sorted, per version chosen and per
//! solver step; metadata reads per package are capped. Messages quote a
//! bounded number of requirements.

mod failure;
mod offer;
mod provider;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use pep440_rs::Version;
use pep508_rs::{MarkerEnvironment, PackageName};
use pubgrub::{PubGrubError, SelectedDependencies};

use super::budget::InstallBudget;
use super::error::PackageError;
use super::message_text::{clip, some_of};
use super::metadata::CoreMetadata;
use super::metadata_error::MetadataError;
use super::project_file::ProjectFile;
use super::requirement::{Requirement, specifiers};
use super::wheel_name::{PythonMinor, WheelFilename};
use offer::Offer;
use provider::{Facts, Known, MAX_READS_PER_PACKAGE, Need, Node, Provider, Worked, root_version};

/// Tags quoted in a "not pure" refusal.
const SAMPLE_TAGS: usize = 6;
/// Requirements quoted in one message.
const SHOWN_ORIGINS: usize = 4;
/// Notes one resolution reports.
const MAX_NOTES: usize = 20;
/// Characters of text from an index (a yank reason, a `Requires-Python`)
/// quoted in a message.
const SHOWN_TEXT_CHARS: usize = 200;
/// Packages looked at (offers fetched) per package a resolution may pick.
const LOOKED_AT_PER_PICKED: usize = 4;
/// Older versions of a package read alongside the one the solver asks for
/// when it goes back through them.
const MAX_READ_AHEAD: usize = 16;

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
    /// The core metadata of a wheel when it can be had without downloading
    /// the wheel (`None` otherwise): what reading ahead uses, so that only
    /// the versions the solver asks for are ever downloaded whole.
    async fn metadata_without_download(
        &self,
        file: &ProjectFile,
        wheel: &WheelFilename,
    ) -> Result<Option<CoreMetadata>, PackageError> {
        self.metadata(file, wheel).await.map(Some)
    }
    /// Where names are looked for, in words, for "not found" messages.
    fn searched(&self) -> String;
    /// Whether reading a version's metadata costs little (a metadata file,
    /// or ranges of the wheel), so older versions may be read ahead; not
    /// when it means downloading whole wheels.
    fn cheap_metadata(&self) -> bool {
        true
    }
}

/// A distribution already in the sandbox.
#[derive(Clone, Debug)]
pub struct Installed {
    /// Its version.
    pub version: Version,
    /// Its dependencies.
    pub requires_dist: Vec<Requirement>,
    /// Whether the runtime itself carries it.
    pub built_in: bool,
    /// Whether it is built in with compiled parts: then it is the one
    /// version of its package (a pure built-in gives way like any other).
    pub compiled: bool,
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

fn lock(known: &Mutex<Known>) -> MutexGuard<'_, Known> {
    known.lock().unwrap_or_else(|p| p.into_inner())
}

impl Resolver<'_> {
    /// Resolves `requirements` (the user's).
    pub async fn resolve(&self, requirements: &[Requirement]) -> Result<Resolution, PackageError> {
        let known = Mutex::new(Known::default());
        let mut solving = Duration::ZERO;
        loop {
            let began = Instant::now();
            let solved = {
                let provider = Provider {
                    resolver: self,
                    known: &known,
                    requirements,
                    solving_until: began + self.budget.max_solving().saturating_sub(solving),
                };
                pubgrub::resolve(&provider, Node::Root, root_version())
            };
            solving += began.elapsed();
            match solved {
                Ok(solution) => return self.resolution(&solution, &lock(&known)),
                Err(PubGrubError::NoSolution(tree)) => {
                    return Err(self.failure(&tree, &lock(&known)));
                }
                Err(
                    PubGrubError::ErrorChoosingVersion { source, .. }
                    | PubGrubError::ErrorRetrievingDependencies { source, .. }
                    | PubGrubError::ErrorInShouldCancel(source),
                ) => self.fetch(source, &known).await?,
            }
        }
    }

    /// Fetches what the solver needs (or returns why it stopped).
    async fn fetch(&self, need: Need, known: &Mutex<Known>) -> Result<(), PackageError> {
        self.budget.spend(1)?;
        match need {
            Need::Fail(e) => Err(*e),
            Need::Files(names) => self.fetch_offers(names, known).await,
            Need::Index(name) => {
                let offer = lock(known).offers.get(&name).cloned().unwrap_or_default();
                let files = self.index_files(&name).await?;
                let fuller =
                    (*offer)
                        .clone()
                        .with_index(&name, files, self.python, &self.python_full);
                let mut known = lock(known);
                known.offers.insert(name, Arc::new(fuller));
                // What was worked out with the wheelhouse's versions alone
                // is worked out again.
                known.worked.clear();
                Ok(())
            }
            Need::Metadata(name, version) => {
                let older = self.older_unread(&name, &version, &lock(known));
                let (deps, prefetched) = futures::future::join(
                    self.read_metadata(&name, &version, known, true),
                    futures::future::join_all(
                        older
                            .iter()
                            .map(|v| self.read_metadata(&name, v, known, false)),
                    ),
                )
                .await;
                let mut deps = deps?;
                for read in prefetched {
                    match read {
                        Ok(more) => deps.extend(more),
                        // Reported if the solver comes to that version.
                        Err(e) if !e.is_stop() => {}
                        Err(e) => return Err(e),
                    }
                }
                let missing: Vec<PackageName> = {
                    let known = lock(known);
                    deps.into_iter()
                        .filter(|d| !known.offers.contains_key(d))
                        .collect()
                };
                self.fetch_offers(missing, known).await
            }
        }
    }

    /// Fetches the offers of `names`, at once.
    async fn fetch_offers(
        &self,
        mut names: Vec<PackageName>,
        known: &Mutex<Known>,
    ) -> Result<(), PackageError> {
        names.sort();
        names.dedup();
        self.budget.spend(names.len() as u64)?;
        let offers = futures::future::join_all(names.iter().map(|n| self.offer_of(n))).await;
        let mut known = lock(known);
        for (name, offer) in names.into_iter().zip(offers) {
            known.offers.insert(name, Arc::new(offer?));
        }
        if known.offers.len() > self.max_packages.saturating_mul(LOOKED_AT_PER_PICKED) {
            return Err(PackageError::TooManyPackages {
                limit: self.max_packages,
            });
        }
        Ok(())
    }

    /// What `name` is offered: the wheelhouse's versions, and the index's
    /// too when the wheelhouse has none.
    async fn offer_of(&self, name: &PackageName) -> Result<Offer, PackageError> {
        let local = self.source.local_files(name);
        let offer = Offer::local(name, local, self.python, &self.python_full);
        if !offer.local.is_empty() {
            return Ok(offer);
        }
        let files = self.index_files(name).await?;
        Ok(offer.with_index(name, files, self.python, &self.python_full))
    }

    async fn index_files(&self, name: &PackageName) -> Result<Vec<ProjectFile>, PackageError> {
        Ok(self
            .source
            .index_files(name)
            .await?
            .map(|files| files.as_ref().clone())
            .unwrap_or_default())
    }

    /// When the solver goes back through the versions of `name` (it has
    /// read some already and asks for `version`), the older versions to read
    /// alongside it, unread, newest first: one more for each read so far,
    /// up to [`MAX_READ_AHEAD`], within the reads allowed; none when reading
    /// metadata means downloading whole wheels (concurrent downloads would
    /// each see the whole download budget).
    fn older_unread(&self, name: &PackageName, version: &Version, known: &Known) -> Vec<Version> {
        if !self.source.cheap_metadata() {
            return Vec::new();
        }
        let reads = known.reads.get(name).copied().unwrap_or(0);
        let room = MAX_READS_PER_PACKAGE.saturating_sub(reads + 1);
        let Some(offer) = known.offers.get(name) else {
            return Vec::new();
        };
        offer
            .all()
            .map(|u| &u.version)
            .filter(|v| *v < version && !v.any_prerelease())
            .filter(|v| !known.facts.contains_key(&(name.clone(), (*v).clone())))
            .take(reads.min(MAX_READ_AHEAD).min(room))
            .cloned()
            .collect()
    }

    /// Reads the metadata of `name` `version` into `known`; returns the
    /// packages it requires without extras (to fetch their offers alongside).
    /// Unless `may_download`, a version whose metadata would take a whole
    /// download is left unread.
    async fn read_metadata(
        &self,
        name: &PackageName,
        version: &Version,
        known: &Mutex<Known>,
        may_download: bool,
    ) -> Result<Vec<PackageName>, PackageError> {
        let usable = lock(known)
            .offers
            .get(name)
            .and_then(|o| o.wheel_of(version).cloned())
            .ok_or_else(|| {
                PackageError::Internal(format!("no wheel of {name} {version} to read"))
            })?;
        let read = if may_download {
            self.source.metadata(&usable.file, &usable.wheel).await
        } else {
            match self
                .source
                .metadata_without_download(&usable.file, &usable.wheel)
                .await
            {
                Ok(Some(metadata)) => Ok(metadata),
                Ok(None) => return Ok(Vec::new()),
                Err(e) => Err(e),
            }
        };
        let read = read.and_then(|metadata| {
            if &metadata.name != name || metadata.version != usable.wheel.version {
                return Err(PackageError::BadMetadata {
                    filename: usable.file.filename.clone(),
                    reason: MetadataError::NameMismatch {
                        found: format!("{} {}", metadata.name, metadata.version),
                        expected: format!("{} {}", usable.wheel.name, usable.wheel.version),
                    },
                });
            }
            Ok(metadata)
        });
        let metadata = match read {
            Ok(metadata) => metadata,
            Err(e) => {
                // As pip: a version whose metadata cannot be read is passed over.
                let why = unreadable(&e).ok_or(e)?;
                let mut known = lock(known);
                *known.reads.entry(name.clone()).or_default() += 1;
                known.facts.insert(
                    (name.clone(), version.clone()),
                    Arc::new(Facts {
                        requires_dist: Vec::new(),
                        provides_extra: None,
                        wrong_python: None,
                        broken: Some(clip(&why, SHOWN_TEXT_CHARS * 2)),
                    }),
                );
                return Ok(Vec::new());
            }
        };
        let wrong_python = metadata
            .requires_python
            .as_ref()
            .filter(|rp| !rp.contains(&self.python_full))
            .map(|rp| clip(&format!("Requires-Python {rp}"), SHOWN_TEXT_CHARS));
        let deps: Vec<PackageName> = metadata
            .requires_dist
            .iter()
            // Only what the version needs without extras: an extra nobody
            // asked for is never looked up.
            .filter(|d| d.marker.evaluate(self.env, &[]))
            .map(|d| d.name.clone())
            .collect();
        let mut known = lock(known);
        *known.reads.entry(name.clone()).or_default() += 1;
        known.facts.insert(
            (name.clone(), version.clone()),
            Arc::new(Facts {
                requires_dist: metadata.requires_dist,
                provides_extra: Some(metadata.provides_extra),
                wrong_python,
                broken: None,
            }),
        );
        Ok(deps)
    }

    /// The packages of a solution, breadth first from what was asked.
    fn resolution(
        &self,
        solution: &SelectedDependencies<Node, Version>,
        known: &Known,
    ) -> Result<Resolution, PackageError> {
        let mut order: Vec<PackageName> = Vec::new();
        let mut seen: HashSet<Node> = HashSet::new();
        let mut queue = VecDeque::from([Node::Root]);
        while let Some(node) = queue.pop_front() {
            let Some(version) = solution.get(&node) else {
                continue;
            };
            let Some(Worked::Available(deps)) = known.worked.get(&(node.clone(), version.clone()))
            else {
                continue;
            };
            for (dep, _) in deps {
                if seen.insert(dep.clone()) {
                    if let Node::Package(name) = dep {
                        order.push(name.clone());
                    }
                    queue.push_back(dep.clone());
                }
            }
        }
        if order.len() > self.max_packages {
            return Err(PackageError::TooManyPackages {
                limit: self.max_packages,
            });
        }
        let mut packages = Vec::with_capacity(order.len());
        for name in order {
            let Some(version) = solution.get(&Node::Package(name.clone())).cloned() else {
                continue;
            };
            let installed = self
                .installed
                .get(&name)
                .is_some_and(|i| i.version == version);
            let choice = if installed {
                Choice::Installed
            } else {
                let usable = known
                    .offers
                    .get(&name)
                    .and_then(|o| o.wheel_of(&version))
                    .ok_or_else(|| {
                        PackageError::Internal(format!("no wheel of {name} {version}"))
                    })?;
                Choice::New {
                    file: Box::new(usable.file.clone()),
                    wheel: Box::new(usable.wheel.clone()),
                }
            };
            (self.progress)(format!("resolved {name} {version}"));
            packages.push(Resolved {
                name,
                version,
                choice,
            });
        }
        let mut notes: Vec<String> = known.notes.iter().take(MAX_NOTES).cloned().collect();
        notes.extend(self.older_built_ins(&packages, known));
        notes.extend(self.broken_requirements(&packages));
        if known.notes.len() > MAX_NOTES {
            notes.push(format!("and {} more notes", known.notes.len() - MAX_NOTES));
        }
        Ok(Resolution { packages, notes })
    }
}

impl Resolver<'_> {
    /// A note naming the built-ins the resolution kept where the index
    /// offers a newer pure release that fits every requirement seen (where
    /// pip's answer may differ).
    fn older_built_ins(&self, packages: &[Resolved], known: &Known) -> Option<String> {
        let older: Vec<String> = packages
            .iter()
            .filter(|p| self.installed.get(&p.name).is_some_and(|i| i.built_in))
            .filter_map(|p| {
                let constraints = known.constraints.get(&p.name)?;
                let newest = known
                    .offers
                    .get(&p.name)?
                    .all()
                    .filter(|u| !u.yanked && !u.version.any_prerelease())
                    .map(|u| &u.version)
                    .filter(|v| constraints.iter().all(|c| c.specifiers.contains(v)))
                    .max()?;
                (*newest > p.version)
                    .then(|| format!("{} {} (the index has {newest})", p.name, p.version))
            })
            .collect();
        (!older.is_empty()).then(|| {
            format!(
                "Built into this runtime and kept, though newer releases fit (pip, which has no built-ins, would install those; a pure-Python one gives way when asked for by version, e.g. `name>=newer`): {}.",
                some_of(&older, SHOWN_ORIGINS * 2, ", ")
            )
        })
    }
}

impl Resolver<'_> {
    /// pip's warning about dependency conflicts: the packages installed (or
    /// built in) and left out of the resolution whose requirements a version
    /// it puts in does not meet. Like pip, the install goes on.
    fn broken_requirements(&self, packages: &[Resolved]) -> Option<String> {
        let new: HashMap<&PackageName, &Version> = packages
            .iter()
            .filter(|p| matches!(p.choice, Choice::New { .. }))
            .map(|p| (&p.name, &p.version))
            .collect();
        if new.is_empty() {
            return None;
        }
        let mut others: Vec<(&PackageName, &Installed)> = self
            .installed
            .iter()
            .filter(|(name, _)| !new.contains_key(name))
            .collect();
        others.sort_by(|a, b| a.0.cmp(b.0));
        let mut broken: Vec<String> = Vec::new();
        for (name, dist) in others {
            for req in &dist.requires_dist {
                let Some(version) = new.get(&req.name) else {
                    continue;
                };
                if specifiers(req).contains(version) || !req.marker.evaluate(self.env, &[]) {
                    continue;
                }
                broken.push(format!(
                    "{name} {} requires `{}`, but {} {version} is what this sandbox has now",
                    dist.version,
                    strip_marker(req),
                    req.name
                ));
            }
        }
        (!broken.is_empty()).then(|| {
            format!(
                "Installed anyway, as pip does, though it breaks what other packages ask for (code using them may fail): {}.",
                some_of(&broken, SHOWN_ORIGINS, "; ")
            )
        })
    }
}

/// What is wrong with a version whose metadata or wheel cannot be read
/// (`None` for any other failure, which stops the install).
fn unreadable(e: &PackageError) -> Option<String> {
    match e {
        PackageError::BadMetadata { filename, reason } => {
            Some(format!("the metadata of {filename} is unusable: {reason}"))
        }
        PackageError::UnsafeWheel { filename, source } => {
            Some(format!("{filename} cannot be read: {source}"))
        }
        _ => None,
    }
}

/// A requirement without its marker, for messages.
fn strip_marker(requirement: &Requirement) -> String {
    let mut plain = requirement.clone();
    plain.marker = pep508_rs::MarkerTree::TRUE;
    plain.to_string()
}
