//! [`Installer`]: installs requirements into one sandbox's site-packages.
//!
//! One install runs on a blocking thread (see `offload.rs`), under an
//! [`InstallStop`] (the caller's cancellation, and the install's deadline)
//! and an [`InstallBudget`] (resolver steps, bytes downloaded):
//! 1. parse the requirements; scan the sandbox's `*.dist-info` directories
//!    (a bounded read of guest data);
//! 2. resolve (wheelhouse first, then the indexes), reading dependencies from
//!    each wheel's metadata (a PEP 658 metadata file when the index offers one
//!    with a hash, else the wheel itself);
//! 3. fetch every new wheel: from the wheelhouse, from the host cache by
//!    sha256, or downloaded and checked against the index's sha256;
//! 4. measure what the sandbox's disk quota leaves free, and unpack every
//!    wheel into a fresh staging directory beside site-packages (see
//!    `unpack.rs`), charging every byte, file and directory to that room as
//!    it is written, so an install that does not fit stops at once;
//! 5. only when all of that succeeded and the install was not stopped,
//!    remove the versions being replaced and move the staged files into
//!    place. The staging directory is removed in every case, so a refused,
//!    cancelled or timed-out install leaves the sandbox as it was. A wheel
//!    refused as unsafe is also deleted from the wheel cache.
//!
//! With no index and no wheelhouse configured, the first install asks the
//! machine's pip which index it uses (see `pip_index.rs`), and every later
//! install uses that answer.
//!
//! No code from a package runs on the host; nothing is built from source.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Seek, SeekFrom};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use pep440_rs::Version;
use pep508_rs::PackageName;
use tokio_util::sync::CancellationToken;

use super::budget::InstallBudget;
use super::bytecode::{self, BytecodeCache, WheelBytecode};
use super::environment::{PythonVersionError, wasi_environment};
use super::error::PackageError;
use super::offload::offload;
use super::pip_index::{PipIndexError, ask_pip};
use super::place::{Fetched, InstallTarget, place, room_for};
use super::requirement::parse_requirements;
use super::resolver::{Choice, Installed, Resolution, Resolver};
use super::session::Session;
use super::settings::PackageSettings;
use super::site_packages::{self, InstalledDist, SiteScan};
use super::sources::Sources;
use super::stop::InstallStop;
use super::unpack::python_sources;
use super::wheel_name::PythonMinor;
use crate::sandbox::{InstallReport, InstalledPackage, PackageSource};

/// Most modules of one install whose import is checked after it.
const MAX_MODULES_CHECKED: usize = 5;

/// Most time an install spends compiling the bytecode of what it fetched;
/// past it, the wheels install without (their modules compile when imported).
const MAX_COMPILE_TIME: Duration = Duration::from_secs(120);

/// Installs packages; one per server, shared by its sandboxes (a clone
/// shares the page cache and the HTTP client).
#[derive(Clone, Debug)]
pub struct Installer {
    sources: Sources,
    bytecode: BytecodeCache,
    /// With nothing configured: an installer for the index pip names, made
    /// by the first install that needs it.
    from_pip: Arc<std::sync::Mutex<Option<Installer>>>,
}

impl Installer {
    /// An installer with these settings. Nothing is contacted until the
    /// first install.
    pub fn new(settings: PackageSettings) -> Self {
        let bytecode =
            BytecodeCache::new(settings.bytecode_dir.clone(), settings.wheel_cache_bytes);
        Self {
            sources: Sources::new(settings),
            bytecode,
            from_pip: Arc::default(),
        }
    }

    /// Its settings.
    pub fn settings(&self) -> &PackageSettings {
        self.sources.settings()
    }

    /// Where it finds packages.
    pub(crate) fn sources(&self) -> &Sources {
        &self.sources
    }

    /// Whether an index is configured.
    pub fn has_index(&self) -> bool {
        self.sources.has_index()
    }

    /// Whether an index or a wheelhouse is configured.
    pub fn is_configured(&self) -> bool {
        self.sources.is_configured()
    }

    /// The installer that serves installs: this one when a source is
    /// configured; else one for the index the machine's pip names. Pip is
    /// asked on the first install that needs it, and again after a failed
    /// answer (a slow start must not disable installs for good); the
    /// question gives up when `stop` fires. This blocks while pip answers:
    /// call it off the async workers.
    fn effective(&self, stop: &InstallStop) -> Result<Installer, PackageError> {
        if self.is_configured() {
            return Ok(self.clone());
        }
        let Some(python) = self.settings().pip_python.as_deref() else {
            return Err(PackageError::NotConfigured);
        };
        let mut from_pip = self.wait_for_pip_question(stop)?;
        if let Some(installer) = from_pip.as_ref() {
            return Ok(installer.clone());
        }
        let indexes = ask_pip(python, &|| stop.check().is_err()).map_err(|e| match e {
            PipIndexError::Stopped => stop
                .check()
                .err()
                .map_or(PackageError::Cancelled, PackageError::from),
            e => PackageError::NoPipIndex(e.to_string()),
        })?;
        tracing::info!(python, indexes = ?indexes, "no index is configured; using the one pip names");
        let mut settings = self.settings().clone();
        settings.indexes = indexes;
        settings.pip_python = None;
        let installer = Installer::new(settings);
        *from_pip = Some(installer.clone());
        Ok(installer)
    }

    /// The answer pip gave, once no other install is asking it; gives up
    /// when `stop` fires (an install waiting its turn is cancellable too).
    fn wait_for_pip_question(
        &self,
        stop: &InstallStop,
    ) -> Result<std::sync::MutexGuard<'_, Option<Installer>>, PackageError> {
        loop {
            match self.from_pip.try_lock() {
                Ok(guard) => return Ok(guard),
                Err(std::sync::TryLockError::Poisoned(poisoned)) => {
                    return Ok(poisoned.into_inner());
                }
                Err(std::sync::TryLockError::WouldBlock) => {
                    stop.check()?;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            }
        }
    }

    /// Resolves requirement strings for a WASI CPython of `python_version`.
    pub(crate) async fn resolve(
        &self,
        session: &Session<'_>,
        requirements: &[String],
        python_version: &str,
        installed: &HashMap<PackageName, Installed>,
        progress: &(dyn Fn(String) + Send + Sync),
    ) -> Result<Resolution, PackageError> {
        let requirements =
            parse_requirements(requirements, self.settings().limits.max_requirements)?;
        let env = wasi_environment(python_version)?;
        let python = PythonMinor::parse(python_version)
            .ok_or_else(|| PythonVersionError::Form(python_version.to_owned()))?;
        let python_full = Version::from_str(python_version).map_err(|source| {
            PythonVersionError::NotAVersion {
                version: python_version.to_owned(),
                source,
            }
        })?;
        let resolver = Resolver {
            source: session,
            env: &env,
            python,
            python_full,
            installed,
            max_packages: self.settings().limits.max_packages,
            budget: session.budget,
            progress,
        };
        resolver.resolve(&requirements).await
    }

    /// Installs `requirements` into `target`. On any error, and when `cancel`
    /// fires or the install's deadline passes, nothing in the sandbox has
    /// changed; the call returns only once nothing is writing into it.
    pub async fn install(
        &self,
        requirements: &[String],
        target: &InstallTarget,
        progress: &(dyn Fn(String) + Send + Sync),
        cancel: &CancellationToken,
    ) -> Result<InstallReport, PackageError> {
        // Should this call be dropped, the work stops too.
        let token = cancel.child_token();
        let _stop_when_dropped = token.clone().drop_guard();
        let stop = InstallStop::new(token, self.settings().install_timeout);
        let installer = self.clone();
        let requirements = requirements.to_vec();
        let target = target.clone();
        offload(progress, move |progress| async move {
            let report = |m: String| progress.send(m);
            installer
                .effective(&stop)?
                .install_here(&requirements, &target, stop, &report)
                .await
        })
        .await
    }

    /// [`Installer::install`], on its blocking thread: see what the sandbox
    /// has, resolve, fetch the new wheels, place them, and say where they
    /// came from.
    async fn install_here(
        &self,
        requirements: &[String],
        target: &InstallTarget,
        stop: InstallStop,
        progress: &(dyn Fn(String) + Send + Sync),
    ) -> Result<InstallReport, PackageError> {
        let budget = self.sources.budget(stop);
        let wheelhouse = self.sources.scan_wheelhouse()?;
        let SiteScan { dists, mut notes } = self.scan_site(target, &budget)?;
        let installed = with_built_in(&dists, target);
        let session = Session::new(&self.sources, wheelhouse, &budget);
        let resolution = self
            .resolve(
                &session,
                requirements,
                &target.python_version,
                &installed,
                progress,
            )
            .await?;
        notes.extend(resolution.notes);
        let mut report = InstallReport::default();
        let mut fetched = Vec::new();
        for package in resolution.packages {
            match package.choice {
                Choice::Installed => report.already_present.push(already_present(
                    &package.name,
                    &package.version,
                    &installed,
                )),
                Choice::New { file, wheel } => {
                    let mut wheel_file = session.fetch(&file).await?;
                    session.check_metadata(&file, &mut wheel_file)?;
                    progress(format!(
                        "got {} from {}",
                        file.filename,
                        from(&wheel_file.source)
                    ));
                    fetched.push(Fetched {
                        replaces: dists.get(&package.name).cloned(),
                        name: package.name,
                        version: package.version,
                        wheel: *wheel,
                        filename: file.filename,
                        wheel_file,
                        bytecode: WheelBytecode::default(),
                        modules: Vec::new(),
                    });
                }
            }
        }
        self.compile_bytecode(target, &mut fetched, budget.stop(), progress)
            .await;
        report.installed = self.place_all(target, &mut fetched, &budget, &mut notes, progress)?;
        mark_replaced_built_ins(&mut report.installed, target);
        // Only the packages asked for: their imports import what they need.
        let asked: Vec<PackageName> =
            parse_requirements(requirements, self.settings().limits.max_requirements)?
                .into_iter()
                .map(|r| r.name)
                .collect();
        report.modules = fetched
            .iter()
            .filter(|f| asked.contains(&f.name))
            .flat_map(|f| f.modules.clone())
            .take(MAX_MODULES_CHECKED)
            .collect();
        if report
            .installed
            .iter()
            .any(|p| p.source == Some(PackageSource::Index))
        {
            notes.push(format!(
                "Downloaded from {}.",
                self.sources.index().describe()
            ));
        }
        report.output = (!notes.is_empty()).then(|| notes.join("\n"));
        Ok(report)
    }

    /// Gives each fetched wheel its modules' bytecode: from the host's
    /// cache, or compiled now by the sandbox's runtime (and kept). A wheel
    /// whose bytecode cannot be had installs without it.
    async fn compile_bytecode(
        &self,
        target: &InstallTarget,
        fetched: &mut [Fetched],
        stop: &InstallStop,
        progress: &(dyn Fn(String) + Send + Sync),
    ) {
        let Some(compiler) = &target.compiler else {
            return;
        };
        if fetched.is_empty() {
            return;
        }
        progress("writing bytecode".into());
        let wheels: Vec<(&File, Option<String>)> = fetched
            .iter()
            .map(|f| (&f.wheel_file.file, f.wheel_file.sha256.clone()))
            .collect();
        let limits = self.sources.unpack_limits();
        // Time left for placing the wheels afterwards, whatever the compile takes.
        let within = (stop.remaining() * 3 / 4).min(MAX_COMPILE_TIME);
        let found = bytecode::for_wheels(
            &wheels,
            compiler.as_ref(),
            &self.bytecode,
            within,
            stop.token(),
            |mut file, max_bytes| {
                file.seek(SeekFrom::Start(0)).ok()?;
                python_sources(BufReader::new(file), &limits, max_bytes)
                    .ok()
                    .flatten()
            },
        )
        .await;
        for (item, bytecode) in fetched.iter_mut().zip(found) {
            item.bytecode = bytecode;
        }
    }

    /// Unpacks the fetched wheels into the sandbox (nothing when there are
    /// none), adding what the result should say to `notes`.
    fn place_all(
        &self,
        target: &InstallTarget,
        fetched: &mut [Fetched],
        budget: &InstallBudget,
        notes: &mut Vec<String>,
        progress: &(dyn Fn(String) + Send + Sync),
    ) -> Result<Vec<InstalledPackage>, PackageError> {
        if fetched.is_empty() {
            return Ok(Vec::new());
        }
        progress(format!("unpacking {} wheel(s)", fetched.len()));
        // Held until what was placed has been measured and charged.
        let (room, _hold) = room_for(target, &self.settings().limits, budget.stop())?;
        let (placed, more_notes) = place(
            target,
            fetched,
            &self.sources.unpack_limits(),
            room,
            self.sources.cache(),
        )?;
        notes.extend(more_notes);
        progress(format!("installed {} package(s)", placed.len()));
        Ok(placed)
    }

    /// The distributions in the sandbox's site-packages (none when it does
    /// not exist yet).
    fn scan_site(
        &self,
        target: &InstallTarget,
        budget: &InstallBudget,
    ) -> Result<SiteScan, PackageError> {
        let site_path = &target.site_packages;
        let site = site_packages::open_existing(&target.sandbox, site_path)
            .map_err(|source| PackageError::io("open", site_path.to_string(), source))?;
        match site {
            Some(site) => {
                site_packages::installed(&site, site_path, &self.settings().limits, budget)
            }
            None => Ok(SiteScan::default()),
        }
    }
}

/// What the sandbox has: the runtime's built-in packages and its
/// site-packages. A copy in site-packages replaces a pure-Python built-in
/// (the driver imports it instead); a built-in with compiled parts is what
/// the interpreter imports whatever site-packages holds.
fn with_built_in(
    dists: &HashMap<PackageName, InstalledDist>,
    target: &InstallTarget,
) -> HashMap<PackageName, Installed> {
    let mut installed: HashMap<PackageName, Installed> = target
        .built_in
        .iter()
        .map(|(n, i)| (n.clone(), i.clone()))
        .collect();
    for (name, dist) in dists {
        if !installed.get(name).is_some_and(|i| i.compiled) {
            installed.insert(name.clone(), dist.installed.clone());
        }
    }
    installed
}

/// Marks the packages of `placed` that replace a built-in of the runtime.
fn mark_replaced_built_ins(placed: &mut [InstalledPackage], target: &InstallTarget) {
    for package in placed {
        let built_in = PackageName::from_str(&package.name)
            .ok()
            .and_then(|name| target.built_in.get(&name).map(|i| i.version.to_string()));
        package.replaces_built_in = built_in;
    }
}

/// A package the resolution kept, marked when the runtime carries it.
fn already_present(
    name: &PackageName,
    version: &Version,
    installed: &HashMap<PackageName, Installed>,
) -> InstalledPackage {
    InstalledPackage {
        source: installed
            .get(name)
            .filter(|i| i.built_in)
            .map(|_| PackageSource::Runtime),
        name: name.to_string(),
        version: version.to_string(),
        replaces_built_in: None,
    }
}

/// Where a fetched wheel came from, in words.
fn from(source: &PackageSource) -> &'static str {
    match source {
        PackageSource::Cache => "the download cache",
        PackageSource::Wheelhouse => "the wheelhouse",
        _ => "the index",
    }
}
