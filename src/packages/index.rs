//! [`IndexClient`]: the configured package indexes, asked in order.
//!
//! The first index that knows a project supplies all of its files (indexes
//! are not mixed for one project, so an extra index cannot shadow a name on
//! the main one file by file). Project pages are asked for as PEP 691 JSON,
//! with HTML accepted, read up to a size cap, parsed on a blocking thread,
//! and kept in a bounded [`PageCache`] for a few minutes so a second sandbox
//! installing the same thing does not ask again.

use std::sync::{Arc, Mutex};

use pep508_rs::PackageName;
use reqwest::Url;

use super::budget::InstallBudget;
use super::error::PackageError;
use super::http::{FetchError, HttpClient};
use super::page_cache::{Page, PageCache};
use super::settings::{HttpSettings, IndexUrl, redact};
use super::simple_page::parse_page;
use crate::sandbox::human_bytes;

/// What the `Accept` header asks of a simple-API page.
const ACCEPT_PAGE: &str = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01";

/// The configured indexes and a short-lived cache of their project pages.
#[derive(Debug)]
pub struct IndexClient {
    indexes: Vec<IndexUrl>,
    pages: Mutex<PageCache>,
    max_page_bytes: u64,
}

impl IndexClient {
    /// A client for `indexes`, keeping pages as `http` says and reading at
    /// most `max_page_bytes` of one.
    pub fn new(indexes: Vec<IndexUrl>, http: &HttpSettings, max_page_bytes: u64) -> Self {
        Self {
            indexes,
            pages: Mutex::new(PageCache::new(
                http.page_ttl,
                http.page_cache_bytes,
                http.page_cache_entries,
            )),
            max_page_bytes,
        }
    }

    /// The indexes, in order.
    pub fn indexes(&self) -> &[IndexUrl] {
        &self.indexes
    }

    /// Whether any index is configured.
    pub fn is_configured(&self) -> bool {
        !self.indexes.is_empty()
    }

    /// The indexes, in words.
    pub fn describe(&self) -> String {
        self.indexes
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The files the first index that knows `name` lists for it; `Ok(None)`
    /// when none does. When an index cannot be reached and none of the others
    /// knows the project, that failure is the error.
    pub async fn project(
        &self,
        http: &HttpClient,
        name: &PackageName,
        budget: &InstallBudget,
    ) -> Result<Page, PackageError> {
        let mut failure = None;
        for (i, index) in self.indexes.iter().enumerate() {
            let key = (i, name.clone());
            let cached = self
                .pages
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&key);
            let files = match cached {
                Some(files) => files,
                None => match self.fetch(http, index, name, budget).await {
                    Ok(files) => {
                        self.pages
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(key, files.clone());
                        files
                    }
                    Err(
                        e @ (PackageError::Cancelled
                        | PackageError::TimedOut { .. }
                        | PackageError::TooComplex { .. }
                        | PackageError::InstallTooLarge { .. }),
                    ) => {
                        return Err(e);
                    }
                    Err(e) => {
                        tracing::warn!(index = %index, error = %e, "package index failed");
                        failure.get_or_insert(e);
                        continue;
                    }
                },
            };
            if let Some(files) = files {
                return Ok(Some(files));
            }
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(None),
        }
    }

    async fn fetch(
        &self,
        http: &HttpClient,
        index: &IndexUrl,
        name: &PackageName,
        budget: &InstallBudget,
    ) -> Result<Page, PackageError> {
        let url = index
            .url()
            .join(&format!("{name}/"))
            .map_err(|e| PackageError::Internal(format!("cannot build a page URL: {e}")))?;
        let limit = budget.download_limit(self.max_page_bytes);
        let fetched = match budget
            .stop()
            .race(async { Ok::<_, PackageError>(http.get(&url, ACCEPT_PAGE, limit).await) })
            .await?
        {
            Ok(Some(f)) => f,
            Ok(None) => return Ok(None),
            Err(FetchError::TooLarge(_)) => {
                return Err(budget
                    .download_exhausted(limit, self.max_page_bytes)
                    .unwrap_or_else(|| PackageError::PageTooLarge {
                        url: redact(&url),
                        limit: human_bytes(self.max_page_bytes),
                    }));
            }
            Err(e) => {
                return Err(fetch_error(
                    e,
                    index.to_string(),
                    Some(index.origin()),
                    &url,
                    "the project page",
                ));
            }
        };
        budget.downloaded(fetched.body.len() as u64)?;
        let page_url = redact(&url);
        let files = tokio::task::spawn_blocking(move || {
            parse_page(&fetched.body, &fetched.content_type, &fetched.url)
        })
        .await
        .map_err(|e| PackageError::Internal(format!("a worker task failed: {e}")))?
        .map_err(|reason| PackageError::BadIndexPage {
            url: page_url,
            reason,
        })?;
        Ok(Some(Arc::new(files)))
    }
}

/// Turns a failed request to `url` (for `what`, on the index described by
/// `index`, configured by setting `origin`) into the error the user reads.
pub fn fetch_error(
    e: FetchError,
    index: String,
    origin: Option<&str>,
    url: &Url,
    what: &str,
) -> PackageError {
    match e {
        FetchError::Transport(reason) => PackageError::Unreachable { index, reason },
        FetchError::Redirect(refused) => PackageError::Redirect {
            index,
            url: redact(url),
            refused,
        },
        FetchError::Status(status) => PackageError::Http {
            url: redact(url),
            status: status.to_string(),
            hint: match status.as_u16() {
                401 | 403 => format!(
                    " ({what}); the index wants credentials: put them in the index URL configured in {}",
                    origin.unwrap_or("the index setting")
                ),
                s if s >= 500 || s == 429 => {
                    format!(
                        " ({what}) even after retries; the index is having trouble, try again later"
                    )
                }
                _ => format!(" ({what})"),
            },
        },
        FetchError::TooLarge(limit) => PackageError::TooLarge {
            filename: format!("{what} {}", redact(url)),
            limit: human_bytes(limit),
        },
        FetchError::Write(source) => PackageError::io("write", "a download in the cache", source),
    }
}
