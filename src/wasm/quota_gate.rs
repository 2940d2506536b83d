//! Disk-quota gates woven into a runtime's module, so a guest write that
//! would take its sandbox over quota fails inside Python with a normal
//! `OSError` (`EDQUOT`, "Disk quota exceeded") instead of filling the disk.
//!
//! WASI has no quotas, and wasmtime-wasi's preview-1 functions cannot be
//! wrapped on the host (a wrapper cannot call the original: it needs the
//! calling instance's memory). So the wrapping happens inside the module: for
//! each WASI import that writes bytes or creates entries, a small function is
//! appended that first asks the host, then calls the real import; every call
//! to the import is redirected to it. The question goes through an import the
//! module already has and CPython never relies on (the [`Door`]):
//! `fd_allocate` (wasmtime-wasi answers it with "not supported" anyway), or,
//! in a module that does not import it, `fd_advise` (advice the host may
//! ignore). The host shadows the door; negative offsets, impossible in a real
//! call, mark the questions:
//!
//! | offset | question | fd | len |
//! |---|---|---|---|
//! | [`ASK_WRITE`] | may `len` bytes be written to `fd`? | file | bytes |
//! | [`ASK_CREATE`] | may an entry taking `len` bytes be created under `fd`? | directory | bytes |
//! | [`ASK_OPEN`] | may one more file or directory be opened? | directory | 0 |
//! | [`NOTE_CLOSE`] | `fd` is being closed (or renumbered, from or onto) | any | 0 |
//! | [`WRITE_STDIO`] | write these to stdout/stderr (0: done, else go on) | 1 or 2 | iovecs |
//!
//! The last is a shortcut, not a gate: a program's output goes to the host in
//! one plain call instead of through WASI's stream machinery, which made a
//! `print` in a loop several times slower.
//! `path_open` with `O_CREAT` (and without `O_EXCL`) first tries to open an
//! existing file, so rewriting a file creates nothing and is not refused at
//! the file limit; only when the file does not exist does it ask to create.
//! Growing a file with `fd_filestat_set_size` is not gated: it makes a hole,
//! which holds no disk until written, and writes are gated.
//!
//! Appending functions leaves every existing index unchanged, so only the
//! `call` instructions to the wrapped imports are rewritten.

use std::collections::HashMap;

use wasm_encoder::{
    BlockType, CodeSection, Function, FunctionSection, Instruction, MemArg, RawSection, ValType,
};
use wasmparser::{ElementItems, Operator, Parser, Payload, TypeRef};

/// Bumped whenever the woven code changes (it keys the module cache).
pub const GATE_VERSION: u32 = 7;

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

const WASI: &str = "wasi_snapshot_preview1";
/// WASI preview 1's `O_CREAT` bit of `path_open`'s `oflags`.
const OFLAGS_CREAT: i32 = 1;
/// WASI preview 1's `O_EXCL` bit of `path_open`'s `oflags`.
const OFLAGS_EXCL: i32 = 4;
/// WASI preview 1's `ENOENT`.
const ERRNO_NOENT: i32 = 44;
/// Bytes booked for a new directory or link: one file-system block.
const ENTRY_BLOCK: i64 = 4096;

/// Which imports get a gate, and how the gate asks.
#[derive(Clone, Copy)]
enum Gate {
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
    /// `fd_renumber(from, to)`: both numbers stop naming what they named
    /// (`to` takes `from`'s file, `from` is freed): tell about both.
    Renumber,
    /// `poll_oneoff`: a lone relative clock wait becomes an absolute one (with
    /// the `clock_time_get` import at this index), which wasmtime-wasi waits
    /// for asynchronously; a relative one it sleeps on the guest's thread,
    /// where no time limit can stop it and other sandboxes' guests stall.
    Poll { clock_time_get: u32 },
}

fn gate_for(name: &str) -> Option<Gate> {
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

/// What [`weave`] did.
#[derive(Debug, PartialEq, Eq)]
pub struct Woven {
    /// The new module.
    pub module: Vec<u8>,
    /// Names of the imports that got a gate.
    pub gated: Vec<String>,
    /// Call sites redirected.
    pub call_sites: usize,
    /// The import the gates ask through.
    pub door: Door,
}

/// Adds the gates to a module. Fails (leaving the caller to run the module
/// without gates) when the module imports neither `fd_allocate` nor
/// `fd_advise` (with their WASI types), or refers to a gated import other than
/// by a direct call.
pub fn weave(wasm: &[u8]) -> Result<Woven, String> {
    let mut types: Vec<(Vec<ValType>, Vec<ValType>)> = Vec::new();
    let mut imported_funcs: u32 = 0;
    // The door: its function index and which one it is.
    let mut allocate: Option<(u32, Door)> = None;
    let mut advise: Option<u32> = None;
    let mut clock: Option<u32> = None;
    // import index -> (name, type index, gate)
    let mut targets: Vec<(u32, String, u32, Gate)> = Vec::new();
    let mut defined_types: Vec<u32> = Vec::new();
    let mut redirect: HashMap<u32, u32> = HashMap::new();
    let mut module = wasm_encoder::Module::new();
    let mut code: Option<CodeSection> = None;
    let mut call_sites = 0usize;

    for payload in Parser::new(0).parse_all(wasm) {
        let payload = payload.map_err(|e| format!("the module does not parse: {e}"))?;
        if code.is_some() && !matches!(payload, Payload::CodeSectionEntry(_)) {
            let mut section = code.take().unwrap_or_default();
            append_gates(&mut section, &targets, &types, allocate)?;
            module.section(&section);
        }
        match payload {
            Payload::Version { .. } | Payload::End(_) => {}
            Payload::TypeSection(reader) => {
                for rec in reader.clone().into_iter() {
                    let rec = rec.map_err(|e| e.to_string())?;
                    for sub in rec.types() {
                        // A type with references (or not a function type)
                        // never fits a WASI import: it is kept as an empty
                        // signature, which no gate or door accepts.
                        let numeric = match &sub.composite_type.inner {
                            wasmparser::CompositeInnerType::Func(f) => f
                                .params()
                                .iter()
                                .map(val_type)
                                .collect::<Result<Vec<_>, _>>()
                                .and_then(|params| {
                                    Ok((
                                        params,
                                        f.results()
                                            .iter()
                                            .map(val_type)
                                            .collect::<Result<Vec<_>, _>>()?,
                                    ))
                                })
                                .ok(),
                            _ => None,
                        };
                        types.push(numeric.unwrap_or_default());
                    }
                }
                copy(&mut module, 1, wasm, reader.range());
            }
            Payload::ImportSection(reader) => {
                for import in reader.clone().into_imports() {
                    let import = import.map_err(|e| e.to_string())?;
                    if let TypeRef::Func(ty) = import.ty {
                        if import.module == WASI {
                            if import.name == "fd_allocate" {
                                check_door(&types, ty, Door::FdAllocate)?;
                                allocate = Some((imported_funcs, Door::FdAllocate));
                            } else if import.name == "fd_advise" {
                                check_door(&types, ty, Door::FdAdvise)?;
                                advise = Some(imported_funcs);
                            } else if import.name == "clock_time_get" {
                                check_clock(&types, ty)?;
                                clock = Some(imported_funcs);
                            } else if let Some(gate) = gate_for(import.name) {
                                targets.push((imported_funcs, import.name.to_owned(), ty, gate));
                            }
                        }
                        imported_funcs += 1;
                    }
                }
                if allocate.is_none() {
                    allocate = advise.map(|index| (index, Door::FdAdvise));
                }
                for (_, name, _, gate) in &mut targets {
                    if let Gate::Poll { clock_time_get } = gate {
                        *clock_time_get = clock.ok_or_else(|| {
                            format!("the module imports {name} but not clock_time_get, so its waits cannot be bounded")
                        })?;
                    }
                }
                copy(&mut module, 2, wasm, reader.range());
            }
            Payload::FunctionSection(reader) => {
                for ty in reader.clone() {
                    defined_types.push(ty.map_err(|e| e.to_string())?);
                }
                if allocate.is_none() {
                    return Err(NO_DOOR.into());
                }
                let first_gate = imported_funcs + defined_types.len() as u32;
                let mut section = FunctionSection::new();
                for ty in &defined_types {
                    section.function(*ty);
                }
                for (i, (import, _, ty, _)) in targets.iter().enumerate() {
                    section.function(*ty);
                    redirect.insert(*import, first_gate + i as u32);
                }
                module.section(&section);
            }
            Payload::ElementSection(reader) => {
                for element in reader.clone() {
                    let element = element.map_err(|e| e.to_string())?;
                    if let ElementItems::Functions(funcs) = element.items {
                        for f in funcs {
                            let f = f.map_err(|e| e.to_string())?;
                            if redirect.contains_key(&f) {
                                return Err(format!(
                                    "import {f} is in a table; it cannot be gated"
                                ));
                            }
                        }
                    }
                }
                copy(&mut module, 9, wasm, reader.range());
            }
            Payload::ExportSection(reader) => {
                for export in reader.clone() {
                    let export = export.map_err(|e| e.to_string())?;
                    if export.kind == wasmparser::ExternalKind::Func
                        && redirect.contains_key(&export.index)
                    {
                        return Err(format!(
                            "import {} is exported; it cannot be gated",
                            export.index
                        ));
                    }
                }
                copy(&mut module, 7, wasm, reader.range());
            }
            Payload::CodeSectionStart { .. } => code = Some(CodeSection::new()),
            Payload::CodeSectionEntry(body) => {
                let section = code.get_or_insert_with(CodeSection::new);
                let (bytes, sites) = redirect_calls(wasm, &body, &redirect)?;
                call_sites += sites;
                section.raw(&bytes);
            }
            Payload::CustomSection(reader) => {
                module.section(&wasm_encoder::CustomSection {
                    name: reader.name().into(),
                    data: reader.data().into(),
                });
            }
            other => {
                if let Some((id, range)) = other.as_section() {
                    copy(&mut module, id, wasm, range);
                }
            }
        }
    }
    if let Some(mut section) = code.take() {
        append_gates(&mut section, &targets, &types, allocate)?;
        module.section(&section);
    }
    let Some((_, door)) = allocate else {
        return Err(NO_DOOR.into());
    };
    Ok(Woven {
        module: module.finish(),
        gated: targets.into_iter().map(|(_, name, _, _)| name).collect(),
        call_sites,
        door,
    })
}

const NO_DOOR: &str = "the module imports neither fd_allocate nor fd_advise";

/// Checks that `clock_time_get` has its WASI type.
fn check_clock(types: &[(Vec<ValType>, Vec<ValType>)], ty: u32) -> Result<(), String> {
    match types.get(ty as usize) {
        Some((params, results))
            if params == &[ValType::I32, ValType::I64, ValType::I32]
                && results == &[ValType::I32] =>
        {
            Ok(())
        }
        _ => Err("the module imports clock_time_get with an unexpected type".into()),
    }
}

/// Checks that the door's import has its WASI type.
fn check_door(types: &[(Vec<ValType>, Vec<ValType>)], ty: u32, door: Door) -> Result<(), String> {
    let want: &[ValType] = match door {
        Door::FdAllocate => &[ValType::I32, ValType::I64, ValType::I64],
        Door::FdAdvise => &[ValType::I32, ValType::I64, ValType::I64, ValType::I32],
    };
    match types.get(ty as usize) {
        Some((params, results)) if params == want && results == &[ValType::I32] => Ok(()),
        _ => Err(format!(
            "the module imports {} with an unexpected type",
            door.import_name()
        )),
    }
}

fn copy(module: &mut wasm_encoder::Module, id: u8, wasm: &[u8], range: std::ops::Range<usize>) {
    module.section(&RawSection {
        id,
        data: &wasm[range],
    });
}

fn val_type(t: &wasmparser::ValType) -> Result<ValType, String> {
    Ok(match t {
        wasmparser::ValType::I32 => ValType::I32,
        wasmparser::ValType::I64 => ValType::I64,
        wasmparser::ValType::F32 => ValType::F32,
        wasmparser::ValType::F64 => ValType::F64,
        wasmparser::ValType::V128 => ValType::V128,
        wasmparser::ValType::Ref(_) => return Err("a reference type".into()),
    })
}

/// Copies a function body, pointing calls to gated imports at their gates.
fn redirect_calls(
    wasm: &[u8],
    body: &wasmparser::FunctionBody<'_>,
    redirect: &HashMap<u32, u32>,
) -> Result<(Vec<u8>, usize), String> {
    let range = body.range();
    let mut ops = body.get_operators_reader().map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(range.len() + 8);
    let mut last = range.start;
    let mut sites = 0;
    while !ops.eof() {
        let (op, offset) = ops.read_with_offset().map_err(|e| e.to_string())?;
        let (opcode, target) = match op {
            Operator::Call { function_index } => (0x10u8, function_index),
            Operator::ReturnCall { function_index } => (0x12u8, function_index),
            _ => continue,
        };
        if let Some(&gate) = redirect.get(&target) {
            out.extend_from_slice(&wasm[last..offset]);
            out.push(opcode);
            leb128_u32(&mut out, gate);
            last = ops.original_position();
            sites += 1;
        }
    }
    out.extend_from_slice(&wasm[last..range.end]);
    Ok((out, sites))
}

fn leb128_u32(out: &mut Vec<u8>, mut value: u32) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// Appends one gate function per gated import, in `targets` order.
fn append_gates(
    code: &mut CodeSection,
    targets: &[(u32, String, u32, Gate)],
    types: &[(Vec<ValType>, Vec<ValType>)],
    allocate: Option<(u32, Door)>,
) -> Result<(), String> {
    let Some(door) = allocate else {
        return Err(NO_DOOR.into());
    };
    for (import, name, ty, gate) in targets {
        let (params, results) = types
            .get(*ty as usize)
            .ok_or_else(|| format!("{name} has an unknown type"))?;
        if results.as_slice() != [ValType::I32] {
            return Err(format!("{name} does not return an errno"));
        }
        code.function(&gate_function(*import, door, params, *gate)?);
    }
    Ok(())
}

/// `fn gate(params...) -> errno { let e = ask(...); if e != 0 { return e } import(params...) }`
fn gate_function(
    import: u32,
    (allocate, door): (u32, Door),
    params: &[ValType],
    gate: Gate,
) -> Result<Function, String> {
    let n = params.len() as u32;
    let param_i32 = |i: u32| -> Result<(), String> {
        match params.get(i as usize) {
            Some(ValType::I32) => Ok(()),
            _ => Err(format!("parameter {i} is not an i32")),
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
            for fd in [0, 1] {
                param_i32(fd)?;
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

/// `if errno != 0 { return errno }`
fn return_if_errno(f: &mut Function, errno: u32) {
    f.instruction(&Instruction::LocalGet(errno));
    f.instruction(&Instruction::If(BlockType::Empty));
    f.instruction(&Instruction::LocalGet(errno));
    f.instruction(&Instruction::Return);
    f.instruction(&Instruction::End);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A module importing the WASI calls it uses and calling fd_write twice.
    fn sample() -> Vec<u8> {
        wat_module(
            r#"(module
              (import "wasi_snapshot_preview1" "fd_allocate" (func $alloc (param i32 i64 i64) (result i32)))
              (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
              (import "wasi_snapshot_preview1" "path_open" (func $open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
              (import "wasi_snapshot_preview1" "fd_close" (func $close (param i32) (result i32)))
              (memory (export "memory") 1)
              (func (export "run") (result i32)
                (drop (call $write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
                (call $write (i32.const 3) (i32.const 0) (i32.const 1) (i32.const 8))))"#,
        )
    }

    fn wat_module(text: &str) -> Vec<u8> {
        wat::parse_str(text).unwrap()
    }

    #[test]
    fn gates_are_appended_and_calls_redirected() {
        let woven = weave(&sample()).unwrap();
        assert_eq!(woven.gated, ["fd_write", "path_open", "fd_close"]);
        assert_eq!(woven.call_sites, 2);
        wasmparser::Validator::new()
            .validate_all(&woven.module)
            .unwrap();
    }

    #[test]
    fn a_module_without_fd_allocate_is_left_alone() {
        let wasm = wat_module(
            r#"(module (import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32))))"#,
        );
        assert!(weave(&wasm).unwrap_err().contains("fd_allocate"));
    }

    #[test]
    fn without_fd_allocate_the_gates_ask_through_fd_advise() {
        let wasm = wat_module(
            r#"(module
              (import "wasi_snapshot_preview1" "fd_advise" (func $advise (param i32 i64 i64 i32) (result i32)))
              (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
              (memory (export "memory") 1)
              (func (export "run") (result i32)
                (call $write (i32.const 3) (i32.const 0) (i32.const 1) (i32.const 8))))"#,
        );
        let woven = weave(&wasm).unwrap();
        assert_eq!(woven.door, Door::FdAdvise);
        assert_eq!(woven.gated, ["fd_write"]);

        use wasmtime::{Engine, Linker, Module, Store};
        let engine = Engine::default();
        let module = Module::new(&engine, woven.module).unwrap();
        type Asked = Vec<(i32, i64, i64, i32)>;
        let mut linker: Linker<Asked> = Linker::new(&engine);
        linker
            .func_wrap(
                WASI,
                "fd_advise",
                |mut c: wasmtime::Caller<'_, Asked>, fd: i32, off: i64, len: i64, advice: i32| {
                    c.data_mut().push((fd, off, len, advice));
                    19
                },
            )
            .unwrap()
            .func_wrap(WASI, "fd_write", |_: i32, _: i32, _: i32, _: i32| 0)
            .unwrap();
        let mut store = Store::new(&engine, Vec::new());
        let instance = linker.instantiate(&mut store, &module).unwrap();
        let memory = instance.get_memory(&mut store, "memory").unwrap();
        memory
            .write(&mut store, 0, &[16, 0, 0, 0, 7, 0, 0, 0])
            .unwrap();
        let run = instance
            .get_typed_func::<(), i32>(&mut store, "run")
            .unwrap();
        assert_eq!(run.call(&mut store, ()).unwrap(), 19);
        assert_eq!(store.data().as_slice(), [(3, ASK_WRITE, 7, 0)]);
    }

    #[test]
    fn the_door_is_fd_allocate_when_a_module_has_both() {
        assert_eq!(
            Door::among(["fd_advise", "fd_allocate"]),
            Some(Door::FdAllocate)
        );
        assert_eq!(Door::among(["fd_write", "fd_advise"]), Some(Door::FdAdvise));
        assert_eq!(Door::among(["fd_write"]), None);
    }

    #[test]
    fn the_gate_asks_the_host_before_writing_and_honours_its_answer() {
        use wasmtime::{Engine, Linker, Module, Store};
        let engine = Engine::default();
        let module = Module::new(&engine, weave(&sample()).unwrap().module).unwrap();
        // (fd, offset, len) of each question; the host refuses writes to fd 3.
        let mut linker: Linker<Vec<(i32, i64, i64)>> = Linker::new(&engine);
        linker
            .func_wrap(
                WASI,
                "fd_allocate",
                |mut c: wasmtime::Caller<'_, Vec<(i32, i64, i64)>>, fd: i32, off: i64, len: i64| {
                    c.data_mut().push((fd, off, len));
                    if fd == 3 { 19 } else { 0 }
                },
            )
            .unwrap()
            .func_wrap(WASI, "fd_write", |_: i32, _: i32, _: i32, _: i32| 0)
            .unwrap()
            .func_wrap(
                WASI,
                "path_open",
                |_: i32, _: i32, _: i32, _: i32, _: i32, _: i64, _: i64, _: i32, _: i32| 0,
            )
            .unwrap()
            .func_wrap(WASI, "fd_close", |_: i32| 0)
            .unwrap();
        let mut store = Store::new(&engine, Vec::new());
        let instance = linker.instantiate(&mut store, &module).unwrap();
        let memory = instance.get_memory(&mut store, "memory").unwrap();
        // One iovec at address 0: {buf: 16, buf_len: 5}.
        memory
            .write(&mut store, 0, &[16, 0, 0, 0, 5, 0, 0, 0])
            .unwrap();
        let run = instance
            .get_typed_func::<(), i32>(&mut store, "run")
            .unwrap();
        assert_eq!(
            run.call(&mut store, ()).unwrap(),
            19,
            "the refusal is the write's errno"
        );
        // fd 1 was offered to the host (iovecs at 0, one of them), which took
        // it; the gate then reported the 5 bytes as written.
        assert_eq!(
            store.data().as_slice(),
            [(1, WRITE_STDIO, 1), (3, ASK_WRITE, 5)]
        );
        let mut written = [0u8; 4];
        memory.read(&store, 8, &mut written).unwrap();
        assert_eq!(u32::from_le_bytes(written), 5);
    }

    #[test]
    fn a_lone_relative_wait_on_any_clock_becomes_an_absolute_monotonic_one() {
        use wasmtime::{Engine, Linker, Module, Store};
        let wasm = wat_module(
            r#"(module
              (import "wasi_snapshot_preview1" "fd_allocate" (func (param i32 i64 i64) (result i32)))
              (import "wasi_snapshot_preview1" "clock_time_get" (func (param i32 i64 i32) (result i32)))
              (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
              (memory (export "memory") 1)
              (func (export "run") (result i32)
                (call $poll (i32.const 0) (i32.const 64) (i32.const 1) (i32.const 128))))"#,
        );
        let engine = Engine::default();
        let module = Module::new(&engine, weave(&wasm).unwrap().module).unwrap();
        for clock in [1u32, 2, 3] {
            // What poll_oneoff was handed: (clock id, timeout, flags).
            let mut linker: Linker<Option<(u32, u64, u16)>> = Linker::new(&engine);
            linker
                .func_wrap(WASI, "fd_allocate", |_: i32, _: i64, _: i64| 0)
                .unwrap()
                .func_wrap(
                    WASI,
                    "clock_time_get",
                    |mut c: wasmtime::Caller<'_, Option<(u32, u64, u16)>>,
                     id: i32,
                     _: i64,
                     at: i32| {
                        // Only the clocks wasmtime-wasi can wait on answer.
                        if id > 1 {
                            return 28;
                        }
                        let memory = c.get_export("memory").unwrap().into_memory().unwrap();
                        memory
                            .write(&mut c, at as usize, &1_000u64.to_le_bytes())
                            .unwrap();
                        0
                    },
                )
                .unwrap()
                .func_wrap(
                    WASI,
                    "poll_oneoff",
                    |mut c: wasmtime::Caller<'_, Option<(u32, u64, u16)>>,
                     subs: i32,
                     _: i32,
                     _: i32,
                     _: i32| {
                        let memory = c.get_export("memory").unwrap().into_memory().unwrap();
                        let mut sub = [0u8; 48];
                        memory.read(&c, subs as usize, &mut sub).unwrap();
                        let id = u32::from_le_bytes(sub[16..20].try_into().unwrap());
                        let timeout = u64::from_le_bytes(sub[24..32].try_into().unwrap());
                        let flags = u16::from_le_bytes(sub[40..42].try_into().unwrap());
                        *c.data_mut() = Some((id, timeout, flags));
                        0
                    },
                )
                .unwrap();
            let mut store = Store::new(&engine, None);
            let instance = linker.instantiate(&mut store, &module).unwrap();
            let memory = instance.get_memory(&mut store, "memory").unwrap();
            let mut sub = [0u8; 48];
            sub[16..20].copy_from_slice(&clock.to_le_bytes());
            sub[24..32].copy_from_slice(&5_000u64.to_le_bytes());
            memory.write(&mut store, 0, &sub).unwrap();
            let run = instance
                .get_typed_func::<(), i32>(&mut store, "run")
                .unwrap();
            assert_eq!(run.call(&mut store, ()).unwrap(), 0);
            assert_eq!(
                *store.data(),
                Some((1, 6_000, 1)),
                "clock {clock}: now (1000) plus the timeout (5000) on the monotonic clock, ABSTIME set"
            );
        }
    }
}
