//! [`InstallBudget`]: what one install may still spend, and when it must
//! stop.
//!
//! - Steps: entries of site-packages and requirements read, files of index
//!   pages sorted, version checks made while resolving. Every piece of work
//!   whose size an index or a guest chooses is paid for here, so one install
//!   does a bounded amount of work however its inputs were built.
//! - Download bytes: pages, metadata files and wheels together.
//! - The [`InstallStop`]: each spend also asks it, so long loops notice a
//!   cancellation or the deadline.

use std::sync::atomic::{AtomicU64, Ordering};

use super::error::PackageError;
use super::settings::InstallLimits;
use super::stop::InstallStop;
use crate::sandbox::human_bytes;

/// One install's allowance.
#[derive(Debug)]
pub struct InstallBudget {
    stop: InstallStop,
    steps_left: AtomicU64,
    max_steps: u64,
    download_left: AtomicU64,
    max_download: u64,
    max_solving: std::time::Duration,
}

impl InstallBudget {
    /// The allowance of one install under `limits`, stopping at `stop`.
    pub fn new(stop: InstallStop, limits: &InstallLimits) -> Self {
        Self {
            stop,
            steps_left: AtomicU64::new(limits.max_resolver_steps),
            max_steps: limits.max_resolver_steps,
            download_left: AtomicU64::new(limits.max_install_download_bytes),
            max_download: limits.max_install_download_bytes,
            max_solving: limits.max_solving,
        }
    }

    /// Most time the solver may think in this install.
    pub fn max_solving(&self) -> std::time::Duration {
        self.max_solving
    }

    /// Its stop condition.
    pub fn stop(&self) -> &InstallStop {
        &self.stop
    }

    /// Pays for `n` steps; the error once they are used up, or when the
    /// install must stop.
    pub fn spend(&self, n: u64) -> Result<(), PackageError> {
        self.stop.check()?;
        take(&self.steps_left, n).map_err(|()| PackageError::TooComplex {
            limit: self.max_steps,
        })
    }

    /// Bytes the next download may take at most, given `cap` for one file.
    pub fn download_limit(&self, cap: u64) -> u64 {
        cap.min(self.download_left.load(Ordering::SeqCst))
    }

    /// Whether a download cut off at `limit` (from [`Self::download_limit`]
    /// with `cap`) was cut by this install's total rather than by `cap`;
    /// then this is the error to give.
    pub fn download_exhausted(&self, limit: u64, cap: u64) -> Option<PackageError> {
        (limit < cap).then(|| PackageError::InstallTooLarge {
            what: "download",
            limit: human_bytes(self.max_download),
        })
    }

    /// Books `n` bytes downloaded.
    pub fn downloaded(&self, n: u64) -> Result<(), PackageError> {
        take(&self.download_left, n).map_err(|()| PackageError::InstallTooLarge {
            what: "download",
            limit: human_bytes(self.max_download),
        })
    }
}

/// Takes `n` from `left`, or leaves it at zero and fails when there is less.
fn take(left: &AtomicU64, n: u64) -> Result<(), ()> {
    let mut failed = false;
    let _ = left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |have| {
        failed = have < n;
        Some(have.saturating_sub(n))
    });
    if failed { Err(()) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_and_bytes_run_out() {
        let limits = InstallLimits {
            max_resolver_steps: 10,
            max_install_download_bytes: 100,
            ..InstallLimits::default()
        };
        let budget = InstallBudget::new(InstallStop::never(), &limits);
        budget.spend(6).unwrap();
        budget.spend(4).unwrap();
        let err = budget.spend(1).unwrap_err();
        assert!(
            matches!(err, PackageError::TooComplex { limit: 10 }),
            "{err}"
        );
        assert_eq!(budget.download_limit(1000), 100);
        assert!(budget.download_exhausted(100, 1000).is_some());
        budget.downloaded(60).unwrap();
        assert_eq!(budget.download_limit(1000), 40);
        assert_eq!(budget.download_limit(10), 10);
        assert!(budget.download_exhausted(10, 10).is_none());
        assert!(budget.downloaded(41).is_err());
        assert_eq!(budget.download_limit(1000), 0);
    }
}
