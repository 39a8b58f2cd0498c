//! `cargo xtask bench`: sparkprof beside `perf record` and bpftrace, in one run.
//!
//! Three figures, all measured in the same run on the same host so that they
//! can be compared with each other (BENCHMARKS.md explains each one and the
//! targets):
//!
//! 1. In-kernel cost per sample: `run_time_ns / run_cnt` of the profiler's
//!    perf_event BPF programs, with `kernel.bpf_stats_enabled` on, sparkprof
//!    against bpftrace at 999 Hz while both CPUs are busy (perf record has
//!    no BPF program, so it has no such figure).
//! 2. Overhead: wall time of a fixed amount of CPU work on both CPUs,
//!    unprofiled and profiled, interleaved so that drift of the host hits
//!    both alike, for every profiler at 99 and 999 Hz.
//! 3. sparkprof's own cost: CPU time per wall second and peak RSS of the
//!    profiler process at 99 Hz over a 20 s recording under load, with the
//!    CPU time of perf record and bpftrace for comparison.
//! 4. JIT frames (sparkprof alone, see [`jit`]): perf-map load time and
//!    lookup rate, and the share of a busy JVM's JIT frames named and
//!    misnamed.
//! 5. Spark (sparkprof alone, see [`spark`]): a multi-stage PySpark job's
//!    runtime without and with sparkprof, interleaved; stage attribution of
//!    a fake executor; what a thread dump's safepoints cost the JVM.
//! 6. Off-CPU time (sparkprof alone, see [`off_cpu`]): a pipe ping-pong's
//!    runtime without and with an empty program on `sched_switch` (the
//!    floor) and sparkprof on-CPU only, `--off-cpu` recording others and
//!    `--off-cpu` recording it, interleaved; sparkprof's CPU; in-kernel ns
//!    per `sched_switch` run; the Spark job without and with `--off-cpu`.
//! 7. Python frames (see [`python`]): a CPython workload's slowdown under
//!    sparkprof and under py-spy at 99 Hz, interleaved; the in-kernel ns per
//!    sample of sparkprof on Python against a native workload.
//! 8. Many threads (see [`threads`]): start, stop and a busy loop's slowdown
//!    of `record --off-cpu` beside a JVM and a CPython process with few and
//!    with thousands of threads.
//!
//! `--only SECTION[,SECTION]` runs some of them (`kernel`, `overhead`,
//! `cost`, `jit`, `spark`, `offcpu`, `python`, `threads`). Everything the profilers write goes to a scratch
//! directory that is removed afterwards; the results are printed and each
//! section is written into its own marked block of BENCHMARKS.md (see
//! [`write_sections`]), so a partial run keeps the other sections' latest
//! figures. Needs root.

use std::{
    cell::RefCell,
    fs,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::atomic::{AtomicBool, Ordering},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, anyhow, bail};

use crate::{build, run_cmd, toolchain, workspace_root};

mod jit;
mod off_cpu;
mod python;
mod spark;
mod threads;

const USAGE: &str = "usage: cargo xtask bench [--runs N] [--only SECTION[,SECTION...]]
  N: interleaved pairs per profiler (default 5), and Spark job pairs (default 3)
  SECTION: kernel (in-kernel cost per sample), overhead, cost (own cost), jit (JIT frames),
           spark (Spark job runtime, stage attribution, thread-dump safepoints),
           offcpu (pipe ping-pong and the Spark job with and without --off-cpu),
           python (a Python workload under sparkprof and py-spy; in-kernel cost of a Python sample),
           threads (start, stop and cost beside a JVM and CPython with thousands of threads; at most 3 runs);
           default: all";

/// Interleaved (unprofiled, profiled) workload pairs per profiler.
const DEFAULT_RUNS: usize = 5;
/// Units of work per workload thread: about 2.5 s on the reference host
/// (2 vCPUs). Fixed work, not fixed time, so that overhead shows as time.
const WORKLOAD_ROUNDS: u64 = 380_000;
/// Sampling rate of the per-sample cost figure.
const COST_HZ: u32 = 999;
/// The per-sample cost is measured in this many rounds per profiler, each
/// this long after a warm-up: 10 s per profiler in all.
const COST_ROUNDS: usize = 4;
const COST_ROUND: Duration = Duration::from_millis(2500);
/// Lets a profiler reach its steady state before a window starts.
const WARM_UP: Duration = Duration::from_secs(1);
/// Sampling rate and length of the own-cost recording.
const OWN_COST_HZ: u32 = 99;
const OWN_COST_WINDOW: Duration = Duration::from_secs(20);
/// Longest wait for a profiler to start sampling, and to exit after SIGINT.
/// Before each figure the host must be quiet: other processes below this
/// much CPU (% of one core) over [`QUIET_WINDOW`], within [`QUIET_PATIENCE`].
const QUIET_BUSY_PERCENT: f64 = 10.0;
const QUIET_WINDOW: Duration = Duration::from_secs(2);
const QUIET_PATIENCE: Duration = Duration::from_secs(60);
const START_TIMEOUT: Duration = Duration::from_secs(60);
const STOP_TIMEOUT: Duration = Duration::from_secs(60);
/// `prog_type` of BPF_PROG_TYPE_PERF_EVENT in `/proc/PID/fdinfo`.
const BPF_PROG_TYPE_PERF_EVENT: u64 = 7;
/// Targets (see BENCHMARKS.md).
const TARGET_CPU_PERCENT: f64 = 0.5;
const TARGET_RSS_MIB: f64 = 64.0;

/// Before the JIT section's load and lookup figures the bench waits this
/// long for an idle host, then measures anyway and says so: the JIT name
/// shares do not depend on idleness.
const JIT_QUIET_PATIENCE: Duration = Duration::from_secs(15);

/// The sections of the benchmark, in the order they run and appear.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Section {
    Kernel,
    Overhead,
    Cost,
    Jit,
    Spark,
    OffCpu,
    Python,
    Threads,
}

impl Section {
    const ALL: [Section; 8] = [
        Section::Kernel,
        Section::Overhead,
        Section::Cost,
        Section::Jit,
        Section::Spark,
        Section::OffCpu,
        Section::Python,
        Section::Threads,
    ];

    /// Its name for `--only` and in its BENCHMARKS.md markers.
    fn name(self) -> &'static str {
        match self {
            Section::Kernel => "kernel",
            Section::Overhead => "overhead",
            Section::Cost => "cost",
            Section::Jit => "jit",
            Section::Spark => "spark",
            Section::OffCpu => "offcpu",
            Section::Python => "python",
            Section::Threads => "threads",
        }
    }

    fn begin_marker(self) -> String {
        format!("<!-- BEGIN cargo xtask bench: {} -->", self.name())
    }

    fn end_marker(self) -> String {
        format!("<!-- END cargo xtask bench: {} -->", self.name())
    }

    /// Whether it compares sparkprof with perf and bpftrace.
    fn uses_peers(self) -> bool {
        !matches!(
            self,
            Section::Jit | Section::Spark | Section::OffCpu | Section::Python | Section::Threads
        )
    }
}

/// The command line of `cargo xtask bench`.
#[derive(Debug, PartialEq, Eq)]
struct Options {
    runs: usize,
    /// Whether `--runs` set it (the Spark section has its own default).
    runs_set: bool,
    /// The sections to run, in [`Section::ALL`] order.
    sections: Vec<Section>,
    /// Whether `--only` chose them.
    only: bool,
}

pub fn run(args: &[String]) -> Result<()> {
    if let [flag, dir] = args
        && flag == jit::MAP_FIGURES_FLAG
    {
        return jit::print_map_figures(Path::new(dir));
    }
    let options = parse_options(args)?;
    let runs = options.runs;
    if unsafe { libc::geteuid() } != 0 {
        bail!("the benchmark loads eBPF programs and samples the whole host: run it as root");
    }
    let peers = options.sections.iter().any(|s| s.uses_peers());
    if peers {
        toolchain::apt_install(&["gcc", "libc6-dev", "linux-perf", "bpftrace"])
            .context("installing the benchmark's C compiler, perf and bpftrace from Debian")?;
    }
    let sparkprof = build()?;
    let versions = if peers {
        Versions::detect(&sparkprof)?
    } else {
        Versions::sparkprof_only(&sparkprof)?
    };
    interrupt::install();

    let started = Instant::now();
    let scratch = Scratch::create()?;
    let bench = Bench {
        workload: if peers {
            compile_workload(scratch.path())?
        } else {
            PathBuf::new()
        },
        sparkprof,
        scratch: scratch.path().to_path_buf(),
        incidents: RefCell::default(),
    };
    let host = Host::detect()?;
    let wants = |section| options.sections.contains(&section);
    let per_sample = match wants(Section::Kernel) {
        true => Some(bench.per_sample_costs()?),
        false => None,
    };
    let overhead = match wants(Section::Overhead) {
        true => Some(bench.overheads(runs)?),
        false => None,
    };
    let own_cost = match wants(Section::Cost) {
        true => Some(bench.own_costs()?),
        false => None,
    };
    let jit = match wants(Section::Jit) {
        true => Some(bench.jit()?),
        false => None,
    };
    let spark_pairs = match options.runs_set {
        true => runs,
        false => spark::DEFAULT_PAIRS,
    };
    let spark = match wants(Section::Spark) {
        true => Some(spark::measure(&bench, spark_pairs)?),
        false => None,
    };
    let off_cpu = match wants(Section::OffCpu) {
        true => Some(off_cpu::measure(&bench, runs, spark_pairs)?),
        false => None,
    };
    let python = match wants(Section::Python) {
        true => Some(python::measure(&bench, runs)?),
        false => None,
    };
    let threads = match wants(Section::Threads) {
        true => Some(threads::measure(&bench, runs.min(3))?),
        false => None,
    };
    let report = Report {
        command: command_line(&options),
        host,
        versions,
        runs,
        per_sample,
        overhead,
        own_cost,
        jit,
        spark,
        off_cpu,
        python,
        threads,
        incidents: bench.incidents.take(),
    };

    let sections = report.sections();
    for (_, text) in &sections {
        println!("\n{text}");
    }
    let path = workspace_root().join("BENCHMARKS.md");
    write_sections(&path, &sections)?;
    eprintln!(
        "xtask: bench finished in {:.0} s; results written to {}",
        started.elapsed().as_secs_f64(),
        path.display()
    );
    Ok(())
}

fn parse_options(args: &[String]) -> Result<Options> {
    let mut runs = None;
    let mut only: Option<Vec<Section>> = None;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) => (flag, Some(value.to_owned())),
            None => (arg.as_str(), None),
        };
        let mut value = || -> Result<String> {
            match inline.clone().or_else(|| args.next().cloned()) {
                Some(value) => Ok(value),
                None => bail!("{flag} needs a value\n{USAGE}"),
            }
        };
        match flag {
            "--runs" => {
                let value = value()?;
                match value.parse::<usize>() {
                    Ok(n) if n >= 1 => runs = Some(n),
                    _ => bail!("--runs needs a positive number, got {value:?}\n{USAGE}"),
                }
            }
            "--only" => {
                let value = value()?;
                let chosen = only.get_or_insert_with(Vec::new);
                for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                    match Section::ALL.into_iter().find(|s| s.name() == name) {
                        Some(section) => chosen.push(section),
                        None => bail!("unknown section {name:?}\n{USAGE}"),
                    }
                }
            }
            _ => bail!("{USAGE}"),
        }
    }
    let sections: Vec<Section> = match &only {
        Some(chosen) if chosen.is_empty() => bail!("--only needs a section\n{USAGE}"),
        Some(chosen) => Section::ALL
            .into_iter()
            .filter(|s| chosen.contains(s))
            .collect(),
        None => Section::ALL.to_vec(),
    };
    Ok(Options {
        runs: runs.unwrap_or(DEFAULT_RUNS),
        runs_set: runs.is_some(),
        only: only.is_some(),
        sections,
    })
}

/// The exact command that reproduces a run, for BENCHMARKS.md.
fn command_line(options: &Options) -> String {
    let mut command = "cargo xtask bench".to_owned();
    if options.runs_set {
        command += &format!(" --runs {}", options.runs);
    }
    if options.only {
        let names: Vec<&str> = options.sections.iter().map(|s| s.name()).collect();
        command += &format!(" --only {}", names.join(","));
    }
    command
}

/// Compiles `xtask/bench/workload.c` with frame pointers (like the programs
/// sparkprof is meant for, so every profiler walks full user stacks).
fn compile_workload(dir: &Path) -> Result<PathBuf> {
    compile_c("workload", dir, &["-pthread"]).context("compiling the benchmark workload")
}

/// Compiles `xtask/bench/<name>.c` into `dir` with `-O2` and frame pointers.
/// A profiler process with its output in `dir`; killed if dropped before
/// [`Recorder::stop`].
pub(crate) struct Recorder {
    name: &'static str,
    child: Child,
    /// Where its output goes.
    pub(crate) dir: PathBuf,
    log: PathBuf,
    reaped: bool,
}

impl Recorder {
    /// Starts `command` with its stdout and stderr in `dir/log` and waits
    /// until the log contains `ready`.
    pub(crate) fn start(
        name: &'static str,
        mut command: Command,
        dir: PathBuf,
        ready: &str,
    ) -> Result<Self> {
        let log = dir.join("log");
        let child = spawn_logged(&mut command, &log)?;
        let mut recorder = Self {
            name,
            child,
            dir,
            log,
            reaped: false,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let log = recorder.log();
            if log.contains(ready) {
                break;
            }
            if let Some(status) = recorder.child.try_wait()? {
                recorder.reaped = true;
                bail!("{name} exited ({status}) before sampling:\n{log}");
            }
            if Instant::now() > deadline {
                bail!("{name} did not start sampling within {START_TIMEOUT:?}:\n{log}");
            }
            pause(Duration::from_millis(20))?;
        }
        Ok(recorder)
    }

    pub(crate) fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub(crate) fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGINT (sparkprof and py-spy write their output on it) and a clean
    /// exit.
    pub(crate) fn stop(&mut self) -> Result<()> {
        unsafe { libc::kill(self.pid(), libc::SIGINT) };
        let deadline = Instant::now() + STOP_TIMEOUT;
        let status = loop {
            if let Some(status) = self.child.try_wait()? {
                self.reaped = true;
                break status;
            }
            if Instant::now() > deadline {
                bail!(
                    "{} did not exit within {STOP_TIMEOUT:?} of SIGINT",
                    self.name
                );
            }
            pause(Duration::from_millis(20))?;
        };
        if !status.success() {
            bail!(
                "{} failed after SIGINT ({status}):\n{}",
                self.name,
                self.log()
            );
        }
        Ok(())
    }

    /// Frees the space for the next runs.
    pub(crate) fn remove_output(&self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Starts a profiler with no input and its stdout and stderr in `log`.
pub(crate) fn spawn_logged(command: &mut Command, log: &Path) -> Result<Child> {
    let log_file = fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    command
        .stdin(Stdio::null())
        .stdout(log_file.try_clone()?)
        .stderr(log_file)
        .spawn()
        .with_context(|| format!("starting {command:?}"))
}

/// A recording's index.json.
pub(crate) fn sparkprof_index(profiles: &Path) -> Result<serde_json::Value> {
    let index = profiles.join("index.json");
    serde_json::from_str(
        &fs::read_to_string(&index).with_context(|| format!("reading {}", index.display()))?,
    )
    .with_context(|| format!("parsing {}", index.display()))
}

/// How far apart the slowest and the fastest of `values` are, in percent
/// of the fastest: the noise figure of every section with repeated runs.
pub(crate) fn spread_percent(values: &[f64]) -> f64 {
    let low = values.iter().copied().fold(f64::INFINITY, f64::min);
    let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    100.0 * (high / low - 1.0)
}

/// The order of a section's interleaved pairs: for each pair index, every
/// arm (a mode or a profiler) runs one pair, handed to `one` with the
/// index and whether the profiled run goes first. Even pairs run without
/// then with the profiler and odd ones with then without, and the arms
/// take turns going first, so that no kind of run always follows another
/// (a warm page cache or a CPU's frequency would otherwise favour one).
pub(crate) fn interleaved_pairs<Arm>(
    runs: usize,
    arms: &mut [Arm],
    mut one: impl FnMut(usize, bool, &mut Arm) -> Result<()>,
) -> Result<()> {
    for pair in 0..runs {
        let profiled_first = pair % 2 == 1;
        let mut order: Vec<&mut Arm> = arms.iter_mut().collect();
        if profiled_first {
            order.reverse();
        }
        for arm in order {
            one(pair, profiled_first, arm)?;
        }
    }
    Ok(())
}

/// One interleaved pair of workload runs, with what the profiled run's
/// recording said (`Extra`: a section's own counts).
pub(crate) struct TimedPair<Extra> {
    pub profiled_first: bool,
    /// The workload's seconds of work without and with the profiler.
    pub unprofiled: f64,
    pub profiled: f64,
    /// The profiler's utime + stime over the profiled run's work, and the
    /// wall time of that window.
    pub cpu: Duration,
    pub window: Duration,
    pub extra: Extra,
}

impl<Extra> TimedPair<Extra> {
    pub(crate) fn ratio(&self) -> f64 {
        self.profiled / self.unprofiled
    }

    /// A pair for the report tests: the profiler used 1 % of `window`.
    #[cfg(test)]
    pub(crate) fn fixture(
        profiled_first: bool,
        (unprofiled, profiled): (f64, f64),
        window: Duration,
        extra: Extra,
    ) -> Self {
        Self {
            profiled_first,
            unprofiled,
            profiled,
            cpu: window / 100,
            window,
            extra,
        }
    }
}

/// Every pair one arm (a mode or a profiler) of a section ran.
pub(crate) struct ArmPairs<Arm, Extra> {
    pub arm: Arm,
    pub pairs: Vec<TimedPair<Extra>>,
}

impl<Arm, Extra> ArmPairs<Arm, Extra> {
    pub(crate) fn new(arm: Arm) -> Self {
        Self {
            arm,
            pairs: Vec::new(),
        }
    }

    pub(crate) fn ratios(&self) -> Vec<f64> {
        self.pairs.iter().map(TimedPair::ratio).collect()
    }

    pub(crate) fn median_ratio(&self) -> f64 {
        median(&self.ratios())
    }

    /// (% of one core, CPU seconds, wall seconds) over all profiled runs.
    pub(crate) fn cpu_percent(&self) -> (f64, f64, f64) {
        let cpu: f64 = self.pairs.iter().map(|p| p.cpu.as_secs_f64()).sum();
        let wall: f64 = self.pairs.iter().map(|p| p.window.as_secs_f64()).sum();
        (100.0 * cpu / wall, cpu, wall)
    }

    /// The report's cell for this arm's slowdown: `+1.5 % (1.015; pairs
    /// 1.010 – 1.020)`, the median of the pairs' ratios and their range.
    pub(crate) fn slowdown_cell(&self) -> String {
        let ratios = self.ratios();
        let ratio = median(&ratios);
        let low = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        let high = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        format!(
            "{:+.1} % ({ratio:.3}; pairs {low:.3} – {high:.3})",
            100.0 * (ratio - 1.0)
        )
    }

    /// The report's cell for the profiler's CPU: `1.00 % of one core (0.06
    /// s in 6.0 s)`.
    pub(crate) fn cpu_cell(&self) -> String {
        let (percent, cpu, wall) = self.cpu_percent();
        format!("{percent:.2} % of one core ({cpu:.2} s in {wall:.1} s)")
    }
}

/// The rows of a section's table of pairs, pair by pair and arm by arm:
/// `| 1 (without first) | label | without | with | ratio |` and then the
/// cells `extra` gives for the pair (each ending in `|`).
pub(crate) fn pair_rows<Arm, Extra>(
    arms: &[ArmPairs<Arm, Extra>],
    label: impl Fn(&Arm) -> String,
    extra: impl Fn(&TimedPair<Extra>) -> String,
) -> String {
    let runs = arms.first().map_or(0, |arm| arm.pairs.len());
    let mut rows = String::new();
    for i in 0..runs {
        for arm in arms {
            let pair = &arm.pairs[i];
            let order = if pair.profiled_first {
                "with first"
            } else {
                "without first"
            };
            rows += &format!(
                "| {} ({order}) | {} | {:.3} | {:.3} | {:.3} |{}\n",
                i + 1,
                label(&arm.arm),
                pair.unprofiled,
                pair.profiled,
                pair.ratio(),
                extra(pair)
            );
        }
    }
    rows
}

/// The two runs of one pair in the order [`interleaved_pairs`] chose:
/// (unprofiled, profiled).
pub(crate) fn run_pair<Unprofiled, Profiled>(
    profiled_first: bool,
    unprofiled: impl FnOnce() -> Result<Unprofiled>,
    profiled: impl FnOnce() -> Result<Profiled>,
) -> Result<(Unprofiled, Profiled)> {
    if profiled_first {
        let profiled = profiled()?;
        Ok((unprofiled()?, profiled))
    } else {
        let unprofiled = unprofiled()?;
        Ok((unprofiled, profiled()?))
    }
}
pub(crate) fn compile_c(name: &str, dir: &Path, extra: &[&str]) -> Result<PathBuf> {
    let source = workspace_root().join(format!("xtask/bench/{name}.c"));
    let binary = dir.join(name);
    run_cmd(
        Command::new("cc")
            .args([
                "-O2",
                "-fno-omit-frame-pointer",
                "-mno-omit-leaf-frame-pointer",
            ])
            .args(extra)
            .arg("-o")
            .arg(&binary)
            .arg(&source),
    )?;
    Ok(binary)
}

/// What the measurements share.
struct Bench {
    sparkprof: PathBuf,
    workload: PathBuf,
    scratch: PathBuf,
    /// Profilers that hung after SIGINT (see [`Bench::retrying`]), for the report.
    incidents: RefCell<Vec<String>>,
}

impl Bench {
    /// Runs a measurement again, once, if a profiler hung after SIGINT.
    ///
    /// bpftrace 0.17 occasionally does not exit after SIGINT (seen once in
    /// about 60 stops, not reproduced in isolation); the whole run should
    /// not be lost to that. The incident is kept for the report, and a
    /// second hang fails the run.
    fn retrying<T>(&self, mut measure: impl FnMut() -> Result<T>) -> Result<T> {
        let err = match measure() {
            Ok(value) => return Ok(value),
            Err(err) => err,
        };
        let Some(hung) = err.downcast_ref::<Hung>() else {
            return Err(err);
        };
        eprintln!(
            "xtask: bench: warning: {hung}
{}",
            hung.diagnostics
        );
        progress("repeating that measurement once");
        self.incidents.borrow_mut().push(format!(
            "{} did not exit within {} s of SIGINT and was killed; that measurement was discarded and repeated.",
            hung.profiler,
            STOP_TIMEOUT.as_secs()
        ));
        measure().map_err(|err| match err.downcast::<Hung>() {
            Ok(hung) => anyhow!("{hung}, twice:\n{}", hung.diagnostics),
            Err(err) => err,
        })
    }

    /// Figure 1: in-kernel ns per sample, sparkprof and bpftrace at 999 Hz
    /// with both CPUs busy (idle samples are cheaper and would flatter both).
    /// Measured in rounds in A B B A A B B A order, so that neither profiler
    /// always runs first and slow drift of the host hits both alike: one
    /// round alone varies by 10 % or more on this VM.
    fn per_sample_costs(&self) -> Result<Vec<PerSample>> {
        wait_for_quiet_host()?;
        let _stats = SysctlGuard::set("kernel/bpf_stats_enabled", "1")?;
        let _load = Background::start(&self.workload)?;
        let mut results: Vec<PerSample> = [Tool::Sparkprof, Tool::Bpftrace]
            .into_iter()
            .map(|tool| PerSample::new(Profiler { tool, hz: COST_HZ }))
            .collect();
        for round in 0..COST_ROUNDS {
            let mut order: Vec<&mut PerSample> = results.iter_mut().collect();
            if round % 2 == 1 {
                order.reverse();
            }
            for result in order {
                let profiler = result.profiler;
                let (time, samples, programs) =
                    self.retrying(|| self.per_sample_round(profiler))?;
                result.add_round(time, samples, programs);
                progress(&format!(
                    "[1/3] in-kernel cost of {profiler}, round {}/{COST_ROUNDS}: {samples} samples, {:.0} ns per sample",
                    round + 1,
                    time.as_nanos() as f64 / samples as f64
                ));
            }
        }
        Ok(results)
    }

    /// One round: BPF run time, run count and program count over [`COST_ROUND`].
    fn per_sample_round(&self, profiler: Profiler) -> Result<(Duration, u64, usize)> {
        let running = Running::start(profiler, self, "cost")?;
        pause(WARM_UP)?;
        let before = ProgStats::read(running.pid())?;
        pause(COST_ROUND)?;
        let after = ProgStats::read(running.pid())?;
        running.stop()?;
        let samples = after.run_cnt.saturating_sub(before.run_cnt);
        if samples == 0 {
            bail!("{profiler}'s perf_event programs ran no samples in {COST_ROUND:?}");
        }
        let time = Duration::from_nanos(after.run_time_ns.saturating_sub(before.run_time_ns));
        Ok((time, samples, after.programs))
    }

    /// Figure 2: for each profiler, `runs` interleaved pairs of workload
    /// runs (unprofiled, then profiled).
    fn overheads(&self, runs: usize) -> Result<Vec<Overhead>> {
        wait_for_quiet_host()?;
        let mut results = Vec::new();
        for tool in [Tool::Sparkprof, Tool::Perf, Tool::Bpftrace] {
            for hz in [99, 999] {
                results.push(self.overhead(Profiler { tool, hz }, runs)?);
            }
        }
        Ok(results)
    }

    fn overhead(&self, profiler: Profiler, runs: usize) -> Result<Overhead> {
        let mut result = Overhead {
            profiler,
            unprofiled: Vec::new(),
            profiled: Vec::new(),
        };
        for run in 1..=runs {
            let (unprofiled, profiled) = self.retrying(|| self.overhead_pair(profiler))?;
            progress(&format!(
                "[2/3] overhead of {profiler}, run {run}/{runs}: {unprofiled:.3} s unprofiled, {profiled:.3} s profiled"
            ));
            result.unprofiled.push(unprofiled);
            result.profiled.push(profiled);
        }
        Ok(result)
    }

    /// One interleaved pair: wall seconds unprofiled, then profiled.
    fn overhead_pair(&self, profiler: Profiler) -> Result<(f64, f64)> {
        let unprofiled = self.time_workload()?;
        let running = Running::start(profiler, self, "overhead")?;
        let profiled = self.time_workload()?;
        running.stop()?;
        Ok((unprofiled, profiled))
    }

    /// Wall seconds of one fixed-work workload run.
    fn time_workload(&self) -> Result<f64> {
        let started = Instant::now();
        let status = Command::new(&self.workload)
            .arg(WORKLOAD_ROUNDS.to_string())
            .stdin(Stdio::null())
            .status()
            .context("running the workload")?;
        let elapsed = started.elapsed().as_secs_f64();
        interrupt::check()?;
        if !status.success() {
            bail!("the workload failed: {status}");
        }
        Ok(elapsed)
    }

    /// Figure 3: each profiler's own CPU time and peak RSS at 99 Hz under load.
    fn own_costs(&self) -> Result<Vec<OwnCost>> {
        wait_for_quiet_host()?;
        let _load = Background::start(&self.workload)?;
        [Tool::Sparkprof, Tool::Perf, Tool::Bpftrace]
            .into_iter()
            .map(|tool| {
                let profiler = Profiler {
                    tool,
                    hz: OWN_COST_HZ,
                };
                progress(&format!(
                    "[3/3] own cost of {profiler} ({OWN_COST_WINDOW:?})"
                ));
                self.retrying(|| self.own_cost(profiler))
            })
            .collect()
    }

    /// Figure 4: JIT frames (sparkprof only). The load and lookup figures
    /// want an idle host but are taken anyway after [`JIT_QUIET_PATIENCE`]
    /// (the report says so); the JVM recording needs no idle host, since
    /// it measures names, not time.
    fn jit(&self) -> Result<jit::JitReport> {
        let busy = match wait_for_quiet_host_within(JIT_QUIET_PATIENCE)? {
            Ok(()) => None,
            Err(busy) => {
                progress(&format!(
                    "[jit] the host stays busy ({busy:.0} % of one core): measuring anyway, noted in the report"
                ));
                Some(busy)
            }
        };
        let dir = self.scratch.join("jit");
        fs::create_dir_all(&dir)?;
        progress(&format!(
            "[jit] perf-map load and lookups on a {}-entry map",
            jit::MAP_ENTRIES
        ));
        let map = jit::map_figures_optimized(&dir)?;
        let jvm = jit::jvm_figures(&self.sparkprof, &dir)?;
        Ok(jit::JitReport { map, jvm, busy })
    }

    fn own_cost(&self, profiler: Profiler) -> Result<OwnCost> {
        let running = Running::start(profiler, self, "own-cost")?;
        let (cpu_before, wall_before) = (cpu_time(running.pid())?, Instant::now());
        pause(OWN_COST_WINDOW)?;
        let cpu = cpu_time(running.pid())? - cpu_before;
        let wall = wall_before.elapsed();
        let hwm_kib = vm_hwm_kib(running.pid())?;
        let exit = running.stop()?;
        let result = OwnCost {
            profiler,
            recording_cpu_percent: 100.0 * cpu.as_secs_f64() / wall.as_secs_f64(),
            lifetime_cpu_percent: 100.0 * exit.cpu.as_secs_f64() / exit.lifetime.as_secs_f64(),
            lifetime: exit.lifetime,
            hwm_kib,
            max_rss_kib: exit.max_rss_kib,
        };
        progress(&format!(
            "      {:.2} % of one core while recording, {:.2} % over its {:.1} s life, peak RSS {:.1} MiB",
            result.recording_cpu_percent,
            result.lifetime_cpu_percent,
            exit.lifetime.as_secs_f64(),
            mib(result.hwm_kib.max(result.max_rss_kib))
        ));
        Ok(result)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tool {
    Sparkprof,
    /// `sparkprof record --off-cpu`.
    SparkprofOffCpu,
    Perf,
    Bpftrace,
}

/// A profiler at a sampling rate, system-wide.
#[derive(Clone, Copy, Debug)]
struct Profiler {
    tool: Tool,
    hz: u32,
}

impl std::fmt::Display for Profiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self.tool {
            Tool::Sparkprof => "sparkprof",
            Tool::SparkprofOffCpu => "sparkprof --off-cpu",
            Tool::Perf => "perf record",
            Tool::Bpftrace => "bpftrace",
        };
        write!(f, "{name} {} Hz", self.hz)
    }
}

/// How to tell that a profiler is sampling.
enum Readiness {
    /// A line containing this text appears in the log.
    LogLine(&'static str),
    /// This file exists (perf record writes its header first, then
    /// synthesizes the existing processes, then samples: hence the settle).
    FileExists(PathBuf),
}

/// How to launch a profiler: all of its output goes under `dir`.
struct Launch {
    command: Command,
    /// Where its stdout and stderr go (bpftrace prints its maps on stdout).
    log: PathBuf,
    ready: Readiness,
    /// Extra wait after the readiness signal.
    settle: Duration,
}

impl Profiler {
    fn launch(self, sparkprof: &Path, dir: &Path) -> Launch {
        let hz = self.hz.to_string();
        let log = dir.join("log");
        match self.tool {
            Tool::Sparkprof | Tool::SparkprofOffCpu => {
                let mut command = Command::new(sparkprof);
                command.args(["record", "--frequency", &hz]);
                if self.tool == Tool::SparkprofOffCpu {
                    command.arg("--off-cpu");
                }
                command
                    .arg("--output")
                    .arg(dir.join("profiles"))
                    .env("NO_COLOR", "1");
                Launch {
                    command,
                    log,
                    ready: Readiness::LogLine("recording on"),
                    settle: Duration::ZERO,
                }
            }
            Tool::Perf => {
                let data = dir.join("perf.data");
                let mut command = Command::new("perf");
                command
                    .args(["record", "-F", &hz, "-a", "-g", "-e", "cpu-clock", "-o"])
                    .arg(&data);
                Launch {
                    command,
                    log,
                    ready: Readiness::FileExists(data),
                    settle: Duration::from_secs(1),
                }
            }
            Tool::Bpftrace => {
                let mut command = Command::new("bpftrace");
                command.args([
                    "-e",
                    &format!("profile:hz:{hz} {{ @[ustack, kstack, tid] = count(); }}"),
                ]);
                Launch {
                    command,
                    log,
                    // Printed just before the probes attach.
                    ready: Readiness::LogLine("Attaching"),
                    settle: Duration::from_millis(500),
                }
            }
        }
    }
}

impl Profiler {
    /// Whether a `wait4` status is a clean end after SIGINT: exit status 0,
    /// or for perf record death by SIGINT, because after writing its data
    /// it re-raises the signal with the default action.
    fn exited_cleanly(self, status: i32) -> bool {
        let exited_zero = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
        let reraised = self.tool == Tool::Perf
            && libc::WIFSIGNALED(status)
            && libc::WTERMSIG(status) == libc::SIGINT;
        exited_zero || reraised
    }
}

/// A profiler process; killed if dropped before [`Running::stop`].
struct Running {
    profiler: Profiler,
    child: Child,
    log: PathBuf,
    dir: PathBuf,
    spawned: Instant,
    reaped: bool,
}

/// How a profiler ended, from `wait4`.
struct Exit {
    cpu: Duration,
    max_rss_kib: u64,
    lifetime: Duration,
}

impl Running {
    /// Starts `profiler` with its output in a fresh directory under the
    /// scratch directory and waits until it samples.
    fn start(profiler: Profiler, bench: &Bench, purpose: &str) -> Result<Self> {
        let dir = bench.scratch.join(format!(
            "{purpose}-{}-{}",
            profiler.to_string().replace(' ', "-"),
            bench_unique()
        ));
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let Launch {
            mut command,
            log,
            ready,
            settle,
        } = profiler.launch(&bench.sparkprof, &dir);
        let child = spawn_logged(&mut command, &log).with_context(|| profiler.to_string())?;
        let mut running = Self {
            profiler,
            child,
            log,
            dir,
            spawned: Instant::now(),
            reaped: false,
        };
        running.wait_ready(&ready)?;
        pause(settle)?;
        Ok(running)
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn wait_ready(&mut self, ready: &Readiness) -> Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let is_ready = match ready {
                Readiness::LogLine(text) => fs::read_to_string(&self.log)
                    .map(|log| log.contains(text))
                    .unwrap_or(false),
                Readiness::FileExists(path) => path.exists(),
            };
            if is_ready {
                return Ok(());
            }
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "{} exited ({status}) before sampling:\n{}",
                    self.profiler,
                    self.log_tail()
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "{} did not start sampling within {START_TIMEOUT:?}:\n{}",
                    self.profiler,
                    self.log_tail()
                );
            }
            pause(Duration::from_millis(20))?;
        }
    }

    /// Sends SIGINT (every profiler here drains and writes its output on
    /// it), waits for the exit and checks that it succeeded.
    fn stop(mut self) -> Result<Exit> {
        unsafe { libc::kill(self.pid(), libc::SIGINT) };
        let (status, usage) = self.wait4()?;
        let lifetime = self.spawned.elapsed();
        if !self.profiler.exited_cleanly(status) {
            bail!(
                "{} failed after SIGINT (wait status {status:#x}):\n{}",
                self.profiler,
                self.log_tail()
            );
        }
        // Its output is not looked at: free the space for the next runs.
        let _ = fs::remove_dir_all(&self.dir);
        Ok(Exit {
            cpu: timeval(usage.ru_utime) + timeval(usage.ru_stime),
            max_rss_kib: usage.ru_maxrss as u64,
            lifetime,
        })
    }

    /// `wait4`, rather than `Child::wait`, for the rusage of the whole
    /// life: its CPU time and peak RSS include the final drain and write.
    fn wait4(&mut self) -> Result<(i32, libc::rusage)> {
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            let mut status = 0;
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            let pid = unsafe { libc::wait4(self.pid(), &mut status, libc::WNOHANG, &mut usage) };
            if pid == self.pid() {
                self.reaped = true;
                return Ok((status, usage));
            }
            if pid < 0 {
                bail!(
                    "wait4 on {}: {}",
                    self.profiler,
                    std::io::Error::last_os_error()
                );
            }
            if Instant::now() > deadline {
                let diagnostics = format!(
                    "{}\nlast lines of its output:\n{}",
                    thread_states(self.pid()),
                    self.log_tail()
                );
                unsafe { libc::kill(self.pid(), libc::SIGKILL) };
                unsafe { libc::waitpid(self.pid(), std::ptr::null_mut(), 0) };
                self.reaped = true;
                return Err(Hung {
                    profiler: self.profiler,
                    diagnostics,
                }
                .into());
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    fn log_tail(&self) -> String {
        let log = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A profiler that did not exit within [`STOP_TIMEOUT`] of SIGINT (it has
/// been killed since).
#[derive(Debug)]
struct Hung {
    profiler: Profiler,
    /// Where its threads were, and its last output.
    diagnostics: String,
}

impl std::fmt::Display for Hung {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} did not exit within {STOP_TIMEOUT:?} of SIGINT (killed)",
            self.profiler
        )
    }
}

impl std::error::Error for Hung {}

/// Name, state, wait channel and kernel stack of each thread of `pid`: what
/// a hung profiler was doing.
fn thread_states(pid: i32) -> String {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return format!("process {pid} is gone");
    };
    let mut lines = Vec::new();
    for task in tasks.flatten() {
        let dir = task.path();
        let read = |name: &str| fs::read_to_string(dir.join(name)).unwrap_or_default();
        let stat = read("stat");
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .unwrap_or("?")
            .to_owned();
        let stack: Vec<String> = read("stack").lines().take(6).map(str::to_owned).collect();
        lines.push(format!(
            "thread {} ({}): state {state}, wchan {}, kernel stack: {}",
            task.file_name().to_string_lossy(),
            read("comm").trim(),
            read("wchan").trim(),
            stack.join(" <- ")
        ));
    }
    lines.join("\n")
}

/// A distinct number per profiler start, for directory names.
fn bench_unique() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn timeval(tv: libc::timeval) -> Duration {
    Duration::from_secs(tv.tv_sec as u64) + Duration::from_micros(tv.tv_usec as u64)
}

/// The workload looping on both CPUs until dropped: the load under which
/// figures 1 and 3 are measured.
struct Background(Child);

impl Background {
    fn start(workload: &Path) -> Result<Self> {
        let child = Command::new(workload)
            .arg("0")
            .stdin(Stdio::null())
            .spawn()
            .context("starting the background workload")?;
        Ok(Self(child))
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Sets a sysctl and puts the previous value back when dropped, so that
/// an error or Ctrl-C does not leave BPF statistics on (they slow every BPF
/// program on the host).
struct SysctlGuard {
    path: PathBuf,
    previous: String,
}

impl SysctlGuard {
    fn set(name: &str, value: &str) -> Result<Self> {
        let path = Path::new("/proc/sys").join(name);
        let previous = fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?
            .trim()
            .to_owned();
        fs::write(&path, value)
            .with_context(|| format!("writing {value} to {}", path.display()))?;
        Ok(Self { path, previous })
    }
}

impl Drop for SysctlGuard {
    fn drop(&mut self) {
        if let Err(err) = fs::write(&self.path, &self.previous) {
            eprintln!(
                "xtask: could not restore {} to {}: {err}",
                self.path.display(),
                self.previous
            );
        }
    }
}

/// The scratch directory, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn create() -> Result<Self> {
        let path = std::env::temp_dir().join(format!("sparkprof-bench-{}", std::process::id()));
        fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(Self(path))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Totals over a process's perf_event BPF programs, from the fdinfo of its
/// `bpf-prog` file descriptors (each program counted once by its id).
struct ProgStats {
    programs: usize,
    run_time_ns: u64,
    run_cnt: u64,
}

impl ProgStats {
    fn read(pid: i32) -> Result<Self> {
        let mut seen = Vec::new();
        let mut stats = Self {
            programs: 0,
            run_time_ns: 0,
            run_cnt: 0,
        };
        for (path, info) in bpf_prog_fdinfos(pid)? {
            let field = |name: &str| fdinfo_field(&info, name);
            if field("prog_type") != Some(BPF_PROG_TYPE_PERF_EVENT) {
                continue;
            }
            let id = field("prog_id");
            if seen.contains(&id) {
                continue;
            }
            seen.push(id);
            let (Some(run_time_ns), Some(run_cnt)) = (field("run_time_ns"), field("run_cnt"))
            else {
                bail!("{path} has no run_time_ns/run_cnt (kernel too old for BPF stats?)");
            };
            stats.programs += 1;
            stats.run_time_ns += run_time_ns;
            stats.run_cnt += run_cnt;
        }
        if stats.programs == 0 {
            bail!("process {pid} holds no perf_event BPF program");
        }
        Ok(stats)
    }
}

/// `(fdinfo path, fdinfo text)` of every BPF program process `pid` holds.
fn bpf_prog_fdinfos(pid: i32) -> Result<Vec<(String, String)>> {
    let fds = format!("/proc/{pid}/fd");
    let mut programs = Vec::new();
    for entry in fs::read_dir(&fds).with_context(|| format!("listing {fds}"))? {
        let entry = entry?;
        let is_prog = fs::read_link(entry.path())
            .map(|target| target.as_os_str() == "anon_inode:bpf-prog")
            .unwrap_or(false);
        if !is_prog {
            continue;
        }
        let path = format!("/proc/{pid}/fdinfo/{}", entry.file_name().to_string_lossy());
        // A program closed meanwhile is skipped.
        if let Ok(info) = fs::read_to_string(&path) {
            programs.push((path, info));
        }
    }
    Ok(programs)
}

fn fdinfo_field(info: &str, name: &str) -> Option<u64> {
    info.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key == name).then(|| value.trim().parse().ok())?
    })
}

/// User plus system CPU time of a process so far (all its threads).
fn cpu_time(pid: i32) -> Result<Duration> {
    let path = format!("/proc/{pid}/stat");
    let stat = fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    // The fields after the parenthesised command name start at field 3
    // (state); utime and stime are fields 14 and 15, in clock ticks.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |index: usize| -> Result<u64> {
        fields
            .get(index)
            .and_then(|value| value.parse().ok())
            .with_context(|| format!("malformed {path}"))
    };
    let total = ticks(11)? + ticks(12)?;
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Ok(Duration::from_secs_f64(total as f64 / per_second as f64))
}

/// Peak resident set size so far.
fn vm_hwm_kib(pid: i32) -> Result<u64> {
    let path = format!("/proc/{pid}/status");
    let status = fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("no VmHWM in {path}"))
}

struct PerSample {
    profiler: Profiler,
    programs: usize,
    samples: u64,
    run_time: Duration,
    /// ns per sample of each round.
    rounds: Vec<f64>,
}

impl PerSample {
    fn new(profiler: Profiler) -> Self {
        Self {
            profiler,
            programs: 0,
            samples: 0,
            run_time: Duration::ZERO,
            rounds: Vec::new(),
        }
    }

    fn add_round(&mut self, run_time: Duration, samples: u64, programs: usize) {
        self.programs = self.programs.max(programs);
        self.samples += samples;
        self.run_time += run_time;
        self.rounds
            .push(run_time.as_nanos() as f64 / samples as f64);
    }

    /// Over all rounds: total BPF run time / total samples.
    fn ns_per_sample(&self) -> f64 {
        self.run_time.as_nanos() as f64 / self.samples as f64
    }
}

struct Overhead {
    profiler: Profiler,
    unprofiled: Vec<f64>,
    profiled: Vec<f64>,
}

impl Overhead {
    /// profiled / unprofiled of each interleaved pair.
    fn ratios(&self) -> Vec<f64> {
        self.profiled
            .iter()
            .zip(&self.unprofiled)
            .map(|(profiled, unprofiled)| profiled / unprofiled)
            .collect()
    }
}

struct OwnCost {
    profiler: Profiler,
    /// Between start-up and SIGINT: the steady state of a long recording.
    recording_cpu_percent: f64,
    /// From spawn to exit, so including start-up and the final write.
    lifetime_cpu_percent: f64,
    lifetime: Duration,
    /// VmHWM just before SIGINT.
    hwm_kib: u64,
    /// ru_maxrss after the exit, so including the final write.
    max_rss_kib: u64,
}

pub(crate) fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    if sorted.len().is_multiple_of(2) {
        (sorted[middle - 1] + sorted[middle]) / 2.0
    } else {
        sorted[middle]
    }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "**not met**" }
}

/// The host the figures belong to.
struct Host {
    date: String,
    kernel: String,
    cpus: usize,
    cpu_model: String,
}

impl Host {
    fn detect() -> Result<Self> {
        let date = Command::new("date")
            .args(["-u", "+%Y-%m-%d %H:%M UTC"])
            .output()
            .context("running date")?;
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        Ok(Self {
            date: String::from_utf8_lossy(&date.stdout).trim().to_owned(),
            kernel: fs::read_to_string("/proc/sys/kernel/osrelease")?
                .trim()
                .to_owned(),
            cpus: thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model: cpuinfo
                .lines()
                .find_map(|line| line.strip_prefix("model name"))
                .and_then(|rest| rest.split_once(':'))
                .map(|(_, model)| model.trim().to_owned())
                .unwrap_or_else(|| "unknown CPU".to_owned()),
        })
    }
}

/// Versions of the three profilers; also proves each one runs.
struct Versions {
    sparkprof: String,
    perf: String,
    bpftrace: String,
}

impl Versions {
    /// Only sparkprof's, for a run without perf and bpftrace.
    fn sparkprof_only(sparkprof: &Path) -> Result<Self> {
        Ok(Self {
            sparkprof: version_of(Command::new(sparkprof).arg("--version"))?,
            perf: String::new(),
            bpftrace: String::new(),
        })
    }

    fn detect(sparkprof: &Path) -> Result<Self> {
        Ok(Self {
            sparkprof: version_of(Command::new(sparkprof).arg("--version"))?,
            perf: version_of(Command::new("perf").arg("--version"))?,
            bpftrace: version_of(Command::new("bpftrace").arg("--version"))?,
        })
    }
}

fn version_of(command: &mut Command) -> Result<String> {
    let output = command
        .output()
        .with_context(|| format!("cannot run {command:?}"))?;
    if !output.status.success() {
        bail!("{command:?} failed: {}", output.status);
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

struct Report {
    command: String,
    host: Host,
    versions: Versions,
    runs: usize,
    per_sample: Option<Vec<PerSample>>,
    overhead: Option<Vec<Overhead>>,
    own_cost: Option<Vec<OwnCost>>,
    jit: Option<jit::JitReport>,
    spark: Option<spark::SparkReport>,
    off_cpu: Option<off_cpu::OffCpuReport>,
    python: Option<python::PythonReport>,
    threads: Option<threads::ThreadsReport>,
    incidents: Vec<String>,
}

impl Report {
    /// The generated blocks of BENCHMARKS.md of the sections that ran, also
    /// printed as the result. Each says when and how it was measured, since
    /// blocks of different runs stand side by side.
    fn sections(&self) -> Vec<(Section, String)> {
        let mut sections = Vec::new();
        if let Some(per_sample) = &self.per_sample {
            let text = self.per_sample_table(per_sample);
            sections.push((Section::Kernel, text));
        }
        if let Some(overhead) = &self.overhead {
            sections.push((Section::Overhead, self.overhead_table(overhead)));
        }
        if let Some(own_cost) = &self.own_cost {
            sections.push((Section::Cost, self.own_cost_table(own_cost)));
        }
        if let Some(jit) = &self.jit {
            sections.push((Section::Jit, jit.markdown()));
        }
        if let Some(spark) = &self.spark {
            sections.push((Section::Spark, spark.markdown()));
        }
        if let Some(off_cpu) = &self.off_cpu {
            sections.push((Section::OffCpu, off_cpu.markdown()));
        }
        if let Some(python) = &self.python {
            sections.push((Section::Python, python.markdown()));
        }
        if let Some(threads) = &self.threads {
            sections.push((Section::Threads, threads.markdown()));
        }
        let incidents = self.incidents_note();
        let last = sections.len().saturating_sub(1);
        sections
            .into_iter()
            .enumerate()
            .map(|(i, (section, table))| {
                let (heading, rest) = table.split_once("\n\n").unwrap_or((&table, ""));
                let note = if i == last { incidents.as_str() } else { "" };
                let text = format!("{heading}\n\n{}\n\n{rest}{note}", self.measured(section));
                (section, text)
            })
            .collect()
    }

    /// When, where, with which command and which tools a section was measured.
    fn measured(&self, section: Section) -> String {
        let Host {
            date,
            kernel,
            cpus,
            cpu_model,
        } = &self.host;
        let Versions {
            sparkprof,
            perf,
            bpftrace,
        } = &self.versions;
        let tools = if section.uses_peers() {
            format!("{sparkprof}, {perf}, {bpftrace}")
        } else {
            sparkprof.clone()
        };
        format!(
            "Measured {date} with `{}` on Linux {kernel}, {cpus} CPUs ({cpu_model}); {tools}.",
            self.command
        )
    }

    /// Profilers that hung after SIGINT in this run, if any.
    fn incidents_note(&self) -> String {
        if self.incidents.is_empty() {
            return String::new();
        }
        let items: Vec<String> = self.incidents.iter().map(|i| format!("- {i}\n")).collect();
        format!("\n### Incidents\n\n{}", items.concat())
    }

    fn per_sample_table(&self, per_sample: &[PerSample]) -> String {
        let bpftrace = per_sample
            .iter()
            .find(|p| p.profiler.tool == Tool::Bpftrace)
            .map(PerSample::ns_per_sample);
        let mut table = format!(
            "### 1. In-kernel cost per sample ({COST_HZ} Hz, both CPUs busy, {COST_ROUNDS} rounds of {:.1} s each, A B B A order)\n\n\
             | profiler | perf_event programs | samples | ns per sample | rounds, ns per sample | ratio to bpftrace | target: no higher than bpftrace |\n\
             |---|--:|--:|--:|--:|--:|---|\n",
            COST_ROUND.as_secs_f64()
        );
        for p in per_sample {
            let ratio = bpftrace.map_or(f64::NAN, |b| p.ns_per_sample() / b);
            let target = match p.profiler.tool {
                Tool::Sparkprof => met(ratio <= 1.0),
                _ => "",
            };
            let rounds: Vec<String> = p.rounds.iter().map(|ns| format!("{ns:.0}")).collect();
            table += &format!(
                "| {} | {} | {} | {:.0} | {} | {ratio:.2} | {target} |\n",
                p.profiler,
                p.programs,
                p.samples,
                p.ns_per_sample(),
                rounds.join(", ")
            );
        }
        table + &per_sample_noise(per_sample)
    }

    fn overhead_table(&self, overhead: &[Overhead]) -> String {
        let mut table = format!(
            "### 2. Overhead on a fixed CPU workload (2 threads, {} interleaved pairs each)\n\n\
             | profiler | unprofiled, median s | profiled, median s | profiled / unprofiled, median of pairs | range of pairs |\n\
             |---|--:|--:|--:|--:|\n",
            self.runs
        );
        for o in overhead {
            let ratios = o.ratios();
            let low = ratios.iter().copied().fold(f64::INFINITY, f64::min);
            let high = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let ratio = median(&ratios);
            table += &format!(
                "| {} | {:.3} | {:.3} | {ratio:.3} ({:+.1} %) | {low:.3} – {high:.3} |\n",
                o.profiler,
                median(&o.unprofiled),
                median(&o.profiled),
                100.0 * (ratio - 1.0)
            );
        }
        let unprofiled: Vec<f64> = overhead
            .iter()
            .flat_map(|o| o.unprofiled.iter().copied())
            .collect();
        let spread = unprofiled.iter().copied().fold(f64::NEG_INFINITY, f64::max)
            / unprofiled.iter().copied().fold(f64::INFINITY, f64::min);
        table
            + &format!(
                "\nRun-to-run noise: about ±5 % on this host (the unprofiled runs of this run \
                 span {:.1} % from fastest to slowest), so at 99 Hz differences of a few \
                 per cent between profilers are within the noise.\n",
                100.0 * (spread - 1.0)
            )
    }

    fn own_cost_table(&self, own_cost: &[OwnCost]) -> String {
        let mut table = format!(
            "### 3. The profiler's own cost ({OWN_COST_HZ} Hz, {} s recording, both CPUs busy)\n\n\
             | profiler | CPU while recording, % of one core | CPU over its whole life, % of one core | life, s | peak RSS before SIGINT, MiB | peak RSS incl. final write, MiB | targets: < {TARGET_CPU_PERCENT} % CPU, < {TARGET_RSS_MIB} MiB |\n\
             |---|--:|--:|--:|--:|--:|---|\n",
            OWN_COST_WINDOW.as_secs()
        );
        for o in own_cost {
            let target = match o.profiler.tool {
                Tool::Sparkprof => format!(
                    "CPU {}, RSS {}",
                    met(o.recording_cpu_percent < TARGET_CPU_PERCENT),
                    met(mib(o.hwm_kib.max(o.max_rss_kib)) < TARGET_RSS_MIB)
                ),
                _ => String::new(),
            };
            table += &format!(
                "| {} | {:.2} | {:.2} | {:.1} | {:.1} | {:.1} | {target} |\n",
                o.profiler,
                o.recording_cpu_percent,
                o.lifetime_cpu_percent,
                o.lifetime.as_secs_f64(),
                mib(o.hwm_kib),
                mib(o.max_rss_kib)
            );
        }
        table
    }
}

/// Whether the rounds of the two profilers overlap: if they do, the ratio
/// is within the round-to-round noise, whichever way it points.
fn per_sample_noise(per_sample: &[PerSample]) -> String {
    let ranges: Vec<(String, f64, f64)> = per_sample
        .iter()
        .map(|p| {
            let low = p.rounds.iter().copied().fold(f64::INFINITY, f64::min);
            let high = p.rounds.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (p.profiler.to_string(), low, high)
        })
        .collect();
    let [(a, a_low, a_high), (b, b_low, b_high)] = ranges.as_slice() else {
        return String::new();
    };
    let verdict = if a_low <= b_high && b_low <= a_high {
        "they overlap, so the difference is within the round-to-round noise"
    } else {
        "they do not overlap"
    };
    format!(
        "\nRounds: {a} {a_low:.0}–{a_high:.0} ns, {b} {b_low:.0}–{b_high:.0} ns per sample; {verdict}.\n"
    )
}

/// Writes each section's text into its own block of `path`, between
/// [`Section::begin_marker`] and [`Section::end_marker`], keeping
/// everything else: what people wrote and the blocks of sections that did
/// not run (their latest figures stay). A missing block is inserted after
/// the block of the nearest earlier section, or before the nearest later
/// one, or appended under a "Latest results" heading; a missing file is
/// created.
fn write_sections(path: &Path, sections: &[(Section, String)]) -> Result<()> {
    let mut text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => "# Benchmarks\n".to_owned(),
        Err(err) => return Err(err).with_context(|| format!("reading {}", path.display())),
    };
    for (section, body) in sections {
        text = with_block(&text, *section, body);
    }
    fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// `text` with `section`'s block replaced by (or given) `body`.
fn with_block(text: &str, section: Section, body: &str) -> String {
    let (begin, end) = (section.begin_marker(), section.end_marker());
    let block = format!("{begin}\n{body}{end}\n");
    if let (Some(b), Some(e)) = (text.find(&begin), text.find(&end))
        && b < e
    {
        let after = &text[e + end.len()..];
        return format!(
            "{}{block}{}",
            &text[..b],
            after.strip_prefix('\n').unwrap_or(after)
        );
    }
    let index = Section::ALL.iter().position(|s| *s == section).unwrap_or(0);
    // After the nearest earlier block...
    for earlier in Section::ALL[..index].iter().rev() {
        let marker = earlier.end_marker();
        if let Some(at) = text.find(&marker) {
            let at = at + marker.len();
            let at = if text[at..].starts_with('\n') {
                at + 1
            } else {
                at
            };
            return format!("{}\n{block}{}", &text[..at], &text[at..]);
        }
    }
    // ... or before the nearest later one ...
    for later in &Section::ALL[index + 1..] {
        if let Some(at) = text.find(&later.begin_marker()) {
            return format!("{}{block}\n{}", &text[..at], &text[at..]);
        }
    }
    // ... or at the end.
    let heading = if text.contains("## Latest results") {
        ""
    } else {
        "\n## Latest results\n"
    };
    format!("{}\n{heading}\n{block}", text.trim_end())
}

/// Like [`wait_for_quiet_host`], but gives up after `patience` without
/// failing: `Err(busy)` says how busy the host still was (% of one core).
fn wait_for_quiet_host_within(patience: Duration) -> Result<std::result::Result<(), f64>> {
    let deadline = Instant::now() + patience;
    loop {
        let busy = busy_cpu_percent(QUIET_WINDOW)?;
        if busy < QUIET_BUSY_PERCENT {
            return Ok(Ok(()));
        }
        if Instant::now() > deadline {
            return Ok(Err(busy));
        }
    }
}

/// Waits until nothing else uses the CPUs: the figures compare profilers
/// on an otherwise idle host, and a busy one (a build, a forgotten
/// workload) silently inflates every time in them.
fn wait_for_quiet_host() -> Result<()> {
    let deadline = Instant::now() + QUIET_PATIENCE;
    loop {
        let busy = busy_cpu_percent(QUIET_WINDOW)?;
        if busy < QUIET_BUSY_PERCENT {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "the host stays busy ({busy:.0} % of one core used by other processes, \
                 more than {QUIET_BUSY_PERCENT} %): the figures would measure that, not the \
                 profilers; stop what runs (see `top`) and retry"
            );
        }
        progress(&format!(
            "the host is busy ({busy:.0} % of one core used by other processes): waiting"
        ));
    }
}

/// Non-idle CPU time of the whole host over `window`, in % of one core,
/// from the `cpu` line of /proc/stat (user, nice, system, irq, softirq and
/// steal: time the hypervisor gave to others is lost to us too).
fn busy_cpu_percent(window: Duration) -> Result<f64> {
    let before = host_busy_time()?;
    pause(window)?;
    let after = host_busy_time()?;
    Ok(100.0 * after.saturating_sub(before).as_secs_f64() / window.as_secs_f64())
}

/// The host's non-idle CPU time since boot, from the `cpu` line of
/// /proc/stat (user, nice, system, irq, softirq and steal).
pub(crate) fn host_busy_time() -> Result<Duration> {
    let stat = fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .and_then(|line| line.strip_prefix("cpu "))
        .map(|rest| {
            rest.split_whitespace()
                .filter_map(|f| f.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let [user, nice, system, _idle, _iowait, irq, softirq, steal, ..] = fields[..] else {
        bail!("malformed /proc/stat");
    };
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Ok(Duration::from_secs_f64(
        (user + nice + system + irq + softirq + steal) as f64 / per_second,
    ))
}

fn progress(message: &str) {
    eprintln!("xtask: bench: {message}");
}

/// Sleeps, but returns early with an error on Ctrl-C.
fn pause(duration: Duration) -> Result<()> {
    let deadline = Instant::now() + duration;
    loop {
        interrupt::check()?;
        let now = Instant::now();
        if now >= deadline {
            return Ok(());
        }
        thread::sleep((deadline - now).min(Duration::from_millis(50)));
    }
}

/// Ctrl-C turns into an error, so that the guards above run (restoring
/// `kernel.bpf_stats_enabled`, stopping profilers and the workload) instead
/// of xtask dying on the spot. The profilers get the terminal's SIGINT too
/// and exit by themselves.
mod interrupt {
    use super::{AtomicBool, Ordering, Result, bail};

    static INTERRUPTED: AtomicBool = AtomicBool::new(false);

    extern "C" fn on_sigint(_: libc::c_int) {
        INTERRUPTED.store(true, Ordering::SeqCst);
    }

    pub fn install() {
        let handler: extern "C" fn(libc::c_int) = on_sigint;
        // SAFETY: the handler only stores to an atomic.
        unsafe { libc::signal(libc::SIGINT, handler as libc::sighandler_t) };
    }

    pub fn check() -> Result<()> {
        if INTERRUPTED.load(Ordering::SeqCst) {
            bail!("interrupted");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn pairs_alternate_their_order_and_the_arms_take_turns() {
        let mut arms = ["a", "b"];
        let runs = std::cell::RefCell::new(Vec::new());
        interleaved_pairs(3, &mut arms, |pair, profiled_first, arm| {
            let (unprofiled, profiled) = run_pair(
                profiled_first,
                || {
                    runs.borrow_mut().push(format!("{pair}{arm}-"));
                    Ok(())
                },
                || {
                    runs.borrow_mut().push(format!("{pair}{arm}+"));
                    Ok(())
                },
            )?;
            assert_eq!((unprofiled, profiled), ((), ()));
            Ok(())
        })
        .unwrap();
        assert_eq!(
            runs.into_inner(),
            [
                "0a-", "0a+", "0b-", "0b+", "1b+", "1b-", "1a+", "1a-", "2a-", "2a+", "2b-", "2b+"
            ]
        );
    }

    #[test]
    fn only_chooses_sections_in_their_order() {
        let options = parse_options(&args(&["--only", "jit,kernel", "--runs=3"])).unwrap();
        assert_eq!(options.sections, [Section::Kernel, Section::Jit]);
        assert_eq!(options.runs, 3);
        assert_eq!(
            command_line(&options),
            "cargo xtask bench --runs 3 --only kernel,jit"
        );
        let all = parse_options(&[]).unwrap();
        assert_eq!(all.sections, Section::ALL);
        assert_eq!(command_line(&all), "cargo xtask bench");
        assert!(parse_options(&args(&["--only", "gpu"])).is_err());
        assert!(parse_options(&args(&["--only"])).is_err());
    }

    #[test]
    fn a_section_block_is_replaced_or_inserted_keeping_the_others() {
        let text = "# B\n\n## Latest results\n\n\
                    <!-- BEGIN cargo xtask bench: kernel -->\nold kernel\n<!-- END cargo xtask bench: kernel -->\n\n\
                    <!-- BEGIN cargo xtask bench: cost -->\nold cost\n<!-- END cargo xtask bench: cost -->\n\ntail\n";
        let replaced = with_block(text, Section::Kernel, "new kernel\n");
        assert!(
            replaced.contains("new kernel\n<!-- END cargo xtask bench: kernel -->\n\n<!-- BEGIN")
        );
        assert!(!replaced.contains("old kernel") && replaced.contains("old cost"));
        let inserted = with_block(text, Section::Overhead, "overhead\n");
        let (k, o, c) = (
            inserted.find("old kernel").unwrap(),
            inserted.find("overhead\n").unwrap(),
            inserted.find("old cost").unwrap(),
        );
        assert!(k < o && o < c);
        let appended = with_block(text, Section::Jit, "jit\n");
        assert!(appended.find("old cost").unwrap() < appended.find("jit\n").unwrap());
        assert!(appended.contains("tail\n"));
        let fresh = with_block("# B\n", Section::Jit, "jit\n");
        assert!(fresh.contains("## Latest results") && fresh.contains("jit\n<!-- END"));
    }
}
