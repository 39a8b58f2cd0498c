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
//! DIR/processes/<name>-<pid>.cpu.folded            every other user process
//! DIR/kernel/kernel-threads.cpu.folded             all kernel threads together
//! ```
//! With off-CPU recording, each group with off-CPU time also has a
//! `.offcpu.folded` file (microseconds blocked) and a `.wall.folded` file
//! (on-CPU samples as time under an `[on-cpu]` leaf, plus the off-CPU
//! time). Each `.folded` file has its flame graph beside it (`.svg`). `<app>` is
//! the application ID (`unknown-app` when it cannot be found, e.g. a driver
//! whose executors are not on this host).
//! # Folded lines
//! Brendan Gregg's format: frames root first, separated by `;`, a space, the
//! count. The first frame is the process (`name [pid]`), the second the thread
//! (its name), then the stack from the outermost frame to the leaf; kernel
//! frames carry a `_[k]` suffix; `[truncated]` at the root of the stack marks
//! a stack cut at the depth limit. Counts are samples (on-CPU files) or
//! microseconds (off-CPU and wall-clock files).

pub mod atomic;
pub mod folded;
pub mod index;
pub mod output_dir;

use std::{
    collections::HashMap,
    io,
    path::{Path, PathBuf},
    time::SystemTime,
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

    fn suffix(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Offcpu => "offcpu",
            Self::Wall => "wall",
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
        app: String,
        executor: String,
        stage: u32,
    },
    /// The other samples of a Spark JVM (executor or driver): GC, shuffle,
    /// RPC, idle task threads.
    SparkJvm {
        app: String,
        executor: Option<String>,
        role: Role,
    },
    /// A PySpark daemon or worker of an executor.
    SparkPython {
        app: String,
        executor: String,
        pid: u32,
        start_ticks: u64,
    },
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

/// The thread frame of all task samples when tasks are not split.
const TASK_THREAD_FRAME: &str = "Executor task launch worker";

/// Directory name for an application ID.
fn app_dir(app: &str) -> String {
    folded::file_stem(app)
}

fn app_of(process: &ProcessInfo) -> String {
    process
        .spark
        .app_id
        .clone()
        .unwrap_or_else(|| UNKNOWN_APP.to_owned())
}

/// `<app>` when the application ID is not known.
const UNKNOWN_APP: &str = "unknown-app";

impl Group {
    /// The file a sample belongs to.
    fn of(sample: &SymbolizedSample) -> Self {
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
                        app: app_of(process),
                        executor: executor.clone(),
                        stage,
                    };
                }
                Self::SparkJvm {
                    app: app_of(process),
                    executor: spark.executor_id.clone(),
                    role: spark.role,
                }
            }
            Role::PysparkDaemon | Role::PysparkWorker if spark.executor_id.is_some() => {
                Self::SparkPython {
                    app: app_of(process),
                    executor: spark.executor_id.clone().unwrap_or_default(),
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
    fn base_path(&self, sample: &SymbolizedSample) -> PathBuf {
        let executor_dir = |app: &str, executor: &str| {
            PathBuf::from("spark")
                .join(app_dir(app))
                .join(format!("executor-{}", folded::file_stem(executor)))
        };
        match self {
            Self::KernelThreads => PathBuf::from("kernel/kernel-threads"),
            Self::Process { pid, .. } => PathBuf::from("processes")
                .join(format!("{}-{pid}", folded::file_stem(&sample.process.name))),
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
    fn meta(&self, sample: &SymbolizedSample) -> index::GroupMeta {
        let process = &sample.process;
        match self {
            Self::KernelThreads => index::GroupMeta {
                pid: None,
                process: Some("[kernel threads]".into()),
                role: "kernel",
                app_id: None,
                executor_id: None,
                stage_id: None,
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
    stacks: HashMap<String, u64>,
    dirty: bool,
    /// Written whole (folded and SVG) at least once: only then does the
    /// index list it.
    on_disk: bool,
}

impl OutputFile {
    fn add(&mut self, line: String, count: u64, start: SystemTime, end: SystemTime) {
        *self.stacks.entry(line).or_insert(0) += count;
        self.entry.samples += count;
        self.entry.extend_time(start, end);
        self.dirty = true;
    }
}

/// The write stage: folded aggregates per file, flushed on demand.
pub struct Writer {
    dir: PathBuf,
    options: WriteOptions,
    files: HashMap<(ProfileKind, Group), OutputFile>,
    used_paths: HashMap<PathBuf, (ProfileKind, Group)>,
    start: Option<SystemTime>,
    end: Option<SystemTime>,
    /// Files this writer put on disk, relative to `dir`.
    written: std::collections::HashSet<PathBuf>,
    /// Files the last index it wrote lists (itself included).
    indexed: std::collections::HashSet<PathBuf>,
    /// Folded files and on-CPU samples the last index it wrote lists.
    index_totals: (usize, u64),
}

impl Writer {
    /// A writer into `dir` (created on first flush).
    pub fn new(dir: impl Into<PathBuf>, options: WriteOptions) -> Self {
        Self {
            dir: dir.into(),
            options,
            files: HashMap::new(),
            used_paths: HashMap::new(),
            start: None,
            end: None,
            written: Default::default(),
            indexed: Default::default(),
            index_totals: (0, 0),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Adds a drain's samples to their files.
    pub fn add(&mut self, drain: SymbolizedDrain) {
        self.start = Some(self.start.map_or(drain.start, |s| s.min(drain.start)));
        self.end = Some(self.end.map_or(drain.end, |e| e.max(drain.end)));
        for sample in drain.samples {
            self.add_sample(&sample, (drain.start, drain.end));
        }
    }

    fn add_sample(&mut self, sample: &SymbolizedSample, (start, end): (SystemTime, SystemTime)) {
        let group = Group::of(sample);
        let thread = match (&group, &sample.task) {
            (Group::SparkStage { .. }, Some(task)) if self.options.task_frames => task.task_label(),
            (Group::SparkStage { .. }, _) => TASK_THREAD_FRAME.to_owned(),
            _ => sample.thread_name.clone(),
        };
        let line = folded::stack_line(sample, &thread);
        if let Some(us_per_sample) = self.options.wall_us_per_sample {
            let (wall_line, micros) = match sample.kind {
                SampleKind::OnCpu => (
                    format!("{line};{ON_CPU_FRAME}"),
                    (sample.count as f64 * us_per_sample).round() as u64,
                ),
                SampleKind::OffCpu(_) => (line.clone(), sample.count),
            };
            self.file(ProfileKind::Wall, &group, sample, start)
                .add(wall_line, micros, start, end);
        }
        self.file(ProfileKind::of(sample.kind), &group, sample, start)
            .add(line, sample.count, start, end);
    }

    /// The file of `kind` for `group`, created on its first sample.
    fn file(
        &mut self,
        kind: ProfileKind,
        group: &Group,
        sample: &SymbolizedSample,
        start: SystemTime,
    ) -> &mut OutputFile {
        let key = (kind, group.clone());
        if !self.files.contains_key(&key) {
            let rel_path = self.unique_path(kind, group, sample);
            let entry = index::FileEntry::new(&rel_path, kind, &group.meta(sample), start, start);
            self.used_paths.insert(rel_path.clone(), key.clone());
            self.files.insert(
                key.clone(),
                OutputFile {
                    rel_path,
                    entry,
                    stacks: HashMap::new(),
                    dirty: true,
                    on_disk: false,
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

    fn unique_path(&self, kind: ProfileKind, group: &Group, sample: &SymbolizedSample) -> PathBuf {
        let base = group.base_path(sample);
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

    /// Writes every file changed since the last flush (folded + SVG), then,
    /// if all of them were written, `index.json`. Nothing is forgotten on
    /// error: the aggregates stay in memory and the next flush tries again.
    pub fn flush(&mut self, header: &index::Header) -> io::Result<usize> {
        let mut written = 0;
        let mut first_error = None;
        let hidden: Vec<(ProfileKind, Group)> = self
            .files
            .keys()
            .filter(|key| !self.shown(key))
            .cloned()
            .collect();
        for (key, file) in &mut self.files {
            if !file.dirty || hidden.contains(key) {
                continue;
            }
            let text = folded::render(&file.stacks);
            let svg_rel = file.rel_path.with_extension("svg");
            let result =
                atomic::write_atomic(&self.dir, &file.rel_path, text.as_bytes()).and_then(|()| {
                    self.written.insert(file.rel_path.clone());
                    let svg = folded::flame_graph(&text, &file.entry.title(), file.entry.unit)?;
                    atomic::write_atomic(&self.dir, &svg_rel, &svg)
                });
            match result {
                Ok(()) => {
                    self.written.insert(svg_rel);
                    file.dirty = false;
                    file.on_disk = true;
                    written += 1;
                }
                Err(err) => {
                    debug!("{}: {err}", file.rel_path.display());
                    first_error.get_or_insert(err);
                }
            }
        }
        // An index only for a whole recording: after a failed file (a full
        // disk) the last index stays, and the next flush tries again.
        if let Some(err) = first_error {
            return Err(err);
        }
        // Only files that are on disk whole: a reader of the index never
        // meets a missing one.
        let mut entries: Vec<index::FileEntry> = self
            .files
            .iter()
            .filter(|(key, f)| !hidden.contains(key) && f.on_disk)
            .map(|(_, f)| f.entry.clone())
            .collect();
        entries.sort_by(|a, b| a.path.cmp(&b.path));
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
            .flat_map(|entry| [PathBuf::from(&entry.path), PathBuf::from(&entry.svg)])
            .chain([index_rel])
            .collect();
        Ok(written)
    }
}

impl Writer {
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
            jit: Default::default(),
            threads: Default::default(),
        }
    }

    #[test]
    fn wall_clock_files_join_on_cpu_time_and_off_cpu_time() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = Writer::new(
            dir.path(),
            WriteOptions {
                task_frames: false,
                wall_us_per_sample: Some(1e6 / 99.0),
            },
        );
        let start = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let sleep = SampleKind::OffCpu(OffCpuState::Sleep);
        writer.add(SymbolizedDrain {
            start,
            end: start + Duration::from_secs(1),
            samples: vec![
                sample(10, SampleKind::OnCpu, "spin", 3),
                sample(10, sleep, "[off-cpu: sleep]", 5_000),
                // No off-CPU time in this process: no wall-clock file.
                sample(20, SampleKind::OnCpu, "spin", 2),
            ],
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
}
