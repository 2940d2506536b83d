//! The gates themselves: which WASI imports get one ([`gate_for`]), the
//! questions they ask the host through the [`Door`] (the `ASK_*` offsets),
//! and the code of each gate ([`gate_function`]), which the weaver appends
//! to the module.

use wasm_encoder::{BlockType, Function, Instruction, MemArg, ValType};

use super::weave_error::WeaveError;

/// The import the gates ask their questions through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Door {
    /// `fd_allocate(fd, offset, len) -> errno`.
    FdAllocate,
    /// `fd_advise(fd, offset, len, advice) -> errno`, for modules that do not
    /// import `fd_allocate`.
    FdAdvise,
}

impl Door {
    /// The WASI function's name.
    pub fn import_name(self) -> &'static str {
        match self {
            Self::FdAllocate => "fd_allocate",
            Self::FdAdvise => "fd_advise",
        }
    }

    /// The door a module with these WASI imports uses: `fd_allocate` when it
    /// has it, else `fd_advise`.
    pub fn among<'a>(wasi_imports: impl IntoIterator<Item = &'a str>) -> Option<Self> {
        let mut door = None;
        for name in wasi_imports {
            match name {
                "fd_allocate" => return Some(Self::FdAllocate),
                "fd_advise" => door = Some(Self::FdAdvise),
                _ => {}
            }
        }
        door
    }
}

/// Offset marking "may these bytes be written".
pub const ASK_WRITE: i64 = -1;
/// Offset marking "may an entry be created".
pub const ASK_CREATE: i64 = -2;
/// Offset marking "may one more file or directory be opened".
pub const ASK_OPEN: i64 = -3;
/// Offset marking "this descriptor is being closed".
pub const NOTE_CLOSE: i64 = -4;
/// Offset marking "write these iovecs to standard output or error for me"
/// (`len` packs the iovec array's address and count); any answer but 0 sends
/// the gate on to the real `fd_write`.
pub const WRITE_STDIO: i64 = -5;

pub(super) const WASI: &str = "wasi_snapshot_preview1";
/// WASI preview 1's `O_CREAT` bit of `path_open`'s `oflags`.
const OFLAGS_CREAT: i32 = 1;
/// WASI preview 1's `O_EXCL` bit of `path_open`'s `oflags`.
const OFLAGS_EXCL: i32 = 4;
/// WASI preview 1's `ENOENT`.
const ERRNO_NOENT: i32 = 44;
/// WASI preview 1's `EBADF`.
pub(super) const ERRNO_BADF: i32 = 8;
/// Bytes booked for a new directory or link: one file-system block.
const ENTRY_BLOCK: i64 = 4096;

/// Which imports get a gate, and how the gate asks.
#[derive(Clone, Copy)]
pub(super) enum Gate {
    /// `fd_write` / `fd_pwrite`: sum the iovec lengths and ask to write;
    /// `fd_write` to fd 1 or 2 first offers the write to the host directly.
    Write {
        iovs_param: u32,
        count_param: u32,
        stdio_shortcut: bool,
    },
    /// `path_open`: ask to open; with `O_CREAT`, open an existing file or
    /// ask to create.
    Open,
    /// An entry-creating call: ask to create under the descriptor parameter.
    Create { fd_param: u32 },
    /// `fd_close`: tell, then go on whatever the answer.
    Close,
    /// `fd_renumber(from, to)`: refused (`EBADF`) when either is stdin,
    /// stdout or stderr; otherwise both numbers stop naming what they named
    /// (`to` takes `from`'s file, `from` is freed): tell about both.
    Renumber,
    /// `poll_oneoff`: a lone relative clock wait becomes an absolute one (with
    /// the `clock_time_get` import at this index), which wasmtime-wasi waits
    /// for asynchronously; a relative one it sleeps on the guest's thread,
    /// where no time limit can stop it and other sandboxes' guests stall.
    Poll { clock_time_get: u32 },
}

pub(super) fn gate_for(name: &str) -> Option<Gate> {
    Some(match name {
        "fd_write" => Gate::Write {
            iovs_param: 1,
            count_param: 2,
            stdio_shortcut: true,
        },
        "fd_pwrite" => Gate::Write {
            iovs_param: 1,
            count_param: 2,
            stdio_shortcut: false,
        },
        "path_open" => Gate::Open,
        "path_create_directory" => Gate::Create { fd_param: 0 },
        "path_symlink" => Gate::Create { fd_param: 2 },
        "path_link" => Gate::Create { fd_param: 4 },
        "fd_close" => Gate::Close,
        "fd_renumber" => Gate::Renumber,
        "poll_oneoff" => Gate::Poll {
            clock_time_get: u32::MAX,
        },
        _ => return None,
    })
}

/// A gated import: its function index, name, type index and gate.
pub(super) struct Target {
    pub import: u32,
    pub name: String,
    pub ty: u32,
    pub gate: Gate,
}

/// `fn gate(params...) -> errno { let e = ask(...); if e != 0 { return e } import(params...) }`
/// for `target`, whose import takes `params`; a parameter the gate reads
/// that is not an i32 refuses the import's type.
pub(super) fn gate_function(
    target: &Target,
    (allocate, door): (u32, Door),
    params: &[ValType],
) -> Result<Function, WeaveError> {
    let (import, gate) = (target.import, target.gate);
    let n = params.len() as u32;
    let param_i32 = |i: u32| -> Result<(), WeaveError> {
        match params.get(i as usize) {
            Some(ValType::I32) => Ok(()),
            _ => Err(WeaveError::WrongType(target.name.clone())),
        }
    };
    // Locals after the parameters: index, total (i64), errno.
    let (index, total, errno) = (n, n + 1, n + 2);
    let mut f = Function::new([(1, ValType::I32), (1, ValType::I64), (1, ValType::I32)]);
    let ask = |f: &mut Function, fd: u32, offset: i64, len: Instruction<'static>| {
        f.instruction(&Instruction::LocalGet(fd));
        f.instruction(&Instruction::I64Const(offset));
        f.instruction(&len);
        if door == Door::FdAdvise {
            f.instruction(&Instruction::I32Const(0));
        }
        f.instruction(&Instruction::Call(allocate));
    };
    match gate {
        Gate::Write {
            iovs_param,
            count_param,
            stdio_shortcut,
        } => {
            param_i32(0)?;
            param_i32(iovs_param)?;
            param_i32(count_param)?;
            // total = sum of iovs[i].buf_len (an iovec is {buf: u32, buf_len: u32})
            f.instruction(&Instruction::Block(BlockType::Empty));
            f.instruction(&Instruction::Loop(BlockType::Empty));
            f.instruction(&Instruction::LocalGet(index));
            f.instruction(&Instruction::LocalGet(count_param));
            f.instruction(&Instruction::I32GeU);
            f.instruction(&Instruction::BrIf(1));
            f.instruction(&Instruction::LocalGet(total));
            f.instruction(&Instruction::LocalGet(iovs_param));
            f.instruction(&Instruction::LocalGet(index));
            f.instruction(&Instruction::I32Const(8));
            f.instruction(&Instruction::I32Mul);
            f.instruction(&Instruction::I32Add);
            f.instruction(&Instruction::I64Load32U(MemArg {
                offset: 4,
                align: 2,
                memory_index: 0,
            }));
            f.instruction(&Instruction::I64Add);
            f.instruction(&Instruction::LocalSet(total));
            f.instruction(&Instruction::LocalGet(index));
            f.instruction(&Instruction::I32Const(1));
            f.instruction(&Instruction::I32Add);
            f.instruction(&Instruction::LocalSet(index));
            f.instruction(&Instruction::Br(0));
            f.instruction(&Instruction::End);
            f.instruction(&Instruction::End);
            if stdio_shortcut {
                param_i32(3)?;
                stdio_shortcut_code(
                    &mut f,
                    allocate,
                    door,
                    iovs_param,
                    count_param,
                    total,
                    errno,
                );
            }
            ask(&mut f, 0, ASK_WRITE, Instruction::LocalGet(total));
            f.instruction(&Instruction::LocalSet(errno));
        }
        Gate::Open => {
            param_i32(0)?;
            param_i32(4)?;
            // errno = ask(dirfd, OPEN, 0); if errno { return errno }
            ask(&mut f, 0, ASK_OPEN, Instruction::I64Const(0));
            f.instruction(&Instruction::LocalSet(errno));
            return_if_errno(&mut f, errno);
            // if oflags & O_CREAT {
            f.instruction(&Instruction::LocalGet(4));
            f.instruction(&Instruction::I32Const(OFLAGS_CREAT));
            f.instruction(&Instruction::I32And);
            f.instruction(&Instruction::If(BlockType::Empty));
            //   if !(oflags & O_EXCL) {
            f.instruction(&Instruction::LocalGet(4));
            f.instruction(&Instruction::I32Const(OFLAGS_EXCL));
            f.instruction(&Instruction::I32And);
            f.instruction(&Instruction::I32Eqz);
            f.instruction(&Instruction::If(BlockType::Empty));
            //     errno = import(params with oflags & !O_CREAT)
            for i in 0..n {
                f.instruction(&Instruction::LocalGet(i));
                if i == 4 {
                    f.instruction(&Instruction::I32Const(!OFLAGS_CREAT));
                    f.instruction(&Instruction::I32And);
                }
            }
            f.instruction(&Instruction::Call(import));
            f.instruction(&Instruction::LocalSet(errno));
            //     if errno != ENOENT { return errno }  (0: an existing file, opened)
            f.instruction(&Instruction::LocalGet(errno));
            f.instruction(&Instruction::I32Const(ERRNO_NOENT));
            f.instruction(&Instruction::I32Ne);
            f.instruction(&Instruction::If(BlockType::Empty));
            f.instruction(&Instruction::LocalGet(errno));
            f.instruction(&Instruction::Return);
            f.instruction(&Instruction::End);
            f.instruction(&Instruction::End);
            //   errno = ask(dirfd, CREATE, 0) }  (a new file holds what is written to it)
            ask(&mut f, 0, ASK_CREATE, Instruction::I64Const(0));
            f.instruction(&Instruction::LocalSet(errno));
            f.instruction(&Instruction::End);
        }
        Gate::Create { fd_param } => {
            param_i32(fd_param)?;
            // A directory or a link may take a block of its own.
            ask(
                &mut f,
                fd_param,
                ASK_CREATE,
                Instruction::I64Const(ENTRY_BLOCK),
            );
            f.instruction(&Instruction::LocalSet(errno));
        }
        Gate::Close => {
            param_i32(0)?;
            ask(&mut f, 0, NOTE_CLOSE, Instruction::I64Const(0));
            f.instruction(&Instruction::Drop);
        }
        Gate::Renumber => {
            param_i32(0)?;
            param_i32(1)?;
            refuse_stdio_renumber(&mut f);
            for fd in [0, 1] {
                ask(&mut f, fd, NOTE_CLOSE, Instruction::I64Const(0));
                f.instruction(&Instruction::Drop);
            }
        }
        Gate::Poll { clock_time_get } => {
            for i in 0..4 {
                param_i32(i)?;
            }
            absolute_lone_clock_wait(&mut f, clock_time_get, index, total);
        }
    }
    return_if_errno(&mut f, errno);
    for i in 0..n {
        f.instruction(&Instruction::LocalGet(i));
    }
    f.instruction(&Instruction::Call(import));
    f.instruction(&Instruction::End);
    Ok(f)
}

/// `if fd is 1 or 2 { if door(fd, WRITE_STDIO, iovs << 32 | count) == 0 {
/// *nwritten = total; return 0 } }`: the host took the output itself.
fn stdio_shortcut_code(
    f: &mut Function,
    door_index: u32,
    door: Door,
    iovs_param: u32,
    count_param: u32,
    total: u32,
    errno: u32,
) {
    // (fd - 1) < 2, unsigned: fd is 1 or 2.
    f.instruction(&Instruction::LocalGet(0));
    f.instruction(&Instruction::I32Const(1));
    f.instruction(&Instruction::I32Sub);
    f.instruction(&Instruction::I32Const(2));
    f.instruction(&Instruction::I32LtU);
    f.instruction(&Instruction::If(BlockType::Empty));
    f.instruction(&Instruction::LocalGet(0));
    f.instruction(&Instruction::I64Const(WRITE_STDIO));
    f.instruction(&Instruction::LocalGet(iovs_param));
    f.instruction(&Instruction::I64ExtendI32U);
    f.instruction(&Instruction::I64Const(32));
    f.instruction(&Instruction::I64Shl);
    f.instruction(&Instruction::LocalGet(count_param));
    f.instruction(&Instruction::I64ExtendI32U);
    f.instruction(&Instruction::I64Or);
    if door == Door::FdAdvise {
        f.instruction(&Instruction::I32Const(0));
    }
    f.instruction(&Instruction::Call(door_index));
    f.instruction(&Instruction::LocalSet(errno));
    f.instruction(&Instruction::LocalGet(errno));
    f.instruction(&Instruction::I32Eqz);
    f.instruction(&Instruction::If(BlockType::Empty));
    // *nwritten = total (the fourth parameter points at it)
    f.instruction(&Instruction::LocalGet(3));
    f.instruction(&Instruction::LocalGet(total));
    f.instruction(&Instruction::I32WrapI64);
    f.instruction(&Instruction::I32Store(MemArg {
        offset: 0,
        align: 2,
        memory_index: 0,
    }));
    f.instruction(&Instruction::I32Const(0));
    f.instruction(&Instruction::Return);
    f.instruction(&Instruction::End);
    f.instruction(&Instruction::End);
}

/// Rewrites `poll_oneoff`'s subscriptions (parameter 0, count parameter 2)
/// when they are one relative clock wait: its timeout becomes now plus the
/// timeout (saturating), read with `clock_time_get` into the timeout field
/// itself, and the `ABSTIME` flag is set. `flags` (i32) and `timeout` (i64)
/// are scratch locals. A WASI subscription is 48 bytes: userdata at 0, tag at
/// 8 (0: clock), clock id at 16, timeout at 24, precision at 32, flags at 40.
fn absolute_lone_clock_wait(f: &mut Function, clock_time_get: u32, flags: u32, timeout: u32) {
    let at = |offset: u64, align: u32| MemArg {
        offset,
        align,
        memory_index: 0,
    };
    // if nsubscriptions == 1 && subs.tag == clock && !(subs.flags & ABSTIME) {
    f.instruction(&Instruction::LocalGet(2));
    f.instruction(&Instruction::I32Const(1));
    f.instruction(&Instruction::I32Eq);
    f.instruction(&Instruction::If(BlockType::Empty));
    f.instruction(&Instruction::LocalGet(0));
    f.instruction(&Instruction::I32Load8U(at(8, 0)));
    f.instruction(&Instruction::I32Eqz);
    f.instruction(&Instruction::If(BlockType::Empty));
    f.instruction(&Instruction::LocalGet(0));
    f.instruction(&Instruction::I32Load16U(at(40, 1)));
    f.instruction(&Instruction::LocalSet(flags));
    f.instruction(&Instruction::LocalGet(flags));
    f.instruction(&Instruction::I32Const(1));
    f.instruction(&Instruction::I32And);
    f.instruction(&Instruction::I32Eqz);
    f.instruction(&Instruction::If(BlockType::Empty));
    //   if subs.id > MONOTONIC { subs.id = MONOTONIC }: a CPU-time clock,
    //   which wasmtime-wasi cannot wait on asynchronously, waits as long on
    //   the monotonic one
    f.instruction(&Instruction::LocalGet(0));
    f.instruction(&Instruction::I32Load(at(16, 2)));
    f.instruction(&Instruction::I32Const(1));
    f.instruction(&Instruction::I32GtU);
    f.instruction(&Instruction::If(BlockType::Empty));
    f.instruction(&Instruction::LocalGet(0));
    f.instruction(&Instruction::I32Const(1));
    f.instruction(&Instruction::I32Store(at(16, 2)));
    f.instruction(&Instruction::End);
    //   timeout = subs.timeout
    f.instruction(&Instruction::LocalGet(0));
    f.instruction(&Instruction::I64Load(at(24, 3)));
    f.instruction(&Instruction::LocalSet(timeout));
    //   if clock_time_get(subs.id, 1, &subs.timeout) == 0 {
    f.instruction(&Instruction::LocalGet(0));
    f.instruction(&Instruction::I32Load(at(16, 2)));
    f.instruction(&Instruction::I64Const(1));
    f.instruction(&Instruction::LocalGet(0));
    f.instruction(&Instruction::I32Const(24));
    f.instruction(&Instruction::I32Add);
    f.instruction(&Instruction::Call(clock_time_get));
    f.instruction(&Instruction::I32Eqz);
    f.instruction(&Instruction::If(BlockType::Empty));
    //     timeout = now + timeout; subs.timeout = overflowed ? MAX : timeout
    f.instruction(&Instruction::LocalGet(0));
    f.instruction(&Instruction::I64Load(at(24, 3)));
    f.instruction(&Instruction::LocalGet(timeout));
    f.instruction(&Instruction::I64Add);
    f.instruction(&Instruction::LocalSet(timeout));
    f.instruction(&Instruction::LocalGet(0));
    f.instruction(&Instruction::I64Const(-1));
    f.instruction(&Instruction::LocalGet(timeout));
    f.instruction(&Instruction::LocalGet(timeout));
    f.instruction(&Instruction::LocalGet(0));
    f.instruction(&Instruction::I64Load(at(24, 3)));
    f.instruction(&Instruction::I64LtU);
    f.instruction(&Instruction::Select);
    f.instruction(&Instruction::I64Store(at(24, 3)));
    //     subs.flags |= ABSTIME
    f.instruction(&Instruction::LocalGet(0));
    f.instruction(&Instruction::LocalGet(flags));
    f.instruction(&Instruction::I32Const(1));
    f.instruction(&Instruction::I32Or);
    f.instruction(&Instruction::I32Store16(at(40, 1)));
    f.instruction(&Instruction::End);
    f.instruction(&Instruction::End);
    f.instruction(&Instruction::End);
    f.instruction(&Instruction::End);
}

/// `if from < 3 || to < 3 { return EBADF }` (unsigned): stdin, stdout and
/// stderr are the driver's channels and the captured output, so no other
/// descriptor may take their numbers, and they may not move.
fn refuse_stdio_renumber(f: &mut Function) {
    for fd in [0, 1] {
        f.instruction(&Instruction::LocalGet(fd));
        f.instruction(&Instruction::I32Const(3));
        f.instruction(&Instruction::I32LtU);
    }
    f.instruction(&Instruction::I32Or);
    f.instruction(&Instruction::If(BlockType::Empty));
    f.instruction(&Instruction::I32Const(ERRNO_BADF));
    f.instruction(&Instruction::Return);
    f.instruction(&Instruction::End);
}

/// `if errno != 0 { return errno }`
fn return_if_errno(f: &mut Function, errno: u32) {
    f.instruction(&Instruction::LocalGet(errno));
    f.instruction(&Instruction::If(BlockType::Empty));
    f.instruction(&Instruction::LocalGet(errno));
    f.instruction(&Instruction::Return);
    f.instruction(&Instruction::End);
}
