//! [`StagingRoom`]: what an install may still write into a sandbox while
//! it stages wheels.
//!
//! Staging happens inside the sandbox's directory, so it counts against the
//! sandbox's disk quota (bytes, and files and directories) from the first
//! byte, and against the cap on what one install may unpack. Every inflated
//! chunk, file and directory is charged before it is written, each file and
//! directory with a whole block besides (a directory takes one, and a file
//! holds its bytes rounded up to whole blocks, so a wheel of ten thousand
//! one-byte files is charged the 40 MB it holds, not 10 KB), so an install
//! that would not fit stops at once, having written at most one chunk past
//! nothing; it also stops there when the install is cancelled or out of time.

use super::stop::InstallStop;
use crate::sandbox::human_bytes;

/// Why staging stopped.
#[derive(Debug, thiserror::Error)]
pub enum NoRoom {
    /// The sandbox's disk quota (bytes).
    #[error(
        "the packages unpack to more than the {free} left under the sandbox's disk quota of {quota}; nothing was installed. Delete files from the sandbox or install fewer packages"
    )]
    Quota {
        /// What was free when the install started, in words.
        free: String,
        /// The quota, in words.
        quota: String,
    },
    /// The sandbox's limit on files and directories.
    #[error(
        "the packages hold more files and directories than the {free} the sandbox may still hold (its disk quota allows {limit}); nothing was installed. Delete files from the sandbox or install fewer packages"
    )]
    Entries {
        /// Entries free when the install started.
        free: u64,
        /// The limit.
        limit: u64,
    },
    /// The cap on one install.
    #[error(
        "the packages unpack to more than {limit}, the most one install may write; nothing was installed. Install fewer packages at a time"
    )]
    InstallCap {
        /// The cap, in words.
        limit: String,
    },
    /// The install was cancelled or ran out of time.
    #[error("the install was stopped")]
    Stopped,
}

/// Frees room in the sandbox for staging: asked for (bytes, entries), it
/// answers what it freed (the server's own files giving way).
pub type Reclaim = Box<dyn FnMut(u64, u64) -> (u64, u64) + Send>;

/// The room left for staging.
pub struct StagingRoom {
    /// Bytes the quota (and the server's budget) leave.
    quota_left: u64,
    /// Bytes the cap on one install leaves.
    cap_left: u64,
    bytes_free_at_start: u64,
    entries_left: u64,
    entries_free_at_start: u64,
    block: u64,
    quota_bytes: u64,
    quota_entries: u64,
    install_cap: u64,
    reclaim: Option<Reclaim>,
    stop: InstallStop,
}

impl std::fmt::Debug for StagingRoom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StagingRoom")
            .field("quota_left", &self.quota_left)
            .field("cap_left", &self.cap_left)
            .field("entries_left", &self.entries_left)
            .finish_non_exhaustive()
    }
}

/// What a sandbox's quota leaves free when an install starts.
#[derive(Clone, Copy, Debug)]
pub struct Free {
    /// Bytes below the byte quota.
    pub bytes: u64,
    /// Entries below the entry limit.
    pub entries: u64,
    /// The byte quota.
    pub quota_bytes: u64,
    /// The entry limit.
    pub quota_entries: u64,
    /// The file system's block: what each file or directory takes besides
    /// its bytes, at most.
    pub block: u64,
}

impl StagingRoom {
    /// The room an install has: what the quota leaves `free`, at most
    /// `install_cap` bytes, until `stop` fires.
    pub fn new(free: Free, install_cap: u64, stop: InstallStop) -> Self {
        Self {
            quota_left: free.bytes,
            cap_left: install_cap,
            bytes_free_at_start: free.bytes,
            entries_left: free.entries,
            entries_free_at_start: free.entries,
            block: free.block,
            quota_bytes: free.quota_bytes,
            quota_entries: free.quota_entries,
            install_cap,
            reclaim: None,
            stop,
        }
    }

    /// When the quota is short, `reclaim` is asked to free room first (the
    /// server's own files in the sandbox give way to the install).
    pub fn reclaiming(mut self, reclaim: Reclaim) -> Self {
        self.reclaim = Some(reclaim);
        self
    }

    /// Room without limits (for tests of the unpacker alone).
    #[cfg(test)]
    pub fn unlimited() -> Self {
        let free = Free {
            bytes: u64::MAX,
            entries: u64::MAX,
            quota_bytes: u64::MAX,
            quota_entries: u64::MAX,
            block: 0,
        };
        Self::new(free, u64::MAX, InstallStop::never())
    }

    /// Asks the reclaimer for what is missing below the quota.
    fn reclaim_short(&mut self, bytes: u64, entries: u64) {
        let short_bytes = bytes.saturating_sub(self.quota_left);
        let short_entries = entries.saturating_sub(self.entries_left);
        if short_bytes == 0 && short_entries == 0 {
            return;
        }
        if let Some(reclaim) = self.reclaim.as_mut() {
            let (freed_bytes, freed_entries) = reclaim(short_bytes, short_entries);
            self.quota_left = self.quota_left.saturating_add(freed_bytes);
            self.entries_left = self.entries_left.saturating_add(freed_entries);
        }
    }

    /// Charges `n` bytes about to be written.
    pub fn take_bytes(&mut self, n: u64) -> Result<(), NoRoom> {
        self.check_stop()?;
        if n > self.cap_left {
            self.cap_left = 0;
            return Err(NoRoom::InstallCap {
                limit: human_bytes(self.install_cap),
            });
        }
        self.reclaim_short(n, 0);
        if n > self.quota_left {
            self.quota_left = 0;
            return Err(NoRoom::Quota {
                free: human_bytes(self.bytes_free_at_start),
                quota: human_bytes(self.quota_bytes),
            });
        }
        self.quota_left -= n;
        self.cap_left -= n;
        Ok(())
    }

    /// Charges `n` files or directories about to be created, and a block
    /// of bytes for each.
    pub fn take_entries(&mut self, n: u64) -> Result<(), NoRoom> {
        self.check_stop()?;
        self.reclaim_short(0, n);
        if n > self.entries_left {
            self.entries_left = 0;
            return Err(NoRoom::Entries {
                free: self.entries_free_at_start,
                limit: self.quota_entries,
            });
        }
        self.take_bytes(n.saturating_mul(self.block))?;
        self.entries_left -= n;
        Ok(())
    }

    /// Charges an optional write (`bytes` in `entries` new files and
    /// directories) when the room has it, and answers whether it did; a
    /// write that does not fit leaves the room as it was, so what must be
    /// written can still be. [`NoRoom::Stopped`] when the install must stop.
    pub fn take_if_room(&mut self, bytes: u64, entries: u64) -> Result<bool, NoRoom> {
        self.check_stop()?;
        let total = entries.saturating_mul(self.block).saturating_add(bytes);
        self.reclaim_short(total, entries);
        if total > self.cap_left || total > self.quota_left || entries > self.entries_left {
            return Ok(false);
        }
        self.quota_left -= total;
        self.cap_left -= total;
        self.entries_left -= entries;
        Ok(true)
    }

    /// [`NoRoom::Stopped`] when the install must stop.
    pub fn check_stop(&self) -> Result<(), NoRoom> {
        self.stop.check().map_err(|_| NoRoom::Stopped)
    }

    /// Its stop condition.
    pub fn stop(&self) -> &InstallStop {
        &self.stop
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_util::sync::CancellationToken;

    fn free(bytes: u64, entries: u64) -> Free {
        Free {
            bytes,
            entries,
            quota_bytes: 4 << 20,
            quota_entries: 100,
            block: 4096,
        }
    }

    #[test]
    fn bytes_and_entries_are_charged_until_they_run_out() {
        let mut room = StagingRoom::new(free(9000, 2), u64::MAX, InstallStop::never());
        room.take_bytes(600).unwrap();
        room.take_bytes(400).unwrap();
        room.take_entries(1).unwrap();
        assert!(
            matches!(room.take_entries(1), Err(NoRoom::Quota { .. })),
            "an entry takes a block: 4096 bytes were not left"
        );
        let mut room = StagingRoom::new(free(1000, 2), u64::MAX, InstallStop::never());
        room.take_bytes(1000).unwrap();
        let err = room.take_bytes(1).unwrap_err();
        assert!(matches!(err, NoRoom::Quota { .. }), "{err}");
        assert!(err.to_string().contains("disk quota of 4 MiB"), "{err}");
        let mut room = StagingRoom::new(free(1 << 20, 2), u64::MAX, InstallStop::never());
        room.take_entries(2).unwrap();
        assert!(matches!(room.take_entries(1), Err(NoRoom::Entries { .. })));
    }

    #[test]
    fn the_install_cap_binds_when_it_is_lower() {
        let mut room = StagingRoom::new(free(1 << 30, 100), 10, InstallStop::never());
        let err = room.take_bytes(11).unwrap_err();
        assert!(matches!(err, NoRoom::InstallCap { .. }), "{err}");
    }

    #[test]
    fn a_stopped_install_has_no_room() {
        let token = CancellationToken::new();
        let mut room = StagingRoom::new(
            free(1000, 10),
            u64::MAX,
            InstallStop::new(token.clone(), std::time::Duration::from_secs(60)),
        );
        room.take_bytes(1).unwrap();
        token.cancel();
        assert!(matches!(room.take_bytes(1), Err(NoRoom::Stopped)));
        assert!(matches!(room.take_entries(1), Err(NoRoom::Stopped)));
    }
}
