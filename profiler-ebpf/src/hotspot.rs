//! The user stacks of HotSpot JVMs, walked through Java frames without
//! frame pointers (executors run without `-XX:+PreserveFramePointer`, and
//! compiled Java code then uses rbp as a general register, so a frame
//! pointer walk ends at the first compiled frame).
//!
//! For a process userspace registered (`HOTSPOT_PROCS`: its code cache's
//! heaps and segment maps, and a few `CodeBlob` offsets, all read from the
//! JVM's own VMStructs), the sampler hands the sample to `hotspot_walk`,
//! which steps frame by frame as HotSpot's own stack walker does (x86-64):
//! - a pc outside the code cache is native code: step by the frame
//!   pointer (libjvm, libc's callers and JNI libraries keep one);
//! - a pc inside it is found in its heap's segment map, and its code
//!   blob says how to step:
//!   - the interpreter keeps rbp as its frame pointer: `Method*` at fp-24,
//!     the bytecode pointer at fp-64 (live in r13 in the leaf frame), the
//!     sender's sp at fp-8;
//!   - compiled code and stubs with a frame have a fixed frame of
//!     `_frame_size` words: the return address is just below sp + size,
//!     the caller's rbp below that;
//!   - `vtable chunks` and frameless method-handle intrinsics leave only a
//!     return address; other frameless stubs (the call stub, adapters)
//!     keep rbp.
//!
//! Native code does not always keep a frame pointer (libjvm's leaf
//! routines, libc), and a frame-pointer walk out of it may end before the
//! Java code that called it. A Java thread that left Java code for the VM
//! or a native method says where its last Java frame is, in its
//! `JavaFrameAnchor` (as async-profiler reads it): for a sample whose leaf
//! is native, the walker reads it once (`HOTSPOT_THREADS` gives the
//! thread's `JavaThread*`) and resumes there when the native walk fails
//! or would pass it. Native frames all lie below that frame on the stack.
//!
//! Every caller of Java code is Java code or a stub, so a compiled frame's
//! return address must lie in the code cache: that check catches a leaf
//! sampled in its prologue or epilogue (where the frame is not whole), and
//! the walker then tries the two shapes of a frame being built.
//!
//! The walk records (kind, address, data) per frame; naming a `Method*`
//! or a compiled pc is left to userspace. It has its own depth
//! (`HOTSPOT_MAX_FRAMES`, not `perf_event_max_stack`): the program walks
//! `HOTSPOT_FRAMES_PER_RUN` frames, then tail-calls itself.

use aya_ebpf::{
    EbpfContext,
    bindings::{BPF_F_MMAPABLE, BPF_F_NO_PREALLOC, pt_regs},
    helpers::{
        bpf_get_current_task_btf, bpf_probe_read_user, bpf_task_pt_regs,
        generated::bpf_probe_read_kernel,
    },
    macros::{map, perf_event},
    maps::{Array, HashMap, PerCpuArray, ProgramArray},
    programs::PerfEventContext,
};
use profiler_common::{
    DEFAULT_HOTSPOT_STACK_ENTRIES, HOTSPOT_FINISH_SLOT, HOTSPOT_FRAMES_PER_RUN, HOTSPOT_MAX_FRAMES,
    HOTSPOT_SHORT_FRAMES, HOTSPOT_WALK_SLOT, HotspotFrame, HotspotProcInfo, HotspotShortStack,
    HotspotStack, MAX_HOTSPOT_PROCESSES, MAX_HOTSPOT_THREADS, NewStack, RuntimeThread, hashed,
    hotspot_frame, stat,
};

use crate::{
    hashed_stacks::{FNV_OFFSET, Pooled, StackSink, fnv, key},
    logs::{Log, mark_hashed},
    on_cpu::{LOG_PER_CPU, count_sample, thread_facts},
    stats::count_stat,
    user_memory::{read_u32, read_u64},
};

#[map]
static HOTSPOT_PROCS: HashMap<u32, HotspotProcInfo> =
    HashMap::with_max_entries(MAX_HOTSPOT_PROCESSES, 0);

/// Walked JVMs' threads by tid (userspace keeps them current each drain;
/// a thread younger than that is walked without its anchor).
#[map]
static HOTSPOT_THREADS: HashMap<u32, RuntimeThread> =
    HashMap::with_max_entries(MAX_HOTSPOT_THREADS, BPF_F_NO_PREALLOC);

// Large values, allocated as stacks are filed (a drain clears them).
#[map]
static HOTSPOT_STACKS_0: HashMap<u64, HotspotStack> =
    HashMap::with_max_entries(DEFAULT_HOTSPOT_STACK_ENTRIES, BPF_F_NO_PREALLOC);
#[map]
static HOTSPOT_STACKS_1: HashMap<u64, HotspotStack> =
    HashMap::with_max_entries(DEFAULT_HOTSPOT_STACK_ENTRIES, BPF_F_NO_PREALLOC);
#[map]
static HOTSPOT_SHORT_STACKS_0: HashMap<u64, HotspotShortStack> =
    HashMap::with_max_entries(DEFAULT_HOTSPOT_STACK_ENTRIES, 0);
#[map]
static HOTSPOT_SHORT_STACKS_1: HashMap<u64, HotspotShortStack> =
    HashMap::with_max_entries(DEFAULT_HOTSPOT_STACK_ENTRIES, 0);

/// Each CPU's short stacks of a buffer under their hashes, filed before any
/// go to the map (see `crate::logs`): at most one a sample, so as many
/// slots a CPU as its sample log (`LOG_PER_CPU`). A stack sampled twice in
/// a drain is logged twice; most JVM samples' stacks are new, and a hash
/// map lookup and insert of 2 KiB cost the kernel more than the copy, and
/// userspace a walk of the map's buckets at every drain (3.8 % of
/// sparkprof's CPU on a Spark host).
#[map]
static HOTSPOT_SHORT_LOG_0: Array<NewStack<HotspotShortStack>> =
    Array::with_max_entries(1, BPF_F_MMAPABLE);
#[map]
static HOTSPOT_SHORT_LOG_1: Array<NewStack<HotspotShortStack>> =
    Array::with_max_entries(1, BPF_F_MMAPABLE);
#[map]
static HOTSPOT_LOG_LENGTHS: PerCpuArray<u32> = PerCpuArray::with_max_entries(2, 0);

/// `hotspot_walk` and `hotspot_finish` (set by userspace).
#[map]
static HOTSPOT_WALKER: ProgramArray = ProgramArray::with_max_entries(2, 0);

/// A walk in progress, carried from one run of the walker to the next.
#[repr(C)]
struct Walk {
    pc: u64,
    sp: u64,
    fp: u64,
    /// The leaf frame's r13: the interpreter's live bytecode pointer.
    r13: u64,
    /// FNV-1a over the frames so far.
    hash: u64,
    buffer: u32,
    /// Tail calls made so far.
    runs: u32,
    /// Non-zero once the walk has ended.
    done: u32,
    _pad: u32,
    /// The thread's last Java frame while the walk is in the native
    /// frames above it (`anchor_sp` 0: none, or already resumed there).
    anchor_sp: u64,
    anchor_pc: u64,
    anchor_fp: u64,
    stack: HotspotStack,
}

#[map]
static HOTSPOT_WALK: PerCpuArray<Walk> = PerCpuArray::with_max_entries(1, 0);

/// Tail calls a walk makes at most to itself (the kernel allows 33: one
/// is left to finish).
const MAX_TAIL_CALLS: u32 = 32;
/// Steps back through a segment map before giving up: a block of 254
/// segments or fewer (32 KiB of 128-byte segments) needs one hop, and each
/// 254 more one more; the interpreter, the one large blob, is known by its
/// range instead.
const MAX_SEGMAP_HOPS: usize = 8;
/// `free_sentinel` in a segment map.
const SEGMAP_FREE: u8 = 0xFF;
/// No frame is larger than this (an interpreter or native frame pointer
/// further up the stack is not one).
const MAX_FRAME_BYTES: u64 = 8 << 20;
/// The end of x86-64 user space (47-bit addresses).
const USER_SPACE_END: u64 = 0x0000_8000_0000_0000;

/// The first eight bytes of the code blob names that decide a step, as
/// little-endian words (HotSpot's own names, the same in JDK 9 to 25).
const NAME_NMETHOD: u64 = u64::from_le_bytes(*b"nmethod\0");
const NAME_NATIVE_NMETHOD: u64 = u64::from_le_bytes(*b"native n");
const NAME_INTERPRETER: u64 = u64::from_le_bytes(*b"Interpre");
const NAME_VTABLE_CHUNKS: u64 = u64::from_le_bytes(*b"vtable c");

/// The interpreter frame's slots, in words from rbp (`frame_x86.hpp`):
/// bcp (-8) up to the return address (+1), read at once.
const INTERPRETER_SLOTS: usize = 10;
const SLOT_BCP: usize = 0;
const SLOT_METHOD: usize = 5;
const SLOT_SENDER_SP: usize = 7;
const SLOT_LINK: usize = 8;
const SLOT_RETURN: usize = 9;

/// Whether the kernel walks process `tgid`'s Java frames.
#[inline(always)]
pub fn is_walked_jvm(tgid: u32) -> bool {
    unsafe { HOTSPOT_PROCS.get(&tgid) }.is_some()
}

/// Hands the sample to the walker if its process is a registered JVM;
/// returns (without having counted it) if not, or if the tail call fails.
#[inline(always)]
pub fn walk_if_jvm(ctx: &PerfEventContext, tgid: u32, buffer: u32) {
    let Some(info) = (unsafe { HOTSPOT_PROCS.get(&tgid) }) else {
        return;
    };
    let Some(walk) = HOTSPOT_WALK.get_ptr_mut(0) else {
        return;
    };
    let walk = unsafe { &mut *walk };
    // The registers saved on entry to the kernel (or to this interrupt
    // from user mode): the thread's user state either way.
    let regs = unsafe { bpf_task_pt_regs(bpf_get_current_task_btf()) } as *const pt_regs;
    if regs.is_null() {
        return;
    }
    unsafe {
        walk.pc = (*regs).rip;
        walk.sp = (*regs).rsp;
        walk.fp = (*regs).rbp;
        walk.r13 = (*regs).r13;
    }
    walk.hash = FNV_OFFSET;
    walk.buffer = buffer;
    walk.runs = 0;
    walk.done = 0;
    walk.stack.len = 0;
    walk.stack.truncated = 0;
    walk.anchor_sp = 0;
    if !in_code_cache(info, walk.pc) {
        last_java_frame(info, tgid, ctx.pid(), walk);
    }
    count_stat(stat::HOTSPOT_WALKS);
    unsafe { HOTSPOT_WALKER.tail_call(ctx, HOTSPOT_WALK_SLOT) };
}

/// Steps up to `HOTSPOT_FRAMES_PER_RUN` frames, then runs again or hands
/// over to `hotspot_finish`. (Two programs, so that the verifier checks
/// the walk's loop without the counting after it.)
#[perf_event]
pub fn hotspot_walk(ctx: PerfEventContext) -> u32 {
    let Some(walk) = HOTSPOT_WALK.get_ptr_mut(0) else {
        return 0;
    };
    let walk = unsafe { &mut *walk };
    if let Some(info) = unsafe { HOTSPOT_PROCS.get(&ctx.tgid()) } {
        for _ in 0..HOTSPOT_FRAMES_PER_RUN {
            if walk.done != 0 {
                break;
            }
            step(info, walk);
        }
    } else {
        // Forgotten since the walk began (it exited): count what there is.
        walk.done = 1;
    }
    if walk.done == 0 {
        if walk.runs < MAX_TAIL_CALLS {
            walk.runs += 1;
            unsafe { HOTSPOT_WALKER.tail_call(&ctx, HOTSPOT_WALK_SLOT) };
        }
        // Out of runs: the stack is cut here.
        walk.stack.truncated = 1;
    }
    unsafe { HOTSPOT_WALKER.tail_call(&ctx, HOTSPOT_FINISH_SLOT) };
    // Only if the finishing program is missing: the sample counts with a
    // frame-pointer walk.
    if let Some(facts) = thread_facts(ctx.tgid(), ctx.pid()) {
        count_sample(&ctx, walk.buffer, 0, facts, false);
    }
    0
}

/// Files the walked stack and counts the sample with it.
#[perf_event]
pub fn hotspot_finish(ctx: PerfEventContext) -> u32 {
    let Some(walk) = HOTSPOT_WALK.get_ptr_mut(0) else {
        return 0;
    };
    let walk = unsafe { &mut *walk };
    let hash = walk.hash ^ u64::from(walk.stack.truncated);
    let stack = if walk.stack.len == 0 {
        0
    } else if walk.stack.len as usize <= HOTSPOT_SHORT_FRAMES {
        // The walk's first bytes are the short stack (see its type).
        let short = unsafe { &*core::ptr::addr_of!(walk.stack).cast::<HotspotShortStack>() };
        match log_short(walk.buffer, hash, short) {
            Some(key) => key,
            None => {
                mark_hashed(hashed::HOTSPOT_SHORT + walk.buffer);
                Pooled {
                    map: if walk.buffer == 0 {
                        &HOTSPOT_SHORT_STACKS_0
                    } else {
                        &HOTSPOT_SHORT_STACKS_1
                    },
                    lost_stat: stat::HOTSPOT_STACKS_LOST,
                }
                .file(hash, short)
            }
        }
    } else {
        mark_hashed(hashed::HOTSPOT_LONG + walk.buffer);
        Pooled {
            map: if walk.buffer == 0 {
                &HOTSPOT_STACKS_0
            } else {
                &HOTSPOT_STACKS_1
            },
            lost_stat: stat::HOTSPOT_STACKS_LOST,
        }
        .file(hash, &walk.stack)
    };
    // The facts the sampler just kept on this CPU; a JVM: no Python
    // frames to look for.
    if let Some(facts) = thread_facts(ctx.tgid(), ctx.pid()) {
        count_sample(&ctx, walk.buffer, stack, facts, false);
    }
    0
}

/// Files `short` under `hash` in this CPU's log of `buffer`; its key, or
/// `None` if the log is full (or the copy failed: the slot then names no
/// stack, hash `0`).
#[inline(always)]
fn log_short(buffer: u32, hash: u64, short: &HotspotShortStack) -> Option<u64> {
    let log = Log {
        maps: [&HOTSPOT_SHORT_LOG_0, &HOTSPOT_SHORT_LOG_1],
        lengths: &HOTSPOT_LOG_LENGTHS,
        per_cpu: LOG_PER_CPU.load(),
    };
    let slot = log.take_slot(buffer)?;
    // One helper call, where a plain copy of 2 KiB is hundreds of
    // instructions.
    let copied = unsafe {
        bpf_probe_read_kernel(
            core::ptr::addr_of_mut!(slot.stack).cast(),
            core::mem::size_of::<HotspotShortStack>() as u32,
            core::ptr::from_ref(short).cast(),
        )
    };
    if copied != 0 {
        slot.hash = 0;
        return None;
    }
    let key = key(hash);
    slot.hash = key;
    Some(key)
}

/// Records one frame at `walk.pc` and moves to its caller (or ends).
#[inline(always)]
fn step(info: &HotspotProcInfo, walk: &mut Walk) {
    let (pc, sp, fp) = (walk.pc, walk.sp, walk.fp);
    let len = walk.stack.len as usize;
    if len >= HOTSPOT_MAX_FRAMES {
        walk.stack.truncated = 1;
        walk.done = 1;
        return;
    }
    if !(0x1000..USER_SPACE_END).contains(&pc) {
        walk.done = 1;
        return;
    }
    let leaf = len == 0;
    if !(info.code_low <= pc && pc < info.code_high) {
        push(walk, len, hotspot_frame::NATIVE, pc, 0);
        native_step(info, walk, leaf);
        let anchor = walk.anchor_sp;
        if anchor != 0 && (walk.done != 0 || walk.sp >= anchor || in_code_cache(info, walk.pc)) {
            // Out of the native frames: on at the last Java frame.
            (walk.pc, walk.sp, walk.fp) = (walk.anchor_pc, anchor, walk.anchor_fp);
            walk.done = 0;
            walk.anchor_sp = 0;
            count_stat(stat::HOTSPOT_ANCHORED);
        }
        return;
    }
    let interpreted = info.interpreter_low <= pc && pc < info.interpreter_high;
    let (blob, name) = if interpreted {
        (0, NAME_INTERPRETER)
    } else {
        let Some(blob) = code_blob(info, pc) else {
            push(walk, len, hotspot_frame::CODE, pc, 0);
            walk.done = 1;
            return;
        };
        (blob, read_u64(read_u64(blob + u64::from(info.blob_name))))
    };
    if name == NAME_INTERPRETER {
        if !is_frame_pointer(sp, fp) {
            push(walk, len, hotspot_frame::CODE, pc, 0);
            walk.done = 1;
            return;
        }
        let Ok(slots) = (unsafe {
            bpf_probe_read_user(fp.wrapping_sub(64) as *const [u64; INTERPRETER_SLOTS])
        }) else {
            push(walk, len, hotspot_frame::CODE, pc, 0);
            walk.done = 1;
            return;
        };
        let bcp = if leaf { walk.r13 } else { slots[SLOT_BCP] };
        push(
            walk,
            len,
            hotspot_frame::INTERPRETED,
            slots[SLOT_METHOD],
            bcp as u32,
        );
        move_to(
            walk,
            slots[SLOT_RETURN],
            slots[SLOT_SENDER_SP],
            slots[SLOT_LINK],
        );
        return;
    }
    let frame_size = u64::from(read_u32(blob + u64::from(info.blob_frame_size)));
    if name == NAME_NMETHOD || name == NAME_NATIVE_NMETHOD {
        let compile_id = read_u32(blob + u64::from(info.nmethod_compile_id));
        push(walk, len, hotspot_frame::COMPILED, pc, compile_id);
        if frame_size == 0 {
            // A method-handle intrinsic: no frame, only a return address.
            return_address_only(info, walk);
        } else {
            by_frame_size(info, walk, frame_size, leaf);
        }
        return;
    }
    push(walk, len, hotspot_frame::STUB, pc, 0);
    if name == NAME_VTABLE_CHUNKS {
        return_address_only(info, walk);
    } else if frame_size > 0 {
        by_frame_size(info, walk, frame_size, leaf);
    } else if is_frame_pointer(sp, fp) {
        // The call stub, adapters, StubRoutines: rbp is a frame record.
        by_frame_pointer(walk);
    } else {
        walk.done = 1;
    }
}

/// A native frame's caller, by its frame pointer. In the leaf, rbp may
/// not be one (a leaf routine without a frame, called from compiled Java
/// code that uses rbp for data): then a return address into the code
/// cache on top of the stack is its caller.
#[inline(always)]
fn native_step(info: &HotspotProcInfo, walk: &mut Walk, leaf: bool) {
    if is_frame_pointer(walk.sp, walk.fp) {
        by_frame_pointer(walk);
    } else if leaf {
        return_address_only(info, walk);
    } else {
        walk.done = 1;
    }
}

/// Where thread `tid` (of `tgid`) keeps its last Java frame, kept in the
/// walk if it is one: above the leaf's sp, both on the `JavaThread`'s
/// stack, its pc in the code cache. A thread in Java code has none
/// (HotSpot clears `_last_Java_sp` on the way back into Java); an anchor
/// without its pc has it as the return address just below its sp (as
/// HotSpot's `make_walkable`).
#[inline(always)]
fn last_java_frame(info: &HotspotProcInfo, tgid: u32, tid: u32, walk: &mut Walk) {
    if info.last_java_sp == 0 {
        return;
    }
    let Some(thread) = (unsafe { HOTSPOT_THREADS.get(&tid) }) else {
        return;
    };
    if thread.tgid != tgid {
        return;
    }
    let java_thread = thread.state;
    let sp = read_u64(java_thread + u64::from(info.last_java_sp));
    if !is_frame_pointer(walk.sp, sp) || sp == walk.sp {
        return;
    }
    // Both on this JavaThread's stack: it is the sampled thread's.
    let top = read_u64(java_thread + u64::from(info.stack_base));
    let size = read_u64(java_thread + u64::from(info.stack_size));
    if !(top.wrapping_sub(size) <= walk.sp && sp < top) {
        return;
    }
    let mut pc = read_u64(java_thread + u64::from(info.last_java_pc));
    if pc == 0 {
        pc = read_u64(sp - 8);
    }
    if !in_code_cache(info, pc) {
        return;
    }
    walk.anchor_pc = pc;
    walk.anchor_fp = read_u64(java_thread + u64::from(info.last_java_fp));
    walk.anchor_sp = sp;
}

/// Caller of a frame whose rbp is a frame record (saved rbp, return address).
#[inline(always)]
fn by_frame_pointer(walk: &mut Walk) {
    let fp = walk.fp;
    match unsafe { bpf_probe_read_user(fp as *const [u64; 2]) } {
        Ok([link, ret]) => move_to(walk, ret, fp + 16, link),
        Err(_) => walk.done = 1,
    }
}

/// Caller of a fixed frame of `frame_size` words (return address on top of
/// the caller's sp, the caller's rbp below it). A leaf may be caught in
/// its prologue or epilogue, where the frame is not whole: then its
/// return address is at sp (nothing pushed yet, or all popped) or above
/// the pushed rbp. Only a return address into the code cache is taken.
#[inline(always)]
fn by_frame_size(info: &HotspotProcInfo, walk: &mut Walk, frame_size: u64, leaf: bool) {
    let sp = walk.sp;
    let sender = sp + frame_size * 8;
    if let Ok([link, ret]) = unsafe { bpf_probe_read_user((sender - 16) as *const [u64; 2]) }
        && in_code_cache(info, ret)
    {
        move_to(walk, ret, sender, link);
        return;
    }
    if !leaf {
        walk.done = 1;
        return;
    }
    let Ok([top, next]) = (unsafe { bpf_probe_read_user(sp as *const [u64; 2]) }) else {
        walk.done = 1;
        return;
    };
    if in_code_cache(info, top) {
        move_to(walk, top, sp + 8, walk.fp);
    } else if in_code_cache(info, next) {
        move_to(walk, next, sp + 16, top);
    } else {
        walk.done = 1;
    }
}

/// Caller of code that keeps only its return address on the stack.
#[inline(always)]
fn return_address_only(info: &HotspotProcInfo, walk: &mut Walk) {
    let ret = read_u64(walk.sp);
    if in_code_cache(info, ret) {
        move_to(walk, ret, walk.sp + 8, walk.fp);
    } else {
        walk.done = 1;
    }
}

/// Moves to the caller; a caller must be further up the stack.
#[inline(always)]
fn move_to(walk: &mut Walk, pc: u64, sp: u64, fp: u64) {
    if sp <= walk.sp || pc == 0 {
        walk.done = 1;
        return;
    }
    walk.pc = pc;
    walk.sp = sp;
    walk.fp = fp;
}

#[inline(always)]
fn push(walk: &mut Walk, len: usize, kind: u32, address: u64, data: u32) {
    let index = len & (HOTSPOT_MAX_FRAMES - 1);
    walk.stack.frames[index] = HotspotFrame {
        address,
        data,
        kind,
    };
    walk.stack.len = (len + 1) as u32;
    walk.hash = fnv(
        fnv(walk.hash, address),
        u64::from(data) | u64::from(kind) << 32,
    );
}

/// The code blob holding `pc`, through its heap's segment map (as
/// HotSpot's `CodeHeap::find_start`); `None` in a free segment.
#[inline(always)]
fn code_blob(info: &HotspotProcInfo, pc: u64) -> Option<u64> {
    let mut heap = None;
    for index in 0..profiler_common::HOTSPOT_MAX_HEAPS {
        let candidate = &info.heaps[index];
        if (index as u32) < info.heap_count && candidate.low <= pc && pc < candidate.high {
            heap = Some(candidate);
        }
    }
    let heap = heap?;
    let shift = info.log2_segment_size & 31;
    let mut segment = (pc - heap.low) >> shift;
    for _ in 0..MAX_SEGMAP_HOPS {
        let back = unsafe { bpf_probe_read_user((heap.segmap + segment) as *const u8) }.ok()?;
        if back == 0 {
            return Some(heap.low + (segment << shift) + u64::from(info.heap_block_size));
        }
        if back == SEGMAP_FREE || u64::from(back) > segment {
            return None;
        }
        segment -= u64::from(back);
    }
    None
}

#[inline(always)]
fn in_code_cache(info: &HotspotProcInfo, address: u64) -> bool {
    info.code_low <= address && address < info.code_high
}

/// Could `fp` be a frame pointer of this stack, above `sp`?
#[inline(always)]
fn is_frame_pointer(sp: u64, fp: u64) -> bool {
    fp >= sp && fp - sp < MAX_FRAME_BYTES && fp & 7 == 0
}
