//! [`InstallStop`]: when an install must give up: the caller cancelled
//! (the client cancelled the request, or the sandbox is closing), or the
//! install's deadline passed.
//!
//! Network waits race it ([`InstallStop::race`]); blocking work (unpacking,
//! scanning) asks it between steps ([`InstallStop::check`]). Either way the
//! install then unwinds through its normal error path, so staging is removed
//! and partial downloads deleted before the caller hears about it.

use std::future::Future;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

/// Why an install gave up (the package error says it in full).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Stopped {
    /// The caller cancelled.
    #[error("the install was cancelled")]
    Cancelled,
    /// The deadline passed.
    #[error("the install took longer than {limit}")]
    TimedOut {
        /// The deadline, in words.
        limit: String,
    },
}

/// The stop condition of one install.
#[derive(Clone, Debug)]
pub struct InstallStop {
    token: CancellationToken,
    deadline: Instant,
    timeout: Duration,
}

impl InstallStop {
    /// Stops when `token` is cancelled or `timeout` has passed from now.
    pub fn new(token: CancellationToken, timeout: Duration) -> Self {
        Self {
            token,
            deadline: Instant::now() + timeout,
            timeout,
        }
    }

    /// A stop that never fires (for tests).
    #[cfg(test)]
    pub fn never() -> Self {
        Self::new(CancellationToken::new(), Duration::from_secs(365 * 86_400))
    }

    /// The error to give up with, if it is time to.
    pub fn check(&self) -> Result<(), Stopped> {
        if self.token.is_cancelled() {
            return Err(Stopped::Cancelled);
        }
        if Instant::now() >= self.deadline {
            return Err(self.timed_out());
        }
        Ok(())
    }

    /// Runs `work` until it ends or the install must stop, whichever comes
    /// first; `work` is dropped when it loses.
    pub async fn race<T, E: From<Stopped>>(
        &self,
        work: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        self.check()?;
        tokio::select! {
            result = work => result,
            () = self.token.cancelled() => Err(Stopped::Cancelled.into()),
            () = tokio::time::sleep_until(self.deadline.into()) => Err(self.timed_out().into()),
        }
    }

    /// The time left before the deadline.
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// The cancellation it watches.
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    fn timed_out(&self) -> Stopped {
        Stopped::TimedOut {
            limit: describe(self.timeout),
        }
    }
}

/// A duration in words: `300 s`, `2.5 s`, `50 ms`.
fn describe(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_race_ends_at_the_deadline_or_the_cancellation() {
        let stop = InstallStop::new(CancellationToken::new(), Duration::from_millis(50));
        let never = std::future::pending::<Result<(), Stopped>>();
        let err = stop.race(never).await.unwrap_err();
        assert!(matches!(err, Stopped::TimedOut { .. }), "{err}");
        assert!(err.to_string().contains("longer than 50 ms"), "{err}");
        assert!(stop.check().is_err(), "and stays stopped");

        let token = CancellationToken::new();
        let stop = InstallStop::new(token.clone(), Duration::from_secs(60));
        assert!(stop.check().is_ok());
        token.cancel();
        let err = stop
            .race(async { Ok::<(), Stopped>(()) })
            .await
            .unwrap_err();
        assert!(matches!(err, Stopped::Cancelled), "{err}");
    }
}
