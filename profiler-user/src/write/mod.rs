//! Stage 4 of the pipeline: **write**.
//!
//! Accumulates symbolized samples into one folded file per output group and
//! writes them, each with an SVG flame graph beside it, plus `index.json`.
//!
//! # Layout of the output directory
//! ```text
//! DIR/index.json                                   what is here (see [`index`])
//! DIR/spark/<app>/executor-<id>/stage-<S>.cpu.folded  task samples of stage S in that executor
//! DIR/spark/<app>/executor-<id>/executor.cpu.folded   the executor JVM's other samples
//! DIR/spark/<app>/executor-<id>/pyspark-<pid>.cpu.folded  its PySpark daemon and workers
//! DIR/spark/<app>/executor-driver/...              a local-mode driver runs tasks as executor "driver"
//! DIR/spark/<app>/driver/driver.cpu.folded         a driver that runs no tasks
//! DIR/processes/<name>-<pid>.cpu.folded            every other user process that lived 1 s or more
//! DIR/short-lived/<name>.cpu.folded                the others, summed per program (comm)
//! DIR/kernel/kernel-threads.cpu.folded             all kernel threads together
//! ```
//! With off-CPU recording, each group with off-CPU time also has a
//! `.offcpu.folded` file (microseconds blocked) and a `.wall.folded` file
//! (on-CPU samples as time under an `[on-cpu]` leaf, plus the off-CPU
//! time). Each `.folded` file has its flame graph beside it (`.svg`). `<app>` is
//! the application ID (`unknown-app` when it cannot be found, e.g. a driver
//! whose executors are not on this host).
//!
//! # While a recording runs
//! `record` rewrites the files every `--flush-interval` (a checkpoint, so
//! that a recording cut short keeps what it had counted). A checkpoint
//! rewrites every changed on- and off-CPU folded file and the index: what
//! the recording counted. What is made from them follows later: a file's
//! flame graph and pprof twin are made only when the file has settled
//! (unchanged since the last checkpoint) or its graph is [`SVG_REDRAW`]
//! old, and a new file that still changes gets a stand-in page and a
//! stand-in twin (no samples) until then; a wall-clock file (made from
//! its group's on- and off-CPU files) is written when its group has
//! settled, with its graph, or with the samples table, which is rewritten
//! at most every [`SVG_REDRAW`] (empty at the first checkpoint). The index
//! lists each file as it is on disk.
//! Until the recording ends, an SVG, a twin, a wall-clock file and the
//! table may show less than the on- and off-CPU files.
//! The end of the recording (and each window of the daemon) makes every
//! graph, twin and the table from what the files hold; `sparkprof merge`
//! makes them from the folded files of a recording that was killed.
//!
//! # Short-lived processes
//! A process outside Spark gets a file of its own once it is seen alive
//! [`LONG_LIVED`] after it started (in a sample, or at a drain that finds it
//! still running); until then its samples wait in memory. One that exits
//! (or that the recording outlives) before that is summed into its
//! program's `short-lived/` file, under a `<name> [short-lived]` process
//! frame, and leaves no state behind: a host that starts hundreds of
//! processes a second gets one file per program, not per process, and every
//! sample is still counted. index.json says how many processes a
//! `short-lived/` file sums (`processes`). Drains come every drain interval
//! (a second by default), so a process that lives under [`LONG_LIVED`] is
//! always summed, one that lives [`LONG_LIVED`] plus a drain interval always
//! has its own file, and one in between has it if a drain saw it alive
//! after [`LONG_LIVED`].
//! # Folded lines
//! Brendan Gregg's format: frames root first, separated by `;`, a space, the
//! count. The first frame is the process (`name [pid]`), the second the thread
//! (its name), then the stack from the outermost frame to the leaf; kernel
//! frames carry a `_[k]` suffix; `[truncated]` at the root of the stack marks
//! a stack cut at the depth limit. Counts are samples (on-CPU files) or
//! microseconds (off-CPU and wall-clock files).

pub mod atomic;
pub mod colours;
pub mod folded;
pub mod index;
pub mod labels;
pub mod lines;
pub mod output_dir;
pub mod pprof;
pub mod table;

use std::{
    collections::HashMap,
    io,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use tracing::debug;

use crate::{
    collect::SampleKind,
    enrich::{
        ProcessInfo,
        spark::{Role, TaskThread},
    },
    symbolize::{SymbolizedDrain, SymbolizedSample},
};

/// The kind of profile a file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProfileKind {
    /// On-CPU samples.
    Cpu,
    /// Off-CPU time, in microseconds.
    Offcpu,
    /// Wall-clock time, in microseconds: on-CPU samples as the time they
    /// stand for (one sampling period each) under an `[on-cpu]` leaf, beside
    /// the off-CPU time, so that one flame graph shows where a thread's
    /// (or a stage's) time went. Written for the groups that have off-CPU
    /// time.
    Wall,
}

impl ProfileKind {
    fn of(kind: SampleKind) -> Self {
        match kind {
            SampleKind::OnCpu => Self::Cpu,
            SampleKind::OffCpu(_) => Self::Offcpu,
        }
    }

    pub fn suffix(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Offcpu => "offcpu",
            Self::Wall => "wall",
        }
    }

    /// The kind whose [`suffix`](Self::suffix) this is.
    pub fn from_suffix(suffix: &str) -> Option<Self> {
        [Self::Cpu, Self::Offcpu, Self::Wall]
            .into_iter()
            .find(|kind| kind.suffix() == suffix)
    }

    /// The kind in words, as a flame graph's title says it.
    pub fn in_words(self) -> &'static str {
        match self {
            Self::Cpu => "on-CPU",
            Self::Offcpu => "off-CPU (microseconds)",
            Self::Wall => "wall-clock, on- and off-CPU (microseconds)",
        }
    }

    /// What a file's counts are.
    pub fn unit(self) -> &'static str {
        match self {
            Self::Cpu => "samples",
            Self::Offcpu | Self::Wall => "microseconds",
        }
    }
}

/// Which file a sample belongs to. Every sample goes to exactly one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Group {
    /// A user process, identified across PID reuse by its start time.
    Process { pid: u32, start_ticks: u64 },
    /// All kernel threads.
    KernelThreads,
    /// Task samples of one stage in one executor (or local-mode driver).
    SparkStage {
        app: Arc<str>,
        executor: Arc<str>,
        stage: u32,
    },
    /// The other samples of a Spark JVM (executor or driver): GC, shuffle,
    /// RPC, idle task threads.
    SparkJvm {
        app: Arc<str>,
        executor: Option<Arc<str>>,
        role: Role,
    },
    /// A PySpark daemon or worker of an executor.
    SparkPython {
        app: Arc<str>,
        executor: Arc<str>,
        pid: u32,
        start_ticks: u64,
    },
    /// Processes of one program that each lived less than [`LONG_LIVED`].
    ShortLived { name: String },
}

/// What the writer is told about how to draw threads.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteOptions {
    /// In stage files, name the thread frame after the task
    /// (`task 3.0 TID 57`) so a flame graph splits per task; otherwise all
    /// task threads share one frame and the stage's stacks merge.
    pub task_frames: bool,
    /// With off-CPU recording: the microseconds one on-CPU sample stands for
    /// (the sampling period), for the wall-clock files ([`ProfileKind::Wall`]).
    pub wall_us_per_sample: Option<f64>,
}

/// The leaf frame of on-CPU time in a wall-clock file.
pub const ON_CPU_FRAME: &str = "[on-cpu]";

/// How long a process must be seen alive for a file of its own.
pub const LONG_LIVED: Duration = Duration::from_secs(1);

/// During a recording, a flame graph is drawn again at most this often
/// (see [`Writer::checkpoint`]); at its end, always.
pub const SVG_REDRAW: Duration = Duration::from_secs(600);

/// The process frame of a `short-lived/` file.
fn short_lived_frame(name: &str) -> String {
    format!("{} [short-lived]", folded::sanitize(name))
}

/// The thread frame of all task samples when tasks are not split.
const TASK_THREAD_FRAME: &str = "Executor task launch worker";

/// Directory name for an application ID.
fn app_dir(app: &str) -> String {
    folded::file_stem(app)
}

fn app_of(process: &ProcessInfo, ids: &mut SharedIds) -> Arc<str> {
    ids.get(process.spark.app_id.as_deref().unwrap_or(UNKNOWN_APP))
}

/// The application and executor IDs of a writer's groups, each held once:
/// a group is made for every sample (and cloned to find its file), and
/// its IDs made afresh each time were a tenth of sparkprof's allocations
/// over a testbed job.
#[derive(Debug, Default)]
struct SharedIds {
    ids: crate::FastSet<Arc<str>>,
}

/// IDs a [`SharedIds`] holds before it starts over (a daemon's writer
/// outlives many applications).
const MAX_SHARED_IDS: usize = 4096;

impl SharedIds {
    fn get(&mut self, id: &str) -> Arc<str> {
        if self.ids.len() >= MAX_SHARED_IDS && !self.ids.contains(id) {
            self.ids.clear();
        }
        crate::intern(&mut self.ids, id)
    }
}

/// `<app>` when the application ID is not known.
const UNKNOWN_APP: &str = "unknown-app";

impl Group {
    /// The file a sample belongs to.
    fn of(sample: &SymbolizedSample, ids: &mut SharedIds) -> Self {
        let process = &sample.process;
        if process.kernel_thread {
            return Self::KernelThreads;
        }
        let spark = &process.spark;
        match spark.role {
            Role::Executor | Role::Driver => {
                if let (Some(executor), Some((stage, _))) = (
                    spark.executor_id.as_ref(),
                    sample.task.as_ref().and_then(TaskThread::stage),
                ) {
                    return Self::SparkStage {
                        app: app_of(process, ids),
                        executor: ids.get(executor),
                        stage,
                    };
                }
                Self::SparkJvm {
                    app: app_of(process, ids),
                    executor: spark.executor_id.as_deref().map(|id| ids.get(id)),
                    role: spark.role,
                }
            }
            Role::PysparkDaemon | Role::PysparkWorker if spark.executor_id.is_some() => {
                Self::SparkPython {
                    app: app_of(process, ids),
                    executor: ids.get(spark.executor_id.as_deref().unwrap_or_default()),
                    pid: process.pid,
                    start_ticks: process.start_ticks,
                }
            }
            _ => Self::Process {
                pid: process.pid,
                start_ticks: process.start_ticks,
            },
        }
    }

    /// Path of its file, without the `.<kind>.folded` suffix.
    fn base_path(&self, process: &ProcessInfo) -> PathBuf {
        let executor_dir = |app: &str, executor: &str| {
            PathBuf::from("spark")
                .join(app_dir(app))
                .join(format!("executor-{}", folded::file_stem(executor)))
        };
        match self {
            Self::KernelThreads => PathBuf::from("kernel/kernel-threads"),
            Self::Process { pid, .. } => PathBuf::from("processes")
                .join(format!("{}-{pid}", folded::file_stem(&process.name))),
            Self::ShortLived { name } => PathBuf::from("short-lived").join(folded::file_stem(name)),
            Self::SparkStage {
                app,
                executor,
                stage,
            } => executor_dir(app, executor).join(format!("stage-{stage}")),
            Self::SparkJvm {
                app,
                executor: Some(executor),
                role,
            } => executor_dir(app, executor).join(role_file(*role)),
            Self::SparkJvm {
                app,
                executor: None,
                role,
            } => PathBuf::from("spark")
                .join(app_dir(app))
                .join(role.as_str())
                .join(role_file(*role)),
            Self::SparkPython {
                app, executor, pid, ..
            } => executor_dir(app, executor).join(format!("pyspark-{pid}")),
        }
    }

    /// What the index says about the group.
    fn meta(&self, process: &ProcessInfo) -> index::GroupMeta {
        match self {
            Self::KernelThreads => index::GroupMeta {
                pid: None,
                process: Some("[kernel threads]".into()),
                role: "kernel",
                app_id: None,
                executor_id: None,
                stage_id: None,
                short_lived: false,
            },
            Self::ShortLived { name } => index::GroupMeta {
                pid: None,
                process: Some(name.clone()),
                role: process.spark.role.as_str(),
                app_id: None,
                executor_id: None,
                stage_id: None,
                short_lived: true,
            },
            _ => index::GroupMeta {
                pid: Some(process.pid),
                process: Some(process.name.clone()),
                role: process.spark.role.as_str(),
                app_id: process.spark.app_id.clone(),
                executor_id: process.spark.executor_id.clone(),
                stage_id: match self {
                    Self::SparkStage { stage, .. } => Some(u64::from(*stage)),
                    _ => None,
                },
                short_lived: false,
            },
        }
    }
}

/// File name of a Spark JVM's samples outside tasks.
fn role_file(role: Role) -> &'static str {
    match role {
        Role::Driver => "driver",
        _ => "executor",
    }
}

#[derive(Debug)]
struct OutputFile {
    rel_path: PathBuf,
    entry: index::FileEntry,
    /// Counts by line (see [`lines`]).
    stacks: crate::FastMap<lines::Line, u64>,
    dirty: bool,
    /// Samples came in since the files were last written (a checkpoint or
    /// a flush), whether this one was written then or not.
    changed: bool,
    /// What the index says of it: its entry as it was when the file was
    /// last written whole (folded and SVG), `None` before that, when the
    /// index does not list it (a wall-clock file may wait while its entry
    /// moves on: see [`OutputFile::lags`]).
    listed: Option<index::FileEntry>,
    /// When its flame graph was last drawn, and whether its samples have
    /// changed since (a [`Writer::checkpoint`] may leave it as it was).
    svg_drawn: Option<Instant>,
    svg_stale: bool,
    /// When a stand-in took the place of its graph, not drawn yet.
    stand_in_at: Option<Instant>,
}

impl OutputFile {
    /// Whether writing it now draws its flame graph, and whether it writes
    /// a stand-in page instead: see [`Writer::checkpoint`]. A graph behind
    /// its folded file is drawn at the end (`draw_all`), when the file has
    /// settled (unchanged since it was last written: a stage that ended,
    /// a process gone quiet) if it was never drawn, or when it is
    /// [`SVG_REDRAW`] old. The index lists a file's graph with it: until
    /// the first is drawn, a page that says so stands in for it.
    fn graph(&self, draw_all: bool) -> (bool, bool) {
        let behind = self.dirty || self.svg_stale;
        let age = self.svg_drawn.or(self.stand_in_at).map(|at| at.elapsed());
        let draw = behind
            && (draw_all
                || (!self.dirty && self.svg_drawn.is_none())
                || age.is_some_and(|age| age >= SVG_REDRAW));
        (draw, self.dirty && !draw && !self.on_disk())
    }

    /// Written whole at least once: only then does the index list it.
    fn on_disk(&self) -> bool {
        self.listed.is_some()
    }

    /// Whether a checkpoint leaves this file as it is on disk (or not
    /// there yet) though its samples changed. A wall-clock file is made
    /// from its group's on- and off-CPU files, which hold what was counted
    /// and are rewritten at every checkpoint; it follows them like a flame
    /// graph: written once its group has settled (no samples since the
    /// last checkpoint), when its graph is due, when the samples table is
    /// rebuilt (whose rows are its lines: at most [`SVG_REDRAW`] apart),
    /// and at the end. It was half of the bytes a checkpoint wrote with
    /// `--off-cpu` (an executor's on- and off-CPU lines again, each longer
    /// by a frame), rewritten every minute while its executor ran. Until
    /// it is written the index lists it as last written, or not at all.
    fn lags(&self, kind: ProfileKind, draw_all: bool, table_whole: bool) -> bool {
        kind == ProfileKind::Wall
            && self.dirty
            && self.changed
            && !draw_all
            && !table_whole
            && !self.graph(draw_all).0
    }

    fn add(&mut self, line: &[u32], count: u64, start: SystemTime, end: SystemTime) {
        match self.stacks.get_mut(line) {
            Some(counted) => *counted += count,
            None => {
                self.stacks.insert(line.into(), count);
            }
        }
        self.entry.samples += count;
        self.entry.extend_time(start, end);
        self.dirty = true;
        self.changed = true;
    }

    /// A sample of a wall-clock file's group came in: its stacks are
    /// derived from the group's on- and off-CPU files when it is written
    /// ([`wall_lines`]), not kept twice.
    fn touch(&mut self, start: SystemTime, end: SystemTime) {
        self.entry.extend_time(start, end);
        self.dirty = true;
        self.changed = true;
    }

    /// Sums a short-lived process's file into its program's, under the
    /// program's process frame (the piece numbered `root`).
    fn absorb(&mut self, other: OutputFile, root: u32) {
        for (mut line, count) in other.stacks {
            line[0] = root;
            *self.stacks.entry(line).or_insert(0) += count;
        }
        self.entry.absorb(&other.entry);
        self.dirty = true;
        self.changed = true;
    }
}

/// A process outside Spark not yet seen alive [`LONG_LIVED`] after it
/// started: its files wait, unwritten.
#[derive(Debug)]
struct Pending {
    process: Arc<ProcessInfo>,
    started: Option<SystemTime>,
}

impl Pending {
    /// Whether being alive at `time` makes it long-lived.
    fn long_lived_at(&self, time: SystemTime) -> bool {
        self.started.is_some_and(|started| {
            time.duration_since(started)
                .is_ok_and(|age| age >= LONG_LIVED)
        })
    }
}

/// The write stage: folded aggregates per file, flushed on demand.
pub struct Writer {
    dir: PathBuf,
    options: WriteOptions,
    files: crate::FastMap<(ProfileKind, Group), OutputFile>,
    used_paths: HashMap<PathBuf, (ProfileKind, Group)>,
    /// Processes whose files wait until they are known to be long-lived or
    /// not, by (pid, start ticks).
    pending: crate::FastMap<(u32, u64), Pending>,
    /// Processes known to have lived [`LONG_LIVED`]: they keep their files.
    long_lived: crate::FastSet<(u32, u64)>,
    start: Option<SystemTime>,
    end: Option<SystemTime>,
    /// Files this writer put on disk, relative to `dir`.
    written: std::collections::HashSet<PathBuf>,
    /// Files the last index it wrote lists (itself included).
    indexed: std::collections::HashSet<PathBuf>,
    /// Folded files and on-CPU samples the last index it wrote lists.
    index_totals: (usize, u64),
    /// The pieces of every file's lines.
    pieces: lines::Pieces,
    /// Room for a sample's line.
    line: Vec<u32>,
    /// The IDs of its groups.
    ids: SharedIds,
    /// When `samples.parquet` was last written (a checkpoint may leave it).
    table_at: Option<Instant>,
}

impl Writer {
    /// What the writer holds of its window, counted.
    pub fn held(&self, held: &mut crate::sys::held::Held) {
        held.add("write.files", self.files.len());
        held.add(
            "write.stacks",
            self.files.values().map(|file| file.stacks.len()).sum(),
        );
        held.add("write.line_pieces", self.pieces.len());
        held.add("write.pending_processes", self.pending.len());
        held.add("write.long_lived", self.long_lived.len());
    }

    /// A writer into `dir` (created on first flush).
    pub fn new(dir: impl Into<PathBuf>, options: WriteOptions) -> Self {
        Self {
            dir: dir.into(),
            options,
            files: Default::default(),
            used_paths: HashMap::new(),
            pending: Default::default(),
            long_lived: Default::default(),
            start: None,
            end: None,
            written: Default::default(),
            indexed: Default::default(),
            index_totals: (0, 0),
            pieces: Default::default(),
            line: Vec::new(),
            ids: SharedIds::default(),
            table_at: None,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Adds a drain's samples to their files, and settles which processes
    /// are short-lived.
    pub fn add(&mut self, drain: SymbolizedDrain) {
        let first = drain.start.min(drain.off_cpu_start);
        self.start = Some(self.start.map_or(first, |s| s.min(first)));
        self.end = Some(self.end.map_or(drain.end, |e| e.max(drain.end)));
        for sample in drain.samples {
            // Off-CPU samples may have been held over several drains.
            let start = match sample.kind {
                SampleKind::OnCpu => drain.start,
                SampleKind::OffCpu(_) => drain.off_cpu_start,
            };
            let group = self.add_sample(&sample, (start, drain.end));
            if let Group::Process { pid, start_ticks } = group {
                self.saw_process(&sample.process, (pid, start_ticks), drain.start);
            }
        }
        // Gone before they were seen alive for long: summed per program.
        for process in &drain.exited {
            if let Some(pending) = self.pending.remove(&(process.pid, process.start_ticks)) {
                self.sum_short_lived(pending);
            }
        }
        // The others were still running when the drain ended.
        let long_lived: Vec<(u32, u64)> = self
            .pending
            .iter()
            .filter(|(_, pending)| pending.long_lived_at(drain.end))
            .map(|(key, _)| *key)
            .collect();
        for key in long_lived {
            self.pending.remove(&key);
            self.long_lived.insert(key);
        }
    }

    /// Settles every process still waiting: the recording ends before it
    /// has lived [`LONG_LIVED`], so it is summed with its program's
    /// short-lived processes. Called before the last flush.
    pub fn settle(&mut self) {
        for (_, pending) in std::mem::take(&mut self.pending) {
            self.sum_short_lived(pending);
        }
    }

    /// A sample of a process outside Spark, taken after `time`.
    fn saw_process(&mut self, process: &Arc<ProcessInfo>, key: (u32, u64), time: SystemTime) {
        if self.long_lived.contains(&key) {
            return;
        }
        let pending = self.pending.entry(key).or_insert_with(|| Pending {
            process: process.clone(),
            started: process.started(),
        });
        if pending.long_lived_at(time) {
            self.pending.remove(&key);
            self.long_lived.insert(key);
        }
    }

    /// Moves a short-lived process's files into its program's.
    fn sum_short_lived(&mut self, pending: Pending) {
        let process = pending.process;
        let own = Group::Process {
            pid: process.pid,
            start_ticks: process.start_ticks,
        };
        let program = Group::ShortLived {
            name: process.name.clone(),
        };
        let root = self.pieces.number(&short_lived_frame(&process.name));
        for kind in [ProfileKind::Cpu, ProfileKind::Offcpu, ProfileKind::Wall] {
            let Some(file) = self.files.remove(&(kind, own.clone())) else {
                continue;
            };
            self.used_paths.remove(&file.rel_path);
            let start = file
                .entry
                .start_time()
                .or(self.start)
                .unwrap_or(SystemTime::UNIX_EPOCH);
            self.file(kind, &program, &process, start)
                .absorb(file, root);
        }
    }

    fn add_sample(
        &mut self,
        sample: &SymbolizedSample,
        (start, end): (SystemTime, SystemTime),
    ) -> Group {
        let group = Group::of(sample, &mut self.ids);
        let thread: std::borrow::Cow<'_, str> = match (&group, &sample.task) {
            (Group::SparkStage { .. }, Some(task)) if self.options.task_frames => {
                task.task_label().into()
            }
            (Group::SparkStage { .. }, _) => TASK_THREAD_FRAME.into(),
            _ => (*sample.thread_name).into(),
        };
        let mut line = std::mem::take(&mut self.line);
        self.pieces.stack(sample, &thread, &mut line);
        if self.options.wall_us_per_sample.is_some() {
            self.file(ProfileKind::Wall, &group, &sample.process, start)
                .touch(start, end);
        }
        self.file(ProfileKind::of(sample.kind), &group, &sample.process, start)
            .add(&line, sample.count, start, end);
        self.line = line;
        group
    }

    /// The file of `kind` for `group`, created on its first sample.
    fn file(
        &mut self,
        kind: ProfileKind,
        group: &Group,
        process: &ProcessInfo,
        start: SystemTime,
    ) -> &mut OutputFile {
        let key = (kind, group.clone());
        if !self.files.contains_key(&key) {
            let rel_path = self.unique_path(kind, group, process);
            let entry = index::FileEntry::new(&rel_path, kind, &group.meta(process), start, start);
            self.used_paths.insert(rel_path.clone(), key.clone());
            self.files.insert(
                key.clone(),
                OutputFile {
                    rel_path,
                    entry,
                    stacks: crate::FastMap::default(),
                    dirty: true,
                    changed: true,
                    listed: None,
                    svg_drawn: None,
                    svg_stale: false,
                    stand_in_at: None,
                },
            );
        }
        self.files.get_mut(&key).expect("inserted above")
    }

    /// Whether a file is written: a wall-clock file only beside off-CPU
    /// time (elsewhere it would be the on-CPU file again, in other units).
    fn shown(&self, (kind, group): &(ProfileKind, Group)) -> bool {
        *kind != ProfileKind::Wall
            || self
                .files
                .contains_key(&(ProfileKind::Offcpu, group.clone()))
    }

    /// Whether a group's files wait until its process is known to be
    /// long-lived or not.
    fn waits(&self, group: &Group) -> bool {
        match group {
            Group::Process { pid, start_ticks } => self.pending.contains_key(&(*pid, *start_ticks)),
            _ => false,
        }
    }

    fn unique_path(&self, kind: ProfileKind, group: &Group, process: &ProcessInfo) -> PathBuf {
        let base = group.base_path(process);
        // A reused PID with the same name gets its own file.
        (1..)
            .map(|n| {
                let stem = if n == 1 {
                    base.clone()
                } else {
                    PathBuf::from(format!("{}-{n}", base.display()))
                };
                PathBuf::from(format!("{}.{}.folded", stem.display(), kind.suffix()))
            })
            .find(|path| !self.used_paths.contains_key(path))
            .expect("an unused path exists")
    }

    /// Writes every file changed since the last flush (folded, SVG and
    /// pprof), then, if all of them were written, `index.json`. Nothing is
    /// forgotten on error: the aggregates stay in memory and the next
    /// flush tries again. Every flame graph is drawn from what its folded
    /// file holds now: the end of a recording or of a daemon's window.
    pub fn flush(&mut self, header: &index::Header) -> io::Result<usize> {
        self.write_files(header, true)
    }

    /// [`flush`](Self::flush) during a recording, so that a recording cut
    /// short (killed, the host lost) keeps what it had counted: every
    /// changed on- and off-CPU folded file is rewritten, but a flame graph
    /// and its pprof twin are made only for a file that has settled
    /// (unchanged since it was last written, as a stage's file once the
    /// stage ended) or whose graph is [`SVG_REDRAW`] old, the samples table
    /// at most every [`SVG_REDRAW`], and a wall-clock file as
    /// [`OutputFile::lags`] says. A file written for the first time while
    /// it still changes gets a stand-in page that says its graph is to
    /// come, and a twin with no samples that says so (the index lists both
    /// with the file). Drawing was most of what a rewrite cost (over a Spark job
    /// with a flush every 10 s, the SVGs were 30 % of sparkprof's CPU and
    /// the whole flush 55 %); drawing each new file at its first checkpoint
    /// drew a Spark job's files twice, the second time at the end, and was
    /// half of the first checkpoint's CPU (about 0.5 s on a Spark host,
    /// measured with `perf record` over a testbed job). Then the twins and
    /// the table (rebuilt from every file) were about half of it: 18.5 of
    /// the 38.8 % of sparkprof's CPU that the checkpoint within a testbed
    /// job took (`perf record`). The end of the recording makes every
    /// graph and twin whose file changed since, and the table.
    pub fn checkpoint(&mut self, header: &index::Header) -> io::Result<usize> {
        self.write_files(header, false)
    }

    fn write_files(&mut self, header: &index::Header, draw_all: bool) -> io::Result<usize> {
        let mut written = 0;
        let mut first_error = None;
        let hidden: Vec<(ProfileKind, Group)> = self
            .files
            .keys()
            .filter(|key| !self.shown(key) || self.waits(&key.1))
            .cloned()
            .collect();
        // The samples table of every file listed is rebuilt (below) at a
        // checkpoint, like a graph, at most every SVG_REDRAW (an empty one
        // the first time); at a flush, always.
        let table_age = self.table_at.map(|at| at.elapsed());
        let table_whole = draw_all || table_age.is_some_and(|age| age >= SVG_REDRAW);
        let due = |key: &(ProfileKind, Group), file: &OutputFile| {
            (file.dirty || file.graph(draw_all).0)
                && !hidden.contains(key)
                && !file.lags(key.0, draw_all, table_whole)
        };
        // The wall-clock files to write, drawn from their groups' on- and
        // off-CPU files before those are borrowed for writing: as numbered
        // lines, like the files they are drawn from. Made text a line at a
        // time and sorted as text, they were a fifth of what the checkpoint
        // within a testbed job cost with `--off-cpu` (`perf record`); as
        // numbers, a checkpoint of three synthetic JVMs' files (177 MB
        // written; timed once, with a harness not kept) took 290 ms
        // instead of 420.
        let on_cpu = self.pieces.number(ON_CPU_FRAME);
        let mut walls: HashMap<(ProfileKind, Group), Vec<(lines::Line, u64)>> = HashMap::new();
        for (key, file) in &self.files {
            if key.0 == ProfileKind::Wall && due(key, file) {
                walls.insert(key.clone(), self.wall_lines(&key.1, on_cpu));
            }
        }
        // Room for the text of each file drawn, kept from one to the next.
        let mut room = Vec::new();
        for (key, file) in &mut self.files {
            if !due(key, file) {
                continue;
            }
            let (draw, stand_in) = file.graph(draw_all);
            let wall = walls.remove(key).inspect(|lines| {
                file.entry.samples = lines.iter().map(|(_, micros)| micros).sum();
            });
            let svg_rel = file.rel_path.with_extension("svg");
            let twin_rel = pprof::twin_path(&file.rel_path);
            let labels =
                labels::FileLabels::of_entry(&header.host, header.sample_period_ns(), &file.entry);
            let result = (|| {
                // A wall-clock file's lines are its group's (above).
                let lines = || -> Vec<(&[u32], u64)> {
                    match &wall {
                        Some(lines) => lines.iter().map(|(line, n)| (&line[..], *n)).collect(),
                        None => file
                            .stacks
                            .iter()
                            .map(|(line, &n)| (&line[..], n))
                            .collect(),
                    }
                };
                // The text, where a graph and twin are drawn from it; else
                // the folded file is written line by line, never held whole.
                let text: Option<&str> = if draw {
                    room.clear();
                    self.pieces.render_to(lines(), &mut room)?;
                    Some(std::str::from_utf8(&room).map_err(io::Error::other)?)
                } else {
                    None
                };
                if file.dirty {
                    match text {
                        Some(text) => {
                            atomic::write_atomic(&self.dir, &file.rel_path, text.as_bytes())?
                        }
                        None => atomic::write_atomic_with(&self.dir, &file.rel_path, |out| {
                            self.pieces.render_to(lines(), out)
                        })?,
                    }
                    self.written.insert(file.rel_path.clone());
                }
                // What a graph and twin are drawn from (else stand-ins).
                let drawn = text.filter(|_| draw);
                if draw || stand_in {
                    let svg = match drawn {
                        Some(text) => {
                            folded::flame_graph(text, &file.entry.title(), file.entry.unit)?
                        }
                        None => folded::stand_in_graph(&file.entry.title()),
                    };
                    atomic::write_atomic(&self.dir, &svg_rel, &svg)?;
                    self.written.insert(svg_rel.clone());
                }
                // The twin goes with the graph: drawn from the same text, or
                // a stand-in beside a stand-in page.
                if draw || stand_in {
                    let twin = match drawn {
                        Some(text) => {
                            pprof::encode(&[(&labels, labels::folded_lines(text).collect())])?
                        }
                        None => pprof::stand_in(&labels)?,
                    };
                    atomic::write_atomic(&self.dir, &twin_rel, &twin)?;
                    self.written.insert(twin_rel.clone());
                }
                io::Result::Ok(())
            })();
            match result {
                Ok(()) => {
                    file.dirty = false;
                    file.listed = Some(file.entry.clone());
                    if draw {
                        file.svg_drawn = Some(Instant::now());
                    }
                    if stand_in {
                        file.stand_in_at = Some(Instant::now());
                    }
                    file.svg_stale = !draw;
                    written += 1;
                }
                Err(err) => {
                    debug!("{}: {err}", file.rel_path.display());
                    first_error.get_or_insert(err);
                }
            }
        }
        // What comes in from now on is new to the next write.
        for file in self.files.values_mut() {
            file.changed = false;
        }
        // An index only for a whole recording: after a failed file (a full
        // disk) the last index stays, and the next flush tries again.
        if let Some(err) = first_error {
            return Err(err);
        }
        // Only files that are on disk whole, as they are there: a reader of
        // the index never meets a missing one, nor one it describes wrong.
        let mut entries: Vec<index::FileEntry> = self
            .files
            .iter()
            .filter(|(key, _)| !hidden.contains(key))
            .filter_map(|(_, f)| f.listed.clone())
            .collect();
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        // The samples table of every file listed, before the index that
        // names it (when, see above).
        let mut table = table::SamplesTable::default();
        for (key, file) in &self.files {
            if table_whole && !hidden.contains(key) && file.on_disk() {
                let labels = labels::FileLabels::of_entry(
                    &header.host,
                    header.sample_period_ns(),
                    &file.entry,
                );
                if key.0 == ProfileKind::Wall {
                    let lines = self.wall_lines(&key.1, on_cpu);
                    table.add(
                        &labels,
                        lines
                            .iter()
                            .map(|(line, count)| (self.pieces.line(line), *count)),
                    );
                } else {
                    table.add(
                        &labels,
                        file.stacks
                            .iter()
                            .map(|(stack, &count)| (self.pieces.line(stack), count)),
                    );
                }
            }
        }
        let table_rel = PathBuf::from(table::SAMPLES_TABLE);
        if table_whole || table_age.is_none() {
            let parquet = table.to_parquet().map_err(io::Error::other)?;
            atomic::write_atomic(&self.dir, &table_rel, &parquet)?;
            self.written.insert(table_rel.clone());
            self.table_at = Some(Instant::now());
        }
        let index = index::Index::new(header, self.start, self.end, entries);
        let index_rel = PathBuf::from(output_dir::INDEX);
        atomic::write_atomic(&self.dir, &index_rel, &index.to_json())?;
        self.written.insert(index_rel.clone());
        self.index_totals = (
            index.files.len(),
            index
                .files
                .iter()
                .filter(|entry| entry.kind == ProfileKind::Cpu)
                .map(|entry| entry.samples)
                .sum(),
        );
        self.indexed = index
            .files
            .iter()
            .flat_map(|entry| [&entry.path, &entry.svg, &entry.pprof].map(PathBuf::from))
            .chain([index_rel, table_rel])
            .collect();
        Ok(written)
    }
}

impl Writer {
    /// The lines of a group's wall-clock file: its on-CPU stacks as the
    /// time they stand for (one sampling period per sample, rounded per
    /// line) under an [`ON_CPU_FRAME`] leaf, and its off-CPU stacks as
    /// they are. The two never share a line: every off-CPU stack ends in
    /// the frame that says how the thread waited.
    /// `on_cpu`: the number of the [`ON_CPU_FRAME`] piece.
    fn wall_lines(&self, group: &Group, on_cpu: u32) -> Vec<(lines::Line, u64)> {
        let us_per_sample = self.options.wall_us_per_sample.unwrap_or(0.0);
        let stacks = |kind| {
            self.files
                .get(&(kind, group.clone()))
                .into_iter()
                .flat_map(|file| file.stacks.iter())
        };
        let on_cpu_lines = stacks(ProfileKind::Cpu).map(|(line, &count)| {
            let wall: lines::Line = line.iter().copied().chain([on_cpu]).collect();
            (wall, (count as f64 * us_per_sample).round() as u64)
        });
        let off_cpu = stacks(ProfileKind::Offcpu).map(|(line, &micros)| (line.clone(), micros));
        on_cpu_lines.chain(off_cpu).collect()
    }

    /// The folded files and on-CPU samples that the last `index.json`
    /// written lists: what a summary of the recording must say.
    pub fn index_totals(&self) -> (usize, u64) {
        self.index_totals
    }

    /// After a write that failed for good (a full disk): removes every
    /// file this writer wrote that the last index it wrote does not list,
    /// so that the directory holds a whole recording or none, and keeps no
    /// space. Returns how many were removed.
    pub fn discard_unindexed(&mut self) -> usize {
        let stray: Vec<PathBuf> = self
            .written
            .iter()
            .filter(|rel| !self.indexed.contains(*rel))
            .cloned()
            .collect();
        let mut removed = 0;
        for rel in stray {
            if std::fs::remove_file(self.dir.join(&rel)).is_ok() {
                removed += 1;
            }
            self.written.remove(&rel);
            // Its directories, if nothing else is left in them.
            let mut dir = rel.parent();
            while let Some(parent) = dir.filter(|p| !p.as_os_str().is_empty()) {
                if std::fs::remove_dir(self.dir.join(parent)).is_err() {
                    break;
                }
                dir = parent.parent();
            }
        }
        removed
    }
}

#[cfg(test)]
mod tests {
    use std::{
        sync::Arc,
        time::{Duration, UNIX_EPOCH},
    };

    use super::*;
    use crate::{
        collect::off_cpu::OffCpuState,
        enrich::{Runtime, spark::SparkProcess},
        symbolize::{Frame, FrameKind},
    };

    fn sample(pid: u32, kind: SampleKind, leaf: &str, count: u64) -> SymbolizedSample {
        SymbolizedSample {
            process: Arc::new(ProcessInfo {
                pid,
                start_ticks: 7,
                name: "java".into(),
                kernel_thread: false,
                runtime: Runtime::Native,
                spark: SparkProcess::other(),
            }),
            tid: pid + 1,
            thread_name: "worker".into(),
            task: None,
            kind,
            frames: vec![Frame {
                name: leaf.into(),
                kind: FrameKind::User,
            }],
            count,
        }
    }

    fn header() -> index::Header {
        index::Header {
            tool: "sparkprof test".into(),
            host: "host".into(),
            frequency_hz: 99,
            stack_depth: 127,
            stats: Default::default(),
            runtimes: Default::default(),
            pipeline_cpu: Default::default(),
        }
    }

    /// A writer of processes' files (no task frames) into `dir`.
    fn writer(dir: &Path, wall_us_per_sample: Option<f64>) -> Writer {
        Writer::new(
            dir,
            WriteOptions {
                task_frames: false,
                wall_us_per_sample,
            },
        )
    }

    #[test]
    fn checkpoints_keep_folded_files_current_and_make_graphs_twins_and_the_table_later() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = writer(dir.path(), None);
        let start = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let drain = |at: u64, leaf: &str| SymbolizedDrain {
            start: start + Duration::from_secs(at),
            off_cpu_start: start + Duration::from_secs(at),
            end: start + Duration::from_secs(at + 1),
            samples: vec![sample(10, SampleKind::OnCpu, leaf, 3)],
            exited: Vec::new(),
        };
        let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
        let (folded, svg) = ("processes/java-10.cpu.folded", "processes/java-10.cpu.svg");
        // The twin's samples and comments; the table's rows.
        let twin = || {
            let bytes = std::fs::read(dir.path().join("processes/java-10.cpu.pb.gz")).unwrap();
            pprof::tests::samples_and_comments(&bytes)
        };
        let table_rows = || {
            let bytes = std::fs::read(dir.path().join(table::SAMPLES_TABLE)).unwrap();
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                bytes::Bytes::from(bytes),
            )
            .unwrap()
            .metadata()
            .file_metadata()
            .num_rows()
        };
        let still_recording = |(_, comments): &(i64, Vec<String>)| {
            comments.iter().any(|c| c.starts_with("still recording"))
        };
        // A file still changing at its first checkpoint gets a stand-in
        // for its graph and its twin: the index never lists one that is not
        // there. The first table is empty.
        writer.add(drain(0, "first_leaf"));
        writer.checkpoint(&header()).unwrap();
        assert!(read(folded).contains("first_leaf"));
        let stand_in = read(svg);
        assert!(stand_in.contains("Still recording") && !stand_in.contains("first_leaf"));
        assert_eq!(index_files(dir.path())[0]["svg"], svg);
        let first_twin = twin();
        assert!(
            first_twin.0 == 0 && still_recording(&first_twin),
            "{first_twin:?}"
        );
        assert_eq!(table_rows(), 0);
        // Unchanged at the next checkpoint: settled, its graph and twin
        // are made; the table waits for SVG_REDRAW.
        writer.checkpoint(&header()).unwrap();
        let drawn = read(svg);
        assert!(drawn.contains("first_leaf") && !drawn.contains("Still recording"));
        let settled_twin = twin();
        assert!(
            settled_twin.0 == 3 && !still_recording(&settled_twin),
            "{settled_twin:?}"
        );
        assert_eq!(table_rows(), 0);
        // Changed again: the folded file is rewritten, the graph and the
        // twin are not (made once until SVG_REDRAW or the end), not even
        // when the file settles again.
        writer.add(drain(1, "second_leaf"));
        writer.checkpoint(&header()).unwrap();
        assert!(read(folded).contains("second_leaf"));
        writer.checkpoint(&header()).unwrap();
        assert_eq!(read(svg), drawn);
        assert_eq!(twin().0, 3);
        // The end of the recording makes them from all it counted.
        writer.flush(&header()).unwrap();
        let last = read(svg);
        assert!(last.contains("first_leaf") && last.contains("second_leaf"));
        assert_eq!(index_files(dir.path())[0]["samples"], 6);
        assert_eq!(twin().0, 6);
        assert_eq!(table_rows(), 2);
        // Nothing changed since: the next flush draws nothing again.
        std::fs::remove_file(dir.path().join(svg)).unwrap();
        writer.flush(&header()).unwrap();
        assert!(!dir.path().join(svg).exists());
    }

    #[test]
    fn group_ids_are_held_once_and_bounded() {
        let mut ids = SharedIds::default();
        let app = ids.get("app-20261202-0001");
        assert!(Arc::ptr_eq(&app, &ids.get("app-20261202-0001")));
        assert_eq!(&*ids.get("7"), "7");
        // A daemon's writer sees application after application: it starts
        // over rather than grow, and gives the same IDs after.
        for n in 0..2 * MAX_SHARED_IDS {
            assert_eq!(&*ids.get(&format!("app-{n}")), format!("app-{n}"));
            assert!(ids.ids.len() <= MAX_SHARED_IDS);
        }
        assert_eq!(&*ids.get("app-20261202-0001"), "app-20261202-0001");
    }

    #[test]
    fn a_stand_in_graph_is_valid_svg_whatever_the_title() {
        let page = String::from_utf8(folded::stand_in_graph("a <b> & \"c\"")).unwrap();
        assert!(page.contains("a &lt;b&gt; &amp; &quot;c&quot;"));
        assert!(page.starts_with("<?xml") && page.trim_end().ends_with("</svg>"));
    }

    #[test]
    fn wall_clock_files_join_on_cpu_time_and_off_cpu_time() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = writer(dir.path(), Some(1e6 / 99.0));
        let start = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let sleep = SampleKind::OffCpu(OffCpuState::Sleep);
        writer.add(SymbolizedDrain {
            start,
            off_cpu_start: start,
            end: start + Duration::from_secs(1),
            samples: vec![
                sample(10, SampleKind::OnCpu, "spin", 3),
                sample(10, sleep, "[off-cpu: sleep]", 5_000),
                // No off-CPU time in this process: no wall-clock file.
                sample(20, SampleKind::OnCpu, "spin", 2),
            ],
            exited: Vec::new(),
        });
        writer.flush(&header()).unwrap();

        let wall =
            std::fs::read_to_string(dir.path().join("processes/java-10.wall.folded")).unwrap();
        assert_eq!(
            wall,
            "java [10];worker;[off-cpu: sleep] 5000\njava [10];worker;spin;[on-cpu] 30303\n"
        );
        assert!(dir.path().join("processes/java-10.wall.svg").exists());
        let cpu = std::fs::read_to_string(dir.path().join("processes/java-10.cpu.folded")).unwrap();
        assert_eq!(cpu, "java [10];worker;spin 3\n");
        assert!(!dir.path().join("processes/java-20.wall.folded").exists());

        let index: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("index.json")).unwrap()).unwrap();
        let files = index["files"].as_array().unwrap();
        let kinds: Vec<(&str, &str, u64)> = files
            .iter()
            .map(|f| {
                (
                    f["path"].as_str().unwrap(),
                    f["unit"].as_str().unwrap(),
                    f["samples"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("processes/java-10.cpu.folded", "samples", 3),
                ("processes/java-10.offcpu.folded", "microseconds", 5_000),
                ("processes/java-10.wall.folded", "microseconds", 35_303),
                ("processes/java-20.cpu.folded", "samples", 2),
            ]
        );
        assert_eq!(
            files[2]["kind"], "wall",
            "the wall-clock file's kind in index.json"
        );
    }

    #[test]
    fn wall_clock_files_follow_their_group_once_it_settles_and_are_listed_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = writer(dir.path(), Some(100.0));
        let start = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let sleep = SampleKind::OffCpu(OffCpuState::Sleep);
        let drain = |at: u64, leaf: &str| SymbolizedDrain {
            start: start + Duration::from_secs(at),
            off_cpu_start: start + Duration::from_secs(at),
            end: start + Duration::from_secs(at + 1),
            samples: vec![
                sample(10, SampleKind::OnCpu, leaf, 2),
                sample(10, sleep, "[off-cpu: sleep]", 1_000),
            ],
            exited: Vec::new(),
        };
        let read = |kind: &str| {
            std::fs::read_to_string(dir.path().join(format!("processes/java-10.{kind}.folded")))
                .unwrap()
        };
        // What index.json says of a kind's file: its samples and end.
        let listed = |kind: &str| {
            let file = index_files(dir.path())
                .into_iter()
                .find(|file| file["kind"] == kind)
                .unwrap();
            (file["samples"].as_u64().unwrap(), file["end"].clone())
        };
        let sum = |folded: &str| -> u64 {
            folded
                .lines()
                .map(|line| line.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
                .sum()
        };
        let wall_listed = || {
            index_files(dir.path())
                .iter()
                .any(|file| file["kind"] == "wall")
        };
        let wall_path = dir.path().join("processes/java-10.wall.folded");
        // While its group changes, the on- and off-CPU files are written
        // at every checkpoint, and the wall-clock file waits: not there,
        // not listed.
        writer.add(drain(0, "first"));
        writer.checkpoint(&header()).unwrap();
        assert!(read("cpu").contains("first") && !wall_path.exists() && !wall_listed());
        // Settled (nothing new since the last checkpoint): written.
        writer.checkpoint(&header()).unwrap();
        let first = read("wall");
        assert_eq!(
            first,
            "java [10];worker;[off-cpu: sleep] 1000\njava [10];worker;first;[on-cpu] 200\n"
        );
        assert_eq!(listed("wall").0, 1_200);
        let first_end = listed("wall").1;
        // Its group changes again: the on- and off-CPU files are
        // rewritten, the wall-clock file waits, listed as it is on disk.
        writer.add(drain(1, "second"));
        writer.checkpoint(&header()).unwrap();
        assert!(read("cpu").contains("second") && read("offcpu").contains("2000"));
        assert_eq!(read("wall"), first);
        assert_eq!(listed("wall"), (sum(&first), first_end.clone()));
        assert_eq!(listed("cpu").0, 4);
        // Settled again: rewritten.
        writer.checkpoint(&header()).unwrap();
        let settled = read("wall");
        assert_eq!(
            settled,
            "java [10];worker;[off-cpu: sleep] 2000\n\
             java [10];worker;first;[on-cpu] 200\n\
             java [10];worker;second;[on-cpu] 200\n"
        );
        assert_eq!(listed("wall").0, sum(&settled));
        assert_ne!(listed("wall").1, first_end);
        // The end of the recording writes it whatever its group does.
        writer.add(drain(2, "third"));
        writer.checkpoint(&header()).unwrap();
        assert_eq!(read("wall"), settled);
        writer.flush(&header()).unwrap();
        let last = read("wall");
        assert!(last.contains("third;[on-cpu] 200"), "{last}");
        assert_eq!(listed("wall").0, sum(&last));
        assert_eq!(listed("wall").0, 3_600);
    }

    /// A process of `name` started at `started` (as the start ticks of
    /// /proc would say), or gone before it was read (`None`).
    fn process(pid: u32, name: &str, started: Option<SystemTime>) -> Arc<ProcessInfo> {
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
        let start_ticks = started.map_or(0, |started| {
            let boot = SystemTime::now()
                - Duration::from_secs_f64(
                    std::fs::read_to_string("/proc/uptime")
                        .unwrap()
                        .split_whitespace()
                        .next()
                        .unwrap()
                        .parse()
                        .unwrap(),
                );
            let ticks = started.duration_since(boot).unwrap().as_secs_f64() * hz as f64;
            ticks.round() as u64
        });
        Arc::new(ProcessInfo {
            pid,
            start_ticks,
            name: name.into(),
            kernel_thread: false,
            runtime: Runtime::Native,
            spark: SparkProcess::other(),
        })
    }

    fn on_cpu(process: &Arc<ProcessInfo>, leaf: &str, count: u64) -> SymbolizedSample {
        SymbolizedSample {
            process: process.clone(),
            tid: process.pid,
            thread_name: process.name.as_str().into(),
            task: None,
            kind: SampleKind::OnCpu,
            frames: vec![Frame {
                name: leaf.into(),
                kind: FrameKind::User,
            }],
            count,
        }
    }

    fn index_files(dir: &Path) -> Vec<serde_json::Value> {
        let index: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("index.json")).unwrap()).unwrap();
        index["files"].as_array().unwrap().clone()
    }

    #[test]
    fn short_lived_processes_are_summed_per_program() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = Writer::new(dir.path(), WriteOptions::default());
        let now = SystemTime::now();
        let drain_start = now - Duration::from_secs(1);
        // Three runs of `true` that lived a blink (one gone before it was
        // read), and a daemon that started a minute ago.
        let blinks = [
            process(101, "true", Some(drain_start + Duration::from_millis(100))),
            process(102, "true", Some(drain_start + Duration::from_millis(300))),
            process(103, "true", None),
        ];
        let daemon = process(200, "daemon", Some(now - Duration::from_secs(60)));
        let mut samples: Vec<SymbolizedSample> =
            blinks.iter().map(|p| on_cpu(p, "main", 2)).collect();
        samples.push(on_cpu(&daemon, "serve", 5));
        writer.add(SymbolizedDrain {
            start: drain_start,
            off_cpu_start: drain_start,
            end: now,
            samples,
            exited: blinks.to_vec(),
        });
        writer.flush(&header()).unwrap();

        let files = index_files(dir.path());
        let summary: Vec<(&str, u64, Option<u64>, Option<u64>)> = files
            .iter()
            .map(|f| {
                (
                    f["path"].as_str().unwrap(),
                    f["samples"].as_u64().unwrap(),
                    f["pid"].as_u64(),
                    f["processes"].as_u64(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("processes/daemon-200.cpu.folded", 5, Some(200), None),
                ("short-lived/true.cpu.folded", 6, None, Some(3)),
            ]
        );
        let folded =
            std::fs::read_to_string(dir.path().join("short-lived/true.cpu.folded")).unwrap();
        assert_eq!(folded, "true [short-lived];true;main 6\n");
        assert!(dir.path().join("short-lived/true.cpu.svg").exists());
    }

    #[test]
    fn a_young_process_waits_until_it_is_known_to_live_long() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = Writer::new(dir.path(), WriteOptions::default());
        let start = SystemTime::now() - Duration::from_secs(3);
        let young = process(300, "server", Some(start + Duration::from_millis(500)));
        let soon_gone = process(301, "server", Some(start + Duration::from_millis(200)));
        writer.add(SymbolizedDrain {
            start,
            off_cpu_start: start,
            end: start + Duration::from_secs(1),
            samples: vec![on_cpu(&young, "boot", 1), on_cpu(&soon_gone, "boot", 1)],
            exited: Vec::new(),
        });
        // Neither is known to be long-lived yet: neither is written.
        writer.flush(&header()).unwrap();
        assert!(index_files(dir.path()).is_empty());

        // One is still there 1.5 s after it started; the other is gone.
        writer.add(SymbolizedDrain {
            start: start + Duration::from_secs(1),
            off_cpu_start: start + Duration::from_secs(1),
            end: start + Duration::from_secs(2),
            samples: vec![on_cpu(&young, "serve", 3)],
            exited: vec![soon_gone.clone()],
        });
        writer.flush(&header()).unwrap();
        let paths: Vec<String> = index_files(dir.path())
            .iter()
            .map(|f| f["path"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            paths,
            [
                "processes/server-300.cpu.folded",
                "short-lived/server.cpu.folded"
            ]
        );
        // Its early samples went with it.
        let own =
            std::fs::read_to_string(dir.path().join("processes/server-300.cpu.folded")).unwrap();
        assert_eq!(
            own,
            "server [300];server;boot 1\nserver [300];server;serve 3\n"
        );

        // A process the recording outlives before it is a second old is
        // settled as short-lived at the end.
        let last = process(302, "server", Some(start + Duration::from_millis(2_800)));
        writer.add(SymbolizedDrain {
            start: start + Duration::from_secs(2),
            off_cpu_start: start + Duration::from_secs(2),
            end: start + Duration::from_secs(3),
            samples: vec![on_cpu(&last, "boot", 1)],
            exited: Vec::new(),
        });
        writer.settle();
        writer.flush(&header()).unwrap();
        let short = index_files(dir.path())
            .into_iter()
            .find(|f| f["path"] == "short-lived/server.cpu.folded")
            .unwrap();
        assert_eq!(
            (short["samples"].as_u64(), short["processes"].as_u64()),
            (Some(2), Some(2))
        );
    }
}
