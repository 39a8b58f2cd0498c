//! Per-CPU logs: what a program counts (a sample's key, an off-CPU
//! period) or files (a JVM sample's stack) is appended to its CPU's slots
//! of the active buffer's log while they last, and only what a full log
//! has no room for goes to that buffer's hash map. An append writes one
//! slot; a hash map update hashes the key and finds its entry (about 170 ns
//! of an on-CPU sample against 20 for an append). Userspace maps the logs,
//! reads them at the drain, and walks a hash map only if `HASHED` says a
//! CPU used it: a drain's batch read walks every bucket of a map, used or
//! not (the off-CPU count map's 65,536 were 2.6 % of sparkprof's CPU on a
//! Spark host, the HotSpot stack maps' 3.8 % with the copies).

use aya_ebpf::{
    helpers::bpf_get_smp_processor_id,
    macros::map,
    maps::{Array, PerCpuArray},
};
use profiler_common::hashed;

/// Non-zero where a CPU put something in a buffer's hash map (a count, a
/// stack) since the drain of that buffer last read it, by [`hashed`]
/// index.
#[map]
static HASHED: PerCpuArray<u32> = PerCpuArray::with_max_entries(hashed::COUNT, 0);

/// A kind of record's logs: one map per buffer, memory-mappable, with
/// `per_cpu` slots for each CPU (CPU `c`'s from `c * per_cpu`), and each
/// CPU's count of the slots it filled in `lengths[buffer]`.
pub struct Log<T: 'static> {
    pub maps: [&'static Array<T>; 2],
    pub lengths: &'static PerCpuArray<u32>,
    pub per_cpu: u32,
}

impl<T> Log<T> {
    /// This CPU's next free slot of `buffer`'s log, taken (the caller
    /// writes it whole before it returns); `None` if the log is full (or
    /// there is none). Only this CPU writes its slots and its length, and
    /// a program runs to its end on its CPU: no atomics.
    #[inline(always)]
    pub fn take_slot(&self, buffer: u32) -> Option<&'static mut T> {
        let length = self.lengths.get_ptr_mut(buffer)?;
        let taken = unsafe { *length };
        if taken >= self.per_cpu {
            return None;
        }
        let cpu = unsafe { bpf_get_smp_processor_id() };
        let map = if buffer == 0 {
            self.maps[0]
        } else {
            self.maps[1]
        };
        let slot = map.get_ptr_mut(cpu.wrapping_mul(self.per_cpu).wrapping_add(taken))?;
        unsafe {
            *length = taken + 1;
            Some(&mut *slot)
        }
    }
}

/// Notes that this CPU put something in the hash map `index` (a
/// [`hashed`] index): the drain walks it.
#[inline(always)]
pub fn mark_hashed(index: u32) {
    if let Some(mark) = HASHED.get_ptr_mut(index) {
        unsafe { *mark = 1 };
    }
}
