//! [`SandboxManager`]: the live sandboxes of this server, by owner and id.
//!
//! It validates ids (clients choose them, so they are checked and never become
//! host paths), picks the backend of each new sandbox, enforces the maximum
//! number of sandboxes (server-wide and per owner) and the idle expiry, and
//! runs the calls to one sandbox one at a time, while different sandboxes run
//! in parallel. Every lookup goes through an [`Owner`]: a principal sees only
//! the sandboxes it created.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rand::Rng;
use tokio_util::sync::CancellationToken;

use super::error::SandboxError;
use super::types::{SandboxLimits, SandboxSpec, SavedSandbox};
use super::{Backend, BackendKind, Owner, OwnerCaps};

mod live;
mod status;

pub use live::Sandbox;
use live::lock;
pub use status::{LimitsView, SandboxStatus};

/// How long a call waits while another creates or restores the same sandbox
/// (a first compile of a runtime can take minutes; so can a large restore).
const RESERVED_PATIENCE: Duration = Duration::from_secs(300);

/// How long a stop waits for forks and idle saves under way before saving
/// what is live.
const STOP_PATIENCE: Duration = Duration::from_secs(10);

/// Server-wide rules for sandboxes.
#[derive(Clone, Debug)]
pub struct ManagerSettings {
    /// Backend used when a request names none.
    pub default_backend: BackendKind,
    /// Limits a sandbox gets when its creator asks for nothing else.
    pub limits: SandboxLimits,
    /// Largest memory a creator may ask for, in bytes.
    pub max_memory_bytes: u64,
    /// Most sandboxes alive at once.
    pub max_sandboxes: usize,
    /// Sandboxes unused this long are closed; `None` keeps them forever.
    pub idle_timeout: Option<Duration>,
}

/// What a client asked for when creating a sandbox.
#[derive(Clone, Debug, Default)]
pub struct CreateRequest {
    /// The id to use; generated when absent.
    pub id: Option<String>,
    /// Backend; the server's default when absent.
    pub backend: Option<BackendKind>,
    /// Default execution timeout for this sandbox.
    pub timeout: Option<Duration>,
    /// Memory cap for this sandbox, in bytes.
    pub memory_bytes: Option<u64>,
    /// Runtime name; the backend's default when absent.
    pub runtime: Option<String>,
    /// Where to say what a slow creation is doing.
    pub progress: Option<super::types::Progress>,
    /// Who creates it (only they will see it).
    pub owner: Owner,
    /// What that owner may hold at once.
    pub caps: OwnerCaps,
    /// Destinations its guest's HTTP may reach, narrowing the server's list.
    pub allow_hosts: Option<Vec<String>>,
    /// Closed after one execution (`create_run_close`, a one-off `exec`):
    /// its state is never kept on disk, since nothing will come back to it.
    pub one_off: bool,
}

/// The live sandboxes of this server.
pub struct SandboxManager {
    settings: ManagerSettings,
    backends: Vec<Arc<dyn Backend>>,
    slots: Mutex<Slots>,
    /// Cancelled when the server stops: creations and restores under way
    /// are abandoned (a restore's sandbox stays saved) and none start.
    stopping: CancellationToken,
}

/// The live sandboxes and the ones being made, by key ([`Owner::key`]).
#[derive(Default)]
struct Slots {
    live: HashMap<String, Arc<Sandbox>>,
    /// Keys being created, forked or restored right now, with what they will hold.
    reserved: HashMap<String, Claim>,
}

/// What a sandbox holds against its owner's caps.
#[derive(Clone, Debug)]
struct Claim {
    owner: Owner,
    memory_bytes: u64,
    disk_bytes: u64,
}

impl Claim {
    /// What a sandbox of `backend` with `limits` holds: a remote VM's memory
    /// and disk are its provider's, so it holds only its place.
    fn of(owner: &Owner, backend: BackendKind, limits: &SandboxLimits) -> Self {
        let local = backend == BackendKind::Wasm;
        Self {
            owner: owner.clone(),
            memory_bytes: if local { limits.memory_bytes } else { 0 },
            disk_bytes: if local { limits.disk_bytes } else { 0 },
        }
    }
}

/// What a fork carried and what it could not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForkFacts {
    /// Files the source's code held open, which the fork does not hold.
    pub open_files_not_carried: usize,
    /// Files and directories copied.
    pub files_copied: u64,
}

/// Checks a client-chosen sandbox id.
pub fn validate_id(id: &str) -> Result<(), SandboxError> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        let shown: String = id.chars().take(80).flat_map(char::escape_debug).collect();
        Err(SandboxError::InvalidId(shown))
    }
}

fn generate_id() -> String {
    let n: u64 = rand::rng().random();
    format!("sb-{n:016x}")
}

impl SandboxManager {
    /// A manager creating sandboxes with `backends` under `settings`.
    pub fn new(settings: ManagerSettings, backends: Vec<Arc<dyn Backend>>) -> Arc<Self> {
        Arc::new(Self {
            settings,
            backends,
            slots: Mutex::new(Slots::default()),
            stopping: CancellationToken::new(),
        })
    }

    /// The server-wide settings.
    pub fn settings(&self) -> &ManagerSettings {
        &self.settings
    }

    fn backend(&self, kind: BackendKind) -> Result<&Arc<dyn Backend>, SandboxError> {
        self.backends
            .iter()
            .find(|b| b.kind() == kind)
            .ok_or_else(|| {
                SandboxError::BackendUnavailable(match kind {
                    BackendKind::E2b => "the e2b backend is not configured on this server: set E2B_API_KEY (see docs/src/configuration.md) and restart it".to_owned(),
                    BackendKind::Wasm => "the local wasm backend is not available on this server".to_owned(),
                })
            })
    }

    /// Creates a sandbox, or returns the existing one with that id. The flag is
    /// true when the sandbox was created by this call.
    pub async fn create(
        &self,
        request: CreateRequest,
    ) -> Result<(Arc<Sandbox>, bool), SandboxError> {
        let owner = &request.owner;
        let id = match &request.id {
            Some(id) => {
                validate_id(id)?;
                // A sandbox saved under that id is the existing one.
                let key = owner.key(id);
                if self.get(owner, id).is_err() && self.backends.iter().any(|b| b.has_saved(&key)) {
                    return Ok((self.get_or_restore(owner, &request.caps, id).await?, false));
                }
                id.clone()
            }
            None => generate_id(),
        };
        let kind = request.backend.unwrap_or(self.settings.default_backend);
        let backend = self.backend(kind)?.clone();
        let limits = self.limits_for(&request)?;

        // Released however the creation ends: done, failed, panicked or dropped.
        let key = owner.key(&id);
        let claim = Claim::of(owner, kind, &limits);
        let reservation = self.reserve(&key, claim, &request.caps).await?;
        if let Some(existing) = reservation.existing.clone() {
            return Ok((existing, false));
        }
        let spec = SandboxSpec {
            id: key.clone(),
            limits: limits.clone(),
            runtime: request.runtime,
            progress: request.progress,
            allow_hosts: request.allow_hosts,
            one_off: request.one_off,
        };
        let interpreter = self.unless_stopping(backend.create(spec)).await??;
        let sandbox = Sandbox::new(owner, &id, kind, interpreter, limits);
        reservation.fulfil(sandbox.clone());
        Ok((sandbox, true))
    }

    /// The limits a creation asks for, checked against the server's maximums.
    fn limits_for(&self, request: &CreateRequest) -> Result<SandboxLimits, SandboxError> {
        let mut limits = self.settings.limits.clone();
        if let Some(timeout) = request.timeout {
            limits.timeout = limits.check_timeout(timeout)?;
        }
        if let Some(memory) = request.memory_bytes {
            if memory > self.settings.max_memory_bytes {
                return Err(SandboxError::InvalidArgument(format!(
                    "memory_mb {} is over this server's maximum of {} (SANDBOX_MAX_MEMORY_MB): ask for at most that, or have the operator raise it",
                    memory >> 20,
                    self.settings.max_memory_bytes >> 20
                )));
            }
            if memory < 32 << 20 {
                return Err(SandboxError::InvalidArgument(
                    "memory_mb must be at least 32: CPython needs that much to start".into(),
                ));
            }
            limits.memory_bytes = memory;
        }
        Ok(limits)
    }

    /// A new sandbox (`new_id`, or a generated id) of the same owner with the
    /// variables, imports and files of sandbox `source_id` as they are now;
    /// the two then diverge. Refused while the source is running a call, for
    /// an id that exists, and over the server's or the owner's caps.
    pub async fn fork(
        &self,
        owner: &Owner,
        caps: &OwnerCaps,
        source_id: &str,
        new_id: Option<String>,
    ) -> Result<(Arc<Sandbox>, ForkFacts), SandboxError> {
        let source = self.get_or_restore(owner, caps, source_id).await?;
        let id = match new_id {
            Some(id) => {
                validate_id(&id)?;
                id
            }
            None => generate_id(),
        };
        let exists = || {
            SandboxError::InvalidArgument(format!(
                "a sandbox '{id}' already exists: give the fork another new_session_id, or leave it out to get a fresh one"
            ))
        };
        let key = owner.key(&id);
        if self.backends.iter().any(|b| b.has_saved(&key)) {
            return Err(exists());
        }
        let claim = Claim::of(owner, source.backend, &source.limits);
        let reservation = self.reserve(&key, claim, caps).await?;
        if reservation.existing.is_some() {
            return Err(exists());
        }
        let Ok(mut guard) = source.interpreter.try_lock() else {
            return Err(SandboxError::InvalidArgument(format!(
                "sandbox '{source_id}' is running a call right now; fork it when that call has finished"
            )));
        };
        let Some(interpreter) = guard.as_mut() else {
            return Err(SandboxError::UnknownSandbox(source_id.to_owned()));
        };
        let forked = interpreter.fork(&key).await?;
        drop(guard);
        source.touch();
        let sandbox = Sandbox::new(
            owner,
            &id,
            source.backend,
            forked.interpreter,
            source.limits.clone(),
        );
        reservation.fulfil(sandbox.clone());
        let facts = ForkFacts {
            open_files_not_carried: forked.open_files_not_carried,
            files_copied: forked.files_copied,
        };
        Ok((sandbox, facts))
    }

    /// The server-wide budgets local sandboxes share, when a backend keeps them.
    pub fn budgets(&self) -> Option<super::budget::BudgetsView> {
        self.backends.iter().find_map(|b| b.budgets())
    }

    /// The sandbox `id` of `owner`. Another owner's sandbox of that id is
    /// unknown, exactly as one that does not exist.
    pub fn get(&self, owner: &Owner, id: &str) -> Result<Arc<Sandbox>, SandboxError> {
        validate_id(id)?;
        lock(&self.slots)
            .live
            .get(&owner.key(id))
            .cloned()
            .ok_or_else(|| SandboxError::UnknownSandbox(id.to_owned()))
    }

    /// The live sandboxes of `owner`, by id.
    pub fn all(&self, owner: &Owner) -> Vec<Arc<Sandbox>> {
        let mut all: Vec<Arc<Sandbox>> = lock(&self.slots)
            .live
            .values()
            .filter(|s| &s.owner == owner)
            .cloned()
            .collect();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        all
    }

    /// How many sandboxes are alive, by backend (for metrics).
    pub fn count_by_backend(&self) -> Vec<(BackendKind, usize)> {
        let slots = lock(&self.slots);
        [BackendKind::Wasm, BackendKind::E2b]
            .into_iter()
            .map(|kind| {
                let n = slots.live.values().filter(|s| s.backend == kind).count();
                (kind, n)
            })
            .collect()
    }

    /// Closes `owner`'s sandbox (or deletes a saved one); returns false when
    /// it had none with that id.
    pub async fn close(&self, owner: &Owner, id: &str) -> Result<bool, SandboxError> {
        validate_id(id)?;
        let key = owner.key(id);
        self.wait_while_reserved(&key).await;
        let sandbox = {
            let mut slots = lock(&self.slots);
            if slots.reserved.contains_key(&key) {
                return Err(SandboxError::InvalidArgument(format!(
                    "sandbox '{id}' has been being created or restored by another call for {} s; close it once that call has finished",
                    RESERVED_PATIENCE.as_secs()
                )));
            }
            slots.live.remove(&key)
        };
        match sandbox {
            Some(sandbox) => {
                sandbox.shut().await;
                Ok(true)
            }
            None => Ok(self.backends.iter().any(|b| b.delete_saved(&key))),
        }
    }

    /// `owner`'s live sandbox `id`, or the one saved under that id when the
    /// server last stopped, restored now: within the server's and `caps`
    /// (the owner's) caps, counted with the limits it comes back with (those
    /// it was saved with, lowered to this server's maximums).
    pub async fn get_or_restore(
        &self,
        owner: &Owner,
        caps: &OwnerCaps,
        id: &str,
    ) -> Result<Arc<Sandbox>, SandboxError> {
        let key = owner.key(id);
        self.wait_while_reserved(&key).await;
        let missing = match self.get(owner, id) {
            Err(SandboxError::UnknownSandbox(missing)) => missing,
            found => return found,
        };
        let Some(backend) = self.backends.iter().find(|b| b.has_saved(&key)) else {
            return Err(SandboxError::UnknownSandbox(missing));
        };
        // The slot is held while the sandbox comes back, so a full server
        // (or an owner at one of her caps) refuses before anything is moved,
        // and a second call for the same id is told to wait instead of
        // racing this one. What she held when it was saved does not count:
        // it is charged again, at the limits it will run with.
        let limits = self.restored_limits(backend.as_ref(), &key);
        let claim = Claim::of(owner, backend.kind(), &limits);
        let reservation = self.reserve(&key, claim, caps).await?;
        if let Some(existing) = reservation.existing.clone() {
            return Ok(existing);
        }
        // A stop abandons the restore, which leaves the sandbox saved.
        let Some(restoring) = self.unless_stopping(backend.restore(&key, limits)).await? else {
            return Err(SandboxError::UnknownSandbox(missing));
        };
        let restored = restoring?;
        let sandbox = Sandbox::new(
            owner,
            id,
            backend.kind(),
            restored.interpreter,
            restored.limits,
        );
        reservation.fulfil(sandbox.clone());
        tracing::info!(
            id,
            owner = owner.name(),
            state_kept = restored.state_kept,
            "restored a sandbox saved when the server last stopped"
        );
        Ok(sandbox)
    }

    /// The limits a saved sandbox comes back with: the memory cap and
    /// timeout it was saved with, lowered to this server's maximums (a
    /// record cannot raise them past what a creation may ask for); the
    /// server's own for the rest.
    fn restored_limits(&self, backend: &dyn Backend, key: &str) -> SandboxLimits {
        let mut limits = self.settings.limits.clone();
        if let Some(saved) = backend.saved_limits(key) {
            limits.memory_bytes = saved.memory_bytes.min(self.settings.max_memory_bytes);
            limits.timeout = saved.timeout.min(limits.max_timeout);
        }
        limits
    }

    /// Runs `work` unless the server stops first, in which case `work` is
    /// dropped (creations and restores undo what they did when dropped).
    async fn unless_stopping<T>(
        &self,
        work: impl std::future::Future<Output = T>,
    ) -> Result<T, SandboxError> {
        tokio::select! {
            done = work => Ok(done),
            () = self.stopping.cancelled() => Err(SandboxError::ShuttingDown),
        }
    }

    /// Waits (boundedly) while `key` is being created, restored or saved by
    /// another call, so that this call then finds it live or saved.
    async fn wait_while_reserved(&self, key: &str) {
        let started = std::time::Instant::now();
        while lock(&self.slots).reserved.contains_key(key) && started.elapsed() < RESERVED_PATIENCE
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Holds `key` against the server's and the owner's caps while its
    /// sandbox is created, forked or restored; a live sandbox of that key is
    /// handed back in the reservation instead. While another call holds the
    /// key (creating or restoring that same sandbox), this one waits for it,
    /// boundedly, and then finds what that call made.
    async fn reserve<'a>(
        &'a self,
        key: &'a str,
        claim: Claim,
        caps: &OwnerCaps,
    ) -> Result<Reservation<'a>, SandboxError> {
        let started = std::time::Instant::now();
        loop {
            if let Some(reservation) = self.try_reserve(key, claim.clone(), caps)? {
                return Ok(reservation);
            }
            if started.elapsed() >= RESERVED_PATIENCE {
                let id = claim.owner.id_of(key).unwrap_or(key);
                return Err(SandboxError::InvalidArgument(format!(
                    "sandbox '{id}' has been being created or restored by another call for {} s; try again once that call has finished",
                    RESERVED_PATIENCE.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// [`Self::reserve`] without waiting: `None` while another call holds `key`.
    fn try_reserve<'a>(
        &'a self,
        key: &'a str,
        claim: Claim,
        caps: &OwnerCaps,
    ) -> Result<Option<Reservation<'a>>, SandboxError> {
        if self.stopping.is_cancelled() {
            return Err(SandboxError::ShuttingDown);
        }
        let mut slots = lock(&self.slots);
        if let Some(existing) = slots.live.get(key) {
            return Ok(Some(Reservation {
                slots: &self.slots,
                key,
                existing: Some(existing.clone()),
            }));
        }
        if slots.reserved.contains_key(key) {
            return Ok(None);
        }
        if slots.live.len() + slots.reserved.len() >= self.settings.max_sandboxes {
            return Err(SandboxError::TooManySandboxes(self.settings.max_sandboxes));
        }
        slots.check_owner_caps(&claim, caps)?;
        slots.reserved.insert(key.to_owned(), claim);
        Ok(Some(Reservation {
            slots: &self.slots,
            key,
            existing: None,
        }))
    }

    /// `owner`'s sandboxes saved when the server last stopped, not restored
    /// yet, by the ids it knows them by.
    pub fn saved(&self, owner: &Owner) -> Vec<SavedSandbox> {
        self.backends
            .iter()
            .flat_map(|b| b.saved())
            .filter_map(|mut saved| {
                saved.session_id = owner.id_of(&saved.session_id)?.to_owned();
                Some(saved)
            })
            .collect()
    }

    /// Saves every sandbox that can be saved for the next start, and closes
    /// the rest (at shutdown).
    pub async fn close_all(&self) {
        // Nothing new starts; creations and restores under way give up, and
        // forks and idle saves under way are waited for (boundedly), so that
        // every sandbox is either live here or already saved.
        self.stopping.cancel();
        let started = std::time::Instant::now();
        while !lock(&self.slots).reserved.is_empty() && started.elapsed() < STOP_PATIENCE {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let all: Vec<Arc<Sandbox>> = lock(&self.slots).live.drain().map(|(_, s)| s).collect();
        // One at a time: each save holds a copy of its interpreter's memory.
        for sandbox in &all {
            sandbox.save().await;
        }
        futures::future::join_all(all.iter().map(|s| s.shut())).await;
    }

    /// Closes sandboxes that have been idle longer than the idle timeout;
    /// returns their keys.
    pub async fn expire_idle(&self) -> Vec<String> {
        let Some(idle) = self.settings.idle_timeout else {
            return Vec::new();
        };
        let now = SystemTime::now();
        let expired: Vec<Arc<Sandbox>> = {
            let mut slots = lock(&self.slots);
            let ids: Vec<String> = slots
                .live
                .values()
                .filter(|s| !s.is_busy() && s.idle_deadline(idle) <= now)
                .map(|s| s.key.clone())
                .collect();
            let expired: Vec<Arc<Sandbox>> = ids
                .iter()
                .filter_map(|key| slots.live.remove(key))
                .collect();
            // Held while they are saved, so a call naming one meanwhile
            // waits for the save and restores it instead of finding nothing.
            for sandbox in &expired {
                let claim = Claim::of(&sandbox.owner, sandbox.backend, &sandbox.limits);
                slots.reserved.insert(sandbox.key.clone(), claim);
            }
            expired
        };
        for sandbox in &expired {
            tracing::info!(id = %sandbox.id, owner = sandbox.owner.name(), "releasing a sandbox left unused for {}s", idle.as_secs());
            // Saved when saving is on: a later call naming it brings it back.
            sandbox.save().await;
            sandbox.shut().await;
            lock(&self.slots).reserved.remove(&sandbox.key);
        }
        expired.into_iter().map(|s| s.key.clone()).collect()
    }

    /// Runs [`SandboxManager::expire_idle`] periodically until `stop` is cancelled.
    pub fn spawn_reaper(self: &Arc<Self>, stop: CancellationToken) {
        let Some(idle) = self.settings.idle_timeout else {
            return;
        };
        let period = (idle / 4).clamp(Duration::from_secs(1), Duration::from_secs(30));
        let manager = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(period) => {}
                }
                let Some(manager) = manager.upgrade() else {
                    return;
                };
                manager.expire_idle().await;
            }
        });
    }
}

impl Slots {
    /// Refuses a claim that would take its owner over one of `caps`.
    fn check_owner_caps(&self, claim: &Claim, caps: &OwnerCaps) -> Result<(), SandboxError> {
        let held: Vec<Claim> = self
            .live
            .values()
            .filter(|s| s.owner == claim.owner)
            .map(|s| Claim::of(&s.owner, s.backend, &s.limits))
            .chain(
                self.reserved
                    .values()
                    .filter(|c| c.owner == claim.owner)
                    .cloned(),
            )
            .collect();
        if let Some(max) = caps.max_sandboxes
            && held.len() >= max
        {
            return Err(SandboxError::OverOwnerCap {
                what: format!("you already hold {} sandboxes", held.len()),
                limit: format!("{max} sandboxes"),
            });
        }
        let memory: u64 = held.iter().map(|c| c.memory_bytes).sum();
        if let Some(max) = caps.max_memory_bytes
            && memory.saturating_add(claim.memory_bytes) > max
        {
            return Err(SandboxError::OverOwnerCap {
                what: format!(
                    "a sandbox of {} MiB of memory beside the {} MiB your sandboxes have",
                    claim.memory_bytes >> 20,
                    memory >> 20
                ),
                limit: format!("{} MiB in all (ask for less with memory_mb)", max >> 20),
            });
        }
        let disk: u64 = held.iter().map(|c| c.disk_bytes).sum();
        if let Some(max) = caps.max_disk_bytes
            && disk.saturating_add(claim.disk_bytes) > max
        {
            return Err(SandboxError::OverOwnerCap {
                what: format!(
                    "a sandbox with a disk quota of {} MiB beside the {} MiB of your sandboxes",
                    claim.disk_bytes >> 20,
                    disk >> 20
                ),
                limit: format!("{} MiB of disk in all", max >> 20),
            });
        }
        Ok(())
    }
}

/// An id held against the sandbox cap while its sandbox is being created.
struct Reservation<'a> {
    slots: &'a Mutex<Slots>,
    key: &'a str,
    /// The live sandbox of that id, when there was one (nothing is held).
    existing: Option<Arc<Sandbox>>,
}

impl Reservation<'_> {
    /// Puts the created sandbox in place of the reservation, in one step.
    fn fulfil(self, sandbox: Arc<Sandbox>) {
        let mut slots = lock(self.slots);
        slots.reserved.remove(self.key);
        slots.live.insert(self.key.to_owned(), sandbox);
        drop(slots);
        std::mem::forget(self);
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.existing.is_none() {
            lock(self.slots).reserved.remove(self.key);
        }
    }
}

#[cfg(test)]
mod tests;
