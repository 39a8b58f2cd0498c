//! Off-CPU time: where threads of interest wait, from the `sched_switch`
//! BTF tracepoint (kprobes, and so `finish_task_switch`, are not available
//! everywhere; fentry is refused on some kernels).
//!
//! The program runs on every context switch of the host, in the context of
//! the thread leaving (`prev`), so its cost is kept to what each side needs:
//! - `prev` of interest (its process is in `OFFCPU_WATCHED`): the time, how
//!   it left, and (unless it is still runnable: preempted, or yielding)
//!   its user stack go to its slot (`OffCpuStart`: an
//!   `OFFCPU_THREADS` entry, or for the few whose entry is taken, one in
//!   `OFFCPU_START`). The user
//!   stack can only be read here, in its own context; walking it costs more
//!   than a short context switch, so a walk is reused while the thread
//!   leaves from the same site (see `OffCpuSite`). A followed CPython
//!   thread's Python frames are walked too, every time.
//! - `next` with an open slot: if it was away at least
//!   `OFFCPU_MIN_BLOCK_NS`, its kernel stack (still the one it blocked in:
//!   it has not run since) is read with `bpf_get_task_stack` (not for a
//!   thread rescheduled on its way back to user mode; and not again for
//!   a wait like one of its last two, see `OffCpuKernelWait`: the
//!   unwinder was more than half of this program's time on a Spark host),
//!   and the time is added to `(thread, stacks, epoch, state)` in the
//!   active buffer.
//!   Shorter periods cost one slot read.
//!
//! A switch between two watched threads that were away briefly (a
//! ping-pong, a lock handed back and forth) is the common costly case:
//! it reads the clock once, finds both slots as array entries, and
//! compares registers; a hash lookup is what made it slow.
//!
//! Every switch of the host pays for telling whether `prev` or `next` is
//! watched, so the test starts with one load a side: every thread of a
//! watched process is given BPF local storage (`OFFCPU_MARKED`), and a
//! thread without any is not watched. A thread with some (ours, or another
//! tool's) takes the full test: its ids, read straight from the typed
//! pointers the tracepoint hands over (see `task`), not by helper calls.
//! And the time of a switch is the run queue's clock, which `__schedule`
//! has just updated: `bpf_ktime_get_ns` reads the clocksource, and on a
//! virtual machine that cost 40 ns, more than the rest of a switch-out and a
//! switch-in of watched threads together.
//!
//! What a short wait never does (walking a stack, filing a Python stack,
//! giving a thread its slot, counting a period) is out of line, in BPF
//! subprograms (`#[inline(never)]`). Inlined, it made the program 28 KB of
//! instructions, with the few a short wait runs scattered among them; apart,
//! the program is 7 KB and a switch of two watched threads runs through a
//! few hundred bytes of it. Its own time fell little (about 2 ns a switch),
//! the ping-pong's by more (0.7, 1.6 and 2.1 points of its time in three
//! runs of 16 to 24 interleaved rounds): most likely the instruction cache
//! the kernel's own switch code then finds as it left it.

use aya_ebpf::{
    Global,
    bindings::{
        BPF_F_MMAPABLE, BPF_F_NO_PREALLOC, BPF_LOCAL_STORAGE_GET_F_CREATE, BPF_NOEXIST,
        bpf_map_type, pt_regs, task_struct,
    },
    helpers::{
        bpf_get_current_comm, bpf_get_task_stack, bpf_ktime_get_ns, bpf_probe_read_user,
        bpf_probe_read_user_buf, bpf_task_pt_regs, bpf_task_storage_get,
    },
    macros::{btf_tracepoint, map},
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf},
    programs::BtfTracePointContext,
};
use profiler_common::{
    COMM_LEN, DEFAULT_OFFCPU_COUNT_ENTRIES, DEFAULT_OFFCPU_STACK_ENTRIES, DEFAULT_OFFCPU_THREADS,
    MAX_OFFCPU_SLOTS, OFFCPU_KERNEL_DEPTH, OFFCPU_KERNEL_RING_BYTES, OFFCPU_KERNEL_STACK_ENTRIES,
    OFFCPU_PY_RING_BYTES, OFFCPU_PY_STACK_ENTRIES, OFFCPU_SITE_TTL_NS, OFFCPU_SPILLED_THREADS,
    OFFCPU_USER_DEPTH, OFFCPU_USER_RING_BYTES, OFFCPU_WATCHED_PYTHON, OffCpuKernelStack,
    OffCpuKernelWait, OffCpuKey, OffCpuPeriod, OffCpuSite, OffCpuStart, OffCpuUserStack,
    PythonStack, STACK_LOST, hashed, offcpu_thread_index, stat,
};

use crate::{
    hashed_stacks::{Announced, FNV_OFFSET, StackSink, fnv},
    logs::{Log, mark_hashed},
    on_cpu::active_buffer,
    python::python_stack,
    stats::count_stat,
    task,
    thread_names::thread_epoch,
};

#[unsafe(no_mangle)]
static OFFCPU_MIN_BLOCK_NS: Global<u64> = Global::new(0);
#[unsafe(no_mangle)]
static OFFCPU_SLOT_MASK: Global<u32> = Global::new(MAX_OFFCPU_SLOTS - 1);

#[map]
static OFFCPU_WATCHED: Array<u32> = Array::with_max_entries(MAX_OFFCPU_SLOTS, 0);

#[map]
static OFFCPU_THREADS: Array<OffCpuStart> = Array::with_max_entries(DEFAULT_OFFCPU_THREADS, 0);
#[map]
static OFFCPU_START: HashMap<u32, OffCpuStart> =
    HashMap::with_max_entries(OFFCPU_SPILLED_THREADS, 0);

#[map]
static OFFCPU_COUNTS_0: HashMap<OffCpuKey, u64> =
    HashMap::with_max_entries(DEFAULT_OFFCPU_COUNT_ENTRIES, 0);
#[map]
static OFFCPU_COUNTS_1: HashMap<OffCpuKey, u64> =
    HashMap::with_max_entries(DEFAULT_OFFCPU_COUNT_ENTRIES, 0);

/// Each CPU's counted periods of a buffer, appended before any are hashed
/// into its count map (see `crate::logs`): `OFFCPU_LOG_PER_CPU` slots per
/// CPU. Sized by userspace at load.
#[map]
static OFFCPU_LOG_0: Array<OffCpuPeriod> = Array::with_max_entries(1, BPF_F_MMAPABLE);
#[map]
static OFFCPU_LOG_1: Array<OffCpuPeriod> = Array::with_max_entries(1, BPF_F_MMAPABLE);
#[map]
static OFFCPU_LOG_LENGTHS: PerCpuArray<u32> = PerCpuArray::with_max_entries(2, 0);
/// Slots of each CPU in an off-CPU log (0: no log, every period is hashed).
#[unsafe(no_mangle)]
static OFFCPU_LOG_PER_CPU: Global<u32> = Global::new(0);

// The off-CPU stacks: LRU maps that spare re-sending, and rings every new
// stack goes through (see `hashed_stacks::Announced`).
#[map]
static OFFCPU_USER_STACKS: LruHashMap<u64, OffCpuUserStack> =
    LruHashMap::with_max_entries(DEFAULT_OFFCPU_STACK_ENTRIES, 0);
#[map]
static OFFCPU_NEW_USER_STACKS: RingBuf = RingBuf::with_byte_size(OFFCPU_USER_RING_BYTES, 0);

/// Scratch space for one user stack, and for the words scanned above a
/// stack pointer (both too large for the BPF stack).
#[map]
static USER_STACK_SCRATCH: PerCpuArray<OffCpuUserStack> = PerCpuArray::with_max_entries(1, 0);
#[map]
static SCAN_SCRATCH: PerCpuArray<[u64; SCAN_WORDS]> = PerCpuArray::with_max_entries(1, 0);

#[map]
static OFFCPU_PY_STACKS: LruHashMap<u64, PythonStack> =
    LruHashMap::with_max_entries(OFFCPU_PY_STACK_ENTRIES, 0);
#[map]
static OFFCPU_NEW_PY_STACKS: RingBuf = RingBuf::with_byte_size(OFFCPU_PY_RING_BYTES, 0);

#[map]
static OFFCPU_KERNEL_STACKS: LruHashMap<u64, OffCpuKernelStack> =
    LruHashMap::with_max_entries(OFFCPU_KERNEL_STACK_ENTRIES, 0);
#[map]
static OFFCPU_NEW_KERNEL_STACKS: RingBuf = RingBuf::with_byte_size(OFFCPU_KERNEL_RING_BYTES, 0);

/// Scratch space for one kernel stack (too large for the BPF stack).
#[map]
static KERNEL_STACK_SCRATCH: PerCpuArray<OffCpuKernelStack> = PerCpuArray::with_max_entries(1, 0);

/// Words above the stack pointer searched for a frame record.
const SCAN_WORDS: usize = 64;
/// A frame pointer further than this above the stack pointer is not one.
const MAX_FRAME_DISTANCE: u64 = 8 << 20;
/// The end of x86-64 user space (47-bit addresses).
const USER_SPACE_END: u64 = 0x0000_8000_0000_0000;

/// `prev_state` bits, as the kernel keeps them in `task_struct::__state`.
const TASK_UNINTERRUPTIBLE: u32 = 0x2;
/// The thread's last switch-out, after `sched_process_exit` forgot it.
const TASK_DEAD: u32 = 0x80;
const TASK_NOLOAD: u32 = 0x400;
/// What the sched_switch record reports for these (`TASK_REPORT_IDLE`,
/// `TASK_REPORT_MAX`); `OffCpuKey::state` uses the record's encoding.
const REPORT_IDLE: u32 = 0x80;
const REPORT_PREEMPTED: u32 = 0x100;
/// The state bits the record reports as they are (`TASK_REPORT` without
/// the exit states).
const REPORT_BITS: u32 = 0x7f;

/// `sched_switch(bool preempt, task_struct *prev, task_struct *next,
/// unsigned int prev_state)`, in the context of `prev`.
#[btf_tracepoint(function = "sched_switch")]
pub fn sched_switch(ctx: BtfTracePointContext) -> i32 {
    // Both loads first, then one branch: on a switch of two unwatched
    // threads (most of the host's) the two loads overlap.
    let prev: *const task_struct = ctx.arg(1);
    let next: *const task_struct = ctx.arg(2);
    let (out, back) = (task::may_be_watched(prev), task::may_be_watched(next));
    if !(out | back) {
        return 0;
    }
    // One clock read for both sides: read only if either is of interest.
    // (Not one lookup of the statistics for both sides: the pointer, live
    // across the Python walk, made Linux 6.1's verifier explore it past
    // its million instructions.)
    let mut now = 0;
    if out {
        switched_out(&ctx, &mut now);
    }
    if back {
        switched_in(&ctx, &mut now);
    }
    0
}

/// Whether process `tgid` is watched, and if so whether it is a followed
/// CPython. The idle task (0) never is.
#[inline(always)]
fn watched(tgid: u32) -> Option<bool> {
    match OFFCPU_WATCHED.get(tgid & OFFCPU_SLOT_MASK.load()) {
        Some(&watched) if watched & !OFFCPU_WATCHED_PYTHON == tgid && tgid != 0 => {
            Some(watched & OFFCPU_WATCHED_PYTHON != 0)
        }
        _ => None,
    }
}

/// A BTF-defined task storage map (`BPF_MAP_TYPE_TASK_STORAGE`), which
/// aya-ebpf does not define: the layout libbpf and aya read from `.maps`.
#[repr(C)]
pub struct TaskStorage<T> {
    r#type: *const [i32; bpf_map_type::BPF_MAP_TYPE_TASK_STORAGE as usize],
    key: *const i32,
    value: *const T,
    max_entries: *const [i32; 0],
    map_flags: *const [i32; BPF_F_NO_PREALLOC as usize],
}

// SAFETY: never dereferenced; the loader patches the map in.
unsafe impl<T> Sync for TaskStorage<T> {}

/// Storage given to every thread of a watched process, so that a thread
/// without BPF local storage is known unwatched from one load (see
/// `task::may_be_watched`). Its value is not read: that the thread has
/// some is the mark. It goes with the thread.
#[unsafe(link_section = ".maps")]
#[unsafe(export_name = "OFFCPU_MARKED")]
static OFFCPU_MARKED: TaskStorage<u32> = TaskStorage {
    r#type: core::ptr::null(),
    key: core::ptr::null(),
    value: core::ptr::null(),
    max_entries: core::ptr::null(),
    map_flags: core::ptr::null(),
};

/// Gives `task` (a thread of a watched process) its mark.
#[inline(always)]
fn mark(task: *mut task_struct) {
    let storage = unsafe {
        bpf_task_storage_get(
            core::ptr::from_ref(&OFFCPU_MARKED).cast_mut().cast(),
            task.cast(),
            core::ptr::null_mut(),
            BPF_LOCAL_STORAGE_GET_F_CREATE.into(),
        )
    };
    if storage.is_null() {
        // Out of memory: the thread's switches are not recorded, as for
        // one that finds no slot.
        count_stat(stat::OFFCPU_THREADS_FULL);
    }
}

/// A thread is created (`task_newtask(struct task_struct *task, u64
/// clone_flags)`, in its creator's context, its ids set): marked if its
/// process is watched. Threads a process had when it came to be watched
/// are marked by `mark_watched_threads`.
#[btf_tracepoint(function = "task_newtask")]
pub fn task_newtask(ctx: BtfTracePointContext) -> i32 {
    let task: *mut task_struct = ctx.arg(0);
    if watched(task::tgid(task)).is_some() {
        mark(task);
    }
    0
}

/// What a task iterator program is handed (`struct bpf_iter__task`).
#[repr(C)]
pub struct TaskIterContext {
    meta: *const core::ffi::c_void,
    /// NULL once past the last task.
    task: *mut task_struct,
}

/// Marks every thread of the host whose process is watched; userspace runs
/// it (reads its iterator) after it adds processes to `OFFCPU_WATCHED`.
/// Threads created since are marked by `task_newtask`.
#[unsafe(no_mangle)]
#[unsafe(link_section = "iter/task")]
pub fn mark_watched_threads(ctx: *const TaskIterContext) -> i32 {
    let task = unsafe { (*ctx).task };
    if !task.is_null() && watched(task::tgid(task)).is_some() {
        mark(task);
    }
    0
}

/// The time of this switch, read at most once: the run queue's clock
/// (`task` is `prev` or `next`, both on this CPU's), or where its fields
/// are not known, `bpf_ktime_get_ns`. Only compared with itself.
#[inline(always)]
fn clock(now: &mut u64, task: *const task_struct) -> u64 {
    if *now == 0 {
        *now = if task::run_queue_clock_known() {
            task::run_queue_clock(task)
        } else {
            unsafe { bpf_ktime_get_ns() }
        };
    }
    *now
}

/// The `OFFCPU_THREADS` entry of thread `tid` (its slot, another
/// thread's, or free).
#[inline(always)]
fn entry_of(tid: u32) -> Option<&'static mut OffCpuStart> {
    OFFCPU_THREADS
        .get_ptr_mut(offcpu_thread_index(tid))
        .map(|entry| unsafe { &mut *entry })
}

/// The slot of thread `tid`, if it has one.
#[inline(always)]
fn slot_of(tid: u32) -> Option<&'static mut OffCpuStart> {
    let entry = entry_of(tid)?;
    if entry.tid == tid {
        Some(entry)
    } else if entry.spilled != 0 {
        OFFCPU_START
            .get_ptr_mut(&tid)
            .map(|slot| unsafe { &mut *slot })
    } else {
        None
    }
}

/// A thread's first switch-out: gives it a slot that lives until it
/// exits, its entry of `OFFCPU_THREADS` if free, else one in
/// `OFFCPU_START` ([`slot_of`] then finds it).
///
/// Two threads with one entry leaving for the first time at the same
/// instant on two CPUs could both take it (BPF here has no
/// compare-and-swap): the one whose write lost finds the entry taken at
/// its return, loses that one period and spills at its next switch-out.
///
/// Out of line, as the other paths a short wait does not take (see
/// [`sched_switch`]).
#[inline(never)]
fn new_slot(tid: u32) {
    let Some(entry) = entry_of(tid) else {
        return;
    };
    if entry.tid == 0 {
        let spilled = entry.spilled;
        *entry = unsafe { core::mem::zeroed() };
        entry.tid = tid;
        entry.spilled = spilled;
        return;
    }
    let mut empty: OffCpuStart = unsafe { core::mem::zeroed() };
    empty.tid = tid;
    if OFFCPU_START
        .insert(&tid, &empty, BPF_NOEXIST as u64)
        .is_err()
    {
        count_stat(stat::OFFCPU_THREADS_FULL);
        return;
    }
    entry.spilled = 1;
}

/// Frees an exiting thread's slot: a thread that reuses its id soon after
/// must not start with its sites (and its first sleep with its stack).
///
/// Slots go by thread id, and two cases leave one behind or free another's,
/// both rare and both harmless beyond one period: a thread other than the
/// leader that calls `execve` takes the leader's id, and the slot of its
/// old one stays until a thread given that id takes it over (a site is
/// trusted only if the registers match); and a thread's last switch-out
/// (`TASK_DEAD`) comes after its id was released, so a thread that got
/// the id in between loses its open period.
#[inline(never)]
fn free_slot(tid: u32) {
    let Some(entry) = entry_of(tid) else {
        return;
    };
    if entry.tid == tid {
        entry.tid = 0;
        entry.ktime_ns = 0;
    } else if entry.spilled != 0 {
        let _ = OFFCPU_START.remove(&tid);
    }
}

/// The current thread (`prev`, which may be watched) leaves the CPU: open
/// its period.
#[inline(always)]
fn switched_out(ctx: &BtfTracePointContext, now: &mut u64) {
    let prev: *const task_struct = ctx.arg(1);
    let tgid = task::tgid(prev);
    let Some(python) = watched(tgid) else {
        return;
    };
    let tid = task::pid(prev);
    let prev_state: u64 = ctx.arg(3);
    if prev_state as u32 & TASK_DEAD != 0 {
        // Never to run again.
        free_slot(tid);
        return;
    }
    let Some(slot) = slot_of(tid).or_else(|| {
        new_slot(tid);
        slot_of(tid)
    }) else {
        return;
    };
    let now = clock(now, prev);
    let preempt: u64 = ctx.arg(0);
    // Runnable: preempted, or no state bit reported (what `report_state`
    // makes 0 or `REPORT_PREEMPTED`). Only `preempt` and `prev_state` stay
    // live across the walk below, as before this branch: a value derived
    // from them and kept across it made the verifier of Linux 6.1 explore
    // the Python walk once per value, past its 1M instructions.
    if preempt & 0xff != 0 || prev_state as u32 & REPORT_BITS == 0 {
        // Still runnable: it waits for a CPU, not for anything in its own
        // code, and where it was running is what on-CPU samples show. On
        // a busy host this is about half of all switch-outs, each at a new
        // instruction, so a walk here was rarely reused: its time is kept
        // with no user or Python frames (and, unless it was preempted
        // inside the kernel, no kernel frames: see `switched_in`).
        slot.site = NO_SITE;
        slot.python_stack = 0;
        if slot.comm[0] == 0 {
            slot.comm = bpf_get_current_comm().unwrap_or([0u8; COMM_LEN]);
        }
        slot.tgid = tgid;
        slot.state = report_state(preempt & 0xff != 0, prev_state as u32);
        slot.ktime_ns = now;
        count_stat(stat::OFFCPU_SWITCHES);
        return;
    }
    let (ip, sp, bp, syscall, arg) = user_registers(prev);
    let fresh = |site: &OffCpuSite| {
        site.walked_ns != 0
            && now.wrapping_sub(site.walked_ns) < OFFCPU_SITE_TTL_NS
            && site.ip == ip
            && site.sp == sp
            && site.bp == bp
            && site.syscall == syscall
    };
    let index = if fresh(&slot.sites[0]) {
        0
    } else if fresh(&slot.sites[1]) {
        1
    } else {
        // Walk, into the site used longest ago.
        let older = usize::from(slot.sites[1].walked_ns < slot.sites[0].walked_ns);
        slot.sites[older] = OffCpuSite {
            ip,
            sp,
            bp,
            syscall,
            walked_ns: now,
            stack: 0,
        };
        walk_site(slot, older);
        older
    };
    slot.site = index as u32;
    slot.arg = arg;
    slot.python_stack = if python { python_site(tgid, tid) } else { 0 };
    slot.tgid = tgid;
    slot.state = report_state(preempt & 0xff != 0, prev_state as u32);
    slot.ktime_ns = now;
    count_stat(stat::OFFCPU_SWITCHES);
}

/// Walks the user stack of the current thread into `slot.sites[index]`,
/// whose registers are set; keeps the thread's name.
#[inline(never)]
fn walk_site(slot: &mut OffCpuStart, index: usize) {
    count_stat(stat::OFFCPU_USER_WALKS);
    let site = &mut slot.sites[index & 1];
    site.stack = user_stack(site.ip, site.sp, site.bp);
    slot.comm = bpf_get_current_comm().unwrap_or([0u8; COMM_LEN]);
}

/// The Python stack of the current thread (of followed CPython process
/// `tgid`), filed; its key.
#[inline(never)]
fn python_site(tgid: u32, tid: u32) -> u64 {
    python_stack(
        tgid,
        tid,
        &Announced {
            map: &OFFCPU_PY_STACKS,
            ring: &OFFCPU_NEW_PY_STACKS,
            lost_stat: stat::OFFCPU_STACKS_LOST,
        },
    )
}

/// `next` (which may be watched) gets the CPU back: count the time it was
/// away.
#[inline(always)]
fn switched_in(ctx: &BtfTracePointContext, now: &mut u64) {
    let next_task: *mut task_struct = ctx.arg(2);
    // Only a thread of a watched process has a slot (opened at a
    // switch-out, freed as it exits), so there is no need to test its
    // process here too.
    let tid = task::pid(next_task);
    let Some(slot) = slot_of(tid) else {
        return;
    };
    if slot.ktime_ns == 0 {
        return;
    }
    let blocked = clock(now, next_task).saturating_sub(slot.ktime_ns);
    slot.ktime_ns = 0;
    if blocked < OFFCPU_MIN_BLOCK_NS.load() {
        count_stat(stat::OFFCPU_SHORT);
        return;
    }
    count_period(slot, next_task, tid, *now, blocked);
}

/// Adds the `blocked` ns of `slot`'s period, which ended `now` as thread
/// `tid` (`next`) came back, to the active buffer under its stacks.
#[inline(never)]
fn count_period(
    slot: &mut OffCpuStart,
    next_task: *mut task_struct,
    tid: u32,
    now: u64,
    blocked: u64,
) {
    let key = OffCpuKey {
        tgid: slot.tgid,
        tid,
        // A thread rescheduled on its way back to user mode (runnable, not
        // preempted inside the kernel) is always at the same few frames of
        // the return path: reading them cost more than the rest of the
        // switch-in.
        kernel_stack: if slot.state == 0 {
            0
        } else if slot.site == NO_SITE {
            kernel_stack(next_task)
        } else {
            kept_kernel_stack(slot, next_task, now)
        },
        user_stack: if slot.site == NO_SITE {
            0
        } else {
            slot.sites[(slot.site & 1) as usize].stack
        },
        python_stack: slot.python_stack,
        name_epoch: thread_epoch(tid),
        state: slot.state,
        comm: slot.comm,
    };
    let buffer = active_buffer();
    let counts = match buffer {
        0 => &OFFCPU_COUNTS_0,
        1 => &OFFCPU_COUNTS_1,
        // The recording has ended.
        _ => return,
    };
    let log = Log {
        maps: [&OFFCPU_LOG_0, &OFFCPU_LOG_1],
        lengths: &OFFCPU_LOG_LENGTHS,
        per_cpu: OFFCPU_LOG_PER_CPU.load(),
    };
    if let Some(slot) = log.take_slot(buffer) {
        slot.key = key;
        slot.ns = blocked;
        return;
    }
    mark_hashed(hashed::OFF_CPU + buffer);
    // The key holds the tid and a thread is switched in on one CPU at a
    // time: a plain add is exact.
    if let Some(total) = counts.get_ptr_mut(&key) {
        unsafe { *total += blocked };
    } else if counts.insert(&key, &blocked, BPF_NOEXIST as u64).is_err() {
        count_stat(stat::OFFCPU_COUNT_MAP_FULL);
    }
}

/// The kernel stack of `slot`'s open period, which left from a site (whose
/// registers say the system call, if any): one the thread kept for a
/// recent counted wait in the same system call, with the same first
/// argument and state (see `OffCpuKernelWait`); else read now and kept in
/// place of the older. A wait outside a system call is read and not kept.
#[inline(always)]
fn kept_kernel_stack(slot: &mut OffCpuStart, next: *mut task_struct, now: u64) -> u64 {
    let (arg, state) = (slot.arg, slot.state);
    let syscall = slot.sites[(slot.site & 1) as usize].syscall;
    if syscall == NO_SYSCALL {
        // Outside a system call (a page fault) the registers do not say
        // what the kernel waits for: always read, and not kept, where it
        // would push out a wait a later one can match.
        return kernel_stack(next);
    }
    let same = |kept: &OffCpuKernelWait| {
        kept.read_ns != 0
            && now.wrapping_sub(kept.read_ns) < OFFCPU_SITE_TTL_NS
            && kept.syscall == syscall
            && kept.arg == arg
            && kept.state == state
    };
    let waits = &mut slot.kernel_waits;
    if same(&waits[0]) {
        return waits[0].stack;
    }
    if same(&waits[1]) {
        return waits[1].stack;
    }
    let stack = kernel_stack(next);
    // A stack its ring had no room for is not kept: the next wait tries
    // again.
    if stack != 0 && stack != STACK_LOST {
        waits[usize::from(waits[1].read_ns < waits[0].read_ns)] = OffCpuKernelWait {
            syscall,
            arg,
            read_ns: now,
            stack,
            state,
            _pad: 0,
        };
    }
    stack
}

/// The current thread's user-mode instruction, stack and frame pointers,
/// system call number and first argument (the registers saved on kernel
/// entry): what tells its sites, and its waits' kernel paths, apart
/// without reading its memory (a read of user memory costs more here than
/// all the rest of a switch-out).
#[inline(always)]
fn user_registers(task: *const task_struct) -> (u64, u64, u64, u64, u64) {
    unsafe {
        let regs = bpf_task_pt_regs(task as *mut task_struct) as *const pt_regs;
        if regs.is_null() {
            return (0, 0, 0, 0, 0);
        }
        (
            (*regs).rip,
            (*regs).rsp,
            (*regs).rbp,
            (*regs).orig_rax,
            (*regs).rdi,
        )
    }
}

/// Walks the current thread's user stack from its saved registers and
/// files it under a hash of its frames; returns the hash, `0` for none.
///
/// A frame-pointer walk, as the kernel's, except where it starts: if `bp`
/// is not a frame pointer into this stack, the first frame record on the
/// stack above `sp` is used instead (see `OffCpuUserStack`).
#[inline(always)]
fn user_stack(ip: u64, sp: u64, bp: u64) -> u64 {
    if ip == 0 || sp == 0 {
        return 0;
    }
    let Some(stack) = USER_STACK_SCRATCH.get_ptr_mut(0) else {
        return 0;
    };
    let stack = unsafe { &mut *stack };
    stack.ips[0] = ip;
    stack.scanned = 0;
    let mut frame = bp;
    if !is_frame_record(sp, frame) {
        frame = scan_for_frame_record(sp);
        stack.scanned = u32::from(frame != 0);
    }
    let mut len = 1;
    for index in 1..OFFCPU_USER_DEPTH {
        if frame == 0 {
            break;
        }
        let Ok([caller_frame, return_address]) =
            (unsafe { bpf_probe_read_user(frame as *const [u64; 2]) })
        else {
            break;
        };
        if !is_user_text(return_address) {
            break;
        }
        stack.ips[index] = return_address;
        len = index + 1;
        // Frames grow towards higher addresses: anything else ends the walk.
        frame = if is_frame_record(frame + 16, caller_frame) {
            caller_frame
        } else {
            0
        };
    }
    stack.len = len as u32;
    // Read back: the walk above can end at any of its frames, and with
    // the length it ended with known, the verifier checks the loop below
    // once per length. That is most of what it checks in this program:
    // with two more sites per slot it went past its million instructions
    // here (Linux 6.18). A value read back from a map is any length.
    let len = unsafe { core::ptr::read_volatile(&stack.len) } as usize;
    let mut hash: u64 = FNV_OFFSET ^ u64::from(stack.scanned);
    for index in 0..OFFCPU_USER_DEPTH {
        if index >= len {
            stack.ips[index] = 0;
        } else {
            hash = fnv(hash, stack.ips[index]);
        }
    }
    Announced {
        map: &OFFCPU_USER_STACKS,
        ring: &OFFCPU_NEW_USER_STACKS,
        lost_stat: stat::OFFCPU_STACKS_LOST,
    }
    .file(hash, stack)
}

/// Whether the bytes before `address` end an x86-64 call instruction, as
/// those before a return address do: `call rel32` (`E8`), or `call` through
/// a register or memory (`FF /2`, 2 to 7 bytes with its ModRM, SIB and
/// displacement). A saved register that is not a return address almost
/// never passes (under 1 % of random bytes do).
#[inline(always)]
fn follows_a_call(address: u64) -> bool {
    let Ok(before) = (unsafe { bpf_probe_read_user((address - 8) as *const [u8; 8]) }) else {
        return false;
    };
    if before[3] == 0xe8 {
        return true;
    }
    // `FF modrm ...` of length `len` ends at `address`: its ModRM's reg
    // field is 2 (call), and its mod and r/m give exactly that length.
    for len in [2usize, 3, 4, 6, 7] {
        if before[8 - len] != 0xff {
            continue;
        }
        let modrm = before[9 - len];
        if (modrm >> 3) & 7 != 2 {
            continue;
        }
        let rm = modrm & 7;
        let sib = usize::from(rm == 4);
        let encoded = 2 + match modrm >> 6 {
            0 if rm == 5 => 4,
            0 => sib,
            1 => 1 + sib,
            2 => 4 + sib,
            _ => 0,
        };
        if encoded == len {
            return true;
        }
    }
    false
}

/// Could `frame` be a frame record of this stack, above `below`?
#[inline(always)]
fn is_frame_record(below: u64, frame: u64) -> bool {
    frame >= below && frame - below < MAX_FRAME_DISTANCE && frame & 7 == 0
}

/// A return address must point into user space, above the zero page.
#[inline(always)]
fn is_user_text(address: u64) -> bool {
    (0x1000..USER_SPACE_END).contains(&address)
}

/// The address of the first frame record found in the words above `sp`,
/// `0` for none. A candidate is a word pointing further up this stack at
/// a plausible record (a further frame pointer or `0`, and an address in
/// user space), and it is taken only where a return address that follows
/// a call instruction vouches for it:
/// - the word after the candidate: the candidate is a frame record on the
///   stack (a caller that keeps frame pointers);
/// - else the return address of the record it points to: the candidate is
///   a frame pointer that code without frame records saved among other
///   registers (glibc's `pthread_cond_wait` under a JVM's monitor wait
///   does), and that record is where the walk goes on.
///
/// Stack addresses in locals and saved registers (a `timespec`, a mutex,
/// a heap pointer beside a saved frame pointer) pass the range checks;
/// without the call check such a chain was walked through data to its end,
/// and a thread's waits at that site had no caller at all.
#[inline(always)]
fn scan_for_frame_record(sp: u64) -> u64 {
    let Some(window) = SCAN_SCRATCH.get_ptr_mut(0) else {
        return 0;
    };
    let window = unsafe { &mut *window };
    if unsafe {
        bpf_probe_read_user_buf(
            sp as *const u8,
            core::slice::from_raw_parts_mut(window.as_mut_ptr().cast(), SCAN_WORDS * 8),
        )
    }
    .is_err()
    {
        return 0;
    }
    for index in 0..SCAN_WORDS - 1 {
        let at = sp + 8 * index as u64;
        let (candidate, return_address) = (window[index], window[index + 1]);
        if !is_frame_record(at + 16, candidate) || !is_user_text(return_address) {
            continue;
        }
        let Ok([next_frame, next_return]) =
            (unsafe { bpf_probe_read_user(candidate as *const [u64; 2]) })
        else {
            continue;
        };
        if !is_user_text(next_return)
            || (next_frame != 0 && !is_frame_record(candidate + 16, next_frame))
        {
            continue;
        }
        if follows_a_call(return_address) {
            return at;
        }
        if follows_a_call(next_return) {
            return candidate;
        }
    }
    0
}

/// Reads `next`'s kernel stack and files it under a hash of its frames;
/// returns the hash, `0` if there is none.
#[inline(always)]
fn kernel_stack(next: *mut task_struct) -> u64 {
    let Some(scratch) = KERNEL_STACK_SCRATCH.get_ptr_mut(0) else {
        return 0;
    };
    let scratch = unsafe { &mut *scratch };
    let size = core::mem::size_of::<OffCpuKernelStack>() as u32;
    count_stat(stat::OFFCPU_KERNEL_READS);
    let written = unsafe { bpf_get_task_stack(next, scratch.ips.as_mut_ptr().cast(), size, 0) };
    if written <= 0 {
        return 0;
    }
    let frames = (written as usize / 8).min(OFFCPU_KERNEL_DEPTH);
    // FNV-1a over the frames; the tail beyond `frames` is cleared so equal
    // stacks are equal values.
    let mut hash: u64 = FNV_OFFSET;
    for index in 0..OFFCPU_KERNEL_DEPTH {
        if index >= frames {
            scratch.ips[index] = 0;
        } else {
            hash = fnv(hash, scratch.ips[index]);
        }
    }
    Announced {
        map: &OFFCPU_KERNEL_STACKS,
        ring: &OFFCPU_NEW_KERNEL_STACKS,
        lost_stat: stat::OFFCPU_STACKS_LOST,
    }
    .file(hash, scratch)
}

/// `orig_ax` of a thread that entered the kernel other than by a system
/// call.
const NO_SYSCALL: u64 = u64::MAX;

/// `OffCpuStart::site` of a period opened without a user stack.
const NO_SITE: u32 = u32::MAX;

/// The sched_switch record's `prev_state` for a raw `__state`.
#[inline(always)]
fn report_state(preempt: bool, state: u32) -> u32 {
    if preempt {
        REPORT_PREEMPTED
    } else if state & (TASK_UNINTERRUPTIBLE | TASK_NOLOAD) == TASK_UNINTERRUPTIBLE | TASK_NOLOAD {
        REPORT_IDLE
    } else {
        // Drops TASK_WAKEKILL (0x100, which the record uses for preempted),
        // TASK_FREEZABLE and the like.
        state & REPORT_BITS
    }
}

/// A thread exits (the BTF tracepoint `sched_process_exit(struct
/// task_struct *p, ...)` runs in its context): free its slot.
#[btf_tracepoint(function = "sched_process_exit")]
pub fn sched_process_exit(ctx: BtfTracePointContext) -> i32 {
    let exiting: *const task_struct = ctx.arg(0);
    free_slot(task::pid(exiting));
    0
}
