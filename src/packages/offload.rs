//! [`offload`]: runs an install's work on a blocking thread.
//!
//! An install parses what indexes and guests wrote (pages, `METADATA`,
//! `RECORD`), resolves, hashes and unpacks: CPU work whose size others
//! choose. None of it may run on the async workers that answer every other
//! sandbox, so the whole install runs on a thread of tokio's blocking pool,
//! driving its own network waits with [`Handle::block_on`]; progress
//! messages come back over a channel. The caller waits for the work to end
//! (the work itself honours its [`InstallStop`](super::stop::InstallStop)),
//! so nothing is still writing into a sandbox once its install has answered.

use std::future::Future;

use tokio::runtime::Handle;
use tokio::sync::mpsc;

use super::error::PackageError;

/// Sends progress messages from offloaded work to the caller.
#[derive(Clone, Debug)]
pub struct Progress(mpsc::UnboundedSender<String>);

impl Progress {
    /// Reports `message` (dropped when the caller is gone).
    pub fn send(&self, message: String) {
        let _ = self.0.send(message);
    }
}

/// Runs `job` on a blocking thread, passing `progress` every message it
/// reports, and returns what it returns.
pub async fn offload<T, F, Fut>(
    progress: &(dyn Fn(String) + Send + Sync),
    job: F,
) -> Result<T, PackageError>
where
    T: Send + 'static,
    F: FnOnce(Progress) -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, PackageError>>,
{
    let (sender, mut messages) = mpsc::unbounded_channel();
    let handle = Handle::current();
    let mut task = tokio::task::spawn_blocking(move || handle.block_on(job(Progress(sender))));
    loop {
        tokio::select! {
            Some(message) = messages.recv() => progress(message),
            joined = &mut task => {
                while let Ok(message) = messages.try_recv() {
                    progress(message);
                }
                return joined
                    .map_err(|e| PackageError::Internal(format!("a worker task failed: {e}")))?;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[tokio::test]
    async fn work_runs_off_the_async_thread_and_its_progress_comes_back() {
        let seen = Mutex::new(Vec::new());
        let caller = std::thread::current().id();
        let (ran_on, value) = offload(&|m| seen.lock().unwrap().push(m), |progress| async move {
            progress.send("one".into());
            tokio::task::yield_now().await;
            progress.send("two".into());
            Ok((std::thread::current().id(), 42))
        })
        .await
        .unwrap();
        assert_ne!(ran_on, caller);
        assert_eq!(value, 42);
        assert_eq!(*seen.lock().unwrap(), ["one", "two"]);
    }
}
