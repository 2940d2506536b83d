//! [`Budget`]: a server-wide ceiling on what all local sandboxes together
//! may hold (memory, disk), so that per-sandbox caps times the number of
//! sandboxes can never add up to more than the machine has. Each sandbox
//! charges what it uses as it grows and gives it back when it ends; a growth
//! that does not fit is refused (a `MemoryError`, an `EDQUOT`), never left to
//! the kernel's out-of-memory killer or a full disk.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use schemars::JsonSchema;
use serde::Serialize;

/// One server-wide ceiling and what is charged against it.
#[derive(Debug)]
pub struct Budget {
    limit: u64,
    used: AtomicU64,
}

impl Budget {
    /// A budget of `limit` bytes.
    pub fn new(limit: u64) -> Arc<Self> {
        Arc::new(Self {
            limit,
            used: AtomicU64::new(0),
        })
    }

    /// No ceiling (tests, tools that run one sandbox).
    pub fn unlimited() -> Arc<Self> {
        Self::new(u64::MAX)
    }

    /// The ceiling, in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes charged now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Bytes still free.
    pub fn free(&self) -> u64 {
        self.limit.saturating_sub(self.used())
    }

    /// Charges `bytes` if they fit; returns whether they did.
    pub fn try_charge(&self, bytes: u64) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&after| after <= self.limit)
            })
            .is_ok()
    }

    /// Charges `bytes` whether or not they fit (for use found by measuring:
    /// it is there already, and only makes later charges fail).
    pub fn charge(&self, bytes: u64) {
        self.used.fetch_add(bytes, Ordering::AcqRel);
    }

    /// Gives back `bytes` charged earlier.
    pub fn release(&self, bytes: u64) {
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                Some(used.saturating_sub(bytes))
            });
    }

    /// Charges `bytes` if they fit, for as long as the returned hold lives.
    pub fn try_hold(self: &Arc<Self>, bytes: u64) -> Option<Hold> {
        self.try_charge(bytes).then(|| Hold {
            budget: self.clone(),
            bytes,
        })
    }

    /// Charges `bytes` whether or not they fit, for as long as the returned
    /// hold lives (for work that must not be refused, such as the save that
    /// keeps a sandbox at shutdown: other charges still see it).
    pub fn hold(self: &Arc<Self>, bytes: u64) -> Hold {
        self.charge(bytes);
        Hold {
            budget: self.clone(),
            bytes,
        }
    }

    /// The figures status shows.
    pub fn view(&self) -> BudgetView {
        BudgetView {
            limit_bytes: self.limit,
            used_bytes: self.used(),
        }
    }
}

/// Bytes charged to a [`Budget`] for a while: given back when dropped.
#[derive(Debug)]
pub struct Hold {
    budget: Arc<Budget>,
    bytes: u64,
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
    }
}

/// A budget as status shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct BudgetView {
    /// The ceiling, in bytes.
    pub limit_bytes: u64,
    /// What all sandboxes use together now, in bytes.
    pub used_bytes: u64,
}

/// A backend's budgets as status shows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct BudgetsView {
    /// Memory of all local sandboxes together.
    pub memory: BudgetView,
    /// Disk of all local sandboxes together (absent until the first sandbox).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk: Option<BudgetView>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_that_do_not_fit_are_refused_and_releases_free_room() {
        let budget = Budget::new(100);
        assert!(budget.try_charge(60));
        assert!(!budget.try_charge(41), "61 + 41 > 100");
        assert!(budget.try_charge(40));
        assert_eq!(budget.free(), 0);
        budget.release(70);
        assert_eq!(budget.used(), 30);
        budget.release(1000);
        assert_eq!(budget.used(), 0, "never below zero");
        budget.charge(150);
        assert!(
            !budget.try_charge(1),
            "found use counts even over the limit"
        );
    }
}
