//! [`WarmPool`]: interpreters started ahead of time, each in a fresh sandbox
//! directory, so creating a sandbox is taking one rather than starting CPython.
//!
//! The pool refills itself in the background, one interpreter at a time, a
//! moment after each take: starting CPython costs tens of milliseconds of CPU,
//! and the sandbox just handed out usually runs code right away, so the refill
//! waits [`REFILL_DELAY`] rather than compete with it. A size of 0 turns it off.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::error::WasmError;
use super::guest_image::GuestImage;
use super::interpreter::START_TIMEOUT;
use super::interpreter::{DirState, Interpreter};
use super::starting_memory::PagesPlan;
use crate::sandbox::budget::Budget;
use crate::sandbox::quota::QuotaLedger;
use crate::sandbox::{SandboxError, SandboxLimits};

/// How long a refill waits after a take before starting an interpreter.
const REFILL_DELAY: std::time::Duration = std::time::Duration::from_millis(50);
use crate::sandbox::root::{SandboxRoot, memory_dir_of};

/// An interpreter running in its own, still empty, sandbox directory; both
/// are removed if it is dropped without being handed out.
pub(crate) struct Warm {
    root: Arc<SandboxRoot>,
    parts: Option<WarmParts>,
}

/// The directory, its quota ledger, and the interpreter running in it.
pub(crate) type WarmParts = (PathBuf, Arc<QuotaLedger>, Interpreter);

impl Warm {
    /// Hands over the directory, its ledger and the interpreter.
    pub(crate) fn into_parts(mut self) -> Option<WarmParts> {
        self.parts.take()
    }

    fn is_alive(&self) -> bool {
        self.parts.as_ref().is_some_and(|(_, _, i)| i.is_alive())
    }

    /// Memory the interpreter holds now.
    fn memory_bytes(&self) -> u64 {
        self.parts
            .as_ref()
            .map_or(0, |(_, _, interpreter)| interpreter.memory_bytes())
    }
}

impl Drop for Warm {
    fn drop(&mut self) {
        if let Some((dir, _, mut interpreter)) = self.parts.take() {
            interpreter.kill();
            self.root.remove_sandbox_dir(&dir);
        }
    }
}

/// Ready interpreters of one runtime.
pub(crate) struct WarmPool {
    image: Arc<GuestImage>,
    root: Arc<SandboxRoot>,
    size: usize,
    limits: SandboxLimits,
    /// When the sandboxes it serves are made durable after each execution,
    /// the disk their pages may take.
    durable: Option<Arc<Budget>>,
    ready: Mutex<VecDeque<Warm>>,
    refilling: AtomicBool,
}

impl WarmPool {
    /// A pool of `size` interpreters of `image`, started with the default
    /// sandbox `limits` (a sandbox's own memory limit replaces them later),
    /// journaling their state within `durable` when the sandboxes are kept.
    pub(crate) fn new(
        image: Arc<GuestImage>,
        root: Arc<SandboxRoot>,
        size: usize,
        limits: SandboxLimits,
        durable: Option<Arc<Budget>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            image,
            root,
            size,
            limits,
            durable,
            ready: Mutex::new(VecDeque::new()),
            refilling: AtomicBool::new(false),
        })
    }

    fn ready(&self) -> MutexGuard<'_, VecDeque<Warm>> {
        self.ready.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes a ready interpreter for a sandbox with `limits`, if there is one
    /// that can serve it (see [`serves`]), and starts a replacement. A
    /// sandbox the pool cannot serve starts its own interpreter.
    pub(crate) fn take(self: &Arc<Self>, limits: &SandboxLimits) -> Option<Warm> {
        let warm = loop {
            let Some(warm) = self.ready().pop_front() else {
                break None;
            };
            if !warm.is_alive() {
                continue;
            }
            if !serves(&self.limits, warm.memory_bytes(), limits) {
                // Pooled interpreters are alike: none serves these limits.
                self.ready().push_front(warm);
                return None;
            }
            break Some(warm);
        };
        self.refill_after(REFILL_DELAY);
        warm
    }

    /// How many interpreters wait ready now.
    pub(crate) fn ready_count(&self) -> usize {
        self.ready().len()
    }

    /// Starts interpreters in the background until the pool is full.
    pub(crate) fn refill(self: &Arc<Self>) {
        self.refill_after(std::time::Duration::ZERO);
    }

    fn refill_after(self: &Arc<Self>, delay: std::time::Duration) {
        if self.size == 0 || self.refilling.swap(true, Ordering::SeqCst) {
            return;
        }
        let pool = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            loop {
                let Some(pool) = pool.upgrade() else { return };
                if pool.ready().len() >= pool.size {
                    pool.refilling.store(false, Ordering::SeqCst);
                    // A take may have raced with the check above.
                    if pool.ready().len() < pool.size
                        && !pool.refilling.swap(true, Ordering::SeqCst)
                    {
                        continue;
                    }
                    return;
                }
                match pool.start_one().await {
                    Ok(warm) => pool.ready().push_back(warm),
                    Err(e) => {
                        tracing::warn!("could not start a pooled interpreter: {e}");
                        pool.refilling.store(false, Ordering::SeqCst);
                        return;
                    }
                }
            }
        });
    }

    async fn start_one(&self) -> Result<Warm, SandboxError> {
        let dir = self.root.create_sandbox_dir()?;
        let started = match self.root.open_ledger(&dir, &self.limits) {
            Ok(ledger) => Interpreter::start(
                &self.image,
                &dir,
                DirState::Fresh,
                ledger.clone(),
                &self.limits,
                START_TIMEOUT,
                Some(PagesPlan {
                    dir: memory_dir_of(&dir),
                    durable: self.durable.clone().filter(|_| self.image.turns),
                }),
            )
            .await
            .map(|interpreter| (ledger, interpreter))
            .map_err(|e| WasmError::Start(e).into()),
            Err(e) => Err(e),
        };
        match started {
            Ok((ledger, interpreter)) => Ok(Warm {
                root: self.root.clone(),
                parts: Some((dir, ledger, interpreter)),
            }),
            Err(e) => {
                self.root.remove_sandbox_dir(&dir);
                Err(e)
            }
        }
    }
}

/// Whether an interpreter started under the pool's limits (`started`), and
/// holding `memory_now` bytes, can be a sandbox with the limits `wanted`: its
/// disk quota and open-file limit are fixed when it starts, so they must be
/// the same; its memory cap is set when it is handed out, so it must hold no
/// more than that cap already.
fn serves(started: &SandboxLimits, memory_now: u64, wanted: &SandboxLimits) -> bool {
    (started.disk_bytes, started.disk_files, started.open_files)
        == (wanted.disk_bytes, wanted.disk_files, wanted.open_files)
        && memory_now <= wanted.memory_bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(memory_mb: u64) -> SandboxLimits {
        SandboxLimits {
            timeout: std::time::Duration::from_secs(30),
            max_timeout: std::time::Duration::from_secs(300),
            memory_bytes: memory_mb << 20,
            fuel: None,
            cpu: None,
            output_bytes: 16 << 10,
            output_file_bytes: 1 << 20,
            disk_bytes: 256 << 20,
            disk_files: 10_000,
            image_bytes: 1 << 20,
            max_images: 8,
            open_files: 64,
        }
    }

    #[test]
    fn a_pooled_interpreter_serves_only_limits_it_can_keep() {
        let pool = limits(512);
        let held = 40 << 20;
        assert!(serves(&pool, held, &limits(512)), "the pool's own limits");
        assert!(serves(&pool, held, &limits(1024)), "a higher memory cap");
        assert!(
            serves(&pool, held, &limits(40)),
            "a lower cap it fits under"
        );
        assert!(
            !serves(&pool, held, &limits(32)),
            "a cap below what it holds already"
        );
        let mut other_disk = limits(512);
        other_disk.disk_bytes = 1 << 20;
        assert!(!serves(&pool, held, &other_disk), "another disk quota");
        let mut other_open = limits(512);
        other_open.open_files = 8;
        assert!(!serves(&pool, held, &other_open), "another open-file limit");
    }
}
