//! CPython frames for on-CPU samples and off-CPU periods.
//!
//! CPython keeps its call stack in its own frame structs, not in frame
//! pointers (and the interpreters on real hosts are built without them), so
//! a native walk of a Python thread sees little more than the evaluation
//! loop. For threads userspace registered (`PY_THREADS`: tid → its process
//! and the address of its `PyThreadState`, in a process whose version's
//! offsets are in `PY_PROCS`), the sampler also follows the thread's frame
//! chain and records (code object, instruction) per frame, innermost first.
//! Naming code objects and computing lines is left to userspace.

use aya_ebpf::{
    helpers::bpf_probe_read_user_buf,
    macros::map,
    maps::{HashMap, PerCpuArray},
};
use profiler_common::{
    MAX_PYTHON_PROCESSES, MAX_PYTHON_THREADS, PY_FRAME_WINDOW_BYTES, PY_MAX_FRAMES, PY_NO_OFFSET,
    PythonFrame, PythonOffsets, PythonStack, RuntimeThread, python_layout,
};

use crate::{
    hashed_stacks::{FNV_OFFSET, StackSink, fnv},
    user_memory::read_u64,
};

#[map]
static PY_PROCS: HashMap<u32, PythonOffsets> = HashMap::with_max_entries(MAX_PYTHON_PROCESSES, 0);

#[map]
static PY_THREADS: HashMap<u32, RuntimeThread> = HashMap::with_max_entries(MAX_PYTHON_THREADS, 0);

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
    let Some(thread) = (unsafe { PY_THREADS.get(&tid) }) else {
        return 0;
    };
    // A tid reused by another Python process before the next drain: its
    // `PyThreadState` address means nothing in this one.
    if thread.tgid != tgid {
        return 0;
    }
    let tstate = thread.state;
    let Some(stack) = PY_SCRATCH.get_ptr_mut(0) else {
        return 0;
    };
    let stack = unsafe { &mut *stack };
    let Some(window) = PY_FRAME_WINDOW.get_ptr_mut(0) else {
        return 0;
    };
    let window = unsafe { &mut *window };
    // Everything that depends on the version is settled here, before the
    // loop: a frame is then one read and a few loads with no branch of its
    // own (a branch per frame multiplied the paths 6.1's verifier walks
    // past its limit).
    let Some(frame_read) = FrameRead::new(offsets) else {
        return 0;
    };
    let mut frame = first_frame(offsets, tstate);
    let mut hash = FNV_OFFSET;
    let mut len = 0u32;
    for index in 0..PY_MAX_FRAMES {
        if frame == 0 {
            break;
        }
        let mut fields = frame_read.read(window, frame);
        // A shim frame that belongs to the C stack (3.12+) is not Python
        // code: step over it (they never come two in a row).
        if fields.owner == frame_read.cstack_owner {
            frame = fields.previous;
            if frame == 0 {
                break;
            }
            fields = frame_read.read(window, frame);
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
    /// The `owner` byte, or `u32::MAX` for versions without one.
    owner: u32,
}

/// Scratch space for the bytes of one frame (`PY_FRAME_WINDOW`, and room
/// for a read of up to 8 bytes at the last offset masked into it).
#[map]
static PY_FRAME_WINDOW: PerCpuArray<[u8; 2 * FRAME_WINDOW]> = PerCpuArray::with_max_entries(1, 0);

const FRAME_WINDOW: usize = PY_FRAME_WINDOW_BYTES as usize;

/// How one version's frames are read: each frame's first `span` bytes at
/// once (one read of user memory per frame instead of one per field:
/// those reads are most of a Python sample's cost), then the fields at
/// their offsets in that copy.
struct FrameRead {
    span: usize,
    code: usize,
    instr: usize,
    /// Keeps the low 32 bits of the instruction where it is an `int`.
    instr_mask: u64,
    previous: usize,
    /// Where the `owner` byte is (any byte for versions without one) and
    /// the value it has in a shim frame: `u32::MAX` (never a byte) for
    /// versions without one.
    owner: usize,
    cstack_owner: u32,
}

impl FrameRead {
    /// `None` if a field lies beyond `PY_FRAME_WINDOW_BYTES` (no version
    /// userspace hands over does: a unit test there checks it).
    #[inline(always)]
    fn new(offsets: &PythonOffsets) -> Option<Self> {
        let has_owner = offsets.frame_owner != PY_NO_OFFSET;
        let mut end = (offsets.frame_previous + 8).max(offsets.frame_code + 8);
        end = end.max(offsets.frame_instr + 8);
        if has_owner {
            end = end.max(offsets.frame_owner + 1);
        }
        if end > PY_FRAME_WINDOW_BYTES {
            return None;
        }
        let field = |offset: u32| (offset & (PY_FRAME_WINDOW_BYTES - 1)) as usize;
        Some(Self {
            span: end as usize,
            code: field(offsets.frame_code),
            instr: field(offsets.frame_instr),
            instr_mask: if offsets.layout == python_layout::FRAME_OBJECT {
                u64::from(u32::MAX)
            } else {
                u64::MAX
            },
            previous: field(offsets.frame_previous),
            owner: if has_owner {
                field(offsets.frame_owner)
            } else {
                0
            },
            cstack_owner: if has_owner {
                offsets.owner_cstack
            } else {
                u32::MAX
            },
        })
    }

    /// One frame's fields, `0` where it cannot be read (which ends the
    /// walk): the helper clears the copy when the read fails.
    #[inline(always)]
    fn read(&self, window: &mut [u8; 2 * FRAME_WINDOW], frame: u64) -> FrameFields {
        // Read as the compiler cannot see through, so the mask the verifier
        // needs to bound the length stays (it knows `span` is at most
        // `FRAME_WINDOW` and would drop it).
        let span = unsafe { core::ptr::read_volatile(&self.span) };
        let bytes = &mut window[..span & (2 * FRAME_WINDOW - 1)];
        let _ = unsafe { bpf_probe_read_user_buf(frame as *const u8, bytes) };
        // Offsets masked into the first half: every load stays in the copy.
        let at = |offset: usize| unsafe { window.as_ptr().add(offset & (FRAME_WINDOW - 1)) };
        unsafe {
            FrameFields {
                code: core::ptr::read_unaligned(at(self.code).cast::<u64>()),
                instr: core::ptr::read_unaligned(at(self.instr).cast::<u64>()) & self.instr_mask,
                previous: core::ptr::read_unaligned(at(self.previous).cast::<u64>()),
                owner: u32::from(*at(self.owner)),
            }
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
