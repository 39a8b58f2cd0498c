//! The ABI shared by sparkprof's eBPF programs and its userspace daemon.
//!
//! Everything that crosses the kernel/user boundary is defined here, once, as
//! `#[repr(C)]` plain data, so both sides compile the same layout. The kernel
//! side keeps no policy: what to sample, how often and for whom is decided in
//! userspace and handed in through globals and maps named below.
#![cfg_attr(not(test), no_std)]

/// Length of a Linux `comm` (thread name) including the NUL terminator.
pub const COMM_LEN: usize = 16;

/// Key of the in-kernel on-CPU aggregation map.
///
/// One entry counts the samples that share a thread, a thread-name epoch and a
/// (user stack, kernel stack) pair. Keying by thread (not only by process) lets
/// userspace name the thread, and later tag it with Spark stage and task.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SampleKey {
    /// Process ID (`tgid` in kernel terms).
    pub tgid: u32,
    /// Thread ID (`pid` in kernel terms).
    pub tid: u32,
    /// Stack id in the active stack map, or a negative errno (see [`stack_error`]).
    pub user_stack_id: i32,
    /// Stack id in the active stack map, or a negative errno (see [`stack_error`]).
    pub kernel_stack_id: i32,
    /// Per-thread name epoch, bumped by the rename path so a count can be matched
    /// to the name the thread had when it was counted. 0 until a rename is seen.
    pub name_epoch: u32,
    /// Reserved for flags; always 0 today. Kept so the key stays 8-byte aligned.
    pub flags: u32,
    /// Key of the sample's Python stack in the active `PY_STACKS` map, `0`
    /// for none.
    pub python_stack: u64,
    /// Key of the sample's user stack in the active `HOTSPOT_STACKS` map
    /// (a JVM whose frames the kernel walks itself: native and Java frames
    /// in one stack, and then `user_stack_id` is unused), `0` for none.
    pub hotspot_stack: u64,
    /// The thread's `comm` when it was sampled: names survive the thread's exit.
    pub comm: [u8; COMM_LEN],
}

/// Heaps of a HotSpot code cache the kernel's walker knows (HotSpot has at
/// most three: non-methods, profiled and non-profiled methods).
pub const HOTSPOT_MAX_HEAPS: usize = 4;

/// One heap of a JVM's code cache: its reserved range (fixed for the
/// JVM's life) and its segment map (one byte per segment: `0` where a
/// block starts, `0xFF` never used, else how many segments to step back).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HotspotHeap {
    pub low: u64,
    pub high: u64,
    pub segmap: u64,
}

/// What the kernel's walker needs to step through a HotSpot JVM's Java
/// frames without frame pointers, handed over per process by userspace,
/// which read it from the JVM's own VMStructs tables (so no offset is
/// assumed per JDK version). Offsets are bytes into a `CodeBlob`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HotspotProcInfo {
    /// `CodeCache::_low_bound` / `_high_bound`: every heap lies within.
    pub code_low: u64,
    pub code_high: u64,
    /// The template interpreter's code (`AbstractInterpreter::_code`'s
    /// buffer): a pc there is an interpreted frame, no segment map walk
    /// needed (the interpreter is one large blob, many segments long).
    /// `0, 0` when unknown.
    pub interpreter_low: u64,
    pub interpreter_high: u64,
    pub heaps: [HotspotHeap; HOTSPOT_MAX_HEAPS],
    /// Heaps used in `heaps`.
    pub heap_count: u32,
    /// log2 of a segment's bytes (the same in every heap).
    pub log2_segment_size: u32,
    /// `sizeof(HeapBlock)`: a block's code blob follows its header.
    pub heap_block_size: u32,
    /// `CodeBlob::_name` (a `const char*`).
    pub blob_name: u32,
    /// `CodeBlob::_frame_size` (an `int`, in words).
    pub blob_frame_size: u32,
    /// `nmethod::_compile_id` (an `int`): tells userspace whether the
    /// compiled method it finds at the address is still the one sampled.
    pub nmethod_compile_id: u32,
    /// Where a `JavaThread` keeps its last Java frame while it runs VM or
    /// native code (`_anchor` plus `JavaFrameAnchor::_last_Java_sp`,
    /// `_last_Java_pc`, `_last_Java_fp`): the walker resumes there when
    /// the native frames above it cannot be stepped. `0` when unknown.
    pub last_java_sp: u32,
    pub last_java_pc: u32,
    pub last_java_fp: u32,
    /// `JavaThread::_stack_base` (its top) and `_stack_size`: an anchor is
    /// taken only where the sample and the anchor lie on the stack of the
    /// `JavaThread` read (never another thread's frames, should a thread's
    /// `JavaThread` be stale).
    pub stack_base: u32,
    pub stack_size: u32,
}

/// A thread of a followed runtime process, by tid: a walked JVM's
/// (`HOTSPOT_THREADS`, `state` its `JavaThread*`) or a CPython process's
/// (`PY_THREADS`, `state` its `PyThreadState*`). It names its process:
/// a tid reused by another process is not taken for it (the address means
/// nothing there), and userspace removes only its own entries.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuntimeThread {
    pub tgid: u32,
    pub _pad: u32,
    pub state: u64,
}

/// What a [`HotspotFrame`] is.
pub mod hotspot_frame {
    /// Native code: `address` is the pc (a caller's return address).
    pub const NATIVE: u32 = 1;
    /// Run by the interpreter: `address` is the `Method*`, `data` the low
    /// 32 bits of its bytecode pointer.
    pub const INTERPRETED: u32 = 2;
    /// Compiled Java code (or a JNI wrapper): `address` is the pc, `data`
    /// the compile id of the code blob it was in.
    pub const COMPILED: u32 = 3;
    /// A VM stub in the code cache: `address` is the pc.
    pub const STUB: u32 = 4;
    /// A pc in the code cache in no code blob (freed as it was sampled, or
    /// a segment map the walker could not follow): the walk ended there.
    pub const CODE: u32 = 5;
}

/// One frame of a [`HotspotStack`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct HotspotFrame {
    pub address: u64,
    pub data: u32,
    /// One of [`hotspot_frame`].
    pub kind: u32,
}

/// Frames of one walked JVM stack (Java and native, leaf first): deeper
/// than `perf_event_max_stack`, as Spark's task stacks are.
pub const HOTSPOT_MAX_FRAMES: usize = 1024;
/// Frames one run of the walker program steps before it tail-calls
/// itself (the kernel allows 33 tail calls, one of them to finish: 33
/// runs of this many frames cover [`HOTSPOT_MAX_FRAMES`]).
pub const HOTSPOT_FRAMES_PER_RUN: usize = 32;
/// Slots of the walker's program array.
pub const HOTSPOT_WALK_SLOT: u32 = 0;
pub const HOTSPOT_FINISH_SLOT: u32 = 1;
/// JVMs whose frames the kernel can walk at once.
pub const MAX_HOTSPOT_PROCESSES: u32 = 1_024;
/// Threads of walked JVMs the walker knows at once (a Spark host's
/// executors run a few hundred each; a JVM may run thousands).
pub const MAX_HOTSPOT_THREADS: u32 = 65_536;
/// Default entries of each HotSpot stack map (allocated as used).
pub const DEFAULT_HOTSPOT_STACK_ENTRIES: u32 = 4_096;

/// A user stack of a sample of a JVM, walked by the kernel through native
/// and Java frames, leaf first, with room for `N` frames.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HotspotStackOf<const N: usize> {
    /// Frames used in `frames`.
    pub len: u32,
    /// `1`: the walk went on beyond [`HOTSPOT_MAX_FRAMES`].
    pub truncated: u32,
    pub frames: [HotspotFrame; N],
}

/// A walked stack of any depth (16 KiB), in `HOTSPOT_STACKS`.
pub type HotspotStack = HotspotStackOf<HOTSPOT_MAX_FRAMES>;

/// Frames of a [`HotspotShortStack`]: most stacks, Spark's task threads'
/// included, have fewer.
pub const HOTSPOT_SHORT_FRAMES: usize = 128;

/// A walked stack of at most [`HOTSPOT_SHORT_FRAMES`] frames, in
/// `HOTSPOT_SHORT_STACKS`: the first bytes of a [`HotspotStack`], filed
/// and read as an eighth of its size. The kernel copies a whole value at
/// every new stack and userspace at every drain, so a 16 KiB value for a
/// 60-frame stack cost both sides.
pub type HotspotShortStack = HotspotStackOf<HOTSPOT_SHORT_FRAMES>;

/// How a CPython version chains its frames, as the kernel walker sees it.
pub mod python_layout {
    /// 3.8 to 3.10: `PyThreadState::frame` is a `PyFrameObject *`; frames
    /// chain through `f_back`; the instruction is the `int f_lasti`.
    pub const FRAME_OBJECT: u32 = 1;
    /// 3.11 and 3.12: `PyThreadState::cframe` is a `_PyCFrame *` whose
    /// `current_frame` is a `_PyInterpreterFrame *`; frames chain through
    /// `previous`; the instruction is the pointer `prev_instr`.
    pub const CFRAME: u32 = 2;
    /// 3.13: `PyThreadState::current_frame` is the `_PyInterpreterFrame *`;
    /// the code object is `f_executable`, the instruction `instr_ptr`.
    pub const CURRENT_FRAME: u32 = 3;
}

/// An offset a CPython version does not have.
pub const PY_NO_OFFSET: u32 = u32::MAX;

/// Where one CPython version keeps what the kernel's frame walker reads
/// (byte offsets into its structs), handed to the kernel per process. The
/// walker starts from a thread's `PyThreadState` address, which userspace
/// supplies per thread (`PY_THREADS`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PythonOffsets {
    /// One of [`python_layout`].
    pub layout: u32,
    /// In `PyThreadState`: `frame` (3.8–3.10), `cframe` (3.11–3.12) or
    /// `current_frame` (3.13).
    pub tstate_frame: u32,
    /// In `_PyCFrame`: `current_frame` (3.11–3.12); [`PY_NO_OFFSET`] otherwise.
    pub cframe_current_frame: u32,
    /// In the frame: `f_back` or `previous`.
    pub frame_previous: u32,
    /// In the frame: `f_code` or `f_executable`.
    pub frame_code: u32,
    /// In the frame: `f_lasti` (an `int`, 3.8–3.10), `prev_instr` (3.11–3.12)
    /// or `instr_ptr` (3.13) (pointers).
    pub frame_instr: u32,
    /// In `_PyInterpreterFrame`: the `char owner` (3.12+); [`PY_NO_OFFSET`]
    /// when frames have none to check.
    pub frame_owner: u32,
    /// The `owner` value of a frame that belongs to the C stack (a shim
    /// frame, not Python code): skipped.
    pub owner_cstack: u32,
}

/// The kernel reads a Python frame's fields in one read of its first bytes:
/// every frame field of [`PythonOffsets`] must end within this many (a
/// power of two).
pub const PY_FRAME_WINDOW_BYTES: u32 = 128;

/// Python frames one sample records at most (the innermost ones).
pub const PY_MAX_FRAMES: usize = 48;
/// Python processes whose frames can be recorded at once.
pub const MAX_PYTHON_PROCESSES: u32 = 4_096;
/// Python threads whose frames can be recorded at once.
pub const MAX_PYTHON_THREADS: u32 = 65_536;
/// Default entries of each Python stack map.
pub const DEFAULT_PY_STACK_ENTRIES: u32 = 8_192;

/// One Python frame as the kernel recorded it: which code object, and
/// where in it (the raw `f_lasti` or instruction pointer; userspace turns
/// it into a line).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PythonFrame {
    pub code: u64,
    pub instr: u64,
}

/// The Python stack of a sample, innermost frame first, in `PY_STACKS`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PythonStack {
    /// Frames used in `frames`.
    pub len: u32,
    /// `1`: the chain went on beyond [`PY_MAX_FRAMES`].
    pub truncated: u32,
    pub frames: [PythonFrame; PY_MAX_FRAMES],
}

/// Bytes of a thread's full name that the rename probe captures, NUL included.
///
/// Spark's task-thread names are about 70 bytes
/// (`Executor task launch worker for task 12.0 in stage 3.0 (TID 57)`); a
/// longer name is cut here and userspace marks it.
pub const THREAD_NAME_LEN: usize = 128;

/// Where a [`RenameEvent`] came from.
pub mod rename_source {
    /// The uprobe on HotSpot's `os::set_native_thread_name`: the full name.
    pub const JVM_NATIVE_NAME: u32 = 1;
    /// The `task:task_rename` tracepoint: only the new 15-byte comm. Userspace
    /// learns the full name from the JVM (Thread.print) afterwards.
    pub const TASK_RENAME: u32 = 2;
}

/// A thread rename seen in the kernel, sent through the `RENAMES` ring buffer.
///
/// `epoch` is the thread's name epoch *after* the rename: samples keyed with
/// this epoch were taken while the thread had this name.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RenameEvent {
    /// Process ID of the renamed thread.
    pub tgid: u32,
    /// Thread ID of the renamed thread.
    pub tid: u32,
    /// The thread's new name epoch.
    pub epoch: u32,
    /// One of [`rename_source`].
    pub source: u32,
    /// `bpf_ktime_get_ns` (CLOCK_MONOTONIC) of the rename.
    pub ktime_ns: u64,
    /// The new name, NUL-terminated unless it filled the buffer.
    pub name: [u8; THREAD_NAME_LEN],
}

/// Key of the in-kernel off-CPU aggregation map: blocked time of one thread
/// with one pair of stacks, one name epoch and one scheduler state.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OffCpuKey {
    pub tgid: u32,
    pub tid: u32,
    /// Where in the kernel it waited: key of `OFFCPU_KERNEL_STACKS` (a
    /// hash of the frames, read as it came back), `0` for none.
    pub kernel_stack: u64,
    /// Where in its own code it waited: key of `OFFCPU_USER_STACKS` (a
    /// hash of the frames, walked as it left), `0` for none.
    pub user_stack: u64,
    /// Where in its Python code it waited (a followed CPython thread): key
    /// of `OFFCPU_PY_STACKS`, `0` for none.
    pub python_stack: u64,
    /// The thread's name epoch while it was away.
    pub name_epoch: u32,
    /// How it was switched out, in the encoding of the sched_switch record's
    /// `prev_state` (the kernel's task-state report bits: 0x1 sleeping, 0x2
    /// uninterruptible, 0x80 idle; `0` or 0x100 (preempted): runnable).
    pub state: u32,
    pub comm: [u8; COMM_LEN],
}

/// One counted off-CPU period, as the off-CPU program appends it to its
/// CPU's log (`OFFCPU_LOGS`): userspace adds the periods of a key up.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OffCpuPeriod {
    pub key: OffCpuKey,
    /// Nanoseconds blocked.
    pub ns: u64,
}

/// Frames of one user stack of an off-CPU thread.
pub const OFFCPU_USER_DEPTH: usize = 126;

/// A user stack in `OFFCPU_USER_STACKS`, leaf first.
///
/// Walked by the off-CPU program itself, by frame pointers, with one
/// addition the kernel's walker lacks: when the frame pointer register
/// holds no frame pointer (a C library wait such as
/// `pthread_cond_timedwait` uses it as a general register) the walk
/// starts from the first frame record found on the stack above the stack
/// pointer that a return address following a call instruction vouches for,
/// so the frames of the caller (a JVM's, with their Java frames) are not
/// lost.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OffCpuUserStack {
    /// Frames used in `ips`.
    pub len: u32,
    /// `1`: the frames after the leaf were found by that scan.
    pub scanned: u32,
    pub ips: [u64; OFFCPU_USER_DEPTH],
}

/// Frames of one kernel stack of an off-CPU thread, as
/// `bpf_get_task_stack` wrote them; unused frames are zero.
pub const OFFCPU_KERNEL_DEPTH: usize = 64;

/// A kernel stack in `OFFCPU_KERNEL_STACKS`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OffCpuKernelStack {
    pub ips: [u64; OFFCPU_KERNEL_DEPTH],
}

/// Where a thread left its own code, and the user stack walked there.
///
/// Walking the user stack at every switch-out costs more than a short
/// context switch itself, so a walk is kept with the registers it started
/// from: a thread that leaves again from the same site within
/// `OFFCPU_SITE_TTL_NS` reuses it. Registers do not tell apart two callers
/// whose frames sit at the same addresses and reach the same instruction
/// (checking the frame record would, but a user memory read per switch
/// costs as much as the rest); the time limit bounds how long such a walk
/// is reused.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OffCpuSite {
    /// User instruction, stack and frame pointers.
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    /// The system call it was in (`orig_ax`; -1 outside one).
    pub syscall: u64,
    /// When the stack was walked; `0`: never.
    pub walked_ns: u64,
    /// The user stack: its key in `OFFCPU_USER_STACKS`, `0` for none.
    pub stack: u64,
}

/// The kernel stack of one of a thread's recent counted waits, and what it
/// was read for. Reading a blocked thread's kernel stack (the kernel's unwinder)
/// cost more than half of the program's time on a Spark host, and a
/// thread mostly waits the same way again: in the same system call with
/// the same first argument (its own futex, the same file descriptor) and
/// the same state, which take the same kernel path whatever user code
/// made the call. Such a wait reuses the stack for `OFFCPU_SITE_TTL_NS`
/// after it was read, as a site reuses its user stack.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OffCpuKernelWait {
    /// The system call (`orig_ax`; -1 outside one) and its first argument.
    pub syscall: u64,
    pub arg: u64,
    /// When the stack was read; `0`: never.
    pub read_ns: u64,
    /// Its key in `OFFCPU_KERNEL_STACKS`.
    pub stack: u64,
    /// The wait's state (see [`OffCpuKey::state`]).
    pub state: u32,
    pub _pad: u32,
}

/// Kernel stacks remembered per thread (see [`OffCpuKernelWait`]): a
/// thread that alternates between two waits (a lock and a condition, a
/// socket and a timer) keeps both.
pub const OFFCPU_KERNEL_WAITS: usize = 2;

/// Sites remembered per thread: a thread that is preempted on its way to
/// a wait (a writer woken reader, for one) alternates between two.
pub const OFFCPU_SITES: usize = 2;

/// A thread of interest's slot, found by its thread id (one load from the
/// `task_struct` the sched_switch tracepoint hands over): whether it is
/// away, since when, and the sites it last left from. Slots are the
/// entries of the `OFFCPU_THREADS` array at [`offcpu_thread_index`] of that
/// id (an array entry is found without a hash lookup, which costs more
/// than the rest of a short switch); a thread whose entry another holds
/// has its slot in the `OFFCPU_START` hash map instead.
///
/// By id, not by `task_struct` address: the address is a typed pointer,
/// which the verifier lets no arithmetic touch, and turning it into a
/// number (through a per-CPU map word) cost about 10 ns a switch between
/// two watched threads, a third of what the program adds to one.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OffCpuStart {
    /// The holder's thread id; `0`: a free entry.
    pub tid: u32,
    pub tgid: u32,
    /// Non-zero once a thread whose entry this is went to `OFFCPU_START`:
    /// only then is a thread not found here looked for there.
    pub spilled: u32,
    /// How it left, in the sched_switch report encoding (see [`OffCpuKey::state`]).
    pub state: u32,
    /// The time of its switch-out (the run queue's clock, or
    /// `bpf_ktime_get_ns` where that is not known: only compared with the
    /// same clock at its switch-in); `0`: no period open.
    pub ktime_ns: u64,
    /// Which of `sites` the open period left from.
    pub site: u32,
    pub _pad: u32,
    /// The Python stack it left from (walked at every switch-out of a
    /// followed CPython thread: unlike the native stack, a Python chain
    /// cannot be told apart by registers), `0` for none.
    pub python_stack: u64,
    /// The first argument of the system call the open period left in.
    pub arg: u64,
    pub sites: [OffCpuSite; OFFCPU_SITES],
    pub kernel_waits: [OffCpuKernelWait; OFFCPU_KERNEL_WAITS],
    pub comm: [u8; COMM_LEN],
}

/// Negative stack ids that the kernel returns from `bpf_get_stackid`.
pub mod stack_error {
    /// No stack of this kind: a sample taken in user mode has no kernel stack,
    /// a kernel thread has no user stack. Normal, not an error.
    pub const EFAULT: i32 = -14;
    /// Hash bucket of the stack map taken by another stack (no `BPF_F_REUSE_STACKID`,
    /// so older ids stay valid): this sample's stack is lost but the sample is counted.
    pub const EEXIST: i32 = -17;
}

/// Indices into each CPU's `STATS` value.
pub mod stat {
    /// Every time the sampler ran.
    pub const SAMPLES: u32 = 0;
    /// Samples of the idle task (pid 0), which are not aggregated.
    pub const IDLE: u32 = 1;
    /// Samples of processes outside the `--pid` filter.
    pub const FILTERED: u32 = 2;
    /// Samples lost because the count map was full.
    pub const COUNT_MAP_FULL: u32 = 3;
    /// Samples counted without a user stack because of a stack-map collision.
    pub const USER_STACK_LOST: u32 = 4;
    /// Samples counted without a kernel stack because of a stack-map collision.
    pub const KERNEL_STACK_LOST: u32 = 5;
    /// Thread renames lost: the `RENAMES` ring buffer was full (the
    /// thread's epoch still moved on; userspace names it from its comm), or
    /// a thread renamed by another one could not be told (its
    /// `task_struct::pid` offset was not found in the kernel's BTF).
    pub const RENAMES_LOST: u32 = 6;
    /// Thread renames seen (uprobe and tracepoint).
    pub const RENAMES: u32 = 7;
    /// Switch-outs of threads of interest (off-CPU).
    pub const OFFCPU_SWITCHES: u32 = 8;
    /// Off-CPU periods shorter than `--min-block-us`, not counted.
    pub const OFFCPU_SHORT: u32 = 9;
    /// Off-CPU periods lost because the off-CPU count map was full.
    pub const OFFCPU_COUNT_MAP_FULL: u32 = 10;
    /// Switch-outs not recorded because `OFFCPU_START` was full (more
    /// threads of interest than it has entries); also threads of interest
    /// that could not be given their `OFFCPU_MARKED` storage (none of their
    /// switches is recorded).
    pub const OFFCPU_THREADS_FULL: u32 = 11;
    /// Off-CPU stacks lost because their ring (`OFFCPU_NEW_*_STACKS`) was
    /// full between two drains: the time still counts, under a
    /// `[... stack lost]` frame.
    pub const OFFCPU_STACKS_LOST: u32 = 12;
    /// Switch-outs whose user stack was walked (the others reused the walk
    /// of their site).
    pub const OFFCPU_USER_WALKS: u32 = 13;
    /// Python stacks lost to a full `PY_STACKS` map (the sample still counts,
    /// with its native frames).
    pub const PY_STACKS_LOST: u32 = 14;
    /// Samples of JVMs whose stack the kernel walked through Java frames.
    pub const HOTSPOT_WALKS: u32 = 15;
    /// Of those, stacks lost to a full `HOTSPOT_STACKS` map (the sample
    /// still counts, with a frame-pointer walk of its user stack).
    pub const HOTSPOT_STACKS_LOST: u32 = 16;
    /// Counted waits whose kernel stack was read (the others had none, or
    /// reused one read for a like wait of their thread: see
    /// [`super::OffCpuKernelWait`]).
    pub const OFFCPU_KERNEL_READS: u32 = 17;
    /// Walked JVM samples whose walk went on from the thread's last Java
    /// frame (its `JavaFrameAnchor`) past native frames.
    pub const HOTSPOT_ANCHORED: u32 = 18;
    /// Number of statistics.
    pub const COUNT: u32 = 19;
}

/// Map and global names, shared so neither side spells them twice.
pub mod names {
    /// The perf_event program that takes on-CPU samples.
    pub const PROGRAM_ON_CPU: &str = "sample_on_cpu";
    /// `Array<u32>` of one element: which buffer (0 or 1) the sampler writes,
    /// or [`crate::BUFFER_STOPPED`].
    pub const ACTIVE_BUFFER: &str = "ACTIVE_BUFFER";
    /// Count maps, one per buffer.
    pub const COUNTS: [&str; 2] = ["COUNTS_0", "COUNTS_1"];
    /// Stack maps, one per buffer.
    pub const STACKS: [&str; 2] = ["STACKS_0", "STACKS_1"];
    /// `Array<SampleKey>` per buffer, memory-mappable: each CPU's samples,
    /// [`LOG_PER_CPU`] slots a CPU, appended before any are hashed into
    /// [`COUNTS`].
    pub const SAMPLE_LOGS: [&str; 2] = ["SAMPLE_LOG_0", "SAMPLE_LOG_1"];
    /// `PerCpuArray<u32>` by buffer: the slots each CPU has filled in its log.
    pub const LOG_LENGTHS: &str = "LOG_LENGTHS";
    /// Global `u32`: a CPU's slots in each [`SAMPLE_LOGS`] map (`0`: no log).
    pub const LOG_PER_CPU: &str = "LOG_PER_CPU";
    /// `PerCpuArray<[u64; stat::COUNT]>` of one entry: every per-CPU
    /// statistic, indexed by [`crate::stat`].
    pub const STATS: &str = "STATS";
    /// `HashMap<u32, u8>` of process IDs to sample when filtering is on.
    pub const TARGET_TGIDS: &str = "TARGET_TGIDS";
    /// Global `u8`: non-zero when only [`TARGET_TGIDS`] are sampled.
    pub const FILTER_BY_TGID: &str = "FILTER_BY_TGID";
    /// Global `u64`: non-zero, the id of the cgroup (v2) whose threads, and
    /// its descendants', are the only ones sampled.
    pub const FILTER_CGROUP_ID: &str = "FILTER_CGROUP_ID";
    /// Global `u32`: the level of [`FILTER_CGROUP_ID`] in the hierarchy
    /// (its root is 0).
    pub const FILTER_CGROUP_LEVEL: &str = "FILTER_CGROUP_LEVEL";
    /// The uprobe on HotSpot's `os::set_native_thread_name(const char*)`.
    pub const PROGRAM_JVM_THREAD_NAME: &str = "jvm_thread_name";
    /// The `task:task_rename` BTF tracepoint program.
    pub const PROGRAM_TASK_RENAME: &str = "task_rename";
    /// `LruHashMap<u32 tid, u32 epoch>`: every thread's current name epoch.
    pub const THREAD_EPOCHS: &str = "THREAD_EPOCHS";
    /// Ring buffer of [`crate::RenameEvent`]s.
    pub const RENAMES: &str = "RENAMES";
    /// `HashMap<u32 tgid, u8>`: processes whose `task_rename`s are reported
    /// (JVMs whose full names come from Thread.print).
    pub const RENAME_WATCH_TGIDS: &str = "RENAME_WATCH_TGIDS";
    /// Global `u32`: offset of `pid` in `struct task_struct`, from the
    /// kernel's BTF (`0`: unknown).
    pub const TASK_STRUCT_PID_OFFSET: &str = "TASK_STRUCT_PID_OFFSET";
    /// Global `u32`: offset of `tgid` in `struct task_struct`, from the
    /// kernel's BTF (`sched_switch` reads it from `prev` and `next`).
    pub const TASK_STRUCT_TGID_OFFSET: &str = "TASK_STRUCT_TGID_OFFSET";
    /// Globals `u32`: offsets of `task_struct::se.cfs_rq`, `cfs_rq::rq`
    /// and `rq::clock`, from the kernel's BTF; `u8` `SCHED_CLOCK_KNOWN`:
    /// non-zero when all three are (`sched_switch` then times switches
    /// by the run queue's clock).
    pub const TASK_CFS_RQ_OFFSET: &str = "TASK_CFS_RQ_OFFSET";
    pub const CFS_RQ_RQ_OFFSET: &str = "CFS_RQ_RQ_OFFSET";
    pub const RQ_CLOCK_OFFSET: &str = "RQ_CLOCK_OFFSET";
    pub const SCHED_CLOCK_KNOWN: &str = "SCHED_CLOCK_KNOWN";
    /// Global `u32`: offset of `task_struct::bpf_storage` (the task's BPF
    /// local storage, NULL until a program gives it some), from the
    /// kernel's BTF (`0`: unknown, and every switch takes the full test).
    pub const TASK_BPF_STORAGE_OFFSET: &str = "TASK_BPF_STORAGE_OFFSET";
    /// The `sched_switch` BTF tracepoint program: threads of interest leave
    /// and come back.
    pub const PROGRAM_SCHED_SWITCH: &str = "sched_switch";
    /// The `sched_process_exit` BTF tracepoint program that forgets exited
    /// threads.
    pub const PROGRAM_PROCESS_EXIT: &str = "sched_process_exit";
    /// The `task_newtask` BTF tracepoint program: a watched process's new
    /// thread is marked as it is created.
    pub const PROGRAM_TASK_NEWTASK: &str = "task_newtask";
    /// The task iterator (`iter/task`) that marks the threads a watched
    /// process already has.
    pub const PROGRAM_MARK_WATCHED: &str = "mark_watched_threads";
    /// Off-CPU count maps (blocked nanoseconds), one per buffer: what a
    /// full [`OFFCPU_LOGS`] log had no room for.
    pub const OFFCPU_COUNTS: [&str; 2] = ["OFFCPU_COUNTS_0", "OFFCPU_COUNTS_1"];
    /// `Array<OffCpuPeriod>` per buffer, memory-mappable: each CPU's
    /// counted periods, [`OFFCPU_LOG_PER_CPU`] slots a CPU, appended before
    /// any are hashed into [`OFFCPU_COUNTS`].
    pub const OFFCPU_LOGS: [&str; 2] = ["OFFCPU_LOG_0", "OFFCPU_LOG_1"];
    /// `PerCpuArray<u32>` by buffer: the slots each CPU has filled in its
    /// off-CPU log.
    pub const OFFCPU_LOG_LENGTHS: &str = "OFFCPU_LOG_LENGTHS";
    /// Global `u32`: a CPU's slots in each [`OFFCPU_LOGS`] map (`0`: no log).
    pub const OFFCPU_LOG_PER_CPU: &str = "OFFCPU_LOG_PER_CPU";
    /// `PerCpuArray<u32>` by [`crate::hashed`] index: non-zero where a CPU
    /// put something in that hash map since its drain last read it.
    pub const HASHED: &str = "HASHED";
    /// `HashMap<u32 tgid, PythonOffsets>`: CPython processes followed.
    pub const PY_PROCS: &str = "PY_PROCS";
    /// `HashMap<u32 tid, RuntimeThread>`: their threads' `PyThreadState`s.
    pub const PY_THREADS: &str = "PY_THREADS";
    /// `HashMap<u32 tgid, u8>`: processes of `PY_PROCS` followed since
    /// their fork by the kernel, not yet by userspace.
    pub const PY_FORKED: &str = "PY_FORKED";
    /// The BTF tracepoint programs that follow a followed CPython's forked
    /// children from their fork, and forget them at their exec or exit.
    pub const PROGRAM_PYTHON_FORK: &str = "python_fork";
    pub const PROGRAM_PYTHON_EXEC: &str = "python_exec";
    pub const PROGRAM_PYTHON_EXIT: &str = "python_exit";
    /// `HashMap<u64, PythonStack>`: Python stacks of samples, one per buffer.
    pub const PY_STACKS: [&str; 2] = ["PY_STACKS_0", "PY_STACKS_1"];
    /// `LruHashMap<u64, OffCpuUserStack>`: user stacks of off-CPU periods,
    /// by a hash of their frames (what spares re-sending them).
    pub const OFFCPU_USER_STACKS: &str = "OFFCPU_USER_STACKS";
    /// Ring buffers of [`crate::NewStack`]s: every off-CPU user, kernel and
    /// Python stack as it is first filed.
    pub const OFFCPU_NEW_USER_STACKS: &str = "OFFCPU_NEW_USER_STACKS";
    pub const OFFCPU_NEW_KERNEL_STACKS: &str = "OFFCPU_NEW_KERNEL_STACKS";
    pub const OFFCPU_NEW_PY_STACKS: &str = "OFFCPU_NEW_PY_STACKS";
    /// `Array<OffCpuStart>` at [`crate::offcpu_thread_index`] of the
    /// thread id: threads of interest that have left
    /// a CPU at least once; freed as they exit.
    pub const OFFCPU_THREADS: &str = "OFFCPU_THREADS";
    /// `HashMap<u32 thread id, OffCpuStart>`: the slots of
    /// threads whose `OFFCPU_THREADS` entry another thread holds.
    pub const OFFCPU_START: &str = "OFFCPU_START";
    /// `LruHashMap<u64, OffCpuKernelStack>`: kernel stacks of off-CPU periods.
    pub const OFFCPU_KERNEL_STACKS: &str = "OFFCPU_KERNEL_STACKS";
    /// `LruHashMap<u64, PythonStack>`: Python stacks of off-CPU periods, by
    /// a hash of their frames.
    pub const OFFCPU_PY_STACKS: &str = "OFFCPU_PY_STACKS";
    /// `Array<u32>` indexed by `tgid & OFFCPU_SLOT_MASK`: the tgid whose
    /// off-CPU time is recorded (with [`crate::OFFCPU_WATCHED_PYTHON`] set
    /// when its Python frames are followed), `0` for none. An array, not a hash: it is
    /// read at every context switch of the host.
    pub const OFFCPU_WATCHED: &str = "OFFCPU_WATCHED";
    /// Global `u32`: slots of `OFFCPU_WATCHED`, minus one (a power of two).
    pub const OFFCPU_SLOT_MASK: &str = "OFFCPU_SLOT_MASK";
    /// Global `u64`: shorter off-CPU periods are not counted.
    pub const OFFCPU_MIN_BLOCK_NS: &str = "OFFCPU_MIN_BLOCK_NS";
    /// The perf_event program that walks a JVM's user stack (tail-called
    /// by the sampler, and by itself every [`crate::HOTSPOT_FRAMES_PER_RUN`] frames).
    pub const PROGRAM_HOTSPOT_WALK: &str = "hotspot_walk";
    /// The perf_event program that files a walked JVM stack and counts
    /// the sample (tail-called by the walker when it is done).
    pub const PROGRAM_HOTSPOT_FINISH: &str = "hotspot_finish";
    /// `ProgramArray`: [`PROGRAM_HOTSPOT_WALK`] at [`crate::HOTSPOT_WALK_SLOT`],
    /// [`PROGRAM_HOTSPOT_FINISH`] at [`crate::HOTSPOT_FINISH_SLOT`].
    pub const HOTSPOT_WALKER: &str = "HOTSPOT_WALKER";
    /// `HashMap<u32 tgid, HotspotProcInfo>`: JVMs whose frames are walked.
    pub const HOTSPOT_PROCS: &str = "HOTSPOT_PROCS";
    /// `HashMap<u32 tid, RuntimeThread>`: walked JVMs' `JavaThread`s.
    pub const HOTSPOT_THREADS: &str = "HOTSPOT_THREADS";
    /// `HashMap<u64, HotspotStack>`: user stacks of JVM samples deeper than
    /// [`crate::HOTSPOT_SHORT_FRAMES`], one per buffer.
    pub const HOTSPOT_STACKS: [&str; 2] = ["HOTSPOT_STACKS_0", "HOTSPOT_STACKS_1"];
    /// `HashMap<u64, HotspotShortStack>`: the others, one per buffer: what
    /// a full [`HOTSPOT_SHORT_LOGS`] log had no room for.
    pub const HOTSPOT_SHORT_STACKS: [&str; 2] =
        ["HOTSPOT_SHORT_STACKS_0", "HOTSPOT_SHORT_STACKS_1"];
    /// `Array<NewStack<HotspotShortStack>>` per buffer, memory-mappable:
    /// each CPU's short HotSpot stacks under their hashes, [`LOG_PER_CPU`]
    /// slots a CPU (a JVM sample's stack is filed here first).
    pub const HOTSPOT_SHORT_LOGS: [&str; 2] = ["HOTSPOT_SHORT_LOG_0", "HOTSPOT_SHORT_LOG_1"];
    /// `PerCpuArray<u32>` by buffer: the slots each CPU has filled in its
    /// [`HOTSPOT_SHORT_LOGS`] log.
    pub const HOTSPOT_LOG_LENGTHS: &str = "HOTSPOT_LOG_LENGTHS";
    /// Every stack map, whose depth userspace sets per recording.
    pub const ALL_STACKS: [&str; 2] = ["STACKS_0", "STACKS_1"];
}

/// Indices of the `HASHED` marks: a hash map of a buffer (counts, stacks)
/// is walked at its drain only if some CPU put something in it (see
/// [`names::HASHED`]).
pub mod hashed {
    /// On-CPU count map of buffer 0; buffer 1's is the next.
    pub const ON_CPU: u32 = 0;
    /// Off-CPU count map of buffer 0; buffer 1's is the next.
    pub const OFF_CPU: u32 = 2;
    /// `HOTSPOT_SHORT_STACKS` of buffer 0; buffer 1's is the next.
    pub const HOTSPOT_SHORT: u32 = 4;
    /// `HOTSPOT_STACKS` of buffer 0; buffer 1's is the next.
    pub const HOTSPOT_LONG: u32 = 6;
    /// `PY_STACKS` of buffer 0; buffer 1's is the next.
    pub const PYTHON: u32 = 8;
    pub const COUNT: u32 = 10;
}

/// Default entries of each off-CPU count map.
pub const DEFAULT_OFFCPU_COUNT_ENTRIES: u32 = 65_536;
/// Default entries of the off-CPU stack map.
pub const DEFAULT_OFFCPU_STACK_ENTRIES: u32 = 8_192;
/// Set in an `OFFCPU_WATCHED` value (beside the tgid) when the process's
/// Python frames are followed: only then does a switch-out look for them.
pub const OFFCPU_WATCHED_PYTHON: u32 = 1 << 31;
/// Most slots of `OFFCPU_WATCHED`: with a larger `pid_max`, process ids
/// share slots modulo this.
pub const MAX_OFFCPU_SLOTS: u32 = 1 << 18;
/// Entries of `OFFCPU_THREADS` (a power of two).
pub const DEFAULT_OFFCPU_THREADS: u32 = 32_768;
/// Entries of `OFFCPU_START`, for threads whose `OFFCPU_THREADS` entry is
/// taken (by a thread whose id is the same modulo `DEFAULT_OFFCPU_THREADS`).
pub const OFFCPU_SPILLED_THREADS: u32 = 8_192;

/// The `OFFCPU_THREADS` entry of thread `tid`: its low bits. Thread ids
/// are handed out in increasing order, so the threads of a process mostly
/// have ids close together, and those alive at once share an entry only
/// when `DEFAULT_OFFCPU_THREADS` ids apart.
#[inline(always)]
pub const fn offcpu_thread_index(tid: u32) -> u32 {
    tid & (DEFAULT_OFFCPU_THREADS - 1)
}
/// A site's walked user stack is reused for this long, then walked again:
/// how long a change of caller behind the same registers can go unseen.
/// At 100 ms, threads that wait at one site a few times a second (most of
/// a Spark executor's) were walked at every wait: over the testbed's job
/// 1 s walked 14.2k and 14.7k times against 22.1k and 23.0k.
pub const OFFCPU_SITE_TTL_NS: u64 = 1_000_000_000;
/// Key of a stack that could not be kept (its ring was full): userspace
/// shows a marker instead of frames. `0` is "no stack".
pub const STACK_LOST: u64 = u64::MAX;

/// A stack sent to userspace when it is first filed (off-CPU stack rings):
/// the hash it is filed under, then the stack.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NewStack<V> {
    pub hash: u64,
    pub stack: V,
}

/// Bytes of the ring that sends new off-CPU user stacks (~1 KiB each: 4,096
/// new stacks between two drains).
pub const OFFCPU_USER_RING_BYTES: u32 = 4 << 20;
/// Bytes of the ring that sends new off-CPU kernel stacks (~0.5 KiB each).
pub const OFFCPU_KERNEL_RING_BYTES: u32 = 2 << 20;
/// Bytes of the ring that sends new off-CPU Python stacks (~0.8 KiB each).
pub const OFFCPU_PY_RING_BYTES: u32 = 2 << 20;

/// Entries of `OFFCPU_KERNEL_STACKS`.
pub const OFFCPU_KERNEL_STACK_ENTRIES: u32 = 16_384;
/// Entries of `OFFCPU_PY_STACKS`.
pub const OFFCPU_PY_STACK_ENTRIES: u32 = 4_096;

/// Entries of the thread-epoch map (least recently used are evicted).
pub const THREAD_EPOCH_ENTRIES: u32 = 65_536;
/// Bytes of the rename ring buffer (a power-of-two multiple of the page size).
pub const RENAME_RING_BYTES: u32 = 1 << 20;
/// Processes whose renames the tracepoint reports.
pub const MAX_RENAME_WATCH_TGIDS: u32 = 1_024;

/// Default number of entries of each count map.
pub const DEFAULT_COUNT_MAP_ENTRIES: u32 = 65_536;
/// Default number of entries of each stack map (userspace may resize).
pub const DEFAULT_STACK_MAP_ENTRIES: u32 = 16_384;
/// Maximum number of processes in the `--pid` filter.
pub const MAX_TARGET_TGIDS: u32 = 4_096;
/// The value of `ACTIVE_BUFFER` that stops all counting. A recording ends by
/// storing it, then drains both buffers and writes its files; the programs
/// are detached only after that, because each detach waits for an RCU
/// grace period that can take long on a host with thousands of threads.
pub const BUFFER_STOPPED: u32 = 2;

/// The elements of `ACTIVE_BUFFER` (an `Array<u32>` every sample reads).
pub mod control {
    /// Which buffer (0 or 1) the programs write, or [`crate::BUFFER_STOPPED`].
    pub const BUFFER: u32 = 0;
    /// Moved on by userspace (its only writer) whenever it registers or
    /// forgets a JVM whose stacks the kernel walks or a followed CPython.
    pub const PROCESS_GENERATION: u32 = 1;
    /// Non-zero once the `task_rename` tracepoint is attached: every
    /// rename then moves the samplers' kept facts on, so they keep a
    /// thread's comm too instead of reading it at every sample.
    pub const COMM_KEPT: u32 = 2;
    /// Number of elements.
    pub const COUNT: u32 = 3;
}
/// Depth the stack maps are compiled with (the kernel's default
/// `perf_event_max_stack`); userspace rewrites it before loading.
pub const COMPILED_STACK_DEPTH: u32 = 127;

#[cfg(feature = "user")]
mod user {
    // SAFETY: SampleKey is repr(C), Copy, has no padding (6 x u32, u64, [u8; 16]) and
    // every bit pattern is valid.
    unsafe impl aya::Pod for super::SampleKey {}
    // SAFETY: repr(C), Copy, no padding (2 x u32, 3 x u64, 2 x u32,
    // [u8; 16]), any bits valid.
    unsafe impl aya::Pod for super::OffCpuKey {}
    // SAFETY: repr(C), an OffCpuKey (no padding, size a multiple of 8)
    // then a u64, any bits valid.
    unsafe impl aya::Pod for super::OffCpuPeriod {}
    // SAFETY: repr(C), an array of u64, any bits valid.
    unsafe impl aya::Pod for super::OffCpuKernelStack {}
    // SAFETY: repr(C), two u32 then u64s, no padding, any bits valid.
    unsafe impl aya::Pod for super::OffCpuUserStack {}
    // SAFETY: repr(C), eight u32, any bits valid.
    unsafe impl aya::Pod for super::PythonOffsets {}
    // SAFETY: repr(C), two u32 then pairs of u64, no padding, any bits valid.
    unsafe impl aya::Pod for super::PythonStack {}
    // SAFETY: repr(C), four u32, u64, two u32, u64s, sites of six u64 each,
    // [u8; 16]: no padding, any bits valid.
    unsafe impl aya::Pod for super::OffCpuStart {}
    // SAFETY: repr(C), u64s then twelve u32: no padding, any bits valid.
    unsafe impl aya::Pod for super::HotspotProcInfo {}
    // SAFETY: repr(C), two u32 then a u64: no padding, any bits valid.
    unsafe impl aya::Pod for super::RuntimeThread {}
    // SAFETY: repr(C), two u32 then frames of (u64, u32, u32): no padding,
    // any bits valid.
    unsafe impl<const N: usize> aya::Pod for super::HotspotStackOf<N> {}
    // SAFETY: repr(C), a u64 then a HotspotStackOf (size a multiple of 8):
    // no padding, any bits valid.
    unsafe impl<const N: usize> aya::Pod for super::NewStack<super::HotspotStackOf<N>> {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_key_has_no_padding() {
        assert_eq!(core::mem::size_of::<SampleKey>(), 6 * 4 + 2 * 8 + COMM_LEN);
        assert_eq!(core::mem::align_of::<SampleKey>(), 8);
    }

    #[test]
    fn off_cpu_records_have_no_padding() {
        assert_eq!(core::mem::size_of::<OffCpuKey>(), 3 * 8 + 4 * 4 + COMM_LEN);
        assert_eq!(
            core::mem::size_of::<OffCpuPeriod>(),
            core::mem::size_of::<OffCpuKey>() + 8
        );
        assert_eq!(core::mem::offset_of!(OffCpuPeriod, ns), 56);
        assert_eq!(core::mem::size_of::<OffCpuUserStack>(), 1016);
        assert_eq!(core::mem::size_of::<OffCpuSite>(), 48);
        assert_eq!(core::mem::size_of::<OffCpuKernelWait>(), 4 * 8 + 2 * 4);
        assert_eq!(
            core::mem::size_of::<OffCpuStart>(),
            4 * 4 + 8 + 2 * 4 + 8 + 8 + 48 * OFFCPU_SITES + 40 * OFFCPU_KERNEL_WAITS + COMM_LEN
        );
    }

    #[test]
    fn new_stack_records_are_the_hash_then_the_stack() {
        assert_eq!(core::mem::size_of::<NewStack<OffCpuUserStack>>(), 8 + 1016);
        assert_eq!(
            core::mem::size_of::<NewStack<OffCpuKernelStack>>(),
            8 + 8 * OFFCPU_KERNEL_DEPTH
        );
        assert_eq!(
            core::mem::size_of::<NewStack<PythonStack>>(),
            8 + core::mem::size_of::<PythonStack>()
        );
        assert_eq!(core::mem::offset_of!(NewStack<OffCpuUserStack>, stack), 8);
        // The HotSpot stack logs' slots: no padding between the two.
        assert_eq!(
            core::mem::size_of::<NewStack<HotspotShortStack>>(),
            8 + core::mem::size_of::<HotspotShortStack>()
        );
        assert_eq!(core::mem::offset_of!(NewStack<HotspotShortStack>, stack), 8);
        // Each fits its ring many times over.
        assert!(OFFCPU_USER_RING_BYTES as usize / size_of::<NewStack<OffCpuUserStack>>() >= 4_000);
    }

    #[test]
    fn hotspot_records_have_no_padding() {
        assert_eq!(
            core::mem::size_of::<HotspotProcInfo>(),
            4 * 8 + 3 * 8 * HOTSPOT_MAX_HEAPS + 12 * 4
        );
        assert_eq!(core::mem::size_of::<RuntimeThread>(), 16);
        assert_eq!(core::mem::offset_of!(RuntimeThread, state), 8);
        assert_eq!(core::mem::size_of::<HotspotFrame>(), 16);
        assert_eq!(
            core::mem::size_of::<HotspotStack>(),
            8 + 16 * HOTSPOT_MAX_FRAMES
        );
        assert_eq!(core::mem::offset_of!(HotspotStack, frames), 8);
        // A short stack is the start of a long one.
        assert_eq!(
            core::mem::size_of::<HotspotShortStack>(),
            8 + 16 * HOTSPOT_SHORT_FRAMES
        );
        assert_eq!(core::mem::offset_of!(HotspotShortStack, frames), 8);
        const { assert!(HOTSPOT_SHORT_FRAMES < HOTSPOT_MAX_FRAMES) };
        // The walker's runs (the first and 32 tail calls; the 33rd
        // finishes) cover the depth.
        const { assert!(33 * HOTSPOT_FRAMES_PER_RUN >= HOTSPOT_MAX_FRAMES) };
        // The walker indexes frames with a mask.
        const { assert!(HOTSPOT_MAX_FRAMES.is_power_of_two()) };
    }

    #[test]
    fn rename_event_has_no_padding() {
        assert_eq!(
            core::mem::size_of::<RenameEvent>(),
            4 * 4 + 8 + THREAD_NAME_LEN
        );
    }
}
