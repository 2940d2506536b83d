//! The safe wheel extractor: a wheel is unpacked beneath a staging
//! [`cap_std::fs::Dir`] only after every member has been checked, and every
//! byte written is counted and hashed against the wheel's `RECORD`.
//!
//! Refused, with nothing written outside the staging directory:
//! - archives with more members than the cap (counted from the end of central
//!   directory record before the archive is indexed), prepended or trailing
//!   data, or bad CRCs;
//! - member names that are not UTF-8, empty, absolute, with a drive letter,
//!   a backslash, a control character, or an empty, `.` or `..` component
//!   ([`member_components`] is the one function that decides);
//! - symbolic links and other special files (by their Unix mode);
//! - two members that land on the same path (ignoring case);
//! - `.data/platlib` (native code), unknown `.data/` directories, or ones
//!   named for another distribution (`.data/scripts`, `headers` and `data`,
//!   meant for places outside site-packages, are checked but not written);
//! - zero or several `.dist-info` directories, or one whose name or version
//!   does not match the file name or whose `METADATA` disagrees;
//! - a `WHEEL` file that is not version 1.x with `Root-Is-Purelib: true`;
//! - a `RECORD` that is malformed, lists a path outside the wheel, lists a
//!   file the wheel lacks, or misses a file, hash or size that the wheel has;
//! - more bytes than the caps, per member and per wheel, counted as inflated.
//!
//! Everything written is charged to a [`StagingRoom`] first (the sandbox's
//! quota, the install's cap, its stop condition), so unpacking stops at the
//! first chunk that does not fit. Files that run when the interpreter starts
//! (`.pth` files, `sitecustomize`, `usercustomize`) are listed for the
//! install's result.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Seek, SeekFrom, Write};
use std::str::FromStr;

use cap_std::fs::{Dir, OpenOptions};
use pep440_rs::Version;
use pep508_rs::PackageName;
use sha2::Digest;

use super::error::some_of;
use super::metadata::{CoreMetadata, WheelInfo};
use super::metadata_error::MetadataError;
use super::record::{Hasher, Record, RecordEntry, RecordError, record_hash};
use super::staging::{NoRoom, StagingRoom};
use super::wheel_name::WheelFilename;
use crate::sandbox::GuestPath;
use crate::sandbox::human_bytes;

/// Caps on one wheel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnpackLimits {
    /// Members the archive may hold.
    pub max_members: u64,
    /// Bytes all members may inflate to.
    pub max_total_bytes: u64,
    /// Bytes one member may inflate to.
    pub max_member_bytes: u64,
    /// Bytes `WHEEL`, `METADATA` and `RECORD` may each be.
    pub max_metadata_bytes: u64,
}

/// Why a wheel was refused.
#[derive(Debug, thiserror::Error)]
pub enum WheelError {
    /// Not a zip archive the extractor accepts.
    #[error("it is not a well-formed zip archive ({0})")]
    Corrupt(String),
    /// Too many members.
    #[error("it has {count} members, over the limit of {limit}")]
    TooManyMembers {
        /// Members found.
        count: u64,
        /// The cap.
        limit: u64,
    },
    /// A member name that could land outside the install directory.
    #[error("member '{name}' has an unsafe name: {reason}")]
    BadMemberName {
        /// The name (escaped).
        name: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A symbolic link or special file.
    #[error(
        "member '{name}' is a symbolic link or special file; wheels may hold only files and directories"
    )]
    Link {
        /// The name.
        name: String,
    },
    /// Two members land on the same path.
    #[error(
        "member '{name}' lands on the same installed path as another member (names differing only in case count as the same)"
    )]
    Duplicate {
        /// The name.
        name: String,
    },
    /// A `.data` directory that cannot be installed.
    #[error(
        "member '{name}' is in {dir}, and {what} cannot be installed in a sandbox (only .data/purelib is installed)"
    )]
    DataDir {
        /// The member.
        name: String,
        /// The directory, e.g. `x-1.0.data/scripts`.
        dir: String,
        /// What that directory holds.
        what: &'static str,
    },
    /// A `.data` directory not named for this wheel.
    #[error("member '{name}' is in a .data directory not named for this wheel ({expected})")]
    ForeignDataDir {
        /// The member.
        name: String,
        /// The expected directory.
        expected: String,
    },
    /// Zero or several `.dist-info` directories.
    #[error("it has {count} .dist-info directories ({names}); a wheel has exactly one")]
    DistInfoCount {
        /// How many.
        count: usize,
        /// Their names.
        names: String,
    },
    /// The `.dist-info` directory or METADATA is for another name or version.
    #[error("{what} '{found}' does not match the file name ({expected})")]
    NameMismatch {
        /// What disagrees.
        what: &'static str,
        /// What it says.
        found: String,
        /// What the file name says.
        expected: String,
    },
    /// A required file is missing.
    #[error("it lacks {0}")]
    Missing(String),
    /// A metadata file is not UTF-8.
    #[error("{0}")]
    BadWheelFile(String),
    /// `WHEEL` is unacceptable.
    #[error("{0}")]
    BadWheelInfo(#[source] MetadataError),
    /// `METADATA` is unacceptable.
    #[error("its METADATA is unusable: {0}")]
    BadMetadata(#[source] MetadataError),
    /// `RECORD` is malformed.
    #[error("its RECORD is invalid: {0}")]
    BadRecord(#[source] RecordError),
    /// `RECORD` lists a path outside the wheel's directories.
    #[error("RECORD lists '{path}', a path outside the install directory ({reason})")]
    RecordPathOutside {
        /// The path.
        path: String,
        /// Why it is outside.
        reason: &'static str,
    },
    /// A member is not in `RECORD`.
    #[error("member '{name}' is not listed in RECORD")]
    NotInRecord {
        /// The member.
        name: String,
    },
    /// `RECORD` lists a file the wheel lacks.
    #[error("RECORD lists '{path}', which the wheel does not contain")]
    RecordMissingFile {
        /// The path.
        path: String,
    },
    /// A member's hash or size differs from `RECORD`.
    #[error("member '{name}' does not match RECORD: {what}")]
    RecordMismatch {
        /// The member.
        name: String,
        /// Hash or size, and the values.
        what: String,
    },
    /// A member is over the per-member cap.
    #[error("member '{name}' inflates to more than {limit}, the limit for one file")]
    MemberTooLarge {
        /// The member.
        name: String,
        /// The cap, in words.
        limit: String,
    },
    /// The wheel is over the per-wheel cap.
    #[error("it inflates to more than {limit}, the limit for one wheel")]
    TooLarge {
        /// The cap, in words.
        limit: String,
    },
    /// Writing into the staging directory failed.
    #[error("could not write '{path}' into the staging directory: {source}")]
    Write {
        /// The path.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// Staging ran out of room, or the install had to stop.
    #[error(transparent)]
    NoRoom(#[from] NoRoom),
}

/// One file an unpacked wheel installs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstalledFile {
    /// Path relative to site-packages, `/`-separated.
    pub path: String,
    /// Its sha256, in RECORD form (`sha256=...`).
    pub hash: String,
    /// Its size.
    pub size: u64,
}

/// What [`unpack_wheel`] put in the staging directory.
#[derive(Clone, Debug)]
pub struct Unpacked {
    /// The `.dist-info` directory's name.
    pub dist_info: String,
    /// Every file written.
    pub files: Vec<InstalledFile>,
    /// What runs when the interpreter starts: `.pth` files at the top level,
    /// and `sitecustomize` or `usercustomize` modules or packages.
    pub startup_files: Vec<String>,
    /// Members of `.data/scripts`, `.data/headers` and `.data/data` that
    /// were not installed, with their kind.
    pub dropped: Vec<String>,
}

/// A `.data` member left out.
struct Dropped {
    kind: &'static str,
    name: String,
}

/// The one function that decides whether an archive member name stays inside
/// its root. Returns its components and whether it names a directory.
pub fn member_components(name: &str) -> Result<(Vec<&str>, bool), &'static str> {
    if name.is_empty() {
        return Err("it is empty");
    }
    if name.chars().any(char::is_control) {
        return Err("it contains a NUL or control character");
    }
    if name.contains('\\') {
        return Err("it contains a backslash");
    }
    if name.starts_with('/') {
        return Err("it is an absolute path");
    }
    let bytes = name.as_bytes();
    if bytes.len() >= 2 && bytes[1] == b':' && bytes[0].is_ascii_alphabetic() {
        return Err("it starts with a drive letter");
    }
    let (body, is_dir) = match name.strip_suffix('/') {
        Some(body) => (body, true),
        None => (name, false),
    };
    let components: Vec<&str> = body.split('/').collect();
    for c in &components {
        match *c {
            "" => return Err("it has an empty component ('//')"),
            "." => return Err("it has a '.' component"),
            ".." => return Err("it has a '..' component"),
            _ => {}
        }
        if c.len() > crate::sandbox::guest_path::MAX_COMPONENT_BYTES {
            return Err("a component is too long");
        }
    }
    if components.len() > 64 {
        return Err("it is nested too deeply");
    }
    Ok((components, is_dir))
}

/// Whether an installed path (its components below site-packages) is
/// something the interpreter runs when it starts: a top-level `.pth` file,
/// or what `import sitecustomize` / `import usercustomize` would find (a
/// module, a compiled module, or a package).
pub fn runs_at_startup(components: &[String]) -> bool {
    let Some(top) = components.first() else {
        return false;
    };
    let hook = |name: &str| matches!(name, "sitecustomize" | "usercustomize");
    if components.len() > 1 {
        return hook(top);
    }
    if top.ends_with(".pth") {
        return true;
    }
    top.split_once('.')
        .is_some_and(|(stem, _)| hook(stem) && (top.ends_with(".py") || top.ends_with(".pyc")))
}

/// A member name made safe to quote.
fn shown(name: &str) -> String {
    super::requirement::quote(name)
}

const S_IFMT: u32 = 0o170000;
const S_IFREG: u32 = 0o100000;
const S_IFDIR: u32 = 0o040000;

/// Reads the member count from the end of central directory record (and its
/// zip64 form), and refuses archives with data before the first member or
/// after the end record.
fn precheck<R: Read + Seek>(reader: &mut R) -> Result<u64, WheelError> {
    let corrupt = |what: &str| WheelError::Corrupt(what.to_owned());
    let io = |e: std::io::Error| WheelError::Corrupt(e.to_string());
    let len = reader.seek(SeekFrom::End(0)).map_err(io)?;
    if len < 22 {
        return Err(corrupt("too short to be a zip archive"));
    }
    reader.seek(SeekFrom::Start(0)).map_err(io)?;
    let mut magic = [0u8; 4];
    reader.read_exact(&mut magic).map_err(io)?;
    if magic != *b"PK\x03\x04" {
        return Err(corrupt(
            "it does not start with a zip member; data is prepended",
        ));
    }
    let tail_len = len.min(22 + 65_535);
    reader.seek(SeekFrom::Start(len - tail_len)).map_err(io)?;
    let mut tail = vec![0u8; tail_len as usize];
    reader.read_exact(&mut tail).map_err(io)?;
    let eocd = (0..=tail.len() - 22)
        .rev()
        .find(|&i| tail[i..i + 4] == *b"PK\x05\x06")
        .ok_or_else(|| corrupt("no end of central directory record"))?;
    let u16_at = |b: &[u8], i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
    let comment = u16_at(&tail, eocd + 20) as usize;
    if eocd + 22 + comment != tail.len() {
        return Err(corrupt("data follows the end of central directory record"));
    }
    let entries = u16_at(&tail, eocd + 10);
    if entries != 0xFFFF {
        return Ok(u64::from(entries));
    }
    if eocd < 20 || tail[eocd - 20..eocd - 16] != *b"PK\x06\x07" {
        return Err(corrupt("a zip64 count without a zip64 locator"));
    }
    let mut offset = [0u8; 8];
    offset.copy_from_slice(&tail[eocd - 12..eocd - 4]);
    let offset = u64::from_le_bytes(offset);
    if offset.saturating_add(56) > len {
        return Err(corrupt("the zip64 record lies outside the file"));
    }
    reader.seek(SeekFrom::Start(offset)).map_err(io)?;
    let mut record = [0u8; 56];
    reader.read_exact(&mut record).map_err(io)?;
    if record[..4] != *b"PK\x06\x06" {
        return Err(corrupt("the zip64 end record is missing"));
    }
    let mut count = [0u8; 8];
    count.copy_from_slice(&record[32..40]);
    Ok(u64::from_le_bytes(count))
}

/// Opens a wheel as a zip archive after [`precheck`].
fn open_archive<R: Read + Seek>(
    mut reader: R,
    max_members: u64,
) -> Result<zip::ZipArchive<R>, WheelError> {
    let count = precheck(&mut reader)?;
    if count > max_members {
        return Err(WheelError::TooManyMembers {
            count,
            limit: max_members,
        });
    }
    reader
        .seek(SeekFrom::Start(0))
        .map_err(|e| WheelError::Corrupt(e.to_string()))?;
    let archive = zip::ZipArchive::new(reader).map_err(|e| WheelError::Corrupt(e.to_string()))?;
    if archive.len() as u64 != count {
        return Err(WheelError::Corrupt(format!(
            "the end record counts {count} members but the central directory has {} distinct names: a name appears twice",
            archive.len()
        )));
    }
    Ok(archive)
}

/// Reads one member fully, refusing more than `limit` bytes.
fn read_member<R: Read + Seek>(
    archive: &mut zip::ZipArchive<R>,
    index: usize,
    name: &str,
    limit: u64,
) -> Result<Vec<u8>, WheelError> {
    let file = archive
        .by_index(index)
        .map_err(|e| WheelError::Corrupt(e.to_string()))?;
    let mut data = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut data)
        .map_err(|e| WheelError::Corrupt(format!("{}: {e}", shown(name))))?;
    if data.len() as u64 > limit {
        return Err(WheelError::MemberTooLarge {
            name: shown(name),
            limit: human_bytes(limit),
        });
    }
    Ok(data)
}

/// One Python source of a wheel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PythonSource {
    /// Its path relative to site-packages, `/`-separated (`pkg/mod.py`).
    pub path: String,
    /// Its bytes.
    pub text: Vec<u8>,
}

/// Whether an installed path is a Python module's source (what bytecode is
/// compiled from).
fn is_python_source(target: &GuestPath) -> bool {
    target
        .components()
        .last()
        .is_some_and(|name| name.ends_with(".py"))
}

/// The Python sources a wheel installs, each with its path relative to
/// site-packages, read from the (verified) wheel itself: what its bytecode
/// is compiled from. Checked as [`unpack_wheel`] checks names and sizes;
/// `None` when they come to more than `max_bytes`.
pub fn python_sources<R: Read + Seek>(
    reader: R,
    limits: &UnpackLimits,
    max_bytes: u64,
) -> Result<Option<Vec<PythonSource>>, WheelError> {
    let mut archive = open_archive(reader, limits.max_members)?;
    let listing = list_members(&mut archive, limits)?;
    let mut sources = Vec::new();
    let mut total: u64 = 0;
    for member in &listing.members {
        if member.is_dir || !is_python_source(&member.target) {
            continue;
        }
        let text = read_member(
            &mut archive,
            member.index,
            &member.name,
            limits.max_member_bytes,
        )?;
        total += text.len() as u64;
        if total > max_bytes {
            return Ok(None);
        }
        sources.push(PythonSource {
            path: member.target.components().join("/"),
            text,
        });
    }
    Ok(Some(sources))
}

/// The text of the wheel's sole `*.dist-info/METADATA`.
pub fn read_metadata<R: Read + Seek>(
    reader: R,
    limits: &UnpackLimits,
) -> Result<String, WheelError> {
    let mut archive = open_archive(reader, limits.max_members)?;
    let mut found = Vec::new();
    // Names from the central directory alone: nothing else of the archive
    // is read but the one member (a wheel read by ranges fetches no more).
    for index in 0..archive.len() {
        let Some(name) = archive.name_for_index(index) else {
            continue;
        };
        let mut parts = name.split('/');
        if let (Some(top), Some("METADATA"), None) = (parts.next(), parts.next(), parts.next())
            && top.ends_with(".dist-info")
        {
            found.push((index, name.to_owned()));
        }
    }
    match found.as_slice() {
        [(index, name)] => {
            let data = read_member(&mut archive, *index, name, limits.max_metadata_bytes)?;
            String::from_utf8(data)
                .map_err(|_| WheelError::BadWheelFile(format!("{} is not UTF-8", shown(name))))
        }
        [] => Err(WheelError::Missing("a .dist-info/METADATA file".into())),
        _ => Err(WheelError::DistInfoCount {
            count: found.len(),
            names: some_of(
                &found.iter().map(|(_, n)| shown(n)).collect::<Vec<_>>(),
                5,
                ", ",
            ),
        }),
    }
}

/// One member after the first pass.
struct Member {
    index: usize,
    name: String,
    target: GuestPath,
    is_dir: bool,
}

/// `{name}-{version}` of a `.dist-info` or `.data` directory, checked against
/// the wheel's file name.
fn matches_wheel(stem: &str, wheel: &WheelFilename) -> bool {
    let Some((name, version)) = stem.split_once('-') else {
        return false;
    };
    PackageName::from_str(name).is_ok_and(|n| n == wheel.name)
        && Version::from_str(version).is_ok_and(|v| v == wheel.version)
}

/// Unpacks the wheel read from `reader` beneath `dest` (an empty staging
/// directory), checking everything listed in the module documentation.
/// `wheel` is its parsed file name.
pub fn unpack_wheel<R: Read + Seek>(
    reader: R,
    wheel: &WheelFilename,
    dest: &Dir,
    limits: &UnpackLimits,
    room: &mut StagingRoom,
) -> Result<Unpacked, WheelError> {
    room.check_stop()?;
    let mut archive = open_archive(reader, limits.max_members)?;
    let listing = list_members(&mut archive, limits)?;
    let dist_info = sole_dist_info(&listing, wheel)?;
    let record = read_wheel_files(&mut archive, &listing, &dist_info, wheel, limits)?;
    let written = write_members(
        &mut archive,
        &listing,
        &record,
        &dist_info,
        dest,
        limits,
        room,
    )?;
    check_record_complete(&record, &listing.dropped, written.names)?;
    Ok(Unpacked {
        dist_info,
        files: written.files,
        startup_files: written.startup_files,
        dropped: listing
            .dropped
            .iter()
            .map(|d| format!("{} ({})", shown(&d.name), d.kind))
            .collect(),
    })
}

/// What the first pass learns from the archive's directory: names, kinds,
/// directories and declared sizes, nothing inflated yet.
#[derive(Default)]
struct Listing {
    /// Members to write (directories included).
    members: Vec<Member>,
    /// `.dist-info` directories, in order of first appearance.
    dist_infos: Vec<String>,
    /// The same, to look them up.
    dist_info_set: HashSet<String>,
    /// `.data` directories, with a member name in each.
    data_dirs: Vec<(String, String)>,
    /// `.data` members checked but not written.
    dropped: Vec<Dropped>,
    /// Targets seen so far, lower-cased.
    seen: HashSet<String>,
    /// Sizes declared so far.
    declared_total: u64,
}

/// Pass 1: every member of the archive, checked by name, kind and declared
/// size.
fn list_members<R: Read + Seek>(
    archive: &mut zip::ZipArchive<R>,
    limits: &UnpackLimits,
) -> Result<Listing, WheelError> {
    let mut listing = Listing::default();
    for index in 0..archive.len() {
        let file = archive
            .by_index_raw(index)
            .map_err(|e| WheelError::Corrupt(e.to_string()))?;
        let name = member_name(file.name_raw())?;
        refuse_special_file(&name, file.unix_mode())?;
        listing.add(index, name, file.size(), limits)?;
    }
    Ok(listing)
}

/// A member's name, which must be UTF-8.
fn member_name(raw: &[u8]) -> Result<String, WheelError> {
    std::str::from_utf8(raw)
        .map(str::to_owned)
        .map_err(|_| WheelError::BadMemberName {
            name: String::from_utf8_lossy(raw)
                .chars()
                .flat_map(char::escape_debug)
                .take(200)
                .collect(),
            reason: "it is not UTF-8",
        })
}

/// Refuses links and other special files, by their Unix mode.
fn refuse_special_file(name: &str, mode: Option<u32>) -> Result<(), WheelError> {
    let kind = mode.map_or(0, |mode| mode & S_IFMT);
    if kind != 0 && kind != S_IFREG && kind != S_IFDIR {
        return Err(WheelError::Link { name: shown(name) });
    }
    Ok(())
}

impl Listing {
    /// Takes in one member: where it lands (if it is written at all), the
    /// `.dist-info` it belongs to, and its declared size.
    fn add(
        &mut self,
        index: usize,
        name: String,
        size: u64,
        limits: &UnpackLimits,
    ) -> Result<(), WheelError> {
        let (components, is_dir) =
            member_components(&name).map_err(|reason| WheelError::BadMemberName {
                name: shown(&name),
                reason,
            })?;
        let Some(target_components) = self.place(&components, &name, is_dir)? else {
            return Ok(());
        };
        let target_text = target_components.join("/");
        let target = GuestPath::parse(&target_text).map_err(|_| WheelError::BadMemberName {
            name: shown(&name),
            reason: "it is not a valid path",
        })?;
        self.note_dist_info(&target);
        if !is_dir {
            self.count(&target_text, &name, size, limits)?;
        }
        self.members.push(Member {
            index,
            name,
            target,
            is_dir,
        });
        Ok(())
    }

    /// Where a member lands, relative to site-packages: its own path, or
    /// inside `.data/purelib` the rest of it; `None` for members that are
    /// not written (the `.data` directory itself, and `scripts`, `headers`
    /// and `data`, which are recorded as dropped).
    fn place<'n>(
        &mut self,
        components: &'n [&'n str],
        name: &str,
        is_dir: bool,
    ) -> Result<Option<&'n [&'n str]>, WheelError> {
        let top = components[0];
        if !top.ends_with(".data") {
            return Ok(Some(components));
        }
        self.data_dirs.push((top.to_owned(), name.to_owned()));
        match components.get(1).copied() {
            None => Ok(None),
            Some("purelib") => Ok(Some(&components[2..]).filter(|rest| !rest.is_empty())),
            Some(kind @ ("scripts" | "headers" | "data")) => {
                // Meant for places outside site-packages (bin/, include/,
                // share/): not needed to import the package, so not
                // written, only listed. Their names were checked above.
                let kind = match kind {
                    "scripts" => "scripts",
                    "headers" => "headers",
                    _ => "data",
                };
                if !is_dir {
                    self.dropped.push(Dropped {
                        kind,
                        name: name.to_owned(),
                    });
                }
                Ok(None)
            }
            Some(other) => Err(WheelError::DataDir {
                name: shown(name),
                dir: shown(&format!("{top}/{other}")),
                what: match other {
                    "platlib" => "platform-specific modules (native code)",
                    _ => "unknown kinds of files",
                },
            }),
        }
    }

    /// Remembers the `.dist-info` directory a target is in, if any.
    fn note_dist_info(&mut self, target: &GuestPath) {
        if let Some(first) = target.components().first()
            && first.ends_with(".dist-info")
            && self.dist_info_set.insert(first.clone())
        {
            self.dist_infos.push(first.clone());
        }
    }

    /// Refuses a second file on the same path (ignoring case) and sizes
    /// over the caps, as declared.
    fn count(
        &mut self,
        target_text: &str,
        name: &str,
        size: u64,
        limits: &UnpackLimits,
    ) -> Result<(), WheelError> {
        if !self.seen.insert(target_text.to_lowercase()) {
            return Err(WheelError::Duplicate { name: shown(name) });
        }
        if size > limits.max_member_bytes {
            return Err(WheelError::MemberTooLarge {
                name: shown(name),
                limit: human_bytes(limits.max_member_bytes),
            });
        }
        self.declared_total = self.declared_total.saturating_add(size);
        if self.declared_total > limits.max_total_bytes {
            return Err(WheelError::TooLarge {
                limit: human_bytes(limits.max_total_bytes),
            });
        }
        Ok(())
    }
}

/// The one `.dist-info` directory, named for the wheel, and `.data`
/// directories named like it.
fn sole_dist_info(listing: &Listing, wheel: &WheelFilename) -> Result<String, WheelError> {
    let dist_infos = &listing.dist_infos;
    let dist_info = match dist_infos.as_slice() {
        [one] => one.clone(),
        _ => {
            return Err(WheelError::DistInfoCount {
                count: dist_infos.len(),
                names: if dist_infos.is_empty() {
                    "none".into()
                } else {
                    let names: Vec<String> = dist_infos.iter().map(|d| shown(d)).collect();
                    some_of(&names, 5, ", ")
                },
            });
        }
    };
    let stem = dist_info.strip_suffix(".dist-info").unwrap_or_default();
    if !matches_wheel(stem, wheel) {
        return Err(WheelError::NameMismatch {
            what: "the .dist-info directory",
            found: shown(&dist_info),
            expected: format!("{}-{}", wheel.name, wheel.version),
        });
    }
    for (dir, name) in &listing.data_dirs {
        if dir.strip_suffix(".data") != Some(stem) {
            return Err(WheelError::ForeignDataDir {
                name: shown(name),
                expected: format!("{stem}.data"),
            });
        }
    }
    Ok(dist_info)
}

/// Reads and checks `WHEEL` and `METADATA`, and returns the parsed
/// `RECORD`, whose every path must stay inside the wheel.
fn read_wheel_files<R: Read + Seek>(
    archive: &mut zip::ZipArchive<R>,
    listing: &Listing,
    dist_info: &str,
    wheel: &WheelFilename,
    limits: &UnpackLimits,
) -> Result<Record, WheelError> {
    let mut read_text = |file: &str| {
        let path = format!("{dist_info}/{file}");
        let index = listing
            .members
            .iter()
            .find(|m| !m.is_dir && m.name == path)
            .map(|m| m.index)
            .ok_or(WheelError::Missing(path))?;
        let data = read_member(archive, index, file, limits.max_metadata_bytes)?;
        String::from_utf8(data)
            .map_err(|_| WheelError::BadWheelFile(format!("{file} is not UTF-8")))
    };
    WheelInfo::parse(&read_text("WHEEL")?).map_err(WheelError::BadWheelInfo)?;
    let metadata = CoreMetadata::parse(&read_text("METADATA")?).map_err(WheelError::BadMetadata)?;
    if metadata.name != wheel.name || metadata.version != wheel.version {
        return Err(WheelError::NameMismatch {
            what: "METADATA's name and version",
            found: format!("{} {}", metadata.name, metadata.version),
            expected: format!("{}-{}", wheel.name, wheel.version),
        });
    }
    let record = Record::parse(&read_text("RECORD")?).map_err(WheelError::BadRecord)?;
    for path in record.entries.keys() {
        member_components(path).map_err(|reason| WheelError::RecordPathOutside {
            path: shown(path),
            reason,
        })?;
    }
    Ok(record)
}

/// What pass 2 wrote.
struct Written {
    files: Vec<InstalledFile>,
    startup_files: Vec<String>,
    /// Member names written.
    names: HashSet<String>,
}

/// Pass 2: writes every file member, each listed in `RECORD` with a hash
/// (but `RECORD` and its signatures), counting and hashing what is
/// inflated.
fn write_members<R: Read + Seek>(
    archive: &mut zip::ZipArchive<R>,
    listing: &Listing,
    record: &Record,
    dist_info: &str,
    dest: &Dir,
    limits: &UnpackLimits,
    room: &mut StagingRoom,
) -> Result<Written, WheelError> {
    let unhashed: HashSet<String> = ["RECORD", "RECORD.jws", "RECORD.p7s"]
        .iter()
        .map(|f| format!("{dist_info}/{f}"))
        .collect();
    let mut written = Written {
        files: Vec::new(),
        startup_files: Vec::new(),
        names: HashSet::new(),
    };
    let mut total: u64 = 0;
    let mut made_dirs: HashSet<Vec<String>> = HashSet::new();
    for member in listing.members.iter().filter(|m| !m.is_dir) {
        let entry = record
            .entries
            .get(&member.name)
            .ok_or_else(|| WheelError::NotInRecord {
                name: shown(&member.name),
            })?;
        if !unhashed.contains(&member.name) && entry.hash.is_none() {
            return Err(WheelError::RecordMismatch {
                name: shown(&member.name),
                what: "RECORD gives it no hash".into(),
            });
        }
        make_parents(dest, member, &mut made_dirs, room)?;
        let out = Output {
            dest,
            limits,
            total: &mut total,
            room: &mut *room,
        };
        let (size, sha256) = write_member(archive, member, entry, out)?;
        written.add(member, size, &sha256);
    }
    Ok(written)
}

impl Written {
    /// Records one written member, noting it when it runs at start-up.
    fn add(&mut self, member: &Member, size: u64, sha256: &[u8]) {
        self.names.insert(member.name.clone());
        let components = member.target.components();
        let path = components.join("/");
        if runs_at_startup(components) {
            let shown_path = if components.len() > 1 {
                format!("{}/", components[0])
            } else {
                path.clone()
            };
            if !self.startup_files.contains(&shown_path) {
                self.startup_files.push(shown_path);
            }
        }
        self.files.push(InstalledFile {
            path,
            hash: record_hash(sha256),
            size,
        });
    }
}

/// Every dropped member must be in `RECORD`, and every `RECORD` path must
/// have been written or dropped.
fn check_record_complete(
    record: &Record,
    dropped: &[Dropped],
    mut written: HashSet<String>,
) -> Result<(), WheelError> {
    for d in dropped {
        if !record.entries.contains_key(&d.name) {
            return Err(WheelError::NotInRecord {
                name: shown(&d.name),
            });
        }
        written.insert(d.name.clone());
    }
    for path in record.entries.keys() {
        if !written.contains(path) {
            return Err(WheelError::RecordMissingFile { path: shown(path) });
        }
    }
    Ok(())
}

/// Creates the directories above a member that this wheel has not made yet,
/// charging each to `room` first.
fn make_parents(
    dest: &Dir,
    member: &Member,
    made: &mut HashSet<Vec<String>>,
    room: &mut StagingRoom,
) -> Result<(), WheelError> {
    let components = member.target.components();
    for depth in 1..components.len() {
        let prefix = components[..depth].to_vec();
        if made.contains(&prefix) {
            continue;
        }
        room.take_entries(1)?;
        let path: std::path::PathBuf = prefix.iter().collect();
        match dest.create_dir(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(source) => {
                return Err(WheelError::Write {
                    path: shown(&prefix.join("/")),
                    source,
                });
            }
        }
        made.insert(prefix);
    }
    Ok(())
}

/// Where a member is written and what it is charged to.
struct Output<'a> {
    dest: &'a Dir,
    limits: &'a UnpackLimits,
    total: &'a mut u64,
    room: &'a mut StagingRoom,
}

/// Writes one member beneath `dest`, returning its size and sha256.
fn write_member<R: Read + Seek>(
    archive: &mut zip::ZipArchive<R>,
    member: &Member,
    entry: &RecordEntry,
    out: Output<'_>,
) -> Result<(u64, Vec<u8>), WheelError> {
    let Output {
        dest,
        limits,
        total,
        room,
    } = out;
    let target = member.target.relative();
    let write_err = |source| WheelError::Write {
        path: shown(&member.target.to_string()),
        source,
    };
    room.take_entries(1)?;
    let mut out = dest
        .open_with(&target, OpenOptions::new().write(true).create_new(true))
        .map_err(write_err)?;
    let mut input = archive
        .by_index(member.index)
        .map_err(|e| WheelError::Corrupt(e.to_string()))?;
    let mut record_hasher = entry.hash.as_ref().map(|(algorithm, _)| algorithm.hasher());
    let mut sha256 = sha2::Sha256::new();
    let mut size: u64 = 0;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = input
            .read(&mut buf)
            .map_err(|e| WheelError::Corrupt(format!("{}: {e}", shown(&member.name))))?;
        if n == 0 {
            break;
        }
        size += n as u64;
        *total += n as u64;
        if size > limits.max_member_bytes {
            return Err(WheelError::MemberTooLarge {
                name: shown(&member.name),
                limit: human_bytes(limits.max_member_bytes),
            });
        }
        if *total > limits.max_total_bytes {
            return Err(WheelError::TooLarge {
                limit: human_bytes(limits.max_total_bytes),
            });
        }
        room.take_bytes(n as u64)?;
        let chunk = &buf[..n];
        sha256.update(chunk);
        if let Some(h) = record_hasher.as_mut() {
            h.update(chunk);
        }
        out.write_all(chunk).map_err(write_err)?;
    }
    out.flush().map_err(write_err)?;
    if let Some(expected) = entry.size
        && expected != size
    {
        return Err(WheelError::RecordMismatch {
            name: shown(&member.name),
            what: format!("RECORD says {expected} bytes, it has {size}"),
        });
    }
    if let (Some((_, expected)), Some(hasher)) = (&entry.hash, record_hasher) {
        let actual = Hasher::finish(hasher);
        if &actual != expected {
            return Err(WheelError::RecordMismatch {
                name: shown(&member.name),
                what: "its hash differs from the one RECORD gives".into(),
            });
        }
    }
    Ok((size, sha256.finalize().to_vec()))
}

/// Rewrites the staged `RECORD` to list the files as installed (with
/// `.data/purelib/` prefixes gone) and adds an `INSTALLER` file, both
/// charged to `room`.
pub fn write_installed_record(
    dest: &Dir,
    unpacked: &Unpacked,
    installer: &str,
    room: &mut StagingRoom,
) -> Result<(), WheelError> {
    let installer_path = format!("{}/INSTALLER", unpacked.dist_info);
    let record_path = format!("{}/RECORD", unpacked.dist_info);
    let installer_body = format!("{installer}\n");
    let write_err = |path: &str| {
        let path = path.to_owned();
        move |source| WheelError::Write { path, source }
    };
    room.take_entries(1)?;
    room.take_bytes(installer_body.len() as u64)?;
    dest.write(&installer_path, &installer_body)
        .map_err(write_err(&installer_path))?;
    let mut rows: HashMap<&str, String> = HashMap::new();
    for f in &unpacked.files {
        rows.insert(
            &f.path,
            format!("{},{},{}", csv_field(&f.path), f.hash, f.size),
        );
    }
    rows.insert(
        &installer_path,
        format!(
            "{},{},{}",
            csv_field(&installer_path),
            record_hash(&sha2::Sha256::digest(installer_body.as_bytes())),
            installer_body.len()
        ),
    );
    rows.insert(&record_path, format!("{},,", csv_field(&record_path)));
    let mut lines: Vec<String> = rows.into_values().collect();
    lines.sort();
    let mut text = lines.join("\n");
    text.push('\n');
    let old_size = unpacked
        .files
        .iter()
        .find(|f| f.path == record_path)
        .map_or(0, |f| f.size);
    room.take_bytes((text.len() as u64).saturating_sub(old_size))?;
    dest.write(&record_path, text)
        .map_err(write_err(&record_path))
}

/// A CSV field, quoted when it must be.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

#[cfg(test)]
mod tests;
