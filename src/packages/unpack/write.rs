//! The unpacker's second pass: writing every member into staging,
//! charged to the room and hashed against `RECORD`, and the installed
//! `RECORD` and `INSTALLER` after.

use std::collections::{HashMap, HashSet};
use std::io::{Read, Seek, Write};

use cap_std::fs::{Dir, OpenOptions};
use sha2::Digest;

use super::listing::{Dropped, Listing, Member};
use super::{InstalledFile, UnpackLimits, Unpacked, WheelError, runs_at_startup, shown};
use crate::packages::record::{Hasher, Record, RecordEntry, record_hash};
use crate::packages::staging::StagingRoom;
use crate::sandbox::human_bytes;

/// What pass 2 wrote.
pub(super) struct Written {
    pub(super) files: Vec<InstalledFile>,
    pub(super) startup_files: Vec<String>,
    /// Member names written.
    pub(super) names: HashSet<String>,
}

/// Pass 2: writes every file member, each listed in `RECORD` with a hash
/// (but `RECORD` and its signatures), counting and hashing what is
/// inflated.
pub(super) fn write_members<R: Read + Seek>(
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
    pub(super) fn add(&mut self, member: &Member, size: u64, sha256: &[u8]) {
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
pub(super) fn check_record_complete(
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
pub(super) fn make_parents(
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
pub(super) struct Output<'a> {
    pub(super) dest: &'a Dir,
    pub(super) limits: &'a UnpackLimits,
    pub(super) total: &'a mut u64,
    pub(super) room: &'a mut StagingRoom,
}

/// Writes one member beneath `dest`, returning its size and sha256.
pub(super) fn write_member<R: Read + Seek>(
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
pub(super) fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}
