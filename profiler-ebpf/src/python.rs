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
//!
//! A followed process's child is followed from its fork on (`python_fork`),
//! not from the first drain that sees it: a PySpark daemon forks its workers
//! busy from their start, and a tenth of a worker's samples came before
//! that drain. The child is the parent's copy, so the parent's offsets hold
//! in it, and so does the `PyThreadState` of the thread that forked (CPython
//! keeps it as the child's main thread).

use aya_ebpf::{
    bindings::{BPF_ANY, task_struct},
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_user_buf},
    macros::{btf_tracepoint, map},
    maps::{HashMap, PerCpuArray},
    programs::BtfTracePointContext,
};
use profiler_common::{
    MAX_PYTHON_PROCESSES, MAX_PYTHON_THREADS, PY_FRAME_WINDOW_BYTES, PY_MAX_FRAMES, PY_NO_OFFSET,
    PythonFrame, PythonOffsets, PythonStack, RuntimeThread, python_layout,
};

use crate::{
    hashed_stacks::{FNV_OFFSET, StackSink, fnv},
    task::{self, TASK_STRUCT_PID_OFFSET},
    user_memory::read_u64,
};

#[map]
static PY_PROCS: HashMap<u32, PythonOffsets> = HashMap::with_max_entries(MAX_PYTHON_PROCESSES, 0);

#[map]
static PY_THREADS: HashMap<u32, RuntimeThread> = HashMap::with_max_entries(MAX_PYTHON_THREADS, 0);

/// Processes in `PY_PROCS` that `python_fork` put there and userspace has
/// not taken over yet (it removes them as it follows them itself): the
/// kernel forgets these at their `exec` or exit, userspace the others.
#[map]
static PY_FORKED: HashMap<u32, u8> = HashMap::with_max_entries(MAX_PYTHON_PROCESSES, 0);

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
    let Some((offsets, tstate)) = followed_thread(tgid, tid) else {
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
    // Everything that depends on the version is settled here, before the
    // loops: a frame is then a few loads (and in the second loop one read),
    // and its only branches leave a loop or step over a shim (a branch per
    // frame whose two ways both went on multiplied the paths 6.1's verifier
    // walks past its limit).
    let Some(frame_read) = FrameRead::new(offsets) else {
        return 0;
    };
    let mut frame = first_frame(offsets, tstate);
    if frame == 0 {
        return 0;
    }
    // 1. The frames in one copy of the bytes below the innermost frame (a
    // chain of Python calls in one data stack chunk), no read each.
    frame_read.copy_below(window, frame);
    let mut hash = FNV_OFFSET;
    let mut len = 0u32;
    for index in 0..PY_MAX_FRAMES {
        if frame == 0 || !frame_read.in_copy(window, frame) {
            break;
        }
        let fields = frame_read.fields(window, frame);
        // A shim frame that belongs to the C stack (3.12+) is not Python
        // code: step over it (they never come two in a row), in the loop
        // below.
        if fields.owner == frame_read.cstack_owner {
            frame = fields.previous;
            break;
        }
        let (code, instr) = (fields.code, fields.instr);
        stack.frames[index] = PythonFrame { code, instr };
        hash = fnv(fnv(hash, code), instr);
        len = index as u32 + 1;
        frame = fields.previous;
    }
    // 2. The rest (another chunk, a generator's frame, 3.10's frame
    // objects), a read each. Where the first loop stopped goes through the
    // map and back: the verifier then reaches this loop in one state from
    // every frame the first one stopped at, and walks it once.
    // (The count of frames stays there, loaded afresh at each frame: kept
    // in a register, the compiler made the slot's address a pointer
    // stepped each frame, whose bound the verifier does not know.)
    let (mut frame, mut hash) = window.handed_over(frame, hash, len);
    for _ in 0..PY_MAX_FRAMES {
        let index = window.frames() as usize;
        if frame == 0 || index >= PY_MAX_FRAMES {
            break;
        }
        let mut fields = frame_read.read(window, frame);
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
        window.set_frames(index as u64 + 1);
        frame = fields.previous;
    }
    let len = window.frames() as u32;
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

/// The offsets of followed process `tgid` and the `PyThreadState` address
/// of its registered thread `tid`.
#[inline(always)]
fn followed_thread(tgid: u32, tid: u32) -> Option<(&'static PythonOffsets, u64)> {
    let offsets = unsafe { PY_PROCS.get(&tgid) }?;
    let thread = unsafe { PY_THREADS.get(&tid) }?;
    // A tid reused by another Python process before the next drain: its
    // `PyThreadState` address means nothing in this one.
    (thread.tgid == tgid).then_some((offsets, thread.state))
}

/// What the walk reads of one frame.
struct FrameFields {
    code: u64,
    instr: u64,
    previous: u64,
    /// The `owner` byte, or `u32::MAX` for versions without one.
    owner: u32,
}

/// Bytes of a thread's frame stack read at once (a power of two, at least
/// twice `PY_FRAME_WINDOW_BYTES`).
///
/// CPython 3.11 and later lay a thread's frames out one after the other in
/// its data stack, each caller just below its callee: the frames of a
/// chain of calls mostly lie in the bytes below the innermost one. So a
/// read takes a frame with up to this many bytes below it (never below the
/// start of its page, which may be the chunk's), and the frames found in
/// that copy cost no read of their own. The reads of user memory, one per
/// frame, were most of what a Python sample cost beyond a native one:
/// `cargo xtask bench --only python` (section 7.2, `pywork.py`'s seven
/// frames, CPython 3.12) measured 1.59 and 1.61 times a native sample's
/// cost with a read per frame, 1.23 with this copy (2026-12-07, AMD EPYC).
/// Frames that do not lie in it (in another chunk, a generator's, 3.10's
/// frame objects) are read one at a time as before.
const STACK_WINDOW: usize = 1024;
const PAGE_MASK: u64 = 0xfff;

/// One copy of a thread's frame stack (`PY_FRAME_WINDOW`): `len` bytes
/// from user address `base`, and room for a read of up to 8 bytes at the
/// last offset masked into it; and where the walk's first loop handed over
/// to its second.
#[repr(C)]
pub struct FrameWindow {
    base: u64,
    len: u64,
    /// Where the walk's first loop stopped (see `python_stack`).
    frame: u64,
    hash: u64,
    frames: u64,
    bytes: [u8; 2 * STACK_WINDOW],
}

impl FrameWindow {
    /// The walk's state, stored and loaded back as the verifier cannot
    /// follow (so it knows no more of it than any map value's).
    #[inline(always)]
    fn handed_over(&mut self, frame: u64, hash: u64, len: u32) -> (u64, u64) {
        self.set_frames(u64::from(len));
        unsafe {
            core::ptr::write_volatile(&mut self.frame, frame);
            core::ptr::write_volatile(&mut self.hash, hash);
            (
                core::ptr::read_volatile(&self.frame),
                core::ptr::read_volatile(&self.hash),
            )
        }
    }

    /// Frames the walk has recorded.
    #[inline(always)]
    fn frames(&self) -> u64 {
        unsafe { core::ptr::read_volatile(&self.frames) }
    }

    #[inline(always)]
    fn set_frames(&mut self, frames: u64) {
        unsafe { core::ptr::write_volatile(&mut self.frames, frames) }
    }
}

#[map]
static PY_FRAME_WINDOW: PerCpuArray<FrameWindow> = PerCpuArray::with_max_entries(1, 0);

const FRAME_WINDOW: usize = PY_FRAME_WINDOW_BYTES as usize;

/// How one version's frames are read: each frame's first `span` bytes at
/// once (one read of user memory per frame instead of one per field:
/// those reads are most of a Python sample's cost), then the fields at
/// their offsets in that copy.
struct FrameRead {
    span: usize,
    /// Bytes below a frame read with it: frames in a data stack lie there
    /// (3.11+); `0` where each frame is an object of its own.
    below: u64,
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
        let stacked = offsets.layout != python_layout::FRAME_OBJECT;
        Some(Self {
            span: end as usize,
            below: if stacked {
                (STACK_WINDOW as u32 - end) as u64
            } else {
                0
            },
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

    /// The frame's span as the compiler cannot see through, so the masks
    /// the verifier needs to bound lengths and offsets stay (it knows
    /// `span` is at most `FRAME_WINDOW` and would drop them).
    #[inline(always)]
    fn span(&self) -> u64 {
        (unsafe { core::ptr::read_volatile(&self.span) }) as u64
    }

    /// Copies `frame` with up to `below` bytes under it, never below the
    /// start of its page (the page it is on is mapped; the one before may
    /// not be). A failed read leaves zeros: a frame with no previous one.
    #[inline(always)]
    fn copy_below(&self, window: &mut FrameWindow, frame: u64) {
        let start = (frame & !PAGE_MASK).max(frame.saturating_sub(self.below));
        let len = frame.wrapping_add(self.span()).wrapping_sub(start);
        let bytes = &mut window.bytes[..(len as usize) & (2 * STACK_WINDOW - 1)];
        let _ = unsafe { bpf_probe_read_user_buf(start as *const u8, bytes) };
        window.base = start;
        window.len = len;
    }

    /// Whether the copy holds all of `frame`'s fields.
    #[inline(always)]
    fn in_copy(&self, window: &FrameWindow, frame: u64) -> bool {
        let span = self.span();
        window.len >= span && frame.wrapping_sub(window.base) <= window.len - span
    }

    /// `frame`'s fields, from the copy that holds it.
    #[inline(always)]
    fn fields(&self, window: &FrameWindow, frame: u64) -> FrameFields {
        // Masked into the copy: every load stays in it.
        let at = (frame.wrapping_sub(window.base) as usize) & (STACK_WINDOW - 1);
        let field = |offset: usize| unsafe {
            window
                .bytes
                .as_ptr()
                .add(at + (offset & (FRAME_WINDOW - 1)))
        };
        unsafe {
            FrameFields {
                code: core::ptr::read_unaligned(field(self.code).cast::<u64>()),
                instr: core::ptr::read_unaligned(field(self.instr).cast::<u64>()) & self.instr_mask,
                previous: core::ptr::read_unaligned(field(self.previous).cast::<u64>()),
                owner: u32::from(*field(self.owner)),
            }
        }
    }

    /// One frame's fields from a read of its own, `0` where it cannot be
    /// read (which ends the walk): the helper clears the copy when the
    /// read fails.
    #[inline(always)]
    fn read(&self, window: &mut FrameWindow, frame: u64) -> FrameFields {
        let bytes = &mut window.bytes[..(self.span() as usize) & (2 * FRAME_WINDOW - 1)];
        let _ = unsafe { bpf_probe_read_user_buf(frame as *const u8, bytes) };
        window.base = frame;
        self.fields(window, frame)
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

/// A process forks (`sched_process_fork(struct task_struct *parent, struct
/// task_struct *child)`, in the context of the forking thread, before the
/// child first runs): the child of a followed CPython, forked by a
/// registered thread, is followed at once, with the parent's offsets and
/// that thread's `PyThreadState` as its main thread's.
#[btf_tracepoint(function = "sched_process_fork")]
pub fn python_fork(ctx: BtfTracePointContext) -> i32 {
    if TASK_STRUCT_PID_OFFSET.load() == 0 {
        return 0;
    }
    let child: *const task_struct = ctx.arg(1);
    let (child_pid, child_tgid) = (task::pid(child), task::tgid(child));
    if child_pid != child_tgid {
        // A new thread: userspace registers a process's threads.
        return 0;
    }
    let current = bpf_get_current_pid_tgid();
    let Some((offsets, state)) = followed_thread((current >> 32) as u32, current as u32) else {
        return 0;
    };
    let offsets = *offsets;
    // Over whatever an exited process of the same id left: the id is the
    // child's now.
    if PY_PROCS
        .insert(&child_tgid, &offsets, BPF_ANY.into())
        .is_err()
    {
        return 0;
    }
    let _ = PY_FORKED.insert(&child_tgid, &1, BPF_ANY.into());
    let main = RuntimeThread {
        tgid: child_tgid,
        _pad: 0,
        state,
    };
    let _ = PY_THREADS.insert(&child_pid, &main, BPF_ANY.into());
    0
}

/// A process runs a new program (`sched_process_exec`, in its context): one
/// followed since its fork is no longer that Python.
#[btf_tracepoint(function = "sched_process_exec")]
pub fn python_exec(_ctx: BtfTracePointContext) -> i32 {
    forget_forked((bpf_get_current_pid_tgid() >> 32) as u32);
    0
}

/// A thread exits (`sched_process_exit`, in its context): the main thread
/// of a process followed since its fork takes the process's entries along.
#[btf_tracepoint(function = "sched_process_exit")]
pub fn python_exit(_ctx: BtfTracePointContext) -> i32 {
    let current = bpf_get_current_pid_tgid();
    let (tgid, tid) = ((current >> 32) as u32, current as u32);
    if tgid == tid {
        forget_forked(tgid);
    }
    0
}

/// Removes what `python_fork` put in the maps for process `tgid`, unless
/// userspace has taken it over.
#[inline(always)]
fn forget_forked(tgid: u32) {
    if unsafe { PY_FORKED.get(&tgid) }.is_none() {
        return;
    }
    let _ = PY_FORKED.remove(&tgid);
    let _ = PY_PROCS.remove(&tgid);
    if unsafe { PY_THREADS.get(&tgid) }.is_some_and(|thread| thread.tgid == tgid) {
        let _ = PY_THREADS.remove(&tgid);
    }
}
