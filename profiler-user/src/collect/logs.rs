//! The programs' per-CPU logs (the eBPF side's `logs`): each CPU appends
//! one record per sample ([`SampleKey`], the sampler), per counted off-CPU
//! period ([`OffCpuPeriod`]) or per short JVM stack (`hotspot`'s) to its
//! own slots of the active buffer's log, and only what a full log has no
//! room for goes to the hash map. A drain reads the idle buffer's logs
//! from the maps' memory (they are mapped here: no system call per entry),
//! hands each record on, and empties them; it walks a hash map only if
//! [`Hashed`] says a CPU used it.

use std::{io, ptr::NonNull};

use aya::Pod;
use aya::{
    Ebpf,
    maps::{Array, IterableMap as _, MapData, PerCpuArray, PerCpuValues},
};
use profiler_common::{OffCpuPeriod, SampleKey, names};
use std::os::fd::{AsFd as _, AsRawFd as _};

use super::{CollectError, take_map};

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

/// Slots a CPU's off-CPU log has per buffer: 4,096 counted periods a
/// second of the drain interval (a Spark executor host counted about
/// 1,300 a second over both CPUs), at least 256, at most 16,384 and
/// [`MAX_OFFCPU_SLOTS`] over the `cpus`. A full log loses nothing: its
/// periods go to the off-CPU count map.
pub fn offcpu_slots_per_cpu(drain_interval: std::time::Duration, cpus: u32) -> u32 {
    (4_096 * drain_interval.as_millis().max(1) as u64 / 1000)
        .min(16_384)
        .min(MAX_OFFCPU_SLOTS / u64::from(cpus.max(1)))
        .max(256) as u32
}

/// Slots of one buffer's off-CPU log over all CPUs (4 MiB of periods),
/// unless 256 a CPU make more.
pub const MAX_OFFCPU_SLOTS: u64 = 65_536;

/// The sampler's logs: one [`SampleKey`] per sample.
pub type SampleLogs = Logs<SampleKey>;
/// The off-CPU program's logs: one [`OffCpuPeriod`] per counted period.
pub type OffCpuLogs = Logs<OffCpuPeriod>;

/// Both buffers' logs of one kind of record, and their lengths.
pub struct Logs<T: Pod> {
    logs: [MappedLog<T>; 2],
    lengths: PerCpuArray<MapData, u32>,
    lengths_name: &'static str,
    per_cpu: u32,
    cpus: u32,
}

/// One buffer's log, its map's memory mapped read-only.
struct MappedLog<T: Pod> {
    _map: Array<MapData, T>,
    memory: NonNull<T>,
    slots: usize,
    mapped_bytes: usize,
}

impl<T: Pod> MappedLog<T> {
    fn map(ebpf: &mut Ebpf, name: &'static str, slots: usize) -> Result<Self, CollectError> {
        let map: Array<MapData, T> = take_map(ebpf, name)?;
        let page = page_size();
        let mapped_bytes = (slots * size_of::<T>()).div_ceil(page) * page;
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

    /// Slot `index`, where it lies: a record is read no further than its
    /// reader looks (a short JVM stack's 2 KiB room copied whole for its
    /// few frames in use was about 2 % of sparkprof's CPU on a Spark host).
    fn get(&self, index: usize) -> &T {
        assert!(index < self.slots, "slot {index} of {}", self.slots);
        // SAFETY: within the mapping, which lives as long as `self`; the
        // value is plain data (`Pod`), and no program writes this buffer's
        // log while a drain reads it.
        unsafe { &*self.memory.as_ptr().add(index) }
    }
}

// SAFETY: the mapping is owned (unmapped once, on drop) and only read;
// the records are plain data.
unsafe impl<T: Pod> Send for MappedLog<T> {}

impl<T: Pod> Drop for MappedLog<T> {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, read by nothing after this.
        unsafe { libc::munmap(self.memory.as_ptr().cast(), self.mapped_bytes) };
    }
}

fn page_size() -> usize {
    // SAFETY: no arguments.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
}

impl<T: Pod> Logs<T> {
    /// Takes the logs `names` and their lengths (`lengths`) of `cpus` CPUs
    /// (the possible ones: what the kernel's processor ids range over),
    /// `per_cpu` slots each.
    pub fn take(
        ebpf: &mut Ebpf,
        names: [&'static str; 2],
        lengths: &'static str,
        per_cpu: u32,
        cpus: u32,
    ) -> Result<Self, CollectError> {
        let slots = log_slots(per_cpu, cpus) as usize;
        Ok(Self {
            logs: [
                MappedLog::map(ebpf, names[0], slots)?,
                MappedLog::map(ebpf, names[1], slots)?,
            ],
            lengths: take_map(ebpf, lengths)?,
            lengths_name: lengths,
            per_cpu,
            cpus,
        })
    }

    /// The sampler's logs.
    pub fn sampler(ebpf: &mut Ebpf, per_cpu: u32, cpus: u32) -> Result<Self, CollectError> {
        Self::take(ebpf, names::SAMPLE_LOGS, names::LOG_LENGTHS, per_cpu, cpus)
    }

    /// Hands every record logged in `buffer` to `each`, then empties its
    /// logs; returns how many there were. No program may write to the
    /// buffer meanwhile (the collector's idle one).
    pub fn take_buffer(
        &mut self,
        buffer: usize,
        mut each: impl FnMut(&T),
    ) -> Result<u64, CollectError> {
        let name = self.lengths_name;
        let map_error = |source| CollectError::Map { name, source };
        let lengths = self.lengths.get(&(buffer as u32), 0).map_err(map_error)?;
        let log = &self.logs[buffer];
        let mut logged = 0;
        for (cpu, &length) in lengths.iter().enumerate().take(self.cpus as usize) {
            let first = cpu * self.per_cpu as usize;
            for slot in first..first + length.min(self.per_cpu) as usize {
                each(log.get(slot));
                logged += 1;
            }
        }
        if logged > 0 {
            let zeroes = PerCpuValues::try_from(vec![0u32; lengths.len()])
                .map_err(|source| CollectError::Take { name, source })?;
            self.lengths
                .set(buffer as u32, zeroes, 0)
                .map_err(map_error)?;
        }
        Ok(logged)
    }
}

impl OffCpuLogs {
    /// The off-CPU program's logs.
    pub fn off_cpu(ebpf: &mut Ebpf, per_cpu: u32, cpus: u32) -> Result<Self, CollectError> {
        Self::take(
            ebpf,
            names::OFFCPU_LOGS,
            names::OFFCPU_LOG_LENGTHS,
            per_cpu,
            cpus,
        )
    }
}

/// The programs' marks of the hash maps they put something in (see
/// `profiler_common::hashed`).
pub struct Hashed(PerCpuArray<MapData, u32>);

impl Hashed {
    pub fn take(ebpf: &mut Ebpf) -> Result<Self, CollectError> {
        Ok(Self(take_map(ebpf, names::HASHED)?))
    }

    /// Whether some CPU put something in hash map `index` since the last
    /// call that said so; clears its marks. No program may write to that
    /// map meanwhile (an idle buffer's). Marks that cannot be read say yes:
    /// a walk of an empty map costs time, a skipped one loses counts.
    pub fn was_used(&mut self, index: u32) -> bool {
        let Ok(marks) = self.0.get(&index, 0) else {
            return true;
        };
        if marks.iter().all(|&mark| mark == 0) {
            return false;
        }
        if let Ok(zeroes) = PerCpuValues::try_from(vec![0u32; marks.len()]) {
            let _ = self.0.set(index, zeroes, 0);
        }
        true
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
    fn an_off_cpu_log_holds_4096_periods_a_second_within_bounds() {
        let second = Duration::from_secs(1);
        assert_eq!(offcpu_slots_per_cpu(second, 2), 4_096);
        assert_eq!(offcpu_slots_per_cpu(Duration::from_secs(2), 2), 8_192);
        assert_eq!(offcpu_slots_per_cpu(Duration::from_millis(10), 2), 256);
        assert_eq!(offcpu_slots_per_cpu(Duration::from_secs(60), 2), 16_384);
        // Many CPUs share the bound: 65,536 over 64.
        assert_eq!(offcpu_slots_per_cpu(second, 64), 1_024);
        assert_eq!(offcpu_slots_per_cpu(second, 4_096), 256);
    }

    #[test]
    fn a_log_map_has_every_cpu_slots_and_at_least_one() {
        assert_eq!(log_slots(148, 2), 296);
        assert_eq!(log_slots(0, 2), 1);
        assert_eq!(log_slots(u32::MAX, 2), u32::MAX);
    }
}
