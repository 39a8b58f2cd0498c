//! Per-CPU statistics shared by every program: userspace sums them.
//!
//! One per-CPU value holds them all: userspace reads every statistic in
//! one system call. (`sched_switch` looked them up once for both of its
//! sides, 2.3 ns a switch less, but the pointer, live across the Python
//! walk, made Linux 6.1's verifier explore that walk past its million
//! instructions: each side counts with its own lookup.)

use aya_ebpf::{macros::map, maps::PerCpuArray};
use profiler_common::stat;

/// This CPU's statistics, by `stat` index.
pub type Stats = [u64; stat::COUNT as usize];

#[map]
static STATS: PerCpuArray<Stats> = PerCpuArray::with_max_entries(1, 0);

/// This CPU's statistics, to count several into.
#[inline(always)]
pub fn stats() -> Option<&'static mut Stats> {
    STATS.get_ptr_mut(0).map(|stats| unsafe { &mut *stats })
}

/// Adds one to `index` of `stats` and returns its previous value.
#[inline(always)]
pub fn count_in(stats: &mut Option<&'static mut Stats>, index: u32) -> u64 {
    match stats
        .as_mut()
        .and_then(|stats| stats.get_mut(index as usize))
    {
        Some(value) => {
            let previous = *value;
            *value = previous + 1;
            previous
        }
        None => 0,
    }
}

/// Adds one to a per-CPU statistic and returns its previous value.
#[inline(always)]
pub fn count_stat(index: u32) -> u64 {
    count_in(&mut stats(), index)
}
