//! Section 7 of `cargo xtask bench`: Python frames.
//!
//! 1. Slowdown: `xtask/bench/python/pywork.py` (CPython 3.12, one thread, a
//!    fixed amount of pure-Python work under a known call chain) without and
//!    with a profiler, in interleaved pairs whose order alternates, for
//!    `sparkprof record --pid PID` and for `py-spy record --rate 99 --pid
//!    PID --format raw` (py-spy's default, blocking mode: it stops the
//!    process for each sample, which is its real cost), both at 99 Hz. The
//!    workload prints its pid and waits for a line on stdin, so that the
//!    profiler is started on it and samples before the work begins; the time
//!    is the workload's own (`time.perf_counter` around the work only). Also
//!    each profiler's CPU (utime + stime) over the work, and the share of
//!    its samples of the workload that carry the whole call chain from the
//!    script's root to where it was (that the walk lost no frame).
//! 2. In-kernel cost of a Python sample against a native one: with
//!    `kernel.bpf_stats_enabled` on, `run_time_ns / run_cnt` of sparkprof's
//!    perf_event programs at 999 Hz `--pid` on two Python workload
//!    processes (both CPUs busy with Python) and on the bench's C workload
//!    (two threads, a 12-deep native chain), in alternating rounds.
//!
//! On a shared host, each pair and each round is measured again (after
//! waiting for an idle host) when other processes used more than
//! [`QUIET_BUSY_PERCENT`] of one core during it (see [`on_idle_host`]); the
//! report lists the repeats.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use super::{
    ArmPairs, Background, Bench, GoWorkload, ProgStats, QUIET_BUSY_PERCENT, Recorder,
    SPARKPROF_OUTPUT, SysctlGuard, TimedPair, WARM_UP, bench_unique, compile_workload, cpu_time,
    host_busy_time, interleaved_pairs, met, pair_rows, pause, progress, run_pair, sparkprof_index,
    spread_percent, timeval, wait_for_quiet_host, wait_for_quiet_host_within,
};
use crate::workspace_root;

/// The interpreter the section measures (pyenv's).
const PYTHON: &str = "/root/.pyenv/versions/3.12.1/bin/python3.12";
/// The workload, relative to the workspace root.
const SCRIPT: &str = "xtask/bench/python/pywork.py";
/// Rounds of one timed workload run: about 3 s on the reference host.
pub const ROUNDS: u64 = 15_000;
/// Both profilers' rate in the slowdown pairs.
const RATE_HZ: u32 = 99;
/// sparkprof's rate for the in-kernel cost (section 1's).
const KERNEL_HZ: u32 = 999;
/// Rounds of the in-kernel cost per workload, each this long after
/// [`WARM_UP`].
const KERNEL_ROUNDS: usize = 3;
const KERNEL_WINDOW: Duration = Duration::from_millis(2500);
/// Python workload processes in the in-kernel rounds: one per CPU of the
/// reference host, as the C workload has two threads.
const KERNEL_PYTHONS: usize = 2;
/// Recursive Java frames of the Java workload's threads (about as deep
/// as a Spark task thread's stack, ~70 frames in all).
const JAVA_DEPTH: u32 = 40;
/// The Java workload, relative to the workspace root.
const JAVA_SOURCE: &str = "tests/workloads/JavaChains.java";
/// Between a profiler's readiness and the go line.
const SETTLE: Duration = Duration::from_millis(200);
/// The workload's call chain, root first.
const CHAIN: [&str; 5] = ["run", "outer", "middle", "inner", "leaf"];
/// What sparkprof logs when it follows a process's Python frames.
const FOLLOWING: &str = "following its Python frames";
/// A pair or round after which the host is busy is measured again, after
/// waiting this long at most for an idle host again (the section is short,
/// and others' builds on a shared host would be in its figures).
const BUSY_PATIENCE: Duration = Duration::from_secs(300);
/// More repeats than this fail the run.
const MAX_REPEATS: usize = 10;
/// Below this share of the samples of the workload, a kernel round is
/// flagged in the report.
const WATCHED_FLOOR_PERCENT: f64 = 90.0;

/// A profiler of the slowdown pairs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PyProfiler {
    Sparkprof,
    PySpy,
}

impl PyProfiler {
    const ALL: [PyProfiler; 2] = [PyProfiler::Sparkprof, PyProfiler::PySpy];

    fn label(self) -> &'static str {
        match self {
            PyProfiler::Sparkprof => "sparkprof 99 Hz",
            PyProfiler::PySpy => "py-spy 99 Hz",
        }
    }
}

/// A profiled run's samples of the workload, and those with [`CHAIN`].
#[derive(Clone, Copy)]
pub struct Chains {
    pub samples: u64,
    pub chained: u64,
}

/// One interleaved pair of workload runs.
pub type Pair = TimedPair<Chains>;

pub type ProfilerResult = ArmPairs<PyProfiler, Chains>;

/// (samples with the whole chain, samples) over all profiled runs.
fn chained(result: &ProfilerResult) -> (u64, u64) {
    let samples = result.pairs.iter().map(|p| p.extra.samples).sum();
    let chained = result.pairs.iter().map(|p| p.extra.chained).sum();
    (chained, samples)
}

/// What sparkprof samples in an in-kernel round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// [`KERNEL_PYTHONS`] processes of the Python workload.
    Python,
    /// A JVM without frame pointers, two threads deep in Java code
    /// (`tests/workloads/JavaChains.java`): the kernel walks its Java frames.
    Java,
    /// The bench's C workload, two threads.
    Native,
}

impl Workload {
    fn label(self) -> String {
        match self {
            Workload::Python => {
                format!("Python ({KERNEL_PYTHONS} × `pywork.py`, CPython 3.12)")
            }
            Workload::Java => format!(
                "Java (`JavaChains.java`, JDK 17 without `-XX:+PreserveFramePointer`, 2 threads, \
                 {JAVA_DEPTH} recursive frames)"
            ),
            Workload::Native => "native (`workload.c`, 2 threads)".to_owned(),
        }
    }
}

/// One in-kernel round.
pub struct KernelRound {
    pub workload: Workload,
    pub run_cnt: u64,
    pub run_time_ns: u64,
    pub programs: usize,
    /// From the recording's index.json (its whole life, not the window):
    /// samples taken, and those of the watched processes (neither idle nor
    /// filtered out).
    pub recorded: u64,
    pub watched: u64,
}

impl KernelRound {
    fn ns_per_sample(&self) -> f64 {
        self.run_time_ns as f64 / self.run_cnt as f64
    }
}

pub struct PythonReport {
    /// `python3.12 --version` and `py-spy --version`.
    pub python: String,
    pub py_spy: String,
    pub profilers: Vec<ProfilerResult>,
    pub kernel: Vec<KernelRound>,
    /// Pairs and rounds measured again because the host was busy after them.
    pub repeated: Vec<String>,
}

/// Measures `unit` until other processes stayed below
/// [`QUIET_BUSY_PERCENT`] of one core throughout it, noting each repeat in
/// `repeated`. Others' CPU is the host's busy time over the unit
/// (`/proc/stat`) less this process's and its children's (`getrusage`):
/// every workload and profiler a unit starts is reaped within it. So a
/// burst of someone's build in the middle of a pair counts, not only load
/// that is still there afterwards.
fn on_idle_host<T>(
    what: &str,
    repeated: &mut Vec<String>,
    mut unit: impl FnMut() -> Result<T>,
) -> Result<T> {
    loop {
        let (host, own, started) = (host_busy_time()?, own_cpu(), Instant::now());
        let value = unit()?;
        let busy = others_percent(
            host_busy_time()?.saturating_sub(host),
            own_cpu().saturating_sub(own),
            started.elapsed(),
        );
        if busy < QUIET_BUSY_PERCENT {
            return Ok(value);
        }
        if repeated.len() >= MAX_REPEATS {
            bail!(
                "the host keeps getting busy ({busy:.0} % of one core used by others during \
                 {what}; {MAX_REPEATS} pairs or rounds repeated already): stop what runs and retry"
            );
        }
        progress(&format!(
            "[python] the host got busy ({busy:.0} % of one core used by others) during {what}: \
             waiting for it to be idle, then measuring it again"
        ));
        repeated.push(format!(
            "{what} (other processes used {busy:.0} % of one core during it)"
        ));
        if let Err(busy) = wait_for_quiet_host_within(BUSY_PATIENCE)? {
            bail!(
                "the host stays busy ({busy:.0} % of one core used by other processes) for \
                 {BUSY_PATIENCE:?}: stop what runs (see `top`) and retry"
            );
        }
    }
}

/// CPU time of this process and of its children reaped so far.
fn own_cpu() -> Duration {
    let usage = |who| {
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `usage` is a valid rusage to fill in.
        unsafe { libc::getrusage(who, &mut usage) };
        timeval(usage.ru_utime) + timeval(usage.ru_stime)
    };
    usage(libc::RUSAGE_SELF) + usage(libc::RUSAGE_CHILDREN)
}

/// Other processes' CPU over `wall`, in % of one core: the host's busy
/// time less ours.
fn others_percent(host: Duration, own: Duration, wall: Duration) -> f64 {
    100.0 * host.saturating_sub(own).as_secs_f64() / wall.as_secs_f64()
}

pub fn measure(bench: &Bench, runs: usize) -> Result<PythonReport> {
    let python = Path::new(PYTHON);
    if !python.exists() {
        bail!(
            "the Python section runs its workload with CPython 3.12 at {PYTHON}, which is \
             not there (pyenv: `pyenv install 3.12.1`)"
        );
    }
    let py_spy = py_spy()?;
    let versions = (
        super::version_of(Command::new(python).arg("--version"))?,
        super::version_of(Command::new(&py_spy).arg("--version"))?,
    );
    let dir = bench.scratch.join("python");
    fs::create_dir_all(&dir)?;
    let native = if bench.workload.as_os_str().is_empty() {
        crate::toolchain::apt_install(&["gcc", "libc6-dev"])
            .context("installing the C compiler for the native workload")?;
        compile_workload(&dir)?
    } else {
        bench.workload.clone()
    };
    let java_classes = dir.join("java");
    fs::create_dir_all(&java_classes)?;
    crate::run_cmd(
        Command::new("javac")
            .arg("-d")
            .arg(&java_classes)
            .arg(workspace_root().join(JAVA_SOURCE)),
    )
    .context("compiling the Java workload (needs a JDK 17+: javac)")?;
    let harness = Harness {
        sparkprof: &bench.sparkprof,
        py_spy: &py_spy,
        python,
        script: workspace_root().join(SCRIPT),
        java_classes: &java_classes,
        dir: &dir,
    };
    wait_for_quiet_host()?;
    let mut repeated = Vec::new();
    let mut profilers: Vec<ProfilerResult> = PyProfiler::ALL
        .into_iter()
        .map(ProfilerResult::new)
        .collect();
    interleaved_pairs(runs, &mut profilers, |pair, profiled_first, result| {
        let profiler = result.arm;
        let what = format!("pair {} of {}", pair + 1, profiler.label());
        let (unprofiled, profiled) = on_idle_host(&what, &mut repeated, || {
            run_pair(
                profiled_first,
                || harness.unprofiled_run(),
                || harness.profiled_run(profiler),
            )
        })?;
        let profiled = Pair {
            profiled_first,
            unprofiled,
            ..profiled
        };
        progress(&format!(
            "[python] pair {}/{runs}, {}: {unprofiled:.3} s without, {:.3} s with ({:.3}); \
             its CPU {:.2} s; {} of {} samples with the whole chain",
            pair + 1,
            profiler.label(),
            profiled.profiled,
            profiled.ratio(),
            profiled.cpu.as_secs_f64(),
            profiled.extra.chained,
            profiled.extra.samples
        ));
        result.pairs.push(profiled);
        Ok(())
    })?;
    let kernel = harness.kernel_cost(&native, &mut repeated)?;
    Ok(PythonReport {
        python: versions.0,
        py_spy: versions.1,
        profilers,
        kernel,
        repeated,
    })
}

/// py-spy [`crate::spark::PY_SPY`] from the tests' venv, installed there
/// if missing.
fn py_spy() -> Result<PathBuf> {
    let path = crate::spark::venv().join("bin/py-spy");
    let pinned = Command::new(&path)
        .arg("--version")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains(crate::spark::PY_SPY));
    if pinned {
        return Ok(path);
    }
    progress(&format!(
        "py-spy {} is missing: installing it as `cargo xtask test` does",
        crate::spark::PY_SPY
    ));
    let venv = crate::spark::setup_with_py_spy().context("installing py-spy")?;
    Ok(venv.join("bin/py-spy"))
}

struct Harness<'a> {
    sparkprof: &'a Path,
    py_spy: &'a Path,
    python: &'a Path,
    script: PathBuf,
    java_classes: &'a Path,
    dir: &'a Path,
}

impl Harness<'_> {
    fn unprofiled_run(&self) -> Result<f64> {
        let mut work = PyWork::start(self.python, &self.script, ROUNDS)?;
        work.work.go()?;
        work.work.finish()
    }

    /// A pair with only the profiled side filled in.
    fn profiled_run(&self, profiler: PyProfiler) -> Result<Pair> {
        let mut work = PyWork::start(self.python, &self.script, ROUNDS)?;
        let mut recorder = match profiler {
            PyProfiler::Sparkprof => self.sparkprof(RATE_HZ, &[work.pid], true)?,
            PyProfiler::PySpy => self.py_spy(work.pid)?,
        };
        pause(SETTLE)?;
        let (cpu_before, started) = (cpu_time(recorder.pid())?, Instant::now());
        work.work.go()?;
        let seconds = work.work.elapsed()?;
        let cpu = cpu_time(recorder.pid())?.saturating_sub(cpu_before);
        let window = started.elapsed();
        recorder.stop()?;
        let stacks = match profiler {
            PyProfiler::Sparkprof => {
                sparkprof_stacks(&recorder.dir.join(SPARKPROF_OUTPUT), work.pid)?
            }
            PyProfiler::PySpy => {
                let raw = recorder.dir.join("raw.txt");
                fs::read_to_string(&raw).with_context(|| format!("reading {}", raw.display()))?
            }
        };
        let (chained, samples) = chain_counts(&stacks);
        work.work.exit()?;
        recorder.remove_output();
        Ok(Pair {
            profiled_first: false,
            unprofiled: f64::NAN,
            profiled: seconds,
            cpu,
            window,
            extra: Chains { samples, chained },
        })
    }

    /// `sparkprof record --pid PID ...`, recording and, if `python`,
    /// following the Python frames of every one of `pids`.
    fn sparkprof(&self, hz: u32, pids: &[u32], python: bool) -> Result<Recorder> {
        let dir = self.fresh_dir("sparkprof")?;
        let mut command = Command::new(self.sparkprof);
        command.args(["record", "--frequency", &hz.to_string()]);
        for pid in pids {
            command.args(["--pid", &pid.to_string()]);
        }
        command
            .arg("--output")
            .arg(dir.join(SPARKPROF_OUTPUT))
            .env("NO_COLOR", "1");
        let recorder = Recorder::start("sparkprof", command, dir, "recording on")?;
        if python {
            check_following(&recorder, pids.len())?;
        }
        Ok(recorder)
    }

    /// `py-spy record --rate 99 --pid PID --format raw --output FILE`.
    fn py_spy(&self, pid: u32) -> Result<Recorder> {
        let dir = self.fresh_dir("py-spy")?;
        let mut command = Command::new(self.py_spy);
        command
            .args(["record", "--rate", &RATE_HZ.to_string()])
            .args(["--pid", &pid.to_string()])
            .args(["--format", "raw", "--output"])
            .arg(dir.join("raw.txt"));
        // Printed once it has attached, just before its sampling loop.
        Recorder::start("py-spy", command, dir, "Sampling process")
    }

    fn fresh_dir(&self, name: &str) -> Result<PathBuf> {
        let dir = self.dir.join(format!("{name}-{}", bench_unique()));
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(dir)
    }

    /// In-kernel ns per sample on the Python, Java and native workloads,
    /// in A B C, C B A, A B C order.
    fn kernel_cost(&self, native: &Path, repeated: &mut Vec<String>) -> Result<Vec<KernelRound>> {
        let _stats = SysctlGuard::set("kernel/bpf_stats_enabled", "1")?;
        let mut rounds = Vec::new();
        for round in 0..KERNEL_ROUNDS {
            let mut order = [Workload::Python, Workload::Java, Workload::Native];
            if round % 2 == 1 {
                order.reverse();
            }
            for workload in order {
                let what = format!("in-kernel round {} on the {workload:?} workload", round + 1);
                let result = on_idle_host(&what, repeated, || self.kernel_round(workload, native))?;
                progress(&format!(
                    "[python] in-kernel cost, {}, round {}/{KERNEL_ROUNDS}: {} samples, {:.0} ns per sample",
                    workload.label(),
                    round + 1,
                    result.run_cnt,
                    result.ns_per_sample()
                ));
                rounds.push(result);
            }
        }
        Ok(rounds)
    }

    fn kernel_round(&self, workload: Workload, native: &Path) -> Result<KernelRound> {
        // Whichever runs, it is killed when this round ends.
        let (mut pythons, mut background) = (Vec::new(), None);
        let pids: Vec<u32> = match workload {
            Workload::Java => {
                let seconds = (WARM_UP + KERNEL_WINDOW).as_secs() + 30;
                let jvm = Command::new("java")
                    .arg("-cp")
                    .arg(self.java_classes)
                    .args([
                        "JavaChains",
                        &seconds.to_string(),
                        "2",
                        &JAVA_DEPTH.to_string(),
                    ])
                    .stdout(Stdio::null())
                    .spawn()
                    .context("starting the Java workload")?;
                let load = background.insert(Background(jvm));
                vec![load.0.id()]
            }
            Workload::Python => {
                for _ in 0..KERNEL_PYTHONS {
                    pythons.push(PyWork::start(self.python, &self.script, 0)?);
                }
                pythons.iter().map(|w| w.pid).collect()
            }
            Workload::Native => {
                let load = background.insert(Background::start(native)?);
                vec![load.0.id()]
            }
        };
        let mut recorder = self.sparkprof(KERNEL_HZ, &pids, workload == Workload::Python)?;
        for work in &mut pythons {
            work.work.go()?;
        }
        pause(WARM_UP)?;
        let before = ProgStats::read(recorder.pid())?;
        pause(KERNEL_WINDOW)?;
        let after = ProgStats::read(recorder.pid())?;
        recorder.stop()?;
        let (recorded, watched) = sparkprof_sample_counts(&recorder.dir.join(SPARKPROF_OUTPUT))?;
        recorder.remove_output();
        let result = KernelRound {
            workload,
            run_cnt: after.run_cnt.saturating_sub(before.run_cnt),
            run_time_ns: after.run_time_ns.saturating_sub(before.run_time_ns),
            programs: after.programs,
            recorded,
            watched,
        };
        if result.run_cnt == 0 {
            bail!("sparkprof's perf_event programs ran no samples in {KERNEL_WINDOW:?}");
        }
        Ok(result)
    }
}

/// The Python workload, waiting for its go line; killed if dropped.
struct PyWork {
    work: GoWorkload,
    pid: u32,
}

impl PyWork {
    /// Starts it with `rounds` of work (0: until killed) and reads its pid.
    fn start(python: &Path, script: &Path, rounds: u64) -> Result<Self> {
        let work = GoWorkload::start(
            Command::new(python)
                .arg(script)
                .arg(rounds.to_string())
                .stderr(Stdio::null()),
            "the Python workload",
        )?;
        let pid = parse_prefixed(&work.hello, "pid ").with_context(|| {
            format!(
                "unexpected first line of the Python workload: {:?}",
                work.hello
            )
        })?;
        Ok(Self { work, pid })
    }
}

/// `line` without `prefix`, parsed.
fn parse_prefixed<T: std::str::FromStr>(line: &str, prefix: &str) -> Option<T> {
    line.trim().strip_prefix(prefix)?.trim().parse().ok()
}

/// Fails unless sparkprof said it follows the Python frames of `count`
/// processes (logged before "recording on" for processes running then).
fn check_following(recorder: &Recorder, count: usize) -> Result<()> {
    let log = recorder.log();
    let following = log.lines().filter(|l| l.contains(FOLLOWING)).count();
    if following < count {
        bail!(
            "sparkprof follows the Python frames of {following} of the {count} Python \
             process(es) it records (its log has no \"{FOLLOWING}\" for the others), so it \
             would sample the interpreter's C frames only: this section measures it with \
             Python frames. Its log:\n{log}"
        );
    }
    Ok(())
}

/// index.json `stats`: samples taken, and of those the ones neither idle
/// nor filtered out (of the `--pid` processes).
fn sparkprof_sample_counts(profiles: &Path) -> Result<(u64, u64)> {
    let index = sparkprof_index(profiles)?;
    let field = |name: &str| index["stats"][name].as_u64().unwrap_or(0);
    let samples = field("samples");
    Ok((
        samples,
        samples.saturating_sub(field("idle") + field("filtered")),
    ))
}

/// The folded lines of sparkprof's on-CPU files of process `pid`, from
/// the recording's index.json.
fn sparkprof_stacks(profiles: &Path, pid: u32) -> Result<String> {
    let index = sparkprof_index(profiles)?;
    let mut stacks = String::new();
    for file in index["files"].as_array().into_iter().flatten() {
        if file["kind"] != "cpu" || file["pid"].as_u64() != Some(u64::from(pid)) {
            continue;
        }
        let Some(path) = file["path"].as_str() else {
            continue;
        };
        let path = profiles.join(path);
        stacks +=
            &fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    }
    Ok(stacks)
}

/// Of folded stacks (`root;...;leaf COUNT` lines: sparkprof's files and
/// py-spy's raw format alike, both naming a Python frame `function
/// (file:line)`): the samples whose Python frames are the whole chain from
/// the script's root to where it was, and all samples.
///
/// Whole: the workload's frames are `<module>`, `main`, then [`CHAIN`] from
/// its start, as far as the sampled frame (native frames between them do
/// not count). A walk goes from the running frame to its callers, so one
/// cut short loses the root end (`<module>` missing) and a wrong link shows
/// as a frame out of place; a sample taken while `outer` calls `middle` is
/// whole without `middle`. (A sample that stops before `leaf` is not
/// taken for a cut walk: before the section counted only stacks down to
/// `leaf`, and its 0.3 % of others were such calls in progress, e.g.
/// `outer (pywork.py:42);_PyObject_Malloc`.)
fn chain_counts(folded: &str) -> (u64, u64) {
    let (mut chained, mut total) = (0, 0);
    let expected: Vec<&str> = ["<module>", "main"].into_iter().chain(CHAIN).collect();
    for line in folded.lines() {
        let Some((stack, count)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(count) = count.parse::<u64>() else {
            continue;
        };
        total += count;
        let workload: Vec<&str> = stack
            .split(';')
            .filter(|frame| frame.contains("pywork.py"))
            .filter_map(|frame| frame.split_once(" (").map(|(function, _)| function))
            .collect();
        if !workload.is_empty() && expected.starts_with(&workload) {
            chained += count;
        }
    }
    (chained, total)
}

// ---------------------------------------------------------------------------
// The report.

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        f64::NAN
    } else {
        100.0 * part as f64 / whole as f64
    }
}

impl PythonReport {
    pub fn markdown(&self) -> String {
        let runs = self.profilers.first().map_or(0, |p| p.pairs.len());
        let chain = CHAIN.join(" → ");
        let mut text = format!(
            "### 7. Python frames (a CPython workload under sparkprof and under py-spy; in-kernel cost of a Python and a Java sample)\n\n\
             **7.1 Slowdown.** `{SCRIPT}` under {}: one thread, {ROUNDS} rounds of integer \
             work under `{chain}`; {runs} interleaved pair(s) without and with each of: \
             `sparkprof record --pid PID` ({RATE_HZ} Hz, following the Python frames) and \
             `py-spy record --rate {RATE_HZ} --pid PID --format raw` ({}, its default \
             blocking mode: it stops the process for each sample). The order alternates \
             (without, with, with, without, ...) and the two profilers take turns going first. \
             Each profiler is started afresh on the waiting workload and samples before the \
             work begins; the time is the workload's own (`time.perf_counter` around the work \
             only). *With the whole chain*: the sample's Python frames are `<module>`, `main`, \
             then `{chain}` from its start as far as the frame it was in, none missing or out \
             of place (a walk cut short loses the root end; a sample taken while `outer` calls \
             `middle` is whole without `middle`).\n\n\
             | pair (order) | profiler | without, s | with, s | ratio | samples of the workload | with the whole chain |\n\
             |---|---|--:|--:|--:|--:|--:|\n",
            self.python, self.py_spy
        );
        text += &pair_rows(
            &self.profilers,
            |profiler| profiler.label().to_owned(),
            |pair| {
                format!(
                    " {} | {:.1} % |",
                    pair.extra.samples,
                    percent(pair.extra.chained, pair.extra.samples)
                )
            },
        );
        let median_of = |profiler: PyProfiler| {
            self.profilers
                .iter()
                .find(|p| p.arm == profiler)
                .map_or(f64::NAN, ProfilerResult::median_ratio)
        };
        let (sparkprof, py_spy) = (
            median_of(PyProfiler::Sparkprof),
            median_of(PyProfiler::PySpy),
        );
        let unprofiled: Vec<f64> = self
            .profilers
            .iter()
            .flat_map(|p| p.pairs.iter().map(|pair| pair.unprofiled))
            .collect();
        let noise = spread_percent(&unprofiled);
        let apart = 100.0 * (sparkprof - py_spy);
        let resolved = apart.abs() >= noise;
        text += "\n| profiler | slowdown, median of the pairs' ratios | its CPU while recording (utime + stime) | samples with the whole chain | target: below py-spy's slowdown |\n\
                 |---|--:|--:|--:|---|\n";
        for p in &self.profilers {
            let (chained, samples) = chained(p);
            let target = match p.arm {
                PyProfiler::Sparkprof if resolved => met(sparkprof < py_spy).to_owned(),
                PyProfiler::Sparkprof => format!(
                    "not resolved here ({} by {:.1} points, noise {noise:.1} %)",
                    if apart < 0.0 { "below" } else { "above" },
                    apart.abs()
                ),
                PyProfiler::PySpy => "(reference)".to_owned(),
            };
            text += &format!(
                "| {} | {} | {} | {:.1} % ({chained} of {samples}) | {target} |\n",
                p.arm.label(),
                p.slowdown_cell(),
                p.cpu_cell(),
                percent(chained, samples)
            );
        }
        text += &format!(
            "\nNoise: the {} runs without a profiler span {noise:.1} % from fastest to slowest; \
             sparkprof's median slowdown is {apart:+.1} points from py-spy's{}. *Whole \
             chain*: the profiler's samples of the workload whose `pywork.py` frames are \
             `<module>`, `main`, then `{chain}` from its start as far as the frame it was in.\n",
            unprofiled.len(),
            if resolved {
                ""
            } else {
                ", less than the noise: this run cannot tell which is lower (more pairs: `--runs N`)"
            },
        );
        text += &self.kernel_markdown();
        if !self.repeated.is_empty() {
            let items: Vec<String> = self.repeated.iter().map(|r| format!("- {r}\n")).collect();
            text += &format!(
                "\nMeasured again, once the host was idle again, because other processes \
                 used more than {QUIET_BUSY_PERCENT} % of one core during them (the host's busy \
                 time in `/proc/stat` less the bench's and its children's):\n\n{}",
                items.concat()
            );
        }
        text
    }

    fn kernel_markdown(&self) -> String {
        let mut text = format!(
            "\n**7.2 In-kernel cost of a Python and a Java sample.** With `kernel.bpf_stats_enabled=1` \
             (restored afterwards), `sparkprof record --frequency {KERNEL_HZ} --pid ...` on \
             {KERNEL_PYTHONS} processes of the Python workload (both CPUs busy in `{chain}`; \
             sparkprof walks the interpreter's frame chain at each sample), on a JVM without \
             frame pointers whose two threads spin under {JAVA_DEPTH} recursive Java frames \
             (the tests' `JavaChains`; sparkprof walks its Java frames from HotSpot's \
             structures; the `hotspot_walk` program it tail-calls is timed within the \
             sampler's run) and on the C \
             workload of section 1 (two threads under a 12-deep native chain), started afresh \
             for each round, {KERNEL_ROUNDS} rounds each in A B C, C B A, A B C order: `run_time_ns` \
             and `run_cnt` of its perf_event programs (`/proc/PID/fdinfo`) after a {:.0} s \
             warm-up and {:.1} s later. Those count every run of the program, also on samples \
             of other processes (dropped early in the program) and of idle CPUs: *of the \
             workload* is the share of the recording's samples that were the workload's \
             (index.json `samples` minus `idle` and `filtered`, over sparkprof's whole \
             recording, which begins and ends a little outside the window).\n\n\
             | workload | perf_event programs | samples | of the workload | ns per sample | rounds, ns per sample | ratio to native |\n\
             |---|--:|--:|--:|--:|--:|--:|\n",
            WARM_UP.as_secs_f64(),
            KERNEL_WINDOW.as_secs_f64(),
            chain = CHAIN.join(" → ")
        );
        let per_workload = |workload: Workload| {
            let rounds: Vec<&KernelRound> = self
                .kernel
                .iter()
                .filter(|r| r.workload == workload)
                .collect();
            let samples: u64 = rounds.iter().map(|r| r.run_cnt).sum();
            let ns: u64 = rounds.iter().map(|r| r.run_time_ns).sum();
            let low = rounds
                .iter()
                .map(|r| r.ns_per_sample())
                .fold(f64::INFINITY, f64::min);
            let high = rounds
                .iter()
                .map(|r| r.ns_per_sample())
                .fold(f64::NEG_INFINITY, f64::max);
            (rounds, samples, ns as f64 / samples as f64, (low, high))
        };
        let native = per_workload(Workload::Native);
        let python = per_workload(Workload::Python);
        let java = per_workload(Workload::Java);
        let mut low_shares = Vec::new();
        for (workload, (rounds, samples, ns, _)) in [
            (Workload::Python, &python),
            (Workload::Java, &java),
            (Workload::Native, &native),
        ] {
            if rounds.is_empty() {
                continue;
            }
            let programs = rounds.iter().map(|r| r.programs).max().unwrap_or(0);
            let recorded: u64 = rounds.iter().map(|r| r.recorded).sum();
            let watched: u64 = rounds.iter().map(|r| r.watched).sum();
            let share = percent(watched, recorded);
            if share < WATCHED_FLOOR_PERCENT {
                low_shares.push(format!("{} {share:.1} %", workload.label()));
            }
            let each: Vec<String> = rounds
                .iter()
                .map(|r| format!("{:.0}", r.ns_per_sample()))
                .collect();
            text += &format!(
                "| {} | {programs} | {samples} | {share:.1} % | {ns:.0} | {} | {:.2} |\n",
                workload.label(),
                each.join(", "),
                ns / native.2
            );
        }
        let (n_low, n_high) = native.3;
        for (name, measured) in [("Python", &python), ("Java", &java)] {
            if measured.0.is_empty() {
                continue;
            }
            let (low, high) = measured.3;
            let overlap = if low <= n_high && n_low <= high {
                "they overlap, so the difference is within the round-to-round noise"
            } else {
                "they do not overlap"
            };
            text += &format!(
                "\nA {name} sample costs {:.2} × a native one in the kernel ({:+.0} ns). Rounds: \
                 {name} {low:.0}–{high:.0} ns, native {n_low:.0}–{n_high:.0} ns per sample; \
                 {overlap}.\n",
                measured.2 / native.2,
                measured.2 - native.2
            );
        }
        if !low_shares.is_empty() {
            text += &format!(
                "\n**Caution:** of the workload below {WATCHED_FLOOR_PERCENT} % ({}): many \
                 of the program's runs were on other processes or idle CPUs, whose samples \
                 cost less, so ns per sample understates a sample of the workload.\n",
                low_shares.join(", ")
            );
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(profiled_first: bool, unprofiled: f64, profiled: f64) -> Pair {
        Pair::fixture(
            profiled_first,
            (unprofiled, profiled),
            Duration::from_millis(3000),
            Chains {
                samples: 300,
                chained: 297,
            },
        )
    }

    fn round(workload: Workload, ns: u64) -> KernelRound {
        KernelRound {
            workload,
            run_cnt: 5000,
            run_time_ns: 5000 * ns,
            programs: 1,
            recorded: 7000,
            watched: 6930,
        }
    }

    #[test]
    fn the_report_lists_every_pair_the_target_and_the_kernel_ratio() {
        let report = PythonReport {
            python: "Python 3.12.1".to_owned(),
            py_spy: "py-spy 0.4.1".to_owned(),
            profilers: vec![
                ProfilerResult {
                    arm: PyProfiler::Sparkprof,
                    pairs: vec![pair(false, 3.0, 3.03), pair(true, 3.0, 3.06)],
                },
                ProfilerResult {
                    arm: PyProfiler::PySpy,
                    pairs: vec![pair(false, 3.0, 3.3), pair(true, 2.97, 3.3)],
                },
            ],
            kernel: vec![
                round(Workload::Python, 3000),
                round(Workload::Native, 2000),
                round(Workload::Native, 2000),
                round(Workload::Python, 3000),
            ],
            repeated: vec![
                "pair 2 of py-spy 99 Hz (other processes used 40 % of one core during it)"
                    .to_owned(),
            ],
        };
        let text = report.markdown();
        assert!(text.starts_with("### 7. Python frames"), "{text}");
        assert!(
            text.contains(
                "| 1 (without first) | sparkprof 99 Hz | 3.000 | 3.030 | 1.010 | 300 | 99.0 % |"
            ),
            "{text}"
        );
        assert!(
            text.contains("| 2 (with first) | py-spy 99 Hz | 2.970 | 3.300 | 1.111 |"),
            "{text}"
        );
        assert!(
            text.contains("| sparkprof 99 Hz | +1.5 % (1.015; pairs 1.010 – 1.020) | 1.00 % of one core (0.06 s in 6.0 s) | 99.0 % (594 of 600) | met |"),
            "{text}"
        );
        assert!(text.contains("| py-spy 99 Hz | +10.6 % "), "{text}");
        assert!(text.contains("(reference)"), "{text}");
        assert!(
            text.contains("the 4 runs without a profiler span 1.0 %"),
            "{text}"
        );
        assert!(text.contains("-9.1 points from py-spy's"), "{text}");
        assert!(
            text.contains("| 1 | 10000 | 99.0 % | 3000 | 3000, 3000 | 1.50 |"),
            "{text}"
        );
        assert!(
            text.contains(
                "| native (`workload.c`, 2 threads) | 1 | 10000 | 99.0 % | 2000 | 2000, 2000 | 1.00 |"
            ),
            "{text}"
        );
        assert!(
            text.contains("1.50 × a native one in the kernel (+1000 ns)"),
            "{text}"
        );
        assert!(!text.contains("not met"), "{text}");
        assert!(text.contains("they do not overlap"), "{text}");
        assert!(!text.contains("Caution"), "{text}");
        assert!(
            text.contains("children's):\n\n- pair 2 of py-spy 99 Hz (other processes used 40 % of one core during it)\n"),
            "{text}"
        );
    }

    #[test]
    fn a_difference_within_the_noise_is_not_resolved() {
        let mut busy = round(Workload::Native, 2500);
        busy.watched = 3500;
        let report = PythonReport {
            python: String::new(),
            py_spy: String::new(),
            profilers: vec![
                ProfilerResult {
                    arm: PyProfiler::Sparkprof,
                    pairs: vec![pair(false, 3.0, 3.06), pair(true, 3.3, 3.3)],
                },
                ProfilerResult {
                    arm: PyProfiler::PySpy,
                    pairs: vec![pair(false, 3.0, 3.09), pair(true, 3.0, 3.06)],
                },
            ],
            kernel: vec![
                round(Workload::Python, 2400),
                busy,
                round(Workload::Native, 2000),
                round(Workload::Python, 3000),
            ],
            repeated: Vec::new(),
        };
        let text = report.markdown();
        // sparkprof +1.0 %, py-spy +2.5 %: 1.5 points apart, noise 10 %.
        assert!(
            text.contains("| not resolved here (below by 1.5 points, noise 10.0 %) |"),
            "{text}"
        );
        assert!(text.contains("cannot tell which is lower"), "{text}");
        assert!(
            !text.contains("| met |") && !text.contains("not met"),
            "{text}"
        );
        assert!(
            text.contains("Python 2400–3000 ns, native 2000–2500 ns per sample; they overlap"),
            "{text}"
        );
        assert!(
            text.contains("| native (`workload.c`, 2 threads) | 1 | 10000 | 74.5 % |"),
            "{text}"
        );
        assert!(text.contains("**Caution:**"), "{text}");
        assert!(!text.contains("Measured again"), "{text}");
    }

    #[test]
    fn sparkprof_slower_than_py_spy_is_not_met() {
        let report = PythonReport {
            python: String::new(),
            py_spy: String::new(),
            profilers: vec![
                ProfilerResult {
                    arm: PyProfiler::Sparkprof,
                    pairs: vec![pair(false, 3.0, 3.3)],
                },
                ProfilerResult {
                    arm: PyProfiler::PySpy,
                    pairs: vec![pair(false, 3.0, 3.1)],
                },
            ],
            kernel: vec![round(Workload::Python, 3000), round(Workload::Native, 2000)],
            repeated: Vec::new(),
        };
        assert!(report.markdown().contains("**not met**"));
    }

    #[test]
    fn the_chain_is_found_in_sparkprof_and_py_spy_stacks() {
        let folded = "\
python3.12 [42];python3.12;_start;<module> (xtask/bench/python/pywork.py:69);main (xtask/bench/python/pywork.py:60);run (xtask/bench/python/pywork.py:50);outer (xtask/bench/python/pywork.py:44);middle (xtask/bench/python/pywork.py:40);inner (xtask/bench/python/pywork.py:36);leaf (xtask/bench/python/pywork.py:31) 90
<module> (pywork.py:69);main (pywork.py:60);run (pywork.py:50);outer (pywork.py:44);middle (pywork.py:40);_PyEval_EvalFrameDefault;inner (pywork.py:36);leaf (pywork.py:30) 7
python3.12 [42];python3.12;PyLong_FromLong 2
<module> (pywork.py:69);main (pywork.py:59) 1
not a stack line
";
        // Whole: down to `leaf`, with native frames between, and in `main`
        // before the work; no Python frame at all is not.
        assert_eq!(chain_counts(folded), (98, 100));
        // Out of order is not the chain.
        assert_eq!(
            chain_counts(
                "leaf (pywork.py:1);run (pywork.py:2);outer (pywork.py:3);middle (pywork.py:4);inner (pywork.py:5) 4\n"
            ),
            (0, 4)
        );
        // A call in progress is whole; a walk cut at the root end, or one
        // that skipped a frame, is not.
        let transitions = "\
<module> (pywork.py:69);main (pywork.py:60);run (pywork.py:49);outer (pywork.py:42);_PyObject_Malloc 3
run (pywork.py:49);outer (pywork.py:44);middle (pywork.py:40);inner (pywork.py:36);leaf (pywork.py:31) 5
<module> (pywork.py:69);main (pywork.py:60);run (pywork.py:49);middle (pywork.py:40) 7
";
        assert_eq!(chain_counts(transitions), (3, 15));
    }

    #[test]
    fn others_cpu_is_the_hosts_less_ours() {
        let s = Duration::from_secs_f64;
        // 7 s of a pair: the workload and profiler used 3.2 s, the host 3.5 s.
        assert!((others_percent(s(3.5), s(3.2), s(7.0)) - 4.286).abs() < 0.01);
        // Tick rounding can put ours above the host's: none, not negative.
        assert_eq!(others_percent(s(3.19), s(3.2), s(7.0)), 0.0);
        let host = host_busy_time().unwrap();
        let own = own_cpu();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = std::hint::black_box(x ^ i.wrapping_mul(2654435761));
        }
        assert!(own_cpu() > own && host_busy_time().unwrap() >= host);
    }

    #[test]
    fn workload_lines_parse() {
        assert_eq!(parse_prefixed::<u32>("pid 1234\n", "pid "), Some(1234));
        assert_eq!(
            parse_prefixed::<f64>("elapsed 3.021\n", "elapsed "),
            Some(3.021)
        );
        assert_eq!(parse_prefixed::<u32>("ready\n", "pid "), None);
    }
}
