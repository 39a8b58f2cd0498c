//! Thread renames: every thread's *name epoch*, and the new names.
//!
//! The sampler aggregates in the kernel, so userspace cannot tell from a
//! count alone which name its thread had when it was taken; Spark renames a
//! pooled task thread at every task start and end. Each rename bumps the
//! thread's epoch in `THREAD_EPOCHS` (which the sampler puts in its key) and
//! sends `(tid, new epoch, name)` through the `RENAMES` ring buffer, so
//! userspace matches every count to the exact name.
//!
//! Two sources:
//! - `jvm_thread_name`, a uprobe on HotSpot's
//!   `os::set_native_thread_name(const char*)`, which `Thread.setName` of the
//!   current thread reaches with the *full* UTF-8 name (the 15-byte comm is
//!   cut from it afterwards).
//! - `task_rename`, the `task:task_rename` tracepoint (BTF-typed, so it is
//!   attached without tracefs), for JVMs whose libjvm.so lacks that symbol:
//!   it only carries the new comm, so userspace asks such a JVM for its
//!   thread names (Thread.print) when it sees one. It reports only
//!   processes userspace put in `RENAME_WATCH_TGIDS`.

use aya_ebpf::{
    EbpfContext,
    bindings::task_struct,
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_current_task, bpf_ktime_get_ns,
        bpf_probe_read_kernel_str_bytes, bpf_probe_read_user_str_bytes,
    },
    macros::{btf_tracepoint, map, uprobe},
    maps::{Array, HashMap, LruHashMap, RingBuf},
    programs::{BtfTracePointContext, ProbeContext},
};
use profiler_common::{
    MAX_RENAME_WATCH_TGIDS, RENAME_RING_BYTES, RenameEvent, THREAD_EPOCH_ENTRIES, THREAD_NAME_LEN,
    rename_source, stat,
};

use crate::{
    stats::count_stat,
    task::{self, TASK_STRUCT_PID_OFFSET},
};

#[map]
pub static THREAD_EPOCHS: LruHashMap<u32, u32> =
    LruHashMap::with_max_entries(THREAD_EPOCH_ENTRIES, 0);

#[map]
static RENAMES: RingBuf = RingBuf::with_byte_size(RENAME_RING_BYTES, 0);

#[map]
static RENAME_WATCH_TGIDS: HashMap<u32, u8> = HashMap::with_max_entries(MAX_RENAME_WATCH_TGIDS, 0);

/// Moved on at every rename: the samplers keep each CPU's last thread's
/// epoch and comm while it stands still (see `on_cpu`).
#[map]
static RENAME_GENERATION: Array<u64> = Array::with_max_entries(1, 0);

#[inline(always)]
pub fn rename_generation() -> u64 {
    RENAME_GENERATION.get(0).copied().unwrap_or(0)
}

/// Moves the rename generation on, after a thread's epoch moved. Renames
/// run on any CPU at once and BPF has no 32/64-bit fetch-add here, so the
/// generation is not a count but the time of the last rename: whatever a
/// sampler kept before this rename's epoch moved differs from it.
#[inline(always)]
fn renamed() {
    if let Some(generation) = RENAME_GENERATION.get_ptr_mut(0) {
        unsafe { *generation = bpf_ktime_get_ns() };
    }
}

/// The current name epoch of a thread (0 until a rename is seen).
#[inline(always)]
pub fn thread_epoch(tid: u32) -> u32 {
    unsafe { THREAD_EPOCHS.get(&tid) }.copied().unwrap_or(0)
}

/// Moves a thread to its next epoch and returns it. Only the thread itself
/// (or a rename of it) writes its entry, so a plain add is exact.
#[inline(always)]
fn next_epoch(tid: u32) -> u32 {
    let epoch = match THREAD_EPOCHS.get_ptr_mut(&tid) {
        Some(epoch) => unsafe {
            *epoch = (*epoch).wrapping_add(1).max(1);
            *epoch
        },
        None => {
            let _ = THREAD_EPOCHS.insert(&tid, &1, 0);
            1
        }
    };
    // The samplers' kept epochs are stale from now on.
    renamed();
    epoch
}

#[uprobe]
pub fn jvm_thread_name(ctx: ProbeContext) -> u32 {
    let Some(name) = ctx.arg::<*const u8>(0) else {
        return 0;
    };
    let tgid = ctx.tgid();
    let tid = ctx.pid();
    announce(tgid, tid, rename_source::JVM_NATIVE_NAME, |buffer| unsafe {
        bpf_probe_read_user_str_bytes(name, buffer).is_ok()
    });
    0
}

/// `task_rename(struct task_struct *task, const char *comm)`, in the
/// context of the thread that renames `task` (itself, through
/// `prctl(PR_SET_NAME)`, or a thread of the same process, through
/// `/proc/PID/task/TID/comm`).
#[btf_tracepoint(function = "task_rename")]
pub fn task_rename(ctx: BtfTracePointContext) -> i32 {
    // Every rename on the host, an exec's included, changes a comm the
    // samplers may keep (see `on_cpu`), watched or not.
    renamed();
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    if unsafe { RENAME_WATCH_TGIDS.get(&tgid) }.is_none() {
        return 0;
    }
    let task: u64 = ctx.arg(0);
    let comm: *const u8 = ctx.arg(1);
    let tid = if task == unsafe { bpf_get_current_task() } {
        pid_tgid as u32
    } else {
        match renamed_tid(ctx.arg(0)) {
            Some(tid) => tid,
            None => return 0,
        }
    };
    announce(tgid, tid, rename_source::TASK_RENAME, |buffer| unsafe {
        bpf_probe_read_kernel_str_bytes(comm, buffer).is_ok()
    });
    0
}

/// The thread id of another task (`task->pid`), if its offset is known.
#[inline(always)]
fn renamed_tid(task: *const task_struct) -> Option<u32> {
    if TASK_STRUCT_PID_OFFSET.load() == 0 {
        count_stat(stat::RENAMES_LOST);
        return None;
    }
    match task::pid(task) as i32 {
        pid if pid > 0 => Some(pid as u32),
        _ => {
            count_stat(stat::RENAMES_LOST);
            None
        }
    }
}

/// Moves thread `tid` of process `tgid` to its next name epoch and sends
/// the rename (`read_name` fills in the new name) through the ring buffer.
#[inline(always)]
fn announce(
    tgid: u32,
    tid: u32,
    source: u32,
    read_name: impl FnOnce(&mut [u8; THREAD_NAME_LEN]) -> bool,
) {
    let epoch = next_epoch(tid);
    count_stat(stat::RENAMES);
    let Some(mut entry) = RENAMES.reserve::<RenameEvent>(0) else {
        count_stat(stat::RENAMES_LOST);
        return;
    };
    let event = entry.as_mut_ptr();
    unsafe {
        (*event).tgid = tgid;
        (*event).tid = tid;
        (*event).epoch = epoch;
        (*event).source = source;
        (*event).ktime_ns = bpf_ktime_get_ns();
        if !read_name(&mut (*event).name) {
            (*event).name[0] = 0;
        }
    }
    entry.submit(0);
}
