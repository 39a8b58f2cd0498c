//! Java frames walked without frame pointers, as HotSpot's own stack walker
//! steps them, from userspace: the reference the kernel's walker is held
//! to, and a way to see a blocked thread's Java stack.
//!
//! The walk starts at a thread's last Java frame (`JavaThread::_anchor`,
//! published whenever it leaves Java for the VM or native code) and, for
//! each pc in the code cache, steps by the frame's kind (x86-64):
//! - the interpreter keeps rbp as its frame pointer: `Method*` at fp-24,
//!   the bytecode pointer at fp-64, the sender's sp at fp-8, the return
//!   address at fp+8, the caller's rbp at fp;
//! - compiled code (and stubs with a frame) has a fixed frame of
//!   `CodeBlob::_frame_size` words: the caller's sp is sp + size, the
//!   return address just below it and the saved rbp below that;
//! - stubs without a frame (the call stub, adapters) keep rbp: step by it;
//!   `vtable chunks` leave only a return address.
//!
//! It ends where the pc leaves the code cache (the call stub returns into
//! `JavaCalls::call_helper`), after [`MAX_FRAMES`], or where a step does not
//! move up the stack.

use super::{
    HotspotError,
    code_cache::{BlobKind, CodeCache},
    layout::HotspotLayout,
    threads::ThreadLayout,
};
use crate::sys::memory::ReadMemory;

/// Frames walked at most.
pub const MAX_FRAMES: usize = 1024;
/// The interpreter frame's slots, in words from rbp (`frame_x86.hpp`).
const INTERPRETER_METHOD: i64 = -3;
const INTERPRETER_BCP: i64 = -8;
/// Every stack frame is below this distance from its callee's sp.
const MAX_FRAME_BYTES: u64 = 1 << 20;

/// One Java frame (or VM stub) of a walk, leaf first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JavaFrame {
    /// Run by the interpreter: its `Method*` and bytecode index (`None`
    /// where the bytecode pointer is not in the method's code, e.g. a native
    /// method's entry).
    Interpreted { method: u64, bci: Option<u32> },
    /// Compiled: the `Method*` of its nmethod (a native wrapper too).
    Compiled { method: u64, nmethod: u64 },
    /// A VM stub, by HotSpot's name for it.
    Stub(String),
}

/// The Java frames of a thread that is out of Java now (blocked, in
/// native code or in the VM), from its last Java frame; empty when it
/// has none (running Java code, or no Java frame at all).
pub fn walk_from_anchor(
    memory: &impl ReadMemory,
    layout: &HotspotLayout,
    threads: &ThreadLayout,
    cache: &CodeCache,
    java_thread: u64,
) -> Result<Vec<JavaFrame>, HotspotError> {
    let anchor = java_thread + threads.anchor;
    let sp = memory.read_u64(anchor + threads.last_java_sp)?;
    if sp == 0 {
        return Ok(Vec::new());
    }
    let fp = memory.read_u64(anchor + threads.last_java_fp)?;
    let pc = match memory.read_u64(anchor + threads.last_java_pc)? {
        0 => memory.read_u64(sp - 8)?,
        pc => pc,
    };
    Ok(walk(memory, layout, cache, pc, sp, fp))
}

/// Walks from (pc, sp, fp) while the pc is in the code cache.
pub fn walk(
    memory: &impl ReadMemory,
    layout: &HotspotLayout,
    cache: &CodeCache,
    mut pc: u64,
    mut sp: u64,
    mut fp: u64,
) -> Vec<JavaFrame> {
    let word = |addr: u64| memory.read_u64(addr).ok();
    let slot = |fp: u64, words: i64| word(fp.wrapping_add_signed(words * 8));
    let mut frames = Vec::new();
    while frames.len() < MAX_FRAMES {
        let Some(blob) = cache.blob_at(memory, layout, pc) else {
            break;
        };
        let next = if blob.kind == BlobKind::Interpreter {
            if fp < sp || fp - sp > MAX_FRAME_BYTES {
                break;
            }
            let Some(method) = slot(fp, INTERPRETER_METHOD) else {
                break;
            };
            let bci = slot(fp, INTERPRETER_BCP).and_then(|bcp| bci(memory, layout, method, bcp));
            frames.push(JavaFrame::Interpreted { method, bci });
            // sender sp, return address, caller's rbp.
            (slot(fp, -1), slot(fp, 1), slot(fp, 0))
        } else {
            let vtable_chunks =
                matches!(&blob.kind, BlobKind::Stub(name) if name == "vtable chunks");
            frames.push(match blob.kind {
                BlobKind::Stub(name) => JavaFrame::Stub(name),
                _ => JavaFrame::Compiled {
                    method: blob.method,
                    nmethod: blob.address,
                },
            });
            if blob.frame_size > 0 {
                let sender = sp + 8 * u64::from(blob.frame_size);
                (Some(sender), word(sender - 8), word(sender - 16))
            } else if vtable_chunks {
                // Only a return address on the stack.
                (Some(sp + 8), word(sp), Some(fp))
            } else {
                // No frame of its own: rbp is a frame record.
                if fp < sp || fp - sp > MAX_FRAME_BYTES {
                    break;
                }
                (Some(fp + 16), slot(fp, 1), slot(fp, 0))
            }
        };
        match next {
            (Some(next_sp), Some(next_pc), Some(next_fp)) if next_sp > sp => {
                (sp, pc, fp) = (next_sp, next_pc, next_fp);
            }
            _ => break,
        }
    }
    frames
}

/// The bytecode index of `bcp` in `method`, if it is in its bytecodes.
fn bci(memory: &impl ReadMemory, layout: &HotspotLayout, method: u64, bcp: u64) -> Option<u32> {
    let code = layout.bytecodes(memory, method)?;
    let bci = bcp.checked_sub(code.start)?;
    (bci < code.len).then_some(bci as u32)
}
