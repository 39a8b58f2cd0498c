//! Stage 2 of the pipeline: **enrich**.
//!
//! Turns the collector's thread ids into *who*: the process (name, start time
//! to tell a reused PID from the original, kernel thread or not, its Spark
//! role, application and executor: [`spark`]) and the thread (its full name
//! at the sample's name epoch: [`name_history`], fed by the kernel's rename events
//! and by the thread dumps runtimes take; and the Spark task it ran).
//! Process facts are read from /proc once per process and cached; a process
//! whose PID disappears, or comes back with another start time, is reported
//! as exited so that later stages can drop what they cached for it.
//!
//! Enrichment runs in two steps per drain: [`Enricher::discover`] finds the
//! processes a drain is about (and reports those seen for the first time, so
//! the caller can have the runtimes and the collector watch them), then
//! [`Enricher::enrich`] names every sample.

pub mod name_history;
pub mod spark;

use std::{
    collections::{HashMap, HashSet},
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use name_history::{ThreadDump, ThreadNames};
use spark::{DriverLink, ProcessFacts, Role, SparkProcess, TaskThread};
use tracing::debug;

use crate::collect::{Drain, RawSample, RawStack};
use crate::sys::{
    exits::Exits,
    proc::{self, MapPath, Mapping},
};

/// What the pipeline knows about one process.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProcessInfo {
    pub pid: u32,
    /// Start time in clock ticks since boot (field 22 of /proc/PID/stat);
    /// with the PID it identifies the process across PID reuse. 0 when the
    /// process was gone before it could be read.
    pub start_ticks: u64,
    /// The process's comm.
    pub name: String,
    /// A kernel thread (no user address space).
    pub kernel_thread: bool,
    /// The language runtime in the process, if one we know.
    pub runtime: Runtime,
    /// Its Spark role, application and executor.
    pub spark: SparkProcess,
}

impl ProcessInfo {
    /// When it started, from its start ticks; `None` when they are unknown
    /// (it was gone before it could be read).
    pub fn started(&self) -> Option<std::time::SystemTime> {
        proc::started_at(self.start_ticks)
    }

    /// A process in a language runtime sparkprof follows (a JVM, a Python
    /// interpreter): the processes whose off-CPU time is recorded by default.
    pub fn in_a_runtime(&self) -> bool {
        self.runtime.is_jvm() || self.is_python()
    }

    /// A Python interpreter (plain, or a PySpark daemon or worker).
    pub fn is_python(&self) -> bool {
        matches!(
            self.spark.role,
            Role::Python | Role::PysparkDaemon | Role::PysparkWorker
        )
    }

    /// Whether its threads may run Spark tasks (an executor, or a driver in
    /// local mode).
    pub fn runs_tasks(&self) -> bool {
        self.spark.executor_id.is_some() && self.spark.role.runs_tasks()
    }
}

/// Language runtimes whose code needs more than ELF symbols to be named.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Runtime {
    /// Plain native code.
    Native,
    /// A HotSpot JVM: `libjvm.so` is mapped (at this path, as the process sees it).
    Jvm { libjvm: String },
}

impl Runtime {
    /// Recognizes the runtime from a process's mappings. A libjvm.so
    /// replaced on disk since it was mapped is not one sparkprof can
    /// attach to or read: such a process counts as native.
    pub fn from_maps(maps: &[Mapping]) -> Self {
        maps.iter()
            .find_map(|m| match &m.path {
                MapPath::File {
                    path,
                    deleted: false,
                } if path.file_name().is_some_and(|name| name == "libjvm.so") => Some(path),
                _ => None,
            })
            .map_or(Self::Native, |libjvm| Self::Jvm {
                libjvm: libjvm.to_string_lossy().into_owned(),
            })
    }

    pub fn is_jvm(&self) -> bool {
        matches!(self, Self::Jvm { .. })
    }

    /// The libjvm.so path of a JVM.
    pub fn libjvm(&self) -> Option<&str> {
        match self {
            Self::Jvm { libjvm } => Some(libjvm),
            Self::Native => None,
        }
    }
}

/// A sample with its process and thread identified.
#[derive(Debug, Clone)]
pub struct EnrichedSample {
    pub raw: RawSample,
    pub process: Arc<ProcessInfo>,
    /// The thread's full name when the sample was taken (its comm when no
    /// better name is known).
    pub thread_name: Arc<str>,
    /// The Spark task the thread ran then (task threads of executors and
    /// local-mode drivers only).
    pub task: Option<TaskThread>,
}

/// One drain, enriched.
#[derive(Debug)]
pub struct EnrichedDrain {
    pub start: std::time::SystemTime,
    pub end: std::time::SystemTime,
    /// Where the span of its off-CPU samples begins (see
    /// [`Drain::off_cpu_start`]).
    pub off_cpu_start: std::time::SystemTime,
    pub samples: Vec<EnrichedSample>,
    /// Processes that exited (or whose PID was reused) since the last drain.
    pub exited: Vec<Arc<ProcessInfo>>,
}

/// Processes seen for the first time, with the memory maps read to
/// identify them. The stages after take these maps rather than read the
/// file again: a runtime's first look at a process (libjvm's symbols,
/// CPython's module) and the native symbolizer's first names. Read two or
/// three times per new process, this long file was a twentieth of
/// sparkprof's CPU on a Spark host. Held for one drain only: a process's
/// maps change, and later reads are fresh.
#[derive(Debug, Default)]
pub struct Discovered {
    pub processes: Vec<Arc<ProcessInfo>>,
    maps: HashMap<u32, Vec<Mapping>>,
}

impl Discovered {
    /// The maps of process `pid` as read when it was identified in this
    /// drain; `None` when it was not (known before, a kernel thread, or
    /// its maps could not be read).
    pub fn maps(&self, pid: u32) -> Option<&[Mapping]> {
        self.maps.get(&pid).map(Vec::as_slice)
    }
}

/// The enrich stage: process cache, thread names, Spark identities.
#[derive(Default)]
pub struct Enricher {
    processes: HashMap<u32, Arc<ProcessInfo>>,
    names: ThreadNames,
    /// Executors' links to their drivers, for drivers' application IDs.
    driver_links: HashMap<u32, DriverLink>,
    /// An executor appeared since drivers were last matched.
    links_changed: bool,
    /// The current drain's processes that are reported exited with it
    /// and name its samples: those first seen in it and already gone, and
    /// those that exec'd another program since they were identified.
    gone: HashMap<u32, Arc<ProcessInfo>>,
    /// The kernel's word on which of `processes` exited.
    exits: Exits,
    /// Its word asked before the drain was taken ([`Self::poll_exits`]),
    /// for the drain's [`Self::enrich`] (`Some(None)`: the poll failed).
    polled_exits: Option<Option<HashSet<u32>>>,
    /// The executable of each plain native process of `processes`, as
    /// identified: one that execs another program (a launcher script's
    /// `exec java ...`, as `spark-submit` and YARN's `launch_container.sh`
    /// end) keeps its PID and start time, and is known by its new `exe`.
    native_exes: HashMap<u32, NativeExe>,
}

/// A plain native process's executable, as identified, and when.
struct NativeExe {
    path: PathBuf,
    identified: Instant,
}

/// How long after a `java` launcher was identified as a plain native
/// process its maps are looked at for the JVM it loads (see
/// [`NativeExe::may_load_a_jvm`]).
const LAUNCHER_LOADS_JVM_WITHIN: Duration = Duration::from_secs(10);

impl NativeExe {
    /// Whether it may be a Java launcher that has not mapped its JVM yet:
    /// `java` execs nothing, but `dlopen`s libjvm.so a few milliseconds
    /// into its life, and a process sampled before that was identified as
    /// native. A Spark Worker's executor is one: posix_spawn runs
    /// `jspawnhelper`, which execs `java`; a bare-host CI run saw an
    /// executor identified so, never walked from HotSpot's structures, and
    /// half its stage samples stopped short of `Thread.run`.
    fn may_load_a_jvm(&self) -> bool {
        self.path.file_name().is_some_and(|name| name == "java")
            && self.identified.elapsed() < LAUNCHER_LOADS_JVM_WITHIN
    }
}

impl Enricher {
    /// What the enrich stage keeps between drains, counted.
    pub fn held(&self, held: &mut crate::sys::held::Held) {
        held.add("enrich.processes", self.processes.len());
        held.add("enrich.driver_links", self.driver_links.len());
        held.add("enrich.exit_watches", self.exits.len());
        held.add("enrich.native_exes", self.native_exes.len());
        self.names.held(held);
    }

    pub fn new() -> Self {
        Self::default()
    }

    /// Every process running on the host now, identified and cached, so the
    /// caller can watch them (renames, off-CPU time) before sampling starts.
    pub fn running_processes(&mut self) -> Discovered {
        let mut discovered = Discovered::default();
        for pid in proc::pids() {
            self.identify(pid, &mut discovered);
        }
        discovered
    }

    /// Files the thread names runtimes read from their processes before
    /// sampling starts: names given before sparkprof watched renames.
    pub fn named(&mut self, dumps: &[ThreadDump]) {
        for dump in dumps {
            self.names
                .apply_dump(dump.pid, &dump.threads, dump.window());
        }
    }

    /// Identifies the processes of a drain; returns those that were not
    /// known before (and are still running).
    ///
    /// Samples are matched against the cache first: a process that exited
    /// after being counted keeps the identity it had while it ran.
    pub fn discover(&mut self, drain: &Drain) -> Discovered {
        // Processes first seen in this drain and already gone: name them after
        // their main thread's comm if it was sampled.
        let mut leader_comms: HashMap<u32, &str> = HashMap::new();
        for raw in &drain.samples {
            if raw.tid == raw.tgid {
                leader_comms.entry(raw.tgid).or_insert(&raw.comm);
            }
        }
        self.gone.clear();
        self.find_execs(drain);
        let mut new = Discovered::default();
        for raw in &drain.samples {
            if self.processes.contains_key(&raw.tgid) || self.gone.contains_key(&raw.tgid) {
                continue;
            }
            if !self.identify(raw.tgid, &mut new) {
                let info = exited_process(raw, leader_comms.get(&raw.tgid).copied());
                self.gone.insert(raw.tgid, Arc::new(info));
            }
        }
        self.resolve_drivers();
        new
    }

    /// Native processes of this drain that have exec'd since they were
    /// identified, or are Java launchers that have loaded their JVM since
    /// (see [`NativeExe::may_load_a_jvm`]): each is reported as exited with
    /// this drain (its samples here keep the old identity: most were taken
    /// before the exec) and identified afresh when the next drain samples
    /// it. A JVM a shell script execs is thus walked and tagged, not kept
    /// as the shell for good. One `readlink` per sampled native process per
    /// drain, and a read of the maps of a sampled `java` launcher for its
    /// first seconds.
    fn find_execs(&mut self, drain: &Drain) {
        let mut checked = HashSet::new();
        for raw in &drain.samples {
            let pid = raw.tgid;
            let Some(exe) = self.native_exes.get(&pid) else {
                continue;
            };
            if !checked.insert(pid) {
                continue;
            }
            // Gone meanwhile: the exit is the kernel's to report.
            let Ok(now) = proc::exe(pid) else {
                continue;
            };
            if now != exe.path {
                debug!(pid, from = %exe.path.display(), to = %now.display(), "process exec'd");
            } else if exe.may_load_a_jvm()
                && proc::read_maps(pid).is_ok_and(|maps| Runtime::from_maps(&maps).is_jvm())
            {
                debug!(pid, "a Java launcher has loaded its JVM");
            } else {
                continue;
            }
            self.native_exes.remove(&pid);
            if let Some(old) = self.processes.remove(&pid) {
                self.gone.insert(pid, old);
            }
        }
    }

    /// Reads and caches a process not seen before, and adds it to
    /// `discovered`; whether it is known (false: gone before it was read).
    fn identify(&mut self, pid: u32, discovered: &mut Discovered) -> bool {
        if let Some(info) = self.processes.get(&pid) {
            discovered.processes.push(info.clone());
            return true;
        }
        // Watched first, so that the process read is the one watched.
        self.exits.watch(pid);
        let Some((mut info, maps)) = read_process(pid) else {
            self.exits.forget(pid);
            return false;
        };
        if info.spark.role == Role::Executor
            && let Some(facts) = ProcessFacts::read(pid)
            && let Some(link) = DriverLink::from_executor_command(&facts.argv, &facts.environ)
        {
            self.driver_links.insert(pid, link);
            self.links_changed = true;
        }
        if info.spark.role == Role::Driver && info.spark.app_id.is_none() {
            info.spark.app_id = self.driver_app_id(pid);
        }
        // A runtime once is one until it exits; a plain native process may
        // be a launcher yet to exec one.
        if !info.kernel_thread
            && !info.in_a_runtime()
            && let Ok(path) = proc::exe(pid)
        {
            self.native_exes.insert(
                pid,
                NativeExe {
                    path,
                    identified: Instant::now(),
                },
            );
        }
        let info = Arc::new(info);
        self.processes.insert(pid, info.clone());
        discovered.processes.push(info);
        if let Some(maps) = maps {
            discovered.maps.insert(pid, maps);
        }
        true
    }

    /// A driver's application ID, through the executors on this host that
    /// connect to it (it is not on the driver's command line).
    fn driver_app_id(&self, pid: u32) -> Option<String> {
        let links: Vec<DriverLink> = self.driver_links.values().cloned().collect();
        spark::driver_app_id(pid, &links)
    }

    /// Drivers seen before their executors: now that new executors are
    /// known, their application IDs may be found.
    fn resolve_drivers(&mut self) {
        if !std::mem::take(&mut self.links_changed) {
            return;
        }
        let unresolved: Vec<u32> = self
            .processes
            .values()
            .filter(|info| info.spark.role == Role::Driver && info.spark.app_id.is_none())
            .map(|info| info.pid)
            .collect();
        for pid in unresolved {
            if let Some(app_id) = self.driver_app_id(pid)
                && let Some(info) = self.processes.get_mut(&pid)
            {
                let mut resolved = ProcessInfo::clone(info);
                resolved.spark.app_id = Some(app_id);
                *info = Arc::new(resolved);
            }
        }
    }

    /// Asks the kernel which processes exited, before a drain is taken:
    /// the next [`Self::enrich`] reports those (and any it then finds gone
    /// in /proc), none that exits after this, so what is held for a
    /// process can be handed on with the drain that reports it exited (see
    /// [`Self::may_report_exited`]).
    pub fn poll_exits(&mut self) {
        self.polled_exits = Some(self.exits.exited());
    }

    /// Whether the next [`Self::enrich`] may report `pid` exited: the
    /// last [`Self::poll_exits`] found it exited (or failed), or its exit
    /// is not watched and /proc decides then.
    pub fn may_report_exited(&self, pid: u32) -> bool {
        !self.exits.watches(pid)
            || match &self.polled_exits {
                Some(Some(exited)) => exited.contains(&pid),
                Some(None) | None => true,
            }
    }

    /// Names the threads of a drain and tags Spark tasks, with the thread
    /// dumps runtimes took for this drain. Call after [`Self::discover`] for
    /// the same drain.
    pub fn enrich(&mut self, drain: Drain, mut dumps: Vec<ThreadDump>) -> EnrichedDrain {
        self.names.apply(&drain.renames);
        // A dumped name tied to its epoch (no rename during the dump) names
        // this drain's samples of that epoch too; the others are filed after
        // this drain is named: renames between the buffer flip and the dump
        // only arrive with the next drain, and until then such a name could
        // be filed under the wrong epoch.
        for dump in &mut dumps {
            let (tied, loose): (Vec<_>, Vec<_>) = std::mem::take(&mut dump.threads)
                .into_iter()
                .partition(|thread| thread.epoch.is_some());
            self.names.apply_dump(dump.pid, &tied, dump.window());
            dump.threads = loose;
        }

        let mut samples = Vec::with_capacity(drain.samples.len());
        for raw in drain.samples {
            let process = match self
                .processes
                .get(&raw.tgid)
                .or_else(|| self.gone.get(&raw.tgid))
            {
                Some(info) => info.clone(),
                None => Arc::new(exited_process(&raw, None)),
            };
            let thread_name = self
                .names
                .name_at(raw.tgid, raw.tid, raw.name_epoch, &raw.comm);
            let task = if process.runs_tasks() {
                TaskThread::parse(&thread_name)
            } else {
                None
            };
            samples.push(EnrichedSample {
                raw,
                process,
                thread_name,
                task,
            });
        }
        for dump in dumps {
            self.names
                .apply_dump(dump.pid, &dump.threads, dump.window());
        }
        // Off-CPU counts still held name their threads as they were named
        // from `held_since` on.
        self.names.prune(
            drain
                .held_since
                .map_or(drain.end, |held| held.min(drain.end)),
        );

        // Forget processes that are gone or whose PID now names another process.
        let mut exited: Vec<Arc<ProcessInfo>> = self.gone.drain().map(|(_, info)| info).collect();
        let exits = &self.exits;
        let exited_now = self.polled_exits.take().unwrap_or_else(|| exits.exited());
        self.processes.retain(|pid, info| {
            let alive = match &exited_now {
                Some(exited_now) if exits.watches(*pid) => !exited_now.contains(pid),
                // Not watched (no pidfd to be had): as /proc says.
                _ => proc::stat(*pid).is_ok_and(|stat| stat.start_ticks == info.start_ticks),
            };
            if !alive {
                exited.push(info.clone());
            }
            alive
        });
        for info in &exited {
            self.native_exes.remove(&info.pid);
            self.exits.forget(info.pid);
            self.names.forget_process(info.pid);
            self.driver_links.remove(&info.pid);
            debug!(pid = info.pid, "process exited");
        }
        EnrichedDrain {
            start: drain.start,
            end: drain.end,
            off_cpu_start: drain.off_cpu_start,
            samples,
            exited,
        }
    }
}

/// A process as /proc shows it now, with the maps read to know its
/// runtime (`None`: a kernel thread, or not readable).
fn read_process(pid: u32) -> Option<(ProcessInfo, Option<Vec<Mapping>>)> {
    let stat = proc::stat(pid).ok()?;
    let kernel_thread = stat.kernel_thread;
    let maps = if kernel_thread {
        None
    } else {
        proc::read_maps(pid).ok()
    };
    let runtime = maps.as_deref().map_or(Runtime::Native, Runtime::from_maps);
    let spark = if kernel_thread {
        SparkProcess::other()
    } else {
        spark::classify_pid(pid)
    };
    let info = ProcessInfo {
        pid,
        start_ticks: stat.start_ticks,
        name: stat.comm,
        kernel_thread,
        runtime,
        spark,
    };
    Some((info, maps))
}

/// A process that exited before it could be read from /proc: named after its
/// main thread's comm when that thread was sampled, else marked as exited.
fn exited_process(sample: &RawSample, leader_comm: Option<&str>) -> ProcessInfo {
    ProcessInfo {
        pid: sample.tgid,
        start_ticks: 0,
        name: match leader_comm {
            Some(comm) => comm.to_owned(),
            None => format!("[exited] {}", sample.comm),
        },
        kernel_thread: matches!(sample.user, RawStack::Absent)
            && !matches!(sample.kernel, RawStack::Absent),
        runtime: Runtime::Native,
        spark: SparkProcess::other(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Processes found come with the maps read to identify them, for the
    /// stages after; a kernel thread has none, and neither has a process
    /// found again.
    #[test]
    fn discovered_processes_carry_their_maps() {
        let mut enricher = Enricher::new();
        let discovered = enricher.running_processes();
        let me = std::process::id();
        assert!(discovered.processes.iter().any(|p| p.pid == me));
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let maps = discovered.maps(me).expect("this process's maps");
        assert!(
            maps.iter()
                .any(|m| m.executable && m.file() == Some(exe.as_path())),
            "{maps:?}"
        );
        assert!(
            discovered
                .processes
                .iter()
                .any(|p| p.pid == 2 && p.kernel_thread)
        );
        assert!(discovered.maps(2).is_none());
        let again = enricher.running_processes();
        assert!(again.processes.iter().any(|p| p.pid == me));
        assert!(again.maps(me).is_none());
    }

    #[test]
    fn recognizes_a_jvm_from_its_mappings() {
        let maps = |text: &str| proc::parse_maps(text).unwrap();
        assert_eq!(
            Runtime::from_maps(&maps(
                "7f00-7f10 r-xp 00000000 fd:00 1 /usr/lib/jvm/java-17/lib/server/libjvm.so\n"
            )),
            Runtime::Jvm {
                libjvm: "/usr/lib/jvm/java-17/lib/server/libjvm.so".into()
            }
        );
        assert_eq!(
            Runtime::from_maps(&maps("7f00-7f10 r-xp 0 fd:00 1 /usr/lib/libc.so.6\n")),
            Runtime::Native
        );
        assert_eq!(
            Runtime::from_maps(&maps(
                "7f00-7f10 r-xp 0 fd:00 1 /opt/jdk/lib/server/libjvm.so (deleted)\n"
            )),
            Runtime::Native,
            "a replaced libjvm.so"
        );
    }
}
