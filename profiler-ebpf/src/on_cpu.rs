//! On-CPU sampling: a perf_event program on the software cpu-clock event of
//! every online CPU. Each sample adds one to the count of
//! (tgid, tid, name epoch, user stack, kernel stack, comm).
//!
//! Beyond its two stack walks and the count, a sample needs four facts
//! about its thread: whether its process is a JVM the kernel walks, whether
//! it is a followed CPython, the thread's name epoch and its comm. The
//! first three are hash lookups, and for most samples all three miss. A
//! busy thread is sampled many times in a row on one CPU, so each CPU keeps
//! the facts of the thread it sampled last (`LAST_THREAD`), valid while two
//! generations stand still: userspace moves one (in `ACTIVE_BUFFER`) on
//! whenever it registers or forgets a process, the rename programs the
//! other (`RENAME_GENERATION`) at every rename of any thread, an exec's
//! included (see `thread_names`).

use aya_ebpf::{
    EbpfContext, Global,
    bindings::{BPF_F_MMAPABLE, BPF_F_USER_STACK, BPF_NOEXIST, pt_regs},
    helpers::bpf_get_smp_processor_id,
    helpers::{bpf_get_current_ancestor_cgroup_id, bpf_get_current_comm, bpf_ktime_get_ns},
    macros::{map, perf_event},
    maps::{Array, HashMap, PerCpuArray, StackTrace},
    programs::{PerfEventContext, tracing::StackIdContext},
};
use aya_log_ebpf::warn;
use profiler_common::{
    BUFFER_STOPPED, COMM_LEN, DEFAULT_COUNT_MAP_ENTRIES, DEFAULT_STACK_MAP_ENTRIES,
    MAX_TARGET_TGIDS, SampleKey, control, hashed, stack_error, stat,
};

use crate::{
    hashed_stacks::Pooled,
    hotspot::{is_walked_jvm, walk_if_jvm},
    logs::{Log, mark_hashed},
    python::{is_followed_python, python_stack, sample_stacks},
    stats::count_stat,
    thread_names::{rename_generation, thread_epoch},
};

/// Non-zero: sample only the processes in `TARGET_TGIDS` (`--pid`).
#[unsafe(no_mangle)]
static FILTER_BY_TGID: Global<u8> = Global::new(0);

/// Non-zero: sample only the threads in this cgroup (v2) or below it
/// (`--cgroup`): its id, and its depth in the hierarchy
/// ([`FILTER_CGROUP_LEVEL`]), where the current thread's ancestor must be
/// it. One helper call, no map: a process forked into it later (a PySpark
/// worker) is in it from its first sample.
#[unsafe(no_mangle)]
static FILTER_CGROUP_ID: Global<u64> = Global::new(0);
#[unsafe(no_mangle)]
static FILTER_CGROUP_LEVEL: Global<u32> = Global::new(0);

#[map]
static ACTIVE_BUFFER: Array<u32> = Array::with_max_entries(control::COUNT, 0);

/// The facts of the thread a CPU sampled last (see the module's comment).
#[repr(C)]
pub struct ThreadFacts {
    tid: u32,
    tgid: u32,
    process_generation: u32,
    /// `JVM` and `PYTHON` bits.
    kinds: u32,
    rename_generation: u64,
    name_epoch: u32,
    _pad: u32,
    /// The thread's comm: it changes only at a rename or an exec, both of
    /// which move the rename generation on.
    comm: [u8; COMM_LEN],
}

const JVM: u32 = 1;
const PYTHON: u32 = 2;

impl ThreadFacts {
    #[inline(always)]
    pub fn jvm(&self) -> bool {
        self.kinds & JVM != 0
    }

    #[inline(always)]
    pub fn python(&self) -> bool {
        self.kinds & PYTHON != 0
    }
}

#[map]
static LAST_THREAD: PerCpuArray<ThreadFacts> = PerCpuArray::with_max_entries(1, 0);

#[map]
static TARGET_TGIDS: HashMap<u32, u8> = HashMap::with_max_entries(MAX_TARGET_TGIDS, 0);

#[map]
static COUNTS_0: HashMap<SampleKey, u64> = HashMap::with_max_entries(DEFAULT_COUNT_MAP_ENTRIES, 0);
#[map]
static COUNTS_1: HashMap<SampleKey, u64> = HashMap::with_max_entries(DEFAULT_COUNT_MAP_ENTRIES, 0);

/// Each CPU's samples of a buffer, one key per sample in the order taken
/// (see [`add_one`]): `LOG_PER_CPU` slots per CPU, CPU `c`'s from
/// `c * LOG_PER_CPU`, and its count of them in `LOG_LENGTHS[buffer]`.
/// Sized by userspace at load.
#[map]
static SAMPLE_LOG_0: Array<SampleKey> = Array::with_max_entries(1, BPF_F_MMAPABLE);
#[map]
static SAMPLE_LOG_1: Array<SampleKey> = Array::with_max_entries(1, BPF_F_MMAPABLE);
#[map]
static LOG_LENGTHS: PerCpuArray<u32> = PerCpuArray::with_max_entries(2, 0);
/// Slots of each CPU in a sample log (0: no log, every sample is hashed),
/// and in a HotSpot stack log (a sample files at most one stack).
#[unsafe(no_mangle)]
pub static LOG_PER_CPU: Global<u32> = Global::new(0);

#[map]
static STACKS_0: StackTrace = StackTrace::with_max_entries(DEFAULT_STACK_MAP_ENTRIES, 0);
#[map]
static STACKS_1: StackTrace = StackTrace::with_max_entries(DEFAULT_STACK_MAP_ENTRIES, 0);

#[perf_event]
pub fn sample_on_cpu(ctx: PerfEventContext) -> u32 {
    let buffer = active_buffer();
    if buffer == BUFFER_STOPPED {
        // The recording has ended: nothing counts, not even as a sample.
        return 0;
    }
    count_stat(stat::SAMPLES);
    let tgid = ctx.tgid();
    if tgid == 0 {
        count_stat(stat::IDLE);
        return 0;
    }
    if FILTER_BY_TGID.load() != 0 && unsafe { TARGET_TGIDS.get(&tgid) }.is_none() {
        count_stat(stat::FILTERED);
        return 0;
    }
    let cgroup = FILTER_CGROUP_ID.load();
    if cgroup != 0
        && unsafe { bpf_get_current_ancestor_cgroup_id(FILTER_CGROUP_LEVEL.load() as i32) }
            != cgroup
    {
        count_stat(stat::FILTERED);
        return 0;
    }
    let Some(facts) = thread_facts(tgid, ctx.pid()) else {
        return 0;
    };
    // A registered JVM's stack is walked through its Java frames by
    // `hotspot_walk`, which counts the sample (this returns if it cannot).
    if facts.jvm() {
        walk_if_jvm(&ctx, tgid, buffer);
    }
    count_sample(&ctx, buffer, 0, facts, facts.python());
    0
}

/// The current thread's facts: this CPU's last ones if they are still
/// true, else looked up (and kept).
#[inline(always)]
pub fn thread_facts(tgid: u32, tid: u32) -> Option<&'static ThreadFacts> {
    // Read before the lookups: a change during them leaves the facts kept
    // under the older generation, so the next sample looks again.
    let process_generation = control(control::PROCESS_GENERATION);
    let rename_generation = rename_generation();
    let facts = unsafe { &mut *LAST_THREAD.get_ptr_mut(0)? };
    if facts.tid != tid
        || facts.tgid != tgid
        || facts.process_generation != process_generation
        || facts.rename_generation != rename_generation
    {
        *facts = ThreadFacts {
            tid,
            tgid,
            process_generation,
            rename_generation: settled(rename_generation),
            name_epoch: thread_epoch(tid),
            kinds: if is_walked_jvm(tgid) { JVM } else { 0 }
                | if is_followed_python(tgid) { PYTHON } else { 0 },
            _pad: 0,
            comm: bpf_get_current_comm().unwrap_or([0u8; COMM_LEN]),
        };
    }
    Some(facts)
}

/// How long after a rename its comm is surely written: the rename programs
/// run at `task_rename`, just *before* the kernel copies the new comm in
/// (under the task's lock, a few instructions later), so a sample in
/// between reads the old one.
const RENAME_SETTLE_NS: u64 = 1_000_000;

/// The rename generation to keep facts under: `rename_generation`, or, if
/// that rename is younger than [`RENAME_SETTLE_NS`], one that no rename
/// makes (so the next sample looks again instead of keeping a comm the
/// rename may not have written yet). Renames are rare: the clock is read
/// only when facts are looked up.
#[inline(always)]
fn settled(rename_generation: u64) -> u64 {
    let now = unsafe { bpf_ktime_get_ns() };
    if now.wrapping_sub(rename_generation) < RENAME_SETTLE_NS {
        u64::MAX
    } else {
        rename_generation
    }
}

/// Counts a sample of the current thread (`facts`) in `buffer`: with its user stack
/// from `HOTSPOT_STACKS` (`hotspot_stack`, the kernel's own frame-pointer
/// walk when `0`), its kernel stack, name epoch and comm (from `facts`,
/// while `task_rename` keeps them true)
/// and Python stack (if `python`: its process is a followed CPython; a
/// constant `false` in the JVM walker's programs keeps the Python walk out
/// of them, and out of their verification).
#[inline(always)]
pub fn count_sample(
    ctx: &PerfEventContext,
    buffer: u32,
    hotspot_stack: u64,
    facts: &ThreadFacts,
    python: bool,
) {
    let (counts, stacks) = if buffer == 0 {
        (&COUNTS_0, &STACKS_0)
    } else {
        (&COUNTS_1, &STACKS_1)
    };
    let (tgid, tid) = (facts.tgid, facts.tid);
    // The Python walk first: Linux 6.1's verifier walks its loop once per
    // distinct state it reaches it in, and the branches below (a known
    // -EFAULT or a stack id; a kept comm or a read one) would each double
    // them, past its million instructions.
    let python_stack = if python {
        python_stack(
            tgid,
            tid,
            &Pooled {
                map: sample_stacks(buffer),
                lost_stat: stat::PY_STACKS_LOST,
            },
        )
    } else {
        0
    };
    if python_stack != 0 {
        mark_hashed(hashed::PYTHON + buffer);
    }
    let user_stack_id = if hotspot_stack == 0 {
        stack_id(ctx, stacks, BPF_F_USER_STACK as u64, stat::USER_STACK_LOST)
    } else {
        stack_error::EFAULT
    };
    let kernel_stack_id = if interrupted_user_mode(ctx) {
        // No kernel frames to walk: the helper would find none and say so
        // with the same -EFAULT, after taking and giving back a callchain
        // buffer.
        stack_error::EFAULT
    } else {
        stack_id(ctx, stacks, 0, stat::KERNEL_STACK_LOST)
    };
    let key = SampleKey {
        tgid,
        tid,
        user_stack_id,
        kernel_stack_id,
        name_epoch: facts.name_epoch,
        flags: 0,
        python_stack,
        hotspot_stack,
        comm: if control(control::COMM_KEPT) != 0 {
            facts.comm
        } else {
            // No `task_rename` tracepoint: a rename would not move the
            // kept facts on.
            bpf_get_current_comm().unwrap_or([0u8; COMM_LEN])
        },
    };
    add_one(ctx, buffer, counts, &key);
}

/// Whether the sample interrupted the thread in user mode: the privilege
/// level in the low bits of its saved code segment (x86-64's `user_mode`).
#[inline(always)]
fn interrupted_user_mode(ctx: &PerfEventContext) -> bool {
    let regs = ctx.as_ptr() as *const pt_regs;
    let cs = unsafe { (*regs).cs };
    cs & 3 != 0
}

/// Which buffer (0 or 1) every program writes its counts to now, or
/// `BUFFER_STOPPED`.
#[inline(always)]
pub fn active_buffer() -> u32 {
    control(control::BUFFER)
}

#[inline(always)]
fn control(index: u32) -> u32 {
    ACTIVE_BUFFER.get(index).copied().unwrap_or(0)
}

/// The stack id, or the negative errno stored in its place so the sample is
/// still counted (userspace renders it as a marker frame).
#[inline(always)]
fn stack_id(ctx: &PerfEventContext, stacks: &StackTrace, flags: u64, lost_stat: u32) -> i32 {
    match ctx.get_stackid(stacks, flags) {
        Ok(id) => id as i32,
        Err(err) => {
            if err == stack_error::EEXIST {
                count_stat(lost_stat);
            }
            err
        }
    }
}

/// Counts one sample under `key` in `buffer`: appended to this CPU's
/// sample log while it has room, else added in the count map (see
/// [`crate::logs`]).
#[inline(always)]
fn add_one(ctx: &PerfEventContext, buffer: u32, counts: &HashMap<SampleKey, u64>, key: &SampleKey) {
    let log = Log {
        maps: [&SAMPLE_LOG_0, &SAMPLE_LOG_1],
        lengths: &LOG_LENGTHS,
        per_cpu: LOG_PER_CPU.load(),
    };
    if let Some(slot) = log.take_slot(buffer) {
        *slot = *key;
        return;
    }
    mark_hashed(hashed::ON_CPU + buffer);
    // A thread runs on one CPU at a time and its tid is in the key, so no two
    // CPUs update one entry at once: a plain add is exact.
    if let Some(count) = counts.get_ptr_mut(key) {
        unsafe { *count += 1 };
        return;
    }
    if counts.insert(key, &1, BPF_NOEXIST as u64).is_err() && count_stat(stat::COUNT_MAP_FULL) == 0
    {
        // Once per CPU per recording: the rare diagnostic aya-log is for.
        let cpu = unsafe { bpf_get_smp_processor_id() };
        warn!(
            ctx,
            "count map full on cpu {}: samples are dropped (and counted) until the next drain", cpu
        );
    }
}
