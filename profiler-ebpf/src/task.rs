//! Fields of a `task_struct` the tracepoints hand over, read straight from
//! the typed pointer: a plain load, where a helper call (or
//! `bpf_probe_read_kernel`) costs several times more on a program that runs
//! at every context switch of the host.
//!
//! Rust eBPF has no CO-RE, so userspace finds the fields' offsets in the
//! kernel's BTF and sets them here before the programs load. They live in
//! `.rodata`, which aya freezes: the verifier knows their values, checks
//! each load against the kernel's BTF at that offset, and refuses a program
//! whose offset lands on no field of that size.

use aya_ebpf::{Global, bindings::task_struct};

/// Offset of `pid` (the thread id) in `struct task_struct` (0: not known).
#[unsafe(no_mangle)]
pub static TASK_STRUCT_PID_OFFSET: Global<u32> = Global::new(0);
/// Offset of `tgid` (the process id) in `struct task_struct`.
#[unsafe(no_mangle)]
static TASK_STRUCT_TGID_OFFSET: Global<u32> = Global::new(0);

/// A `u32` field of a task the kernel handed over typed, at `offset`.
#[inline(always)]
fn field_u32(task: *const task_struct, offset: u32) -> u32 {
    unsafe { core::ptr::read_volatile((task as *const u8).add(offset as usize).cast::<u32>()) }
}

/// `task->pid`, the thread id.
#[inline(always)]
pub fn pid(task: *const task_struct) -> u32 {
    field_u32(task, TASK_STRUCT_PID_OFFSET.load())
}

/// `task->tgid`, the process id.
#[inline(always)]
pub fn tgid(task: *const task_struct) -> u32 {
    field_u32(task, TASK_STRUCT_TGID_OFFSET.load())
}

/// Where a task's run queue clock lies: `task->se.cfs_rq` (in
/// `task_struct`, with `CONFIG_FAIR_GROUP_SCHED`), `cfs_rq->rq` and
/// `rq->clock`. 0: not known, and [`SCHED_CLOCK_KNOWN`] is 0.
#[unsafe(no_mangle)]
static TASK_CFS_RQ_OFFSET: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
static CFS_RQ_RQ_OFFSET: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
static RQ_CLOCK_OFFSET: Global<u32> = Global::new(0);
/// Non-zero: the three offsets above are set.
#[unsafe(no_mangle)]
static SCHED_CLOCK_KNOWN: Global<u8> = Global::new(0);

/// Whether [`run_queue_clock`] can be read on this kernel.
#[inline(always)]
pub fn run_queue_clock_known() -> bool {
    SCHED_CLOCK_KNOWN.load() != 0
}

/// The clock of the run queue `task` is on (`rq->clock`, in ns), which
/// `__schedule` updates just before `sched_switch` fires: the scheduler's
/// own time of the switch, read with three loads. The kernel compares it
/// across CPUs itself (a wait's start and end in `sched_info`, schedstats);
/// `bpf_ktime_get_ns` reads the clocksource and costs more than the rest
/// of a switch's work together. 0 if a pointer on the way is NULL.
#[inline(always)]
pub fn run_queue_clock(task: *const task_struct) -> u64 {
    unsafe {
        let cfs_rq = core::ptr::read_volatile(
            (task as *const u8)
                .add(TASK_CFS_RQ_OFFSET.load() as usize)
                .cast::<*const u8>(),
        );
        let rq = core::ptr::read_volatile(
            cfs_rq
                .add(CFS_RQ_RQ_OFFSET.load() as usize)
                .cast::<*const u8>(),
        );
        core::ptr::read_volatile(rq.add(RQ_CLOCK_OFFSET.load() as usize).cast::<u64>())
    }
}

/// Offset of `task_struct::bpf_storage` (0: not known).
#[unsafe(no_mangle)]
static TASK_BPF_STORAGE_OFFSET: Global<u32> = Global::new(0);

/// Whether `task` may be a thread of a watched process: it has BPF local
/// storage (every such thread is given some, see `off_cpu::OFFCPU_MARKED`),
/// or where the field is not known, always. Most of the host's threads
/// have none, and for them this one load is the whole of a switch's test:
/// the full one (`tgid`, then the watched table) was two dependent loads a
/// side, and every context switch of the host paid for it.
#[inline(always)]
pub fn may_be_watched(task: *const task_struct) -> bool {
    let offset = TASK_BPF_STORAGE_OFFSET.load();
    if offset == 0 {
        return true;
    }
    let storage = unsafe {
        core::ptr::read_volatile((task as *const u8).add(offset as usize).cast::<*const u8>())
    };
    !storage.is_null()
}
