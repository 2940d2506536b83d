//! [`Session`]: one install's view of the sources (the wheelhouse, the
//! indexes, the wheel cache), what it fetched so far, and its budget; the
//! resolver's [`Source`].

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use pep508_rs::PackageName;

use super::budget::InstallBudget;
use super::error::PackageError;
use super::http::FetchError;
use super::index::fetch_error;
use super::metadata::CoreMetadata;
use super::metadata_error::MetadataError;
use super::place::WheelFile;
use super::project_file::{FileLocation, ProjectFile, sha256_hex};
use super::remote_wheel::{self, Ranged};
use super::resolver::Source;
use super::settings::redact;
use super::sources::Sources;
use super::unpack::{WheelError, read_metadata};
use super::wheel_name::WheelFilename;
use super::wheelhouse::Wheelhouse;
use crate::sandbox::{PackageSource, human_bytes};

/// One install's view of the sources: the wheelhouse as scanned at its
/// start, the indexes, what was fetched so far, and the install's budget.
/// It does blocking work (hashing, parsing), so it is used only on the
/// install's blocking thread.
pub struct Session<'a> {
    sources: &'a Sources,
    wheelhouse: Option<Wheelhouse>,
    /// What the install may spend.
    pub budget: &'a InstallBudget,
    metadata: Mutex<HashMap<String, CoreMetadata>>,
    /// Metadata read from somewhere other than its wheel (a metadata file,
    /// ranges of the wheel), by location: compared with the wheel's own
    /// before that wheel is installed.
    unchecked: Mutex<HashMap<String, CoreMetadata>>,
    /// Whether the file host answered a range request with something else
    /// (then wheels are downloaded whole for their metadata).
    ranges_not_served: AtomicBool,
    downloaded: Mutex<HashSet<String>>,
}

impl<'a> Session<'a> {
    /// A session over `sources`' indexes and `wheelhouse`, spending
    /// from `budget`.
    pub fn new(
        sources: &'a Sources,
        wheelhouse: Option<Wheelhouse>,
        budget: &'a InstallBudget,
    ) -> Self {
        Self {
            sources,
            wheelhouse,
            budget,
            metadata: Mutex::new(HashMap::new()),
            unchecked: Mutex::new(HashMap::new()),
            ranges_not_served: AtomicBool::new(false),
            downloaded: Mutex::new(HashSet::new()),
        }
    }

    /// Gets a wheel onto the host, open for reading.
    pub async fn fetch(&self, file: &ProjectFile) -> Result<WheelFile, PackageError> {
        let url = match &file.location {
            FileLocation::Path(path) => {
                let opened = File::open(path).map_err(|source| {
                    PackageError::io("read the wheelhouse's", file.filename.clone(), source)
                })?;
                return Ok(WheelFile {
                    file: opened,
                    source: PackageSource::Wheelhouse,
                    sha256: None,
                });
            }
            FileLocation::Url(url) => url,
        };
        let sha256 =
            file.sha256
                .as_deref()
                .and_then(sha256_hex)
                .ok_or_else(|| PackageError::NoHash {
                    filename: file.filename.clone(),
                })?;
        self.budget.stop().check()?;
        let cache = self.sources.cache();
        if let Some(cached) = cache.get(&sha256) {
            let fresh = self.lock_downloaded().contains(&sha256);
            return Ok(WheelFile {
                file: cached,
                source: if fresh {
                    PackageSource::Index
                } else {
                    PackageSource::Cache
                },
                sha256: Some(sha256),
            });
        }
        let http = self.sources.http()?;
        let cap = self.sources.settings().limits.max_download_bytes;
        let limit = self.budget.download_limit(cap);
        // Deleted when dropped: on any error, a cancellation or the deadline.
        let partial = cache
            .partial()
            .map_err(|source| PackageError::io("write to", "the wheel cache", source))?;
        let outcome = self
            .budget
            .stop()
            .race(async { Ok::<_, PackageError>(http.download(url, partial.file(), limit).await) })
            .await?;
        let downloaded = match outcome {
            Ok(Some(d)) => d,
            Ok(None) => {
                return Err(PackageError::Http {
                    url: redact(url),
                    status: "404 Not Found".into(),
                    hint: format!(
                        " for {}, which the index lists; try again later",
                        file.filename
                    ),
                });
            }
            Err(FetchError::TooLarge(_)) => {
                return Err(self
                    .budget
                    .download_exhausted(limit, cap)
                    .unwrap_or_else(|| PackageError::TooLarge {
                        filename: file.filename.clone(),
                        limit: human_bytes(cap),
                    }));
            }
            Err(e) => {
                let host = format!("{} (file host of the index)", redact(url));
                return Err(fetch_error(e, host, None, url, &file.filename));
            }
        };
        self.budget.downloaded(downloaded.size)?;
        if downloaded.sha256 != sha256 {
            return Err(PackageError::HashMismatch {
                filename: file.filename.clone(),
                expected: sha256,
                actual: downloaded.sha256,
            });
        }
        let committed = cache
            .commit(partial, &sha256)
            .map_err(|source| PackageError::io("store in", "the wheel cache", source))?;
        tracing::info!(file = %file.filename, bytes = downloaded.size, "downloaded a wheel");
        self.lock_downloaded().insert(sha256.clone());
        Ok(WheelFile {
            file: committed,
            source: PackageSource::Index,
            sha256: Some(sha256),
        })
    }

    fn lock_downloaded(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.downloaded.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The METADATA of the wheel at `url`, read by range requests when the
    /// index's file host serves them. What does not parse, or names another
    /// project or version than `wheel`, is not taken from ranges (which no
    /// hash vouches for): the wheel is downloaded, so that a release is passed
    /// over only for what its verified wheel says.
    async fn metadata_by_ranges(
        &self,
        url: &reqwest::Url,
        wheel: &WheelFilename,
    ) -> Result<Option<String>, PackageError> {
        if self.ranges_not_served.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let Ok(http) = self.sources.http() else {
            return Ok(None);
        };
        let limits = self.sources.unpack_limits();
        let max_wheel = self.sources.settings().limits.max_download_bytes;
        let read =
            remote_wheel::metadata_by_ranges(http, url, &limits, max_wheel, self.budget).await?;
        match read {
            Ranged::Read(text) => Ok(CoreMetadata::parse(&text)
                .ok()
                .filter(|m| m.name == wheel.name && m.version == wheel.version)
                .map(|_| text)),
            Ranged::NotServed => {
                self.ranges_not_served.store(true, Ordering::Relaxed);
                Ok(None)
            }
            Ranged::Unread => Ok(None),
        }
    }

    /// Checks that a fetched wheel's own METADATA says what the metadata the
    /// resolution went by (read beside it, or by ranges) said; the wheel is
    /// left open at its start.
    pub fn check_metadata(
        &self,
        file: &ProjectFile,
        wheel: &mut WheelFile,
    ) -> Result<(), PackageError> {
        let key = format!("{:?}", file.location);
        let Some(expected) = lock(&self.unchecked).get(&key).cloned() else {
            return Ok(());
        };
        let unsafe_wheel = |source| PackageError::UnsafeWheel {
            filename: file.filename.clone(),
            source,
        };
        let limits = self.sources.unpack_limits();
        let text =
            read_metadata(std::io::BufReader::new(&wheel.file), &limits).map_err(unsafe_wheel)?;
        wheel
            .file
            .seek(SeekFrom::Start(0))
            .map_err(|e| unsafe_wheel(WheelError::Corrupt(e.to_string())))?;
        let own = CoreMetadata::parse(&text).map_err(|reason| PackageError::BadMetadata {
            filename: file.filename.clone(),
            reason,
        })?;
        if own != expected {
            return Err(PackageError::BadMetadata {
                filename: file.filename.clone(),
                reason: MetadataError::Differs,
            });
        }
        Ok(())
    }

    /// The core metadata served beside a wheel (PEP 658), when the index
    /// offers it with a hash and it matches; `None` otherwise. Only a stop
    /// (cancellation, deadline, budget) is an error.
    async fn metadata_file(
        &self,
        file: &ProjectFile,
        url: &reqwest::Url,
    ) -> Result<Option<String>, PackageError> {
        let Some(expected) = file.metadata.clone().flatten() else {
            return Ok(None);
        };
        let Ok(http) = self.sources.http() else {
            return Ok(None);
        };
        let mut meta_url = url.clone();
        meta_url.set_path(&format!("{}.metadata", url.path()));
        let limit = self
            .budget
            .download_limit(self.sources.settings().limits.max_metadata_bytes);
        let fetched = self
            .budget
            .stop()
            .race(async { Ok::<_, PackageError>(http.get(&meta_url, "*/*", limit).await) })
            .await?;
        let Ok(Some(fetched)) = fetched else {
            return Ok(None);
        };
        self.budget.downloaded(fetched.body.len() as u64)?;
        let actual = crate::digest::hex(&<sha2::Sha256 as sha2::Digest>::digest(&fetched.body));
        if actual != expected {
            tracing::warn!(file = %file.filename, "a metadata file does not match its hash; reading the wheel instead");
            return Ok(None);
        }
        Ok(String::from_utf8(fetched.body).ok())
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
        if !self.sources.has_index() {
            return Ok(None);
        }
        let http = self.sources.http()?;
        self.sources.index().project(http, name, self.budget).await
    }

    async fn metadata(
        &self,
        file: &ProjectFile,
        wheel: &WheelFilename,
    ) -> Result<CoreMetadata, PackageError> {
        self.metadata_of(file, wheel, true)
            .await?
            .ok_or_else(|| PackageError::Internal(format!("no metadata of {}", file.filename)))
    }

    async fn metadata_without_download(
        &self,
        file: &ProjectFile,
        wheel: &WheelFilename,
    ) -> Result<Option<CoreMetadata>, PackageError> {
        self.metadata_of(file, wheel, false).await
    }

    fn searched(&self) -> String {
        self.sources.searched(self.wheelhouse.as_ref())
    }

    fn cheap_metadata(&self) -> bool {
        !self.ranges_not_served.load(Ordering::Relaxed)
    }
}

impl Session<'_> {
    /// The core metadata of a wheel: from memory, the wheel cache or the
    /// wheelhouse, a metadata file, ranges of the wheel, or (when
    /// `may_download`, else `None`) the downloaded wheel.
    async fn metadata_of(
        &self,
        file: &ProjectFile,
        wheel: &WheelFilename,
        may_download: bool,
    ) -> Result<Option<CoreMetadata>, PackageError> {
        let key = format!("{:?}", file.location);
        if let Some(m) = self
            .metadata
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Ok(Some(m.clone()));
        }
        let bad = |reason: MetadataError| PackageError::BadMetadata {
            filename: file.filename.clone(),
            reason,
        };
        let mut text = None;
        if let FileLocation::Url(url) = &file.location {
            let cached = file
                .sha256
                .as_deref()
                .is_some_and(|sha| self.sources.cache().contains(sha));
            if !cached {
                text = self.metadata_file(file, url).await?;
            }
            if !cached && text.is_none() {
                text = self.metadata_by_ranges(url, wheel).await?;
            }
            if !cached && text.is_none() && !may_download {
                return Ok(None);
            }
        }
        let read_apart = text.is_some();
        let (text, from_wheel) = match text {
            Some(t) => (t, None),
            None => {
                let mut wheel = self.fetch(file).await?;
                let limits = self.sources.unpack_limits();
                let read = wheel
                    .file
                    .seek(SeekFrom::Start(0))
                    .map_err(|e| WheelError::Corrupt(e.to_string()))
                    .and_then(|_| read_metadata(std::io::BufReader::new(&wheel.file), &limits));
                match read {
                    Ok(text) => (text, wheel.sha256),
                    Err(source) => {
                        if let Some(sha) = &wheel.sha256 {
                            self.sources.cache().discard(sha);
                        }
                        return Err(PackageError::UnsafeWheel {
                            filename: file.filename.clone(),
                            source,
                        });
                    }
                }
            }
        };
        self.budget.spend(1)?;
        let metadata = match CoreMetadata::parse(&text) {
            Ok(m) => m,
            Err(reason) => {
                if let Some(sha) = &from_wheel {
                    self.sources.cache().discard(sha);
                }
                return Err(bad(reason));
            }
        };
        self.budget.spend(metadata.requires_dist.len() as u64)?;
        if read_apart {
            lock(&self.unchecked).insert(key.clone(), metadata.clone());
        }
        self.metadata
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, metadata.clone());
        Ok(Some(metadata))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
