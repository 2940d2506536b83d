use super::*;
use compaction::MAX_EXTENTS;
use std::sync::Arc;

use wasmtime::{Config, Engine, Instance, Module, Store, TypedFunc};

use super::super::guest_memory::GuestMemoryCreator;

/// An instance of a module with `pages` wasm pages of memory, with the
/// functions to read and write a byte of it.
struct Guest {
    store: Store<()>,
    region: Arc<MemoryRegion>,
    load: TypedFunc<i32, i32>,
    store8: TypedFunc<(i32, i32), ()>,
}

impl Guest {
    fn new(engine: &Engine, module: &Module) -> Self {
        let mut store = Store::new(engine, ());
        let instance = Instance::new(&mut store, module, &[]).unwrap();
        let memory = instance.get_memory(&mut store, "memory").unwrap();
        let region = MemoryRegion::of(memory.data_ptr(&store)).unwrap();
        let load = instance.get_typed_func(&mut store, "load").unwrap();
        let store8 = instance.get_typed_func(&mut store, "store").unwrap();
        Self {
            store,
            region,
            load,
            store8,
        }
    }

    fn get(&mut self, at: usize) -> i32 {
        self.load.call(&mut self.store, at as i32).unwrap()
    }

    fn put(&mut self, at: usize, value: i32) {
        self.store8
            .call(&mut self.store, (at as i32, value))
            .unwrap();
    }
}

fn setup() -> (Engine, Module, tempfile::TempDir, Arc<Snapshot>) {
    let mut config = Config::new();
    config
        .with_host_memory(Arc::new(GuestMemoryCreator))
        .memory_init_cow(false);
    let engine = Engine::new(&config).unwrap();
    let module = Module::new(
        &engine,
        wat::parse_str(
            r#"(module (memory (export "memory") 512)
                 (func (export "store") (param i32 i32) (i32.store8 (local.get 0) (local.get 1)))
                 (func (export "load") (param i32) (result i32) (i32.load8_u (local.get 0))))"#,
        )
        .unwrap(),
    )
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    // An image of 8 wasm pages, each host page starting with its number.
    let page = host_page();
    let mut image = vec![0u8; 8 << 16];
    for (i, chunk) in image.chunks_mut(page).enumerate() {
        chunk[0] = i as u8;
    }
    let snapshot = Arc::new(Snapshot::store(tmp.path(), "image", &image, Vec::new()).unwrap());
    (engine, module, tmp, snapshot)
}

/// Each extent a flush wrote, as (first page, pages).
fn first_and_pages(flushed: &Flushed) -> Vec<(usize, usize)> {
    flushed.extents.iter().map(|e| (e.first, e.pages)).collect()
}

fn finders() -> Vec<Finder> {
    let mut all = vec![Finder::Compare, Finder::best()];
    all.dedup();
    all
}

#[test]
fn a_flush_keeps_the_written_pages_and_maps_them_from_the_segment() {
    let (engine, module, tmp, snapshot) = setup();
    let page = host_page();
    for finder in finders() {
        let mut guest = Guest::new(&engine, &module);
        let dir = tmp.path().join(format!("{finder:?}"));
        let mut pages = PageStore::of_image(dir.clone(), snapshot.clone()).with_finder(finder);
        unsafe { pages.map_into(&guest.region).unwrap() };
        assert_eq!(guest.get(5 * page), 5, "the image is mapped");

        guest.put(3 * page + 1, 33);
        guest.put(4 * page + 1, 44);
        // Past the image: anonymous memory until flushed.
        guest.put(200 * page, 7);
        let size = guest.region.size();
        let changed = unsafe { pages.flush(&guest.region, size).unwrap() };
        assert_eq!(first_and_pages(&changed), [(3, 2), (200, 1)], "{finder:?}");
        assert_eq!(pages.segment_bytes(), 3 * page as u64);
        assert!(dir.join("segment-00000000").exists());
        // Nothing new: nothing written.
        assert!(unsafe { pages.flush(&guest.region, size).unwrap() }.is_empty());
        assert_eq!(changed.marks.len(), 1, "one checksum for the bytes added");
        assert_eq!(
            (changed.marks[0].from, changed.marks[0].to),
            (0, 3 * page as u64)
        );
        // Mapped from the segment, the pages read the same.
        assert_eq!(guest.get(3 * page + 1), 33);
        assert_eq!(guest.get(3 * page), 3);
        assert_eq!(guest.get(200 * page), 7);

        // The same page again: the old copy is garbage, the new one counts.
        guest.put(3 * page + 1, 34);
        let changed = unsafe { pages.flush(&guest.region, size).unwrap() };
        assert_eq!(changed.extents.len(), 1);
        assert_eq!(changed.marks.len(), 1);
        assert_eq!(guest.get(3 * page + 1), 34);
        let extents: Vec<(usize, usize, Source)> = pages
            .layout()
            .extents()
            .iter()
            .map(|e| (e.first, e.pages, e.source))
            .collect();
        assert_eq!(
            extents,
            [
                (0, 3, Source::Image),
                (3, 1, Source::Segment(0)),
                (4, 1, Source::Segment(0)),
                (5, 128 - 5, Source::Image),
                (200, 1, Source::Segment(0)),
            ],
            "{finder:?}"
        );
    }
}

#[test]
fn only_the_pages_that_changed_are_written_not_the_run_around_them() {
    let (engine, module, tmp, snapshot) = setup();
    let page = host_page();
    for finder in finders() {
        let mut guest = Guest::new(&engine, &module);
        let dir = tmp.path().join(format!("runs-{finder:?}"));
        let mut pages = PageStore::of_image(dir, snapshot.clone()).with_finder(finder);
        unsafe { pages.map_into(&guest.region).unwrap() };
        // Pages 10 and 16 change; page 13 is written with the byte it held.
        // The three are found as one run (close together); two pages are
        // written.
        guest.put(10 * page + 1, 100);
        guest.put(13 * page, 13);
        guest.put(16 * page + 1, 160);
        let size = guest.region.size();
        let changed = unsafe { pages.flush(&guest.region, size).unwrap() };
        assert_eq!(first_and_pages(&changed), [(10, 1), (16, 1)], "{finder:?}");
        assert_eq!(pages.segment_bytes(), 2 * page as u64, "{finder:?}");
        for (at, value) in [(10 * page + 1, 100), (13 * page, 13), (16 * page + 1, 160)] {
            assert_eq!(guest.get(at), value, "{finder:?}");
        }
        // A fork reads what the layout says: the same bytes.
        let fork_dir = tmp.path().join(format!("runs-fork-{finder:?}"));
        let forked = pages.fork(fork_dir).unwrap();
        let mut other = Guest::new(&engine, &module);
        unsafe { forked.map_into(&other.region).unwrap() };
        for (at, value) in [(10 * page + 1, 100), (13 * page, 13), (16 * page + 1, 160)] {
            assert_eq!(other.get(at), value, "{finder:?}");
        }
        // The page left the memory's own is written when it changes; two
        // unchanged pages between changed ones are written with them, three
        // are not.
        guest.put(13 * page + 1, 130);
        for at in [20, 23, 30, 34] {
            guest.put(at * page + 1, 7);
        }
        let changed = unsafe { pages.flush(&guest.region, size).unwrap() };
        assert_eq!(
            first_and_pages(&changed),
            [(13, 1), (20, 4), (30, 1), (34, 1)],
            "{finder:?}"
        );
        assert_eq!(guest.get(13 * page + 1), 130, "{finder:?}");
    }
}

#[test]
fn a_fork_maps_the_same_pages_and_the_two_diverge() {
    let (engine, module, tmp, snapshot) = setup();
    let page = host_page();
    let mut source = Guest::new(&engine, &module);
    let mut pages = PageStore::of_image(tmp.path().join("source"), snapshot.clone());
    unsafe { pages.map_into(&source.region).unwrap() };
    source.put(2 * page, 22);
    source.put(300 * page, 30);
    let size = source.region.size();
    unsafe { pages.flush(&source.region, size).unwrap() };

    let mut fork_pages = pages.fork(tmp.path().join("fork")).unwrap();
    let mut fork = Guest::new(&engine, &module);
    unsafe { fork_pages.map_into(&fork.region).unwrap() };
    assert_eq!(fork.get(2 * page), 22);
    assert_eq!(fork.get(300 * page), 30);
    assert_eq!(fork.get(6 * page), 6);

    fork.put(2 * page, 99);
    source.put(300 * page, 31);
    assert_eq!(source.get(2 * page), 22, "the source keeps its page");
    assert_eq!(fork.get(300 * page), 30, "the fork keeps its page");
    // Each flushes into a segment of its own.
    unsafe { pages.flush(&source.region, size).unwrap() };
    unsafe { fork_pages.flush(&fork.region, size).unwrap() };
    assert_eq!(source.get(2 * page), 22);
    assert_eq!(fork.get(2 * page), 99);
    assert_eq!(fork.get(300 * page), 30);
    assert!(tmp.path().join("fork/segment-00000001").exists());
    assert!(tmp.path().join("source/segment-00000001").exists());

    // A third memory mapped from the fork's store sees the fork's pages.
    let mut again = Guest::new(&engine, &module);
    unsafe { fork_pages.map_into(&again.region).unwrap() };
    assert_eq!(again.get(2 * page), 99);
    assert_eq!(again.get(300 * page), 30);
}

#[test]
fn scattered_or_overwritten_pages_are_compacted_into_one_segment() {
    let (engine, module, tmp, snapshot) = setup();
    let page = host_page();
    let mut guest = Guest::new(&engine, &module);
    let dir = tmp.path().join("many");
    let mut pages = PageStore::of_image(dir.clone(), snapshot);
    unsafe { pages.map_into(&guest.region).unwrap() };
    let size = guest.region.size();
    // Pages too far apart to be written as one run, one flush each: more
    // extents than a store keeps.
    let stride = NEAR_PAGES + 2;
    for i in 0..(MAX_EXTENTS + 10) {
        guest.put(stride * i * page + 1, (i % 200) as i32 + 1);
        unsafe { pages.flush(&guest.region, size).unwrap() };
    }
    assert!(
        pages.layout().extents().len() <= MAX_EXTENTS,
        "{}",
        pages.layout().extents().len()
    );
    assert!(
        !dir.join("segment-00000000").exists(),
        "the first segment was compacted away"
    );
    let segments = std::fs::read_dir(&dir).unwrap().count();
    assert!(segments <= 2, "{segments} segments left");
    for i in 0..(MAX_EXTENTS + 10) {
        assert_eq!(guest.get(stride * i * page + 1), (i % 200) as i32 + 1);
        assert_eq!(
            guest.get(stride * i * page),
            (stride * i) as i32 % 256 * i32::from(stride * i < 128)
        );
    }
}

#[test]
fn a_page_written_back_as_it_was_stays_the_memorys_own_until_idle() {
    // Only the finders that tell the memory's own pages from mapped ones
    // (the comparing one never finds an unchanged page).
    let finder = Finder::best();
    if finder == Finder::Compare {
        return;
    }
    let (engine, module, tmp, snapshot) = setup();
    let page = host_page();
    let mut guest = Guest::new(&engine, &module);
    let mut pages = PageStore::of_image(tmp.path().join("idle"), snapshot).with_finder(finder);
    unsafe { pages.map_into(&guest.region).unwrap() };
    guest.put(13 * page, 13);
    let size = guest.region.size();
    let holds_13 = |runs: &[Range<usize>]| runs.iter().any(|r| r.contains(&13));
    for flush in 0..idle::IDLE_FLUSHES {
        let written = unsafe { pages.written(&guest.region, size).unwrap() };
        assert!(
            holds_13(&written),
            "still the memory's own at flush {flush}"
        );
        let flushed = unsafe { pages.flush(&guest.region, size).unwrap() };
        assert!(flushed.is_empty(), "nothing changed");
    }
    let written = unsafe { pages.written(&guest.region, size).unwrap() };
    assert!(!holds_13(&written), "mapped from the image again once idle");
    assert_eq!(guest.get(13 * page), 13);
    assert_eq!(pages.segment_bytes(), 0, "nothing was written");
}

#[test]
fn parts_written_in_one_go_land_one_after_another_even_past_one_calls_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(tmp.path().join("segment"))
        .unwrap();
    // More parts than one system call is given, of sizes from 0 to 4,000
    // bytes (a page's run or a bit of one).
    let parts: Vec<Vec<u8>> = (0..1500usize)
        .map(|k| vec![(k % 251) as u8; (k * 37) % 4001])
        .collect();
    let slices: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
    write_all_at(&file, &slices, 7).unwrap();
    let written = std::fs::read(tmp.path().join("segment")).unwrap();
    assert_eq!(&written[..7], &[0; 7], "nothing before the offset");
    assert_eq!(written[7..], parts.concat()[..]);
}

/// A flush as a kept memory makes it before answering: what can wait is
/// left to [`PageStore::tidy`].
unsafe fn flush_deferring(pages: &mut PageStore, region: &MemoryRegion) -> Flushed {
    let written = unsafe { pages.written(region, region.size()).unwrap() };
    let split = unsafe { pages.split_by_change(region, &written).unwrap() };
    unsafe { pages.flush_split(region, split, Upkeep::Deferred).unwrap() }
}

#[test]
fn a_deferring_flush_leaves_the_compaction_to_the_tidy_after_it() {
    let (engine, module, tmp, snapshot) = setup();
    let page = host_page();
    let mut guest = Guest::new(&engine, &module);
    let mut pages = PageStore::of_image(tmp.path().join("later"), snapshot);
    unsafe { pages.map_into(&guest.region).unwrap() };
    let stride = NEAR_PAGES + 2;
    for i in 0..(MAX_EXTENTS + 10) {
        guest.put(stride * i * page + 1, (i % 200) as i32 + 1);
        let flushed = unsafe { flush_deferring(&mut pages, &guest.region) };
        assert!(!flushed.whole, "no compaction before the answer");
    }
    assert!(pages.layout().extents().len() > MAX_EXTENTS);
    assert!(unsafe { pages.tidy(&guest.region, u64::MAX).unwrap() });
    assert!(pages.layout().extents().len() <= MAX_EXTENTS);
    assert!(pages.whole().whole);
    // Nothing due any more: the next tidy has nothing to do.
    assert!(!unsafe { pages.tidy(&guest.region, u64::MAX).unwrap() });
    for i in 0..(MAX_EXTENTS + 10) {
        assert_eq!(guest.get(stride * i * page + 1), (i % 200) as i32 + 1);
    }
}

#[test]
fn a_tidy_not_allowed_to_compact_leaves_the_pages_as_they_are() {
    let (engine, module, tmp, snapshot) = setup();
    let mut guest = Guest::new(&engine, &module);
    let mut pages = PageStore::of_image(tmp.path().join("full"), snapshot);
    unsafe { pages.map_into(&guest.region).unwrap() };
    let _ = fragmented(&mut guest, &mut pages, true);
    let before = pages.layout().extents().len();
    assert!(before > MAX_EXTENTS);
    assert!(!unsafe { pages.tidy(&guest.region, 0).unwrap() });
    assert_eq!(pages.layout().extents().len(), before);
}

#[test]
fn idle_pages_a_flush_left_are_mapped_by_the_tidy_not_once_the_guest_ran() {
    let finder = Finder::best();
    if finder == Finder::Compare {
        return;
    }
    let (engine, module, tmp, snapshot) = setup();
    let page = host_page();
    let holds = |runs: &[Range<usize>], index: usize| runs.iter().any(|r| r.contains(&index));
    let mut guest = Guest::new(&engine, &module);
    let mut pages =
        PageStore::of_image(tmp.path().join("idle-later"), snapshot).with_finder(finder);
    unsafe { pages.map_into(&guest.region).unwrap() };
    let size = guest.region.size();
    // Pages 13 and 21 written back as they were, until idle long enough.
    guest.put(13 * page, 13);
    guest.put(21 * page, 21);
    for _ in 0..idle::IDLE_FLUSHES {
        unsafe { flush_deferring(&mut pages, &guest.region) };
    }
    let written = unsafe { pages.written(&guest.region, size).unwrap() };
    assert!(holds(&written, 13), "not mapped by the flush itself");
    assert!(unsafe { !pages.tidy(&guest.region, u64::MAX).unwrap() });
    let written = unsafe { pages.written(&guest.region, size).unwrap() };
    assert!(!holds(&written, 13), "mapped from the image by the tidy");
    assert_eq!(guest.get(13 * page), 13);

    // Idle again, but the guest runs before any tidy (its start forgets
    // what the flush left) and writes one of them: it keeps what it wrote.
    guest.put(13 * page, 13);
    for _ in 0..idle::IDLE_FLUSHES {
        unsafe { flush_deferring(&mut pages, &guest.region) };
    }
    pages.forget_deferred();
    guest.put(13 * page + 1, 99);
    assert!(unsafe { !pages.tidy(&guest.region, u64::MAX).unwrap() });
    assert_eq!(guest.get(13 * page + 1), 99, "the guest's write stays");
}

/// A store holding a long run (pages 200..300, written once) and, past
/// the image, two places written a page at a time with a page between each
/// (an interpreter's bookkeeping): pieces one after another in memory but
/// not in the segment, more than a store keeps. The pages each of the
/// `flushes` wrote, and how many there were.
fn fragmented(
    guest: &mut Guest,
    pages: &mut PageStore,
    deferring: bool,
) -> (impl Fn(usize) -> [usize; 2] + use<>, usize) {
    let page = host_page();
    let size = guest.region.size();
    for p in 200..300 {
        guest.put(p * page + 1, 7);
    }
    unsafe { pages.flush(&guest.region, size).unwrap() };
    let written = move |i: usize| [(400 + 2 * i) * page + 1, (2000 + 2 * i) * page + 1];
    let flushes = MAX_EXTENTS / 2 + 10;
    for i in 0..flushes {
        for at in written(i) {
            guest.put(at, (i % 200) as i32 + 1);
        }
        if deferring {
            unsafe { flush_deferring(pages, &guest.region) };
        } else {
            unsafe { pages.flush(&guest.region, size).unwrap() };
        }
    }
    (written, flushes)
}

#[test]
fn a_compaction_joins_up_small_pieces_and_leaves_long_runs_in_place() {
    let (engine, module, tmp, snapshot) = setup();
    let page = host_page();
    let mut guest = Guest::new(&engine, &module);
    let dir = tmp.path().join("pieces");
    let mut pages = PageStore::of_image(dir.clone(), snapshot);
    unsafe { pages.map_into(&guest.region).unwrap() };
    let (written, flushes) = fragmented(&mut guest, &mut pages, false);
    let extents = pages.layout().extents().to_vec();
    assert!(extents.len() < 40, "{extents:?}");
    let long = extents.iter().find(|e| e.first == 200).unwrap();
    assert_eq!(
        (long.pages, long.source),
        (100, Source::Segment(0)),
        "the long run stays where it was written"
    );
    assert!(dir.join("segment-00000000").exists());

    // The memory, a fork of it, and a memory mapped from the fork's store
    // read what was written.
    let fork_pages = pages.fork(tmp.path().join("pieces-fork")).unwrap();
    let mut fork = Guest::new(&engine, &module);
    unsafe { fork_pages.map_into(&fork.region).unwrap() };
    for memory in [&mut guest, &mut fork] {
        assert_eq!(memory.get(250 * page + 1), 7);
        assert_eq!(memory.get(5 * page), 5, "the image");
        for i in 0..flushes {
            for at in written(i) {
                assert_eq!(memory.get(at), (i % 200) as i32 + 1);
                assert_eq!(memory.get(at + page), 0);
            }
        }
    }
}

#[test]
fn with_room_for_one_rewrite_only_a_compaction_rewrites_every_page() {
    // Joining up would leave the disk allowed too little for the rewrite
    // that later takes the garbage back: every page is rewritten now.
    let (engine, module, tmp, snapshot) = setup();
    let mut guest = Guest::new(&engine, &module);
    let mut pages = PageStore::of_image(tmp.path().join("tight"), snapshot);
    unsafe { pages.map_into(&guest.region).unwrap() };
    let _ = fragmented(&mut guest, &mut pages, true);
    let room = pages.used_bytes();
    assert!(unsafe { pages.tidy(&guest.region, room).unwrap() });
    let long = pages
        .layout()
        .extents()
        .iter()
        .find(|e| e.first == 200)
        .copied()
        .unwrap();
    assert_ne!(long.source, Source::Segment(0), "rewritten: {long:?}");
    assert!(!tmp.path().join("tight/segment-00000000").exists());
}
