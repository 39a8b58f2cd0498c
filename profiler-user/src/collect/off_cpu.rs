//! Off-CPU time from the `sched:sched_switch` tracepoint.
//!
//! The kernel side (profiler-ebpf `off_cpu.rs`) adds each blocked period of
//! a thread of interest to (thread, stacks, name epoch, state) in the active
//! buffer; here those counts are drained with the on-CPU ones, their stacks
//! read from the one off-CPU stack map (never cleared during a recording: a
//! thread may stay blocked across many drains and its stack ids must stay
//! valid until it runs again; a full map loses new stacks, counted), and
//! the nanoseconds turned into microseconds.

use std::{collections::HashMap as StdHashMap, collections::HashSet, time::Duration};

use aya::{
    Ebpf, EbpfLoader,
    maps::{HashMap, MapData, StackTraceMap},
    programs::TracePoint,
};
use profiler_common::{OffCpuKey, names};
use tracing::debug;

use super::{
    CollectError, RawSample, RawStack, SampleKind, comm_to_string, stack_from_map, take_map,
    tracefs::TracepointFormat,
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

/// Field offsets of the two tracepoints, from tracefs.
#[derive(Debug, Clone, Copy)]
pub struct SchedFormats {
    prev_pid: u32,
    prev_state: u32,
    next_pid: u32,
    exit_pid: u32,
    min_block_ns: u64,
}

impl SchedFormats {
    /// Reads the record layouts; `min_block` is handed over with them.
    pub fn read(min_block: Duration) -> Result<Self, String> {
        let switch = TracepointFormat::read("sched", "sched_switch")?;
        let exit = TracepointFormat::read("sched", "sched_process_exit")?;
        Ok(Self {
            prev_pid: switch.require("prev_pid", "sched_switch")?,
            prev_state: switch.require("prev_state", "sched_switch")?,
            next_pid: switch.require("next_pid", "sched_switch")?,
            exit_pid: exit.require("pid", "sched_process_exit")?,
            min_block_ns: min_block.as_nanos().min(u128::from(u64::MAX)) as u64,
        })
    }

    /// Hands the offsets, and the shortest period counted, to the programs.
    pub fn configure<'a>(&'a self, loader: &mut EbpfLoader<'a>) {
        loader.override_global(names::SCHED_SWITCH_PREV_PID_OFFSET, &self.prev_pid, true);
        loader.override_global(
            names::SCHED_SWITCH_PREV_STATE_OFFSET,
            &self.prev_state,
            true,
        );
        loader.override_global(names::SCHED_SWITCH_NEXT_PID_OFFSET, &self.next_pid, true);
        loader.override_global(names::PROCESS_EXIT_PID_OFFSET, &self.exit_pid, true);
        loader.override_global(names::OFFCPU_MIN_BLOCK_NS, &self.min_block_ns, true);
    }
}

/// The attached off-CPU programs and their maps.
pub struct OffCpuRecorder {
    counts: [HashMap<MapData, OffCpuKey, u64>; 2],
    stacks: StackTraceMap<MapData>,
    tgids: HashMap<MapData, u32, u8>,
    watched: HashSet<u32>,
    /// Stacks read so far, by id: ids stay valid for the whole recording.
    stack_cache: StdHashMap<i32, RawStack>,
    stack_depth: usize,
}

impl OffCpuRecorder {
    /// Loads and attaches sched_switch and sched_process_exit.
    pub fn load(ebpf: &mut Ebpf, stack_depth: u32) -> Result<Self, CollectError> {
        for (name, event) in [
            (names::PROGRAM_PROCESS_EXIT, "sched_process_exit"),
            (names::PROGRAM_SCHED_SWITCH, "sched_switch"),
        ] {
            let program_error = |source| CollectError::Program { name, source };
            let program: &mut TracePoint = ebpf
                .program_mut(name)
                .ok_or(CollectError::MissingProgram(name))?
                .try_into()
                .map_err(program_error)?;
            program.load().map_err(program_error)?;
            program.attach("sched", event).map_err(program_error)?;
        }
        Ok(Self {
            counts: [
                take_map(ebpf, names::OFFCPU_COUNTS[0])?,
                take_map(ebpf, names::OFFCPU_COUNTS[1])?,
            ],
            stacks: take_map(ebpf, names::OFFCPU_STACKS)?,
            tgids: take_map(ebpf, names::OFFCPU_TGIDS)?,
            watched: HashSet::new(),
            stack_cache: StdHashMap::new(),
            stack_depth: stack_depth as usize,
        })
    }

    /// Records this process's off-CPU time from now on.
    pub fn watch(&mut self, pid: u32) -> Result<(), CollectError> {
        if self.watched.insert(pid) {
            self.tgids
                .insert(&pid, &1u8, 0)
                .map_err(|source| CollectError::Map {
                    name: names::OFFCPU_TGIDS,
                    source,
                })?;
        }
        Ok(())
    }

    pub fn forget(&mut self, pid: u32) {
        if self.watched.remove(&pid) {
            let _ = self.tgids.remove(&pid);
        }
    }

    /// Takes what the idle buffer counted and clears it.
    pub fn drain(&mut self, idle: usize) -> Vec<RawSample> {
        let entries: Vec<(OffCpuKey, u64)> = self.counts[idle]
            .iter()
            .filter_map(|entry| entry.map_err(|err| debug!("off-CPU counts: {err}")).ok())
            .collect();
        let mut samples = Vec::with_capacity(entries.len());
        for (key, nanos) in &entries {
            let _ = self.counts[idle].remove(key);
            let user = self.stack(key.user_stack_id);
            let kernel = self.stack(key.kernel_stack_id);
            samples.push(RawSample {
                tgid: key.tgid,
                tid: key.tid,
                name_epoch: key.name_epoch,
                comm: comm_to_string(&key.comm),
                user,
                kernel,
                kind: SampleKind::OffCpu(OffCpuState::from_prev_state(key.state)),
                count: (nanos + 500) / 1_000,
            });
        }
        samples.retain(|sample| sample.count > 0);
        samples
    }

    fn stack(&mut self, id: i32) -> RawStack {
        let (stacks, depth) = (&self.stacks, self.stack_depth);
        self.stack_cache
            .entry(id)
            .or_insert_with(|| stack_from_map(stacks, id, depth))
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
