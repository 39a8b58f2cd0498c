//! The off-CPU programs (`sched_switch`, `sched_process_exit`): time
//! blocked, by state, with stacks that outlive their LRU map.

use std::{collections::HashSet, time::Duration};

use sparkprof::collect::{Collector, RawSample, RawStack, SampleKind, off_cpu::OffCpuState};

use crate::{
    KERNEL_SPACE, drain, sum,
    workload::{self, Worker},
};

/// 20 x 50 ms in nanosleep: about 1 s off the CPU, state sleep.
pub fn check_off_cpu(collector: &mut Collector, _pid: u32) -> Result<String, String> {
    drain(collector)?;
    let sleeper = Worker::spawn(|_| workload::sleep_in_nanosleep(20, Duration::from_millis(50)));
    let tid = sleeper.tid;
    sleeper.finish();
    let mut samples = drain(collector)?.samples;
    samples.extend(drain(collector)?.samples);
    let ours: Vec<&RawSample> = samples.iter().filter(|s| s.tid == tid).collect();
    let slept_us = sum(ours
        .iter()
        .filter(|s| s.kind == SampleKind::OffCpu(OffCpuState::Sleep))
        .map(|s| s.count));
    if !(900_000..=1_600_000).contains(&slept_us) {
        let kinds: Vec<String> = ours
            .iter()
            .map(|s| format!("{:?} {}", s.kind, s.count))
            .collect();
        return Err(format!(
            "{slept_us} us off the CPU in state sleep, expected about 1000000 (20 x 50 ms); \
             the thread's counts: {kinds:?}"
        ));
    }
    let with_kernel = ours
        .iter()
        .filter(|s| s.kind == SampleKind::OffCpu(OffCpuState::Sleep))
        .any(|s| {
            matches!(&s.kernel, RawStack::Frames { ips, .. }
                if ips.iter().all(|&ip| ip >= KERNEL_SPACE))
        });
    let with_user = ours
        .iter()
        .filter(|s| s.kind == SampleKind::OffCpu(OffCpuState::Sleep))
        .any(|s| matches!(&s.user, RawStack::Frames { ips, .. } if !ips.is_empty()));
    if !with_kernel || !with_user {
        return Err(format!(
            "{slept_us} us in state sleep, but kernel stack: {with_kernel}, user stack: {with_user}"
        ));
    }
    Ok(format!(
        "{slept_us} us off the CPU in state sleep for 20 x 50 ms in nanosleep, with kernel and \
         user stacks"
    ))
}

/// Entries of the off-CPU user-stack map in these checks.
pub const OFFCPU_STACK_MAP_ENTRIES: u32 = 64;
/// Distinct user stacks `off_cpu_stacks_outlive_their_map` sleeps in.
const DISTINCT_STACKS: u32 = 120;

/// A thread sleeps 2 ms at each recursion depth from 1 to 60, plainly and
/// under a padded frame: 120 distinct user stacks, about twice what the off-CPU stack
/// map holds, each well within the walk's depth (so that no two are cut to
/// the same frames). Every sleep still carries its whole user stack (new
/// stacks reach userspace through the ring; the map only evicts), none is
/// lost or missing.
pub fn check_off_cpu_many_stacks(collector: &mut Collector, _pid: u32) -> Result<String, String> {
    drain(collector)?;
    let sleeper = Worker::spawn(|_| {
        let each = Duration::from_millis(2);
        for depth in 1..=DISTINCT_STACKS / 2 {
            workload::sparkprof_vm_deep_sleep(depth, each);
            workload::sparkprof_vm_padded_deep_sleep(depth, each);
        }
    });
    let tid = sleeper.tid;
    sleeper.finish();
    let mut samples = drain(collector)?.samples;
    samples.extend(drain(collector)?.samples);
    let asleep: Vec<&RawSample> = samples
        .iter()
        .filter(|s| s.tid == tid && s.kind == SampleKind::OffCpu(OffCpuState::Sleep))
        .collect();
    let total = sum(asleep.iter().map(|s| s.count));
    let whole: Vec<&Vec<u64>> = asleep
        .iter()
        .filter_map(|s| match &s.user {
            RawStack::Frames { ips, .. } => Some(ips),
            _ => None,
        })
        .collect();
    let with_user = sum(asleep
        .iter()
        .filter(|s| matches!(&s.user, RawStack::Frames { .. }))
        .map(|s| s.count));
    let distinct: HashSet<&Vec<u64>> = whole.iter().copied().collect();
    let others: Vec<String> = asleep
        .iter()
        .filter(|s| !matches!(&s.user, RawStack::Frames { .. }))
        .map(|s| format!("{:?} {} us", s.user, s.count))
        .collect();
    if total < 200_000 || with_user != total || distinct.len() < DISTINCT_STACKS as usize {
        return Err(format!(
            "{with_user} of {total} us asleep with a user stack, {} distinct stacks (expected \
             {DISTINCT_STACKS}, map of {OFFCPU_STACK_MAP_ENTRIES}); without: {others:?}",
            distinct.len()
        ));
    }
    Ok(format!(
        "{with_user} of {total} us asleep with their user stacks, {} distinct (map of \
         {OFFCPU_STACK_MAP_ENTRIES} entries)",
        distinct.len()
    ))
}
