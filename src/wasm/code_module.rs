//! The code module of a turn-driven runtime: its module with every mutable
//! global exported (wasmtime-wizer's instrument, which also checks that the
//! module keeps its state in memory and globals only) and its active data
//! segments emptied. It is compiled once per runtime and engine; every
//! sandbox is an instance of it whose memory is then mapped from a snapshot
//! image (see [`super::snapshot`]), so what the snapshot holds (the driver,
//! the preloaded imports) can change without compiling again.
//!
//! The data the segments held is kept apart ([`InitialData`]), for the one
//! run that makes the snapshot: it writes that data into a fresh instance's
//! memory, as instantiating the original module would have.

use wasm_encoder::{ConstExpr, DataSection, RawSection};
use wasmparser::{DataKind, Operator, Parser, Payload};
use wasmtime_wizer::Wizer;

/// Changes whenever the code module's making changes, so that cached code
/// modules are compiled again.
pub(crate) const CODE_MODULE_VERSION: u32 = 1;

/// The export that starts the interpreter (wizer's initialisation function).
pub(crate) const INIT_FUNC: &str = "wizer.initialize";

/// What a runtime's module could not be made into a code module for.
#[derive(Debug, thiserror::Error)]
pub enum CodeModuleError {
    /// wasmtime-wizer refused the module.
    #[error("the module cannot be pre-initialised: {0:#}")]
    Refused(wasmtime::Error),
    /// The module is not valid WebAssembly.
    #[error("the module cannot be read: {0}")]
    Unreadable(#[from] wasmparser::BinaryReaderError),
    /// A data segment's place is not a constant.
    #[error("data segment {0} is placed by an expression other than a constant")]
    PlacedByExpression(u32),
    /// The module starts itself when instantiated.
    #[error(
        "the module has a start function, which would run in every sandbox it is instantiated for"
    )]
    HasStart,
}

/// The bytes the module's active data segments put into its memory when
/// instantiated, in their order.
#[derive(Debug, Default)]
pub(crate) struct InitialData {
    /// Each segment's offset and bytes.
    pub segments: Vec<(u64, Vec<u8>)>,
}

/// The code module of `wasm` (the runtime's module, quota gates woven in),
/// and the data its segments held.
pub(crate) fn code_module(wasm: &[u8]) -> Result<(Vec<u8>, InitialData), CodeModuleError> {
    let mut wizer = Wizer::new();
    wizer.init_func(INIT_FUNC);
    let (_, instrumented) = wizer.instrument(wasm).map_err(CodeModuleError::Refused)?;
    without_active_data(&instrumented)
}

/// `wasm` with each active data segment emptied (kept, so segment indices
/// do not change), and what they held.
fn without_active_data(wasm: &[u8]) -> Result<(Vec<u8>, InitialData), CodeModuleError> {
    let mut module = wasm_encoder::Module::new();
    let mut data = InitialData::default();
    for payload in Parser::new(0).parse_all(wasm) {
        let payload = payload?;
        if let Payload::StartSection { .. } = payload {
            return Err(CodeModuleError::HasStart);
        }
        if let Payload::DataSection(reader) = payload {
            let mut section = DataSection::new();
            for (index, segment) in reader.into_iter().enumerate() {
                let segment = segment?;
                match segment.kind {
                    DataKind::Passive => {
                        section.passive(segment.data.iter().copied());
                    }
                    DataKind::Active {
                        memory_index,
                        offset_expr,
                    } => {
                        let offset = constant(&offset_expr)
                            .ok_or(CodeModuleError::PlacedByExpression(index as u32))?;
                        data.segments.push((offset, segment.data.to_vec()));
                        let place = match offset_expr.get_operators_reader().read()? {
                            Operator::I64Const { value } => ConstExpr::i64_const(value),
                            _ => ConstExpr::i32_const(offset as u32 as i32),
                        };
                        section.active(memory_index, &place, std::iter::empty());
                    }
                }
            }
            module.section(&section);
            continue;
        }
        if let Some((id, range)) = payload.as_section() {
            module.section(&RawSection {
                id,
                data: &wasm[range],
            });
        }
    }
    Ok((module.finish(), data))
}

/// The value of a constant offset expression (`i32.const` or `i64.const`).
fn constant(expr: &wasmparser::ConstExpr<'_>) -> Option<u64> {
    let mut reader = expr.get_operators_reader();
    let value = match reader.read().ok()? {
        Operator::I32Const { value } => u64::from(value as u32),
        Operator::I64Const { value } => value as u64,
        _ => return None,
    };
    matches!(reader.read().ok()?, Operator::End).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_moves_out_of_the_code_module_and_globals_are_exported() {
        let wasm = wat::parse_str(
            r#"(module
                (memory (export "memory") 1)
                (global $sp (mut i32) (i32.const 1024))
                (global $k i32 (i32.const 5))
                (data (i32.const 16) "hello")
                (data (i32.const 100) "world!")
                (func (export "wizer.initialize")))"#,
        )
        .unwrap();
        let (code, data) = code_module(&wasm).unwrap();
        assert_eq!(
            data.segments,
            [(16, b"hello".to_vec()), (100, b"world!".to_vec())]
        );
        let mut exports = Vec::new();
        let mut data_bytes = 0;
        for payload in Parser::new(0).parse_all(&code) {
            match payload.unwrap() {
                Payload::ExportSection(reader) => {
                    exports.extend(reader.into_iter().map(|e| e.unwrap().name.to_owned()))
                }
                Payload::DataSection(reader) => {
                    for segment in reader {
                        data_bytes += segment.unwrap().data.len();
                    }
                }
                _ => {}
            }
        }
        assert!(
            exports.contains(&"__wizer_global_0".to_owned()),
            "{exports:?}"
        );
        assert!(
            !exports.iter().any(|e| e == "__wizer_global_1"),
            "{exports:?}"
        );
        assert_eq!(data_bytes, 0, "no data is left in the code");
        wasmparser::validate(&code).unwrap();

        let started = wat::parse_str(r#"(module (func $f) (start $f))"#).unwrap();
        assert!(matches!(
            without_active_data(&started),
            Err(CodeModuleError::HasStart)
        ));
    }
}
