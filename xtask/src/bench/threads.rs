//! Section 8 of `cargo xtask bench`: many threads.
//!
//! A JVM with many sleeping threads and two busy ones
//! (`xtask/bench/threads/ManyThreads.java`) beside a CPython process with
//! many sleeping threads (`many_threads.py`), at two scales: a few threads,
//! and the 3,000 + 500 of issue 14. At each scale, in `runs` rounds:
//! the busy loop's rate for 5 s without sparkprof, then `sparkprof record
//! --off-cpu --duration 10` (what a user runs), then 5 s without again.
//! Measured: the time from starting sparkprof to its `recording on` line
//! (start), from the end of its 10 s to its exit with everything written
//! (stop), and the busy loop's rate while it records (from 2 s after its
//! start to 2 s before its end) against the mean of the windows around it.
//! Start, stop and cost must not grow with the number of threads.

use std::{
    fs,
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use super::{Bench, SPARKPROF_OUTPUT, median, pause, progress, spawn_logged, spread_percent};
use crate::{run_cmd, workspace_root};

/// The workloads, relative to the workspace root.
const SOURCES: &str = "xtask/bench/threads";
/// (JVM sleeping threads, Python threads) of the two scales.
const SCALES: [(usize, usize); 2] = [(30, 5), (3_000, 500)];
/// Seconds of each recording.
const RECORD_SECS: u64 = 10;
/// The busy loop's rate is read from this long after sparkprof's start to
/// this long before its end (its own start-up and final pass excluded).
const MARGIN: Duration = Duration::from_secs(2);
/// Each window without sparkprof.
const BASELINE: Duration = Duration::from_secs(5);
/// After the workloads are ready, before the first window (JIT warm-up).
const WARM_UP: Duration = Duration::from_secs(5);
/// How long sparkprof may take to start or to stop before the run fails.
const PATIENCE: Duration = Duration::from_secs(300);

/// One recording at one scale.
pub struct Run {
    start: Duration,
    stop: Duration,
    /// Busy-loop rounds per second without (mean of before and after) and
    /// with sparkprof.
    without: f64,
    with: f64,
}

impl Run {
    fn slowdown_percent(&self) -> f64 {
        100.0 * (self.without / self.with - 1.0)
    }
}

pub struct Scale {
    jvm_threads: usize,
    python_threads: usize,
    runs: Vec<Run>,
}

impl Scale {
    fn median_of(&self, value: impl Fn(&Run) -> f64) -> f64 {
        median(&self.runs.iter().map(value).collect::<Vec<_>>())
    }
}

pub struct ThreadsReport {
    java: String,
    scales: Vec<Scale>,
}

pub fn measure(bench: &Bench, runs: usize) -> Result<ThreadsReport> {
    let dir = bench.scratch.join("threads");
    let classes = dir.join("classes");
    fs::create_dir_all(&classes)?;
    let sources = workspace_root().join(SOURCES);
    run_cmd(
        Command::new("javac")
            .arg("-d")
            .arg(&classes)
            .arg(sources.join("ManyThreads.java")),
    )
    .context("compiling the many-threads JVM (needs a JDK 17+: javac)")?;
    let java = super::jit::java_version()?;
    let mut scales = Vec::new();
    for (jvm_threads, python_threads) in SCALES {
        progress(&format!(
            "[threads] a JVM with {jvm_threads} sleeping threads and 2 busy ones, \
             CPython with {python_threads}: {runs} recording(s)"
        ));
        let jvm = Workload::start(
            Command::new("java")
                .arg("-cp")
                .arg(&classes)
                .args(["ManyThreads", &jvm_threads.to_string()]),
        )?;
        let python = Workload::start(
            Command::new("python3")
                .arg(sources.join("many_threads.py"))
                .arg(python_threads.to_string()),
        )?;
        pause(WARM_UP)?;
        let mut scale = Scale {
            jvm_threads,
            python_threads,
            runs: Vec::new(),
        };
        for run in 0..runs {
            let before = jvm.rate_over(BASELINE)?;
            let (start, stop, with) = record(bench, &jvm, &dir.join(format!("run-{run}")))?;
            let after = jvm.rate_over(BASELINE)?;
            let run = Run {
                start,
                stop,
                without: (before + after) / 2.0,
                with,
            };
            progress(&format!(
                "[threads] start {:.2} s, stop {:.2} s, busy loop {:.0} → {:.0} rounds/s ({:+.1} %)",
                run.start.as_secs_f64(),
                run.stop.as_secs_f64(),
                run.without,
                run.with,
                run.slowdown_percent()
            ));
            scale.runs.push(run);
        }
        drop(python);
        drop(jvm);
        scales.push(scale);
    }
    Ok(ThreadsReport { java, scales })
}

/// One `record --off-cpu --duration 10` of the whole host: its start, its
/// stop, and the busy loop's rate while it recorded.
fn record(bench: &Bench, jvm: &Workload, dir: &Path) -> Result<(Duration, Duration, f64)> {
    fs::create_dir_all(dir)?;
    let output = dir.join(SPARKPROF_OUTPUT);
    let launched = Instant::now();
    let mut child = spawn_logged(
        Command::new(&bench.sparkprof)
            .args([
                "record",
                "--off-cpu",
                "--duration",
                &RECORD_SECS.to_string(),
            ])
            .arg("--output")
            .arg(&output),
        &dir.join("log"),
    )?;
    let log = || fs::read_to_string(dir.join("log")).unwrap_or_default();
    let result = (|| {
        while !log().contains("recording on") {
            if let Some(status) = child.try_wait()? {
                bail!("sparkprof exited ({status}) before recording:\n{}", log());
            }
            if launched.elapsed() > PATIENCE {
                bail!("sparkprof did not start within {PATIENCE:?}:\n{}", log());
            }
            pause(Duration::from_millis(10))?;
        }
        let start = launched.elapsed();
        let recording = Instant::now();
        pause(MARGIN)?;
        let with = jvm.rate_over(Duration::from_secs(RECORD_SECS) - 2 * MARGIN)?;
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if recording.elapsed() > PATIENCE {
                bail!("sparkprof did not stop within {PATIENCE:?}:\n{}", log());
            }
            thread::sleep(Duration::from_millis(10));
        };
        if !status.success() {
            bail!("sparkprof failed ({status}):\n{}", log());
        }
        if !output.join("index.json").exists() {
            bail!("sparkprof wrote no index.json:\n{}", log());
        }
        let stop = recording
            .elapsed()
            .saturating_sub(Duration::from_secs(RECORD_SECS));
        Ok((start, stop, with))
    })();
    if result.is_err() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = fs::remove_dir_all(&output);
    result
}

/// A workload that prints `ready`, then (the JVM) `count <ns> <rounds>`
/// lines, read on a thread; killed when dropped.
struct Workload {
    child: Child,
    /// (when the line was read, rounds so far).
    counts: Arc<Mutex<Vec<(Instant, u64)>>>,
}

impl Workload {
    fn start(command: &mut Command) -> Result<Self> {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {command:?}"))?;
        let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        match lines.next() {
            Some(Ok(line)) if line == "ready" => {}
            other => {
                let _ = child.kill();
                let _ = child.wait();
                bail!("{command:?} did not get ready: {other:?}");
            }
        }
        let counts = Arc::new(Mutex::new(Vec::new()));
        let sink = counts.clone();
        thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let rounds = line
                    .strip_prefix("count ")
                    .and_then(|rest| rest.split_whitespace().nth(1))
                    .and_then(|rounds| rounds.parse().ok());
                if let Some(rounds) = rounds {
                    sink.lock().unwrap().push((Instant::now(), rounds));
                }
            }
        });
        Ok(Self { child, counts })
    }

    /// The busy loop's rounds per second over the next `window`.
    fn rate_over(&self, window: Duration) -> Result<f64> {
        let latest = || self.counts.lock().unwrap().last().copied();
        let first = latest().context("the JVM reports no counts")?;
        pause(window)?;
        let last = latest().context("the JVM reports no counts")?;
        let seconds = last.0.duration_since(first.0).as_secs_f64();
        if seconds < window.as_secs_f64() / 2.0 {
            bail!("the JVM stopped reporting its counts");
        }
        Ok((last.1 - first.1) as f64 / seconds)
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ThreadsReport {
    pub fn markdown(&self) -> String {
        let mut text = format!(
            "### 8. Many threads (start, stop and cost of `record --off-cpu` against thread count)\n\n\
             `{SOURCES}/ManyThreads.java` (a JVM with N sleeping threads and two busy ones that \
             count rounds of fixed integer work) beside `{SOURCES}/many_threads.py` (CPython with \
             M sleeping threads), at two scales. Each run: the busy loop's rate for {} s without \
             sparkprof, `sparkprof record --off-cpu --duration {RECORD_SECS}` of the whole host, \
             {} s without again. *Start* is from launching sparkprof to its `recording on` line \
             (eBPF load and attach, the JVMs' thread dumps and perf maps, Python following); \
             *stop* from the end of its {RECORD_SECS} s to its exit with every file written; the \
             rate with sparkprof is read from {} s after its start to {} s before its end, against \
             the mean of the windows around it. JVM: {}.\n\n\
             | JVM + Python threads | run | start, s | stop, s | without, rounds/s | with, rounds/s | slowdown |\n\
             |---|--:|--:|--:|--:|--:|--:|\n",
            BASELINE.as_secs(),
            BASELINE.as_secs(),
            MARGIN.as_secs(),
            MARGIN.as_secs(),
            self.java
        );
        for scale in &self.scales {
            for (i, run) in scale.runs.iter().enumerate() {
                text += &format!(
                    "| {} + {} | {} | {:.2} | {:.2} | {:.0} | {:.0} | {:+.1} % |\n",
                    scale.jvm_threads,
                    scale.python_threads,
                    i + 1,
                    run.start.as_secs_f64(),
                    run.stop.as_secs_f64(),
                    run.without,
                    run.with,
                    run.slowdown_percent()
                );
            }
        }
        if let [small, large] = &self.scales[..] {
            let ratio =
                |value: &dyn Fn(&Run) -> f64| large.median_of(value) / small.median_of(value);
            let noise = |scale: &Scale| {
                spread_percent(
                    &scale
                        .runs
                        .iter()
                        .flat_map(|run| [run.without, run.with])
                        .collect::<Vec<_>>(),
                )
            };
            text += &format!(
                "\nMedians, {} + {} threads against {} + {}: start {:.2} s against {:.2} s \
                 ({:.2}×), stop {:.2} s against {:.2} s ({:.2}×); busy-loop slowdown {:+.1} % \
                 against {:+.1} % (rates spread {:.1} % and {:.1} % over the runs).\n",
                large.jvm_threads,
                large.python_threads,
                small.jvm_threads,
                small.python_threads,
                large.median_of(|r| r.start.as_secs_f64()),
                small.median_of(|r| r.start.as_secs_f64()),
                ratio(&|r| r.start.as_secs_f64()),
                large.median_of(|r| r.stop.as_secs_f64()),
                small.median_of(|r| r.stop.as_secs_f64()),
                ratio(&|r| r.stop.as_secs_f64()),
                large.median_of(Run::slowdown_percent),
                small.median_of(Run::slowdown_percent),
                noise(large),
                noise(small),
            );
        }
        text
    }
}
