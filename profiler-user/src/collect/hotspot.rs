//! The kernel side's view of HotSpot JVMs whose user stacks the sampler
//! walks itself, through Java frames (`hotspot_walk`, see the eBPF crate):
//! which processes (with what their code cache looks like), and the stacks
//! it recorded, double-buffered like the native stacks.
//!
//! The JVM runtime (`runtime::jvm`) reads what a process needs from the
//! JVM's VMStructs and hands it over here; naming the frames is its job too.

use std::collections::HashSet;

use aya::{
    Ebpf,
    maps::{HashMap, MapData, ProgramArray},
    programs::PerfEvent,
};
use profiler_common::{
    HOTSPOT_FINISH_SLOT, HOTSPOT_WALK_SLOT, HotspotFrame, HotspotProcInfo, HotspotShortStack,
    HotspotStack, HotspotStackOf, NewStack, hashed, names,
};
use tracing::debug;

use super::{
    CollectError,
    logs::{Hashed, Logs},
    pooled::PooledStacks,
    take_map,
    threads::FollowedThreads,
};

/// A JVM user stack as the kernel walked it: native and Java frames, leaf
/// first.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RawHotspotStack {
    pub frames: Vec<HotspotFrame>,
    /// The walk went on beyond what the kernel records.
    pub truncated: bool,
}

impl RawHotspotStack {
    pub fn from_kernel<const N: usize>(stack: &HotspotStackOf<N>) -> Self {
        let len = (stack.len as usize).min(N);
        Self {
            frames: stack.frames[..len].to_vec(),
            truncated: stack.truncated != 0,
        }
    }
}

/// The HotSpot maps of the loaded programs.
pub struct HotspotMaps {
    /// Kept open: the kernel empties a program array when its last file
    /// descriptor closes.
    _walker: ProgramArray<MapData>,
    processes: HashMap<MapData, u32, HotspotProcInfo>,
    /// Each walked JVM's threads: host tid → `JavaThread*`.
    threads: FollowedThreads,
    stacks: PooledStacks<HotspotStack>,
    short_stacks: PooledStacks<HotspotShortStack>,
    /// Each CPU's short stacks, before any go to `short_stacks`.
    short_log: Logs<NewStack<HotspotShortStack>>,
    watched: HashSet<u32>,
}

impl HotspotMaps {
    /// Takes the maps and loads the walker's programs into the sampler's
    /// tail-call slots; the short stacks' logs have `log_per_cpu` slots for
    /// each of `cpus` (as the sample logs).
    pub fn load(ebpf: &mut Ebpf, log_per_cpu: u32, cpus: u32) -> Result<Self, CollectError> {
        let mut walker: ProgramArray<MapData> = take_map(ebpf, names::HOTSPOT_WALKER)?;
        for (slot, name) in [
            (HOTSPOT_WALK_SLOT, names::PROGRAM_HOTSPOT_WALK),
            (HOTSPOT_FINISH_SLOT, names::PROGRAM_HOTSPOT_FINISH),
        ] {
            let program_error = |source| CollectError::Program { name, source };
            let program: &mut PerfEvent = ebpf
                .program_mut(name)
                .ok_or(CollectError::MissingProgram(name))?
                .try_into()
                .map_err(program_error)?;
            program.load().map_err(program_error)?;
            walker
                .set(slot, program.fd().map_err(program_error)?, 0)
                .map_err(|source| CollectError::Map {
                    name: names::HOTSPOT_WALKER,
                    source,
                })?;
        }
        Ok(Self {
            _walker: walker,
            processes: take_map(ebpf, names::HOTSPOT_PROCS)?,
            threads: FollowedThreads::take(ebpf, names::HOTSPOT_THREADS)?,
            stacks: PooledStacks::take(ebpf, names::HOTSPOT_STACKS)?,
            short_stacks: PooledStacks::take(ebpf, names::HOTSPOT_SHORT_STACKS)?,
            short_log: Logs::take(
                ebpf,
                names::HOTSPOT_SHORT_LOGS,
                names::HOTSPOT_LOG_LENGTHS,
                log_per_cpu,
                cpus,
            )?,
            watched: HashSet::new(),
        })
    }

    /// Walks process `pid`'s Java frames from now on.
    pub fn watch(&mut self, pid: u32, info: &HotspotProcInfo) -> Result<(), CollectError> {
        self.processes
            .insert(&pid, info, 0)
            .map_err(|source| CollectError::Map {
                name: names::HOTSPOT_PROCS,
                source,
            })?;
        self.watched.insert(pid);
        Ok(())
    }

    /// Replaces JVM `pid`'s threads by `threads` (host tid, `JavaThread*`),
    /// writing only what changed. A full map leaves the rest without their
    /// anchors (logged).
    pub fn set_threads(&mut self, pid: u32, threads: &[(u32, u64)]) {
        self.threads.set(pid, threads.iter().copied());
    }

    pub fn held(&self, held: &mut crate::sys::held::Held) {
        held.add("collect.hotspot_processes", self.watched.len());
        held.add("collect.hotspot_threads", self.threads.counts().1);
    }

    /// Stops walking an exited process's frames; whether it was walked.
    pub fn forget(&mut self, pid: u32) -> bool {
        self.threads.forget(pid);
        let walked = self.watched.remove(&pid);
        if walked {
            let _ = self.processes.remove(&pid);
        }
        walked
    }

    /// The `idle` buffer's stacks, taken out of the kernel (its logs, and
    /// the maps `hashed` says were used): the stack filed under a hash
    /// (`0`: none).
    pub fn take_stacks(
        &mut self,
        idle: usize,
        hashed: &mut Hashed,
    ) -> impl Fn(u64) -> Option<RawHotspotStack> + use<> {
        let mut short = self.short_stacks.take_buffer(
            idle,
            hashed.was_used(hashed::HOTSPOT_SHORT + idle as u32),
            RawHotspotStack::from_kernel,
        );
        // A slot whose copy failed (hash 0) names no stack.
        if let Err(err) = self.short_log.take_buffer(idle, |logged| {
            if logged.hash != 0 {
                short.insert(logged.hash, RawHotspotStack::from_kernel(&logged.stack));
            }
        }) {
            debug!("HotSpot stack logs: {err}");
        }
        let long = self.stacks.take_buffer(
            idle,
            hashed.was_used(hashed::HOTSPOT_LONG + idle as u32),
            RawHotspotStack::from_kernel,
        );
        move |hash| short.get(hash).or_else(|| long.get(hash))
    }
}
