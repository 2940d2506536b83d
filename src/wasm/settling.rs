//! [`Settling`]: work a guest's thread still does for a call after its
//! answer went (tidying a kept memory's pages, see [`super::kept_memory`]).
//! The next call waits for it before its time limit starts, so that work is
//! never charged to a call that did not ask for it.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

/// Whether a guest's thread is busy after an answer.
#[derive(Debug, Default)]
pub(crate) struct Settling {
    busy: AtomicBool,
    done: Notify,
}

/// Held while the guest's thread is busy after an answer; dropping it (also
/// when that work fails or panics) frees the calls that wait.
#[must_use = "the work lasts as long as the guard"]
pub(crate) struct Busy<'a>(&'a Settling);

impl Settling {
    /// The guest's thread starts work after an answer: called before that
    /// answer is sent, so the next call sees it.
    pub(crate) fn begin(&self) -> Busy<'_> {
        self.busy.store(true, Ordering::SeqCst);
        Busy(self)
    }

    /// Returns once the guest's thread has no such work under way.
    pub(crate) async fn settled(&self) {
        loop {
            let done = self.done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            if !self.busy.load(Ordering::SeqCst) {
                return;
            }
            done.await;
        }
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.busy.store(false, Ordering::SeqCst);
        self.0.done.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_call_waits_until_the_work_after_an_answer_is_done() {
        let settling = std::sync::Arc::new(Settling::default());
        settling.settled().await;
        let busy = settling.begin();
        let waiting = tokio::spawn({
            let settling = settling.clone();
            async move { settling.settled().await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "it waits while the work runs");
        drop(busy);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("freed when the work ends")
            .unwrap();
    }
}
