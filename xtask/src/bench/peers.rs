//! Sections 1 to 3 of `cargo xtask bench`: sparkprof beside `perf record`
//! and bpftrace (in-kernel cost per sample, overhead, own cost), with the
//! harness that starts, stops and measures each profiler.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use super::*;

impl Bench {
    /// Figure 1: in-kernel ns per sample, sparkprof and bpftrace at 999 Hz
    /// with both CPUs busy (idle samples are cheaper and would flatter both).
    /// Measured in rounds in A B B A A B B A order, so that neither profiler
    /// always runs first and slow drift of the host hits both alike: one
    /// round alone varies by 10 % or more on this VM.
    pub(crate) fn per_sample_costs(&self) -> Result<Vec<PerSample>> {
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
    pub(crate) fn per_sample_round(&self, profiler: Profiler) -> Result<(Duration, u64, usize)> {
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
    pub(crate) fn overheads(&self, runs: usize) -> Result<Vec<Overhead>> {
        wait_for_quiet_host()?;
        let mut results = Vec::new();
        for tool in [Tool::Sparkprof, Tool::Perf, Tool::Bpftrace] {
            for hz in [99, 999] {
                results.push(self.overhead(Profiler { tool, hz }, runs)?);
            }
        }
        Ok(results)
    }

    pub(crate) fn overhead(&self, profiler: Profiler, runs: usize) -> Result<Overhead> {
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
    pub(crate) fn overhead_pair(&self, profiler: Profiler) -> Result<(f64, f64)> {
        let unprofiled = self.time_workload()?;
        let running = Running::start(profiler, self, "overhead")?;
        let profiled = self.time_workload()?;
        running.stop()?;
        Ok((unprofiled, profiled))
    }

    /// Wall seconds of one fixed-work workload run.
    pub(crate) fn time_workload(&self) -> Result<f64> {
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
    pub(crate) fn own_costs(&self) -> Result<Vec<OwnCost>> {
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
    pub(crate) fn jit(&self) -> Result<jit::JitReport> {
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

    pub(crate) fn own_cost(&self, profiler: Profiler) -> Result<OwnCost> {
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
pub(crate) enum Tool {
    Sparkprof,
    /// `sparkprof record --off-cpu`.
    SparkprofOffCpu,
    /// `sparkprof daemon`, with its default 60-s windows and roll-ups.
    SparkprofDaemon,
    Perf,
    Bpftrace,
}

/// A profiler at a sampling rate, system-wide.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Profiler {
    pub(crate) tool: Tool,
    pub(crate) hz: u32,
}

impl std::fmt::Display for Profiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self.tool {
            Tool::Sparkprof => "sparkprof",
            Tool::SparkprofOffCpu => "sparkprof --off-cpu",
            Tool::SparkprofDaemon => "sparkprof daemon",
            Tool::Perf => "perf record",
            Tool::Bpftrace => "bpftrace",
        };
        write!(f, "{name} {} Hz", self.hz)
    }
}

/// How to tell that a profiler is sampling.
pub(crate) enum Readiness {
    /// A line containing this text appears in the log.
    LogLine(&'static str),
    /// This file exists (perf record writes its header first, then
    /// synthesizes the existing processes, then samples: hence the settle).
    FileExists(PathBuf),
}

/// sparkprof's output directory, under a bench run's directory.
pub(crate) const SPARKPROF_OUTPUT: &str = "profiles";

/// How to launch a profiler: all of its output goes under `dir`.
pub(crate) struct Launch {
    pub(crate) command: Command,
    /// Where its stdout and stderr go (bpftrace prints its maps on stdout).
    pub(crate) log: PathBuf,
    pub(crate) ready: Readiness,
    /// Extra wait after the readiness signal.
    pub(crate) settle: Duration,
}

impl Profiler {
    pub(crate) fn launch(self, sparkprof: &Path, dir: &Path) -> Launch {
        let hz = self.hz.to_string();
        let log = dir.join("log");
        match self.tool {
            Tool::Sparkprof | Tool::SparkprofOffCpu | Tool::SparkprofDaemon => {
                let mut command = Command::new(sparkprof);
                match self.tool {
                    Tool::SparkprofDaemon => command
                        .args(["daemon", "--state-dir"])
                        .arg(dir.join("state")),
                    Tool::SparkprofOffCpu => command.args(["record", "--off-cpu"]),
                    _ => command.arg("record"),
                };
                command
                    .args(["--frequency", &hz, "--output"])
                    .arg(dir.join(SPARKPROF_OUTPUT))
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
    pub(crate) fn exited_cleanly(self, status: i32) -> bool {
        let exited_zero = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
        let reraised = self.tool == Tool::Perf
            && libc::WIFSIGNALED(status)
            && libc::WTERMSIG(status) == libc::SIGINT;
        exited_zero || reraised
    }
}

/// A profiler process; killed if dropped before [`Running::stop`].
pub(crate) struct Running {
    pub(crate) profiler: Profiler,
    pub(crate) child: Child,
    pub(crate) log: PathBuf,
    pub(crate) dir: PathBuf,
    pub(crate) spawned: Instant,
    pub(crate) reaped: bool,
}

/// How a profiler ended, from `wait4`.
pub(crate) struct Exit {
    pub(crate) cpu: Duration,
    pub(crate) max_rss_kib: u64,
    pub(crate) lifetime: Duration,
}

impl Running {
    /// Starts `profiler` with its output in a fresh directory under the
    /// scratch directory and waits until it samples.
    pub(crate) fn start(profiler: Profiler, bench: &Bench, purpose: &str) -> Result<Self> {
        Self::start_with(profiler, bench, purpose, &[])
    }

    /// [`Self::start`], with `extra` arguments after the profiler's own
    /// (sparkprof's `--cgroup DIR`, say).
    pub(crate) fn start_with(
        profiler: Profiler,
        bench: &Bench,
        purpose: &str,
        extra: &[&std::ffi::OsStr],
    ) -> Result<Self> {
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
        command.args(extra);
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

    pub(crate) fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub(crate) fn wait_ready(&mut self, ready: &Readiness) -> Result<()> {
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
    pub(crate) fn stop(self) -> Result<Exit> {
        Ok(self.stop_reading_index()?.0)
    }

    /// [`Self::stop`], with sparkprof's `index.json` (`None` for another
    /// profiler, which writes none) read before its output goes, and for a
    /// recording, what its files name (see [`super::spark::Names`]).
    pub(crate) fn stop_reading_index(
        mut self,
    ) -> Result<(Exit, Option<serde_json::Value>, Option<super::spark::Names>)> {
        let exit = self.stop_keeping_output()?;
        let mut names = None;
        let index = match self.profiler.tool {
            Tool::Sparkprof | Tool::SparkprofOffCpu => {
                let output = self.dir.join(SPARKPROF_OUTPUT);
                let index = sparkprof_index(&output)?;
                names = Some(super::spark::Names::read(&output, &index)?);
                Some(index)
            }
            // Its last window's, written at its stop: the figures of its
            // whole run (`pipeline_cpu`, `stats`) are cumulative.
            Tool::SparkprofDaemon => Some(last_window_index(&self.dir.join(SPARKPROF_OUTPUT))?),
            Tool::Perf | Tool::Bpftrace => None,
        };
        // Its output is not looked at further: free the space for the next runs.
        let _ = fs::remove_dir_all(&self.dir);
        Ok((exit, index, names))
    }

    /// [`Self::stop`], its output left in `dir` for the caller to read
    /// and remove.
    pub(crate) fn stop_keeping_output(&mut self) -> Result<Exit> {
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
        Ok(Exit {
            cpu: timeval(usage.ru_utime) + timeval(usage.ru_stime),
            max_rss_kib: usage.ru_maxrss as u64,
            lifetime,
        })
    }

    /// `wait4`, rather than `Child::wait`, for the rusage of the whole
    /// life: its CPU time and peak RSS include the final drain and write.
    pub(crate) fn wait4(&mut self) -> Result<(i32, libc::rusage)> {
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

    pub(crate) fn log_tail(&self) -> String {
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
pub(crate) struct Hung {
    pub(crate) profiler: Profiler,
    /// Where its threads were, and its last output.
    pub(crate) diagnostics: String,
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

pub(crate) struct PerSample {
    pub(crate) profiler: Profiler,
    pub(crate) programs: usize,
    pub(crate) samples: u64,
    pub(crate) run_time: Duration,
    /// ns per sample of each round.
    pub(crate) rounds: Vec<f64>,
}

impl PerSample {
    pub(crate) fn new(profiler: Profiler) -> Self {
        Self {
            profiler,
            programs: 0,
            samples: 0,
            run_time: Duration::ZERO,
            rounds: Vec::new(),
        }
    }

    pub(crate) fn add_round(&mut self, run_time: Duration, samples: u64, programs: usize) {
        self.programs = self.programs.max(programs);
        self.samples += samples;
        self.run_time += run_time;
        self.rounds
            .push(run_time.as_nanos() as f64 / samples as f64);
    }

    /// Over all rounds: total BPF run time / total samples.
    pub(crate) fn ns_per_sample(&self) -> f64 {
        self.run_time.as_nanos() as f64 / self.samples as f64
    }
}

pub(crate) struct Overhead {
    pub(crate) profiler: Profiler,
    pub(crate) unprofiled: Vec<f64>,
    pub(crate) profiled: Vec<f64>,
}

impl Overhead {
    /// profiled / unprofiled of each interleaved pair.
    pub(crate) fn ratios(&self) -> Vec<f64> {
        self.profiled
            .iter()
            .zip(&self.unprofiled)
            .map(|(profiled, unprofiled)| profiled / unprofiled)
            .collect()
    }
}

pub(crate) struct OwnCost {
    pub(crate) profiler: Profiler,
    /// Between start-up and SIGINT: the steady state of a long recording.
    pub(crate) recording_cpu_percent: f64,
    /// From spawn to exit, so including start-up and the final write.
    pub(crate) lifetime_cpu_percent: f64,
    pub(crate) lifetime: Duration,
    /// VmHWM just before SIGINT.
    pub(crate) hwm_kib: u64,
    /// ru_maxrss after the exit, so including the final write.
    pub(crate) max_rss_kib: u64,
}

/// Versions of the three profilers; also proves each one runs.
pub(crate) struct Versions {
    pub(crate) sparkprof: String,
    pub(crate) perf: String,
    pub(crate) bpftrace: String,
}

impl Versions {
    /// Only sparkprof's, for a run without perf and bpftrace.
    pub(crate) fn sparkprof_only(sparkprof: &Path) -> Result<Self> {
        Ok(Self {
            sparkprof: version_of(Command::new(sparkprof).arg("--version"))?,
            perf: String::new(),
            bpftrace: String::new(),
        })
    }

    pub(crate) fn detect(sparkprof: &Path) -> Result<Self> {
        Ok(Self {
            sparkprof: version_of(Command::new(sparkprof).arg("--version"))?,
            perf: version_of(Command::new("perf").arg("--version"))?,
            bpftrace: version_of(Command::new("bpftrace").arg("--version"))?,
        })
    }
}

pub(crate) fn version_of(command: &mut Command) -> Result<String> {
    let output = command
        .output()
        .with_context(|| format!("cannot run {command:?}"))?;
    if !output.status.success() {
        bail!("{command:?} failed: {}", output.status);
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

impl Report {
    pub(crate) fn per_sample_table(&self, per_sample: &[PerSample]) -> String {
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

    pub(crate) fn overhead_table(&self, overhead: &[Overhead]) -> String {
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

    pub(crate) fn own_cost_table(&self, own_cost: &[OwnCost]) -> String {
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
pub(crate) fn per_sample_noise(per_sample: &[PerSample]) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparkprof_is_launched_as_each_of_its_modes() {
        let dir = Path::new("/scratch/run");
        let args = |tool| {
            Profiler { tool, hz: 99 }
                .launch(Path::new("/bin/sparkprof"), dir)
                .command
                .get_args()
                .map(|arg| arg.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(
            args(Tool::Sparkprof),
            "record --frequency 99 --output /scratch/run/profiles"
        );
        assert_eq!(
            args(Tool::SparkprofOffCpu),
            "record --off-cpu --frequency 99 --output /scratch/run/profiles"
        );
        assert_eq!(
            args(Tool::SparkprofDaemon),
            "daemon --state-dir /scratch/run/state --frequency 99 --output /scratch/run/profiles"
        );
    }
}
