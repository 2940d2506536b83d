use super::super::globals::GlobalValue;
use super::super::journal::{Journal, StateRecord};
use super::*;

fn identity(key: &str, id: &str) -> ImageIdentity {
    ImageIdentity {
        key: key.into(),
        id: id.into(),
    }
}

fn meta(id: &str) -> SavedMeta {
    SavedMeta {
        session_id: id.into(),
        runtime: "scientific".into(),
        image_key: "key-1".into(),
        image_id: "image-1".into(),
        server_version: env!("CARGO_PKG_VERSION").into(),
        saved_at: unix_now(),
        memory_bytes: 1 << 29,
        timeout_ms: 30_000,
        executions: 3,
        allow_hosts: None,
    }
}

/// A live sandbox as a server keeps it: `<dir>/sb-1` with a file, and
/// `<dir>/sb-1.memory` with its record and a journal of one state.
fn live_sandbox(store: &SavedStore, dir: &Path, id: &str) -> (PathBuf, PathBuf) {
    let files = dir.join("sb-1");
    let memory = dir.join("sb-1.memory");
    fs::create_dir_all(&files).unwrap();
    fs::write(files.join("data.txt"), "kept").unwrap();
    store.write_record(&memory, &meta(id)).unwrap();
    let mut journal = Journal::open(&memory).unwrap();
    journal
        .state(StateRecord {
            executions: 3,
            memory_bytes: 64 << 10,
            globals: vec![("__wizer_global_0".into(), GlobalValue::I32(7))],
            whole: true,
            extents: Vec::new(),
            marks: Vec::new(),
        })
        .unwrap();
    (files, memory)
}

#[test]
fn a_saved_sandbox_comes_back_once_checked_and_a_damaged_one_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let store = SavedStore::open(root.path(), Duration::from_secs(60), 1 << 30).unwrap();
    let (files, memory) = live_sandbox(&store, root.path(), "../../etc");
    store.save(meta("../../etc"), &files, &memory).unwrap();
    assert!(
        !files.exists() && !memory.exists(),
        "both moved into the store"
    );
    let listed = store.list();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].state_kept && listed[0].session_id == "../../etc");
    let key = |_: &str| Some(identity("key-1", "image-1"));
    let back = store.take("../../etc", key).unwrap().unwrap();
    assert!(!back.memory.unfinished && back.memory.damage.is_none());
    let replayed = back.memory.memory.unwrap();
    assert_eq!(replayed.state.executions, 3);
    assert_eq!(replayed.state.globals[0].1, GlobalValue::I32(7));
    assert_eq!(
        fs::read_to_string(back.files.join("data.txt")).unwrap(),
        "kept"
    );
    assert!(
        back.entry.starts_with(root.path().join("saved")),
        "the id is not a path"
    );

    let other_key = |_: &str| Some(identity("key-2", "image-1"));
    let stale = match store.take("../../etc", other_key).unwrap() {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a state of another runtime build must be refused"),
    };
    assert!(
        stale.contains("has changed") && stale.contains("files are kept"),
        "{stale}"
    );
    // The same snapshot key made again is another image: the pages saved on
    // the old one do not fit it, so the sandbox comes back with its files.
    let remade = |_: &str| Some(identity("key-1", "image-2"));
    let files_only = store.take("../../etc", remade).unwrap().unwrap();
    assert!(files_only.memory.memory.is_none());
    assert_eq!(files_only.memory.damage.as_deref(), Some(IMAGE_MADE_AGAIN));
    assert!(files_only.files.join("data.txt").exists());
    let record = back.entry.join(META);
    let saved = fs::read(&record).unwrap();
    let raised = String::from_utf8(saved.clone())
        .unwrap()
        .replace("536870912", "4294967296");
    fs::write(&record, raised).unwrap();
    let changed = match store.take("../../etc", key).unwrap() {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a record changed after its save must be refused"),
    };
    assert!(changed.contains("does not match its seal"), "{changed}");
    fs::write(&record, saved).unwrap();
    assert!(store.take("nobody", key).is_none());
    assert!(store.delete("../../etc"));
    assert!(store.list().is_empty());
}

#[test]
fn a_dead_servers_sandboxes_are_taken_in_and_a_live_ones_left() {
    let root = tempfile::tempdir().unwrap();
    let store = SavedStore::open(root.path(), Duration::from_secs(60), 1 << 30).unwrap();
    // A live server's sandbox is its own (its root is claimed first: a
    // claim removes what dead servers left).
    let live_root = crate::sandbox::root::SandboxRoot::open(root.path(), None).unwrap();
    live_sandbox(&store, live_root.path(), "running");
    let dead = root.path().join("server-dead");
    fs::create_dir_all(&dead).unwrap();
    fs::write(dead.join(".lock"), b"").unwrap();
    live_sandbox(&store, &dead, "lost");
    // A memory directory without files: a restore cut short, not a sandbox.
    store
        .write_record(&dead.join("sb-2.memory"), &meta("orphan"))
        .unwrap();

    assert_eq!(store.adopt_abandoned(), 1);
    let key = |_: &str| Some(identity("key-1", "image-1"));
    let back = store.take("lost", key).unwrap().unwrap();
    assert_eq!(back.memory.memory.unwrap().state.executions, 3);
    assert_eq!(
        fs::read_to_string(back.files.join("data.txt")).unwrap(),
        "kept"
    );
    assert!(store.take("orphan", key).is_none());
    assert!(store.take("running", key).is_none());
    assert!(live_root.path().join("sb-1.memory").exists());

    // A record changed while its server was dead is moved, not sealed anew.
    let dead = root.path().join("server-dead2");
    fs::create_dir_all(&dead).unwrap();
    fs::write(dead.join(".lock"), b"").unwrap();
    let (_, memory) = live_sandbox(&store, &dead, "tampered");
    let record = memory.join(META);
    let raised = fs::read_to_string(&record)
        .unwrap()
        .replace("536870912", "4294967296");
    fs::write(&record, raised).unwrap();
    assert_eq!(store.adopt_abandoned(), 1);
    let refused = match store.take("tampered", key).unwrap() {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a tampered record must stay refused"),
    };
    assert!(refused.contains("does not match its seal"), "{refused}");
}

#[test]
fn an_unfinished_execution_and_a_damaged_record_are_told() {
    let root = tempfile::tempdir().unwrap();
    let store = SavedStore::open(root.path(), Duration::from_secs(60), 1 << 30).unwrap();
    let (files, memory) = live_sandbox(&store, root.path(), "a");
    let mut journal = Journal::open(&memory).unwrap();
    let state = |executions| StateRecord {
        executions,
        memory_bytes: 64 << 10,
        globals: Vec::new(),
        whole: true,
        extents: Vec::new(),
        marks: Vec::new(),
    };
    journal.state(state(4)).unwrap();
    journal.started(5).unwrap();
    store.save(meta("a"), &files, &memory).unwrap();
    let key = |_: &str| Some(identity("key-1", "image-1"));
    let back = store.take("a", key).unwrap().unwrap().memory;
    assert!(back.unfinished && back.memory.unwrap().state.executions == 4);

    // A record cut short in the middle: the one before it stands.
    let entry = store.entry("a");
    let journal_path = entry.join(JOURNAL);
    let good = fs::read(&journal_path).unwrap();
    let mut more = Journal::open(&root.path().join("x")).unwrap();
    more.state(state(9)).unwrap();
    let extra = fs::read(root.path().join("x").join(JOURNAL)).unwrap();
    let mut cut = good.clone();
    cut.extend_from_slice(&extra[..extra.len() - 3]);
    fs::write(&journal_path, &cut).unwrap();
    let back = store.take("a", key).unwrap().unwrap().memory;
    assert!(
        back.damage.as_deref().unwrap().contains("cut short"),
        "{:?}",
        back.damage
    );
    assert_eq!(back.memory.unwrap().state.executions, 4);
    // A flipped byte in a whole record's body.
    let mut flipped = good.clone();
    flipped.extend_from_slice(&extra);
    flipped[good.len() + 10] ^= 0x20;
    fs::write(&journal_path, &flipped).unwrap();
    let back = store.take("a", key).unwrap().unwrap().memory;
    assert!(back.damage.as_deref().unwrap().contains("damaged"));
    assert_eq!(back.memory.unwrap().state.executions, 4);
}

#[test]
fn old_entries_expire_and_the_size_limit_drops_the_oldest() {
    let root = tempfile::tempdir().unwrap();
    let store = SavedStore::open(root.path(), Duration::from_secs(60), 150_000).unwrap();
    for (i, id) in ["a", "b"].iter().enumerate() {
        let files = root.path().join(id);
        fs::create_dir(&files).unwrap();
        fs::write(files.join("blob"), vec![0u8; 100_000]).unwrap();
        let mut m = meta(id);
        m.saved_at -= 10 - i as u64;
        store
            .save(m, &files, &root.path().join(format!("{id}.memory")))
            .unwrap();
    }
    let ids: Vec<String> = store.list().into_iter().map(|s| s.session_id).collect();
    assert_eq!(ids, ["b"], "the older entry made room");
    let big = root.path().join("big");
    fs::create_dir(&big).unwrap();
    fs::write(big.join("blob"), vec![1u8; 200_000]).unwrap();
    let refused = store.save(meta("big"), &big, &root.path().join("big.memory"));
    assert!(
        matches!(refused, Err(SaveError::TooLarge { max_mib: 0, .. })),
        "{refused:?}"
    );
    let ids: Vec<String> = store.list().into_iter().map(|s| s.session_id).collect();
    assert_eq!(ids, ["b"], "a sandbox over the limit alone is not kept");
    let mut old = meta("c");
    old.saved_at -= 3600;
    let files = root.path().join("c");
    fs::create_dir(&files).unwrap();
    store
        .save(old, &files, &root.path().join("c.memory"))
        .unwrap();
    let reopened = SavedStore::open(root.path(), Duration::from_secs(60), 1 << 30).unwrap();
    let ids: Vec<String> = reopened.list().into_iter().map(|s| s.session_id).collect();
    assert_eq!(
        ids,
        ["b"],
        "an entry past the keeping time is deleted at start"
    );
    assert!(
        reopened.take("b", |_| None).unwrap().is_ok(),
        "the seal's key survives a restart, so the record still verifies"
    );
    assert!(SavedStore::open(root.path(), Duration::ZERO, 1).is_none());
}

#[test]
fn the_size_limit_counts_every_directory_however_many() {
    // 1,500 directories of 64 KiB each (the review's attack): the walk
    // counts them all, so the sandbox is over a limit of 88 MiB.
    let root = tempfile::tempdir().unwrap();
    let store = SavedStore::open(root.path(), Duration::from_secs(60), 88 << 20).unwrap();
    let files = root.path().join("many");
    fs::create_dir(&files).unwrap();
    for i in 0..1500 {
        let d = files.join(format!("d{i}"));
        fs::create_dir(&d).unwrap();
        fs::write(d.join("blob"), vec![7u8; 64 << 10]).unwrap();
    }
    let refused = store.save(meta("many"), &files, &root.path().join("many.memory"));
    assert!(
        matches!(refused, Err(SaveError::TooLarge { max_mib: 88, .. })),
        "{refused:?}"
    );
    assert!(store.list().is_empty(), "nothing over the limit is kept");
}

#[test]
fn a_walk_that_cannot_finish_is_an_error_never_a_smaller_number() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let shut = tmp.path().join("shut");
    fs::create_dir(&shut).unwrap();
    fs::write(shut.join("blob"), vec![1u8; 1 << 20]).unwrap();
    fs::set_permissions(&shut, fs::Permissions::from_mode(0o000)).unwrap();
    let unreadable = fs::read_dir(&shut).is_err();
    let measured = tree_bytes(tmp.path());
    fs::set_permissions(&shut, fs::Permissions::from_mode(0o755)).unwrap();
    if unreadable {
        assert!(measured.is_err(), "{measured:?}");
    } else {
        // Running as root: every directory can be read.
        assert!(measured.unwrap() >= 1 << 20);
    }
    assert!(tree_bytes(&tmp.path().join("absent")).is_err());
}

#[test]
fn another_entry_deleted_mid_walk_counts_as_nothing_and_a_young_half_written_one_stays() {
    let root = tempfile::tempdir().unwrap();
    let gone = root.path().join("gone");
    assert_eq!(other_entry_bytes(&gone).unwrap(), 0);
    assert!(
        tree_bytes(&gone).is_err(),
        "the entry saved itself must be measured"
    );
    // Another server is writing this one right now.
    let partial = root.path().join("saved").join("0123.partial");
    fs::create_dir_all(&partial).unwrap();
    let _store = SavedStore::open(root.path(), Duration::from_secs(60), 1 << 30).unwrap();
    assert!(
        partial.exists(),
        "a half-written entry of a running save is kept"
    );
}

/// Writes a lease into the server directory `dir` held by a server on
/// another host until `expires_at_ms`.
fn lease_elsewhere(dir: &Path, expires_at_ms: u64) {
    let record = crate::sandbox::lease::LeaseRecord {
        host: "another-host".into(),
        boot: "another-boot".into(),
        pid: 1,
        pid_namespace: String::new(),
        started: 0,
        time_namespace: String::new(),
        expires_at_ms,
    };
    fs::write(
        dir.join(crate::sandbox::lease::LEASE_FILE),
        serde_json::to_vec(&record).unwrap(),
    )
    .unwrap();
}

#[test]
fn a_server_that_dies_after_the_store_opens_is_taken_in_before_its_directory_goes() {
    let root = tempfile::tempdir().unwrap();
    let dead = root.path().join("server-late");
    fs::create_dir_all(&dead).unwrap();
    fs::write(dead.join(".lock"), b"").unwrap();
    let now = unix_now() * 1000;
    // Still held when the store opens: nothing is taken in then.
    lease_elsewhere(&dead, now + 20_000);
    let store = SavedStore::open(root.path(), Duration::from_secs(60), 1 << 30).unwrap();
    live_sandbox(&store, &dead, "late");
    let key = |_: &str| Some(identity("key-1", "image-1"));
    assert!(store.take("late", key).is_none());

    // Its lease lapses before this server claims its own directory, which
    // removes what dead servers left: the sandbox is taken in first.
    lease_elsewhere(&dead, now - 60_000);
    let _live = store.while_taking_in(|take_in| {
        crate::sandbox::root::SandboxRoot::open_taking_in(root.path(), None, take_in).unwrap()
    });
    assert!(!dead.exists(), "the dead server's directory is removed");
    let back = store.take("late", key).unwrap().unwrap();
    assert_eq!(back.memory.memory.unwrap().state.executions, 3);
    assert_eq!(
        fs::read_to_string(back.files.join("data.txt")).unwrap(),
        "kept"
    );
}

#[test]
fn a_call_looking_for_a_sandbox_while_the_root_takes_it_in_waits_and_finds_it() {
    let root = tempfile::tempdir().unwrap();
    let dead = root.path().join("server-racing");
    fs::create_dir_all(&dead).unwrap();
    fs::write(dead.join(".lock"), b"").unwrap();
    let now = unix_now() * 1000;
    lease_elsewhere(&dead, now + 20_000);
    let store = SavedStore::open(root.path(), Duration::from_secs(60), 1 << 30).unwrap();
    live_sandbox(&store, &dead, "racing");
    lease_elsewhere(&dead, now - 60_000);

    let (holding, held) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        // The server's root opens (as its warm pool fills at start): it
        // holds the dead server's lock, slowly taking its sandboxes in.
        scope.spawn(|| {
            store.while_taking_in(|take_in| {
                let slow = |dir: &Path| {
                    holding.send(()).unwrap();
                    std::thread::sleep(Duration::from_millis(300));
                    take_in(dir);
                };
                crate::sandbox::root::SandboxRoot::open_taking_in(root.path(), None, &slow).unwrap()
            })
        });
        // Meanwhile a call names the sandbox.
        held.recv().unwrap();
        store.adopt_abandoned();
        assert!(
            store.runtime_of("racing").is_some(),
            "the call waits for the taking-in under way and finds the sandbox"
        );
    });
}

/// A dead server's directory planted by someone who can write the root:
/// its `.lock`, no lease (lapsed).
#[cfg(unix)]
fn planted_server(root: &Path, name: &str) -> PathBuf {
    let dir = root.join(name);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(".lock"), b"").unwrap();
    dir
}

#[cfg(unix)]
#[test]
fn memory_directories_that_are_links_are_never_followed_when_taking_in() {
    use std::os::unix::fs::symlink;
    let root = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let store = SavedStore::open(root.path(), Duration::from_secs(60), 1 << 30).unwrap();
    // A saved sandbox, and a live one of a running server.
    let (files, memory) = live_sandbox(&store, root.path(), "saved");
    store.save(meta("saved"), &files, &memory).unwrap();
    let live_root = crate::sandbox::root::SandboxRoot::open(root.path(), None).unwrap();
    let (live_files, live_memory) = live_sandbox(&store, live_root.path(), "running");
    // Links to each, and to a directory outside the root holding a record.
    store
        .write_record(outside.path(), &meta("outside"))
        .unwrap();
    let planted = planted_server(root.path(), "server-planted");
    fs::create_dir(planted.join("a")).unwrap();
    fs::create_dir(planted.join("b")).unwrap();
    fs::create_dir(planted.join("c")).unwrap();
    symlink(store.entry("saved"), planted.join("a.memory")).unwrap();
    symlink(&live_memory, planted.join("b.memory")).unwrap();
    symlink(outside.path(), planted.join("c.memory")).unwrap();

    assert_eq!(store.adopt_abandoned(), 0);
    let key = |_: &str| Some(identity("key-1", "image-1"));
    assert!(
        store.take("saved", key).unwrap().is_ok(),
        "the saved sandbox is kept"
    );
    assert!(live_memory.join(META).exists() && live_files.join("data.txt").exists());
    assert!(store.take("running", key).is_none());
    assert!(outside.path().join(META).exists() && !outside.path().join(FILES).exists());
    assert!(store.take("outside", key).is_none());
}

#[cfg(unix)]
#[test]
fn an_unsealed_record_never_displaces_a_saved_sandbox() {
    let root = tempfile::tempdir().unwrap();
    let store = SavedStore::open(root.path(), Duration::from_secs(60), 1 << 30).unwrap();
    let (files, memory) = live_sandbox(&store, root.path(), "notes");
    store.save(meta("notes"), &files, &memory).unwrap();
    // A forged record naming it, saved "later than ever", with no seal.
    let planted = planted_server(root.path(), "server-forged");
    fs::create_dir(planted.join("q")).unwrap();
    fs::create_dir(planted.join("q.memory")).unwrap();
    let mut forged = meta("notes");
    forged.saved_at = u64::MAX;
    fs::write(
        planted.join("q.memory").join(META),
        serde_json::to_vec(&forged).unwrap(),
    )
    .unwrap();

    assert_eq!(store.adopt_abandoned(), 0);
    let key = |_: &str| Some(identity("key-1", "image-1"));
    let back = store.take("notes", key).unwrap().unwrap();
    assert_eq!(
        fs::read_to_string(back.files.join("data.txt")).unwrap(),
        "kept"
    );
}
