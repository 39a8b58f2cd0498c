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
//! - `task_rename`, the `task:task_rename` tracepoint, for JVMs whose
//!   libjvm.so lacks that symbol: it only carries the new comm, so userspace
//!   asks such a JVM for its thread names (Thread.print) when it sees one.
//!   It reports only processes userspace put in `RENAME_WATCH_TGIDS`.

use aya_ebpf::{
    EbpfContext, Global,
    helpers::{bpf_ktime_get_ns, bpf_probe_read_kernel_str_bytes, bpf_probe_read_user_str_bytes},
    macros::{map, tracepoint, uprobe},
    maps::{HashMap, LruHashMap, RingBuf},
    programs::{ProbeContext, TracePointContext},
};
use profiler_common::{
    MAX_RENAME_WATCH_TGIDS, RENAME_RING_BYTES, RenameEvent, THREAD_EPOCH_ENTRIES, THREAD_NAME_LEN,
    rename_source, stat,
};

use crate::stats::count_stat;

/// Offset of `pid` in the task_rename record (from tracefs; 0: no such field).
#[unsafe(no_mangle)]
static TASK_RENAME_PID_OFFSET: Global<u32> = Global::new(0);
/// Offset of `newcomm` in the task_rename record (from tracefs).
#[unsafe(no_mangle)]
static TASK_RENAME_NEWCOMM_OFFSET: Global<u32> = Global::new(0);

#[map]
pub static THREAD_EPOCHS: LruHashMap<u32, u32> =
    LruHashMap::with_max_entries(THREAD_EPOCH_ENTRIES, 0);

#[map]
static RENAMES: RingBuf = RingBuf::with_byte_size(RENAME_RING_BYTES, 0);

#[map]
static RENAME_WATCH_TGIDS: HashMap<u32, u8> = HashMap::with_max_entries(MAX_RENAME_WATCH_TGIDS, 0);

/// The current name epoch of a thread (0 until a rename is seen).
#[inline(always)]
pub fn thread_epoch(tid: u32) -> u32 {
    unsafe { THREAD_EPOCHS.get(&tid) }.copied().unwrap_or(0)
}

/// Moves a thread to its next epoch and returns it. Only the thread itself
/// (or a rename of it) writes its entry, so a plain add is exact.
#[inline(always)]
fn next_epoch(tid: u32) -> u32 {
    match THREAD_EPOCHS.get_ptr_mut(&tid) {
        Some(epoch) => unsafe {
            *epoch = (*epoch).wrapping_add(1).max(1);
            *epoch
        },
        None => {
            let _ = THREAD_EPOCHS.insert(&tid, &1, 0);
            1
        }
    }
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

#[tracepoint]
pub fn task_rename(ctx: TracePointContext) -> u32 {
    let tgid = ctx.tgid();
    if unsafe { RENAME_WATCH_TGIDS.get(&tgid) }.is_none() {
        return 0;
    }
    // The renamed task: the record's pid where the kernel has the field
    // (a rename through /proc/PID/task/TID/comm), else the current thread.
    let pid_offset = TASK_RENAME_PID_OFFSET.load() as usize;
    let tid = if pid_offset == 0 {
        ctx.pid()
    } else {
        match unsafe { ctx.read_at::<i32>(pid_offset) } {
            Ok(pid) if pid > 0 => pid as u32,
            _ => ctx.pid(),
        }
    };
    let newcomm = unsafe {
        ctx.as_ptr()
            .cast::<u8>()
            .add(TASK_RENAME_NEWCOMM_OFFSET.load() as usize)
    };
    announce(tgid, tid, rename_source::TASK_RENAME, |buffer| unsafe {
        bpf_probe_read_kernel_str_bytes(newcomm, buffer).is_ok()
    });
    0
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
