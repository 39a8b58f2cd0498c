//! Section 10.2 of `cargo xtask bench`: one `sparkprof daemon` over
//! section 5's job run back to back, as on a worker that runs jobs all day.
//!
//! Section 10.1 starts a daemon for each job and counts its CPU while that
//! job runs. A worker's daemon also writes each window's files (folded
//! stacks, flame graphs, pprof) for the applications the window saw, after
//! the jobs that filled them: that cost is in no "while the job ran"
//! figure. Here the daemon's CPU from just before the first job to its exit
//! after the last (the last window written at the stop) is divided among
//! the jobs; its start is left out, as a worker pays it once.

use std::{
    collections::BTreeMap,
    fs,
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use sparkprof_tests::spark::Cluster;

use super::{
    Bench, Profiler, Running, SPARKPROF_OUTPUT, Tool, cpu_time, last_window_index, progress, spark,
    wait_for_quiet_host,
};

/// Jobs run back to back under one daemon.
pub const JOBS: usize = 5;

/// What one daemon cost over [`JOBS`] jobs in a row.
pub struct InARow {
    /// From just before the first job to the daemon's exit.
    pub span: Duration,
    /// The daemon's CPU (utime + stime) over `span`.
    pub cpu: Duration,
    /// Of which from the end of the last job to the exit: the stop, which
    /// drains once more and writes the last window.
    pub at_stop: Duration,
    /// Windows in its directory after the stop (the last written then).
    pub windows: usize,
    /// Bytes in its directory after the stop, by kind of file: its windows
    /// and the applications' roll-ups.
    pub bytes: BTreeMap<&'static str, u64>,
    /// Its whole life's `pipeline_cpu` (the last window's index.json:
    /// cumulative), µs by stage, with the number of drains.
    pub pipeline: BTreeMap<String, u64>,
    /// Its CPU over its whole life, start included (what `pipeline` is of).
    pub life_cpu: Duration,
    pub max_rss_kib: u64,
}

/// Runs [`JOBS`] jobs on `cluster` under one daemon (its defaults at
/// section 5's rate), started before them and stopped after them.
pub fn in_a_row(bench: &Bench, cluster: &mut Cluster) -> Result<InARow> {
    wait_for_quiet_host()?;
    progress(&format!(
        "[spark-daemon] {JOBS} jobs in a row under one sparkprof daemon"
    ));
    let mut running = Running::start(
        Profiler {
            tool: Tool::SparkprofDaemon,
            hz: spark::JOB_HZ,
        },
        bench,
        "spark-daemon-row",
    )?;
    let before = cpu_time(running.pid())?;
    let started = Instant::now();
    for job in 1..=JOBS {
        let seconds = spark::run_one_job(cluster)?;
        progress(&format!(
            "      job {job}/{JOBS}: {seconds:.2} s; the daemon's CPU so far {:.2} s",
            (cpu_time(running.pid())? - before).as_secs_f64()
        ));
    }
    let after_jobs = cpu_time(running.pid())?;
    let exit = running.stop_keeping_output()?;
    let span = started.elapsed();
    let output = running.dir.join(SPARKPROF_OUTPUT);
    let bytes = bytes_by_kind(&output)?;
    let windows = fs::read_dir(output.join("windows"))
        .with_context(|| format!("reading {}/windows", output.display()))?
        .count();
    // Its last window's, written at the stop: cumulative over its life.
    let index = last_window_index(&output)?;
    // Not looked at further: the space goes to the sections after.
    let _ = fs::remove_dir_all(&running.dir);
    let pipeline = index["pipeline_cpu"]
        .as_object()
        .context("the last window's index.json has no pipeline_cpu")?
        .iter()
        .filter_map(|(stage, value)| Some((stage.clone(), value.as_u64()?)))
        .collect();
    Ok(InARow {
        span,
        cpu: exit.cpu.saturating_sub(before),
        at_stop: exit.cpu.saturating_sub(after_jobs),
        windows,
        bytes,
        pipeline,
        life_cpu: exit.cpu,
        max_rss_kib: exit.max_rss_kib,
    })
}

/// The kinds of file a daemon writes, by the end of their names.
const KINDS: [(&str, &str); 5] = [
    (".svg", "flame graphs (`.svg`)"),
    (".folded", "folded stacks (`.folded`)"),
    (".pb.gz", "pprof (`.pb.gz`)"),
    (".parquet", "samples (`.parquet`)"),
    ("", "other (index.json, status.json)"),
];

/// Bytes of the files under `dir`, by [`KINDS`].
fn bytes_by_kind(dir: &Path) -> Result<BTreeMap<&'static str, u64>> {
    let mut bytes = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
            let entry = entry?;
            let meta = entry.metadata()?;
            if meta.is_dir() {
                todo.push(entry.path());
                continue;
            }
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let (_, kind) = KINDS
                .iter()
                .find(|(end, _)| name.ends_with(end))
                .expect("the last kind takes every name");
            *bytes.entry(*kind).or_default() += meta.len();
        }
    }
    Ok(bytes)
}

impl InARow {
    /// Section 10.2; `while_ran`: 10.1's figure (the daemon's CPU while a
    /// job ran, % of one core), for comparison.
    pub fn markdown(&self, while_ran: Option<f64>) -> String {
        let cpu = self.cpu.as_secs_f64();
        let span = self.span.as_secs_f64();
        let share = 100.0 * cpu / span;
        let total_bytes: u64 = self.bytes.values().sum();
        let mib = |bytes: u64| bytes as f64 / (1 << 20) as f64;
        let by_kind = KINDS
            .iter()
            .filter_map(|(_, kind)| Some((kind, *self.bytes.get(kind)?)))
            .map(|(kind, bytes)| {
                format!(
                    "{kind} {:.0} MiB ({:.0} %)",
                    mib(bytes),
                    100.0 * bytes as f64 / total_bytes.max(1) as f64
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        let drains = self.pipeline.get("drains").copied().unwrap_or(0);
        let stages_us: u64 = self
            .pipeline
            .iter()
            .filter(|(stage, _)| stage.ends_with("_us"))
            .map(|(_, us)| us)
            .sum();
        let stages = self
            .pipeline
            .iter()
            .filter_map(|(stage, us)| Some((stage.strip_suffix("_us")?, *us)))
            .map(|(stage, us)| format!("{stage} {:.2} s", us as f64 / 1e6))
            .collect::<Vec<_>>()
            .join(", ");
        let compared = match while_ran {
            Some(while_ran) => format!(
                " 10.1's figure, the daemon's CPU while a job ran with the daemon started for it, was {while_ran:.2} % of one core: the rest is what a worker's daemon pays for each application after its jobs (the window's files, its flame graphs among them)."
            ),
            None => String::new(),
        };
        format!(
            "\n**10.2 The daemon over jobs in a row.** One `sparkprof daemon` (its defaults: 60-s windows; {hz} Hz) while the same cluster runs the job {jobs} times back to back, then SIGINT. Its CPU (utime + stime) from just before the first job to its exit (the last window written at the stop), divided among the jobs; its start is left out, as a worker pays it once.\n\n\
             | figure | value |\n\
             |---|--:|\n\
             | jobs, from the first's start to the daemon's exit | {jobs} in {span:.1} s |\n\
             | the daemon's CPU over that time | {cpu:.2} s: **{share:.2} % of one core** |\n\
             | per job | {per_job:.2} s |\n\
             | of which at the stop (a last drain, the last window written) | {at_stop:.2} s |\n\
             | windows written | {windows} |\n\
             | its directory at its exit (windows and roll-ups) | {total:.0} MiB ({per_job_mib:.0} MiB a job) |\n\
             | peak RSS | {rss:.0} MiB |\n\n\
             Its directory by kind of file: {by_kind}. Its whole life's `pipeline_cpu` (the last window's index.json): {drains} drains, {stages}, {outside:.2} s outside the drains (its start, the windows' files, its exit).{compared}\n",
            hz = spark::JOB_HZ,
            jobs = JOBS,
            per_job = cpu / JOBS as f64,
            at_stop = self.at_stop.as_secs_f64(),
            windows = self.windows,
            total = mib(total_bytes),
            per_job_mib = mib(total_bytes) / JOBS as f64,
            rss = self.max_rss_kib as f64 / 1024.0,
            outside = self.life_cpu.as_secs_f64() - stages_us as f64 / 1e6,
        )
    }
}
