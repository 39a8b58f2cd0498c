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
//!    sample of sparkprof on Python, and on a JVM without frame pointers
//!    (Java frames walked from HotSpot's structures), against a native
//!    workload.
//! 8. Many threads (see [`threads`]): start, stop and a busy loop's slowdown
//!    of `record --off-cpu` beside a JVM and a CPython process with few and
//!    with thousands of threads.
//! 9. Soak (see [`soak`]): `sparkprof daemon` for ten minutes under process
//!    churn, its RSS and CPU over time.
//! 10. The daemon on a Spark host (see [`spark`]): section 5's job pairs
//!     with `sparkprof daemon` (60-s windows, roll-ups) in place of
//!     `record`: its CPU while the job ran and per job over its whole run,
//!     and the job's.
//!
//! This file holds the command line, the sections and the report; sections
//! 1 to 3 and the harness for their peer profilers are in [`peers`], each
//! later section in its own module; [`procs`] (processes started and read),
//! [`stats`] (pairs, ratios, tables) and [`host`] (quiet host, pauses) serve
//! them all.
//!
//! `--only SECTION[,SECTION]` runs some of them (`kernel`, `overhead`,
//! `cost`, `jit`, `spark`, `offcpu`, `python`, `threads`, `soak`, `spark-daemon`). Everything the profilers write goes to a scratch
//! directory that is removed afterwards; the results are printed and each
//! section is written into its own marked block of BENCHMARKS.md (see
//! [`write_sections`]), so a partial run keeps the other sections' latest
//! figures. Needs root.

use std::{
    cell::RefCell,
    fs,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, anyhow, bail};

use crate::{build, toolchain, workspace_root};

mod exits;
mod host;
mod jit;
mod off_cpu;
mod peers;
mod procs;
mod python;
mod soak;
mod spark;
mod spark_control;
mod spark_daemon;
mod stats;
mod threads;

pub(crate) use host::*;
pub(crate) use peers::*;
pub(crate) use procs::*;
pub(crate) use stats::*;

const USAGE: &str = "usage: cargo xtask bench [--runs N] [--only SECTION[,SECTION...]] [--soak-minutes M]
  N: interleaved pairs per profiler (default 5), and Spark job pairs (default 3)
  M: how long the soak runs (default 10.5)
  SECTION: kernel (in-kernel cost per sample), overhead, cost (own cost), jit (JIT frames),
           spark (Spark job runtime, stage attribution, thread-dump safepoints),
           offcpu (pipe ping-pong and the Spark job with and without --off-cpu; 4 rounds of ping-pong blocks per run),
           python (a Python workload under sparkprof and py-spy; in-kernel cost of a Python and a Java sample),
           threads (start, stop and cost beside a JVM and CPython with thousands of threads; at most 3 runs),
           soak (the daemon for ten minutes under process churn: RSS and CPU over time),
           spark-daemon (the Spark job pairs with the daemon, 60-s windows, in place of record; then 5 jobs in a row under one daemon),
           spark-control (the Spark job's CPU when recorded, against a copy run beside it: N pairs);
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
    Soak,
    SparkDaemon,
    SparkControl,
}

impl Section {
    const ALL: [Section; 11] = [
        Section::Kernel,
        Section::Overhead,
        Section::Cost,
        Section::Jit,
        Section::Spark,
        Section::OffCpu,
        Section::Python,
        Section::Threads,
        Section::Soak,
        Section::SparkDaemon,
        Section::SparkControl,
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
            Section::Soak => "soak",
            Section::SparkDaemon => "spark-daemon",
            Section::SparkControl => "spark-control",
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
            Section::Jit
                | Section::Spark
                | Section::OffCpu
                | Section::Python
                | Section::Threads
                | Section::Soak
                | Section::SparkDaemon
                | Section::SparkControl
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
    /// How long the soak section runs.
    soak: Duration,
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
    let soak = match wants(Section::Soak) {
        true => Some(soak::measure(&bench, options.soak)?),
        false => None,
    };
    let spark_daemon = match wants(Section::SparkDaemon) {
        true => Some(spark::job_pairs_then(
            &bench,
            spark_pairs,
            Profiler {
                tool: Tool::SparkprofDaemon,
                hz: spark::JOB_HZ,
            },
            |cluster| spark_daemon::in_a_row(&bench, cluster),
        )?),
        false => None,
    };
    let spark_control = match wants(Section::SparkControl) {
        true => Some(spark_control::measure(&bench, spark_pairs)?),
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
        soak,
        spark_daemon,
        spark_control,
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
    let mut soak = soak::DEFAULT_SOAK;
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
            "--soak-minutes" => {
                let value = value()?;
                match value.parse::<f64>() {
                    Ok(m) if (3.0..=24.0 * 60.0).contains(&m) => {
                        soak = Duration::from_secs_f64(m * 60.0)
                    }
                    _ => bail!("--soak-minutes needs 3 to 1440 minutes, got {value:?}\n{USAGE}"),
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
        soak,
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
    if options.soak != soak::DEFAULT_SOAK && options.sections.contains(&Section::Soak) {
        command += &format!(" --soak-minutes {}", options.soak.as_secs_f64() / 60.0);
    }
    command
}

/// What the measurements share.
pub(crate) struct Bench {
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
    soak: Option<soak::SoakReport>,
    spark_daemon: Option<(spark::Runtime, spark_daemon::InARow)>,
    spark_control: Option<spark_control::ControlReport>,
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
        if let Some(soak) = &self.soak {
            sections.push((Section::Soak, soak.markdown()));
        }
        if let Some((runtime, in_a_row)) = &self.spark_daemon {
            let text = format!(
                "### 10. The daemon on a Spark host (section 5's job with `sparkprof daemon`)\n\n{}{}",
                runtime.markdown(
                    "10.1 The Spark job under the daemon",
                    spark::TARGET_SLOWDOWN_PERCENT
                ),
                in_a_row.markdown(runtime.sparkprof_cpu_percent())
            );
            sections.push((Section::SparkDaemon, text));
        }
        if let Some(control) = &self.spark_control {
            sections.push((Section::SparkControl, control.markdown()));
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
