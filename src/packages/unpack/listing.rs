//! The unpacker's first pass: every member of the archive checked by
//! name, kind and declared size, and where it lands, before anything is
//! inflated.

use std::collections::HashSet;
use std::io::{Read, Seek};
use std::str::FromStr;

use pep440_rs::Version;
use pep508_rs::PackageName;

use super::{UnpackLimits, WheelError, member_components, shown};
use crate::packages::message_text::some_of;
use crate::packages::wheel_name::WheelFilename;
use crate::sandbox::{GuestPath, human_bytes};

pub(super) const S_IFMT: u32 = 0o170000;
pub(super) const S_IFREG: u32 = 0o100000;
pub(super) const S_IFDIR: u32 = 0o040000;

/// A `.data` member left out.
pub(super) struct Dropped {
    pub(super) kind: &'static str,
    pub(super) name: String,
}

/// One member after the first pass.
pub(super) struct Member {
    pub(super) index: usize,
    pub(super) name: String,
    pub(super) target: GuestPath,
    pub(super) is_dir: bool,
}

/// `{name}-{version}` of a `.dist-info` or `.data` directory, checked against
/// the wheel's file name.
pub(super) fn matches_wheel(stem: &str, wheel: &WheelFilename) -> bool {
    let Some((name, version)) = stem.split_once('-') else {
        return false;
    };
    PackageName::from_str(name).is_ok_and(|n| n == wheel.name)
        && Version::from_str(version).is_ok_and(|v| v == wheel.version)
}

/// What the first pass learns from the archive's directory: names, kinds,
/// directories and declared sizes, nothing inflated yet.
#[derive(Default)]
pub(super) struct Listing {
    /// Members to write (directories included).
    pub(super) members: Vec<Member>,
    /// `.dist-info` directories, in order of first appearance.
    pub(super) dist_infos: Vec<String>,
    /// The same, to look them up.
    pub(super) dist_info_set: HashSet<String>,
    /// `.data` directories, with a member name in each.
    pub(super) data_dirs: Vec<(String, String)>,
    /// `.data` members checked but not written.
    pub(super) dropped: Vec<Dropped>,
    /// Targets seen so far, lower-cased.
    pub(super) seen: HashSet<String>,
    /// Sizes declared so far.
    pub(super) declared_total: u64,
}

/// Pass 1: every member of the archive, checked by name, kind and declared
/// size.
pub(super) fn list_members<R: Read + Seek>(
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
pub(super) fn member_name(raw: &[u8]) -> Result<String, WheelError> {
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
pub(super) fn refuse_special_file(name: &str, mode: Option<u32>) -> Result<(), WheelError> {
    let kind = mode.map_or(0, |mode| mode & S_IFMT);
    if kind != 0 && kind != S_IFREG && kind != S_IFDIR {
        return Err(WheelError::Link { name: shown(name) });
    }
    Ok(())
}

impl Listing {
    /// Takes in one member: where it lands (if it is written at all), the
    /// `.dist-info` it belongs to, and its declared size.
    pub(super) fn add(
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
    pub(super) fn place<'n>(
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
    pub(super) fn note_dist_info(&mut self, target: &GuestPath) {
        if let Some(first) = target.components().first()
            && first.ends_with(".dist-info")
            && self.dist_info_set.insert(first.clone())
        {
            self.dist_infos.push(first.clone());
        }
    }

    /// Refuses a second file on the same path (ignoring case) and sizes
    /// over the caps, as declared.
    pub(super) fn count(
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
pub(super) fn sole_dist_info(
    listing: &Listing,
    wheel: &WheelFilename,
) -> Result<String, WheelError> {
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
