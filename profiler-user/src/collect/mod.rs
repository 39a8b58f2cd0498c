//! Stage 1 of the pipeline: **collect**.
//!
//! Loads the eBPF programs, attaches the on-CPU sampler to the software
//! cpu-clock event of every online CPU, and periodically drains the in-kernel
//! aggregates into [`Drain`]s of [`RawSample`]s: thread, comm and raw stack
//! addresses with a count. Nothing here knows about processes, symbols or
//! files; later stages take it from there.

pub mod batch;
pub mod bounded;
pub mod btf;
pub mod hold;
pub mod hotspot;
pub mod logs;
pub mod object;
pub mod off_cpu;
pub mod pooled;
pub mod python;
pub mod renames;
pub mod threads;

use std::{
    collections::HashMap as StdHashMap,
    path::Path,
    thread,
    time::{Duration, SystemTime},
};

use aya::{
    Btf, Ebpf, EbpfLoader, Endianness,
    maps::{Array, HashMap, MapData, PerCpuArray, StackTraceMap},
    programs::{
        PerfEvent,
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
    },
    util::online_cpus,
};
use hotspot::HotspotMaps;
pub use hotspot::RawHotspotStack;
use off_cpu::{OffCpuConfig, OffCpuGlobals, OffCpuRecorder, OffCpuState};
use profiler_common::{
    BUFFER_STOPPED, DEFAULT_HOTSPOT_STACK_ENTRIES, PythonOffsets, SampleKey, control, hashed,
    names, stack_error, stat,
};
use python::PythonMaps;
pub use python::{PythonThread, RawPythonStack};
use renames::{RenameFeed, ThreadRename};
use thiserror::Error;
use tracing::{debug, warn};

/// How long to wait after flipping buffers before draining the idle one.
///
/// The sampler runs in interrupt context and finishes in microseconds, so a
/// program that read the old buffer index is long done after this.
const FLIP_SETTLE: Duration = Duration::from_millis(5);

/// What the collector samples and how its maps are sized.
#[derive(Clone, Debug)]
pub struct CollectorConfig {
    /// Samples per second per CPU.
    pub frequency_hz: u64,
    /// Frames per stack; must not exceed `kernel.perf_event_max_stack`.
    pub stack_depth: u32,
    /// Entries of each stack map (rounded up to a power of two by the kernel).
    pub stack_map_entries: u32,
    /// Entries of each count map.
    pub count_map_entries: u32,
    /// Slots of each CPU's sample log per buffer (see
    /// [`logs::slots_per_cpu`]; `0`: every sample is hashed into the
    /// count map).
    pub sample_log_per_cpu: u32,
    /// Only these processes, when not empty.
    pub target_pids: Vec<u32>,
    /// Only the threads in this cgroup or below it: its id and level (see
    /// `crate::sys::cgroup`).
    pub target_cgroup: Option<(u64, u32)>,
    /// Record off-CPU time too (of the processes passed to
    /// [`Collector::watch_off_cpu`]).
    pub off_cpu: Option<OffCpuConfig>,
}

/// Errors of the collect stage.
#[derive(Debug, Error)]
pub enum CollectError {
    #[error(transparent)]
    Object(#[from] object::ObjectError),
    #[error("loading the eBPF programs failed: {0}")]
    Load(#[from] aya::EbpfError),
    #[error("eBPF program {0} is missing from the object")]
    MissingProgram(&'static str),
    #[error("eBPF map {0} is missing from the object")]
    MissingMap(&'static str),
    #[error("eBPF map {name}: {source}")]
    Map {
        name: &'static str,
        source: aya::maps::MapError,
    },
    #[error("eBPF map {name}: taking its entries: {source}")]
    Take {
        name: &'static str,
        source: std::io::Error,
    },
    #[error("eBPF program {name}: {source}")]
    Program {
        name: &'static str,
        source: aya::programs::ProgramError,
    },
    #[error("cannot list online CPUs ({0}): {1}")]
    OnlineCpus(&'static str, std::io::Error),
    #[error("off-CPU recording is not possible here: {0}")]
    OffCpuUnavailable(String),
    #[error(
        "perf_event_open on cpu {cpu} was refused ({source}); kernel.perf_event_paranoid is {paranoid}: \
         sparkprof needs CAP_PERFMON (or CAP_SYS_ADMIN); run it as root"
    )]
    PerfEventDenied {
        cpu: u32,
        paranoid: String,
        source: aya::programs::ProgramError,
    },
}

/// A stack as the kernel recorded it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RawStack {
    /// Instruction pointers, leaf first. `truncated` when the stack filled the
    /// map's depth, so outer frames may be missing.
    Frames { ips: Vec<u64>, truncated: bool },
    /// No stack of this kind (user-mode sample: no kernel stack; kernel
    /// thread: no user stack).
    Absent,
    /// The stack could not be stored (errno from `bpf_get_stackid`, e.g. a
    /// stack-map collision); the sample is still counted.
    Lost(i32),
}

/// What a count measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SampleKind {
    /// On-CPU samples.
    OnCpu,
    /// Microseconds off the CPU, waiting in this state.
    OffCpu(OffCpuState),
}

/// One in-kernel aggregate: samples (or off-CPU microseconds) of one thread
/// with one pair of stacks.
#[derive(Clone, Debug)]
pub struct RawSample {
    pub tgid: u32,
    pub tid: u32,
    pub name_epoch: u32,
    /// The thread's comm when sampled.
    pub comm: String,
    pub user: RawStack,
    pub kernel: RawStack,
    /// The Python frames of an on-CPU sample of a followed CPython thread.
    pub python: Option<RawPythonStack>,
    /// The user stack of an on-CPU sample of a JVM whose Java frames the
    /// kernel walks (native and Java frames; `user` is then absent).
    pub hotspot: Option<RawHotspotStack>,
    pub kind: SampleKind,
    /// Samples for [`SampleKind::OnCpu`], microseconds for
    /// [`SampleKind::OffCpu`].
    pub count: u64,
}

/// Everything counted between two drains.
#[derive(Debug)]
pub struct Drain {
    pub start: SystemTime,
    pub end: SystemTime,
    /// Where the span of the drain's off-CPU samples begins: `start`, or
    /// earlier when they were held over several drains ([`hold`]).
    pub off_cpu_start: SystemTime,
    /// Off-CPU counts taken from the kernel since then are held: they come
    /// with a later drain, carrying the name epochs their threads had.
    pub held_since: Option<SystemTime>,
    pub samples: Vec<RawSample>,
    /// Thread renames announced up to the end of this drain, in order: every
    /// name epoch that `samples` carry is among these or earlier ones
    /// (unless the ring buffer overflowed, see [`KernelStats::renames_lost`]).
    pub renames: Vec<ThreadRename>,
}

/// Cumulative kernel-side statistics, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct KernelStats {
    pub samples: u64,
    pub idle: u64,
    pub filtered: u64,
    pub dropped_count_map_full: u64,
    pub user_stacks_lost: u64,
    pub kernel_stacks_lost: u64,
    /// Thread renames seen in the kernel (JVM uprobe and tracepoint).
    pub renames: u64,
    /// Renames whose name was lost to a full ring buffer.
    pub renames_lost: u64,
    /// Switch-outs of watched threads (off-CPU).
    pub offcpu_switches: u64,
    /// Off-CPU periods shorter than the minimum, not counted.
    pub offcpu_short: u64,
    /// Off-CPU periods lost to a full count map.
    pub offcpu_dropped_count_map_full: u64,
    /// Switch-outs not recorded: more threads of interest than the
    /// off-CPU thread table holds; also threads of interest that could not
    /// be marked for off-CPU time (none of their switches is recorded).
    pub offcpu_threads_full: u64,
    /// Switch-outs whose user stack was walked; the others reused their
    /// site's last walk.
    pub offcpu_user_walks: u64,
    /// Counted off-CPU periods whose kernel stack was read; the others had
    /// none or reused one read for a like wait of their thread (same system
    /// call, first argument and state, within 1 s).
    pub offcpu_kernel_reads: u64,
    /// Off-CPU stacks lost to stack-map collisions (the time still counts).
    pub offcpu_stacks_lost: u64,
    /// On-CPU samples of JVMs whose stacks the kernel walked through Java frames.
    pub hotspot_walks: u64,
    /// Of those, stacks lost to a full map (counted with a frame-pointer walk).
    pub hotspot_stacks_lost: u64,
    /// Of those, walks that went on from the thread's last Java frame
    /// (its `JavaFrameAnchor`) past native frames.
    pub hotspot_anchored: u64,
}

/// Every this many drains, a stack map is listed whole, not only for the
/// stacks the drain's counts named.
const STACK_SWEEP_DRAINS: u64 = 16;

/// The loaded, attached sampler.
pub struct Collector {
    // Owns the programs and their links.
    ebpf: Ebpf,
    logger: Option<aya_log::EbpfLogger<&'static dyn log::Log>>,
    /// The on-CPU sampler's period, in nanoseconds of cpu-clock.
    sample_period_ns: u64,
    active: u32,
    buffer_started: SystemTime,
    stack_depth: usize,
    counts: [HashMap<MapData, SampleKey, u64>; 2],
    count_buffers: batch::BatchBuffers,
    /// Each CPU's samples, before any are hashed into `counts`.
    sample_logs: logs::SampleLogs,
    /// Which hash maps (counts, stacks) the programs put something in.
    hashed: logs::Hashed,
    /// Samples drained from the logs (the rest came from `counts`).
    logged_samples: u64,
    stacks: [StackTraceMap<MapData>; 2],
    /// Drains taken so far (to list the stack maps now and then).
    drains: u64,
    active_buffer: Array<MapData, u32>,
    /// What `ACTIVE_BUFFER[control::PROCESS_GENERATION]` holds.
    process_generation: u32,
    /// Every statistic, one value per CPU (see `profiler_common::stat`).
    stats: PerCpuArray<MapData, [u64; stat::COUNT as usize]>,
    renames: RenameFeed,
    off_cpu: Option<OffCpuRecorder>,
    /// The next drain hands on the off-CPU counts held
    /// ([`Self::release_off_cpu`]).
    release_off_cpu: bool,
    python: PythonMaps,
    hotspot: HotspotMaps,
}

impl Collector {
    /// Loads the programs, sizes the maps and starts sampling on every online CPU.
    pub fn start(config: &CollectorConfig) -> Result<Self, CollectError> {
        let mut collector = Self::load(config)?;
        collector.start_sampling()?;
        Ok(collector)
    }

    /// Loads the programs and sizes the maps; attaches everything but the
    /// on-CPU sampler ([`Self::start_sampling`]). In between, the runtimes
    /// are told about the processes already running (their kernel offsets,
    /// their rename watches), so that no sample of theirs predates what
    /// names it.
    pub fn load(config: &CollectorConfig) -> Result<Self, CollectError> {
        let object = object::object_with_stack_depth(config.stack_depth)?;
        let filter: u8 = u8::from(!config.target_pids.is_empty());
        // Every tracepoint program is BTF-typed: attached by the kernel's
        // BTF, with no tracefs mounted or needed.
        // The 5 MB file is read once: aya loads the programs by it, and
        // the BTF reader finds the struct offsets they need.
        let vmlinux = btf::read_vmlinux();
        let btf = match &vmlinux {
            Ok(bytes) => Btf::parse(bytes, Endianness::default())
                .map_err(|err| format!("the kernel's BTF ({}) is unreadable: {err}", btf::VMLINUX)),
            Err(err) => Err(err.to_string()),
        };
        let types = vmlinux.and_then(|bytes| btf::KernelTypes::parse(&bytes));
        let task_ids = match &types {
            Ok(types) => types.task_ids().map_err(|err| err.to_string()),
            Err(err) => Err(err.to_string()),
        };
        // Without CONFIG_FAIR_GROUP_SCHED (no `se.cfs_rq`) the switches
        // are timed by bpf_ktime_get_ns.
        let run_queue_clock = types
            .as_ref()
            .ok()
            .and_then(|types| types.run_queue_clock().ok());
        let sched_clock_known = u8::from(run_queue_clock.is_some());
        let [task_cfs_rq, cfs_rq_rq, rq_clock] = run_queue_clock.unwrap_or_default();
        let [pid_offset, tgid_offset] = match (&task_ids, &config.off_cpu) {
            (Ok(offsets), _) => *offsets,
            // `sched_switch` reads both ids of `prev` and `next` there.
            (Err(err), Some(_)) => {
                return Err(CollectError::OffCpuUnavailable(format!(
                    "{err}: the ids of a task_struct are not known"
                )));
            }
            (Err(err), None) => {
                warn!("{err}: renames of a thread by another one will be lost");
                [0, 0]
            }
        };
        let off_cpu_globals = match &config.off_cpu {
            Some(off_cpu) => Some(
                OffCpuGlobals::read(off_cpu.min_block)
                    .map_err(CollectError::OffCpuUnavailable)?
                    .with_task_storage(types.as_ref().ok().and_then(|t| t.task_storage().ok())),
            ),
            None => None,
        };
        let possible_cpus = aya::util::nr_cpus().map_or(1, |n| n.get());
        let mut loader = EbpfLoader::new();
        // `OFFCPU_MARKED` is a task storage map, which aya creates but has
        // no type for; only the kernel side uses it.
        loader.allow_unsupported_maps();
        loader.override_global(names::FILTER_BY_TGID, &filter, true);
        let (cgroup_id, cgroup_level) = config.target_cgroup.unwrap_or_default();
        loader.override_global(names::FILTER_CGROUP_ID, &cgroup_id, true);
        loader.override_global(names::FILTER_CGROUP_LEVEL, &cgroup_level, true);
        match (&config.off_cpu, &off_cpu_globals) {
            (Some(off_cpu), Some(globals)) => {
                globals.configure(&mut loader);
                loader.map_max_entries(names::OFFCPU_USER_STACKS, off_cpu.stack_map_entries);
                for name in names::OFFCPU_COUNTS {
                    loader.map_max_entries(name, off_cpu.count_map_entries);
                }
                loader.override_global(names::OFFCPU_LOG_PER_CPU, &off_cpu.log_per_cpu, true);
                for name in names::OFFCPU_LOGS {
                    loader
                        .map_max_entries(name, logs::log_slots(off_cpu.log_per_cpu, possible_cpus));
                }
            }
            _ => {
                // Not recording off-CPU time: keep its maps small.
                loader.map_max_entries(names::OFFCPU_USER_STACKS, 1);
                loader.map_max_entries(names::OFFCPU_WATCHED, 1);
                loader.map_max_entries(names::OFFCPU_THREADS, 1);
                loader.map_max_entries(names::OFFCPU_START, 1);
                loader.map_max_entries(names::OFFCPU_KERNEL_STACKS, 1);
                loader.map_max_entries(names::OFFCPU_PY_STACKS, 1);
                // One page, the smallest ring.
                for name in [
                    names::OFFCPU_NEW_USER_STACKS,
                    names::OFFCPU_NEW_KERNEL_STACKS,
                    names::OFFCPU_NEW_PY_STACKS,
                ] {
                    loader.map_max_entries(name, 4096);
                }
                for name in names::OFFCPU_COUNTS.into_iter().chain(names::OFFCPU_LOGS) {
                    loader.map_max_entries(name, 1);
                }
            }
        }
        loader.override_global(names::TASK_STRUCT_PID_OFFSET, &pid_offset, true);
        loader.override_global(names::TASK_STRUCT_TGID_OFFSET, &tgid_offset, true);
        loader.override_global(names::TASK_CFS_RQ_OFFSET, &task_cfs_rq, true);
        loader.override_global(names::CFS_RQ_RQ_OFFSET, &cfs_rq_rq, true);
        loader.override_global(names::RQ_CLOCK_OFFSET, &rq_clock, true);
        loader.override_global(names::SCHED_CLOCK_KNOWN, &sched_clock_known, true);
        for name in names::COUNTS {
            loader.map_max_entries(name, config.count_map_entries);
        }
        loader.override_global(names::LOG_PER_CPU, &config.sample_log_per_cpu, true);
        for name in names::SAMPLE_LOGS
            .into_iter()
            .chain(names::HOTSPOT_SHORT_LOGS)
        {
            loader.map_max_entries(
                name,
                logs::log_slots(config.sample_log_per_cpu, possible_cpus),
            );
        }
        for name in names::STACKS {
            loader.map_max_entries(name, config.stack_map_entries);
        }
        // Allocated whole at load (a drain frees hundreds of entries, and
        // freeing allocated-as-used ones cost more than reading them): room
        // for a quarter of the stack maps' samples.
        for name in names::HOTSPOT_SHORT_STACKS {
            loader.map_max_entries(
                name,
                (config.stack_map_entries / 4).clamp(1_024, DEFAULT_HOTSPOT_STACK_ENTRIES),
            );
        }
        let mut ebpf = loader.load(&object)?;

        let logger = match aya_log::EbpfLogger::init(&mut ebpf) {
            Ok(logger) => Some(logger),
            Err(err) => {
                warn!("eBPF log channel unavailable: {err}");
                None
            }
        };

        let mut targets: HashMap<MapData, u32, u8> = take_map(&mut ebpf, names::TARGET_TGIDS)?;
        for pid in &config.target_pids {
            targets
                .insert(pid, &1, 0)
                .map_err(|source| CollectError::Map {
                    name: names::TARGET_TGIDS,
                    source,
                })?;
        }
        let counts = [
            take_map(&mut ebpf, names::COUNTS[0])?,
            take_map(&mut ebpf, names::COUNTS[1])?,
        ];
        let stacks = [
            take_map(&mut ebpf, names::STACKS[0])?,
            take_map(&mut ebpf, names::STACKS[1])?,
        ];
        let mut active_buffer: Array<MapData, u32> = take_map(&mut ebpf, names::ACTIVE_BUFFER)?;
        set_control(&mut active_buffer, control::BUFFER, 0)?;
        let stats = take_map(&mut ebpf, names::STATS)?;
        let sample_logs =
            logs::SampleLogs::sampler(&mut ebpf, config.sample_log_per_cpu, possible_cpus)?;
        let hashed = logs::Hashed::take(&mut ebpf)?;
        let renames = RenameFeed::load(&mut ebpf, btf.as_ref())?;
        if renames.tracepoint_attached() {
            set_control(&mut active_buffer, control::COMM_KEPT, 1)?;
        }
        let python = PythonMaps::load(&mut ebpf, btf.as_ref())?;
        let hotspot = HotspotMaps::load(&mut ebpf, config.sample_log_per_cpu, possible_cpus)?;
        let off_cpu = match (&off_cpu_globals, &config.off_cpu) {
            (Some(globals), Some(off_cpu)) => {
                let logs =
                    logs::OffCpuLogs::off_cpu(&mut ebpf, off_cpu.log_per_cpu, possible_cpus)?;
                Some(OffCpuRecorder::load(
                    &mut ebpf,
                    globals,
                    config.stack_depth,
                    btf.as_ref(),
                    logs,
                    hold::OffCpuHold::new(hold::HOLD, off_cpu.count_map_entries as usize),
                )?)
            }
            _ => None,
        };

        let program_error = |source| CollectError::Program {
            name: names::PROGRAM_ON_CPU,
            source,
        };
        let program: &mut PerfEvent = ebpf
            .program_mut(names::PROGRAM_ON_CPU)
            .ok_or(CollectError::MissingProgram(names::PROGRAM_ON_CPU))?
            .try_into()
            .map_err(program_error)?;
        program.load().map_err(program_error)?;
        // cpu-clock counts nanoseconds: a fixed period gives an exact rate on a
        // busy CPU from the first sample (frequency mode converges slowly).
        let sample_period_ns = (1_000_000_000 / config.frequency_hz.max(1)).max(1);

        Ok(Self {
            ebpf,
            logger,
            sample_period_ns,
            active: 0,
            buffer_started: SystemTime::now(),
            stack_depth: config.stack_depth as usize,
            counts,
            count_buffers: batch::BatchBuffers::default(),
            sample_logs,
            hashed,
            logged_samples: 0,
            stacks,
            drains: 0,
            active_buffer,
            process_generation: 0,
            stats,
            renames,
            off_cpu,
            release_off_cpu: false,
            python,
            hotspot,
        })
    }

    /// Attaches the on-CPU sampler to the cpu-clock event of every online CPU.
    pub fn start_sampling(&mut self) -> Result<(), CollectError> {
        let program_error = |source| CollectError::Program {
            name: names::PROGRAM_ON_CPU,
            source,
        };
        let program: &mut PerfEvent = self
            .ebpf
            .program_mut(names::PROGRAM_ON_CPU)
            .ok_or(CollectError::MissingProgram(names::PROGRAM_ON_CPU))?
            .try_into()
            .map_err(program_error)?;
        let cpus = online_cpus().map_err(|(what, err)| CollectError::OnlineCpus(what, err))?;
        for cpu in cpus {
            // The program keeps its links: they are detached when the
            // collector is dropped (see `finish`).
            program
                .attach(
                    PerfEventConfig::Software(SoftwareEvent::CpuClock),
                    PerfEventScope::AllProcessesOneCpu { cpu },
                    SamplePolicy::Period(self.sample_period_ns),
                    false,
                )
                .map_err(|source| match &source {
                    aya::programs::ProgramError::SyscallError(e)
                        if matches!(
                            e.io_error.raw_os_error(),
                            Some(libc::EACCES | libc::EPERM)
                        ) =>
                    {
                        CollectError::PerfEventDenied {
                            cpu,
                            paranoid: crate::sys::sysctl::read("kernel/perf_event_paranoid")
                                .unwrap_or_else(|_| "unknown".into()),
                            source,
                        }
                    }
                    _ => program_error(source),
                })?;
        }
        self.buffer_started = SystemTime::now();
        debug!(
            period_ns = self.sample_period_ns,
            depth = self.stack_depth,
            "on-CPU sampler attached"
        );
        Ok(())
    }

    /// The current name epoch of each thread of process `pid`, as the
    /// sampler would key a sample taken now.
    pub fn current_epochs(&self, pid: u32) -> StdHashMap<u32, u32> {
        self.renames.current_epochs(pid)
    }

    /// Threads holding an off-CPU slot now (when recording off-CPU time).
    pub fn off_cpu_thread_slots(&self) -> Option<usize> {
        self.off_cpu.as_ref().map(OffCpuRecorder::thread_slots)
    }

    /// Records a process's off-CPU time from now on (when recording it):
    /// its threads created from now on at once, those it has already from
    /// the next [`Self::mark_watched_threads`].
    pub fn watch_off_cpu(&mut self, pid: u32) -> Result<(), CollectError> {
        match self.off_cpu.as_mut() {
            Some(off_cpu) => off_cpu.watch(pid),
            None => Ok(()),
        }
    }

    /// Marks the threads that processes watched since the last call
    /// already had (one pass over the host's threads for all of them).
    pub fn mark_watched_threads(&mut self) -> Result<(), CollectError> {
        match self.off_cpu.as_mut() {
            Some(off_cpu) => off_cpu.mark_watched_threads(&mut self.ebpf),
            None => Ok(()),
        }
    }

    /// Announces the renames of every thread that calls the function at
    /// `offset` in the file at `path` (one that names the calling thread,
    /// its first argument the name), in every process that maps the file.
    pub fn attach_name_setter(&mut self, path: &Path, offset: u64) -> Result<(), CollectError> {
        self.renames
            .attach_name_setter(&mut self.ebpf, path, offset)
    }

    /// Announces the renames of process `pid`'s threads through the
    /// `task_rename` tracepoint (comms only); says why not when it cannot.
    pub fn watch_renames(&mut self, pid: u32) -> Result<(), String> {
        self.renames.watch(pid)
    }

    /// Follows a CPython process's frames (see [`python`]).
    pub fn watch_python(&mut self, pid: u32, offsets: &PythonOffsets) -> Result<(), CollectError> {
        self.python.watch(pid, offsets)?;
        if let Some(off_cpu) = self.off_cpu.as_mut() {
            off_cpu.follow_python(pid);
        }
        self.processes_changed()
    }

    /// What the kernel's Python maps hold for process `pid` and thread
    /// `tid` (see [`PythonMaps::followed`]).
    pub fn python_followed(&self, pid: u32, tid: u32) -> (bool, Option<(u32, u64)>) {
        self.python.followed(pid, tid)
    }

    /// Replaces the threads of a followed CPython process: (tid,
    /// `PyThreadState` address).
    pub fn set_python_threads(&mut self, pid: u32, threads: &[PythonThread]) {
        self.python.set_threads(pid, threads);
    }

    /// Tells the JVM walker which `JavaThread` each of JVM `pid`'s threads
    /// is, as (host tid, `JavaThread*`).
    pub fn set_hotspot_threads(&mut self, pid: u32, threads: &[(u32, u64)]) {
        self.hotspot.set_threads(pid, threads);
    }

    /// Walks a JVM's user stacks through its Java frames (see [`hotspot`]).
    pub fn watch_hotspot(
        &mut self,
        pid: u32,
        info: &profiler_common::HotspotProcInfo,
    ) -> Result<(), CollectError> {
        self.hotspot.watch(pid, info)?;
        self.processes_changed()
    }

    /// Forgets a process that exited.
    pub fn forget(&mut self, pid: u32) {
        self.renames.forget(pid);
        let followed = self.python.forget(pid) | self.hotspot.forget(pid);
        if let Some(off_cpu) = self.off_cpu.as_mut() {
            off_cpu.forget(pid);
        }
        if followed && let Err(err) = self.processes_changed() {
            debug!("{err}");
        }
    }

    /// Tells the sampler that the processes it walks or follows changed:
    /// each CPU's kept facts of its last thread are stale (see the eBPF
    /// crate's `on_cpu`).
    fn processes_changed(&mut self) -> Result<(), CollectError> {
        self.process_generation = self.process_generation.wrapping_add(1);
        set_control(
            &mut self.active_buffer,
            control::PROCESS_GENERATION,
            self.process_generation,
        )
    }

    /// The processes whose off-CPU time is recorded (none without
    /// `--off-cpu`).
    pub fn off_cpu_watched(&self) -> impl Iterator<Item = u32> + '_ {
        self.off_cpu.iter().flat_map(OffCpuRecorder::watched)
    }

    /// Whether off-CPU counts are held for a later drain.
    pub fn off_cpu_held(&self) -> bool {
        self.off_cpu
            .as_ref()
            .is_some_and(|off_cpu| off_cpu.held_since().is_some())
    }

    /// Has the next drain hand on every off-CPU count held (see [`hold`]):
    /// before a drain whose processes may be reported exited, or that must
    /// hold everything counted so far.
    pub fn release_off_cpu(&mut self) {
        self.release_off_cpu = true;
    }

    /// Switches the sampler to the other buffer and returns everything that
    /// was counted in the one it used, then clears that one for reuse
    /// (off-CPU counts may be held for later drains: [`hold`]).
    pub fn drain(&mut self) -> Result<Drain, CollectError> {
        if let Some(logger) = self.logger.as_mut() {
            logger.flush();
        }
        let idle = self.active as usize;
        let next = 1 - self.active;
        self.set_active_buffer(next)?;
        self.active = next;
        let release = std::mem::take(&mut self.release_off_cpu);
        self.take(idle, release)
    }

    /// Points the programs at another buffer (or stops them), and waits
    /// until none still writes to the old one.
    fn set_active_buffer(&mut self, value: u32) -> Result<(), CollectError> {
        set_control(&mut self.active_buffer, control::BUFFER, value)?;
        thread::sleep(FLIP_SETTLE);
        Ok(())
    }

    /// Reads and clears a buffer no program writes to any more; `release`:
    /// with every off-CPU count held.
    fn take(&mut self, idle: usize, release: bool) -> Result<Drain, CollectError> {
        let start = std::mem::replace(&mut self.buffer_started, SystemTime::now());
        let end = SystemTime::now();
        // After the flip: every epoch in the idle buffer is announced by now.
        let renames = self.renames.read();

        let counts_name = names::COUNTS[idle];
        let stacks_name = names::STACKS[idle];
        let map_error = |name| move |source| CollectError::Map { name, source };

        // Taken out of the map (deleted) at once; the stacks they name stay
        // until read below.
        let mut entries: crate::FastMap<SampleKey, u64> = Default::default();
        self.logged_samples += self.sample_logs.take_buffer(idle, |&key| {
            *entries.entry(key).or_insert(0) += 1;
        })?;
        if self.hashed.was_used(hashed::ON_CPU + idle as u32) {
            batch::take_each(
                &mut self.counts[idle],
                &mut self.count_buffers,
                |key, count| {
                    *entries.entry(key).or_insert(0) += count;
                },
            )
            .map_err(|source| CollectError::Take {
                name: counts_name,
                source,
            })?;
        }
        let python = self.python.take_stacks(idle, &mut self.hashed);
        let hotspot = self.hotspot.take_stacks(idle, &mut self.hashed);
        let mut stack_cache: StdHashMap<i32, RawStack> = StdHashMap::new();
        let mut samples = Vec::with_capacity(entries.len());
        for (key, count) in &entries {
            let user = self.stack(idle, key.user_stack_id, &mut stack_cache);
            let kernel = self.stack(idle, key.kernel_stack_id, &mut stack_cache);
            samples.push(RawSample {
                tgid: key.tgid,
                tid: key.tid,
                name_epoch: key.name_epoch,
                comm: comm_to_string(&key.comm),
                user,
                kernel,
                python: python(key.python_stack),
                hotspot: hotspot(key.hotspot_stack),
                kind: SampleKind::OnCpu,
                count: *count,
            });
        }
        let mut off_cpu_start = start;
        let mut held_since = None;
        if let Some(off_cpu) = self.off_cpu.as_mut() {
            let hashed = self.hashed.was_used(hashed::OFF_CPU + idle as u32);
            if let Some((since, off_cpu_samples)) =
                off_cpu.drain(idle, hashed, (start, end), release)
            {
                off_cpu_start = since;
                samples.extend(off_cpu_samples);
            }
            held_since = off_cpu.held_since();
        }

        // The stacks read above are deleted by id. Listing the map costs a
        // call per entry, so it is listed only every STACK_SWEEP_DRAINS
        // drains, for stacks no count named (its map was full).
        self.drains += 1;
        let stack_ids: Vec<u32> = if self.drains.is_multiple_of(STACK_SWEEP_DRAINS) {
            self.stacks[idle]
                .stack_ids()
                .filter_map(Result::ok)
                .collect()
        } else {
            stack_cache
                .keys()
                .filter_map(|&id| u32::try_from(id).ok())
                .collect()
        };
        for id in stack_ids {
            match self.stacks[idle].remove(&id) {
                Ok(()) | Err(aya::maps::MapError::KeyNotFound) => {}
                Err(source) => return Err(map_error(stacks_name)(source)),
            }
        }
        Ok(Drain {
            start,
            end,
            off_cpu_start,
            held_since,
            samples,
            renames,
        })
    }

    /// Stops counting, then drains the buffer that was being written:
    /// after this, every sample the kernel counted has been handed over.
    ///
    /// The programs stay attached (they return at once) until the
    /// collector is dropped: each detach waits for an RCU grace period,
    /// which on a host with thousands of threads can take seconds, so a
    /// recording drops its collector only after its files are written.
    pub fn finish(&mut self) -> Result<Drain, CollectError> {
        self.set_active_buffer(BUFFER_STOPPED)?;
        self.take(self.active as usize, true)
    }

    fn stack(&self, buffer: usize, id: i32, cache: &mut StdHashMap<i32, RawStack>) -> RawStack {
        cache
            .entry(id)
            .or_insert_with(|| stack_from_map(&self.stacks[buffer], id, self.stack_depth))
            .clone()
    }

    /// Kernel-side statistics since the start, summed over CPUs.
    /// What the collect stage keeps between drains, counted.
    pub fn held(&self, held: &mut crate::sys::held::Held) {
        self.renames.held(held);
        self.python.held(held);
        self.hotspot.held(held);
        if let Some(off_cpu) = &self.off_cpu {
            off_cpu.held(held);
        }
    }

    /// Off-CPU periods drained from the per-CPU logs, and entries from the
    /// off-CPU count maps, since the start (see [`OffCpuRecorder::sources`]).
    pub fn off_cpu_sources(&self) -> Option<(u64, u64)> {
        self.off_cpu.as_ref().map(OffCpuRecorder::sources)
    }

    /// On-CPU samples drained from the per-CPU sample logs since the
    /// start; the others were counted in the count maps (a log was full).
    pub fn logged_samples(&self) -> u64 {
        self.logged_samples
    }

    pub fn stats(&self) -> KernelStats {
        // One system call for all of them.
        let per_cpu = self.stats.get(&0, 0);
        let sum = |index: u32| -> u64 {
            per_cpu.as_ref().map_or(0, |values| {
                values.iter().map(|stats| stats[index as usize]).sum()
            })
        };
        KernelStats {
            samples: sum(stat::SAMPLES),
            idle: sum(stat::IDLE),
            filtered: sum(stat::FILTERED),
            dropped_count_map_full: sum(stat::COUNT_MAP_FULL),
            user_stacks_lost: sum(stat::USER_STACK_LOST),
            kernel_stacks_lost: sum(stat::KERNEL_STACK_LOST),
            renames: sum(stat::RENAMES),
            renames_lost: sum(stat::RENAMES_LOST),
            offcpu_switches: sum(stat::OFFCPU_SWITCHES),
            offcpu_short: sum(stat::OFFCPU_SHORT),
            offcpu_dropped_count_map_full: sum(stat::OFFCPU_COUNT_MAP_FULL),
            offcpu_threads_full: sum(stat::OFFCPU_THREADS_FULL),
            offcpu_user_walks: sum(stat::OFFCPU_USER_WALKS),
            offcpu_kernel_reads: sum(stat::OFFCPU_KERNEL_READS),
            offcpu_stacks_lost: sum(stat::OFFCPU_STACKS_LOST),
            hotspot_walks: sum(stat::HOTSPOT_WALKS),
            hotspot_stacks_lost: sum(stat::HOTSPOT_STACKS_LOST),
            hotspot_anchored: sum(stat::HOTSPOT_ANCHORED),
        }
    }
}

/// Writes one word of `ACTIVE_BUFFER` (the `control` words every program
/// reads).
fn set_control(
    active_buffer: &mut Array<MapData, u32>,
    index: u32,
    value: u32,
) -> Result<(), CollectError> {
    active_buffer
        .set(index, &value, 0)
        .map_err(|source| CollectError::Map {
            name: names::ACTIVE_BUFFER,
            source,
        })
}

pub(crate) fn take_map<T>(ebpf: &mut Ebpf, name: &'static str) -> Result<T, CollectError>
where
    T: TryFrom<aya::maps::Map, Error = aya::maps::MapError>,
{
    let map = ebpf.take_map(name).ok_or(CollectError::MissingMap(name))?;
    T::try_from(map).map_err(|source| CollectError::Map { name, source })
}

/// The program `name` of `ebpf`, as its type.
pub(crate) fn program<'a, P>(
    ebpf: &'a mut Ebpf,
    name: &'static str,
) -> Result<&'a mut P, CollectError>
where
    &'a mut P: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
{
    ebpf.program_mut(name)
        .ok_or(CollectError::MissingProgram(name))?
        .try_into()
        .map_err(|source| CollectError::Program { name, source })
}

/// Loads the BTF tracepoint program `name` of `ebpf` and attaches it to
/// `event`, by the kernel's `btf` (no tracefs involved). The outer error:
/// the object has no such program (a build fault); the inner: this kernel
/// would not load or attach it.
pub(crate) fn attach_btf_tracepoint(
    ebpf: &mut Ebpf,
    btf: &Btf,
    name: &'static str,
    event: &str,
) -> Result<Result<(), aya::programs::ProgramError>, CollectError> {
    let tracepoint: &mut aya::programs::BtfTracePoint = program(ebpf, name)?;
    Ok(tracepoint
        .load(event, btf)
        .and_then(|()| tracepoint.attach().map(drop)))
}

/// A stack from a stack map by the id (or negative errno) a program stored.
pub(crate) fn stack_from_map(map: &StackTraceMap<MapData>, id: i32, depth: usize) -> RawStack {
    if id < 0 {
        return if id == stack_error::EFAULT {
            RawStack::Absent
        } else {
            RawStack::Lost(id)
        };
    }
    match map.get(&(id as u32), 0) {
        Ok(trace) => {
            let ips: Vec<u64> = trace.frames().iter().map(|frame| frame.ip).collect();
            if ips.is_empty() {
                RawStack::Absent
            } else {
                let truncated = ips.len() >= depth;
                RawStack::Frames { ips, truncated }
            }
        }
        Err(err) => {
            debug!(id, "stack lookup failed: {err}");
            RawStack::Lost(-libc::ENOENT)
        }
    }
}

/// A kernel comm (NUL-padded, not necessarily UTF-8) as a string.
pub fn comm_to_string(comm: &[u8]) -> String {
    let end = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..end]).into_owned()
}
