//! A JVM's code cache, read from userspace: its heaps (non-methods,
//! profiled and non-profiled methods), which code blob holds an address
//! (through each heap's segment map, as HotSpot's own `CodeHeap::find_start`
//! does), and what a blob is.
//!
//! The segment map has one byte per segment of the heap: 0 where a block
//! starts, `0xFF` where nothing was ever allocated, and otherwise how many
//! segments to step back towards the block's start (again, for blocks
//! longer than 254 segments).

use super::{
    HotspotError,
    layout::{CodeBegin, HotspotLayout},
};
use crate::sys::memory::ReadMemory;

/// Steps back through a segment map before giving up (a block of 16 MiB
/// of 128-byte segments needs 517; HotSpot's own limit is the block).
const MAX_HOPS: usize = 1024;
/// Heaps in a code cache (HotSpot has at most three).
const MAX_HEAPS: u64 = 8;
/// `free_sentinel` in `CodeHeap`'s segment map.
const FREE: u8 = 0xFF;

/// One heap of the code cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodeHeap {
    /// Reserved range of its memory.
    pub low: u64,
    pub high: u64,
    /// End of its committed memory (what has ever held code).
    pub committed: u64,
    /// Its segment map.
    pub segmap: u64,
    pub log2_segment_size: u32,
}

/// What a code blob is (from its name, as HotSpot's own names them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlobKind {
    /// A compiled Java method.
    Nmethod,
    /// A JNI wrapper or method-handle intrinsic.
    NativeNmethod,
    /// The template interpreter.
    Interpreter,
    /// Any stub (its name, e.g. `StubRoutines (1)`).
    Stub(String),
}

/// A code blob found at an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeBlob {
    pub address: u64,
    pub kind: BlobKind,
    /// Its frame, in words (return address and saved frame pointer included).
    pub frame_size: u32,
    pub code_begin: u64,
    /// For [`BlobKind::Nmethod`]: its `Method*` and compile id.
    pub method: u64,
    pub compile_id: u32,
}

/// What tells, at a later drain, that a blob is still the one it was: its
/// heap block in use, its name (a pointer to a static string, one per
/// kind) and, for a compiled method, its compile id (a JVM never gives one
/// twice), without walking the segment map to it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobMark {
    address: u64,
    name: u64,
    compile_id: Option<u32>,
}

impl BlobMark {
    /// `blob`'s mark, as it is now.
    pub fn of(memory: &impl ReadMemory, layout: &HotspotLayout, blob: &CodeBlob) -> Option<Self> {
        Some(Self {
            address: blob.address,
            name: memory.read_u64(blob.address + layout.code_blob_name).ok()?,
            compile_id: matches!(blob.kind, BlobKind::Nmethod | BlobKind::NativeNmethod)
                .then_some(blob.compile_id),
        })
    }

    /// The bytes [`Self::still_there`] reads: from its heap block's header
    /// to the last field (to read them ahead, with other blobs').
    pub fn span(&self, layout: &HotspotLayout) -> (u64, usize) {
        let last = (layout.code_blob_name + 8).max(layout.nmethod_compile_id + 4);
        let start = self.address.wrapping_sub(layout.heap_block_size);
        (start, (layout.heap_block_size + last) as usize)
    }

    /// Whether the blob is still there, as it was.
    pub fn still_there(&self, memory: &impl ReadMemory, layout: &HotspotLayout) -> bool {
        let block = self.address.wrapping_sub(layout.heap_block_size);
        block_in_use(memory, layout, block)
            && memory
                .read_u64(self.address + layout.code_blob_name)
                .is_ok_and(|name| name == self.name)
            && self.compile_id.is_none_or(|id| {
                memory
                    .read_u32(self.address + layout.nmethod_compile_id)
                    .is_ok_and(|now| now == id)
            })
    }
}

/// The code cache of one JVM.
#[derive(Debug, Clone)]
pub struct CodeCache {
    pub heaps: Vec<CodeHeap>,
}

impl CodeCache {
    pub fn read(memory: &impl ReadMemory, layout: &HotspotLayout) -> Result<Self, HotspotError> {
        let array = memory.read_u64(layout.code_cache_heaps)?;
        if array == 0 {
            return Err(HotspotError::NotReady("CodeCache::_heaps is NULL"));
        }
        let len = u64::from(memory.read_u32(array + layout.growable_array_len)?);
        if len == 0 || len > MAX_HEAPS {
            return Err(HotspotError::Garbage(format!("{len} code heaps")));
        }
        let data = memory.read_u64(array + layout.growable_array_data)?;
        let mut heaps = Vec::new();
        for i in 0..len {
            let heap = memory.read_u64(data + 8 * i)?;
            let memory_space = heap + layout.code_heap_memory;
            let segmap_space = heap + layout.code_heap_segmap;
            let log2 = memory.read_u32(heap + layout.code_heap_log2_segment_size)?;
            let heap = CodeHeap {
                low: memory.read_u64(memory_space + layout.virtual_space_low_boundary)?,
                high: memory.read_u64(memory_space + layout.virtual_space_high_boundary)?,
                committed: memory.read_u64(memory_space + layout.virtual_space_high)?,
                segmap: memory.read_u64(segmap_space + layout.virtual_space_low_boundary)?,
                log2_segment_size: log2,
            };
            if heap.low >= heap.high
                || !(heap.low..=heap.high).contains(&heap.committed)
                || !(4..=16).contains(&log2)
                || heap.segmap == 0
            {
                return Err(HotspotError::Garbage(format!("code heap {heap:x?}")));
            }
            heaps.push(heap);
        }
        Ok(Self { heaps })
    }

    /// The heap holding `pc`.
    pub fn heap_of(&self, pc: u64) -> Option<&CodeHeap> {
        self.heaps.iter().find(|h| h.low <= pc && pc < h.high)
    }

    /// The start of the block holding `pc` (its `HeapBlock` header), by
    /// the segment map; `None` for an address in no block.
    pub fn block_of(&self, memory: &impl ReadMemory, pc: u64) -> Option<u64> {
        let heap = self.heap_of(pc)?;
        let mut segment = (pc - heap.low) >> heap.log2_segment_size;
        for _ in 0..MAX_HOPS {
            let mut byte = [0u8];
            memory.read(heap.segmap + segment, &mut byte).ok()?;
            match byte[0] {
                0 => return Some(heap.low + (segment << heap.log2_segment_size)),
                FREE => return None,
                back => segment = segment.checked_sub(u64::from(back))?,
            }
        }
        None
    }

    /// The code blob holding `pc`, if it is in a used block.
    pub fn blob_at(
        &self,
        memory: &impl ReadMemory,
        layout: &HotspotLayout,
        pc: u64,
    ) -> Option<CodeBlob> {
        let block = self.block_of(memory, pc)?;
        used_blob(memory, layout, block)
    }

    /// [`Self::blob_at`], and the end of the block that holds the blob:
    /// every pc below it, from the blob's address, is the blob's.
    pub fn blob_and_end_at(
        &self,
        memory: &impl ReadMemory,
        layout: &HotspotLayout,
        pc: u64,
    ) -> Option<(CodeBlob, u64)> {
        let heap = self.heap_of(pc)?;
        let block = self.block_of(memory, pc)?;
        let blob = used_blob(memory, layout, block)?;
        let end = block.checked_add(
            block_length(memory, layout, block)?
                .checked_mul(1u64.checked_shl(heap.log2_segment_size)?)?,
        )?;
        (pc < end).then_some((blob, end))
    }

    /// The blob of every used block of every heap, in address order. For
    /// tests and `doctor`; the sampler looks up one address.
    pub fn blobs(&self, memory: &impl ReadMemory, layout: &HotspotLayout) -> Vec<CodeBlob> {
        let mut blobs = Vec::new();
        for heap in &self.heaps {
            let segments = (heap.committed - heap.low) >> heap.log2_segment_size;
            let Ok(map) = memory.read_vec(heap.segmap, segments as usize) else {
                continue;
            };
            let mut segment = 0u64;
            while segment < segments {
                if map[segment as usize] != 0 {
                    segment += 1;
                    continue;
                }
                let block = heap.low + (segment << heap.log2_segment_size);
                let length = block_length(memory, layout, block);
                blobs.extend(used_blob(memory, layout, block));
                segment += length.filter(|&l| l > 0).unwrap_or(1);
            }
        }
        blobs
    }
}

/// The length of the block at `block`, in segments.
fn block_length(memory: &impl ReadMemory, layout: &HotspotLayout, block: u64) -> Option<u64> {
    if layout.heap_block_length_is_64 {
        memory.read_u64(block + layout.heap_block_length).ok()
    } else {
        memory
            .read_u32(block + layout.heap_block_length)
            .ok()
            .map(u64::from)
    }
}

/// The code blob of the block at `block`, if the block is in use.
fn used_blob(memory: &impl ReadMemory, layout: &HotspotLayout, block: u64) -> Option<CodeBlob> {
    if !block_in_use(memory, layout, block) {
        return None;
    }
    read_blob(memory, layout, block + layout.heap_block_size).ok()
}

/// Whether the heap block at `block` holds a blob (`false` if unreadable).
fn block_in_use(memory: &impl ReadMemory, layout: &HotspotLayout, block: u64) -> bool {
    let mut used = [0u8];
    memory
        .read(block + layout.heap_block_used, &mut used)
        .is_ok()
        && used[0] != 0
}

/// Reads the code blob at `address`.
pub fn read_blob(
    memory: &impl ReadMemory,
    layout: &HotspotLayout,
    address: u64,
) -> Result<CodeBlob, HotspotError> {
    let name_ptr = memory.read_u64(address + layout.code_blob_name)?;
    let name = memory.read_c_string(name_ptr, 128)?;
    let kind = match name.as_str() {
        "nmethod" => BlobKind::Nmethod,
        "native nmethod" => BlobKind::NativeNmethod,
        "Interpreter" => BlobKind::Interpreter,
        _ => BlobKind::Stub(name),
    };
    let frame_size = memory.read_u32(address + layout.code_blob_frame_size)?;
    let code_begin = match layout.code_blob_code_begin {
        CodeBegin::Pointer(offset) => memory.read_u64(address + offset)?,
        CodeBegin::Offset(offset) => address + u64::from(memory.read_u32(address + offset)?),
    };
    let (method, compile_id) = match kind {
        BlobKind::Nmethod | BlobKind::NativeNmethod => (
            memory.read_u64(address + layout.nmethod_method)?,
            memory.read_u32(address + layout.nmethod_compile_id)?,
        ),
        _ => (0, 0),
    };
    Ok(CodeBlob {
        address,
        kind,
        frame_size,
        code_begin,
        method,
        compile_id,
    })
}
