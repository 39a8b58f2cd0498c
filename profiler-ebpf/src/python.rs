//! CPython frames for on-CPU samples and off-CPU periods.
//!
//! CPython keeps its call stack in its own frame structs, not in frame
//! pointers (and the interpreters on real hosts are built without them), so
//! a native walk of a Python thread sees little more than the evaluation
//! loop. For threads userspace registered (`PY_THREADS`: tid → the address
//! of its `PyThreadState`, in a process whose version's offsets are in
//! `PY_PROCS`), the sampler also follows the thread's frame chain and
//! records (code object, instruction) per frame, innermost first. Naming
//! code objects and computing lines is left to userspace.

use aya_ebpf::{
    helpers::bpf_probe_read_user_buf,
    macros::map,
    maps::{HashMap, PerCpuArray},
};
use profiler_common::{
    MAX_PYTHON_PROCESSES, MAX_PYTHON_THREADS, PY_MAX_FRAMES, PY_NO_OFFSET, PythonFrame,
    PythonOffsets, PythonStack, python_layout,
};

use crate::{
    hashed_stacks::{FNV_OFFSET, StackSink, fnv},
    user_memory::{read_u8, read_u32, read_u64},
};

#[map]
static PY_PROCS: HashMap<u32, PythonOffsets> = HashMap::with_max_entries(MAX_PYTHON_PROCESSES, 0);

#[map]
static PY_THREADS: HashMap<u32, u64> = HashMap::with_max_entries(MAX_PYTHON_THREADS, 0);

#[map]
static PY_STACKS_0: HashMap<u64, PythonStack> =
    HashMap::with_max_entries(profiler_common::DEFAULT_PY_STACK_ENTRIES, 0);
#[map]
static PY_STACKS_1: HashMap<u64, PythonStack> =
    HashMap::with_max_entries(profiler_common::DEFAULT_PY_STACK_ENTRIES, 0);

/// Scratch space for one Python stack (too large for the BPF stack).
#[map]
static PY_SCRATCH: PerCpuArray<PythonStack> = PerCpuArray::with_max_entries(1, 0);

/// The stack map of on-CPU samples of `buffer`.
#[inline(always)]
pub fn sample_stacks(buffer: u32) -> &'static HashMap<u64, PythonStack> {
    if buffer == 0 {
        &PY_STACKS_0
    } else {
        &PY_STACKS_1
    }
}

/// Whether process `tgid` is a followed CPython.
#[inline(always)]
pub fn is_followed_python(tgid: u32) -> bool {
    unsafe { PY_PROCS.get(&tgid) }.is_some()
}

/// The current thread's Python stack, filed in `stacks` under a hash of its
/// frames; `0` when the thread is not a registered Python thread or has no
/// Python frame now.
#[inline(always)]
pub fn python_stack(tgid: u32, tid: u32, stacks: &impl StackSink<PythonStack>) -> u64 {
    let Some(offsets) = (unsafe { PY_PROCS.get(&tgid) }) else {
        return 0;
    };
    let Some(&tstate) = (unsafe { PY_THREADS.get(&tid) }) else {
        return 0;
    };
    let Some(stack) = PY_SCRATCH.get_ptr_mut(0) else {
        return 0;
    };
    let stack = unsafe { &mut *stack };
    let Some(window) = PY_FRAME_WINDOW.get_ptr_mut(0) else {
        return 0;
    };
    let window = unsafe { &mut *window };
    let span = frame_span(offsets);
    let mut frame = first_frame(offsets, tstate);
    let mut hash = FNV_OFFSET;
    let mut len = 0u32;
    for index in 0..PY_MAX_FRAMES {
        if frame == 0 {
            break;
        }
        let mut fields = read_frame(offsets, span, window, frame);
        // A shim frame that belongs to the C stack (3.12+) is not Python
        // code: step over it (they never come two in a row).
        if offsets.frame_owner != PY_NO_OFFSET && u32::from(fields.owner) == offsets.owner_cstack {
            frame = fields.previous;
            if frame == 0 {
                break;
            }
            fields = read_frame(offsets, span, window, frame);
        }
        let (code, instr) = (fields.code, fields.instr);
        stack.frames[index] = PythonFrame { code, instr };
        hash = fnv(fnv(hash, code), instr);
        len = index as u32 + 1;
        frame = fields.previous;
    }
    if len == 0 {
        return 0;
    }
    // Frames beyond the last slot are not recorded: the stack is cut there.
    // (Slots past `len` keep older frames; userspace reads `len` only.)
    stack.truncated = u32::from(frame != 0);
    stack.len = len;
    hash ^= u64::from(stack.truncated);
    stacks.file(hash, stack)
}

/// What the walk reads of one frame.
struct FrameFields {
    code: u64,
    instr: u64,
    previous: u64,
    owner: u8,
}

/// Bytes of a frame read at once: the fields' offsets are below this.
const FRAME_WINDOW: u32 = 128;

/// Scratch space for the bytes of one frame (`FRAME_WINDOW`, and room for
/// a field read at the last offset masked into it).
#[map]
static PY_FRAME_WINDOW: PerCpuArray<[u8; 2 * FRAME_WINDOW as usize]> =
    PerCpuArray::with_max_entries(1, 0);

/// How many bytes from a frame's start hold every field the walk reads
/// (one read of user memory per frame instead of one per field: those
/// reads are most of a Python sample's cost); `0` if some field lies
/// beyond `FRAME_WINDOW`, and then each is read alone.
#[inline(always)]
fn frame_span(offsets: &PythonOffsets) -> u32 {
    let mut end = (offsets.frame_previous + 8).max(offsets.frame_code + 8);
    end = end.max(offsets.frame_instr + 8);
    if offsets.frame_owner != PY_NO_OFFSET {
        end = end.max(offsets.frame_owner + 1);
    }
    if end > FRAME_WINDOW { 0 } else { end }
}

/// One frame's fields: from one read of its first `span` bytes, or (span
/// `0`) field by field. Unreadable fields are `0` (which ends the walk).
#[inline(always)]
fn read_frame(
    offsets: &PythonOffsets,
    span: u32,
    window: &mut [u8; 2 * FRAME_WINDOW as usize],
    frame: u64,
) -> FrameFields {
    let object_layout = offsets.layout == python_layout::FRAME_OBJECT;
    if span == 0 {
        return FrameFields {
            code: read_u64(frame + u64::from(offsets.frame_code)),
            instr: if object_layout {
                u64::from(read_u32(frame + u64::from(offsets.frame_instr)))
            } else {
                read_u64(frame + u64::from(offsets.frame_instr))
            },
            previous: read_u64(frame + u64::from(offsets.frame_previous)),
            owner: if offsets.frame_owner == PY_NO_OFFSET {
                0
            } else {
                read_u8(frame + u64::from(offsets.frame_owner))
            },
        };
    }
    let bytes = &mut window[..(span & (FRAME_WINDOW * 2 - 1)) as usize];
    if unsafe { bpf_probe_read_user_buf(frame as *const u8, bytes) }.is_err() {
        return FrameFields {
            code: 0,
            instr: 0,
            previous: 0,
            owner: 0,
        };
    }
    // Offsets masked into the first half: every read stays in the window.
    let at = |offset: u32| unsafe { window.as_ptr().add((offset & (FRAME_WINDOW - 1)) as usize) };
    unsafe {
        FrameFields {
            code: core::ptr::read_unaligned(at(offsets.frame_code).cast::<u64>()),
            instr: if object_layout {
                u64::from(core::ptr::read_unaligned(
                    at(offsets.frame_instr).cast::<u32>(),
                ))
            } else {
                core::ptr::read_unaligned(at(offsets.frame_instr).cast::<u64>())
            },
            previous: core::ptr::read_unaligned(at(offsets.frame_previous).cast::<u64>()),
            owner: if offsets.frame_owner == PY_NO_OFFSET {
                0
            } else {
                *at(offsets.frame_owner)
            },
        }
    }
}

/// The thread's innermost frame: through `cframe` on 3.11 and 3.12.
#[inline(always)]
fn first_frame(offsets: &PythonOffsets, tstate: u64) -> u64 {
    let frame = read_u64(tstate + u64::from(offsets.tstate_frame));
    if offsets.layout == python_layout::CFRAME && frame != 0 {
        read_u64(frame + u64::from(offsets.cframe_current_frame))
    } else {
        frame
    }
}
