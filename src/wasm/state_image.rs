//! [`StateImage`]: the whole guest-side state of a turn-driven instance
//! between two turns (its linear memory and its mutable globals), copied out
//! of one instance and into another of the same module. A fork copies it
//! into a new sandbox; a saved sandbox keeps it on disk.
//!
//! The module a sandbox runs exports every mutable global under wizer's
//! names (`__wizer_global_N`: [`super::preinit`] instruments the snapshot),
//! so nothing else of the instance's state is hidden from the host. What is
//! not carried: the WASI context (open descriptors beyond the preopens are
//! the new instance's own, i.e. none).

use wasmtime::{Instance, Store};

pub(crate) use super::globals::GlobalValue;
use super::globals::{capture_globals, restore_globals};
use super::interpreter::GuestState;
use super::state_error::StateError;

/// The page size of a 32-bit linear memory.
const PAGE: usize = 64 << 10;

/// An instance's state between turns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StateImage {
    /// Its linear memory, every byte.
    pub memory: Vec<u8>,
    /// Its mutable globals, by export name, in export order.
    pub globals: Vec<(String, GlobalValue)>,
    /// Files and directories the program held open (not carried: a copy
    /// starts with none).
    pub open_files: usize,
}

impl StateImage {
    /// Copies the state of `instance`, which must be between two turns.
    pub(crate) fn capture(
        store: &mut Store<GuestState>,
        instance: &Instance,
    ) -> Result<Self, StateError> {
        let memory = instance
            .get_memory(&mut *store, "memory")
            .ok_or(StateError::NoMemory)?;
        let globals = capture_globals(store, instance)?;
        Ok(Self {
            memory: memory.data(&*store).to_vec(),
            globals,
            open_files: store.data_mut().open_files(),
        })
    }

    /// Makes `instance` (just instantiated from the same module) hold this
    /// state: its memory grown to this size and overwritten, its globals set.
    pub(crate) fn restore(
        &self,
        store: &mut Store<GuestState>,
        instance: &Instance,
    ) -> Result<(), StateError> {
        let memory = instance
            .get_memory(&mut *store, "memory")
            .ok_or(StateError::NoMemory)?;
        let have = memory.data_size(&*store);
        if !self.memory.len().is_multiple_of(PAGE) || self.memory.len() < have {
            return Err(StateError::DoesNotFit {
                saved: self.memory.len(),
                have,
            });
        }
        let pages = ((self.memory.len() - have) / PAGE) as u64;
        if pages > 0 {
            memory
                .grow(&mut *store, pages)
                .map_err(|e| StateError::CannotGrow(e.to_string()))?;
        }
        memory.data_mut(&mut *store).copy_from_slice(&self.memory);
        restore_globals(store, instance, &self.globals)
    }

    /// The image as bytes: a header, the globals, then the memory.
    #[cfg(test)]
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.memory.len() + 64 * self.globals.len() + 64);
        self.write_to(&mut out).expect("writing to memory");
        out
    }

    /// Writes the image (as [`StateImage::to_bytes`] lays it out) to `out`,
    /// the memory in 64 KiB writes (so a writer can skip pages of zeros).
    pub(crate) fn write_to(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        out.write_all(MAGIC)?;
        out.write_all(&(self.globals.len() as u32).to_le_bytes())?;
        for (name, value) in &self.globals {
            out.write_all(&(name.len() as u32).to_le_bytes())?;
            out.write_all(name.as_bytes())?;
            let (kind, bits) = match *value {
                GlobalValue::I32(v) => (0u8, v as u32 as u64),
                GlobalValue::I64(v) => (1, v as u64),
                GlobalValue::F32(v) => (2, u64::from(v)),
                GlobalValue::F64(v) => (3, v),
            };
            out.write_all(&[kind])?;
            out.write_all(&bits.to_le_bytes())?;
        }
        out.write_all(&(self.memory.len() as u64).to_le_bytes())?;
        for page in self.memory.chunks(PAGE) {
            out.write_all(page)?;
        }
        Ok(())
    }

    /// Reads an image written by [`StateImage::write_to`].
    pub(crate) fn from_bytes(bytes: &[u8]) -> Result<Self, StateError> {
        let mut reader = Reader(bytes);
        if reader.take(MAGIC.len())? != MAGIC {
            return Err(StateError::Damaged("not a saved interpreter state"));
        }
        let count = reader.u32()? as usize;
        if count > 1 << 16 {
            return Err(StateError::Damaged("too many globals"));
        }
        let mut globals = Vec::with_capacity(count);
        for _ in 0..count {
            let len = reader.u32()? as usize;
            let name = std::str::from_utf8(reader.take(len)?)
                .map_err(|_| StateError::Damaged("a global's name is not UTF-8"))?
                .to_owned();
            let kind = reader.take(1)?[0];
            let bits = reader.u64()?;
            let value = match kind {
                0 => GlobalValue::I32(bits as u32 as i32),
                1 => GlobalValue::I64(bits as i64),
                2 => GlobalValue::F32(bits as u32),
                3 => GlobalValue::F64(bits),
                _ => return Err(StateError::UnknownKind(kind)),
            };
            globals.push((name, value));
        }
        let len =
            usize::try_from(reader.u64()?).map_err(|_| StateError::Damaged("memory too large"))?;
        let memory = reader.take(len)?.to_vec();
        if !reader.0.is_empty() {
            return Err(StateError::Damaged("trailing bytes after the memory"));
        }
        Ok(Self {
            memory,
            globals,
            open_files: 0,
        })
    }
}

const MAGIC: &[u8] = b"mcp-code-sandbox state 1\n";

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], StateError> {
        if self.0.len() < n {
            return Err(StateError::Damaged("the saved state is cut short"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u32(&mut self) -> Result<u32, StateError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().unwrap_or_default(),
        ))
    }

    fn u64(&mut self) -> Result<u64, StateError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().unwrap_or_default(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_round_trips_through_bytes_and_a_cut_one_is_refused() {
        let image = StateImage {
            memory: vec![7; PAGE * 2],
            globals: vec![
                ("__wizer_global_0".into(), GlobalValue::I32(-5)),
                ("__wizer_global_1".into(), GlobalValue::F64(42)),
            ],
            open_files: 0,
        };
        let bytes = image.to_bytes();
        assert_eq!(StateImage::from_bytes(&bytes).unwrap(), image);
        assert!(matches!(
            StateImage::from_bytes(&bytes[..bytes.len() - 1]),
            Err(StateError::Damaged("the saved state is cut short"))
        ));
        assert!(matches!(
            StateImage::from_bytes(b"something else entirely, and longer than the magic"),
            Err(StateError::Damaged("not a saved interpreter state"))
        ));
    }
}
