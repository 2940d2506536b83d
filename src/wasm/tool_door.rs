//! The wasm side of the guest's door to the host (see [`crate::door`]): the
//! runtime's `host.call(ptr, len, out_ptr_ptr, out_len_ptr) -> i32` import.
//! The request frame is read out of guest memory (only once the armed
//! execution admits its length); the answer is written into memory the guest
//! allocates with its `host_alloc` export, its address and length stored at
//! `out_ptr_ptr` and `out_len_ptr`. It returns 0 when answered, -1 when no
//! execution is armed (the guest raises `ConnectionRefusedError`: no host is
//! bound), -2 when the frame or the answer does not fit guest memory.
//!
//! The call is asynchronous: while the host works the guest's task is parked
//! on it, burning no fuel, and the execution's timeout or a cancel stop it
//! like any guest code (the task is aborted, which drops the work).
//!
//! One frame is the sandbox's own, not the door's: [`CPU_TIME`] is answered
//! at once, armed or not, with the CPU time the guest has burned since it
//! started (decimal nanoseconds), which WASI has no clock for; the guest's
//! `time.process_time()` reads it. It is not a tool call and counts toward no
//! limit of the door's.

use wasmtime::{AsContext, Caller, Extern, Linker};

use super::guest_state::GuestState;
use super::runtime::DoorImport;
use crate::door::frames::MAX_REQUEST_BYTES;

/// No host is bound (no execution is armed).
const NO_HOST: i32 = -1;
/// The frame or the answer does not fit guest memory.
const HOST_FAULT: i32 = -2;
/// The frame asking for the guest's CPU time.
const CPU_TIME: &[u8] = b"cpu_time";

/// Defines the door import in `linker`.
pub(super) fn define(linker: &mut Linker<GuestState>, import: &DoorImport) -> wasmtime::Result<()> {
    linker.func_wrap_async(
        &import.module,
        &import.name,
        |mut caller: Caller<'_, GuestState>, (ptr, len, out_ptr, out_len): (i32, i32, i32, i32)| {
            Box::new(async move { call(&mut caller, ptr, len, out_ptr, out_len).await })
        },
    )?;
    Ok(())
}

/// One call through the door.
async fn call(
    caller: &mut Caller<'_, GuestState>,
    ptr: i32,
    len: i32,
    out_ptr: i32,
    out_len: i32,
) -> wasmtime::Result<i32> {
    let (ptr, len) = (ptr as u32 as usize, len as u32 as usize);
    let (out_ptr, out_len) = (out_ptr as u32 as usize, out_len as u32 as usize);
    let Some(Extern::Memory(memory)) = caller.get_export("memory") else {
        return Ok(HOST_FAULT);
    };
    let Some(Extern::Func(alloc)) = caller.get_export("host_alloc") else {
        return Ok(HOST_FAULT);
    };
    let size = memory.data_size(caller.as_context());
    let fits = |at: usize, n: usize| at.checked_add(n).is_some_and(|end| end <= size);
    if !fits(ptr, len) || !fits(out_ptr, 4) || !fits(out_len, 4) {
        return Ok(HOST_FAULT);
    }
    if memory.data(caller.as_context())[ptr..ptr + len] == *CPU_TIME {
        let burned = caller.data().cpu_burned().as_nanos().to_string();
        return hand_back(caller, memory, alloc, burned.as_bytes(), out_ptr, out_len).await;
    }
    let slot = caller.data().door_slot();
    if !slot.is_armed() {
        return Ok(NO_HOST);
    }
    // Copied before the wait, so guest memory is not held; a frame over the
    // size cap is not copied at all (the session refuses it by its length).
    let frame = if len <= MAX_REQUEST_BYTES {
        memory.data(caller.as_context())[ptr..ptr + len].to_vec()
    } else {
        Vec::new()
    };
    let Some(answer) = slot.answer(len, move || frame).await else {
        return Ok(NO_HOST);
    };
    hand_back(caller, memory, alloc, &answer, out_ptr, out_len).await
}

/// Writes `answer` into memory the guest allocates, its address and length
/// at `out_ptr` and `out_len`.
async fn hand_back(
    caller: &mut Caller<'_, GuestState>,
    memory: wasmtime::Memory,
    alloc: wasmtime::Func,
    answer: &[u8],
    out_ptr: usize,
    out_len: usize,
) -> wasmtime::Result<i32> {
    let Ok(answer_len) = i32::try_from(answer.len()) else {
        return Ok(HOST_FAULT);
    };
    let alloc = alloc.typed::<i32, i32>(caller.as_context())?;
    let at = alloc.call_async(&mut *caller, answer_len).await? as u32 as usize;
    let size = memory.data_size(caller.as_context());
    if at == 0 || at.checked_add(answer.len()).is_none_or(|end| end > size) {
        return Ok(HOST_FAULT);
    }
    memory.write(&mut *caller, at, answer)?;
    memory.write(&mut *caller, out_ptr, &(at as u32).to_le_bytes())?;
    memory.write(&mut *caller, out_len, &(answer.len() as u32).to_le_bytes())?;
    Ok(0)
}
