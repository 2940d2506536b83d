//! [`BackgroundSync`]: puts a kept memory's files on disk off the request
//! path, one sync at a time (a request made while a sync runs waits for it
//! and replaces any request already waiting, so executions faster than the
//! disk never queue up syncs), then notes in the journal how far the state
//! is on disk, so that a restore need not read those pages back.

use std::fs::File;
use std::sync::{Arc, Mutex};

use super::journal::note_synced;

/// One memory's syncs.
#[derive(Debug, Default)]
pub(crate) struct BackgroundSync {
    state: Arc<Mutex<SyncState>>,
}

#[derive(Debug, Default)]
struct SyncState {
    running: bool,
    waiting: Option<SyncRequest>,
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
    /// under way if there is one, and notes in the journal that the records
    /// of executions up to `through` are on disk.
    pub(crate) fn request(&self, segments: Vec<Arc<File>>, journal: Arc<File>, through: u64) {
        let files = SyncRequest {
            segments,
            journal,
            through,
        };
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.running {
            state.waiting = Some(files);
            return;
        }
        state.running = true;
        drop(state);
        let shared = self.state.clone();
        drop(tokio::task::spawn_blocking(move || {
            let mut files = files;
            loop {
                if let Err(e) = files.run() {
                    tracing::warn!(error = %e, "could not put a sandbox's state on disk");
                }
                let mut state = shared.lock().unwrap_or_else(|e| e.into_inner());
                match state.waiting.take() {
                    Some(next) => files = next,
                    None => {
                        state.running = false;
                        return;
                    }
                }
            }
        }));
    }
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
        for n in 0..100 {
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
    }
}
