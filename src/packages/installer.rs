//! [`Installer`]: installs requirements into one sandbox's site-packages.
//!
//! One install:
//! 1. parse the requirements; scan the sandbox's `*.dist-info` directories;
//! 2. resolve (wheelhouse first, then the indexes), reading dependencies from
//!    each wheel's metadata (a PEP 658 metadata file when the index offers one
//!    with a hash, else the wheel itself);
//! 3. fetch every new wheel: from the wheelhouse, from the host cache by
//!    sha256, or downloaded and checked against the index's sha256;
//! 4. unpack every wheel into a fresh staging directory beside site-packages
//!    (see `unpack.rs`), then check the sandbox's disk quota;
//! 5. only when all of that succeeded, remove the versions being replaced and
//!    move the staged files into place. The staging directory is removed in
//!    every case, so a refused install leaves the sandbox as it was.
//!
//! No code from a package runs on the host; nothing is built from source.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;
use cap_std::fs::Dir;
use pep440_rs::Version;
use pep508_rs::PackageName;
use rand::Rng;
use tokio_util::sync::CancellationToken;

use super::built_in::BuiltInPackages;
use super::cache::WheelCache;
use super::environment::wasi_environment;
use super::error::PackageError;
use super::http::HttpClient;
use super::index::{IndexClient, fetch_error};
use super::metadata::CoreMetadata;
use super::project_file::{FileLocation, ProjectFile, sha256_hex};
use super::requirement::parse_requirements;
use super::resolver::{Choice, Installed, Resolution, Resolver, Source};
use super::settings::{PackageSettings, redact};
use super::site_packages::{self, InstalledDist};
use super::unpack::{UnpackLimits, read_metadata, unpack_wheel, write_installed_record};
use super::wheel_name::{PythonMinor, WheelFilename};
use super::wheelhouse::Wheelhouse;
use crate::sandbox::quota::DiskQuota;
use crate::sandbox::{GuestPath, InstallReport, InstalledPackage, PackageSource, human_bytes};

/// What installed files are marked with (`*.dist-info/INSTALLER`).
const INSTALLER_NAME: &str = "mcp-code-sandbox";

/// Where an install goes.
#[derive(Clone, Debug)]
pub struct InstallTarget {
    /// The sandbox's root directory.
    pub sandbox: Arc<Dir>,
    /// Its site-packages, as a guest path.
    pub site_packages: GuestPath,
    /// The runtime's full Python version, e.g. `3.12.0`.
    pub python_version: String,
    /// The sandbox's disk quota.
    pub quota: DiskQuota,
    /// Packages the runtime carries itself.
    pub built_in: Arc<BuiltInPackages>,
}

/// Installs packages; one per server, shared by its sandboxes.
#[derive(Debug)]
pub struct Installer {
    settings: PackageSettings,
    index: IndexClient,
    cache: WheelCache,
    http: OnceLock<Result<HttpClient, String>>,
}

/// A wheel fetched and about to be unpacked.
struct Fetched {
    name: PackageName,
    version: Version,
    wheel: WheelFilename,
    filename: String,
    path: PathBuf,
    source: PackageSource,
    replaces: Option<InstalledDist>,
}

impl Installer {
    /// An installer with these settings. Nothing is contacted until the
    /// first install.
    pub fn new(settings: PackageSettings) -> Self {
        let index = IndexClient::new(
            settings.indexes.clone(),
            settings.http.page_ttl,
            settings.limits.max_page_bytes,
        );
        let cache = WheelCache::new(settings.cache_dir.clone());
        Self {
            settings,
            index,
            cache,
            http: OnceLock::new(),
        }
    }

    /// Its settings.
    pub fn settings(&self) -> &PackageSettings {
        &self.settings
    }

    /// Whether an index is configured.
    pub fn has_index(&self) -> bool {
        self.index.is_configured()
    }

    /// Whether anything can be installed at all.
    pub fn is_configured(&self) -> bool {
        self.has_index() || self.settings.wheelhouse.is_some()
    }

    fn http(&self) -> Result<&HttpClient, PackageError> {
        self.http
            .get_or_init(|| HttpClient::new(&self.settings.http))
            .as_ref()
            .map_err(|e| PackageError::Internal(e.clone()))
    }

    fn unpack_limits(&self) -> UnpackLimits {
        let l = &self.settings.limits;
        UnpackLimits {
            max_members: l.max_members,
            max_total_bytes: l.max_unpacked_bytes,
            max_member_bytes: l.max_member_bytes,
            max_metadata_bytes: l.max_metadata_bytes,
        }
    }

    /// Where names are looked for, in words.
    fn searched(&self, wheelhouse: Option<&Wheelhouse>) -> String {
        let mut places = Vec::new();
        if let Some(w) = wheelhouse {
            places.push(format!("the wheelhouse {}", w.dir().display()));
        }
        if self.has_index() {
            places.push(self.index.describe());
        }
        match (places.is_empty(), wheelhouse) {
            (true, _) => "no index or wheelhouse is configured".into(),
            (false, Some(w)) if !self.has_index() => format!(
                "looked in {}; no index is configured, so add wheels to the wheelhouse on a machine that reaches one with `mcp-code-sandbox wheelhouse add NAME --dir {}`",
                places.join(" and "),
                w.dir().display()
            ),
            (false, _) => format!("looked in {}", places.join(" and ")),
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
        let requirements = parse_requirements(requirements, self.settings.limits.max_requirements)?;
        let bad_version = |reason: String| {
            PackageError::Internal(format!("the runtime's Python version: {reason}"))
        };
        let env = wasi_environment(python_version).map_err(bad_version)?;
        let python = PythonMinor::parse(python_version)
            .ok_or_else(|| bad_version(format!("'{python_version}' is not major.minor")))?;
        let python_full =
            Version::from_str(python_version).map_err(|e| bad_version(e.to_string()))?;
        let resolver = Resolver {
            source: session,
            env: &env,
            python,
            python_full,
            installed,
            max_packages: self.settings.limits.max_packages,
            progress,
        };
        resolver.resolve(&requirements).await
    }

    /// Installs `requirements` into `target`. On any error nothing in the
    /// sandbox has changed.
    pub async fn install(
        &self,
        requirements: &[String],
        target: &InstallTarget,
        progress: &(dyn Fn(String) + Send + Sync),
        _cancel: &CancellationToken,
    ) -> Result<InstallReport, PackageError> {
        if !self.is_configured() {
            return Err(PackageError::NotConfigured);
        }
        let wheelhouse = match self.settings.wheelhouse.clone() {
            Some(dir) => Some(blocking(move || Wheelhouse::scan(&dir)).await??),
            None => None,
        };
        let sandbox = target.sandbox.clone();
        let site_path = target.site_packages.clone();
        let max_metadata = self.settings.limits.max_metadata_bytes;
        let dists = blocking(move || {
            let site = site_packages::open_existing(&sandbox, &site_path)
                .map_err(|source| PackageError::io("open", site_path.to_string(), source))?;
            Ok::<_, PackageError>(
                site.map(|site| site_packages::installed(&site, max_metadata))
                    .unwrap_or_default(),
            )
        })
        .await??;
        // Built-in packages come first on sys.path, so they are what the
        // interpreter imports whatever site-packages holds.
        let installed: HashMap<PackageName, Installed> = dists
            .iter()
            .map(|(n, d)| (n.clone(), d.installed.clone()))
            .chain(target.built_in.iter().map(|(n, i)| (n.clone(), i.clone())))
            .collect();

        let session = Session::new(self, wheelhouse);
        let resolution = self
            .resolve(
                &session,
                requirements,
                &target.python_version,
                &installed,
                progress,
            )
            .await?;

        let mut report = InstallReport::default();
        let mut fetched = Vec::new();
        for package in resolution.packages {
            match package.choice {
                Choice::Installed => report.already_present.push(InstalledPackage {
                    source: installed
                        .get(&package.name)
                        .filter(|i| i.built_in)
                        .map(|_| PackageSource::Runtime),
                    name: package.name.to_string(),
                    version: package.version.to_string(),
                }),
                Choice::New { file, wheel } => {
                    let (path, source) = session.fetch(&file).await?;
                    let from = match source {
                        PackageSource::Cache => "the download cache",
                        PackageSource::Wheelhouse => "the wheelhouse",
                        _ => "the index",
                    };
                    progress(format!("got {} from {from}", file.filename));
                    fetched.push(Fetched {
                        replaces: dists.get(&package.name).cloned(),
                        name: package.name,
                        version: package.version,
                        wheel: *wheel,
                        filename: file.filename,
                        path,
                        source,
                    });
                }
            }
        }

        let mut notes = resolution.notes;
        if !fetched.is_empty() {
            progress(format!("unpacking {} wheel(s)", fetched.len()));
            let target = target.clone();
            let limits = self.unpack_limits();
            let (placed, more_notes) = blocking(move || place(&target, fetched, &limits)).await??;
            notes.extend(more_notes);
            report.installed = placed;
            progress(format!("installed {} package(s)", report.installed.len()));
        }
        if !notes.is_empty() {
            report.output = Some(notes.join("\n"));
        }
        Ok(report)
    }
}

/// Runs blocking work off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, PackageError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| PackageError::Internal(format!("a worker task failed: {e}")))
}

/// Unpacks every wheel into one staging directory beside site-packages,
/// checks the quota, then replaces old versions and moves everything into
/// place. The staging directory is always removed.
fn place(
    target: &InstallTarget,
    fetched: Vec<Fetched>,
    limits: &UnpackLimits,
) -> Result<(Vec<InstalledPackage>, Vec<String>), PackageError> {
    let site_path = &target.site_packages;
    let created = site_packages::create_dirs(&target.sandbox, site_path)
        .map_err(|source| PackageError::io("create", site_path.to_string(), source))?;
    let result = stage_and_place(target, &fetched, limits);
    if result.is_err() {
        site_packages::remove_created(&target.sandbox, &created);
    }
    result
}

/// [`place`] once site-packages exists.
fn stage_and_place(
    target: &InstallTarget,
    fetched: &[Fetched],
    limits: &UnpackLimits,
) -> Result<(Vec<InstalledPackage>, Vec<String>), PackageError> {
    let site_path = &target.site_packages;
    let site = target
        .sandbox
        .open_dir(site_path.relative())
        .map_err(|source| PackageError::io("open", site_path.to_string(), source))?;
    let parent_path = site_path.parent();
    let parent = target
        .sandbox
        .open_dir(parent_path.relative())
        .map_err(|source| PackageError::io("open", parent_path.to_string(), source))?;
    let staging_name = format!(".install-staging-{:016x}", rand::rng().random::<u64>());
    parent.create_dir(&staging_name).map_err(|source| {
        PackageError::io(
            "create a staging directory in",
            parent_path.to_string(),
            source,
        )
    })?;
    let result = (|| {
        let staging = parent.open_dir(&staging_name).map_err(|source| {
            PackageError::io(
                "open the staging directory in",
                parent_path.to_string(),
                source,
            )
        })?;
        let mut notes = Vec::new();
        let mut staged_bytes = 0u64;
        for (i, item) in fetched.iter().enumerate() {
            let slot = i.to_string();
            let staging_io = |source| {
                PackageError::io(
                    "write the staging directory in",
                    parent_path.to_string(),
                    source,
                )
            };
            staging.create_dir(&slot).map_err(staging_io)?;
            let dest = staging.open_dir(&slot).map_err(staging_io)?;
            let file = std::fs::File::open(&item.path).map_err(|source| {
                PackageError::io("read", item.path.display().to_string(), source)
            })?;
            let unsafe_wheel = |source| PackageError::UnsafeWheel {
                filename: item.filename.clone(),
                source,
            };
            let unpacked = unpack_wheel(std::io::BufReader::new(file), &item.wheel, &dest, limits)
                .map_err(unsafe_wheel)?;
            write_installed_record(&dest, &unpacked, INSTALLER_NAME).map_err(unsafe_wheel)?;
            staged_bytes += unpacked.bytes;
            if !unpacked.dropped.is_empty() {
                let mut shown: Vec<&str> = unpacked
                    .dropped
                    .iter()
                    .take(3)
                    .map(String::as_str)
                    .collect();
                let more = unpacked.dropped.len().saturating_sub(3);
                let more_text = format!("and {more} more");
                if more > 0 {
                    shown.push(&more_text);
                }
                notes.push(format!(
                    "{} {}: {} file(s) meant for outside site-packages were not installed (only the importable package is): {}",
                    item.name,
                    item.version,
                    unpacked.dropped.len(),
                    shown.join(", ")
                ));
            }
            if !unpacked.pth_files.is_empty() {
                notes.push(format!(
                    "{} {} installs {}, which runs when the interpreter starts",
                    item.name,
                    item.version,
                    unpacked.pth_files.join(", ")
                ));
            }
        }
        let usage = target.quota.usage(&target.sandbox);
        if let Some(over) = target.quota.exceeded(usage) {
            return Err(PackageError::Quota(format!(
                "the packages unpack to {}, and with them {over}; nothing was installed. Delete files from the sandbox or install fewer packages",
                human_bytes(staged_bytes)
            )));
        }
        for item in fetched {
            if let Some(old) = &item.replaces {
                site_packages::remove(&site, old, limits.max_metadata_bytes).map_err(|source| {
                    PackageError::io("remove the old version from", site_path.to_string(), source)
                })?;
                notes.push(format!(
                    "replaced {} {} with {}; if the old version was already imported, restart the work that uses it",
                    item.name, old.installed.version, item.version
                ));
            }
        }
        for i in 0..fetched.len() {
            let slot = staging.open_dir(i.to_string()).map_err(|source| {
                PackageError::io(
                    "open the staging directory in",
                    parent_path.to_string(),
                    source,
                )
            })?;
            site_packages::move_into_place(&slot, &site).map_err(|source| {
                PackageError::io("move files into", site_path.to_string(), source)
            })?;
        }
        let placed = fetched
            .iter()
            .map(|f| InstalledPackage {
                name: f.name.to_string(),
                version: f.version.to_string(),
                source: Some(f.source),
            })
            .collect();
        Ok((placed, notes))
    })();
    if let Err(e) = parent.remove_dir_all(&staging_name) {
        tracing::warn!(error = %e, "could not remove a staging directory");
    }
    result
}

/// One install's view of the sources: the wheelhouse as scanned at its
/// start, the indexes, and what was fetched so far.
pub(crate) struct Session<'a> {
    installer: &'a Installer,
    wheelhouse: Option<Wheelhouse>,
    metadata: Mutex<HashMap<String, CoreMetadata>>,
    downloaded: Mutex<HashSet<String>>,
}

impl<'a> Session<'a> {
    /// A session over `installer`'s indexes and `wheelhouse`.
    pub(crate) fn new(installer: &'a Installer, wheelhouse: Option<Wheelhouse>) -> Self {
        Self {
            installer,
            wheelhouse,
            metadata: Mutex::new(HashMap::new()),
            downloaded: Mutex::new(HashSet::new()),
        }
    }

    /// Gets a wheel onto the host: its path and where it came from.
    pub(crate) async fn fetch(
        &self,
        file: &ProjectFile,
    ) -> Result<(PathBuf, PackageSource), PackageError> {
        let url = match &file.location {
            FileLocation::Path(path) => return Ok((path.clone(), PackageSource::Wheelhouse)),
            FileLocation::Url(url) => url,
        };
        let sha256 =
            file.sha256
                .as_deref()
                .and_then(sha256_hex)
                .ok_or_else(|| PackageError::NoHash {
                    filename: file.filename.clone(),
                })?;
        let cache = self.installer.cache.clone();
        let key = sha256.clone();
        if let Some(path) = blocking(move || cache.get(&key)).await? {
            let fresh = self.lock_downloaded().contains(&sha256);
            return Ok((
                path,
                if fresh {
                    PackageSource::Index
                } else {
                    PackageSource::Cache
                },
            ));
        }
        let http = self.installer.http()?;
        let limits = &self.installer.settings.limits;
        let temp = self.installer.cache.temp_file().map_err(|source| {
            PackageError::io(
                "write to",
                self.installer.cache.dir().display().to_string(),
                source,
            )
        })?;
        let remove_temp = |temp: &PathBuf| {
            let _ = std::fs::remove_file(temp);
        };
        let downloaded = match http.download(url, &temp, limits.max_download_bytes).await {
            Ok(Some(d)) => d,
            Ok(None) => {
                remove_temp(&temp);
                return Err(PackageError::Http {
                    url: redact(url),
                    status: "404 Not Found".into(),
                    hint: format!(
                        " for {}, which the index lists; try again later",
                        file.filename
                    ),
                });
            }
            Err(super::http::FetchError::TooLarge(limit)) => {
                remove_temp(&temp);
                return Err(PackageError::TooLarge {
                    filename: file.filename.clone(),
                    limit: human_bytes(limit),
                });
            }
            Err(e) => {
                remove_temp(&temp);
                let host = format!("{} (file host of the index)", redact(url));
                return Err(fetch_error(e, host, None, url, &file.filename));
            }
        };
        if downloaded.sha256 != sha256 {
            remove_temp(&temp);
            return Err(PackageError::HashMismatch {
                filename: file.filename.clone(),
                expected: sha256,
                actual: downloaded.sha256,
            });
        }
        let path = self
            .installer
            .cache
            .commit(&temp, &sha256)
            .map_err(|source| {
                remove_temp(&temp);
                PackageError::io(
                    "store in",
                    self.installer.cache.dir().display().to_string(),
                    source,
                )
            })?;
        tracing::info!(file = %file.filename, bytes = downloaded.size, "downloaded a wheel");
        self.lock_downloaded().insert(sha256);
        Ok((path, PackageSource::Index))
    }

    fn lock_downloaded(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.downloaded.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The core metadata served beside a wheel (PEP 658), when the index
    /// offers it with a hash and it matches; `None` otherwise.
    async fn metadata_file(&self, file: &ProjectFile, url: &reqwest::Url) -> Option<String> {
        let expected = file.metadata.clone().flatten()?;
        let http = self.installer.http().ok()?;
        let mut meta_url = url.clone();
        meta_url.set_path(&format!("{}.metadata", url.path()));
        let limit = self.installer.settings.limits.max_metadata_bytes;
        let fetched = http.get(&meta_url, "*/*", limit).await.ok()??;
        let actual = super::cache::hex(&<sha2::Sha256 as sha2::Digest>::digest(&fetched.body));
        if actual != expected {
            tracing::warn!(file = %file.filename, "a metadata file does not match its hash; reading the wheel instead");
            return None;
        }
        String::from_utf8(fetched.body).ok()
    }
}

#[async_trait]
impl Source for Session<'_> {
    fn local_files(&self, name: &PackageName) -> Vec<ProjectFile> {
        self.wheelhouse
            .as_ref()
            .map(|w| w.files(name))
            .unwrap_or_default()
    }

    async fn index_files(
        &self,
        name: &PackageName,
    ) -> Result<Option<Arc<Vec<ProjectFile>>>, PackageError> {
        if !self.installer.has_index() {
            return Ok(None);
        }
        let http = self.installer.http()?;
        self.installer.index.project(http, name).await
    }

    async fn metadata(
        &self,
        file: &ProjectFile,
        _wheel: &WheelFilename,
    ) -> Result<CoreMetadata, PackageError> {
        let key = format!("{:?}", file.location);
        if let Some(m) = self
            .metadata
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Ok(m.clone());
        }
        let bad = |reason: String| PackageError::BadMetadata {
            filename: file.filename.clone(),
            reason,
        };
        let mut text = None;
        if let FileLocation::Url(url) = &file.location {
            let cached = match file.sha256.clone() {
                Some(sha) => {
                    let cache = self.installer.cache.clone();
                    blocking(move || cache.get(&sha)).await?
                }
                None => None,
            };
            if cached.is_none() {
                text = self.metadata_file(file, url).await;
            }
        }
        let text = match text {
            Some(t) => t,
            None => {
                let (path, _) = self.fetch(file).await?;
                let limits = self.installer.unpack_limits();
                let filename = file.filename.clone();
                blocking(move || {
                    let reader = std::fs::File::open(&path).map_err(|source| {
                        PackageError::io("read", path.display().to_string(), source)
                    })?;
                    read_metadata(std::io::BufReader::new(reader), &limits)
                        .map_err(|source| PackageError::UnsafeWheel { filename, source })
                })
                .await??
            }
        };
        let metadata = CoreMetadata::parse(&text).map_err(bad)?;
        self.metadata
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, metadata.clone());
        Ok(metadata)
    }

    fn searched(&self) -> String {
        self.installer.searched(self.wheelhouse.as_ref())
    }
}
