//! [`StopSignal`]: asks a running call (an execution, an install) to stop, and
//! says why, so the call can tell the client what happened and the backend can
//! tell a cancelled call (restart the interpreter) from a closing sandbox (do not).

use std::sync::{Arc, OnceLock};

use tokio_util::sync::CancellationToken;

/// Why a call was asked to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The client cancelled the request.
    Cancelled,
    /// The sandbox is being closed (by `close_sandbox`, idle expiry or shutdown).
    Closing,
}

impl StopReason {
    /// What happened, in words for the model.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Cancelled => "the call was cancelled by the client",
            Self::Closing => "the sandbox was closed while the call ran",
        }
    }
}

/// A stop request shared by the caller and the call.
#[derive(Clone, Debug, Default)]
pub struct StopSignal {
    token: CancellationToken,
    reason: Arc<OnceLock<StopReason>>,
}

impl StopSignal {
    /// A signal that has not fired.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fires the signal; the first reason given is the one kept.
    pub fn stop(&self, reason: StopReason) {
        let _ = self.reason.set(reason);
        self.token.cancel();
    }

    /// Waits until the signal fires; returns why.
    pub async fn stopped(&self) -> StopReason {
        self.token.cancelled().await;
        self.reason()
    }

    /// Why it fired (`Cancelled` when it has not: callers ask only after it did).
    pub fn reason(&self) -> StopReason {
        self.reason.get().copied().unwrap_or(StopReason::Cancelled)
    }

    /// Whether it fired.
    pub fn is_stopped(&self) -> bool {
        self.token.is_cancelled()
    }

    /// The underlying token, for code that waits on a plain token.
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_first_reason_is_kept_and_waiters_see_it() {
        let signal = StopSignal::new();
        assert!(!signal.is_stopped());
        let waiter = tokio::spawn({
            let signal = signal.clone();
            async move { signal.stopped().await }
        });
        signal.stop(StopReason::Closing);
        signal.stop(StopReason::Cancelled);
        assert_eq!(waiter.await.unwrap(), StopReason::Closing);
        assert_eq!(signal.reason(), StopReason::Closing);
    }
}
