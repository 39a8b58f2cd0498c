//! Section 9 of `cargo xtask bench`: a soak of `sparkprof daemon`.
//!
//! The daemon runs with 10 s windows and `--off-cpu` for [`DEFAULT_SOAK`] (or `--soak-minutes`) under a
//! churn load: [`NATIVE_RATE`] short-lived native processes per second
//! (`xtask/bench/soak/churn.c`), [`PYTHON_RATE`] short-lived CPython
//! processes per second (forked by `py_churn.py`), a JVM started every
//! [`JVM_EVERY`] that lives a few seconds (the tests' `JavaChains`), and
//! the tests' stand-in Spark executor, restarted as it ends, whose task
//! threads are renamed like Spark's. Every [`SAMPLE_EVERY`] the daemon's
//! RSS and CPU are read from `/proc`. Targets (issue 17): RSS at the end
//! within 10 % of RSS after the first two minutes, and below 128 MiB.

use std::{
    collections::BTreeMap,
    fs,
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use super::{Bench, compile_c, cpu_time, pause, progress, spawn_logged, status_kib};
use crate::{run_cmd, workspace_root};

/// How long the daemon runs under the load (`--soak-minutes`).
pub const DEFAULT_SOAK: Duration = Duration::from_secs(630);
/// How often its RSS and CPU are read.
const SAMPLE_EVERY: Duration = Duration::from_secs(30);
/// RSS after this long is the reference.
const SETTLED: Duration = Duration::from_secs(120);
const NATIVE_RATE: u32 = 200;
const PYTHON_RATE: u32 = 50;
const JVM_EVERY: Duration = Duration::from_secs(20);
const WINDOW_SECS: u32 = 10;
/// Targets.
const TARGET_GROWTH_PERCENT: f64 = 10.0;
const TARGET_RSS_MIB: f64 = 128.0;

/// One reading of the daemon.
pub struct Reading {
    at: Duration,
    rss_mib: f64,
    /// Of the RSS: anonymous memory (its heap and buffers) and file pages
    /// (its own code, paged in as code paths first run, and shared files).
    anon_mib: f64,
    file_mib: f64,
    /// Of the anonymous memory: the C heap in use, and the entries of each
    /// table the daemon keeps (its `status.json` of the last window).
    heap_mib: f64,
    held: BTreeMap<String, u64>,
    /// CPU (user + system) since the previous reading, % of one core.
    cpu_percent: f64,
}

pub struct SoakReport {
    soak: Duration,
    readings: Vec<Reading>,
    windows: usize,
    jvms: usize,
    executors: usize,
    status: String,
}

/// Kills a load process when dropped.
struct Load(Child);

impl Drop for Load {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The heap in use (MiB) and the tables held, as the daemon's
/// `status.json` last said.
fn daemon_status(out: &Path) -> (f64, BTreeMap<String, u64>) {
    let status: serde_json::Value = fs::read(out.join("status.json"))
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default();
    let heap = status["heap_in_use_bytes"].as_u64().unwrap_or(0) as f64 / (1 << 20) as f64;
    let held = status["held"]
        .as_object()
        .map(|tables| {
            tables
                .iter()
                .filter_map(|(table, n)| Some((table.clone(), n.as_u64()?)))
                .collect()
        })
        .unwrap_or_default();
    (heap, held)
}

/// The daemon's memory now, MiB: (RSS, of which anonymous (`RssAnon`),
/// of which files and shared (`RssFile` + `RssShmem`)).
fn memory_mib(pid: u32) -> Result<(f64, f64, f64)> {
    let kib = status_kib(pid as i32, &["VmRSS", "RssAnon", "RssFile", "RssShmem"])
        .with_context(|| format!("the daemon (pid {pid}) is gone"))?;
    let mib = |kib: u64| kib as f64 / 1024.0;
    Ok((mib(kib[0]), mib(kib[1]), mib(kib[2] + kib[3])))
}

pub fn measure(bench: &Bench, soak: Duration) -> Result<SoakReport> {
    let dir = bench.scratch.join("soak");
    // compile_c puts `soak/churn` under `dir`.
    fs::create_dir_all(dir.join("soak"))?;
    let churn = compile_c("soak/churn", &dir, &[]).context("compiling the churn workload")?;
    let classes = dir.join("classes");
    fs::create_dir_all(&classes)?;
    run_cmd(
        Command::new("javac")
            .arg("-d")
            .arg(&classes)
            .arg(workspace_root().join("tests/workloads/JavaChains.java"))
            .arg(workspace_root().join("tests/workloads/spark/CoarseGrainedExecutorBackend.java")),
    )
    .context("compiling the JVM workloads (needs a JDK 17+: javac)")?;
    let out = dir.join("daemon");
    let daemon_log = dir.join("daemon.log");
    let mut daemon = spawn_logged(
        Command::new(&bench.sparkprof)
            .args(["daemon", "--off-cpu", "--window", &WINDOW_SECS.to_string()])
            .arg("--output")
            .arg(&out)
            .arg("--state-dir")
            .arg(dir.join("state")),
        &daemon_log,
    )?;
    let pid = daemon.id();
    let _native = Load(
        Command::new(&churn)
            .arg(NATIVE_RATE.to_string())
            .stdout(Stdio::null())
            .spawn()?,
    );
    let _python = Load(
        Command::new("python3")
            .arg(workspace_root().join("xtask/bench/soak/py_churn.py"))
            .arg(PYTHON_RATE.to_string())
            .stdout(Stdio::null())
            .spawn()?,
    );
    let started = Instant::now();
    let mut readings = Vec::new();
    let mut last = (started, cpu_time(pid as i32)?.as_secs_f64());
    let mut next_reading = started + SAMPLE_EVERY;
    let mut next_jvm = started;
    let (mut jvms, mut executors) = (0, 0);
    let mut jvm: Option<Load> = None;
    let mut executor: Option<Load> = None;
    while started.elapsed() < soak {
        if let Ok(Some(status)) = daemon.try_wait() {
            bail!(
                "the daemon exited during the soak ({status}); its log is {}",
                daemon_log.display()
            );
        }
        if Instant::now() >= next_jvm {
            next_jvm += JVM_EVERY;
            drop(jvm.take());
            jvm = Some(Load(
                Command::new("java")
                    .arg("-cp")
                    .arg(&classes)
                    .args(["JavaChains", "5", "2", "10"])
                    .stdout(Stdio::null())
                    .spawn()?,
            ));
            jvms += 1;
        }
        let executor_done = executor
            .as_mut()
            .is_none_or(|e| e.0.try_wait().ok().flatten().is_some());
        if executor_done {
            executor = Some(Load(
                Command::new("java")
                    .arg("-cp")
                    .arg(&classes)
                    .arg("org.apache.spark.executor.CoarseGrainedExecutorBackend")
                    .args(["--driver-url", "spark://CoarseGrainedScheduler@127.0.0.1:1"])
                    .args(["--executor-id", "7", "--hostname", "127.0.0.1"])
                    .args([
                        "--cores",
                        "2",
                        "--app-id",
                        &format!("app-soak-{executors:04}"),
                    ])
                    .args(["--resourceProfileId", "0", "--seconds", "45"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()?,
            ));
            executors += 1;
        }
        if Instant::now() >= next_reading {
            next_reading += SAMPLE_EVERY;
            let (rss_mib, anon_mib, file_mib) = memory_mib(pid)?;
            let cpu = cpu_time(pid as i32)?.as_secs_f64();
            let now = Instant::now();
            let cpu_percent = 100.0 * (cpu - last.1) / now.duration_since(last.0).as_secs_f64();
            last = (now, cpu);
            let at = started.elapsed();
            let (heap_mib, held) = daemon_status(&out);
            progress(&format!(
                "[soak] {:>4.0} s: RSS {rss_mib:.1} MiB (anonymous {anon_mib:.1}, heap in use \
                 {heap_mib:.1}, files {file_mib:.1}), CPU {cpu_percent:.2} % of a core; held {held:?}",
                at.as_secs_f64()
            ));
            readings.push(Reading {
                at,
                rss_mib,
                anon_mib,
                file_mib,
                heap_mib,
                held,
                cpu_percent,
            });
        }
        pause(Duration::from_millis(500))?;
    }
    drop(jvm);
    drop(executor);
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(120);
    while daemon.try_wait()?.is_none() {
        if Instant::now() > deadline {
            let _ = daemon.kill();
            bail!("the daemon did not stop within 120 s of SIGTERM");
        }
        pause(Duration::from_millis(200))?;
    }
    let windows = fs::read_dir(out.join("windows"))
        .map(|entries| entries.count())
        .unwrap_or(0);
    let status = Command::new(&bench.sparkprof)
        .arg("status")
        .arg(&out)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let _ = fs::remove_dir_all(&out);
    Ok(SoakReport {
        soak,
        readings,
        windows,
        jvms,
        executors,
        status,
    })
}

impl SoakReport {
    fn rss_at(&self, at: Duration) -> f64 {
        self.readings
            .iter()
            .find(|r| r.at >= at)
            .or(self.readings.last())
            .map_or(0.0, |r| r.rss_mib)
    }

    pub fn markdown(&self) -> String {
        let settled = self.rss_at(SETTLED);
        let end = self.readings.last().map_or(0.0, |r| r.rss_mib);
        let peak = self.readings.iter().map(|r| r.rss_mib).fold(0.0, f64::max);
        let growth = 100.0 * (end / settled - 1.0);
        let anon = |r: Option<&Reading>| r.map_or(0.0, |r| r.anon_mib);
        let anon_settled = anon(self.readings.iter().find(|r| r.at >= SETTLED));
        let anon_end = anon(self.readings.last());
        let verdict = |ok: bool| if ok { "met" } else { "**not met**" };
        let mut text = format!(
            "### 9. Soak (`sparkprof daemon` for {:.0} min under process churn)\n\n\
             `sparkprof daemon --off-cpu --window {WINDOW_SECS}` for {:.0} s while {NATIVE_RATE} \
             short-lived native processes per second (`xtask/bench/soak/churn.c`) and \
             {PYTHON_RATE} short-lived CPython processes per second (forked by `py_churn.py`) \
             come and go, a JVM starts every {:.0} s and lives 5 s ({} JVMs), and the tests' \
             stand-in Spark executor runs tasks in threads renamed like Spark's, 45 s per \
             application ({} applications). Its RSS (`/proc/PID/status`) and CPU (`/proc/PID/stat`) every {:.0} s:\n\n\
             | time, s | RSS, MiB | of which anonymous (`RssAnon`) | of that, C heap in use (`mallinfo2`, the daemon's `status.json`) | of which files and shared (`RssFile` + `RssShmem`: its code as first run, the kernel's rings) | CPU since the previous reading, % of a core |\n\
             |--:|--:|--:|--:|--:|--:|\n",
            self.soak.as_secs_f64() / 60.0,
            self.soak.as_secs_f64(),
            JVM_EVERY.as_secs_f64(),
            self.jvms,
            self.executors,
            SAMPLE_EVERY.as_secs_f64(),
        );
        for r in &self.readings {
            text += &format!(
                "| {:.0} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} |\n",
                r.at.as_secs_f64(),
                r.rss_mib,
                r.anon_mib,
                r.heap_mib,
                r.file_mib,
                r.cpu_percent
            );
        }
        text += &format!(
            "\n| figure | value | target |\n|---|--:|---|\n\
             | RSS after {:.0} s | {settled:.1} MiB |  |\n\
             | RSS at the end | {end:.1} MiB | within {TARGET_GROWTH_PERCENT} % of the first: {} ({growth:+.1} %) |\n\
             | peak RSS | {peak:.1} MiB | below {TARGET_RSS_MIB} MiB: {} |\n\
             | anonymous memory after {:.0} s, at the end | {anon_settled:.1} MiB, {anon_end:.1} MiB ({:+.1} %) |  |\n\
             | windows kept | {} |  |\n",
            SETTLED.as_secs_f64(),
            verdict(growth.abs() <= TARGET_GROWTH_PERCENT),
            verdict(peak < TARGET_RSS_MIB),
            SETTLED.as_secs_f64(),
            100.0 * (anon_end / anon_settled.max(f64::MIN_POSITIVE) - 1.0),
            self.windows,
        );
        // Each table the daemon keeps, after the first minutes and at the end.
        if let (Some(first), Some(last)) = (
            self.readings.iter().find(|r| r.at >= SETTLED),
            self.readings.last(),
        ) {
            text += &format!(
                "\nEntries of each table the daemon keeps between drains (`held` in its \
                 `status.json`) after {:.0} s and at the end:\n\n\
                 | table | after {:.0} s | at the end |\n|---|--:|--:|\n",
                SETTLED.as_secs_f64(),
                SETTLED.as_secs_f64(),
            );
            for (table, end) in &last.held {
                let then = first.held.get(table).copied().unwrap_or(0);
                text += &format!("| `{table}` | {then} | {end} |\n");
            }
        }
        if !self.status.is_empty() {
            text += &format!(
                "\n`sparkprof status` at the end:\n\n```text\n{}```\n",
                self.status
            );
        }
        text
    }
}
