//! [`Sources`]: where an installer finds packages, shared by its installs:
//! its settings, the indexes (with their page cache), the wheel cache on the
//! host, the HTTP client (made on first use) and the configured wheelhouse.
//! An install's session reads through it.

use std::sync::{Arc, OnceLock};

use super::budget::InstallBudget;
use super::cache::WheelCache;
use super::credentials::CredentialRule;
use super::error::PackageError;
use super::http::{ClientSetupError, HttpClient};
use super::index::IndexClient;
use super::settings::PackageSettings;
use super::stop::InstallStop;
use super::unpack::UnpackLimits;
use super::wheelhouse::Wheelhouse;

/// Where packages come from (a clone shares the page cache and the HTTP
/// client).
#[derive(Clone, Debug)]
pub(crate) struct Sources {
    settings: PackageSettings,
    index: Arc<IndexClient>,
    cache: WheelCache,
    http: Arc<OnceLock<Result<HttpClient, ClientSetupError>>>,
}

impl Sources {
    /// The sources `settings` name. Nothing is contacted yet.
    pub(crate) fn new(settings: PackageSettings) -> Self {
        let index = Arc::new(IndexClient::new(
            settings.indexes.clone(),
            &settings.http,
            settings.limits.max_page_bytes,
        ));
        let cache = WheelCache::new(settings.cache_dir.clone(), settings.wheel_cache_bytes);
        Self {
            settings,
            index,
            cache,
            http: Arc::new(OnceLock::new()),
        }
    }

    /// The settings.
    pub(crate) fn settings(&self) -> &PackageSettings {
        &self.settings
    }

    /// Whether an index is configured.
    pub(crate) fn has_index(&self) -> bool {
        self.index.is_configured()
    }

    /// Whether an index or a wheelhouse is configured.
    pub(crate) fn is_configured(&self) -> bool {
        self.has_index() || self.settings.wheelhouse.is_some()
    }

    /// The wheel cache.
    pub(crate) fn cache(&self) -> &WheelCache {
        &self.cache
    }

    /// The indexes.
    pub(crate) fn index(&self) -> &IndexClient {
        &self.index
    }

    /// The HTTP client, made on first use.
    pub(crate) fn http(&self) -> Result<&HttpClient, PackageError> {
        self.http
            .get_or_init(|| {
                HttpClient::new(
                    &self.settings.http,
                    CredentialRule::from_indexes(self.index.indexes()),
                )
            })
            .as_ref()
            .map_err(|e| PackageError::HttpClient(e.clone()))
    }

    /// The caps on one wheel.
    pub(crate) fn unpack_limits(&self) -> UnpackLimits {
        let l = &self.settings.limits;
        UnpackLimits {
            max_members: l.max_members,
            max_total_bytes: l.max_unpacked_bytes,
            max_member_bytes: l.max_member_bytes,
            max_metadata_bytes: l.max_metadata_bytes,
        }
    }

    /// A fresh budget for one install (or one `wheelhouse add`).
    pub(crate) fn budget(&self, stop: InstallStop) -> InstallBudget {
        InstallBudget::new(stop, &self.settings.limits)
    }

    /// Where names are looked for, in words.
    pub(crate) fn searched(&self, wheelhouse: Option<&Wheelhouse>) -> String {
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

    /// The wheelhouse as it is now, when one is configured.
    pub(crate) fn scan_wheelhouse(&self) -> Result<Option<Wheelhouse>, PackageError> {
        self.settings
            .wheelhouse
            .as_deref()
            .map(Wheelhouse::scan)
            .transpose()
    }
}
