//! Section 5 of `cargo xtask bench`: Spark (issue 4).
//!
//! 1. The multi-stage PySpark job of the end-to-end test
//!    (`tests/workloads/spark_job.py`) on a real standalone cluster (the
//!    tests' harness, `sparkprof_tests::spark`), run without and with a
//!    whole-host `sparkprof record` at 99 Hz, interleaved in pairs whose
//!    order alternates. The time is the driver's own, from the event log:
//!    first job submitted to last job completed. The cluster's CPU over
//!    each job (a cgroup), and where it went (the threads that exited
//!    during it, by name: see [`super::exits`]). What sparkprof's BPF
//!    programs ran in the kernel during each profiled job
//!    (`kernel.bpf_stats_enabled`): the part of its cost to the job that is
//!    measured exactly, where the pairs' difference is a noisy estimate.
//! 2. Stage attribution of the fake executor
//!    (`tests/workloads/spark/CoarseGrainedExecutorBackend.java`, the JVM of
//!    `tests/tests/stages.rs`): the share of each stage's hot method's
//!    samples that landed in that stage's file, with the rename uprobe and
//!    with `--thread-names dumps`.
//! 3. What a thread dump (`jcmd Thread.print`, through the perf-maps attach
//!    client as sparkprof takes it) costs the JVM: its safepoints' pause
//!    from HotSpot's own safepoint log, and the dump's round trip.

use std::{
    collections::BTreeMap,
    fs,
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use sparkprof_tests::{
    Recorder, Recording,
    cgroup::Cgroup,
    fake_executor::FakeExecutor,
    spark::{Cluster, EventLog, Job, SparkInstall},
};

use super::{
    Bench, KernelRuns, Profiler, Running, SysctlGuard, Tool, cpu_time, exits, mean_and_sd, median,
    met, pause, progress, spread_percent, verdict_below, wait_for_quiet_host,
    wait_for_quiet_host_within,
};
use crate::workspace_root;

/// Interleaved (unprofiled, profiled) job pairs unless `--runs` says otherwise.
pub const DEFAULT_PAIRS: usize = 3;
/// The job and its size: `ROUNDS ROWS` as in tests/tests/spark.rs.
const JOB_SCRIPT: &str = "spark_job.py";
pub(super) const JOB_ARGS: [&str; 2] = ["3", "2000000"];
const JOB_TIMEOUT: Duration = Duration::from_secs(600);
/// sparkprof's defaults: whole host at 99 Hz.
pub(super) const JOB_HZ: u32 = 99;
/// The fake executor's run and sampling rate for the attribution figure.
const STAGES_SECS: u32 = 20;
const STAGES_HZ: u32 = 199;
/// Thread dumps taken for the safepoint figure, this far apart.
const DUMPS: usize = 30;
const DUMP_SPACING: Duration = Duration::from_millis(500);
/// The safepoints of one `Thread.print` in HotSpot 17: the dump itself,
/// then the JNI summary and the deadlock check.
const DUMP_SAFEPOINTS: [&str; 3] = ["PrintThreads", "PrintJNI", "FindDeadlocks"];
/// Parts 2 and 3 wait this long for an idle host, then measure anyway and
/// say so (attribution does not depend on it; pause times a little).
const QUIET_PATIENCE: Duration = Duration::from_secs(15);
/// Targets (issue 4, see BENCHMARKS.md).
pub const TARGET_SLOWDOWN_PERCENT: f64 = 2.0;
pub const TARGET_ACCURACY_PERCENT: f64 = 99.0;
/// The hot method of each stage, by stage ID (as in tests/tests/stages.rs).
const STAGE_METHODS: [&str; 4] = [
    "stageZeroHot",
    "stageOneHot",
    "stageTwoHot",
    "stageThreeHot",
];

/// Section 5's figures.
pub struct SparkReport {
    pub runtime: Runtime,
    pub attribution: Vec<Attribution>,
    pub dumps: Dumps,
    /// Other processes' CPU (% of one core) when parts 2 and 3 began, if
    /// the host was not idle then.
    pub busy: Option<f64>,
    /// `java -version`'s first line.
    pub java: String,
}

pub fn measure(bench: &Bench, pairs: usize) -> Result<SparkReport> {
    let runtime = job_pairs(
        bench,
        pairs,
        Profiler {
            tool: Tool::Sparkprof,
            hz: JOB_HZ,
        },
    )?;
    let dir = bench.scratch.join("spark");
    fs::create_dir_all(&dir)?;
    let busy = wait_for_quiet_host_within(QUIET_PATIENCE)?.err();
    if let Some(busy) = busy {
        progress(&format!(
            "[spark] the host stays busy ({busy:.0} % of one core): measuring anyway, noted in the report"
        ));
    }
    let classes =
        FakeExecutor::compile(&dir.join("classes")).context("compiling the fake executor")?;
    let mut attribution = Vec::new();
    for dumps_only in [false, true] {
        attribution.push(attribution_of(&classes, dumps_only)?);
    }
    let dumps = dump_cost(&classes, &dir)?;
    let java = Command::new("java").arg("-version").output()?;
    let java = String::from_utf8_lossy(&java.stderr)
        .lines()
        .next()
        .unwrap_or("java")
        .trim()
        .to_owned();
    Ok(SparkReport {
        runtime,
        attribution,
        dumps,
        busy,
        java,
    })
}

// ---------------------------------------------------------------------------
// 1. The job's runtime.

/// One run of the job.
#[derive(Clone, Copy)]
pub struct JobRun {
    /// First job submitted to last job completed (driver's clock), s.
    pub jobs_s: f64,
    /// Application start to end (includes the executors' start), s.
    pub app_s: f64,
    /// sparkprof's utime + stime while the job ran, and that window.
    pub sparkprof_cpu: Option<(Duration, Duration)>,
    /// Where sparkprof's CPU went over its whole run.
    pub stages: Option<SparkprofStages>,
    /// What its output names, when it is a recording.
    pub names: Option<Names>,
    /// What sparkprof's BPF programs ran in the kernel while the job ran:
    /// CPU they take from whatever thread they interrupt or trace, the
    /// job's above all.
    pub kernel: Option<KernelRuns>,
    /// CPU time of the cluster's cgroup over the job: driver, executors,
    /// Python workers (and the idle Master and Worker).
    pub job_cpu: Duration,
    /// CPU seconds of the threads that exited meanwhile (the executors',
    /// the Python workers', the driver's), by [`exits::CLASSES`].
    pub threads_cpu: [f64; exits::CLASSES.len()],
}

/// sparkprof's CPU over one whole run (start to exit) and, of it, what
/// each pipeline stage took (its index.json's `pipeline_cpu`).
#[derive(Clone, Copy, Default)]
pub struct SparkprofStages {
    pub whole_s: f64,
    /// Of `whole_s`: before the job (its start: loading the programs,
    /// finding the host's processes) and after it (its last drain, the
    /// final writing of every file with its flame graph and pprof twin,
    /// detaching). A daemon starts once, but it writes each application's
    /// files (at the end of each window) as `record` does at its stop.
    pub before_s: f64,
    pub after_s: f64,
    /// Seconds per stage, in [`STAGES`]' order.
    pub stage_s: [f64; STAGES.len()],
}

/// The stages of index.json's `pipeline_cpu`.
pub const STAGES: [&str; 5] = ["symbolize", "follow", "collect", "write", "enrich"];

impl SparkprofStages {
    /// `window`: sparkprof's CPU when the job started and when it ended.
    fn read(
        whole: Duration,
        window: (Duration, Duration),
        index: Option<&serde_json::Value>,
    ) -> Result<Self> {
        let cpu = index
            .map(|index| &index["pipeline_cpu"])
            .context("sparkprof's index.json is missing")?;
        let mut stage_s = [0.0; STAGES.len()];
        for (seconds, stage) in stage_s.iter_mut().zip(STAGES) {
            *seconds = cpu[format!("{stage}_us")]
                .as_u64()
                .with_context(|| format!("index.json pipeline_cpu has no {stage}_us: {cpu}"))?
                as f64
                / 1e6;
        }
        Ok(Self {
            whole_s: whole.as_secs_f64(),
            before_s: window.0.as_secs_f64(),
            after_s: whole.saturating_sub(window.1).as_secs_f64(),
            stage_s,
        })
    }

    fn add(self, other: Self) -> Self {
        let mut stage_s = self.stage_s;
        for (sum, s) in stage_s.iter_mut().zip(other.stage_s) {
            *sum += s;
        }
        Self {
            whole_s: self.whole_s + other.whole_s,
            before_s: self.before_s + other.before_s,
            after_s: self.after_s + other.after_s,
            stage_s,
        }
    }

    /// `symbolize 8.1 s (61 %), ...; outside the drains 1.0 s (8 %)`.
    fn markdown(&self) -> String {
        let share = |s: f64| 100.0 * s / self.whole_s.max(f64::MIN_POSITIVE);
        let mut parts: Vec<String> = STAGES
            .iter()
            .zip(self.stage_s)
            .map(|(stage, s)| format!("{stage} {s:.2} s ({:.0} %)", share(s)))
            .collect();
        let outside = self.whole_s - self.stage_s.iter().sum::<f64>();
        parts.push(format!(
            "outside the drains (start, file rewrites, exit) {outside:.2} s ({:.0} %)",
            share(outside)
        ));
        format!(
            "{}. Before the job (its start) {:.2} s ({:.0} %); after the job (the last drain, \
             writing every file with its flame graph, exit) {:.2} s ({:.0} %)",
            parts.join(", "),
            self.before_s,
            share(self.before_s),
            self.after_s,
            share(self.after_s)
        )
    }
}

/// What a recording of the job names, from its files: what a change
/// that makes sparkprof cheaper must keep (issue 19: the JIT share named,
/// stage attribution, Python frames).
#[derive(Clone, Copy, Default)]
pub struct Names {
    /// index.json `jit`: Java frames of compiled code, and those named.
    pub jit_frames: u64,
    pub jit_named: u64,
    /// On-CPU samples, and those in a stage's files.
    pub cpu_samples: u64,
    pub stage_samples: u64,
    /// On-CPU samples of Python processes (role `python`, `pyspark-daemon`
    /// or `pyspark-worker`), and those with a Python frame
    /// (`function (file.py:line)`) in their stack.
    pub python_samples: u64,
    pub python_framed: u64,
}

impl Names {
    /// Reads them from the recording in `output`, whose index.json is
    /// `index`.
    pub(super) fn read(output: &Path, index: &serde_json::Value) -> Result<Self> {
        let count = |value: &serde_json::Value, what: &str| {
            value
                .as_u64()
                .with_context(|| format!("index.json has no {what}"))
        };
        let mut names = Self {
            jit_frames: count(&index["jit"]["jit_frames"], "jit.jit_frames")?,
            jit_named: count(&index["jit"]["jit_frames_named"], "jit.jit_frames_named")?,
            ..Self::default()
        };
        let files = index["files"]
            .as_array()
            .context("index.json has no files")?;
        for file in files.iter().filter(|f| f["kind"] == "cpu") {
            let samples = count(&file["samples"], "a file's samples")?;
            names.cpu_samples += samples;
            if !file["stage_id"].is_null() {
                names.stage_samples += samples;
            }
            let python = matches!(
                file["role"].as_str(),
                Some("python" | "pyspark-daemon" | "pyspark-worker")
            );
            if !python {
                continue;
            }
            let path = output.join(file["path"].as_str().context("a file without its path")?);
            let folded =
                fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            for line in folded.lines() {
                let (stack, samples) = line
                    .rsplit_once(' ')
                    .with_context(|| format!("{}: a line without its count", path.display()))?;
                let samples: u64 = samples.parse()?;
                names.python_samples += samples;
                if stack
                    .split(';')
                    .any(|frame| frame.contains(".py:") || frame.ends_with(".py)"))
                {
                    names.python_framed += samples;
                }
            }
        }
        Ok(names)
    }

    fn add(self, other: Self) -> Self {
        Self {
            jit_frames: self.jit_frames + other.jit_frames,
            jit_named: self.jit_named + other.jit_named,
            cpu_samples: self.cpu_samples + other.cpu_samples,
            stage_samples: self.stage_samples + other.stage_samples,
            python_samples: self.python_samples + other.python_samples,
            python_framed: self.python_framed + other.python_framed,
        }
    }

    /// `JIT frames named 99.9 % (..), ...`.
    fn markdown(&self) -> String {
        format!(
            "JIT frames named {:.2} % ({} of {}); on-CPU samples in a stage's files {:.1} % \
             ({} of {}); Python processes' on-CPU samples with a Python frame {:.1} % ({} of {})",
            pct(self.jit_named, self.jit_frames),
            self.jit_named,
            self.jit_frames,
            pct(self.stage_samples, self.cpu_samples),
            self.stage_samples,
            self.cpu_samples,
            pct(self.python_framed, self.python_samples),
            self.python_framed,
            self.python_samples
        )
    }
}

pub struct Pair {
    pub profiled_first: bool,
    pub unprofiled: JobRun,
    pub profiled: JobRun,
}

impl Runtime {
    /// sparkprof's CPU while the profiled jobs ran, and their time, in
    /// seconds summed over the pairs.
    fn sparkprof_cpu_and_wall(&self) -> (f64, f64) {
        self.pairs
            .iter()
            .filter_map(|p| p.profiled.sparkprof_cpu)
            .fold((0.0, 0.0), |(c, w), (cpu, wall)| {
                (c + cpu.as_secs_f64(), w + wall.as_secs_f64())
            })
    }

    /// sparkprof's CPU while the profiled jobs ran, % of one core.
    pub fn sparkprof_cpu_percent(&self) -> Option<f64> {
        let (cpu, wall) = self.sparkprof_cpu_and_wall();
        (wall > 0.0).then(|| 100.0 * cpu / wall)
    }
}

impl Pair {
    fn ratio(&self) -> f64 {
        self.profiled.jobs_s / self.unprofiled.jobs_s
    }

    fn app_ratio(&self) -> f64 {
        self.profiled.app_s / self.unprofiled.app_s
    }

    fn cpu_ratio(&self) -> f64 {
        self.profiled.job_cpu.as_secs_f64() / self.unprofiled.job_cpu.as_secs_f64()
    }
}

pub struct Runtime {
    pub pairs: Vec<Pair>,
    pub stages: usize,
    pub tasks: u32,
    /// What the "with" runs ran beside the job.
    profiler: Profiler,
}

/// Interleaved pairs of the Spark job without and with `profiler` (a
/// sparkprof variant) on a fresh standalone cluster.
pub(super) fn job_pairs(bench: &Bench, pairs: usize, profiler: Profiler) -> Result<Runtime> {
    job_pairs_then(bench, pairs, profiler, |_| Ok(())).map(|(runtime, ())| runtime)
}

/// [`job_pairs`], then `then` on the same cluster before it stops.
pub(super) fn job_pairs_then<T>(
    bench: &Bench,
    pairs: usize,
    profiler: Profiler,
    then: impl FnOnce(&mut Cluster) -> Result<T>,
) -> Result<(Runtime, T)> {
    let install = spark_install(bench)?;
    wait_for_quiet_host()?;
    progress("[spark] starting a standalone Master and Worker");
    // Everything the cluster runs (executors, Python workers, drivers)
    // in one cgroup, for the CPU the job costs.
    let group = Cgroup::create("sparkprof-bench-job")?;
    let mut cluster = Cluster::start_in(&install, &group);
    // Let the daemons settle after their start (JIT, class loading).
    wait_for_quiet_host()?;
    let mut result = Runtime {
        pairs: Vec::new(),
        stages: 0,
        tasks: 0,
        profiler,
    };
    for pair in 0..pairs {
        // without, with, with, without, ...: neither side always goes first.
        let profiled_first = pair % 2 == 1;
        let mut runs = [None, None];
        for profiled in [profiled_first, !profiled_first] {
            let label = if profiled { "with" } else { "without" };
            progress(&format!(
                "[spark] pair {}/{pairs}: the job {label} {profiler}",
                pair + 1
            ));
            let running = match profiled {
                true => Some(Running::start(profiler, bench, "spark")?),
                false => None,
            };
            // The kernel counts its BPF programs' runs and time only while
            // asked to (about 20 ns a run): during the job, when profiled.
            let bpf_stats = match &running {
                Some(_) => Some(SysctlGuard::set("kernel/bpf_stats_enabled", "1")?),
                None => None,
            };
            let before = match &running {
                Some(r) => Some((
                    cpu_time(r.pid())?,
                    Instant::now(),
                    KernelRuns::read(r.pid())?,
                )),
                None => None,
            };
            let cluster_before = group.usage()?;
            let exits = exits::Listener::start()?;
            let job = run_job(&mut cluster);
            let (sparkprof_cpu, window, kernel) = match (&running, before) {
                (Some(r), Some((cpu, wall, runs))) => {
                    let now = cpu_time(r.pid())?;
                    let kernel = KernelRuns::read(r.pid())?.since(&runs);
                    (
                        Some((now - cpu, wall.elapsed())),
                        Some((cpu, now)),
                        Some(kernel),
                    )
                }
                _ => (None, None, None),
            };
            drop(bpf_stats);
            // The executors of the application exit after it: their last
            // CPU belongs to this job.
            pause(Duration::from_secs(2))?;
            let job_cpu = group.usage()?.saturating_sub(cluster_before);
            let threads_cpu = exits::by_class(&exits.stop()?);
            let mut names = None;
            let stages = match (running, window) {
                (Some(running), Some(window)) => {
                    let (exit, index, recorded) = running.stop_reading_index()?;
                    names = recorded;
                    Some(SparkprofStages::read(exit.cpu, window, index.as_ref())?)
                }
                _ => None,
            };
            let log = EventLog::read(&job.event_log);
            let run = JobRun {
                jobs_s: jobs_seconds(&job, &log)?,
                app_s: span_seconds(
                    &job,
                    log.app_start_ms,
                    log.app_end_ms,
                    "application start and end",
                )?,
                sparkprof_cpu,
                stages,
                names,
                kernel,
                job_cpu,
                threads_cpu,
            };
            result.stages = log.stage_names.len();
            result.tasks = log.stages.values().map(|s| s.tasks).sum();
            progress(&format!(
                "      jobs {:.2} s, application {:.2} s, cluster CPU {:.2} s{} (exited threads: {})",
                run.jobs_s,
                run.app_s,
                run.job_cpu.as_secs_f64(),
                match (sparkprof_cpu, kernel) {
                    (Some((cpu, wall)), Some(kernel)) => format!(
                        ", sparkprof {:.2} s of CPU in {:.1} s, its BPF programs {:.3} s",
                        cpu.as_secs_f64(),
                        wall.as_secs_f64(),
                        kernel.total_ns() as f64 / 1e9
                    ),
                    _ => String::new(),
                },
                exits::CLASSES
                    .iter()
                    .zip(run.threads_cpu)
                    .map(|(class, s)| format!("{class} {s:.2} s"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            runs[usize::from(profiled)] = Some(run);
        }
        let [Some(unprofiled), Some(profiled)] = runs else {
            unreachable!("both runs of a pair ran");
        };
        result.pairs.push(Pair {
            profiled_first,
            unprofiled,
            profiled,
        });
    }
    let then = then(&mut cluster)?;
    let leftover = cluster.stop();
    if !leftover.is_empty() {
        bail!("Spark processes survived the cluster's stop: {leftover:?}");
    }
    drop(group);
    Ok((result, then))
}

/// What a cluster of the bench needs (a JDK and pyspark, as the end-to-end
/// tests), installed if missing.
pub(super) fn spark_install(bench: &Bench) -> Result<SparkInstall> {
    crate::toolchain::apt_install(&["openjdk-17-jdk-headless"])?;
    crate::spark::setup()?;
    let expected = workspace_root().join("target/release/sparkprof");
    if bench.sparkprof != expected {
        bail!(
            "the tests' recorder runs {}, the bench built {}",
            expected.display(),
            bench.sparkprof.display()
        );
    }
    Ok(SparkInstall::locate())
}

/// Runs the bench's Spark job on `cluster`; returns the event log's
/// first-job-to-last-job seconds.
pub(super) fn run_one_job(cluster: &mut Cluster) -> Result<f64> {
    let job = run_job(cluster);
    jobs_seconds(&job, &EventLog::read(&job.event_log))
}

/// The bench's Spark job on `cluster` (its processes in the cluster's
/// cgroup, where the cluster starts them).
pub(super) fn run_job(cluster: &mut Cluster) -> Job {
    cluster.run_job(JOB_SCRIPT, &JOB_ARGS, JOB_TIMEOUT)
}

/// From the first job submitted to the last completed, in seconds.
pub(super) fn jobs_seconds(job: &Job, log: &EventLog) -> Result<f64> {
    span_seconds(
        job,
        log.first_job_submitted_ms,
        log.last_job_completed_ms,
        "job start and end",
    )
}

/// Seconds between two event-log times (ms) of `job`, `what` they are.
fn span_seconds(job: &Job, start: Option<u64>, end: Option<u64>, what: &str) -> Result<f64> {
    match (start, end) {
        (Some(a), Some(b)) if b > a => Ok((b - a) as f64 / 1e3),
        _ => bail!("the event log {} has no {what}", job.event_log.display()),
    }
}

// ---------------------------------------------------------------------------
// 2. Stage attribution of the fake executor.

/// Where one stage's hot method's samples landed.
#[derive(Default, Clone, Copy)]
pub struct Placement {
    pub right: u64,
    pub wrong_stage: u64,
    /// In a file of the executor without a stage (comm-only name).
    pub no_stage: u64,
}

impl Placement {
    fn total(&self) -> u64 {
        self.right + self.wrong_stage + self.no_stage
    }

    fn add(&mut self, other: &Placement) {
        self.right += other.right;
        self.wrong_stage += other.wrong_stage;
        self.no_stage += other.no_stage;
    }
}

pub struct Attribution {
    /// `--thread-names dumps`.
    pub dumps_only: bool,
    /// By stage ID.
    pub methods: [Placement; 4],
    pub tasks: u64,
    /// index.json `threads` of the recording.
    pub jvms_exact_names: u64,
    pub jvms_dump_names: u64,
    pub thread_dumps: u64,
}

impl Attribution {
    fn overall(&self) -> Placement {
        let mut all = Placement::default();
        for m in &self.methods {
            all.add(m);
        }
        all
    }
}

fn attribution_of(classes: &Path, dumps_only: bool) -> Result<Attribution> {
    let mode = if dumps_only {
        "--thread-names dumps"
    } else {
        "default thread names"
    };
    progress(&format!(
        "[spark] the fake executor for {STAGES_SECS} s under sparkprof record -F {STAGES_HZ} ({mode})"
    ));
    let hz = STAGES_HZ.to_string();
    // sparkprof first, as on a worker host; the duration only bounds it
    // should the bench fail before its SIGINT.
    let mut args = vec!["--frequency", &hz, "--duration", "600"];
    if dumps_only {
        args.extend(["--thread-names", "dumps"]);
    }
    let recorder = Recorder::start(&args);
    let executor = FakeExecutor::start(classes, STAGES_SECS, &[]);
    let (pid, tasks) = match executor {
        Ok(executor) => (executor.pid(), executor.wait()),
        Err(err) => (0, Err(err)),
    };
    let recording = recorder.stop_with(libc::SIGINT);
    let tasks = tasks?;
    if !recording.status.success() || !recording.index.is_object() {
        let lines: Vec<&str> = recording.log.lines().collect();
        bail!(
            "sparkprof record failed ({}):\n{}",
            recording.status,
            lines[lines.len().saturating_sub(20)..].join("\n")
        );
    }
    let methods = placement(&recording, pid);
    let threads = &recording.index["threads"];
    let field = |key: &str| threads[key].as_u64().unwrap_or(0);
    let result = Attribution {
        dumps_only,
        methods,
        tasks,
        jvms_exact_names: field("jvms_exact_names"),
        jvms_dump_names: field("jvms_dump_names"),
        thread_dumps: field("thread_dumps"),
    };
    let all = result.overall();
    progress(&format!(
        "      {} of {} hot-method samples in their stage's file, {} in another stage's, {} in none ({tasks} tasks)",
        all.right,
        all.total(),
        all.wrong_stage,
        all.no_stage
    ));
    if all.total() == 0 {
        bail!("no sample of the fake executor's hot methods ({mode})");
    }
    Ok(result)
}

/// Samples of each stage's hot method by where they landed.
fn placement(recording: &Recording, pid: u32) -> [Placement; 4] {
    let mut methods = [Placement::default(); 4];
    for entry in recording.files_of(pid) {
        let file_stage = entry["stage_id"].as_u64();
        for stack in recording.stacks(entry) {
            let Some(stage) = STAGE_METHODS.iter().position(|method| {
                let frame = format!("CoarseGrainedExecutorBackend.{method}");
                stack.frames.iter().any(|f| f.contains(&frame))
            }) else {
                continue;
            };
            let p = &mut methods[stage];
            match file_stage {
                Some(s) if s == stage as u64 => p.right += stack.count,
                Some(_) => p.wrong_stage += stack.count,
                None => p.no_stage += stack.count,
            }
        }
    }
    methods
}

// ---------------------------------------------------------------------------
// 3. What a thread dump costs the JVM.

pub struct Dumps {
    /// Pause of each dump (its safepoints' total time), ms.
    pub pause_ms: Vec<f64>,
    /// Per safepoint kind: total times, ms.
    pub by_kind: BTreeMap<String, Vec<f64>>,
    /// Round trip of each `thread_names()` call, ms.
    pub round_trip_ms: Vec<f64>,
    pub failed: usize,
    /// Java threads at the dumps (HotSpot's safepoint statistics).
    pub java_threads: Option<u64>,
    /// Threads in the dumps' output.
    pub threads_named: usize,
    /// sparkprof's dump policy, read from its source.
    pub min_interval_s: f64,
    pub safety_interval_s: f64,
}

fn dump_cost(classes: &Path, dir: &Path) -> Result<Dumps> {
    let log = dir.join("safepoint.log");
    let _ = fs::remove_file(&log);
    progress(&format!(
        "[spark] {DUMPS} thread dumps of the fake executor, {} ms apart, with HotSpot's safepoint log",
        DUMP_SPACING.as_millis()
    ));
    // Long enough for the dumps; terminated right after them.
    let seconds = 60 + (DUMPS as u32) * DUMP_SPACING.as_millis() as u32 / 1000;
    let executor = FakeExecutor::start(
        classes,
        seconds,
        &[format!("-Xlog:safepoint*=info:file={}", log.display())],
    )?;
    let pid = executor.pid();
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Err(err) = perf_maps::check_attachable(pid) {
        if Instant::now() > deadline {
            bail!("the fake executor cannot be attached to: {err}");
        }
        pause(Duration::from_millis(50))?;
    }
    let jvm = perf_maps::Jvm::new(pid).context("looking up the fake executor for attaching")?;
    let mut round_trip_ms = Vec::new();
    let mut failed = 0;
    let mut threads_named = 0;
    for _ in 0..DUMPS {
        let started = Instant::now();
        match jvm.thread_names() {
            Ok(threads) => {
                round_trip_ms.push(started.elapsed().as_secs_f64() * 1e3);
                threads_named = threads.len();
            }
            Err(err) => {
                failed += 1;
                progress(&format!("      a thread dump failed: {err}"));
            }
        }
        pause(DUMP_SPACING.saturating_sub(started.elapsed()))?;
    }
    executor.terminate()?;
    let text = fs::read_to_string(&log).with_context(|| format!("reading {}", log.display()))?;
    let (pause_ms, by_kind, java_threads) = dump_pauses(&text);
    if pause_ms.len() != round_trip_ms.len() {
        bail!(
            "{} thread dumps answered, but the safepoint log has {} `PrintThreads` safepoints",
            round_trip_ms.len(),
            pause_ms.len()
        );
    }
    let (min_interval_s, safety_interval_s) = dump_policy()?;
    Ok(Dumps {
        pause_ms,
        by_kind,
        round_trip_ms,
        failed,
        java_threads,
        threads_named,
        min_interval_s,
        safety_interval_s,
    })
}

/// From a `-Xlog:safepoint*` log: the pause of each thread dump (the total
/// time of its `PrintThreads` safepoint and of the `PrintJNI` and
/// `FindDeadlocks` ones after it, in ms), each kind's times, and the Java
/// threads at the first `PrintThreads`.
///
/// Lines look like `[2.365s][info][safepoint        ] Safepoint
/// "PrintThreads", Time since last: 1344080754 ns, Reaching safepoint:
/// 187194 ns, Cleanup: 58748 ns, At safepoint: 200279 ns, Total: 446221 ns`
/// and `[2.365s][info][safepoint,stats  ] PrintThreads [ 14 2 ][ ...`.
fn dump_pauses(log: &str) -> (Vec<f64>, BTreeMap<String, Vec<f64>>, Option<u64>) {
    let mut pauses: Vec<f64> = Vec::new();
    let mut by_kind: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut java_threads = None;
    for line in log.lines() {
        if line.contains("[safepoint,stats")
            && java_threads.is_none()
            && let Some((_, rest)) = line.split_once("] PrintThreads")
        {
            java_threads = rest
                .trim_start()
                .strip_prefix('[')
                .and_then(|r| r.split_whitespace().next())
                .and_then(|n| n.parse().ok());
        }
        let Some((_, rest)) = line.split_once("] Safepoint \"") else {
            continue;
        };
        let Some((kind, rest)) = rest.split_once('"') else {
            continue;
        };
        if !DUMP_SAFEPOINTS.contains(&kind) {
            continue;
        }
        let Some(total) = rest
            .split_once("Total: ")
            .and_then(|(_, t)| t.split_whitespace().next())
            .and_then(|t| t.parse::<u64>().ok())
        else {
            continue;
        };
        let ms = total as f64 / 1e6;
        by_kind.entry(kind.to_owned()).or_default().push(ms);
        if kind == DUMP_SAFEPOINTS[0] {
            pauses.push(ms);
        } else if let Some(last) = pauses.last_mut() {
            *last += ms;
        }
    }
    (pauses, by_kind, java_threads)
}

/// `DumpPolicy::default()`'s `min_interval` and `safety_interval` (s), read
/// from sparkprof's source so that the bound stated is the one it applies.
fn dump_policy() -> Result<(f64, f64)> {
    let path = workspace_root().join("profiler-user/src/runtime/jvm/thread_names/dumps.rs");
    let source =
        fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let default = source
        .split_once("impl Default for DumpPolicy")
        .map(|(_, rest)| rest)
        .with_context(|| format!("no `impl Default for DumpPolicy` in {}", path.display()))?;
    let secs = |field: &str| -> Result<f64> {
        let (_, rest) = default
            .split_once(&format!("{field}: Duration::from_"))
            .with_context(|| format!("no {field} in DumpPolicy::default()"))?;
        let (unit, rest) = rest.split_once('(').context("malformed DumpPolicy")?;
        let value: f64 = rest
            .split_once(')')
            .and_then(|(v, _)| v.trim().replace('_', "").parse().ok())
            .context("malformed DumpPolicy")?;
        match unit {
            "secs" => Ok(value),
            "millis" => Ok(value / 1e3),
            _ => bail!("DumpPolicy's {field} in unit {unit:?}"),
        }
    };
    Ok((secs("min_interval")?, secs("safety_interval")?))
}

// ---------------------------------------------------------------------------
// The report.

fn max(values: &[f64]) -> f64 {
    values.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        f64::NAN
    } else {
        100.0 * part as f64 / whole as f64
    }
}

impl Runtime {
    /// The pairs, the median slowdown against `target` (percent), the noise
    /// and sparkprof's CPU, under a bold `heading`.
    pub(super) fn markdown(&self, heading: &str, target: f64) -> String {
        let r = self;
        let n = r.pairs.len();
        let command = match r.profiler.tool {
            Tool::SparkprofOffCpu => "sparkprof record --off-cpu",
            Tool::SparkprofDaemon => "sparkprof daemon",
            _ => "sparkprof record",
        };
        let mut text = format!(
            "**{heading}.** `tests/workloads/spark_job.py {}` (two executors of one core, \
             {} stages, {} tasks) on a standalone cluster on this host, {n} interleaved pair(s) \
             without and with `{command}` (whole host, {} Hz); time from the \
             event log, first job submitted to last job completed.\n\n\
             | pair (order) | without, s | with, s | with / without | application span, without / with, s |\n\
             |---|--:|--:|--:|--:|\n",
            JOB_ARGS.join(" "),
            r.stages,
            r.tasks,
            r.profiler.hz
        );
        for (i, p) in r.pairs.iter().enumerate() {
            let order = if p.profiled_first {
                "with first"
            } else {
                "without first"
            };
            text += &format!(
                "| {} ({order}) | {:.2} | {:.2} | {:.3} | {:.2} / {:.2} |\n",
                i + 1,
                p.unprofiled.jobs_s,
                p.profiled.jobs_s,
                p.ratio(),
                p.unprofiled.app_s,
                p.profiled.app_s
            );
        }
        let ratios: Vec<f64> = r.pairs.iter().map(Pair::ratio).collect();
        let app_ratios: Vec<f64> = r.pairs.iter().map(Pair::app_ratio).collect();
        let unprofiled: Vec<f64> = r.pairs.iter().map(|p| p.unprofiled.jobs_s).collect();
        let ratio = median(&ratios);
        let slowdown = 100.0 * (ratio - 1.0);
        let noise = spread_percent(&unprofiled);
        let low = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        let (cpu, wall) = r.sparkprof_cpu_and_wall();
        text += &format!(
            "\n| figure | value | target |\n|---|--:|---|\n\
             | slowdown, median of the pairs' ratios | {slowdown:+.1} % ({ratio:.3}; pairs {low:.3} – {:.3}) | < {target} %: {} |\n\
             | noise: the runs without sparkprof, fastest to slowest | {noise:.1} % |  |\n\
             | application span (incl. executor start), median of the pairs' ratios | {:+.1} % |  |\n\
             | sparkprof's CPU while the job ran (utime + stime) | {:.2} % of one core ({cpu:.2} s in {wall:.0} s) | ≤ {TARGET_SPARKPROF_CPU_PERCENT} %: {} |\n",
            max(&ratios),
            if noise > target {
                format!("not resolved here (noise {noise:.0} %)")
            } else {
                met(slowdown < target).to_owned()
            },
            100.0 * (median(&app_ratios) - 1.0),
            100.0 * cpu / wall,
            met(100.0 * cpu / wall <= TARGET_SPARKPROF_CPU_PERCENT),
        );
        let stages = r
            .pairs
            .iter()
            .filter_map(|p| p.profiled.stages)
            .fold(SparkprofStages::default(), SparkprofStages::add);
        let after = match r.profiler.tool {
            Tool::SparkprofDaemon => format!(
                "The line above counts the window ends that fell within the job; the part \
                 after the job is the window the daemon writes at its stop, with its \
                 application's roll-up, as at the end of every window. Per job, less its start \
                 (which a deployed daemon pays once): {:.2} s.",
                (stages.whole_s - stages.before_s) / n.max(1) as f64
            ),
            _ => "The target's line above counts only the window the job ran in: its files \
                  are written after it (the part after the job), which a daemon pays for each \
                  application at the end of each window."
                .to_owned(),
        };
        text += &format!(
            "\nsparkprof's CPU over its {n} runs, start to exit ({:.2} s; index.json `pipeline_cpu`), by stage of its drains: {}. {after}\n",
            stages.whole_s,
            stages.markdown()
        );
        let names: Vec<Names> = r.pairs.iter().filter_map(|p| p.profiled.names).collect();
        if !names.is_empty() {
            let per_run: Vec<String> = names
                .iter()
                .map(|n| {
                    format!(
                        "{:.2} / {:.1} / {:.1}",
                        pct(n.jit_named, n.jit_frames),
                        pct(n.stage_samples, n.cpu_samples),
                        pct(n.python_framed, n.python_samples)
                    )
                })
                .collect();
            text += &format!(
                "\nWhat its {} recordings name (their files; what a cheaper sparkprof must keep): {}. \
                 Per run, JIT named / in a stage / Python framed, %: {}.\n",
                names.len(),
                names
                    .iter()
                    .copied()
                    .fold(Names::default(), Names::add)
                    .markdown(),
                per_run.join("; ")
            );
        }
        text += &r.cpu_markdown();
        text += &if n < 2 {
            "\nWith one pair there is no noise estimate: the ratio may be noise of any size.\n"
                .to_owned()
        } else if noise > target {
            format!(
                "\nThe runs without sparkprof alone spread over {noise:.1} %, more than the \
                 {target} % target: with {n} pairs this run cannot tell a \
                 slowdown below about {noise:.0} % from noise, whichever way the median points \
                 (more pairs: `--runs N`).\n"
            )
        } else {
            format!(
                "\nThe runs without sparkprof spread over {noise:.1} %, less than the \
                 {target} % target (an estimate from {n} runs only).\n"
            )
        };
        text
    }
}

/// The target for the job's CPU time with sparkprof: less than this many
/// percent above without.
const TARGET_JOB_CPU_PERCENT: f64 = 2.0;

/// A row of a figure table: the mean of `ratios` (the job's CPU time with
/// sparkprof over without, one per pair) as a cost, with a 95 % interval
/// of it (about two standard errors), and whether it resolves the target
/// and meets it.
pub(super) fn job_cpu_row(what: &str, ratios: &[f64]) -> String {
    let n = ratios.len();
    let (mean, sd) = mean_and_sd(ratios);
    let half = sd.map_or(f64::INFINITY, |sd| 2.0 * sd / (n as f64).sqrt());
    let (low, high) = (100.0 * (mean - half - 1.0), 100.0 * (mean + half - 1.0));
    let verdict = verdict_below(low, high, TARGET_JOB_CPU_PERCENT, || {
        format!(
            "± {:.1} points with {n} pairs: more pairs, `--runs N`",
            100.0 * half
        )
    });
    format!(
        "| {what} | {:+.1} % (95 % interval {low:+.1} – {high:+.1} %) | < {TARGET_JOB_CPU_PERCENT} %: {verdict} |\n",
        100.0 * (mean - 1.0)
    )
}

/// The target for sparkprof's own CPU while the job runs, % of one core.
const TARGET_SPARKPROF_CPU_PERCENT: f64 = 0.5;

impl Runtime {
    /// The cluster's CPU time per job, with and without sparkprof: the
    /// cost to the job that this 2-CPU host can resolve (wall time spreads
    /// by tens of percent; CPU time much less).
    fn cpu_markdown(&self) -> String {
        let mut text = "\nThe cluster's CPU time over each job (a cgroup v2 holding the Master, \
             the Worker, the executors, their Python workers and the driver, not sparkprof; \
             `cpu.stat` `usage_usec` from just before the driver starts to 2 s after it \
             ends, when the executors have exited):\n\n\
             | pair (order) | without, CPU s | with, CPU s | with / without |\n|---|--:|--:|--:|\n"
            .to_owned();
        for (i, p) in self.pairs.iter().enumerate() {
            let order = if p.profiled_first {
                "with first"
            } else {
                "without first"
            };
            text += &format!(
                "| {} ({order}) | {:.2} | {:.2} | {:.3} |\n",
                i + 1,
                p.unprofiled.job_cpu.as_secs_f64(),
                p.profiled.job_cpu.as_secs_f64(),
                p.cpu_ratio()
            );
        }
        let ratios: Vec<f64> = self.pairs.iter().map(Pair::cpu_ratio).collect();
        text += "\n| figure | value | target |\n|---|--:|---|\n";
        text += &job_cpu_row(
            "the job's CPU time with sparkprof, mean of the pairs' ratios",
            &ratios,
        );
        text += &self.threads_markdown();
        text += &self.kernel_markdown();
        text
    }

    /// What sparkprof's BPF programs ran in the kernel during the jobs:
    /// the one part of sparkprof's cost to the job that is measured, not
    /// estimated from pairs (they run on the job's threads' time when they
    /// sample or trace them).
    fn kernel_markdown(&self) -> String {
        let runs: Vec<(KernelRuns, f64)> = self
            .pairs
            .iter()
            .filter_map(|p| Some((p.profiled.kernel?, p.profiled.job_cpu.as_secs_f64())))
            .collect();
        let n = runs.len();
        if n == 0 {
            return String::new();
        }
        let total = runs
            .iter()
            .fold(KernelRuns::default(), |sum, (runs, _)| sum.add(*runs));
        let job_s: f64 = runs.iter().map(|(_, job)| job).sum();
        let mut text = format!(
            "\nsparkprof's BPF programs in the kernel while the job ran \
             (`kernel.bpf_stats_enabled=1` during the {n} jobs with sparkprof, restored \
             afterwards; `run_time_ns` and `run_cnt` from the fdinfo of sparkprof's programs \
             before and after each job), mean per job. They run on the time of the thread they \
             sample or trace (the job's, mostly; the host's other threads and idle CPUs too), so \
             their share of the job's CPU is an upper bound of what they add to it:\n\n\
             | programs | runs per job | µs per run | ms per job | share of the job's CPU |\n\
             |---|--:|--:|--:|--:|\n"
        );
        let share = |ns: u64| 100.0 * ns as f64 / 1e9 / job_s;
        for (kind, (ns, count)) in KernelRuns::KINDS.iter().zip(total.by_kind) {
            if count == 0 {
                continue;
            }
            text += &format!(
                "| {kind} | {:.0} | {:.2} | {:.1} | {:.3} % |\n",
                count as f64 / n as f64,
                ns as f64 / 1e3 / count as f64,
                ns as f64 / 1e6 / n as f64,
                share(ns),
            );
        }
        text += &format!(
            "| all | | | {:.1} | **{:.3} %** |\n",
            total.total_ns() as f64 / 1e6 / n as f64,
            share(total.total_ns())
        );
        text
    }

    /// Where the job's CPU went, by the threads that exited during it
    /// (taskstats): what each kind of thread took without and with
    /// sparkprof, and how much the pairs' differences spread.
    fn threads_markdown(&self) -> String {
        let n = self.pairs.len();
        if n == 0 {
            return String::new();
        }
        let mut text = format!(
            "\nWhere the job's CPU went: the CPU time (`sum_exec_runtime`, from the kernel's taskstats exit records) of the threads that exited during each job (its executors', Python workers' and driver's; not the Master's and Worker's, which live on), by thread name, mean per job over the {n} pairs:\n\n\
             | threads | without, CPU s | with, CPU s | with − without, mean (SD over pairs) |\n|---|--:|--:|--:|\n"
        );
        for (class, name) in exits::CLASSES.iter().enumerate() {
            let differences: Vec<f64> = self
                .pairs
                .iter()
                .map(|p| p.profiled.threads_cpu[class] - p.unprofiled.threads_cpu[class])
                .collect();
            let (difference, sd) = mean_and_sd(&differences);
            let spread = sd.map_or_else(|| "—".to_owned(), |sd| format!("{sd:.2}"));
            let mean = |f: &dyn Fn(&Pair) -> f64| self.pairs.iter().map(f).sum::<f64>() / n as f64;
            text += &format!(
                "| {name} | {:.2} | {:.2} | {difference:+.2} ({spread}) |\n",
                mean(&|p| p.unprofiled.threads_cpu[class]),
                mean(&|p| p.profiled.threads_cpu[class]),
            );
        }
        text += "\n*JIT compilers*: C1 and C2 compiler threads; *GC and VM threads*: `GC Thread#`, `G1 …`, `VM Thread`; *task threads*: `Executor task launch worker`; *Python*: the Python workers and the driver's Python; *other threads*: everything else that exited (the JVMs' other threads, and any process of the host that ended meanwhile).\n";
        text
    }
}

impl SparkReport {
    pub fn markdown(&self) -> String {
        let mut text = format!(
            "### 5. Spark (a multi-stage PySpark job with and without sparkprof; stage attribution; thread-dump safepoints)\n\n{}",
            self.runtime_markdown()
        );
        text += &self.attribution_markdown();
        text += &self.dumps_markdown();
        text += &format!(
            "\nSpark: pyspark {}; JVM: {}.\n",
            sparkprof_tests::spark::PYSPARK_VERSION,
            self.java
        );
        if let Some(busy) = self.busy {
            text += &format!(
                "\nThe host was not idle ({busy:.0} % of one core used by other processes) when \
                 parts 2 and 3 began: their pause and round-trip times are noisier than usual.\n"
            );
        }
        text
    }

    fn runtime_markdown(&self) -> String {
        self.runtime
            .markdown("5.1 Job runtime", TARGET_SLOWDOWN_PERCENT)
    }

    fn attribution_markdown(&self) -> String {
        let mut text = format!(
            "\n**5.2 Stage attribution.** The fake executor of `tests/tests/stages.rs` for \
             {STAGES_SECS} s (two task threads renamed like Spark's through 4 stages, tasks of \
             150 ms to 0.9 s) under `sparkprof record -F {STAGES_HZ}`: where the samples of \
             each stage's hot method landed (index.json `stage_id` of their file).\n\n\
             | thread names | method (stage) | samples | in its stage's file | in another stage's file | in no stage file | accuracy | target |\n\
             |---|---|--:|--:|--:|--:|--:|---|\n"
        );
        for a in &self.attribution {
            let mode = if a.dumps_only {
                "`--thread-names dumps`"
            } else {
                "default (uprobe)"
            };
            let rows = a
                .methods
                .iter()
                .enumerate()
                .map(|(stage, p)| (format!("`{}` ({stage})", STAGE_METHODS[stage]), *p, false))
                .chain([("all".to_owned(), a.overall(), true)]);
            for (name, p, overall) in rows {
                let accuracy = pct(p.right, p.total());
                let target = match (overall, a.dumps_only) {
                    (true, false) => format!(
                        "≥ {TARGET_ACCURACY_PERCENT} %: {}",
                        met(accuracy >= TARGET_ACCURACY_PERCENT)
                    ),
                    (true, true) => format!("none in another stage: {}", met(p.wrong_stage == 0)),
                    _ => String::new(),
                };
                let bold = |s: String| if overall { format!("**{s}**") } else { s };
                text += &format!(
                    "| {mode} | {name} | {} | {} | {} | {} | {} | {target} |\n",
                    p.total(),
                    p.right,
                    p.wrong_stage,
                    p.no_stage,
                    bold(format!("{accuracy:.2} %"))
                );
            }
        }
        text += "\n";
        for a in &self.attribution {
            text += &format!(
                "- {}: {} tasks; index.json `threads`: {} JVMs with exact names, {} with dump-fed names, {} thread dumps.\n",
                if a.dumps_only {
                    "`--thread-names dumps`"
                } else {
                    "default"
                },
                a.tasks,
                a.jvms_exact_names,
                a.jvms_dump_names,
                a.thread_dumps
            );
        }
        text
    }

    fn dumps_markdown(&self) -> String {
        let d = &self.dumps;
        let pause = median(&d.pause_ms);
        let worst = max(&d.pause_ms);
        let kinds: Vec<String> = DUMP_SAFEPOINTS
            .iter()
            .filter_map(|k| {
                let v = d.by_kind.get(*k)?;
                Some(format!("`{k}` {:.3}", median(v)))
            })
            .collect();
        let interval_ms = d.min_interval_s * 1e3;
        let threads = d
            .java_threads
            .map_or_else(|| "?".to_owned(), |n| n.to_string());
        format!(
            "\n**5.3 Thread-dump safepoints.** {} dumps of the fake executor ({threads} Java \
             threads, {} in a dump), {} ms apart, through the perf-maps attach client \
             (`Jvm::thread_names`, `jcmd Thread.print`, as sparkprof takes them), with \
             `-Xlog:safepoint*=info:file=...`. Each dump stops the JVM at {} safepoints \
             ({}); a dump's pause is the sum of their `Total` (reaching the safepoint, \
             cleanup and the operation).\n\n\
             | figure | value |\n|---|--:|\n\
             | pause per dump, median (max) | {pause:.3} ms ({worst:.3} ms) |\n\
             | median per safepoint, ms | {} |\n\
             | round trip of a dump (attach, dump, parse), median (max) | {:.1} ms ({:.1} ms) |\n\
             | dumps failed | {} |\n\
             | sparkprof's bound | one dump per JVM when it first sees it; then, only for JVMs without the rename uprobe, at most one per {} s (after a rename, or every {} s) |\n\
             | the bound as a share of the JVM's time, median (max) pause | {:.3} % ({:.3} %) |\n\n\
             A JVM with the uprobe pays one such pause per recording. The pause grows with \
             the number of threads (a Spark executor has several times this JVM's).\n",
            d.pause_ms.len(),
            d.threads_named,
            DUMP_SPACING.as_millis(),
            DUMP_SAFEPOINTS.len(),
            DUMP_SAFEPOINTS
                .iter()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", "),
            kinds.join(", "),
            median(&d.round_trip_ms),
            max(&d.round_trip_ms),
            d.failed,
            fmt_secs(d.min_interval_s),
            fmt_secs(d.safety_interval_s),
            100.0 * pause / interval_ms,
            100.0 * worst / interval_ms,
        )
    }
}

fn fmt_secs(s: f64) -> String {
    if s.fract() == 0.0 {
        format!("{s:.0}")
    } else {
        format!("{s}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dump_safepoints_are_grouped_per_dump() {
        let log = "\
[1.021s][info][safepoint,stats  ] Cleanup                      [             13               2 ][ 1 2 3 4 ] 2
[1.021s][info][safepoint        ] Safepoint \"Cleanup\", Time since last: 1 ns, Reaching safepoint: 94751 ns, Cleanup: 146279 ns, At safepoint: 4684951 ns, Total: 4925981 ns
[2.365s][info][safepoint,stats  ] PrintThreads                 [             14               2 ][ 1 2 3 4 ] 2
[2.365s][info][safepoint        ] Safepoint \"PrintThreads\", Time since last: 1 ns, Reaching safepoint: 187194 ns, Cleanup: 58748 ns, At safepoint: 200279 ns, Total: 446221 ns
[2.365s][info][safepoint        ] Safepoint \"PrintJNI\", Time since last: 36755 ns, Reaching safepoint: 176062 ns, Cleanup: 8002 ns, At safepoint: 27972 ns, Total: 212036 ns
[2.365s][info][safepoint        ] Safepoint \"FindDeadlocks\", Time since last: 26229 ns, Reaching safepoint: 82994 ns, Cleanup: 5108 ns, At safepoint: 11267 ns, Total: 99369 ns
[2.633s][info][safepoint        ] Safepoint \"PrintThreads\", Time since last: 1 ns, Reaching safepoint: 107581 ns, Cleanup: 41482 ns, At safepoint: 180209 ns, Total: 329272 ns
";
        let (pauses, kinds, threads) = dump_pauses(log);
        assert_eq!(pauses.len(), 2);
        assert!((pauses[0] - 0.757626).abs() < 1e-9);
        assert!((pauses[1] - 0.329272).abs() < 1e-9);
        assert_eq!(kinds["PrintThreads"].len(), 2);
        assert!(!kinds.contains_key("Cleanup"));
        assert_eq!(threads, Some(14));
    }

    #[test]
    fn the_dump_policy_is_read_from_sparkprofs_source() {
        let (min, safety) = dump_policy().unwrap();
        assert!(min > 0.0 && safety >= min);
    }

    #[test]
    fn names_are_counted_from_the_files_of_a_recording() {
        let dir = std::env::temp_dir().join(format!("sparkprof-names-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
        write("a.folded", "java;Thread.run_[j];Hot.spin_[j] 7\n");
        write(
            "b.folded",
            "python3 [1];_PyEval_EvalFrameDefault;<module> (job.py:3);f (job.py:9) 3\n\
             python3 [1];_PyEval_EvalFrameDefault 1\n",
        );
        write("c.folded", "python3 [2];g (worker.py) 2\n");
        let index = serde_json::json!({
            "jit": {"jit_frames": 200, "jit_frames_named": 199},
            "files": [
                {"kind": "cpu", "path": "a.folded", "samples": 7, "role": "executor", "stage_id": 3},
                {"kind": "cpu", "path": "b.folded", "samples": 4, "role": "pyspark-worker", "stage_id": null},
                {"kind": "cpu", "path": "c.folded", "samples": 2, "role": "python"},
                {"kind": "offcpu", "path": "none.folded", "samples": 9000, "role": "python"}
            ]
        });
        let names = Names::read(&dir, &index);
        std::fs::remove_dir_all(&dir).unwrap();
        let names = names.unwrap();
        assert_eq!((names.jit_frames, names.jit_named), (200, 199));
        assert_eq!((names.cpu_samples, names.stage_samples), (13, 7));
        assert_eq!((names.python_samples, names.python_framed), (6, 5));
        assert!(
            names
                .markdown()
                .starts_with("JIT frames named 99.50 % (199 of 200)")
        );
    }
}
