//! Patched in by mcp-code-sandbox (see `vendor/README.md`).
//!
//! [`CompactBuffer`]: what linking reads of a compiled function's
//! `MachBufferFinalized`, each part in an allocation of exactly its size.
//!
//! A module's compiled functions are all held until they are linked.
//! `MachBufferFinalized` keeps its parts in `SmallVec`s whose inline arrays
//! take about 4 KiB per function even when they spill to the heap, and a
//! source location for every run of instructions, which only an address map
//! reads (its map is made from the full buffer, before this copy, as are the
//! breakpoints' patch points, the only reader of patchable call sites). For a
//! module of 89,000 functions that was several hundred MiB of the compile's
//! peak.

use std::ops::Range;

use cranelift_codegen::{
    Final, FinalizedMachCallSite, FinalizedMachExceptionHandler, FinalizedMachReloc,
    MachBufferDebugTagList, MachBufferFinalized, MachBufferFrameLayout, MachDebugTagPos, MachTrap,
    binemit::CodeOffset, ir,
};

/// A compiled function's code and the records linking reads of it.
pub struct CompactBuffer {
    data: Box<[u8]>,
    relocs: Box<[FinalizedMachReloc]>,
    traps: Box<[MachTrap]>,
    call_sites: Box<[CallSite]>,
    exception_handlers: Box<[FinalizedMachExceptionHandler]>,
    debug_tags: Box<[DebugTags]>,
    user_stack_maps: Box<[(CodeOffset, u32, ir::UserStackMap)]>,
    frame_layout: Option<MachBufferFrameLayout>,
    /// The required alignment of the code.
    pub alignment: u32,
    /// The forms of NOP that patchable call sites are filled with.
    pub nop_units: Vec<Vec<u8>>,
}

/// A call site: its return address, frame offset and the range of its
/// exception handlers.
struct CallSite {
    ret_addr: CodeOffset,
    frame_offset: Option<u32>,
    handlers: Range<usize>,
}

/// The debug tags at one offset.
struct DebugTags {
    offset: CodeOffset,
    pos: MachDebugTagPos,
    tags: Box<[ir::DebugTag]>,
}

impl CompactBuffer {
    /// A copy of what linking reads of `buffer`.
    pub fn new(buffer: &MachBufferFinalized<Final>) -> Self {
        let mut call_sites = Vec::new();
        let mut exception_handlers = Vec::new();
        for site in buffer.call_sites() {
            let start = exception_handlers.len();
            exception_handlers.extend_from_slice(site.exception_handlers);
            call_sites.push(CallSite {
                ret_addr: site.ret_addr,
                frame_offset: site.frame_offset,
                handlers: start..exception_handlers.len(),
            });
        }
        let debug_tags = buffer
            .debug_tags()
            .map(|list| DebugTags {
                offset: list.offset,
                pos: list.pos,
                tags: list.tags.into(),
            })
            .collect();
        Self {
            data: buffer.data().into(),
            relocs: buffer.relocs().into(),
            traps: buffer.traps().into(),
            call_sites: call_sites.into(),
            exception_handlers: exception_handlers.into(),
            debug_tags,
            user_stack_maps: buffer.user_stack_maps().into(),
            frame_layout: buffer.frame_layout().cloned(),
            alignment: buffer.alignment,
            nop_units: buffer.nop_units.clone(),
        }
    }

    /// The code bytes.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// The external relocations of the code.
    pub fn relocs(&self) -> &[FinalizedMachReloc] {
        &self.relocs
    }

    /// The trap records of the code.
    pub fn traps(&self) -> &[MachTrap] {
        &self.traps
    }

    /// The user stack maps of the code.
    pub fn user_stack_maps(&self) -> &[(CodeOffset, u32, ir::UserStackMap)] {
        &self.user_stack_maps
    }

    /// The call sites, each with its exception handlers.
    pub fn call_sites(&self) -> impl Iterator<Item = FinalizedMachCallSite<'_>> + '_ {
        self.call_sites.iter().map(|site| FinalizedMachCallSite {
            ret_addr: site.ret_addr,
            frame_offset: site.frame_offset,
            exception_handlers: &self.exception_handlers[site.handlers.clone()],
        })
    }

    /// The debug tags, sorted by offset.
    pub fn debug_tags(&self) -> impl Iterator<Item = MachBufferDebugTagList<'_>> + '_ {
        self.debug_tags.iter().map(|list| MachBufferDebugTagList {
            offset: list.offset,
            pos: list.pos,
            tags: &list.tags,
        })
    }

    /// The frame layout, if known.
    pub fn frame_layout(&self) -> Option<&MachBufferFrameLayout> {
        self.frame_layout.as_ref()
    }
}
