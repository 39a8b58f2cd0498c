//! The kernel side's view of CPython processes: which processes and
//! threads the on-CPU sampler follows into Python frames, and the Python
//! stacks it recorded.
//!
//! Userspace (the CPython runtime, `runtime::python`, driven by the record loop) tells it each
//! process's struct offsets and, every drain, each thread's
//! `PyThreadState` address; the sampler then records (code object,
//! instruction) pairs for samples of those threads, double-buffered like
//! the native stacks.
//!
//! A followed process's children are followed from their fork on by the
//! kernel itself (the eBPF crate's `python_fork`): the child's first drain
//! finds its samples already with Python frames, and userspace takes it
//! over as it follows it ([`PythonMaps::watch`]).

use aya::{
    Btf, Ebpf,
    maps::{HashMap, MapData},
};
use profiler_common::{PY_MAX_FRAMES, PythonFrame, PythonOffsets, PythonStack, hashed, names};
use tracing::warn;

use super::{
    CollectError, attach_btf_tracepoint, logs::Hashed, pooled::PooledStacks, take_map,
    threads::FollowedThreads,
};

/// A CPython thread the sampler follows: its thread id as the host sees
/// it, and the address of its `PyThreadState`, where the kernel's walk of
/// its Python frames starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PythonThread {
    pub tid: u32,
    pub tstate: u64,
}

/// The Python frames of one sample, innermost first.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RawPythonStack {
    pub frames: Vec<PythonFrame>,
    /// The chain went on beyond what the kernel records.
    pub truncated: bool,
}

impl RawPythonStack {
    /// The frames the kernel recorded in `stack`.
    pub fn from_kernel(stack: &PythonStack) -> Self {
        let len = (stack.len as usize).min(PY_MAX_FRAMES);
        Self {
            frames: stack.frames[..len].to_vec(),
            truncated: stack.truncated != 0,
        }
    }
}

/// The Python maps of the loaded programs.
pub struct PythonMaps {
    processes: HashMap<MapData, u32, PythonOffsets>,
    /// Processes the kernel follows since their fork (see the module doc).
    forked: HashMap<MapData, u32, u8>,
    /// Each followed process's threads: host tid → `PyThreadState*`.
    threads: FollowedThreads,
    stacks: PooledStacks<PythonStack>,
}

impl PythonMaps {
    /// Takes the maps, and attaches the programs that follow forked
    /// children (by the kernel's `btf`; without them a child is followed
    /// from the first drain that sees it).
    pub fn load(ebpf: &mut Ebpf, btf: Result<&Btf, &String>) -> Result<Self, CollectError> {
        if let Err(reason) = attach_fork_programs(ebpf, btf) {
            warn!(
                "forked Python processes are followed from the next drain, not their fork: {reason}"
            );
        }
        Ok(Self {
            processes: take_map(ebpf, names::PY_PROCS)?,
            forked: take_map(ebpf, names::PY_FORKED)?,
            threads: FollowedThreads::take(ebpf, names::PY_THREADS)?,
            stacks: PooledStacks::take(ebpf, names::PY_STACKS)?,
        })
    }

    /// Follows process `pid`'s Python frames, with its version's offsets.
    /// A process the kernel followed since its fork is userspace's from now
    /// on: the kernel no longer forgets it at its exit.
    pub fn watch(&mut self, pid: u32, offsets: &PythonOffsets) -> Result<(), CollectError> {
        self.processes
            .insert(&pid, offsets, 0)
            .map_err(|source| CollectError::Map {
                name: names::PY_PROCS,
                source,
            })?;
        let _ = self.forked.remove(&pid);
        Ok(())
    }

    /// Replaces process `pid`'s threads by `threads`, writing only what
    /// changed. A full thread map leaves the rest unfollowed (logged).
    pub fn set_threads(&mut self, pid: u32, threads: &[PythonThread]) {
        self.threads.set(
            pid,
            threads.iter().map(|thread| (thread.tid, thread.tstate)),
        );
    }

    /// Whether the kernel follows process `pid`'s Python frames (userspace
    /// told it, or it forked from a followed process), and its thread
    /// `tid`'s entry (its process and `PyThreadState` address).
    pub fn followed(&self, pid: u32, tid: u32) -> (bool, Option<(u32, u64)>) {
        (self.processes.get(&pid, 0).is_ok(), self.threads.entry(tid))
    }

    pub fn held(&self, held: &mut crate::sys::held::Held) {
        let (processes, threads) = self.threads.counts();
        held.add("collect.python_processes", processes);
        held.add("collect.python_threads", threads);
    }

    /// Stops following an exited process; whether it was followed.
    pub fn forget(&mut self, pid: u32) -> bool {
        let followed = self.processes.remove(&pid).is_ok();
        self.threads.forget(pid);
        followed
    }

    /// The `idle` buffer's stacks, taken out of the kernel (its map is
    /// walked only if `hashed` says a sample filed one): the stack filed
    /// under a hash (`0`: none).
    pub fn take_stacks(
        &mut self,
        idle: usize,
        hashed: &mut Hashed,
    ) -> impl Fn(u64) -> Option<RawPythonStack> + use<> {
        let taken = self.stacks.take_buffer(
            idle,
            hashed.was_used(hashed::PYTHON + idle as u32),
            RawPythonStack::from_kernel,
        );
        move |hash| taken.get(hash)
    }
}

/// Loads and attaches the fork, exec and exit programs of forked children.
fn attach_fork_programs(ebpf: &mut Ebpf, btf: Result<&Btf, &String>) -> Result<(), String> {
    let btf = btf.map_err(|reason| reason.clone())?;
    for (name, event) in [
        (names::PROGRAM_PYTHON_FORK, "sched_process_fork"),
        (names::PROGRAM_PYTHON_EXEC, "sched_process_exec"),
        (names::PROGRAM_PYTHON_EXIT, "sched_process_exit"),
    ] {
        attach_btf_tracepoint(ebpf, btf, name, event)
            .map_err(|err| err.to_string())?
            .map_err(|err| format!("{event} BTF tracepoint not attached: {err}"))?;
    }
    Ok(())
}
