//! Section 6 of `cargo xtask bench`: off-CPU time (issue 5).
//!
//! 1. The worst case for a `sched_switch` program: `xtask/bench/pingpong.c`,
//!    two processes bouncing one byte over two pipes a fixed number of round
//!    trips, both pinned to CPU 0, so that each round trip is two direct
//!    switches on one CPU (unpinned, the time depends mostly on where the
//!    scheduler put them and varies tenfold). Run without
//!    and with `sparkprof record --pid PARENT --pid CHILD`, once on-CPU only
//!    (the reference: what sparkprof costs without `--off-cpu`) and once
//!    with `--off-cpu`, in interleaved pairs whose order alternates. A pair
//!    is two blocks of round trips of one ping-pong, one without and one
//!    with: the workload waits for a line on stdin before each block, so
//!    that sparkprof starts with both pids and records before the block's
//!    first round trip (and is stopped before the block without); the time
//!    is the workload's own, around each block's round trips only. The
//!    slowdowns over the floor (the empty program) that issue 19 sets
//!    targets for are measured block by block ([`blocks`], 6.1b, in
//!    [`blocks::ROUNDS_PER_RUN`] rounds per run): a pair's ratio spreads by
//!    more than the point they must resolve.
//! 2. sparkprof's CPU (utime + stime from `/proc/PID/stat`) over the round
//!    trips of each profiled run.
//! 3. The in-kernel cost per `sched_switch` invocation: `run_time_ns /
//!    run_cnt` of that tracepoint program from `/proc/PID/fdinfo` with
//!    `kernel.bpf_stats_enabled` on, over ping-pong runs under `--off-cpu`
//!    recording the ping-pong and recording another process, each beside
//!    the empty program of 1 timed the same way (what sparkprof adds to a
//!    switch is the difference).
//! 4. The Spark job of section 5 without and with `sparkprof record
//!    --off-cpu`, in interleaved pairs.
//! 5. What sparkprof's programs cost in the kernel over that job: one more
//!    run of it under `--off-cpu` with `kernel.bpf_stats_enabled` on (not
//!    one of the pairs: the statistics cost a clock read per program run),
//!    its `sched_switch` and perf_event programs' `run_time_ns / run_cnt`
//!    over the job, and the recording's off-CPU statistics.
//!
//! Besides on-CPU only, two more "with" rows frame the ping-pong figure: an
//! empty BPF program on the same tracepoint (attached by this bench, no
//! sparkprof): the floor under any profiler built on sched_switch, and
//! `--off-cpu` recording another process: what every process on the host
//! pays.

use std::{
    fs,
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

mod blocks;
mod bpf;

use bpf::{EmptySchedSwitchProgram, program_stats};

use super::{
    ArmPairs, Bench, GoWorkload, Profiler, ProgStats, Recorder, SPARKPROF_OUTPUT, SysctlGuard,
    TimedPair, Tool, bench_unique, compile_c, cpu_time, interleaved_pairs, met, pair_rows,
    progress, run_pair, sparkprof_index, spread_percent, wait_for_quiet_host,
};

/// Round trips of one ping-pong run: about 2.5 s on the reference host.
pub const ROUND_TRIPS: u64 = 500_000;
/// Ping-pong runs under `--off-cpu` with BPF statistics on.
const KERNEL_ROUNDS: usize = 3;
/// The off-CPU tracepoint program.
const SCHED_SWITCH_PROGRAM: &str = profiler_common::names::PROGRAM_SCHED_SWITCH;
/// The program that marks each new thread of a watched process.
const TASK_NEWTASK_PROGRAM: &str = profiler_common::names::PROGRAM_TASK_NEWTASK;
/// The task iterator that marks the threads a newly watched process has.
const MARK_THREADS_PROGRAM: &str = profiler_common::names::PROGRAM_MARK_WATCHED;
/// sparkprof's sampling rate beside the Spark job (section 5's).
const SPARK_HZ: u32 = 99;
/// sparkprof's default `--min-block-us`, for the report.
const MIN_BLOCK_US: u64 = 100;
/// Targets (issue 5, see BENCHMARKS.md).
pub const TARGET_SLOWDOWN_PERCENT: f64 = 5.0;
pub const TARGET_SPARK_SLOWDOWN_PERCENT: f64 = 1.0;
/// Issue 19: the recorded ping-pong within this many points of the floor,
/// and one not recorded within that many.
const TARGET_RECORDED_POINTS: f64 = 3.0;
const TARGET_NOT_RECORDED_POINTS: f64 = 1.0;

/// What runs beside the ping-pong in a "with" run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// No sparkprof: an empty BPF program on the `sched_switch` raw
    /// tracepoint, attached by this bench. The floor under any off-CPU
    /// profiler built on that tracepoint.
    EmptyProgram,
    /// sparkprof, on-CPU sampling only (the default 99 Hz): the reference row.
    OnCpu,
    /// sparkprof `--off-cpu`, recording some other process: the cost every
    /// process on the host pays.
    OffCpuOthers,
    /// sparkprof `--off-cpu`, recording the ping-pong itself: the worst case.
    OffCpu,
}

impl Mode {
    const ALL: [Mode; 4] = [
        Mode::EmptyProgram,
        Mode::OnCpu,
        Mode::OffCpuOthers,
        Mode::OffCpu,
    ];

    fn args(self) -> &'static [&'static str] {
        match self {
            Mode::EmptyProgram | Mode::OnCpu => &[],
            Mode::OffCpu | Mode::OffCpuOthers => &["--off-cpu"],
        }
    }

    fn label(self) -> &'static str {
        match self {
            Mode::EmptyProgram => "empty program on sched_switch (no sparkprof)",
            Mode::OnCpu => "on-CPU only",
            Mode::OffCpuOthers => "`--off-cpu`, ping-pong not recorded",
            Mode::OffCpu => "`--off-cpu`",
        }
    }
}

/// `stats` of the recording's index.json.
#[derive(Clone, Copy, Default)]
pub struct Stats {
    pub samples: u64,
    pub offcpu_switches: u64,
    pub offcpu_short: u64,
    pub offcpu_user_walks: u64,
    pub offcpu_kernel_reads: u64,
}

/// One interleaved pair of ping-pong runs (seconds of round trips), with
/// the recording's statistics.
pub type Pair = TimedPair<Stats>;

pub type ModeResult = ArmPairs<Mode, Stats>;

/// One ping-pong run under `--off-cpu` with BPF statistics on, an empty
/// program attached to the same tracepoint beside sparkprof's.
#[derive(Clone)]
pub struct KernelRound {
    /// Whether sparkprof recorded the ping-pong (else another process).
    pub recorded: bool,
    pub run_cnt: u64,
    pub run_time_ns: u64,
    /// `(run_time_ns, run_cnt)` of the empty program over the same run:
    /// what running any program there costs, measured the same way.
    pub empty: (u64, u64),
    /// The run's wall seconds (round trips only).
    pub seconds: f64,
}

pub struct OffCpuReport {
    pub modes: Vec<ModeResult>,
    /// 6.1b: the figures against the floor, block by block.
    pub blocks: Vec<blocks::Round>,
    pub kernel: Vec<KernelRound>,
    /// The Spark job without and with `--off-cpu`.
    pub spark: Option<super::spark::Runtime>,
    /// One more run of the job under `--off-cpu` with BPF statistics on.
    pub spark_kernel: Option<SparkKernelCost>,
}

/// What sparkprof's programs cost in the kernel over one Spark job under
/// `--off-cpu` (deltas of `run_time_ns` and `run_cnt` across the job).
pub struct SparkKernelCost {
    pub sched_switch: (u64, u64),
    pub perf_event: (u64, u64),
    pub task_newtask: (u64, u64),
    pub mark_threads: (u64, u64),
    /// The job's seconds (event log, first job submitted to last completed).
    pub job_s: f64,
    /// Wall seconds between the two readings of the programs' statistics.
    pub window_s: f64,
    /// index.json's statistics of the whole recording.
    pub stats: Stats,
}

pub fn measure(bench: &Bench, runs: usize, spark_pairs: usize) -> Result<OffCpuReport> {
    crate::toolchain::apt_install(&["gcc", "libc6-dev"])
        .context("installing the C compiler for the ping-pong workload")?;
    let dir = bench.scratch.join("offcpu");
    fs::create_dir_all(&dir)?;
    let binary = compile_c("pingpong", &dir, &[]).context("compiling the ping-pong workload")?;
    let harness = Harness {
        sparkprof: &bench.sparkprof,
        binary: &binary,
        dir: &dir,
    };
    wait_for_quiet_host()?;
    let mut modes: Vec<ModeResult> = Mode::ALL.into_iter().map(ModeResult::new).collect();
    interleaved_pairs(runs, &mut modes, |pair, profiled_first, result| {
        let mode = result.arm;
        let (unprofiled, (profiled, cpu, window, stats)) = harness.pair(mode, profiled_first)?;
        progress(&format!(
            "[offcpu] pair {}/{runs}, {}: {unprofiled:.3} s without, {profiled:.3} s with sparkprof ({:.3}); sparkprof {:.2} s of CPU",
            pair + 1,
            mode.label(),
            profiled / unprofiled,
            cpu.as_secs_f64()
        ));
        result.pairs.push(Pair {
            profiled_first,
            unprofiled,
            profiled,
            cpu,
            window,
            extra: stats,
        });
        Ok(())
    })?;
    let blocks = blocks::measure(
        &bench.sparkprof,
        &binary,
        &dir,
        runs * blocks::ROUNDS_PER_RUN,
    )?;
    let kernel = harness.kernel_cost()?;
    // The Spark job of section 5, beside `sparkprof record --off-cpu`.
    let (spark, spark_kernel) = super::spark::job_pairs_then(
        bench,
        spark_pairs,
        Profiler {
            tool: Tool::SparkprofOffCpu,
            hz: SPARK_HZ,
        },
        |cluster| harness.spark_kernel_cost(cluster),
    )?;
    Ok(OffCpuReport {
        modes,
        blocks,
        kernel,
        spark: Some(spark),
        spark_kernel: Some(spark_kernel),
    })
}

struct Harness<'a> {
    sparkprof: &'a Path,
    binary: &'a Path,
    dir: &'a Path,
}

impl Harness<'_> {
    /// One pair: two blocks of round trips of one ping-pong, one without
    /// and one with `mode` beside it (in that order, or the other), and
    /// what [`Self::profiled_block`] says of the one with.
    fn pair(
        &self,
        mode: Mode,
        profiled_first: bool,
    ) -> Result<(f64, (f64, Duration, Duration, Stats))> {
        let pingpong = std::cell::RefCell::new(PingPong::start(self.binary, 2)?);
        let pair = run_pair(
            profiled_first,
            || {
                let work = &mut pingpong.borrow_mut().work;
                work.go()?;
                work.elapsed()
            },
            || self.profiled_block(&mut pingpong.borrow_mut(), mode),
        )?;
        pingpong.into_inner().work.exit()?;
        Ok(pair)
    }

    /// One block of `pingpong` with `mode` beside it: its seconds,
    /// sparkprof's CPU over them and the wall window of that, and the
    /// recording's statistics. sparkprof (or the empty program) is there
    /// before the block's first round trip and gone after its last.
    fn profiled_block(
        &self,
        pingpong: &mut PingPong,
        mode: Mode,
    ) -> Result<(f64, Duration, Duration, Stats)> {
        if mode == Mode::EmptyProgram {
            let hook = EmptySchedSwitchProgram::attach()?;
            let started = Instant::now();
            pingpong.work.go()?;
            let seconds = pingpong.work.elapsed()?;
            let window = started.elapsed();
            drop(hook);
            return Ok((seconds, Duration::ZERO, window, Stats::default()));
        }
        let pids = if mode == Mode::OffCpuOthers {
            // A process that stays: this bench's own.
            [std::process::id(); 2]
        } else {
            pingpong.pids
        };
        let recorder = SparkprofRun::start(self.sparkprof, self.dir, mode, pids)?;
        let (cpu_before, started) = (cpu_time(recorder.pid())?, Instant::now());
        pingpong.work.go()?;
        let seconds = pingpong.work.elapsed()?;
        let cpu = cpu_time(recorder.pid())?.saturating_sub(cpu_before);
        let window = started.elapsed();
        let stats = recorder.stop()?;
        Ok((seconds, cpu, window, stats))
    }

    /// In-kernel cost of sparkprof's programs over one run of the Spark
    /// job on `cluster`, under whole-host `record --off-cpu`.
    fn spark_kernel_cost(
        &self,
        cluster: &mut sparkprof_tests::spark::Cluster,
    ) -> Result<SparkKernelCost> {
        wait_for_quiet_host()?;
        let _stats = SysctlGuard::set("kernel/bpf_stats_enabled", "1")?;
        let recorder = SparkprofRun::start_host(self.sparkprof, self.dir)?;
        let pid = recorder.pid();
        let tracing = [
            SCHED_SWITCH_PROGRAM,
            TASK_NEWTASK_PROGRAM,
            MARK_THREADS_PROGRAM,
        ];
        let read = || -> Result<_> {
            let mut programs = [(0, 0); 3];
            for (stats, name) in programs.iter_mut().zip(tracing) {
                *stats = program_stats(pid, name)?;
            }
            Ok((programs, ProgStats::read(pid)?))
        };
        let before = read()?;
        let started = Instant::now();
        let job_s = super::spark::run_one_job(cluster)?;
        let after = read()?;
        let window_s = started.elapsed().as_secs_f64();
        let stats = recorder.stop()?;
        let delta = |i: usize| {
            (
                after.0[i].0.saturating_sub(before.0[i].0),
                after.0[i].1.saturating_sub(before.0[i].1),
            )
        };
        let cost = SparkKernelCost {
            sched_switch: delta(0),
            task_newtask: delta(1),
            mark_threads: delta(2),
            perf_event: (
                after.1.run_time_ns.saturating_sub(before.1.run_time_ns),
                after.1.run_cnt.saturating_sub(before.1.run_cnt),
            ),
            job_s,
            window_s,
            stats,
        };
        if cost.sched_switch.1 == 0 || cost.perf_event.1 == 0 {
            bail!("sparkprof's programs did not run during the Spark job");
        }
        progress(&format!(
            "[offcpu] Spark job with BPF statistics: sched_switch {:.0} ns x {}, perf_event {:.0} ns x {}",
            cost.sched_switch.0 as f64 / cost.sched_switch.1 as f64,
            cost.sched_switch.1,
            cost.perf_event.0 as f64 / cost.perf_event.1 as f64,
            cost.perf_event.1
        ));
        Ok(cost)
    }

    /// In-kernel cost of the `sched_switch` program, over [`KERNEL_ROUNDS`]
    /// ping-pong runs under `--off-cpu` recording the ping-pong and as many
    /// recording another process, interleaved (each with sparkprof afresh),
    /// with an empty program on the same tracepoint in every run.
    fn kernel_cost(&self) -> Result<Vec<KernelRound>> {
        let _stats = SysctlGuard::set("kernel/bpf_stats_enabled", "1")?;
        let mut rounds = Vec::new();
        for round in 1..=KERNEL_ROUNDS {
            for recorded in [true, false] {
                let mut pingpong = PingPong::start(self.binary, 1)?;
                let empty = EmptySchedSwitchProgram::attach()?;
                let (mode, pids) = match recorded {
                    true => (Mode::OffCpu, pingpong.pids),
                    false => (Mode::OffCpuOthers, [std::process::id(); 2]),
                };
                let recorder = SparkprofRun::start(self.sparkprof, self.dir, mode, pids)?;
                let before = (
                    program_stats(recorder.pid(), SCHED_SWITCH_PROGRAM)?,
                    empty.stats()?,
                );
                pingpong.work.go()?;
                let seconds = pingpong.work.finish()?;
                let after = (
                    program_stats(recorder.pid(), SCHED_SWITCH_PROGRAM)?,
                    empty.stats()?,
                );
                recorder.stop()?;
                let result = KernelRound {
                    recorded,
                    run_cnt: after.0.1.saturating_sub(before.0.1),
                    run_time_ns: after.0.0.saturating_sub(before.0.0),
                    empty: (
                        after.1.0.saturating_sub(before.1.0),
                        after.1.1.saturating_sub(before.1.1),
                    ),
                    seconds,
                };
                if result.run_cnt == 0 || result.empty.1 == 0 {
                    bail!("a sched_switch program did not run during the ping-pong");
                }
                progress(&format!(
                    "[offcpu] in-kernel cost, round {round}/{KERNEL_ROUNDS}, {}: {} sched_switch runs, {:.1} ns each; the empty program {:.1} ns",
                    mode.label(),
                    result.run_cnt,
                    result.run_time_ns as f64 / result.run_cnt as f64,
                    result.empty.0 as f64 / result.empty.1 as f64
                ));
                rounds.push(result);
            }
        }
        Ok(rounds)
    }
}

/// The ping-pong workload, waiting for its go line; killed if dropped (the
/// forked child reads EOF once its parent is gone, and exits).
struct PingPong {
    work: GoWorkload,
    /// Parent and child.
    pids: [u32; 2],
}

impl PingPong {
    /// The workload, to run `blocks` blocks of [`ROUND_TRIPS`] round trips
    /// (one per `go`).
    fn start(binary: &Path, blocks: u32) -> Result<Self> {
        Self::start_blocks(binary, ROUND_TRIPS, blocks)
    }

    /// The workload, to run `blocks` blocks of `trips` round trips.
    fn start_blocks(binary: &Path, trips: u64, blocks: u32) -> Result<Self> {
        let work = GoWorkload::start(
            Command::new(binary)
                .arg(trips.to_string())
                .arg(blocks.to_string()),
            "the ping-pong workload",
        )?;
        let pids: Vec<u32> = work
            .hello
            .strip_prefix("pids ")
            .map(|rest| rest.split(' ').filter_map(|p| p.parse().ok()).collect())
            .unwrap_or_default();
        let [parent, child] = pids[..] else {
            bail!(
                "unexpected first line of the ping-pong workload: {:?}",
                work.hello
            );
        };
        Ok(Self {
            work,
            pids: [parent, child],
        })
    }
}

/// `sparkprof record`: of the ping-pong (`--pid PARENT --pid CHILD
/// [--off-cpu]`), or of the whole host beside the Spark job.
struct SparkprofRun(Recorder);

impl SparkprofRun {
    /// Starts sparkprof on the ping-pong and waits until it records.
    fn start(sparkprof: &Path, scratch: &Path, mode: Mode, pids: [u32; 2]) -> Result<Self> {
        let pids = [pids[0].to_string(), pids[1].to_string()];
        let mut args: Vec<&str> = mode.args().to_vec();
        args.extend(["--pid", &pids[0], "--pid", &pids[1]]);
        Self::record(sparkprof, scratch, &args)
    }

    /// Starts whole-host `sparkprof record --off-cpu` at the Spark
    /// section's rate and waits until it records.
    fn start_host(sparkprof: &Path, scratch: &Path) -> Result<Self> {
        let hz = SPARK_HZ.to_string();
        Self::record(sparkprof, scratch, &["--off-cpu", "--frequency", &hz])
    }

    /// `sparkprof record ARGS` into a fresh directory under `scratch`,
    /// once it records.
    fn record(sparkprof: &Path, scratch: &Path, args: &[&str]) -> Result<Self> {
        let dir = scratch.join(format!("record-{}", bench_unique()));
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut command = Command::new(sparkprof);
        command
            .arg("record")
            .args(args)
            .arg("--output")
            .arg(dir.join(SPARKPROF_OUTPUT))
            .env("NO_COLOR", "1");
        Recorder::start("sparkprof", command, dir, "recording on").map(Self)
    }

    fn pid(&self) -> i32 {
        self.0.pid()
    }

    /// SIGINT, waits for a clean exit, returns index.json's statistics and
    /// removes the recording.
    fn stop(mut self) -> Result<Stats> {
        self.0.stop()?;
        let index = sparkprof_index(&self.0.dir.join(SPARKPROF_OUTPUT))?;
        let field = |name: &str| index["stats"][name].as_u64().unwrap_or(0);
        let stats = Stats {
            samples: field("samples"),
            offcpu_switches: field("offcpu_switches"),
            offcpu_short: field("offcpu_short"),
            offcpu_user_walks: field("offcpu_user_walks"),
            offcpu_kernel_reads: field("offcpu_kernel_reads"),
        };
        self.0.remove_output();
        Ok(stats)
    }
}

// ---------------------------------------------------------------------------
// The report.

impl SparkKernelCost {
    fn markdown(&self) -> String {
        let row = |what: &str, (ns, count): (u64, u64), per: &str| {
            let per_run = match count {
                0 => "–".to_owned(),
                _ => format!("{:.0}", ns as f64 / count as f64),
            };
            format!(
                "| {what} | {count} | {per_run} | {:.0} | {:.2} % | {per} |\n",
                ns as f64 / 1e6,
                100.0 * ns as f64 / 1e9 / self.window_s
            )
        };
        let s = &self.stats;
        let mut text = format!(
            "\n**6.4 In-kernel cost on the Spark job.** One more run of the job of 6.3 under \
             whole-host `sparkprof record --off-cpu` ({SPARK_HZ} Hz), not one of the pairs, with \
             `kernel.bpf_stats_enabled=1` (restored afterwards): `run_time_ns` and `run_cnt` of \
             sparkprof's programs (`/proc/PID/fdinfo`) just before the application was \
             submitted and just after it ended: {:.1} s, of which its jobs took {:.1} s (event \
             log). This time is charged to the processes the programs run in (the cluster's, \
             mostly), not to sparkprof; the task iterator's, to sparkprof, which runs it.\n\n\
             | program | runs | ns per run | ms in the window | % of one core over the window | runs on |\n\
             |---|--:|--:|--:|--:|---|\n",
            self.window_s, self.job_s
        );
        text += &row(
            &format!("`{SCHED_SWITCH_PROGRAM}` tracepoint"),
            self.sched_switch,
            "every context switch of the host",
        );
        text += &row(
            &format!("`{TASK_NEWTASK_PROGRAM}` tracepoint"),
            self.task_newtask,
            "every thread or process created on the host",
        );
        text += &row(
            &format!("`{MARK_THREADS_PROGRAM}` task iterator"),
            self.mark_threads,
            "every thread of the host, once per drain that watched a new process",
        );
        text += &row(
            "perf_event programs (sampler and the walkers it tail-calls)",
            self.perf_event,
            "every on-CPU sample, of any process",
        );
        text += &format!(
            "\nThe whole recording (a little longer than the job) saw {} switch-outs of watched \
             threads (index.json `offcpu_switches`), {} of them back within {MIN_BLOCK_US} µs \
             (`offcpu_short`); it walked a user stack at {} ({:.1} % of the switch-outs; \
             `offcpu_user_walks`), read a kernel stack for {} of the {} periods it counted \
             (`offcpu_kernel_reads`; the others reused one read for a like wait of the thread, \
             or had none), and took {} on-CPU samples.\n",
            s.offcpu_switches,
            s.offcpu_short,
            s.offcpu_user_walks,
            if s.offcpu_switches == 0 {
                f64::NAN
            } else {
                100.0 * s.offcpu_user_walks as f64 / s.offcpu_switches as f64
            },
            s.offcpu_kernel_reads,
            s.offcpu_switches.saturating_sub(s.offcpu_short),
            s.samples
        );
        text
    }
}

impl OffCpuReport {
    pub fn markdown(&self) -> String {
        let runs = self.modes.first().map_or(0, |m| m.pairs.len());
        let mut text = format!(
            "### 6. Off-CPU time (a pipe ping-pong with and without `--off-cpu`; sparkprof's CPU; in-kernel cost per sched_switch)\n\n\
             **6.1 Ping-pong.** `xtask/bench/pingpong.c`: two processes bounce one byte over \
             two pipes {ROUND_TRIPS} times, both pinned to CPU 0 (each round trip is two direct \
             switches there); {runs} interleaved pair(s) without and with each of: an empty BPF \
             program on the `sched_switch` raw tracepoint (attached by the bench, no sparkprof: \
             the floor under any profiler built on that tracepoint); `sparkprof record` on-CPU \
             only (99 Hz); `sparkprof record --off-cpu` recording another process (the \
             ping-pong pays what every process on the host pays); `sparkprof record --off-cpu \
             --pid PARENT --pid CHILD` (the worst case; default `--min-block-us` \
             {MIN_BLOCK_US}). A pair is two blocks of {ROUND_TRIPS} round trips of one \
             ping-pong (the same two processes), one without and one with, so that the \
             spread from one pair of processes to the next stays out of the pair's ratio. \
             sparkprof (or the empty program) is started afresh for each pair's block with \
             and records before its first round trip, and is gone before the block without; \
             time from the workload, round trips only.\n\n\
             | pair (order) | beside the ping-pong | without, s | with, s | ratio |\n\
             |---|---|--:|--:|--:|\n"
        );
        text += &pair_rows(
            &self.modes,
            |mode| mode.label().to_owned(),
            |_| String::new(),
        );
        text += "\n| beside the ping-pong | slowdown, median of the pairs' ratios | sparkprof's CPU while recording (utime + stime) | target |\n|---|--:|--:|---|\n";
        let mut medians = std::collections::HashMap::new();
        for m in &self.modes {
            let ratio = m.median_ratio();
            medians.insert(m.arm, ratio);
            let slowdown = 100.0 * (ratio - 1.0);
            let (target, cpu) = match m.arm {
                Mode::OffCpu => (
                    format!(
                        "< {TARGET_SLOWDOWN_PERCENT} %: {}",
                        met(slowdown < TARGET_SLOWDOWN_PERCENT)
                    ),
                    m.cpu_cell(),
                ),
                Mode::EmptyProgram => ("(floor)".to_owned(), "–".to_owned()),
                Mode::OnCpu | Mode::OffCpuOthers => ("(reference)".to_owned(), m.cpu_cell()),
            };
            text += &format!(
                "| {} | {} | {cpu} | {target} |\n",
                m.arm.label(),
                m.slowdown_cell()
            );
        }
        let unprofiled: Vec<f64> = self
            .modes
            .iter()
            .flat_map(|m| m.pairs.iter().map(|p| p.unprofiled))
            .collect();
        let noise = spread_percent(&unprofiled);
        let points = |a: Mode, b: Mode| match (medians.get(&a), medians.get(&b)) {
            (Some(a), Some(b)) => 100.0 * (a - b),
            _ => f64::NAN,
        };
        text += &format!(
            "\nNoise: the {} runs without anything beside the ping-pong span {noise:.1} % from \
             fastest to slowest. Differences of the medians: an empty program on sched_switch \
             costs {:+.1} points by itself; recording the ping-pong's off-CPU time adds \
             {:+.1} points over that floor and {:+.1} over on-CPU only; recording other \
             processes' costs the ping-pong {:+.1} points over the floor.\n",
            unprofiled.len(),
            100.0
                * (medians
                    .get(&Mode::EmptyProgram)
                    .copied()
                    .unwrap_or(f64::NAN)
                    - 1.0),
            points(Mode::OffCpu, Mode::EmptyProgram),
            points(Mode::OffCpu, Mode::OnCpu),
            points(Mode::OffCpuOthers, Mode::EmptyProgram),
        );
        if let Some(off) = self.modes.iter().find(|m| m.arm == Mode::OffCpu) {
            let switches: u64 = off.pairs.iter().map(|p| p.extra.offcpu_switches).sum();
            let short: u64 = off.pairs.iter().map(|p| p.extra.offcpu_short).sum();
            let walks: u64 = off.pairs.iter().map(|p| p.extra.offcpu_user_walks).sum();
            let samples: u64 = off.pairs.iter().map(|p| p.extra.samples).sum();
            let trips = ROUND_TRIPS * off.pairs.len() as u64;
            text += &format!(
                "\nUnder `--off-cpu` sparkprof saw {switches} switch-outs of the two processes in \
                 its {} recordings ({:.2} per round trip; index.json `offcpu_switches`), of which \
                 {short} ({:.1} %) were blocked less than {MIN_BLOCK_US} µs and not counted \
                 (`offcpu_short`); it walked a user stack at {walks} of them (`offcpu_user_walks`; \
                 the others left from a site whose walk it kept), and took {samples} on-CPU \
                 samples.\n",
                off.pairs.len(),
                switches as f64 / trips as f64,
                if switches == 0 {
                    f64::NAN
                } else {
                    100.0 * short as f64 / switches as f64
                }
            );
        }
        if !self.blocks.is_empty() {
            text += &blocks::markdown(&self.blocks);
        }
        text += &self.kernel_markdown();
        if let Some(spark) = &self.spark {
            text += "\n";
            text += &spark.markdown(
                "6.3 Spark job under `--off-cpu`",
                TARGET_SPARK_SLOWDOWN_PERCENT,
            );
        }
        if let Some(cost) = &self.spark_kernel {
            text += &cost.markdown();
        }
        text
    }

    fn kernel_markdown(&self) -> String {
        let mut text = format!(
            "\n**6.2 In-kernel cost per `sched_switch` invocation.** {KERNEL_ROUNDS} ping-pong \
             runs under `sparkprof record --off-cpu --pid PARENT --pid CHILD` (the ping-pong \
             recorded) and as many, interleaved, under `sparkprof record --off-cpu` recording \
             another process, with `kernel.bpf_stats_enabled=1` (restored afterwards) and the \
             empty program of 6.1 attached to the same tracepoint in every run: `run_time_ns` \
             and `run_cnt` of sparkprof's `{SCHED_SWITCH_PROGRAM}` tracepoint program and of the \
             empty one (`/proc/PID/fdinfo`) just before the first round trip and just after the \
             last. Both are timed the same way, so their difference is what sparkprof's program \
             adds to a switch; the ping-pong's round trip is two switches, so 1 point of 6.1 is \
             1 % of a round trip over 2 per switch. The program runs on every context switch of \
             the host; for a switch between two threads without BPF task storage (sparkprof \
             marks every thread of a watched process with some) it reads that field of each \
             task and returns.\n\n\
             | round | ping-pong | invocations | ns per invocation | empty program, ns per invocation | sparkprof over the empty program, ns per switch | the same, points of a round trip | invocations per round trip | in-kernel time per round trip, µs |\n\
             |---|---|--:|--:|--:|--:|--:|--:|--:|\n"
        );
        // Each round, then all rounds of each kind (with how many runs).
        let mut rows: Vec<(String, KernelRound, u64)> = self
            .kernel
            .iter()
            .enumerate()
            .map(|(i, round)| ((i / 2 + 1).to_string(), round.clone(), 1))
            .collect();
        for recorded in [true, false] {
            let kind: Vec<&KernelRound> = self
                .kernel
                .iter()
                .filter(|round| round.recorded == recorded)
                .collect();
            if kind.is_empty() {
                continue;
            }
            let sum = |field: fn(&KernelRound) -> u64| kind.iter().map(|r| field(r)).sum::<u64>();
            let all = KernelRound {
                recorded,
                run_cnt: sum(|r| r.run_cnt),
                run_time_ns: sum(|r| r.run_time_ns),
                empty: (sum(|r| r.empty.0), sum(|r| r.empty.1)),
                seconds: kind.iter().map(|r| r.seconds).sum(),
            };
            rows.push(("all".to_owned(), all, kind.len() as u64));
        }
        for (round, r, runs) in &rows {
            let trips = (ROUND_TRIPS * runs) as f64;
            let per_invocation = r.run_time_ns as f64 / r.run_cnt as f64;
            let empty = r.empty.0 as f64 / r.empty.1.max(1) as f64;
            let over = per_invocation - empty;
            let round_trip_ns = r.seconds * 1e9 / trips;
            text += &format!(
                "| {round} | {} | {} | {per_invocation:.1} | {empty:.1} | {over:+.1} | {:+.2} | {:.2} | {:.2} |\n",
                if r.recorded {
                    "recorded"
                } else {
                    "not recorded"
                },
                r.run_cnt,
                100.0 * 2.0 * over / round_trip_ns,
                r.run_cnt as f64 / trips,
                r.run_time_ns as f64 / 1e3 / trips,
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
            Stats {
                samples: 10,
                offcpu_switches: 400_000,
                offcpu_short: 399_000,
                offcpu_user_walks: 12,
                offcpu_kernel_reads: 400,
            },
        )
    }

    #[test]
    fn the_report_lists_every_pair_and_the_kernel_rounds() {
        let report = OffCpuReport {
            modes: vec![
                ModeResult {
                    arm: Mode::EmptyProgram,
                    pairs: vec![pair(false, 2.5, 2.6), pair(true, 2.5, 2.6)],
                },
                ModeResult {
                    arm: Mode::OnCpu,
                    pairs: vec![pair(false, 2.5, 2.55), pair(true, 2.6, 2.6)],
                },
                ModeResult {
                    arm: Mode::OffCpu,
                    pairs: vec![pair(false, 2.5, 2.75), pair(true, 2.5, 2.7)],
                },
            ],
            blocks: Vec::new(),
            // 2 invocations per round trip of 8 µs, of 2 µs each recorded
            // and 1.1 µs each not, beside an empty program of 1 µs.
            kernel: [(true, 4_000), (false, 2_200)]
                .map(|(recorded, ns_per_trip)| KernelRound {
                    recorded,
                    run_cnt: 2 * ROUND_TRIPS,
                    run_time_ns: ns_per_trip * ROUND_TRIPS,
                    empty: (2_000 * ROUND_TRIPS, 2 * ROUND_TRIPS),
                    seconds: 8e-6 * ROUND_TRIPS as f64,
                })
                .into(),
            spark: None,
            spark_kernel: Some(SparkKernelCost {
                // 100,000 switches of 4 µs and 5,000 samples of 12 µs over 40 s.
                sched_switch: (400_000_000, 100_000),
                perf_event: (60_000_000, 5_000),
                // 2,000 threads created, 300 ns each; no iterator run.
                task_newtask: (600_000, 2_000),
                mark_threads: (0, 0),
                job_s: 30.0,
                window_s: 40.0,
                stats: Stats {
                    samples: 5_100,
                    offcpu_switches: 80_000,
                    offcpu_short: 20_000,
                    offcpu_user_walks: 16_000,
                    offcpu_kernel_reads: 20_000,
                },
            }),
        };
        let text = report.markdown();
        assert!(text.starts_with("### 6. Off-CPU time"), "{text}");
        assert!(
            text.contains("| 1 (without first) | on-CPU only | 2.500 | 2.550 | 1.020 |"),
            "{text}"
        );
        assert!(
            text.contains("| 1 (without first) | `--off-cpu` | 2.500 | 2.750 | 1.100 |"),
            "{text}"
        );
        assert!(text.contains("| 2 (with first) |"), "{text}");
        assert!(
            text.contains("an empty program on sched_switch costs +4.0 points by itself"),
            "{text}"
        );
        assert!(text.contains("adds +5.0 points over that floor"), "{text}");
        assert!(text.contains("| `--off-cpu` | +9.0 % (1.090;"), "{text}");
        assert!(text.contains("**not met**"), "{text}");
        for round in ["1", "all"] {
            // 1 µs over the empty program per switch, 2 per round trip of
            // 8 µs: 25 points.
            let row = format!(
                "| {round} | recorded | {} | 2000.0 | 1000.0 | +1000.0 | +25.00 | 2.00 | 4.00 |",
                2 * ROUND_TRIPS
            );
            assert!(text.contains(&row), "{row} in {text}");
            let row = format!(
                "| {round} | not recorded | {} | 1100.0 | 1000.0 | +100.0 | +2.50 | 2.00 | 2.20 |",
                2 * ROUND_TRIPS
            );
            assert!(text.contains(&row), "{row} in {text}");
        }
        assert!(
            text.contains("**6.4 In-kernel cost on the Spark job.**"),
            "{text}"
        );
        assert!(
            text.contains("| `sched_switch` tracepoint | 100000 | 4000 | 400 | 1.00 % |"),
            "{text}"
        );
        assert!(text.contains("| 5000 | 12000 | 60 | 0.15 % |"), "{text}");
        assert!(
            text.contains("| `task_newtask` tracepoint | 2000 | 300 | 1 | 0.00 % |"),
            "{text}"
        );
        assert!(
            text.contains("| `mark_watched_threads` task iterator | 0 | – | 0 | 0.00 % |"),
            "{text}"
        );
        assert!(
            text.contains("walked a user stack at 16000 (20.0 %")
                && text.contains("read a kernel stack for 20000 of the 60000 periods"),
            "{text}"
        );
    }
}
