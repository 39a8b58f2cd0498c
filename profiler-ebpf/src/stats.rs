//! Per-CPU statistics shared by every program: userspace sums them.

use aya_ebpf::{macros::map, maps::PerCpuArray};
use profiler_common::stat;

#[map]
static STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(stat::COUNT, 0);

/// Adds one to a per-CPU statistic and returns its previous value.
#[inline(always)]
pub fn count_stat(index: u32) -> u64 {
    match STATS.get_ptr_mut(index) {
        Some(value) => unsafe {
            let previous = *value;
            *value = previous + 1;
            previous
        },
        None => 0,
    }
}
