//! Section 11: what sparkprof costs section 5's Spark job in CPU time,
//! measured against a control that runs beside it.
//!
//! On a shared 2-CPU host the same job's CPU time moves by several percent
//! from one run to the next, and the moves are correlated in time (the
//! host is slower for a while, for every process on it), so pairs of runs
//! one after the other, with and without sparkprof, need hundreds of pairs
//! to resolve 2 % (section 5). Here two copies of the job run at the same
//! time on two clusters, each in its own cgroup, and sparkprof
//! (`record --cgroup`) records one of them: the other, under the same host
//! at the same moment, is the control. Each pair is two such runs with the
//! recorded side swapped, so that a difference between the two clusters
//! cancels: with `r1` the CPU of A over B when A is recorded and `r2` the
//! same when B is, the cost is `sqrt(r1 / r2) - 1`.
//!
//! The control is not free of sparkprof: every thread on the host takes the
//! sampling interrupt, and the program returns at once for a thread outside
//! the cgroup. So the figure is the cost of being recorded, above that
//! floor (section 1 measures the program's own time per sample).

use std::{
    ffi::OsStr,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Result, anyhow, bail};
use sparkprof_tests::{
    cgroup::Cgroup,
    spark::{Cluster, EventLog, Job},
};

use super::{
    Bench, Profiler, Running, Tool, cpu_time, mean_and_sd, pause, progress,
    spark::{JOB_ARGS, JOB_HZ, job_cpu_row, jobs_seconds, run_job, spark_install},
    wait_for_quiet_host,
};

/// The two clusters' names, as the tables call them.
const SIDES: [&str; 2] = ["A", "B"];

/// Section 11's figures.
pub struct ControlReport {
    pub pairs: Vec<ControlPair>,
}

/// Two runs of both copies at once: A recorded in one, B in the other.
pub struct ControlPair {
    /// By the side recorded.
    runs: [ControlRun; 2],
    /// Which side was recorded first.
    first: usize,
}

/// Both copies of the job at once, one of them recorded.
struct ControlRun {
    /// CPU time of each cluster (its cgroup's `usage_usec`) over the run.
    cpu: [Duration; 2],
    /// Each copy's time from its first job submitted to its last completed.
    jobs_s: [f64; 2],
    /// sparkprof's CPU time over the run, and the run's length.
    sparkprof: (Duration, Duration),
}

impl ControlRun {
    /// CPU time of A over B.
    fn a_over_b(&self) -> f64 {
        self.cpu[0].as_secs_f64() / self.cpu[1].as_secs_f64()
    }
}

impl ControlPair {
    /// The recorded copy's CPU time over what it would have been without
    /// sparkprof, as the two runs estimate it (see the module's comment).
    fn ratio(&self) -> f64 {
        (self.runs[0].a_over_b() / self.runs[1].a_over_b()).sqrt()
    }
}

pub fn measure(bench: &Bench, pairs: usize) -> Result<ControlReport> {
    let install = spark_install(bench)?;
    wait_for_quiet_host()?;
    let groups = [
        Cgroup::create("sparkprof-bench-a")?,
        Cgroup::create("sparkprof-bench-b")?,
    ];
    progress("[spark-control] starting two standalone clusters, each in its own cgroup");
    let mut clusters = [
        Cluster::start_in(&install, &groups[0]),
        Cluster::start_in(&install, &groups[1]),
    ];
    wait_for_quiet_host()?;
    let profiler = Profiler {
        tool: Tool::Sparkprof,
        hz: JOB_HZ,
    };
    let mut report = ControlReport { pairs: Vec::new() };
    for pair in 0..pairs {
        // A first, then B first: neither side is always recorded first.
        let first = pair % 2;
        let mut runs = [None, None];
        for recorded in [first, 1 - first] {
            progress(&format!(
                "[spark-control] pair {}/{pairs}: both copies at once, {} recorded",
                pair + 1,
                SIDES[recorded]
            ));
            let run = run_both(bench, profiler, &groups, &mut clusters, recorded)?;
            progress(&format!(
                "      CPU A {:.2} s, B {:.2} s (A / B {:.3}); jobs A {:.1} s, B {:.1} s; \
                 sparkprof {:.2} s of CPU in {:.1} s",
                run.cpu[0].as_secs_f64(),
                run.cpu[1].as_secs_f64(),
                run.a_over_b(),
                run.jobs_s[0],
                run.jobs_s[1],
                run.sparkprof.0.as_secs_f64(),
                run.sparkprof.1.as_secs_f64()
            ));
            runs[recorded] = Some(run);
        }
        let [Some(a), Some(b)] = runs else {
            unreachable!("both sides were recorded once");
        };
        report.pairs.push(ControlPair {
            runs: [a, b],
            first,
        });
    }
    for cluster in clusters {
        let leftover = cluster.stop();
        if !leftover.is_empty() {
            bail!("Spark processes survived the cluster's stop: {leftover:?}");
        }
    }
    drop(groups);
    Ok(report)
}

/// One run: sparkprof recording side `recorded`'s cgroup, both copies of
/// the job at once.
fn run_both(
    bench: &Bench,
    profiler: Profiler,
    groups: &[Cgroup; 2],
    clusters: &mut [Cluster; 2],
    recorded: usize,
) -> Result<ControlRun> {
    let running = Running::start_with(
        profiler,
        bench,
        "spark-control",
        &[OsStr::new("--cgroup"), groups[recorded].path().as_os_str()],
    )?;
    let before = [groups[0].usage()?, groups[1].usage()?];
    let (sparkprof_before, started) = (cpu_time(running.pid())?, Instant::now());
    let [a, b] = clusters;
    let jobs: [Job; 2] = thread::scope(|scope| {
        let other = scope.spawn(|| run_job(b));
        let job = run_job(a);
        other
            .join()
            .map(|other| [job, other])
            .map_err(|_| anyhow!("cluster B's job failed (its panic is above)"))
    })?;
    let sparkprof = (
        cpu_time(running.pid())? - sparkprof_before,
        started.elapsed(),
    );
    // The executors of the applications exit after them: their last CPU
    // belongs to this run.
    pause(Duration::from_secs(2))?;
    let after = [groups[0].usage()?, groups[1].usage()?];
    running.stop()?;
    let jobs_s = [
        jobs_seconds(&jobs[0], &EventLog::read(&jobs[0].event_log))?,
        jobs_seconds(&jobs[1], &EventLog::read(&jobs[1].event_log))?,
    ];
    Ok(ControlRun {
        cpu: [after[0] - before[0], after[1] - before[1]],
        jobs_s,
        sparkprof,
    })
}

impl ControlReport {
    pub fn markdown(&self) -> String {
        let mut text = format!(
            "### 11. The Spark job's CPU time against a control beside it (section 5's job on two \
             clusters at once; `sparkprof record --cgroup` records one)\n\n\
             Two standalone clusters (A and B, each a Master and a Worker of 2 cores, in a cgroup \
             v2 of its own with everything it starts: executors, Python workers, driver) run \
             `tests/workloads/spark_job.py {}` at the same time. sparkprof (99 Hz) records one \
             cluster's cgroup; the other is the control, under the same host at the same moment. \
             CPU time is each cgroup's `cpu.stat` `usage_usec` from before the drivers start to \
             2 s after both end. A pair is two runs, A recorded in one and B in the other; its \
             cost is `sqrt((A/B when A recorded) / (A/B when B recorded)) - 1`, in which a \
             difference between the clusters cancels. The control still takes the sampling \
             interrupt (the program returns at once outside the cgroup): this is the cost of \
             being recorded above that floor.\n\n\
             | pair (first recorded) | A recorded: A / B, CPU s | B recorded: A / B, CPU s | cost | jobs' time, A recorded: A / B, s | sparkprof's CPU, % of a core |\n\
             |---|--:|--:|--:|--:|--:|\n",
            JOB_ARGS.join(" ")
        );
        for (i, pair) in self.pairs.iter().enumerate() {
            let [a, b] = &pair.runs;
            let sparkprof: Vec<String> = pair
                .runs
                .iter()
                .map(|run| {
                    format!(
                        "{:.2}",
                        100.0 * run.sparkprof.0.as_secs_f64() / run.sparkprof.1.as_secs_f64()
                    )
                })
                .collect();
            text += &format!(
                "| {} ({}) | {:.2} / {:.2} | {:.2} / {:.2} | {:+.2} % | {:.1} / {:.1} | {} |\n",
                i + 1,
                SIDES[pair.first],
                a.cpu[0].as_secs_f64(),
                a.cpu[1].as_secs_f64(),
                b.cpu[0].as_secs_f64(),
                b.cpu[1].as_secs_f64(),
                100.0 * (pair.ratio() - 1.0),
                a.jobs_s[0],
                a.jobs_s[1],
                sparkprof.join(", ")
            );
        }
        let ratios: Vec<f64> = self.pairs.iter().map(ControlPair::ratio).collect();
        let (_, sd) = mean_and_sd(&ratios);
        text += &format!(
            "\nThe pairs' costs spread with a standard deviation of {} points.\n\n\
             | figure | value | target |\n|---|--:|---|\n",
            sd.map_or("(one pair: none)".to_owned(), |sd| format!(
                "{:.2}",
                100.0 * sd
            ))
        );
        text += &job_cpu_row(
            "the job's CPU time when recorded, mean of the pairs' costs",
            &ratios,
        );
        text
    }
}
