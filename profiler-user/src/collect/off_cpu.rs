//! Off-CPU time from the `sched_switch` BTF tracepoint (switch-out and
//! switch-in both).
//!
//! The kernel side (profiler-ebpf `off_cpu.rs`) adds each blocked period of
//! a thread of interest to (thread, stacks, name epoch, state) in the active
//! buffer; here those counts are drained with the on-CPU ones, their user,
//! kernel and Python stacks read from the off-CPU stack maps by the hash
//! they were filed under, and the nanoseconds turned into microseconds.
//!
//! A thread may stay blocked across many drains, so no drain may clear the
//! stacks its count will name. Instead every new stack comes through a ring
//! buffer when the program first files it (`OFFCPU_NEW_*_STACKS`), read at
//! each drain into caches here, before the counts that name them; the
//! kernel maps only spare sending a stack twice and evict their least
//! recently used entries when full. A stack lost to a full ring reads as
//! lost, and is shown so.

use std::{
    collections::HashMap as StdHashMap,
    time::{Duration, Instant, SystemTime},
};

use aya::{
    Btf, Ebpf, EbpfLoader,
    maps::{Array, HashMap, MapData, RingBuf},
    programs::{Iter, ProgramError},
};
use profiler_common::{
    MAX_OFFCPU_SLOTS, NewStack, OFFCPU_KERNEL_DEPTH, OFFCPU_USER_DEPTH, OFFCPU_WATCHED_PYTHON,
    OffCpuKernelStack, OffCpuKey, OffCpuStart, OffCpuUserStack, PythonStack, STACK_LOST, names,
};
use tracing::{debug, warn};

use super::{
    CollectError, RawPythonStack, RawSample, RawStack, SampleKind, attach_btf_tracepoint,
    bounded::TwoGenerations, comm_to_string, hold::OffCpuHold, logs::OffCpuLogs, program, take_map,
};

/// What the off-CPU recorder counts.
#[derive(Clone, Debug)]
pub struct OffCpuConfig {
    /// Shorter blocked periods are not counted (noise, and cost).
    pub min_block: Duration,
    /// Entries of the off-CPU stack map.
    pub stack_map_entries: u32,
    /// Entries of each off-CPU count map.
    pub count_map_entries: u32,
    /// Slots of each CPU's off-CPU log per buffer (see
    /// [`super::logs::offcpu_slots_per_cpu`]; `0`: every period is hashed
    /// into the count map).
    pub log_per_cpu: u32,
}

/// Why a thread was off its CPU, from the sched_switch record's `prev_state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OffCpuState {
    /// Waited voluntarily, interruptibly (`S`: sleep, lock, network, a
    /// condition): waiting for something other than the CPU.
    Sleep,
    /// Waited uninterruptibly (`D`: mostly disk I/O, page faults).
    Io,
    /// Runnable but descheduled: preempted, waiting for a CPU.
    Preempted,
    /// Stopped, traced, parked or dying.
    Other,
}

/// The kernel's `TASK_REPORT_MAX`, which sched_switch reports for a
/// preempted task (since Linux 4.14).
const PREEMPTED_BIT: u32 = 0x100;
const TASK_INTERRUPTIBLE: u32 = 0x1;
const TASK_UNINTERRUPTIBLE: u32 = 0x2;
/// `TASK_IDLE` kernel threads report `I`: an idle wait, like a sleep.
const TASK_REPORT_IDLE: u32 = 0x80;

impl OffCpuState {
    /// Classifies a sched_switch `prev_state`.
    pub fn from_prev_state(state: u32) -> Self {
        if state == 0 || state & PREEMPTED_BIT != 0 {
            Self::Preempted
        } else if state & TASK_UNINTERRUPTIBLE != 0 {
            Self::Io
        } else if state & (TASK_INTERRUPTIBLE | TASK_REPORT_IDLE) != 0 {
            Self::Sleep
        } else {
            Self::Other
        }
    }

    /// The leaf frame that says how the thread waited.
    pub fn marker(self) -> &'static str {
        match self {
            Self::Sleep => "[off-cpu: sleep]",
            Self::Io => "[off-cpu: io]",
            Self::Preempted => "[off-cpu: preempted]",
            Self::Other => "[off-cpu: other]",
        }
    }
}

/// What the off-CPU program is told before it loads: the slots of the
/// watched-process table (from `pid_max`) and the shortest period counted.
#[derive(Debug, Clone, Copy)]
pub struct OffCpuGlobals {
    slot_mask: u32,
    min_block_ns: u64,
    /// Offset of `task_struct::bpf_storage` (0: not known).
    task_storage: u32,
}

impl OffCpuGlobals {
    /// Reads this kernel's `pid_max`; `min_block` is handed over with it.
    pub fn read(min_block: Duration) -> Result<Self, String> {
        let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .map_err(|err| format!("/proc/sys/kernel/pid_max: {err}"))?;
        let pid_max = pid_max
            .trim()
            .parse::<u32>()
            .map_err(|err| format!("/proc/sys/kernel/pid_max: {err}"))?;
        Ok(Self {
            slot_mask: slots_for(pid_max) - 1,
            min_block_ns: min_block.as_nanos().min(u128::from(u64::MAX)) as u64,
            task_storage: 0,
        })
    }

    /// Where a task's BPF local storage pointer is, if the kernel's BTF
    /// says: the program then tells most unwatched threads by it alone.
    pub fn with_task_storage(self, offset: Option<u32>) -> Self {
        Self {
            task_storage: offset.unwrap_or(0),
            ..self
        }
    }

    /// Slots of the watched-process table.
    pub fn slots(&self) -> u32 {
        self.slot_mask + 1
    }

    /// Hands the slot count and the shortest period counted to the
    /// program, and sizes the watched-process table.
    pub fn configure<'a>(&'a self, loader: &mut EbpfLoader<'a>) {
        loader.override_global(names::OFFCPU_SLOT_MASK, &self.slot_mask, true);
        loader.override_global(names::OFFCPU_MIN_BLOCK_NS, &self.min_block_ns, true);
        loader.override_global(names::TASK_BPF_STORAGE_OFFSET, &self.task_storage, true);
        loader.map_max_entries(names::OFFCPU_WATCHED, self.slots());
    }
}

/// One slot per possible id up to [`MAX_OFFCPU_SLOTS`] (a power of two, so
/// the kernel side indexes with a mask); larger ids share slots.
fn slots_for(pid_max: u32) -> u32 {
    pid_max.clamp(64, MAX_OFFCPU_SLOTS).next_power_of_two()
}

/// A stack read from the kernel stays in userspace for one to two of
/// these after its last use. Whatever the rings sent in the current drain
/// is always kept (the generation turns before a drain reads them); an
/// older stack that comes back is read again from its kernel map, or, if
/// the map let it go, sent again by the program.
const STACK_CACHE_AGE: Duration = Duration::from_secs(60);

/// The attached off-CPU programs and their maps.
pub struct OffCpuRecorder {
    /// Each CPU's counted periods, before any are hashed into `counts`.
    logs: OffCpuLogs,
    /// Periods taken from the logs, and entries from the count maps, so
    /// far.
    logged_periods: u64,
    hashed_entries: u64,
    counts: [HashMap<MapData, OffCpuKey, u64>; 2],
    count_buffers: super::batch::BatchBuffers,
    user_stacks: HashMap<MapData, u64, OffCpuUserStack>,
    kernel_stacks: HashMap<MapData, u64, OffCpuKernelStack>,
    python_stacks: HashMap<MapData, u64, PythonStack>,
    /// Every new stack, as the program files it: user, kernel, Python.
    new_stacks: [RingBuf<MapData>; 3],
    watched_slots: Array<MapData, u32>,
    /// The open periods and recent sites of threads of interest, by
    /// thread id, and those whose entry was taken (read only to count
    /// them).
    thread_slots: Array<MapData, OffCpuStart>,
    spilled_slots: HashMap<MapData, u32, OffCpuStart>,
    /// Watched processes by slot.
    watched: StdHashMap<u32, u32>,
    /// Processes were watched since their threads were last marked.
    marks_pending: bool,
    slot_mask: u32,
    /// Stacks read so far, by hash, as the rings sent them: bounded to
    /// twice the entries of their kernel map (the kernel's LRU map still
    /// has a stack userspace let go of, unless it evicted it too).
    stack_cache: TwoGenerations<RawStack>,
    kernel_stack_cache: TwoGenerations<RawStack>,
    python_stack_cache: TwoGenerations<Option<RawPythonStack>>,
    stack_depth: usize,
    /// Counts taken from the kernel, held for a few drains.
    hold: OffCpuHold,
}

impl OffCpuRecorder {
    /// Loads and attaches the BTF tracepoint programs (no tracefs): the
    /// exit one first so no slot outlives its thread, and the one that
    /// marks new threads of watched processes before the switches that
    /// pass over unmarked threads; and loads the iterator that marks the
    /// threads a process has when it comes to be watched.
    pub fn load(
        ebpf: &mut Ebpf,
        globals: &OffCpuGlobals,
        stack_depth: u32,
        btf: Result<&Btf, &String>,
        logs: OffCpuLogs,
        hold: OffCpuHold,
    ) -> Result<Self, CollectError> {
        let btf = btf.map_err(|err| {
            CollectError::OffCpuUnavailable(format!(
                "{err}; off-CPU recording needs a kernel built with CONFIG_DEBUG_INFO_BTF"
            ))
        })?;
        attach_tracepoint(
            ebpf,
            btf,
            names::PROGRAM_PROCESS_EXIT,
            "sched_process_exit",
            "",
        )?;
        attach_tracepoint(ebpf, btf, names::PROGRAM_TASK_NEWTASK, "task_newtask", "")?;
        let mark: &mut Iter = program(ebpf, names::PROGRAM_MARK_WATCHED)?;
        mark.load("task", btf).map_err(|err| {
            CollectError::OffCpuUnavailable(format!(
                "the task iterator that marks watched threads could not be loaded: {err} \
                 (task iterators and task storage need Linux 5.11 or newer)"
            ))
        })?;
        attach_tracepoint(
            ebpf,
            btf,
            names::PROGRAM_SCHED_SWITCH,
            "sched_switch",
            " (it needs Linux 5.18 or newer, for sched_switch's prev_state argument)",
        )?;
        Ok(Self {
            logs,
            logged_periods: 0,
            hashed_entries: 0,
            counts: [
                take_map(ebpf, names::OFFCPU_COUNTS[0])?,
                take_map(ebpf, names::OFFCPU_COUNTS[1])?,
            ],
            count_buffers: super::batch::BatchBuffers::default(),
            user_stacks: take_map(ebpf, names::OFFCPU_USER_STACKS)?,
            kernel_stacks: take_map(ebpf, names::OFFCPU_KERNEL_STACKS)?,
            python_stacks: take_map(ebpf, names::OFFCPU_PY_STACKS)?,
            new_stacks: [
                take_map(ebpf, names::OFFCPU_NEW_USER_STACKS)?,
                take_map(ebpf, names::OFFCPU_NEW_KERNEL_STACKS)?,
                take_map(ebpf, names::OFFCPU_NEW_PY_STACKS)?,
            ],
            watched_slots: take_map(ebpf, names::OFFCPU_WATCHED)?,
            thread_slots: take_map(ebpf, names::OFFCPU_THREADS)?,
            spilled_slots: take_map(ebpf, names::OFFCPU_START)?,
            watched: StdHashMap::new(),
            marks_pending: false,
            slot_mask: globals.slot_mask,
            stack_cache: TwoGenerations::new(
                profiler_common::DEFAULT_OFFCPU_STACK_ENTRIES as usize,
                STACK_CACHE_AGE,
            ),
            kernel_stack_cache: TwoGenerations::new(
                profiler_common::OFFCPU_KERNEL_STACK_ENTRIES as usize,
                STACK_CACHE_AGE,
            ),
            python_stack_cache: TwoGenerations::new(
                profiler_common::OFFCPU_PY_STACK_ENTRIES as usize,
                STACK_CACHE_AGE,
            ),
            stack_depth: stack_depth as usize,
            hold,
        })
    }

    /// Threads that hold a slot (each lives from a thread's first
    /// switch-out to its exit): a bound that exited threads must not fill.
    pub fn thread_slots(&self) -> usize {
        let held = self
            .thread_slots
            .iter()
            .filter(|slot| slot.as_ref().is_ok_and(|slot| slot.tid != 0))
            .count();
        held + self.spilled_slots.keys().filter(Result::is_ok).count()
    }

    /// Records this process's off-CPU time from now on. With a `pid_max`
    /// above [`MAX_OFFCPU_SLOTS`] two processes can share a slot; then the
    /// one already watched keeps it, and this one is refused.
    pub fn watch(&mut self, pid: u32) -> Result<(), CollectError> {
        let slot = pid & self.slot_mask;
        match self.watched.get(&slot) {
            Some(&holder) if holder == pid => return Ok(()),
            Some(&holder) => {
                warn!(
                    "off-CPU time of process {pid} is not recorded: it shares a slot with \
                     process {holder} (kernel.pid_max above {MAX_OFFCPU_SLOTS})"
                );
                return Ok(());
            }
            None => {}
        }
        self.watched_slots
            .set(slot, &pid, 0)
            .map_err(|source| CollectError::Map {
                name: names::OFFCPU_WATCHED,
                source,
            })?;
        self.watched.insert(slot, pid);
        self.marks_pending = true;
        Ok(())
    }

    /// Marks the threads of processes watched since the last call: runs
    /// the task iterator (to its end: reading it is running it). A thread
    /// created since a process was watched was marked as it was created.
    pub fn mark_watched_threads(&mut self, ebpf: &mut Ebpf) -> Result<(), CollectError> {
        if !self.marks_pending {
            return Ok(());
        }
        let error = |source: ProgramError| CollectError::Program {
            name: names::PROGRAM_MARK_WATCHED,
            source,
        };
        let mark: &mut Iter = program(ebpf, names::PROGRAM_MARK_WATCHED)?;
        let link = mark.attach().map_err(error)?;
        let link = mark.take_link(link).map_err(error)?;
        let mut iterator = link
            .into_file()
            .map_err(|err| error(ProgramError::from(err)))?;
        // The program writes nothing: the read returns at the last thread.
        std::io::copy(&mut iterator, &mut std::io::sink())
            .map_err(|err| error(ProgramError::from(err)))?;
        self.marks_pending = false;
        Ok(())
    }

    /// Marks a watched process as one whose Python frames are followed:
    /// its threads' switch-outs then walk them too.
    pub fn follow_python(&mut self, pid: u32) {
        let slot = pid & self.slot_mask;
        if self.watched.get(&slot) == Some(&pid) {
            let _ = self
                .watched_slots
                .set(slot, &(pid | OFFCPU_WATCHED_PYTHON), 0);
        }
    }

    /// The processes whose off-CPU time is recorded.
    pub fn watched(&self) -> impl Iterator<Item = u32> + '_ {
        self.watched.values().copied()
    }

    /// Periods drained from the per-CPU logs, and entries from the count
    /// maps (what full logs had no room for), since the start.
    pub fn sources(&self) -> (u64, u64) {
        (self.logged_periods, self.hashed_entries)
    }

    /// Where the counts held and not yet handed on begin, if any are.
    pub fn held_since(&self) -> Option<SystemTime> {
        self.hold.since()
    }

    pub fn held(&self, held: &mut crate::sys::held::Held) {
        held.add("collect.off_cpu_watched", self.watched.len());
        held.add("collect.off_cpu_held", self.hold.len());
        held.add("collect.off_cpu_user_stacks", self.stack_cache.len());
        held.add(
            "collect.off_cpu_kernel_stacks",
            self.kernel_stack_cache.len(),
        );
        held.add(
            "collect.off_cpu_python_stacks",
            self.python_stack_cache.len(),
        );
    }

    pub fn forget(&mut self, pid: u32) {
        let slot = pid & self.slot_mask;
        if self.watched.get(&slot) == Some(&pid) {
            self.watched.remove(&slot);
            let _ = self.watched_slots.set(slot, &0, 0);
        }
    }

    /// Reads the stacks the program sent since the last drain into the
    /// caches (every count names a stack sent before it was counted).
    fn take_new_stacks(&mut self) {
        let now = Instant::now();
        self.stack_cache.expire(now);
        self.kernel_stack_cache.expire(now);
        self.python_stack_cache.expire(now);
        let depth = self.stack_depth;
        let [user, kernel, python] = &mut self.new_stacks;
        while let Some(item) = user.next() {
            if let Some(new) = decode::<OffCpuUserStack>(&item) {
                self.stack_cache
                    .insert(new.hash, user_frames(&new.stack, depth));
            }
        }
        while let Some(item) = kernel.next() {
            if let Some(new) = decode::<OffCpuKernelStack>(&item) {
                self.kernel_stack_cache
                    .insert(new.hash, kernel_frames(&new.stack, depth));
            }
        }
        while let Some(item) = python.next() {
            if let Some(new) = decode::<PythonStack>(&item) {
                self.python_stack_cache
                    .insert(new.hash, Some(RawPythonStack::from_kernel(&new.stack)));
            }
        }
    }

    /// Takes what the idle buffer counted (the buffer began at `start`
    /// and ended at `end`) and clears it: its logs, and its count map if
    /// `hashed` (a program hashed a period into it); what it counted is
    /// held ([`super::hold`]). Everything held is handed on when it is
    /// due, or at once if `release`: the samples, with the start of the
    /// span they cover. `None`: held on.
    pub fn drain(
        &mut self,
        idle: usize,
        hashed: bool,
        (start, end): (SystemTime, SystemTime),
        release: bool,
    ) -> Option<(SystemTime, Vec<RawSample>)> {
        self.take_new_stacks();
        let mut entries = Vec::new();
        match self
            .logs
            .take_buffer(idle, |period| entries.push((period.key, period.ns)))
        {
            Ok(logged) => self.logged_periods += logged,
            Err(err) => debug!("off-CPU logs: {err}"),
        }
        let logged = entries.len();
        if hashed
            && let Err(err) = super::batch::take_each(
                &mut self.counts[idle],
                &mut self.count_buffers,
                |key, nanos| entries.push((key, nanos)),
            )
        {
            debug!("off-CPU counts: {err}");
        }
        self.hashed_entries += (entries.len() - logged) as u64;
        self.hold.add(start, entries);
        if !release && !self.hold.due(end) {
            return None;
        }
        let (since, entries) = self.hold.take()?;
        let mut samples = Vec::with_capacity(entries.len());
        for (key, nanos) in &entries {
            let user = self.user_stack(key.user_stack);
            let kernel = self.kernel_stack(key.kernel_stack);
            samples.push(RawSample {
                tgid: key.tgid,
                tid: key.tid,
                name_epoch: key.name_epoch,
                comm: comm_to_string(&key.comm),
                user,
                kernel,
                python: self.python_stack(key.python_stack),
                hotspot: None,
                kind: SampleKind::OffCpu(OffCpuState::from_prev_state(key.state)),
                count: (nanos + 500) / 1_000,
            });
        }
        samples.retain(|sample| sample.count > 0);
        Some((since, samples))
    }

    /// A user stack by the hash the program filed it under (`0`: none).
    fn user_stack(&mut self, hash: u64) -> RawStack {
        let depth = self.stack_depth;
        cached_lookup(
            &mut self.stack_cache,
            &self.user_stacks,
            hash,
            ("user", lost_stack),
            |stack| user_frames(&stack, depth),
        )
        .unwrap_or(RawStack::Absent)
    }

    /// A Python stack by the hash the program filed it under (`0`: none).
    fn python_stack(&mut self, hash: u64) -> Option<RawPythonStack> {
        cached_lookup(
            &mut self.python_stack_cache,
            &self.python_stacks,
            hash,
            ("Python", |_| None),
            |stack| Some(RawPythonStack::from_kernel(&stack)),
        )
        .flatten()
    }

    /// A kernel stack by the hash the program filed it under (`0`: none).
    fn kernel_stack(&mut self, hash: u64) -> RawStack {
        let depth = self.stack_depth;
        cached_lookup(
            &mut self.kernel_stack_cache,
            &self.kernel_stacks,
            hash,
            ("kernel", lost_stack),
            |stack| kernel_frames(&stack, depth),
        )
        .unwrap_or(RawStack::Absent)
    }
}

/// A stack that was not kept: its ring was full (`-ENOSPC`), or it is in
/// neither the caches nor the map (`-ENOENT`).
fn lost_stack(errno: i32) -> RawStack {
    RawStack::Lost(-errno)
}

/// A ring record: the hash, then the stack.
fn decode<V: Copy>(bytes: &[u8]) -> Option<NewStack<V>> {
    if bytes.len() < size_of::<NewStack<V>>() {
        debug!(len = bytes.len(), "short off-CPU stack record ignored");
        return None;
    }
    // SAFETY: long enough, and NewStack<V> is plain data (any bytes are a
    // valid value); read unaligned from the ring's memory.
    Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<NewStack<V>>()) })
}

/// An off-CPU user stack's frames, cut to `depth`.
fn user_frames(stack: &OffCpuUserStack, depth: usize) -> RawStack {
    let len = (stack.len as usize).min(OFFCPU_USER_DEPTH);
    frames(&stack.ips[..len], OFFCPU_USER_DEPTH, depth)
}

/// An off-CPU kernel stack's frames (zero-terminated).
fn kernel_frames(stack: &OffCpuKernelStack, depth: usize) -> RawStack {
    let ips: Vec<u64> = stack
        .ips
        .iter()
        .copied()
        .take_while(|&ip| ip != 0)
        .collect();
    let truncated = ips.len() >= OFFCPU_KERNEL_DEPTH.min(depth);
    if ips.is_empty() {
        RawStack::Absent
    } else {
        RawStack::Frames { ips, truncated }
    }
}

/// What the stack filed under `hash` reads as (`convert`): from `cache`
/// (which the rings fill), else from `map`. `None` for hash `0` (no stack);
/// [`STACK_LOST`], or a hash found nowhere, reads as `lost(errno)`, logged.
fn cached_lookup<V: aya::Pod, T: Clone>(
    cache: &mut TwoGenerations<T>,
    map: &HashMap<MapData, u64, V>,
    hash: u64,
    (what, lost): (&str, fn(i32) -> T),
    convert: impl FnOnce(V) -> T,
) -> Option<T> {
    if hash == 0 {
        return None;
    }
    if hash == STACK_LOST {
        return Some(lost(libc::ENOSPC));
    }
    if let Some(stack) = cache.get(hash) {
        return Some(stack.clone());
    }
    let stack = match map.get(&hash, 0) {
        Ok(stack) => convert(stack),
        Err(err) => {
            debug!(
                hash,
                "off-CPU {what} stack not sent and not in its map: {err}"
            );
            return Some(lost(libc::ENOENT));
        }
    };
    cache.insert(hash, stack.clone());
    Some(stack)
}

/// The frames of a stack (leaf first), cut to `depth`; truncated when the
/// program's buffer (`capacity` frames) or `depth` was full.
fn frames(ips: &[u64], capacity: usize, depth: usize) -> RawStack {
    if ips.is_empty() {
        return RawStack::Absent;
    }
    let kept = ips.len().min(depth);
    RawStack::Frames {
        ips: ips[..kept].to_vec(),
        truncated: kept < ips.len() || ips.len() >= capacity,
    }
}

/// Loads and attaches the BTF tracepoint program `name` to `event`; off-CPU
/// recording is not possible without it (`why` says what it needs).
fn attach_tracepoint(
    ebpf: &mut Ebpf,
    btf: &Btf,
    name: &'static str,
    event: &str,
    why: &str,
) -> Result<(), CollectError> {
    attach_btf_tracepoint(ebpf, btf, name, event)?.map_err(|err| {
        CollectError::OffCpuUnavailable(format!(
            "the {event} BTF tracepoint could not be attached: {err}{why}"
        ))
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_cover_pid_max_up_to_the_limit() {
        assert_eq!(slots_for(32_768), 32_768);
        assert_eq!(slots_for(4_194_304), MAX_OFFCPU_SLOTS);
        assert_eq!(slots_for(100_000), 131_072);
        assert_eq!(slots_for(1), 64);
    }

    #[test]
    fn classifies_sched_switch_states() {
        assert_eq!(OffCpuState::from_prev_state(0), OffCpuState::Preempted);
        assert_eq!(OffCpuState::from_prev_state(0x100), OffCpuState::Preempted);
        assert_eq!(OffCpuState::from_prev_state(0x1), OffCpuState::Sleep);
        assert_eq!(OffCpuState::from_prev_state(0x2), OffCpuState::Io);
        assert_eq!(OffCpuState::from_prev_state(0x80), OffCpuState::Sleep);
        assert_eq!(OffCpuState::from_prev_state(0x4), OffCpuState::Other);
        assert_eq!(OffCpuState::Io.marker(), "[off-cpu: io]");
    }
}
