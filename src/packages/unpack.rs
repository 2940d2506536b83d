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

use std::io::{Read, Seek, SeekFrom};

use cap_std::fs::Dir;

use super::message_text::some_of;
use super::metadata::{CoreMetadata, WheelInfo};
use super::metadata_error::MetadataError;
use super::record::{Record, RecordError};
use super::staging::{NoRoom, StagingRoom};
use super::wheel_name::WheelFilename;
use crate::sandbox::GuestPath;
use crate::sandbox::human_bytes;

mod listing;
mod write;

use listing::{Listing, list_members, sole_dist_info};
pub use write::write_installed_record;
use write::{check_record_complete, write_members};

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

#[cfg(test)]
mod tests;
