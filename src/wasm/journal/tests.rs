use super::*;
use crate::wasm::guest_memory::host_page;

/// Appends `bytes` to segment 0 in `dir`; the mark of what it gained.
fn grow_segment(dir: &Path, bytes: &[u8]) -> SegmentMark {
    let path = dir.join(segment_name(0));
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap();
    let from = file.metadata().unwrap().len();
    file.write_all(bytes).unwrap();
    SegmentMark {
        id: 0,
        from,
        to: from + bytes.len() as u64,
        crc: crc32fast::hash(bytes),
    }
}

/// The state after the `executions`th execution: page `page` of a 16-page
/// memory mapped from segment 0 at `offset`.
fn state(executions: u64, whole: bool, page: usize, offset: u64, mark: SegmentMark) -> StateRecord {
    StateRecord {
        executions,
        memory_bytes: 16 * host_page() as u64,
        globals: Vec::new(),
        whole,
        extents: vec![Extent {
            first: page,
            pages: 1,
            source: Source::Segment(0),
            offset,
        }],
        marks: vec![mark],
    }
}

/// A journal of two executions: a whole state with page 0, then page 1.
fn two_executions(dir: &Path) -> Journal {
    let page = host_page();
    let mut journal = Journal::open(dir).unwrap();
    journal.started(1).unwrap();
    let first = grow_segment(dir, &vec![1; page]);
    journal.state(state(1, true, 0, 0, first)).unwrap();
    journal.started(2).unwrap();
    let second = grow_segment(dir, &vec![2; page]);
    journal
        .state(state(2, false, 1, page as u64, second))
        .unwrap();
    journal
}

/// Each page the replayed layout maps from a segment, with its offset there.
fn pages_of(replay: &Replay) -> Vec<(usize, u64)> {
    let memory = replay.memory.as_ref().expect("a state comes back");
    let page = host_page() as u64;
    memory
        .layout
        .extents()
        .iter()
        .flat_map(|e| (0..e.pages).map(move |k| (e.first + k, e.offset + k as u64 * page)))
        .collect()
}

#[test]
fn the_last_state_comes_back_and_an_execution_left_running_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let mut journal = two_executions(dir.path());
    let replay = replay(dir.path()).unwrap();
    assert_eq!(replay.memory.as_ref().unwrap().state.executions, 2);
    assert_eq!(pages_of(&replay), [(0, 0), (1, host_page() as u64)]);
    assert!(!replay.unfinished);
    assert_eq!(replay.damage, None);

    journal.started(3).unwrap();
    let replay = super::replay(dir.path()).unwrap();
    assert_eq!(replay.memory.unwrap().state.executions, 2);
    assert!(replay.unfinished, "the third execution did not finish");
}

#[test]
fn a_record_cut_short_leaves_the_state_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let journal = two_executions(dir.path());
    let path = dir.path().join(JOURNAL);
    let file = OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(journal.len() - 5).unwrap();
    let replay = replay(dir.path()).unwrap();
    assert_eq!(replay.memory.as_ref().unwrap().state.executions, 1);
    assert_eq!(pages_of(&replay), [(0, 0)]);
    assert!(replay.damage.unwrap().contains("cut short"));
    // The second execution's start was recorded, its state was not.
    assert!(replay.unfinished);
}

#[test]
fn pages_that_do_not_match_their_checksum_leave_the_state_before_them_unless_synced() {
    let dir = tempfile::tempdir().unwrap();
    let journal = two_executions(dir.path());
    let segment = OpenOptions::new()
        .write(true)
        .open(dir.path().join(segment_name(0)))
        .unwrap();
    std::os::unix::fs::FileExt::write_all_at(&segment, &[9], host_page() as u64 + 7).unwrap();
    let replay = replay(dir.path()).unwrap();
    assert_eq!(replay.memory.as_ref().unwrap().state.executions, 1);
    assert!(replay.damage.unwrap().contains("damaged"));

    // Bytes the journal says were synced are not read back (a restore maps
    // them as they are): only their length is checked.
    note_synced(&journal.sync_handle(), 2).unwrap();
    let replay = super::replay(dir.path()).unwrap();
    assert_eq!(replay.memory.unwrap().state.executions, 2);
    assert_eq!(replay.damage, None);
}

#[test]
fn a_segment_cut_short_is_damage_even_when_synced() {
    let dir = tempfile::tempdir().unwrap();
    let journal = two_executions(dir.path());
    note_synced(&journal.sync_handle(), 2).unwrap();
    let segment = OpenOptions::new()
        .write(true)
        .open(dir.path().join(segment_name(0)))
        .unwrap();
    segment.set_len(host_page() as u64 + 10).unwrap();
    let replay = replay(dir.path()).unwrap();
    assert_eq!(replay.memory.unwrap().state.executions, 1);
    assert!(replay.damage.unwrap().contains("cut short"));
}

#[test]
fn a_whole_record_replaces_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let page = host_page();
    let mut journal = two_executions(dir.path());
    let third = grow_segment(dir.path(), &vec![3; page]);
    let mut whole = state(3, true, 2, 2 * page as u64, third);
    whole.marks = vec![SegmentMark {
        id: 0,
        from: 0,
        to: third.to,
        crc: crc32fast::hash(&[vec![1; page], vec![2; page], vec![3; page]].concat()),
    }];
    journal.state(whole).unwrap();
    let on_disk = std::fs::metadata(dir.path().join(JOURNAL)).unwrap().len();
    assert_eq!(journal.len(), on_disk);
    let replay = replay(dir.path()).unwrap();
    assert_eq!(replay.memory.as_ref().unwrap().state.executions, 3);
    // The whole record alone: only what it names.
    assert_eq!(pages_of(&replay), [(2, 2 * page as u64)]);
}

#[test]
fn a_journal_that_does_not_start_whole_gives_nothing_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut journal = Journal::open(dir.path()).unwrap();
    let mark = grow_segment(dir.path(), &vec![1; host_page()]);
    journal.state(state(1, false, 0, 0, mark)).unwrap();
    let replay = replay(dir.path()).unwrap();
    assert!(replay.memory.is_none());
    assert!(replay.damage.unwrap().contains("whole state"));
}

#[test]
fn a_lapsed_memory_says_after_which_execution() {
    let dir = tempfile::tempdir().unwrap();
    let mut journal = two_executions(dir.path());
    journal.lapsed(2).unwrap();
    let replay = replay(dir.path()).unwrap();
    assert_eq!(replay.lapsed, Some(2));
    assert_eq!(replay.memory.unwrap().state.executions, 2);
}
