//! A sandbox's site-packages seen from the host: which distributions it
//! holds (their `*.dist-info` directories), removing one being replaced, and
//! moving staged files into place.
//!
//! Everything goes through `cap_std` handles on the sandbox's own directory,
//! so whatever the guest left there (links, odd names) cannot lead outside.
//! Everything there is guest data, so reading it is bounded: at most so many
//! `.dist-info` directories, only the header part of each `METADATA`, so many
//! bytes of them in all, and every entry and requirement paid for from the
//! install's [`InstallBudget`].

use std::collections::{HashMap, HashSet};
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use cap_std::fs::Dir;
use pep440_rs::Version;
use pep508_rs::PackageName;

use super::budget::InstallBudget;
use super::error::PackageError;
use super::message_text::some_of;
use super::metadata::CoreMetadata;
use super::record::Record;
use super::resolver::Installed;
use super::settings::InstallLimits;
use super::unpack::member_components;
use crate::sandbox::remove_tree::remove_tree_in;
use crate::sandbox::{GuestPath, human_bytes};

/// A distribution found in site-packages.
#[derive(Clone, Debug)]
pub struct InstalledDist {
    /// Its `.dist-info` directory.
    pub dist_info: String,
    /// What the resolver needs to know.
    pub installed: Installed,
}

/// Opens the site-packages directory at `path` in the sandbox whose root is
/// `sandbox`, if it exists.
pub fn open_existing(sandbox: &Dir, path: &GuestPath) -> std::io::Result<Option<Dir>> {
    match sandbox.open_dir(path.relative()) {
        Ok(dir) => Ok(Some(dir)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Creates the directories of `path` that are missing; returns the ones it
/// created, outermost first, for [`remove_created`].
pub fn create_dirs(sandbox: &Dir, path: &GuestPath) -> std::io::Result<Vec<PathBuf>> {
    let mut created = Vec::new();
    let mut current = PathBuf::new();
    for component in path.components() {
        current.push(component);
        match sandbox.create_dir(&current) {
            Ok(()) => created.push(current.clone()),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(created)
}

/// Removes directories [`create_dirs`] made, innermost first, as long as they
/// are empty.
pub fn remove_created(sandbox: &Dir, created: &[PathBuf]) {
    for dir in created.iter().rev() {
        if sandbox.remove_dir(dir).is_err() {
            break;
        }
    }
}

/// What an install found in a sandbox's site-packages.
#[derive(Debug, Default)]
pub struct SiteScan {
    /// The distributions, by name.
    pub dists: HashMap<PackageName, InstalledDist>,
    /// What the result should say about ones that could not be fully read.
    pub notes: Vec<String>,
}

/// The distributions in `site`, by name. Unreadable or malformed entries are
/// skipped; a distribution whose METADATA cannot be read (or lists more than
/// an install reads) counts as installed without dependencies, and a note
/// says so. More `.dist-info` directories, or more METADATA bytes, than
/// `limits` allow refuse the install.
pub fn installed(
    site: &Dir,
    site_path: &GuestPath,
    limits: &InstallLimits,
    budget: &InstallBudget,
) -> Result<SiteScan, PackageError> {
    let mut scan = SiteScan::default();
    let mut unread = Vec::new();
    let mut metadata_bytes = 0u64;
    // A site-packages that cannot be listed is a refusal, not an empty one.
    let entries = site
        .entries()
        .map_err(|source| PackageError::io("list", site_path.to_string(), source))?;
    for entry in entries.flatten() {
        budget.spend(1)?;
        let Ok(file_name) = entry.file_name().into_string() else {
            continue;
        };
        let Some(stem) = file_name.strip_suffix(".dist-info") else {
            continue;
        };
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let Some((name, version)) = stem.split_once('-') else {
            continue;
        };
        let (Ok(name), Ok(version)) = (PackageName::from_str(name), Version::from_str(version))
        else {
            continue;
        };
        if scan.dists.len() >= limits.max_installed_dists {
            return Err(PackageError::CrowdedSite(format!(
                "{site_path} holds more than {} .dist-info directories, more than an install reads; remove the distributions the sandbox does not need (their directories there)",
                limits.max_installed_dists
            )));
        }
        let metadata_limit = limits
            .max_metadata_bytes
            .min(limits.max_site_metadata_bytes - metadata_bytes);
        let (text, read) = read_headers(site, &format!("{file_name}/METADATA"), metadata_limit);
        metadata_bytes += read;
        if metadata_bytes >= limits.max_site_metadata_bytes {
            return Err(PackageError::CrowdedSite(format!(
                "the METADATA files in {site_path} add up to more than {}, more than an install reads; remove the distributions the sandbox does not need",
                human_bytes(limits.max_site_metadata_bytes)
            )));
        }
        let requires_dist = match text.map(|t| CoreMetadata::parse(&t)) {
            Some(Ok(m)) if m.name == name => {
                budget.spend(m.requires_dist.len() as u64)?;
                m.requires_dist
            }
            Some(Err(reason)) => {
                unread.push(format!("{name} {version} ({reason})"));
                Vec::new()
            }
            _ => Vec::new(),
        };
        scan.dists.insert(
            name,
            InstalledDist {
                dist_info: file_name.clone(),
                installed: Installed {
                    version,
                    requires_dist,
                    built_in: false,
                    compiled: false,
                },
            },
        );
    }
    if !unread.is_empty() {
        scan.notes.push(format!(
            "the METADATA of {} in site-packages could not be used, so their dependencies were not checked: {}",
            if unread.len() == 1 { "one distribution".to_owned() } else { format!("{} distributions", unread.len()) },
            some_of(&unread, 3, "; ")
        ));
    }
    Ok(scan)
}

/// The header part of a text file beneath `dir` (up to its first blank
/// line), reading at most `limit` bytes; and how many bytes were read.
/// `None` when it is not a readable UTF-8 regular file.
fn read_headers(dir: &Dir, path: &str, limit: u64) -> (Option<String>, u64) {
    let Ok(file) = dir.open(path) else {
        return (None, 0);
    };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return (None, 0);
    }
    let mut reader = file.take(limit);
    let mut data = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let Ok(n) = reader.read(&mut chunk) else {
            return (None, data.len() as u64);
        };
        if n == 0 {
            break;
        }
        let searched_from = data.len().saturating_sub(3);
        data.extend_from_slice(&chunk[..n]);
        if let Some(end) = blank_line(&data[searched_from..]) {
            data.truncate(searched_from + end);
            let read = data.len() as u64;
            return (String::from_utf8(data).ok(), read);
        }
    }
    let read = data.len() as u64;
    (String::from_utf8(data).ok(), read)
}

/// Where the first blank line (`\n\n` or `\n\r\n`) starts in `data`.
fn blank_line(data: &[u8]) -> Option<usize> {
    let lf = data.windows(2).position(|w| w == b"\n\n");
    let crlf = data.windows(3).position(|w| w == b"\n\r\n");
    lf.into_iter().chain(crlf).min().map(|i| i + 1)
}

/// Reads a small text file beneath `dir`, at most `limit` bytes.
fn read_capped(dir: &Dir, path: &str, limit: u64) -> Option<String> {
    let file = dir.open(path).ok()?;
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return None;
    }
    let mut data = Vec::new();
    file.take(limit).read_to_end(&mut data).ok()?;
    String::from_utf8(data).ok()
}

/// Removes a distribution: the files its RECORD lists (paths that would
/// leave site-packages are skipped), its `.dist-info` directory, and the
/// directories that became empty.
pub fn remove(site: &Dir, dist: &InstalledDist, max_metadata_bytes: u64) -> std::io::Result<()> {
    let record = read_capped(
        site,
        &format!("{}/RECORD", dist.dist_info),
        max_metadata_bytes,
    )
    .and_then(|text| Record::parse(&text).ok())
    .unwrap_or_default();
    // Only the immediate parent of each removed file is remembered; a
    // directory that empties climbs to its own parent, so the memory held is
    // linear in the RECORD (a guest can write one of nested paths).
    let mut parents: HashSet<PathBuf> = HashSet::new();
    for path in record.entries.keys() {
        let Ok((components, false)) = member_components(path) else {
            continue;
        };
        if components[0] == dist.dist_info {
            continue;
        }
        let relative: PathBuf = components.iter().collect();
        match site.remove_file(&relative) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        if let Some(parent) = non_empty_parent(&relative) {
            parents.insert(parent);
        }
    }
    // A guest may have nested directories deep inside: removed without
    // recursion.
    match remove_tree_in(site, &dist.dist_info) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    remove_empty(site, parents);
    Ok(())
}

/// The parent of a relative path, unless it is the root.
fn non_empty_parent(path: &Path) -> Option<PathBuf> {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf)
}

/// Removes the directories in `dirs` that are empty, deepest first, and
/// then each emptied one's parent, and so on.
fn remove_empty(site: &Dir, mut dirs: HashSet<PathBuf>) {
    while !dirs.is_empty() {
        let mut level: Vec<PathBuf> = dirs.drain().collect();
        level.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        for dir in level {
            if site.remove_dir(&dir).is_ok()
                && let Some(parent) = non_empty_parent(&dir)
            {
                dirs.insert(parent);
            }
        }
    }
}

/// Moves everything in `staging` into `site`, merging directories that exist
/// in both and replacing files. If a move fails, what was moved is moved
/// back and the error returned.
pub fn move_into_place(staging: &Dir, site: &Dir) -> std::io::Result<()> {
    let mut moved = Vec::new();
    let result = merge(staging, site, Path::new(""), staging, site, &mut moved);
    if result.is_err() {
        for path in moved.iter().rev() {
            let _ = site.rename(path, staging, path);
        }
    }
    result
}

fn merge(
    from: &Dir,
    to: &Dir,
    prefix: &Path,
    staging_root: &Dir,
    site_root: &Dir,
    moved: &mut Vec<PathBuf>,
) -> std::io::Result<()> {
    let mut names = Vec::new();
    for entry in from.entries()? {
        let entry = entry?;
        names.push((entry.file_name(), entry.file_type()?.is_dir()));
    }
    names.sort();
    for (name, is_dir) in names {
        let existing = match to.symlink_metadata(&name) {
            Ok(meta) => Some(meta),
            Err(e) if e.kind() == ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        let path = prefix.join(&name);
        match existing {
            Some(meta) if meta.is_dir() && is_dir => {
                let from_sub = from.open_dir(&name)?;
                let to_sub = to.open_dir(&name)?;
                merge(&from_sub, &to_sub, &path, staging_root, site_root, moved)?;
                continue;
            }
            Some(meta) if meta.is_dir() => remove_tree_in(to, &name)?,
            Some(_) => to.remove_file(&name)?,
            None => {}
        }
        staging_root.rename(&path, site_root, &path)?;
        moved.push(path);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cap_std::ambient_authority;

    fn dirs() -> (tempfile::TempDir, Dir, Dir) {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("site")).unwrap();
        std::fs::create_dir_all(tmp.path().join("staging")).unwrap();
        let site = Dir::open_ambient_dir(tmp.path().join("site"), ambient_authority()).unwrap();
        let staging =
            Dir::open_ambient_dir(tmp.path().join("staging"), ambient_authority()).unwrap();
        (tmp, site, staging)
    }

    fn site_path() -> GuestPath {
        GuestPath::parse("/.local/lib/python3.12/site-packages").unwrap()
    }

    fn scan(site: &Dir) -> SiteScan {
        let budget = InstallBudget::new(
            crate::packages::stop::InstallStop::never(),
            &InstallLimits::default(),
        );
        installed(site, &site_path(), &InstallLimits::default(), &budget).unwrap()
    }

    #[test]
    fn a_guest_crowding_site_packages_gets_a_bounded_scan() {
        let (tmp, site, _) = dirs();
        let root = tmp.path().join("site");
        // METADATA listing more requirements than an install reads: the
        // distribution counts as installed, without dependencies, and the
        // result says so.
        std::fs::create_dir_all(root.join("bloat-1.0.dist-info")).unwrap();
        let lines: String = (0..40_000)
            .map(|i| format!("Requires-Dist: dep>=0.{i}\n"))
            .collect();
        std::fs::write(
            root.join("bloat-1.0.dist-info/METADATA"),
            format!("Name: bloat\nVersion: 1.0\n{lines}\nBody: ignored\n"),
        )
        .unwrap();
        let started = std::time::Instant::now();
        let found = scan(&site);
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        let bloat = &found.dists[&PackageName::from_str("bloat").unwrap()];
        assert!(bloat.installed.requires_dist.is_empty());
        assert!(found.notes[0].contains("bloat 1.0"), "{:?}", found.notes);
        assert!(found.notes[0].contains("2000"), "{:?}", found.notes);

        for i in 0..12 {
            std::fs::create_dir_all(root.join(format!("many{i}-1.0.dist-info"))).unwrap();
        }
        let limits = InstallLimits {
            max_installed_dists: 10,
            ..InstallLimits::default()
        };
        let budget = InstallBudget::new(crate::packages::stop::InstallStop::never(), &limits);
        let err = installed(&site, &site_path(), &limits, &budget).unwrap_err();
        assert!(err.to_string().contains("more than 10 .dist-info"), "{err}");

        let limits = InstallLimits {
            max_site_metadata_bytes: 1000,
            ..InstallLimits::default()
        };
        let budget = InstallBudget::new(crate::packages::stop::InstallStop::never(), &limits);
        let err = installed(&site, &site_path(), &limits, &budget).unwrap_err();
        assert!(err.to_string().contains("add up to more than"), "{err}");
    }

    #[test]
    fn only_the_headers_of_metadata_are_read() {
        let (tmp, site, _) = dirs();
        let root = tmp.path().join("site");
        std::fs::create_dir_all(root.join("big-1.0.dist-info")).unwrap();
        std::fs::write(
            root.join("big-1.0.dist-info/METADATA"),
            format!(
                "Name: big\r\nVersion: 1.0\r\nRequires-Dist: six\r\n\r\n{}",
                "description ".repeat(100_000)
            ),
        )
        .unwrap();
        let (text, read) = read_headers(&site, "big-1.0.dist-info/METADATA", 1 << 20);
        assert!(read < 100, "{read} bytes kept");
        assert!(text.unwrap().ends_with("six\r\n"));
        assert_eq!(
            scan(&site).dists[&PackageName::from_str("big").unwrap()]
                .installed
                .requires_dist
                .len(),
            1
        );
    }

    #[test]
    fn created_directories_can_be_taken_back() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join(".local")).unwrap();
        let sandbox = Dir::open_ambient_dir(tmp.path(), ambient_authority()).unwrap();
        let path = GuestPath::parse("/.local/lib/python3.12/site-packages").unwrap();
        assert!(open_existing(&sandbox, &path).unwrap().is_none());
        let created = create_dirs(&sandbox, &path).unwrap();
        assert_eq!(created.len(), 3, "{created:?}");
        assert!(open_existing(&sandbox, &path).unwrap().is_some());
        remove_created(&sandbox, &created);
        assert!(tmp.path().join(".local").is_dir());
        assert!(!tmp.path().join(".local/lib").exists());
    }

    #[test]
    fn installed_distributions_are_found_by_their_dist_info() {
        let (tmp, site, _) = dirs();
        let root = tmp.path().join("site");
        std::fs::create_dir_all(root.join("attrs-23.2.0.dist-info")).unwrap();
        std::fs::write(
            root.join("attrs-23.2.0.dist-info/METADATA"),
            "Name: attrs\nVersion: 23.2.0\nRequires-Dist: six\n",
        )
        .unwrap();
        std::fs::create_dir_all(root.join("Bare_Pkg-1.0.dist-info")).unwrap();
        std::fs::create_dir_all(root.join("garbage.dist-info")).unwrap();
        std::fs::write(root.join("file-1.0.dist-info"), "not a dir").unwrap();
        let found = scan(&site).dists;
        assert_eq!(found.len(), 2, "{found:?}");
        let attrs = &found[&PackageName::from_str("attrs").unwrap()];
        assert_eq!(attrs.installed.version.to_string(), "23.2.0");
        assert_eq!(attrs.installed.requires_dist.len(), 1);
        assert!(
            found[&PackageName::from_str("bare-pkg").unwrap()]
                .installed
                .requires_dist
                .is_empty()
        );
    }

    #[test]
    fn staged_files_merge_into_existing_directories() {
        let (tmp, site, staging) = dirs();
        let s = tmp.path().join("staging");
        let t = tmp.path().join("site");
        std::fs::create_dir_all(s.join("ns/newpkg")).unwrap();
        std::fs::write(s.join("ns/newpkg/__init__.py"), "new").unwrap();
        std::fs::write(s.join("top.py"), "replacement").unwrap();
        std::fs::create_dir_all(t.join("ns/oldpkg")).unwrap();
        std::fs::write(t.join("ns/oldpkg/__init__.py"), "old").unwrap();
        std::fs::write(t.join("top.py"), "original").unwrap();
        move_into_place(&staging, &site).unwrap();
        assert_eq!(
            std::fs::read_to_string(t.join("ns/newpkg/__init__.py")).unwrap(),
            "new"
        );
        assert_eq!(
            std::fs::read_to_string(t.join("ns/oldpkg/__init__.py")).unwrap(),
            "old"
        );
        assert_eq!(
            std::fs::read_to_string(t.join("top.py")).unwrap(),
            "replacement"
        );
        assert!(!s.join("top.py").exists());
    }

    #[test]
    fn removal_follows_record_and_stays_inside() {
        let (tmp, site, _) = dirs();
        let t = tmp.path().join("site");
        std::fs::write(tmp.path().join("outside.txt"), "keep").unwrap();
        std::fs::create_dir_all(t.join("old/sub")).unwrap();
        std::fs::write(t.join("old/__init__.py"), "").unwrap();
        std::fs::write(t.join("old/sub/m.py"), "").unwrap();
        std::fs::write(t.join("shared.py"), "other dist").unwrap();
        std::fs::create_dir_all(t.join("old-1.0.dist-info")).unwrap();
        std::fs::write(
            t.join("old-1.0.dist-info/RECORD"),
            "old/__init__.py,,\nold/sub/m.py,,\n../outside.txt,,\n/etc/passwd,,\nold-1.0.dist-info/RECORD,,\n",
        )
        .unwrap();
        let dist = scan(&site)
            .dists
            .remove(&PackageName::from_str("old").unwrap())
            .unwrap();
        remove(&site, &dist, 1 << 20).unwrap();
        assert!(
            !t.join("old").exists(),
            "emptied directories go, deepest first"
        );
        assert!(!t.join("old-1.0.dist-info").exists());
        assert!(t.join("shared.py").exists());
        assert!(tmp.path().join("outside.txt").exists());
    }
}
