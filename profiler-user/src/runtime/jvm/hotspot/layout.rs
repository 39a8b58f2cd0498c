//! The offsets sparkprof needs from a JVM's VMStructs: its code cache, code
//! blobs and the metadata that names a method. Read by name, never assumed
//! per version; where HotSpot changed a field's shape (JDK 23 made code
//! blobs' code start an offset, and moved `_method` from `CompiledMethod`
//! into `nmethod`), both shapes are known and the tables say which applies.

use super::{HotspotError, vmstructs::VmStructs};
use crate::sys::memory::ReadMemory;

/// Where a code blob's code starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeBegin {
    /// `CodeBlob::_code_begin`, an address (JDK 9 to 22).
    Pointer(u64),
    /// `CodeBlob::_code_offset`, an `int` from the blob's start (JDK 23+).
    Offset(u64),
}

/// Where the template interpreter's code is: `AbstractInterpreter::_code`
/// (a `StubQueue*`), its `_stub_buffer` (start) and `_buffer_limit` (bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InterpreterCode {
    pub code: u64,
    pub stub_buffer: u64,
    pub buffer_limit: u64,
}

/// A method's bytecodes: its `ConstMethod`, which they follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bytecodes {
    pub const_method: u64,
    pub start: u64,
    pub len: u64,
}

/// Offsets (bytes) and sizes of what sparkprof reads in a HotSpot JVM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotspotLayout {
    // The code cache.
    /// Address of `CodeCache::_heaps` (a `GrowableArray<CodeHeap*>*`).
    pub code_cache_heaps: u64,
    /// Address of `CodeCache::_low_bound` / `_high_bound`.
    pub code_cache_low: u64,
    pub code_cache_high: u64,
    pub growable_array_len: u64,
    pub growable_array_data: u64,
    pub code_heap_memory: u64,
    pub code_heap_segmap: u64,
    pub code_heap_log2_segment_size: u64,
    pub virtual_space_low_boundary: u64,
    pub virtual_space_high_boundary: u64,
    /// `VirtualSpace::_high`: the end of what is committed.
    pub virtual_space_high: u64,
    pub heap_block_size: u64,
    /// `HeapBlock::Header::_length`, in segments, and whether it is a
    /// `size_t` (else `uint32_t`, JDK 23+).
    pub heap_block_length: u64,
    pub heap_block_length_is_64: bool,
    pub heap_block_used: u64,
    // Code blobs.
    pub code_blob_name: u64,
    pub code_blob_frame_size: u64,
    pub code_blob_code_begin: CodeBegin,
    pub nmethod_method: u64,
    pub nmethod_compile_id: u64,
    // Naming a method.
    pub method_const_method: u64,
    pub const_method_constants: u64,
    pub const_method_name_index: u64,
    pub const_method_signature_index: u64,
    /// `sizeof(ConstMethod)` (a method's bytecodes follow it) and
    /// `ConstMethod::_code_size`.
    pub const_method_size: u64,
    pub const_method_code_size: u64,
    pub constant_pool_pool_holder: u64,
    pub constant_pool_size: u64,
    pub klass_name: u64,
    pub symbol_length: u64,
    pub symbol_body: u64,
    /// The interpreter's code, where the tables say (else the kernel finds
    /// interpreted frames through the segment map, more slowly).
    pub interpreter: Option<InterpreterCode>,
}

impl HotspotLayout {
    pub fn from_tables(tables: &VmStructs) -> Result<Self, HotspotError> {
        let offset = |ty: &str, field: &str| tables.required_offset(ty, field);
        let address = |ty: &str, field: &str| tables.required_address(ty, field);
        let size = |ty: &str| tables.required_size(ty);
        let first_offset = |candidates: &[(&str, &str)]| tables.first_offset(candidates);

        let code_blob_code_begin = match tables.offset("CodeBlob", "_code_begin") {
            Some(offset) => CodeBegin::Pointer(offset),
            None => CodeBegin::Offset(offset("CodeBlob", "_code_offset")?),
        };
        let length_type = tables
            .type_string("HeapBlock::Header", "_length")
            .ok_or_else(|| HotspotError::MissingField("HeapBlock::Header::_length".into()))?;
        let layout = Self {
            code_cache_heaps: address("CodeCache", "_heaps")?,
            code_cache_low: address("CodeCache", "_low_bound")?,
            code_cache_high: address("CodeCache", "_high_bound")?,
            growable_array_len: first_offset(&[
                ("GrowableArrayBase", "_len"),
                ("GenericGrowableArray", "_len"),
            ])?,
            growable_array_data: offset("GrowableArray<int>", "_data")?,
            code_heap_memory: offset("CodeHeap", "_memory")?,
            code_heap_segmap: offset("CodeHeap", "_segmap")?,
            code_heap_log2_segment_size: offset("CodeHeap", "_log2_segment_size")?,
            virtual_space_low_boundary: offset("VirtualSpace", "_low_boundary")?,
            virtual_space_high_boundary: offset("VirtualSpace", "_high_boundary")?,
            virtual_space_high: offset("VirtualSpace", "_high")?,
            heap_block_size: size("HeapBlock")?,
            heap_block_length: offset("HeapBlock::Header", "_length")?,
            heap_block_length_is_64: matches!(length_type, "size_t" | "uint64_t" | "uintx"),
            heap_block_used: offset("HeapBlock::Header", "_used")?,
            code_blob_name: offset("CodeBlob", "_name")?,
            code_blob_frame_size: offset("CodeBlob", "_frame_size")?,
            code_blob_code_begin,
            nmethod_method: first_offset(&[("nmethod", "_method"), ("CompiledMethod", "_method")])?,
            nmethod_compile_id: first_offset(&[
                ("nmethod", "_compile_id"),
                ("CompiledMethod", "_compile_id"),
            ])?,
            method_const_method: offset("Method", "_constMethod")?,
            const_method_constants: offset("ConstMethod", "_constants")?,
            const_method_name_index: offset("ConstMethod", "_name_index")?,
            const_method_signature_index: offset("ConstMethod", "_signature_index")?,
            const_method_size: size("ConstMethod")?,
            const_method_code_size: offset("ConstMethod", "_code_size")?,
            constant_pool_pool_holder: offset("ConstantPool", "_pool_holder")?,
            constant_pool_size: size("ConstantPool")?,
            klass_name: offset("Klass", "_name")?,
            symbol_length: offset("Symbol", "_length")?,
            symbol_body: offset("Symbol", "_body")?,
            interpreter: (|| {
                Some(InterpreterCode {
                    code: tables.address("AbstractInterpreter", "_code")?,
                    stub_buffer: tables.offset("StubQueue", "_stub_buffer")?,
                    buffer_limit: tables.offset("StubQueue", "_buffer_limit")?,
                })
            })(),
        };
        layout.check()?;
        Ok(layout)
    }

    /// Where the bytecodes of `method` are.
    pub fn bytecodes(&self, memory: &impl ReadMemory, method: u64) -> Option<Bytecodes> {
        let const_method = memory.read_u64(method + self.method_const_method).ok()?;
        let len = memory
            .read_u16(const_method + self.const_method_code_size)
            .ok()?;
        Some(Bytecodes {
            const_method,
            start: const_method + self.const_method_size,
            len: u64::from(len),
        })
    }

    /// Bounds that any real HotSpot keeps (a table of garbage that happens
    /// to have every name does not).
    fn check(&self) -> Result<(), HotspotError> {
        let small = [
            ("GrowableArray::_len", self.growable_array_len),
            ("GrowableArray::_data", self.growable_array_data),
            ("CodeHeap::_memory", self.code_heap_memory),
            ("CodeHeap::_segmap", self.code_heap_segmap),
            (
                "CodeHeap::_log2_segment_size",
                self.code_heap_log2_segment_size,
            ),
            ("sizeof(HeapBlock)", self.heap_block_size),
            ("CodeBlob::_name", self.code_blob_name),
            ("CodeBlob::_frame_size", self.code_blob_frame_size),
            ("nmethod::_method", self.nmethod_method),
            ("nmethod::_compile_id", self.nmethod_compile_id),
            ("Method::_constMethod", self.method_const_method),
            ("ConstMethod::_constants", self.const_method_constants),
            ("ConstMethod::_name_index", self.const_method_name_index),
            ("sizeof(ConstMethod)", self.const_method_size),
            ("ConstMethod::_code_size", self.const_method_code_size),
            ("ConstantPool::_pool_holder", self.constant_pool_pool_holder),
            ("sizeof(ConstantPool)", self.constant_pool_size),
            ("Klass::_name", self.klass_name),
            ("Symbol::_length", self.symbol_length),
            ("Symbol::_body", self.symbol_body),
        ];
        match small.iter().find(|(_, value)| *value >= 4096) {
            Some((what, value)) => Err(HotspotError::Garbage(format!("{what} is {value}"))),
            None if self.heap_block_size == 0 || self.constant_pool_size == 0 => Err(
                HotspotError::Garbage("HeapBlock or ConstantPool has no size".into()),
            ),
            None => Ok(()),
        }
    }
}
