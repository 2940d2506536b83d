//! [`Journal`]: what makes a sandbox's memory durable. Beside its page
//! segments (see [`super::page_store`]), a sandbox that is kept across
//! restarts has a journal: one record when an execution starts, and one
//! after each turn that says what changed (the extents mapped anew, the
//! globals, the memory's size) and checksums the bytes its segments gained.
//! A record after a compaction (or the first of a journal) holds the whole
//! layout, and the journal is then rewritten with it alone; the segments the
//! records before it named, and it does not, are deleted only then.
//!
//! Records are appended with one write each, so a server killed at any
//! moment leaves whole records and at most one cut short; [`replay`] reads
//! them back, stops at the first that is cut short or damaged (its frame's
//! checksum, or the checksum of the segment bytes it names), and gives the
//! state of the last good one, saying what it left out. An execution whose
//! start was recorded with no state after it did not finish.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::globals::GlobalValue;
use super::page_layout::{Extent, Layout, SegmentMark, Source, segment_name};
use crate::sandbox::private_files::{create_private_dir, open_regular, read_regular};

/// The journal's file name in a memory directory.
pub(crate) const JOURNAL: &str = "journal";
/// The most bytes one record may take (a layout is bounded well below).
const MAX_RECORD: u32 = 64 << 20;

/// The state of a memory after a turn.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StateRecord {
    /// Executions the sandbox had run.
    pub executions: u64,
    /// Bytes of memory.
    pub memory_bytes: u64,
    /// The globals' values.
    pub globals: Vec<(String, GlobalValue)>,
    /// Whether `extents` is the whole layout (or what changed).
    pub whole: bool,
    /// Extents mapped anew (or all of them).
    pub extents: Vec<Extent>,
    /// What the segments gained (or, for a whole record, all they hold).
    pub marks: Vec<SegmentMark>,
}

#[derive(Debug, Serialize, Deserialize)]
enum Record {
    Started {
        executions: u64,
    },
    State(StateRecord),
    /// The memory is no longer kept from the execution numbered on.
    Lapsed {
        executions: u64,
    },
    /// The bytes the records of executions up to `through` name are on
    /// disk (synced before this record was written): a replay need not
    /// read them back to check them.
    Synced {
        through: u64,
    },
}

/// A memory directory's journal, open for appending.
#[derive(Debug)]
pub(crate) struct Journal {
    path: PathBuf,
    file: Arc<File>,
    written: u64,
}

impl Journal {
    /// The journal of `dir`, open for appending; made (empty) when there
    /// is none. What an earlier interpreter of the sandbox recorded stays
    /// until the first whole record replaces it, so a server stopped before
    /// then brings the sandbox back as that interpreter left it.
    pub(crate) fn open(dir: &Path) -> std::io::Result<Self> {
        create_private_dir(dir)?;
        let path = dir.join(JOURNAL);
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        let written = file.metadata()?.len();
        Ok(Self {
            path,
            file: Arc::new(file),
            written,
        })
    }

    /// Bytes the journal holds.
    pub(crate) fn len(&self) -> u64 {
        self.written
    }

    /// Records that the memory is no longer kept after the `executions`th
    /// execution (its pages would not fit the disk allowed).
    pub(crate) fn lapsed(&mut self, executions: u64) -> std::io::Result<()> {
        self.append(&Record::Lapsed { executions })
    }

    /// Records that an execution (the `executions`th) starts.
    pub(crate) fn started(&mut self, executions: u64) -> std::io::Result<()> {
        self.append(&Record::Started { executions })
    }

    /// Records the state after a turn; a whole record replaces the journal
    /// (so the segments earlier records named can go).
    pub(crate) fn state(&mut self, state: StateRecord) -> std::io::Result<()> {
        if state.whole {
            return self.rewrite(state);
        }
        self.append(&Record::State(state))
    }

    /// The file, for syncing it in the background (a server killed
    /// outright loses nothing written; a machine that stops, what the system
    /// had not put on disk) and then recording that with [`note_synced`].
    pub(crate) fn sync_handle(&self) -> Arc<File> {
        self.file.clone()
    }

    fn append(&mut self, record: &Record) -> std::io::Result<()> {
        let frame = frame(record)?;
        (&*self.file).write_all(&frame)?;
        self.written += frame.len() as u64;
        Ok(())
    }

    /// Replaces the journal with one holding `state` alone.
    fn rewrite(&mut self, state: StateRecord) -> std::io::Result<()> {
        let temp = self.path.with_extension("new");
        let frame = frame(&Record::State(state))?;
        let mut file = File::create(&temp)?;
        file.write_all(&frame)?;
        file.sync_data()?;
        std::fs::rename(&temp, &self.path)?;
        if self.written > 0 {
            // The replacement is on disk before the segments only the old
            // journal named are deleted.
            sync_dir(&self.path)?;
        }
        self.file = Arc::new(OpenOptions::new().append(true).open(&self.path)?);
        self.written = frame.len() as u64;
        Ok(())
    }
}

/// Puts the directory holding `path` on disk (a rename in it); where a
/// directory cannot be opened to be synced (Windows), the rename stands as
/// the system keeps it.
fn sync_dir(path: &Path) -> std::io::Result<()> {
    let Some(dir) = path.parent() else {
        return Ok(());
    };
    match File::open(dir) {
        Ok(dir) => dir.sync_all(),
        Err(_) if cfg!(windows) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Appends to `journal` (synced with the segments) that the records of
/// executions up to `through` name bytes now on disk.
pub(crate) fn note_synced(journal: &File, through: u64) -> std::io::Result<()> {
    let frame = frame(&Record::Synced { through })?;
    let mut writer = journal;
    writer.write_all(&frame)
}

/// A record as written: its length, the CRC-32 of its body, the body.
fn frame(record: &Record) -> std::io::Result<Vec<u8>> {
    let body = serde_json::to_vec(record)?;
    let mut frame = Vec::with_capacity(body.len() + 8);
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// A memory brought back from its journal.
#[derive(Debug)]
pub(crate) struct Replayed {
    /// The last good state.
    pub state: StateRecord,
    /// Its whole layout.
    pub layout: Layout,
    /// The bytes of each segment it uses.
    pub segments: BTreeMap<u32, u64>,
    /// The checksums of each segment's bytes.
    pub marks: BTreeMap<u32, Vec<SegmentMark>>,
}

/// What a journal holds.
#[derive(Debug, Default)]
pub(crate) struct Replay {
    /// The memory as of its last good state, if it has one.
    pub memory: Option<Replayed>,
    /// Whether an execution started after that state and did not finish.
    pub unfinished: bool,
    /// Why what was saved could not be used, if anything was left out: damaged or cut
    /// short, or built on a snapshot image that is gone.
    pub damage: Option<String>,
    /// When the memory stopped being kept: after the execution numbered.
    pub lapsed: Option<u64>,
}

/// Most bytes a journal may hold (a journal is rewritten long before).
const MAX_JOURNAL: u64 = 256 << 20;

/// Reads the journal of the memory directory `dir` (whose segments are
/// checked against the records, but for the bytes a later record says were
/// on disk).
pub(crate) fn replay(dir: &Path) -> std::io::Result<Replay> {
    let bytes = read_regular(&dir.join(JOURNAL), MAX_JOURNAL)?;
    let (records, mut damage) = read_records(&bytes);
    let synced = records
        .iter()
        .filter_map(|r| match r {
            Record::Synced { through } => Some(*through),
            _ => None,
        })
        .max();
    let mut good: Option<Replayed> = None;
    let mut checked: BTreeMap<u32, u64> = BTreeMap::new();
    let mut unfinished = false;
    let mut lapsed = None;
    for record in records {
        match record {
            Record::Started { .. } => unfinished = true,
            Record::Lapsed { executions } => lapsed = Some(executions),
            Record::Synced { .. } => {}
            Record::State(state) => {
                let verify = synced.is_none_or(|through| state.executions > through);
                match apply(dir, good.as_ref(), &mut checked, state, verify) {
                    Ok(next) => {
                        good = Some(next);
                        unfinished = false;
                    }
                    Err(why) => {
                        damage = Some(why);
                        break;
                    }
                }
            }
        }
    }
    Ok(Replay {
        memory: good,
        unfinished,
        damage,
        lapsed,
    })
}

/// The whole records at the start of `bytes`, and why the rest (if any)
/// was left out.
fn read_records(bytes: &[u8]) -> (Vec<Record>, Option<String>) {
    let mut records = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        match read_frame(&bytes[at..]) {
            Ok((record, used)) => {
                at += used;
                records.push(record);
            }
            Err(why) => return (records, Some(why)),
        }
    }
    (records, None)
}

/// One frame at the start of `bytes`, and the bytes it took.
fn read_frame(bytes: &[u8]) -> Result<(Record, usize), String> {
    let cut = || "the last record is cut short".to_owned();
    let head = bytes.get(..8).ok_or_else(cut)?;
    let len = u32::from_le_bytes(head[..4].try_into().unwrap_or_default());
    let crc = u32::from_le_bytes(head[4..].try_into().unwrap_or_default());
    if len > MAX_RECORD {
        return Err("a record's length is damaged".into());
    }
    let body = bytes.get(8..8 + len as usize).ok_or_else(cut)?;
    if crc32fast::hash(body) != crc {
        return Err("a record is damaged (its checksum does not match)".into());
    }
    let record =
        serde_json::from_slice(body).map_err(|e| format!("a record cannot be read ({e})"))?;
    Ok((record, 8 + len as usize))
}

/// The state after `state` on top of `previous`, its segment bytes checked;
/// on failure, why.
fn apply(
    dir: &Path,
    previous: Option<&Replayed>,
    checked: &mut BTreeMap<u32, u64>,
    state: StateRecord,
    verify: bool,
) -> Result<Replayed, String> {
    let (mut layout, mut segments, mut marks) = match (previous, state.whole) {
        (_, true) => (Layout::default(), BTreeMap::new(), BTreeMap::new()),
        (Some(p), false) => (p.layout.clone(), p.segments.clone(), p.marks.clone()),
        (None, false) => return Err("the journal does not start with a whole state".into()),
    };
    // Each segment's marks continue one another from where the segment
    // stood (from its start, in a whole record), so every byte a layout
    // can name is covered by a checksum.
    let mut reached: BTreeMap<u32, u64> = segments.clone();
    for mark in &state.marks {
        let from = reached.get(&mark.id).copied().unwrap_or(0);
        if mark.from != from || mark.to <= mark.from {
            return Err(format!(
                "the pages of a state are damaged (segment {} is marked from byte {} to {} where it stood at {from})",
                mark.id, mark.from, mark.to
            ));
        }
        reached.insert(mark.id, mark.to);
        let known = checked.get(&mark.id).copied().unwrap_or(0);
        if mark.to > known {
            if verify {
                check_mark(dir, mark)?;
            } else {
                check_length(dir, mark)?;
            }
            checked.insert(mark.id, mark.to);
        }
        let len = segments.entry(mark.id).or_insert(0);
        *len = (*len).max(mark.to);
        marks.entry(mark.id).or_insert_with(Vec::new).push(*mark);
    }
    for extent in &state.extents {
        layout.set(*extent);
    }
    layout.check(&segments, state.memory_bytes)?;
    // Segments no extent uses any more are not carried.
    let used: std::collections::BTreeSet<u32> = layout
        .extents()
        .iter()
        .filter_map(|e| match e.source {
            Source::Segment(id) => Some(id),
            Source::Image => None,
        })
        .collect();
    segments.retain(|id, _| used.contains(id));
    marks.retain(|id, _| used.contains(id));
    Ok(Replayed {
        state,
        layout,
        segments,
        marks,
    })
}

/// Checks that the segment a mark names holds its bytes (for bytes known to
/// be on disk, whose checksum is not read back).
fn check_length(dir: &Path, mark: &SegmentMark) -> Result<(), String> {
    let path = dir.join(segment_name(mark.id));
    let damaged = |what: String| format!("the pages of a state are damaged ({what})");
    let len = open_regular(&path)
        .and_then(|file| file.metadata())
        .map_err(|e| damaged(format!("segment {}: {e}", mark.id)))?
        .len();
    if len < mark.to {
        return Err(damaged(format!(
            "segment {} is cut short: {len} bytes of {}",
            mark.id, mark.to
        )));
    }
    Ok(())
}

/// Checks the bytes a mark names against its checksum.
fn check_mark(dir: &Path, mark: &SegmentMark) -> Result<(), String> {
    use std::os::unix::fs::FileExt;
    let path = dir.join(segment_name(mark.id));
    let damaged = |what: String| format!("the pages of a state are damaged ({what})");
    let file = open_regular(&path).map_err(|e| damaged(format!("segment {}: {e}", mark.id)))?;
    if mark.to < mark.from {
        return Err(damaged("a mark runs backwards".into()));
    }
    let mut hasher = crc32fast::Hasher::new();
    let mut buffer = vec![0u8; 1 << 20];
    let mut at = mark.from;
    while at < mark.to {
        let n = ((mark.to - at) as usize).min(buffer.len());
        file.read_exact_at(&mut buffer[..n], at)
            .map_err(|e| damaged(format!("segment {} is cut short: {e}", mark.id)))?;
        hasher.update(&buffer[..n]);
        at += n as u64;
    }
    if hasher.finalize() != mark.crc {
        return Err(damaged(format!(
            "segment {} does not match its checksum",
            mark.id
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
