//! [`PageCache`]: index project pages kept in memory for a few minutes, so
//! a second sandbox installing the same thing does not ask again.
//!
//! Shared by every sandbox of the server, so it is bounded twice: by the
//! number of pages and by an estimate of the bytes they hold. When a new page
//! does not fit, the least recently used pages go first; a page larger than
//! the whole bound is not kept at all.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pep508_rs::PackageName;

use super::project_file::{FileLocation, ProjectFile};

/// A page: the files an index lists for a project, or `None` when the index
/// does not know it.
pub type Page = Option<Arc<Vec<ProjectFile>>>;

/// Which index (by position) and which project.
pub type PageKey = (usize, PackageName);

struct Entry {
    fetched: Instant,
    used: u64,
    size: u64,
    page: Page,
}

/// The cache.
pub struct PageCache {
    ttl: Duration,
    max_bytes: u64,
    max_entries: usize,
    entries: HashMap<PageKey, Entry>,
    bytes: u64,
    clock: u64,
}

impl std::fmt::Debug for PageCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageCache")
            .field("entries", &self.entries.len())
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl PageCache {
    /// A cache keeping pages for `ttl`, at most `max_entries` of them and
    /// about `max_bytes` in all.
    pub fn new(ttl: Duration, max_bytes: u64, max_entries: usize) -> Self {
        Self {
            ttl,
            max_bytes,
            max_entries,
            entries: HashMap::new(),
            bytes: 0,
            clock: 0,
        }
    }

    /// The page kept for `key`, if it is still fresh.
    pub fn get(&mut self, key: &PageKey) -> Option<Page> {
        self.clock += 1;
        let clock = self.clock;
        let ttl = self.ttl;
        let entry = self.entries.get_mut(key)?;
        if entry.fetched.elapsed() >= ttl {
            self.remove(key);
            return None;
        }
        entry.used = clock;
        Some(entry.page.clone())
    }

    /// Keeps `page` for `key`, making room by dropping expired pages, then
    /// the least recently used ones.
    pub fn insert(&mut self, key: PageKey, page: Page) {
        self.remove(&key);
        let size = estimate(&page);
        if size > self.max_bytes || self.max_entries == 0 {
            return;
        }
        let ttl = self.ttl;
        let expired: Vec<PageKey> = self
            .entries
            .iter()
            .filter(|(_, e)| e.fetched.elapsed() >= ttl)
            .map(|(k, _)| k.clone())
            .collect();
        for k in expired {
            self.remove(&k);
        }
        while self.entries.len() >= self.max_entries || self.bytes + size > self.max_bytes {
            let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            self.remove(&oldest);
        }
        self.clock += 1;
        self.bytes += size;
        self.entries.insert(
            key,
            Entry {
                fetched: Instant::now(),
                used: self.clock,
                size,
                page,
            },
        );
    }

    /// Pages kept.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Bytes the kept pages hold, as estimated.
    #[cfg(test)]
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    fn remove(&mut self, key: &PageKey) {
        if let Some(entry) = self.entries.remove(key) {
            self.bytes -= entry.size;
        }
    }
}

/// About how many bytes a page holds in memory.
fn estimate(page: &Page) -> u64 {
    let base = std::mem::size_of::<Entry>() as u64 + 64;
    let Some(files) = page else {
        return base;
    };
    files.iter().fold(base, |total, f| {
        let location = match &f.location {
            FileLocation::Url(url) => url.as_str().len(),
            FileLocation::Path(path) => path.as_os_str().len(),
        };
        let text = f.filename.len()
            + location
            + f.sha256.as_ref().map_or(0, String::len)
            + f.requires_python.as_ref().map_or(0, String::len)
            + f.yanked.as_ref().map_or(0, String::len)
            + f.metadata
                .as_ref()
                .and_then(Option::as_ref)
                .map_or(0, String::len);
        total + (std::mem::size_of::<ProjectFile>() + text) as u64
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::PackageSource;
    use std::str::FromStr;

    fn page(files: usize) -> Page {
        let file = ProjectFile {
            filename: "demo-1.0-py3-none-any.whl".into(),
            location: FileLocation::Url(
                reqwest::Url::parse("https://index.test/files/demo-1.0-py3-none-any.whl").unwrap(),
            ),
            sha256: Some("a".repeat(64)),
            requires_python: None,
            yanked: None,
            metadata: None,
            source: PackageSource::Index,
        };
        Some(Arc::new(vec![file; files]))
    }

    fn key(i: usize) -> PageKey {
        (0, PackageName::from_str(&format!("p{i}")).unwrap())
    }

    #[test]
    fn the_cache_stays_under_its_byte_bound_dropping_the_least_recently_used() {
        let one = estimate(&page(100));
        let mut cache = PageCache::new(Duration::from_secs(600), one * 3, 100);
        for i in 0..3 {
            cache.insert(key(i), page(100));
        }
        assert_eq!(cache.len(), 3);
        assert!(cache.get(&key(0)).is_some(), "p0 is used again");
        cache.insert(key(3), page(100));
        assert!(cache.bytes() <= one * 3, "{} > {}", cache.bytes(), one * 3);
        assert!(
            cache.get(&key(1)).is_none(),
            "p1 was the least recently used"
        );
        assert!(cache.get(&key(0)).is_some());
        assert!(cache.get(&key(3)).is_some());
        cache.insert(key(9), page(10_000));
        assert!(
            cache.get(&key(9)).is_none(),
            "a page over the whole bound is not kept"
        );
        assert!(cache.bytes() <= one * 3);
    }

    #[test]
    fn the_cache_holds_at_most_its_entry_count_and_forgets_expired_pages() {
        let mut cache = PageCache::new(Duration::from_secs(600), u64::MAX, 2);
        for i in 0..5 {
            cache.insert(key(i), None);
        }
        assert_eq!(cache.len(), 2);
        let mut cache = PageCache::new(Duration::ZERO, u64::MAX, 10);
        cache.insert(key(0), page(1));
        assert!(cache.get(&key(0)).is_none());
        assert_eq!(cache.bytes(), 0);
    }
}
