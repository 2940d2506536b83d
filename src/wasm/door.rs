//! The host side of the quota gates' door (see [`super::quota_gate`]): the
//! questions are answered by the guest's state; a write to standard output
//! or error offered through it is taken straight from guest memory.

use wasmtime::{Caller, Extern};

use super::guest_state::GuestState;
use super::quota_gate::WRITE_STDIO;

/// WASI's `EFAULT`: an iovec points outside guest memory.
const EFAULT: i32 = 21;
/// WASI's `ENOTSUP`: not taken here; the gate goes on to the real call.
const ENOTSUP: i32 = 58;
/// Most iovecs one write may carry (POSIX's usual `IOV_MAX`).
const MAX_IOVECS: u32 = 1024;
/// Most bytes one write through the door may carry; a larger write goes the
/// ordinary way, which writes its first buffer and reports a short write.
/// (The iovecs of one `writev` may all point at the same large buffer.)
const MAX_BYTES: u64 = 1 << 20;

/// Answers one call through the door.
pub(crate) fn answer(caller: &mut Caller<'_, GuestState>, fd: i32, offset: i64, len: i64) -> i32 {
    if offset == WRITE_STDIO {
        write_stdio(caller, fd, len)
    } else {
        caller.data_mut().answer_gate(fd, offset, len)
    }
}

/// Writes the iovecs at `packed` (address in the high half, count in the
/// low) to the guest's stdout or stderr; any refusal sends the gate on to the
/// real `fd_write`.
fn write_stdio(caller: &mut Caller<'_, GuestState>, fd: i32, packed: i64) -> i32 {
    let Some(output) = caller.data().stdio_output(fd) else {
        return ENOTSUP;
    };
    let Some(Extern::Memory(memory)) = caller.get_export("memory") else {
        return ENOTSUP;
    };
    let (iovs, count) = ((packed as u64 >> 32) as u32, packed as u32);
    if count > MAX_IOVECS {
        return ENOTSUP;
    }
    let data = memory.data(&caller);
    let mut gathered: Vec<&[u8]> = Vec::with_capacity(count as usize);
    let mut total = 0u64;
    for i in 0..count {
        let Some(iovec) = slice(data, iovs as u64 + 8 * i as u64, 8) else {
            return EFAULT;
        };
        let buf = u32::from_le_bytes([iovec[0], iovec[1], iovec[2], iovec[3]]);
        let len = u32::from_le_bytes([iovec[4], iovec[5], iovec[6], iovec[7]]);
        let Some(bytes) = slice(data, u64::from(buf), u64::from(len)) else {
            return EFAULT;
        };
        total += u64::from(len);
        if total > MAX_BYTES {
            return ENOTSUP;
        }
        gathered.push(bytes);
    }
    for piece in gathered {
        output.write(piece);
    }
    0
}

/// `len` bytes of guest memory from `at`, when they are all inside it.
fn slice(data: &[u8], at: u64, len: u64) -> Option<&[u8]> {
    let start = usize::try_from(at).ok()?;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    data.get(start..end)
}
