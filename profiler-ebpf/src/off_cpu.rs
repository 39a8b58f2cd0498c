//! Off-CPU time: where threads of interest wait, from `sched:sched_switch`
//! (kprobes, and so `finish_task_switch`, are not available everywhere).
//!
//! At switch-out of a thread of interest (the tracepoint runs in its
//! context, before the switch) its stacks, state and name epoch are kept in
//! `OFFCPU_START`; at its next switch-in the time it was away is added to
//! `(thread, stacks, epoch, state)` in the active `OFFCPU_COUNTS` buffer.
//! Which processes are of interest and the shortest period counted are set
//! by userspace; the cost for other processes is one hash lookup.

use aya_ebpf::{
    EbpfContext, Global,
    bindings::{BPF_F_USER_STACK, BPF_NOEXIST},
    helpers::{bpf_get_current_comm, bpf_ktime_get_ns},
    macros::{map, tracepoint},
    maps::{HashMap, LruHashMap, StackTrace},
    programs::{TracePointContext, tracing::StackIdContext},
};
use profiler_common::{
    COMM_LEN, DEFAULT_OFFCPU_COUNT_ENTRIES, DEFAULT_OFFCPU_STACK_ENTRIES, MAX_OFFCPU_TGIDS,
    OFFCPU_START_ENTRIES, OffCpuKey, OffCpuStart, stack_error, stat,
};

use crate::{on_cpu::active_buffer, stats::count_stat, thread_names::thread_epoch};

#[unsafe(no_mangle)]
static OFFCPU_MIN_BLOCK_NS: Global<u64> = Global::new(0);
#[unsafe(no_mangle)]
static SCHED_SWITCH_PREV_PID_OFFSET: Global<u32> = Global::new(24);
#[unsafe(no_mangle)]
static SCHED_SWITCH_PREV_STATE_OFFSET: Global<u32> = Global::new(32);
#[unsafe(no_mangle)]
static SCHED_SWITCH_NEXT_PID_OFFSET: Global<u32> = Global::new(56);
#[unsafe(no_mangle)]
static PROCESS_EXIT_PID_OFFSET: Global<u32> = Global::new(24);

#[map]
static OFFCPU_TGIDS: HashMap<u32, u8> = HashMap::with_max_entries(MAX_OFFCPU_TGIDS, 0);

#[map]
static OFFCPU_START: LruHashMap<u32, OffCpuStart> =
    LruHashMap::with_max_entries(OFFCPU_START_ENTRIES, 0);

#[map]
static OFFCPU_COUNTS_0: HashMap<OffCpuKey, u64> =
    HashMap::with_max_entries(DEFAULT_OFFCPU_COUNT_ENTRIES, 0);
#[map]
static OFFCPU_COUNTS_1: HashMap<OffCpuKey, u64> =
    HashMap::with_max_entries(DEFAULT_OFFCPU_COUNT_ENTRIES, 0);

#[map]
static OFFCPU_STACKS: StackTrace = StackTrace::with_max_entries(DEFAULT_OFFCPU_STACK_ENTRIES, 0);

#[tracepoint]
pub fn sched_switch(ctx: TracePointContext) -> u32 {
    let now = unsafe { bpf_ktime_get_ns() };
    let prev_pid = read_u32(&ctx, SCHED_SWITCH_PREV_PID_OFFSET.load());
    let next_pid = read_u32(&ctx, SCHED_SWITCH_NEXT_PID_OFFSET.load());
    if prev_pid != 0 {
        switched_out(&ctx, prev_pid, now);
    }
    if next_pid != 0 {
        switched_in(next_pid, now);
    }
    0
}

/// The current thread (`prev`) leaves the CPU: remember how and where.
#[inline(always)]
fn switched_out(ctx: &TracePointContext, tid: u32, now: u64) {
    let tgid = ctx.tgid();
    if unsafe { OFFCPU_TGIDS.get(&tgid) }.is_none() {
        return;
    }
    count_stat(stat::OFFCPU_SWITCHES);
    let state = unsafe { ctx.read_at::<i64>(SCHED_SWITCH_PREV_STATE_OFFSET.load() as usize) }
        .unwrap_or(0) as u32;
    let start = OffCpuStart {
        ktime_ns: now,
        tgid,
        user_stack_id: stack_id(ctx, BPF_F_USER_STACK as u64),
        kernel_stack_id: stack_id(ctx, 0),
        name_epoch: thread_epoch(tid),
        state,
        comm: bpf_get_current_comm().unwrap_or([0u8; COMM_LEN]),
        reserved: 0,
    };
    if OFFCPU_START.insert(&tid, &start, 0).is_err() {
        count_stat(stat::OFFCPU_START_MAP_FULL);
    }
}

/// `next` gets the CPU back: count the time it was away.
#[inline(always)]
fn switched_in(tid: u32, now: u64) {
    let Some(start) = (unsafe { OFFCPU_START.get(&tid) }).copied() else {
        return;
    };
    let _ = OFFCPU_START.remove(&tid);
    let blocked = now.saturating_sub(start.ktime_ns);
    if blocked < OFFCPU_MIN_BLOCK_NS.load() {
        count_stat(stat::OFFCPU_SHORT);
        return;
    }
    let key = OffCpuKey {
        tgid: start.tgid,
        tid,
        user_stack_id: start.user_stack_id,
        kernel_stack_id: start.kernel_stack_id,
        name_epoch: start.name_epoch,
        state: start.state,
        comm: start.comm,
    };
    let counts = if active_buffer() == 0 {
        &OFFCPU_COUNTS_0
    } else {
        &OFFCPU_COUNTS_1
    };
    // The key holds the tid and a thread is switched in on one CPU at a
    // time: a plain add is exact.
    if let Some(total) = counts.get_ptr_mut(&key) {
        unsafe { *total += blocked };
    } else if counts.insert(&key, &blocked, BPF_NOEXIST as u64).is_err() {
        count_stat(stat::OFFCPU_COUNT_MAP_FULL);
    }
}

#[inline(always)]
fn stack_id(ctx: &TracePointContext, flags: u64) -> i32 {
    match ctx.get_stackid(&OFFCPU_STACKS, flags) {
        Ok(id) => id as i32,
        Err(err) => {
            if err == stack_error::EEXIST {
                count_stat(stat::OFFCPU_STACKS_LOST);
            }
            err
        }
    }
}

#[inline(always)]
fn read_u32(ctx: &TracePointContext, offset: u32) -> u32 {
    unsafe { ctx.read_at::<i32>(offset as usize) }.unwrap_or(0) as u32
}

/// A thread exits: it will not be switched in again.
#[tracepoint]
pub fn sched_process_exit(ctx: TracePointContext) -> u32 {
    let tid = read_u32(&ctx, PROCESS_EXIT_PID_OFFSET.load());
    let _ = OFFCPU_START.remove(&tid);
    0
}
