//! [`MemoryLimiter`]: what keeps a guest's linear memory within its own cap
//! and the server's memory budget, and [`MemoryMeter`], what the host reads
//! of it (the memory held, and which limit refused a growth).

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use wasmtime::ResourceLimiter;

use crate::sandbox::budget::Budget;

/// Which limit refused a memory growth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MemoryRefusal {
    /// The sandbox's own memory cap.
    Cap,
    /// The server-wide budget, taken by all sandboxes together.
    Budget,
}

/// A guest's memory limit, the memory it holds, and whether (and by what) a
/// growth was refused.
#[derive(Default)]
pub(crate) struct MemoryMeter {
    limit: AtomicU64,
    bytes: AtomicU64,
    /// 0: none; 1: the cap; 2: the budget.
    refused: AtomicU8,
}

impl MemoryMeter {
    /// A meter whose guest may grow its memory to `limit` bytes.
    pub(crate) fn with_limit(limit: u64) -> Self {
        let meter = Self::default();
        meter.set_limit(limit);
        meter
    }

    /// Changes the limit.
    pub(crate) fn set_limit(&self, bytes: u64) {
        self.limit.store(bytes, Ordering::Relaxed);
    }

    /// The guest's linear memory, in bytes.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Forgets a refusal (at the start of a call).
    pub(crate) fn clear_refusal(&self) {
        self.refused.store(0, Ordering::SeqCst);
    }

    /// Which limit refused a growth since the refusal was last cleared.
    pub(crate) fn refusal(&self) -> Option<MemoryRefusal> {
        match self.refused.load(Ordering::SeqCst) {
            1 => Some(MemoryRefusal::Cap),
            2 => Some(MemoryRefusal::Budget),
            _ => None,
        }
    }
}

/// Keeps a guest within its cap and charges its growth to the server's
/// budget, giving it back when the store goes.
pub(crate) struct MemoryLimiter {
    meter: Arc<MemoryMeter>,
    budget: Arc<Budget>,
    charged: u64,
}

impl MemoryLimiter {
    /// A limiter keeping a guest within `meter`'s limit and charging
    /// `budget`.
    pub(crate) fn new(meter: Arc<MemoryMeter>, budget: Arc<Budget>) -> Self {
        Self {
            meter,
            budget,
            charged: 0,
        }
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let desired = desired as u64;
        if desired > self.meter.limit.load(Ordering::Relaxed) {
            self.meter.refused.store(1, Ordering::SeqCst);
            return Ok(false);
        }
        let growth = desired.saturating_sub(self.charged);
        if !self.budget.try_charge(growth) {
            self.meter.refused.store(2, Ordering::SeqCst);
            return Ok(false);
        }
        self.charged += growth;
        self.meter.bytes.store(desired, Ordering::Relaxed);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1 << 20)
    }

    fn instances(&self) -> usize {
        1
    }

    fn tables(&self) -> usize {
        16
    }

    fn memories(&self) -> usize {
        1
    }
}

impl Drop for MemoryLimiter {
    fn drop(&mut self) {
        self.budget.release(self.charged);
    }
}
