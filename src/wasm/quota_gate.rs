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
//! `fd_renumber` from or onto stdin, stdout or stderr is refused (`EBADF`)
//! by the gate itself: those numbers are the driver's channel and the
//! captured, capped output, and must keep naming them.
//!
//! Appending functions leaves every existing index unchanged, so only the
//! `call` instructions to the wrapped imports are rewritten. A module that
//! could reach a gated import any other way (a table, an export, a global or
//! a `ref.func`) is refused, never half gated.

use std::collections::HashMap;

use wasm_encoder::{
    BlockType, CodeSection, Function, FunctionSection, Instruction, MemArg, RawSection, ValType,
};
use wasmparser::{ElementItems, Operator, Parser, Payload, TypeRef};

/// Bumped whenever the woven code changes (it keys the module cache).
pub const GATE_VERSION: u32 = 8;

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
/// WASI preview 1's `EBADF`.
const ERRNO_BADF: i32 = 8;
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

/// Why a module cannot carry the gates. A runtime that cannot is refused:
/// without its gates, a guest's writes would go unaccounted.
#[derive(Debug, thiserror::Error)]
pub enum WeaveError {
    /// The bytes are not a WebAssembly module.
    #[error("the module does not parse ({0}): fetch the runtime again (./fetch-python.sh --force)")]
    Parse(String),
    /// Neither door is imported.
    #[error(
        "the module imports neither fd_allocate nor fd_advise, through which its disk-quota gates would ask the host: use a runtime built with wasi-libc, which imports them"
    )]
    NoDoor,
    /// A WASI import the gates rely on has another type than WASI's.
    #[error(
        "the module imports {0} with a type that is not WASI preview 1's: use a runtime built for wasi_snapshot_preview1"
    )]
    WrongType(String),
    /// `poll_oneoff` is imported without `clock_time_get`.
    #[error(
        "the module imports poll_oneoff but not clock_time_get, so its waits cannot be bounded: use a runtime built with wasi-libc, which imports both"
    )]
    NoClock,
    /// A gated import is reachable other than by a direct call.
    #[error(
        "the module refers to {import} {how}, so calls through that reference would bypass its disk-quota gate: use a runtime that calls its WASI imports directly (a wasi-libc build does)"
    )]
    Indirect {
        /// The import's name.
        import: String,
        /// Where the reference is.
        how: &'static str,
    },
}

impl From<wasmparser::BinaryReaderError> for WeaveError {
    fn from(e: wasmparser::BinaryReaderError) -> Self {
        Self::Parse(e.to_string())
    }
}

/// Adds the gates to a module: every gated import is called only through its
/// gate, or the module is refused with the reason (see [`WeaveError`]).
pub fn weave(wasm: &[u8]) -> Result<Woven, WeaveError> {
    let mut weaver = Weaver::default();
    for payload in Parser::new(0).parse_all(wasm) {
        let payload = payload?;
        if !matches!(payload, Payload::CodeSectionEntry(_)) {
            weaver.end_code_section()?;
        }
        weaver.take(payload, wasm)?;
    }
    weaver.end_code_section()?;
    weaver.finish()
}

/// A gated import: its function index, name, type index and gate.
struct Target {
    import: u32,
    name: String,
    ty: u32,
    gate: Gate,
}

/// The module being rewritten, section by section.
#[derive(Default)]
struct Weaver {
    /// Each type's parameters and results (empty for a type no WASI import
    /// can have).
    types: Vec<(Vec<ValType>, Vec<ValType>)>,
    imported_funcs: u32,
    /// The door's function index, once the imports are read.
    door: Option<(u32, Door)>,
    targets: Vec<Target>,
    /// Gated import index -> its gate's function index.
    redirect: HashMap<u32, u32>,
    module: wasm_encoder::Module,
    /// The code section being copied.
    code: Option<CodeSection>,
    call_sites: usize,
}

impl Weaver {
    /// Copies one section (or code entry), reading what the gates need.
    fn take(&mut self, payload: Payload<'_>, wasm: &[u8]) -> Result<(), WeaveError> {
        match payload {
            Payload::Version { .. } | Payload::End(_) => {}
            Payload::TypeSection(reader) => {
                self.read_types(reader.clone())?;
                copy(&mut self.module, 1, wasm, reader.range());
            }
            Payload::ImportSection(reader) => {
                self.read_imports(reader.clone())?;
                copy(&mut self.module, 2, wasm, reader.range());
            }
            Payload::FunctionSection(reader) => self.declare_gates(reader)?,
            Payload::GlobalSection(reader) => {
                self.check_globals(reader.clone())?;
                copy(&mut self.module, 6, wasm, reader.range());
            }
            Payload::ExportSection(reader) => {
                self.check_exports(reader.clone())?;
                copy(&mut self.module, 7, wasm, reader.range());
            }
            Payload::ElementSection(reader) => {
                self.check_elements(reader.clone())?;
                copy(&mut self.module, 9, wasm, reader.range());
            }
            Payload::CodeSectionStart { .. } => self.code = Some(CodeSection::new()),
            Payload::CodeSectionEntry(body) => {
                let (bytes, sites) = self.redirect_calls(wasm, &body)?;
                self.call_sites += sites;
                self.code.get_or_insert_with(CodeSection::new).raw(&bytes);
            }
            Payload::CustomSection(reader) => {
                self.module.section(&wasm_encoder::CustomSection {
                    name: reader.name().into(),
                    data: reader.data().into(),
                });
            }
            other => {
                if let Some((id, range)) = other.as_section() {
                    copy(&mut self.module, id, wasm, range);
                }
            }
        }
        Ok(())
    }

    /// Records every type's signature.
    fn read_types(&mut self, reader: wasmparser::TypeSectionReader<'_>) -> Result<(), WeaveError> {
        for rec in reader {
            for sub in rec?.types() {
                // A type with references (or not a function type) never fits
                // a WASI import: it is kept as an empty signature, which no
                // gate or door accepts.
                self.types
                    .push(numeric_signature(&sub.composite_type.inner).unwrap_or_default());
            }
        }
        Ok(())
    }

    /// Finds the door, the clock and the imports to gate.
    fn read_imports(
        &mut self,
        reader: wasmparser::ImportSectionReader<'_>,
    ) -> Result<(), WeaveError> {
        let (mut allocate, mut advise, mut clock) = (None, None, None);
        for import in reader.into_imports() {
            let import = import?;
            let TypeRef::Func(ty) = import.ty else {
                continue;
            };
            let index = self.imported_funcs;
            self.imported_funcs += 1;
            if import.module != WASI {
                continue;
            }
            match import.name {
                "fd_allocate" => allocate = Some(self.door_at(index, ty, Door::FdAllocate)?),
                "fd_advise" => advise = Some(self.door_at(index, ty, Door::FdAdvise)?),
                "clock_time_get" => clock = Some(self.clock_at(index, ty)?),
                name => {
                    if let Some(gate) = gate_for(name) {
                        self.targets.push(Target {
                            import: index,
                            name: name.to_owned(),
                            ty,
                            gate,
                        });
                    }
                }
            }
        }
        self.door = allocate.or(advise);
        for target in &mut self.targets {
            if let Gate::Poll { clock_time_get } = &mut target.gate {
                *clock_time_get = clock.ok_or(WeaveError::NoClock)?;
            }
        }
        Ok(())
    }

    /// The door at function `index`, when its type is WASI's.
    fn door_at(&self, index: u32, ty: u32, door: Door) -> Result<(u32, Door), WeaveError> {
        let want: &[ValType] = match door {
            Door::FdAllocate => &[ValType::I32, ValType::I64, ValType::I64],
            Door::FdAdvise => &[ValType::I32, ValType::I64, ValType::I64, ValType::I32],
        };
        self.expect_type(ty, want, door.import_name())?;
        Ok((index, door))
    }

    /// `clock_time_get` at function `index`, when its type is WASI's.
    fn clock_at(&self, index: u32, ty: u32) -> Result<u32, WeaveError> {
        let want = [ValType::I32, ValType::I64, ValType::I32];
        self.expect_type(ty, &want, "clock_time_get")?;
        Ok(index)
    }

    fn expect_type(&self, ty: u32, params: &[ValType], name: &str) -> Result<(), WeaveError> {
        match self.types.get(ty as usize) {
            Some((p, r)) if p == params && r == &[ValType::I32] => Ok(()),
            _ => Err(WeaveError::WrongType(name.to_owned())),
        }
    }

    /// Copies the function section with one more function per gate, after
    /// the module's own (so no existing index moves).
    fn declare_gates(
        &mut self,
        reader: wasmparser::FunctionSectionReader<'_>,
    ) -> Result<(), WeaveError> {
        if self.door.is_none() {
            return Err(WeaveError::NoDoor);
        }
        let mut section = FunctionSection::new();
        let mut defined = 0u32;
        for ty in reader {
            section.function(ty?);
            defined += 1;
        }
        let first_gate = self.imported_funcs + defined;
        for (i, target) in self.targets.iter().enumerate() {
            section.function(target.ty);
            self.redirect.insert(target.import, first_gate + i as u32);
        }
        self.module.section(&section);
        Ok(())
    }

    /// The name of a gated import, when `index` is one.
    fn gated(&self, index: u32) -> Option<&str> {
        self.targets
            .iter()
            .find(|t| t.import == index)
            .map(|t| t.name.as_str())
    }

    /// Refuses a reference to a gated import found `how`.
    fn refuse_reference(&self, index: u32, how: &'static str) -> Result<(), WeaveError> {
        match self.gated(index) {
            Some(import) => Err(WeaveError::Indirect {
                import: import.to_owned(),
                how,
            }),
            None => Ok(()),
        }
    }

    /// Refuses a `ref.func` of a gated import in a constant expression.
    fn check_const_expr(
        &self,
        expr: &wasmparser::ConstExpr<'_>,
        how: &'static str,
    ) -> Result<(), WeaveError> {
        let mut ops = expr.get_operators_reader();
        while !ops.eof() {
            if let Operator::RefFunc { function_index } = ops.read()? {
                self.refuse_reference(function_index, how)?;
            }
        }
        Ok(())
    }

    fn check_globals(&self, reader: wasmparser::GlobalSectionReader<'_>) -> Result<(), WeaveError> {
        for global in reader {
            self.check_const_expr(&global?.init_expr, "in a global")?;
        }
        Ok(())
    }

    fn check_exports(&self, reader: wasmparser::ExportSectionReader<'_>) -> Result<(), WeaveError> {
        for export in reader {
            let export = export?;
            if export.kind == wasmparser::ExternalKind::Func {
                self.refuse_reference(export.index, "in an export")?;
            }
        }
        Ok(())
    }

    fn check_elements(
        &self,
        reader: wasmparser::ElementSectionReader<'_>,
    ) -> Result<(), WeaveError> {
        for element in reader {
            match element?.items {
                ElementItems::Functions(funcs) => {
                    for f in funcs {
                        self.refuse_reference(f?, "in an element segment")?;
                    }
                }
                ElementItems::Expressions(_, exprs) => {
                    for expr in exprs {
                        self.check_const_expr(&expr?, "in an element segment")?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Copies a function body, pointing calls to gated imports at their
    /// gates; a `ref.func` of one is refused.
    fn redirect_calls(
        &self,
        wasm: &[u8],
        body: &wasmparser::FunctionBody<'_>,
    ) -> Result<(Vec<u8>, usize), WeaveError> {
        let range = body.range();
        let mut ops = body.get_operators_reader()?;
        let mut out = Vec::with_capacity(range.len() + 8);
        let mut last = range.start;
        let mut sites = 0;
        while !ops.eof() {
            let (op, offset) = ops.read_with_offset()?;
            let (opcode, target) = match op {
                Operator::Call { function_index } => (0x10u8, function_index),
                Operator::ReturnCall { function_index } => (0x12u8, function_index),
                // Valid modules declare such a function in an element
                // segment first (refused there); checked here too.
                Operator::RefFunc { function_index } => {
                    self.refuse_reference(function_index, "with ref.func in code")?;
                    continue;
                }
                _ => continue,
            };
            if let Some(&gate) = self.redirect.get(&target) {
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

    /// Appends the gates to the code section being copied, and writes it.
    fn end_code_section(&mut self) -> Result<(), WeaveError> {
        let Some(mut section) = self.code.take() else {
            return Ok(());
        };
        let door = self.door.ok_or(WeaveError::NoDoor)?;
        for target in &self.targets {
            let (params, results) = self
                .types
                .get(target.ty as usize)
                .ok_or_else(|| WeaveError::WrongType(target.name.clone()))?;
            if results.as_slice() != [ValType::I32] {
                return Err(WeaveError::WrongType(target.name.clone()));
            }
            let function = gate_function(target, door, params)?;
            section.function(&function);
        }
        self.module.section(&section);
        Ok(())
    }

    fn finish(self) -> Result<Woven, WeaveError> {
        let (_, door) = self.door.ok_or(WeaveError::NoDoor)?;
        Ok(Woven {
            module: self.module.finish(),
            gated: self.targets.into_iter().map(|t| t.name).collect(),
            call_sites: self.call_sites,
            door,
        })
    }
}

/// A function type's parameters and results, when all are numbers.
fn numeric_signature(
    inner: &wasmparser::CompositeInnerType,
) -> Option<(Vec<ValType>, Vec<ValType>)> {
    let wasmparser::CompositeInnerType::Func(f) = inner else {
        return None;
    };
    let params = f
        .params()
        .iter()
        .map(val_type)
        .collect::<Option<Vec<_>>>()?;
    let results = f
        .results()
        .iter()
        .map(val_type)
        .collect::<Option<Vec<_>>>()?;
    Some((params, results))
}

fn copy(module: &mut wasm_encoder::Module, id: u8, wasm: &[u8], range: std::ops::Range<usize>) {
    module.section(&RawSection {
        id,
        data: &wasm[range],
    });
}

fn val_type(t: &wasmparser::ValType) -> Option<ValType> {
    Some(match t {
        wasmparser::ValType::I32 => ValType::I32,
        wasmparser::ValType::I64 => ValType::I64,
        wasmparser::ValType::F32 => ValType::F32,
        wasmparser::ValType::F64 => ValType::F64,
        wasmparser::ValType::V128 => ValType::V128,
        wasmparser::ValType::Ref(_) => return None,
    })
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
/// `fn gate(params...) -> errno { let e = ask(...); if e != 0 { return e } import(params...) }`
/// for `target`, whose import takes `params`; a parameter the gate reads
/// that is not an i32 refuses the import's type.
fn gate_function(
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

#[cfg(test)]
mod tests;
