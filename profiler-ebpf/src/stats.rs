//! Per-CPU statistics shared by every program: userspace sums them.
//!
//! One per-CPU value holds them all: userspace reads every statistic in
//! one system call. (`sched_switch` looked them up once for both of its
//! sides, 2.3 ns a switch less, but the pointer, live across the Python
//! walk, made Linux 6.1's verifier explore that walk past its million
//! instructions: each side counts with its own lookup.)

use aya_ebpf::{macros::map, maps::PerCpuArray};
use profiler_common::stat;

#[map]
static STATS: PerCpuArray<[u64; stat::COUNT as usize]> = PerCpuArray::with_max_entries(1, 0);

/// Adds one to a per-CPU statistic and returns its previous value.
#[inline(always)]
pub fn count_stat(index: u32) -> u64 {
    let Some(stats) = STATS.get_ptr_mut(0) else {
        return 0;
    };
    match unsafe { &mut *stats }.get_mut(index as usize) {
        Some(value) => {
            let previous = *value;
            *value = previous + 1;
            previous
        }
        None => 0,
    }
}
