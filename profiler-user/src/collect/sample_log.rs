//! The sampler's per-CPU sample logs (the eBPF side's `on_cpu::log_one`):
//! each CPU appends one [`SampleKey`] per sample to its own slots of the
//! active buffer's log, and only samples a full log has no room for are
//! hashed into the count map. A drain reads the idle buffer's logs from
//! the maps' memory (they are mapped here: no system call per entry),
//! adds them up by key, and empties them.

use std::{io, ptr::NonNull};

use aya::{
    Ebpf,
    maps::{Array, IterableMap as _, MapData, PerCpuArray, PerCpuValues},
};
use profiler_common::{SampleKey, names};
use std::os::fd::{AsFd as _, AsRawFd as _};

use super::{CollectError, take_map};
use crate::FastMap;

/// Slots a CPU's log has per buffer: a drain interval's samples at
/// `frequency_hz` and a half again, for drains that come late; at least
/// 64, at most 16,384 and [`MAX_SLOTS`] over the `cpus` (the possible
/// ones). A full log loses nothing: its samples go to the count map.
pub fn slots_per_cpu(frequency_hz: u64, drain_interval: std::time::Duration, cpus: u32) -> u32 {
    let per_interval = frequency_hz * drain_interval.as_millis().max(1) as u64 / 1000;
    (per_interval * 3 / 2)
        .min(16_384)
        .min(MAX_SLOTS / u64::from(cpus.max(1)))
        .max(64) as u32
}

/// Slots of one buffer's log over all CPUs (7 MiB of keys), unless 64 a
/// CPU make more.
pub const MAX_SLOTS: u64 = 131_072;

/// Entries of one buffer's log map, `per_cpu` slots for each of `cpus`
/// (a map has at least one, also with no log): the size the map is made
/// with and the one mapped.
pub fn log_slots(per_cpu: u32, cpus: u32) -> u32 {
    per_cpu.saturating_mul(cpus).max(1)
}

/// Both buffers' logs and their lengths.
pub struct SampleLogs {
    logs: [MappedLog; 2],
    lengths: PerCpuArray<MapData, u32>,
    per_cpu: u32,
    cpus: u32,
}

/// One buffer's log, its map's memory mapped read-only.
struct MappedLog {
    _map: Array<MapData, SampleKey>,
    memory: NonNull<SampleKey>,
    slots: usize,
    mapped_bytes: usize,
}

impl MappedLog {
    fn map(ebpf: &mut Ebpf, name: &'static str, slots: usize) -> Result<Self, CollectError> {
        let map: Array<MapData, SampleKey> = take_map(ebpf, name)?;
        let page = page_size();
        let mapped_bytes = (slots * size_of::<SampleKey>()).div_ceil(page) * page;
        let fd = map.map().fd().as_fd().as_raw_fd();
        // SAFETY: a shared read-only mapping of a BPF_F_MMAPABLE array of
        // `slots` values, no larger than the map's own (page-rounded).
        let memory = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped_bytes,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if memory == libc::MAP_FAILED {
            return Err(CollectError::Take {
                name,
                source: io::Error::last_os_error(),
            });
        }
        Ok(Self {
            _map: map,
            memory: NonNull::new(memory.cast()).expect("mmap does not return NULL"),
            slots,
            mapped_bytes,
        })
    }

    /// Slot `index` as it is now.
    fn read(&self, index: usize) -> SampleKey {
        assert!(index < self.slots, "slot {index} of {}", self.slots);
        // SAFETY: within the mapping; the value is plain data (`Pod`), and
        // no program writes this buffer's log while a drain reads it.
        unsafe { self.memory.as_ptr().add(index).read_volatile() }
    }
}

// SAFETY: the mapping is owned (unmapped once, on drop) and only read.
unsafe impl Send for MappedLog {}

impl Drop for MappedLog {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, read by nothing after this.
        unsafe { libc::munmap(self.memory.as_ptr().cast(), self.mapped_bytes) };
    }
}

fn page_size() -> usize {
    // SAFETY: no arguments.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
}

impl SampleLogs {
    /// Takes the logs of `cpus` CPUs (the possible ones: what the kernel's
    /// processor ids range over), `per_cpu` slots each.
    pub fn take(ebpf: &mut Ebpf, per_cpu: u32, cpus: u32) -> Result<Self, CollectError> {
        let slots = log_slots(per_cpu, cpus) as usize;
        Ok(Self {
            logs: [
                MappedLog::map(ebpf, names::SAMPLE_LOGS[0], slots)?,
                MappedLog::map(ebpf, names::SAMPLE_LOGS[1], slots)?,
            ],
            lengths: take_map(ebpf, names::LOG_LENGTHS)?,
            per_cpu,
            cpus,
        })
    }

    /// Adds every sample logged in `buffer` to `counts`, then empties its
    /// logs; returns how many there were. No program may write to the
    /// buffer meanwhile (the collector's idle one).
    pub fn take_buffer(
        &mut self,
        buffer: usize,
        counts: &mut FastMap<SampleKey, u64>,
    ) -> Result<u64, CollectError> {
        let map_error = |source| CollectError::Map {
            name: names::LOG_LENGTHS,
            source,
        };
        let lengths = self.lengths.get(&(buffer as u32), 0).map_err(map_error)?;
        let log = &self.logs[buffer];
        let mut logged = 0;
        for (cpu, &length) in lengths.iter().enumerate().take(self.cpus as usize) {
            let first = cpu * self.per_cpu as usize;
            for slot in first..first + length.min(self.per_cpu) as usize {
                *counts.entry(log.read(slot)).or_insert(0) += 1;
                logged += 1;
            }
        }
        if logged > 0 {
            let zeroes = PerCpuValues::try_from(vec![0u32; lengths.len()]).map_err(|source| {
                CollectError::Take {
                    name: names::LOG_LENGTHS,
                    source,
                }
            })?;
            self.lengths
                .set(buffer as u32, zeroes, 0)
                .map_err(map_error)?;
        }
        Ok(logged)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_log_holds_a_drain_and_a_half_within_bounds() {
        let second = Duration::from_secs(1);
        assert_eq!(slots_per_cpu(99, second, 2), 148);
        assert_eq!(slots_per_cpu(999, second, 2), 1_498);
        assert_eq!(slots_per_cpu(19, Duration::from_millis(100), 2), 64);
        assert_eq!(slots_per_cpu(999, Duration::from_secs(60), 2), 16_384);
        // Many CPUs share the bound: 131,072 over 128.
        assert_eq!(slots_per_cpu(999, Duration::from_secs(10), 128), 1_024);
        assert_eq!(slots_per_cpu(99, second, 4_096), 64);
    }

    #[test]
    fn a_log_map_has_every_cpu_slots_and_at_least_one() {
        assert_eq!(log_slots(148, 2), 296);
        assert_eq!(log_slots(0, 2), 1);
        assert_eq!(log_slots(u32::MAX, 2), u32::MAX);
    }
}
