//! [`BackgroundSync`]: puts a kept memory's files on disk off the request
//! path, one sync at a time (a request made while a sync runs waits for it
//! and replaces any request already waiting, so executions faster than the
//! disk never queue up syncs), then notes in the journal how far the state
//! is on disk, so that a restore need not read those pages back.
//!
//! Syncs of one memory start at least [`SYNC_GAP`] apart: a sandbox running
//! short executions back to back syncs a few times a second, not after
//! each (a sync costs the disk, and both cores, more than a short execution
//! does). What a sync waits for is already in the system's page cache, so a
//! server killed outright loses nothing meanwhile; a machine that stops
//! loses at most the executions of the last [`SYNC_GAP`] and of the sync
//! under way, as with a journal's group commit. A memory that stops being
//! kept (its interpreter stops, the server stops) does not wait for a sync:
//! a restore checks the bytes of records no sync has covered.

use std::fs::File;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::journal::note_synced;

/// One memory's syncs.
#[derive(Debug, Default)]
pub(crate) struct BackgroundSync {
    state: Arc<Mutex<SyncState>>,
}

/// Least time between the starts of two syncs of one memory.
pub(crate) const SYNC_GAP: Duration = Duration::from_millis(100);

#[derive(Debug, Default)]
struct SyncState {
    running: bool,
    waiting: Option<SyncRequest>,
    /// When the last sync started.
    last: Option<Instant>,
}

/// Files to sync: the segments, then the journal, which is then told
/// that the records of executions up to `through` are on disk.
#[derive(Debug)]
struct SyncRequest {
    segments: Vec<Arc<File>>,
    journal: Arc<File>,
    through: u64,
}

impl SyncRequest {
    fn run(&self) -> std::io::Result<()> {
        for file in &self.segments {
            file.sync_data()?;
        }
        self.journal.sync_data()?;
        note_synced(&self.journal, self.through)
    }
}

impl BackgroundSync {
    /// Syncs `segments` and `journal` on a blocking thread, after the sync
    /// under way if there is one and no sooner than [`SYNC_GAP`] after it
    /// started, and notes in the journal that the records of executions up
    /// to `through` are on disk. A request still waiting when another comes
    /// is replaced by it.
    pub(crate) fn request(&self, segments: Vec<Arc<File>>, journal: Arc<File>, through: u64) {
        let files = SyncRequest {
            segments,
            journal,
            through,
        };
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.waiting = Some(files);
        if state.running {
            return;
        }
        state.running = true;
        drop(state);
        let shared = self.state.clone();
        drop(tokio::task::spawn_blocking(move || {
            loop {
                let due = {
                    let mut state = shared.lock().unwrap_or_else(|e| e.into_inner());
                    if state.waiting.is_none() {
                        state.running = false;
                        return;
                    }
                    state.last.map(|last| last + SYNC_GAP)
                };
                if let Some(wait) = due.and_then(|due| due.checked_duration_since(Instant::now())) {
                    std::thread::sleep(wait);
                }
                let Some(files) = take_waiting(&shared) else {
                    continue;
                };
                if let Err(e) = files.run() {
                    tracing::warn!(error = %e, "could not put a sandbox's state on disk");
                }
            }
        }));
    }
}

/// The request waiting, taken as the sync that starts now.
fn take_waiting(state: &Mutex<SyncState>) -> Option<SyncRequest> {
    let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
    let files = state.waiting.take()?;
    state.last = Some(Instant::now());
    Some(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_made_while_a_sync_runs_collapse_into_one() {
        let dir = tempfile::tempdir().unwrap();
        let file = Arc::new(File::create(dir.path().join("f")).unwrap());
        let journal = Arc::new(File::create(dir.path().join("journal")).unwrap());
        let sync = BackgroundSync::default();
        // Numbers of one width: every note takes as many bytes.
        for n in 100..200 {
            sync.request(vec![file.clone()], journal.clone(), n);
        }
        for _ in 0..500 {
            if !sync.state.lock().unwrap().running {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let state = sync.state.lock().unwrap();
        assert!(!state.running, "the syncs finish");
        assert!(state.waiting.is_none(), "nothing is left waiting");
        // One note of how far the state is on disk per sync run: the first
        // request's, and at most one more, SYNC_GAP later, for the rest.
        let note = {
            let other = File::create(dir.path().join("other")).unwrap();
            note_synced(&other, 150).unwrap();
            other.metadata().unwrap().len()
        };
        let noted = journal.metadata().unwrap().len();
        assert!(noted == note || noted == 2 * note, "{noted} bytes of notes");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn syncs_of_one_memory_start_at_least_the_gap_apart() {
        let dir = tempfile::tempdir().unwrap();
        let file = Arc::new(File::create(dir.path().join("f")).unwrap());
        let journal = Arc::new(File::create(dir.path().join("journal")).unwrap());
        let sync = BackgroundSync::default();
        let started = Instant::now();
        sync.request(vec![file.clone()], journal.clone(), 1);
        while sync.state.lock().unwrap().waiting.is_some() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // The first sync has started: a second request waits for the gap.
        sync.request(vec![file.clone()], journal.clone(), 2);
        while sync.state.lock().unwrap().running {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(started.elapsed() >= SYNC_GAP, "{:?}", started.elapsed());
        assert!(sync.state.lock().unwrap().waiting.is_none());
    }
}
