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

use wasm_encoder::{CodeSection, FunctionSection, RawSection, ValType};
use wasmparser::{ElementItems, Operator, Parser, Payload, TypeRef};

mod gate_code;
mod weave_error;

pub use gate_code::{ASK_CREATE, ASK_OPEN, ASK_WRITE, Door, NOTE_CLOSE, WRITE_STDIO};
use gate_code::{Gate, Target, WASI, gate_for, gate_function};
pub use weave_error::WeaveError;

/// Bumped whenever the woven code changes (it keys the module cache).
pub const GATE_VERSION: u32 = 8;

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
#[cfg(test)]
mod tests;
