//! sparkprof's kernel programs, one suite run two ways: on this host by
//! `cargo xtask test` and as the only program of a guest kernel (6.1, 6.12)
//! under qemu by `cargo xtask vm-test`.
//!
//! It loads every eBPF program sparkprof ships through
//! `profiler_user::collect::Collector`, exactly as `sparkprof record` does,
//! and checks that each one *works* on this kernel, not only that it loads,
//! against a known workload in a thread of its own; one module per feature,
//! each with the userspace side it depends on:
//!
//! - `load`: every program loads and attaches (a verifier rejection fails
//!   here, with the verifier's log);
//! - [`on_cpu`]: `on_cpu_samples`: the cpu-clock sampler counts a spinning
//!   thread at the configured rate with the leaf of its user stacks inside
//!   the spin function, and a thread reading /dev/zero with kernel stacks;
//!   `drain_hands_over_and_clears`: a drain holds this process's samples
//!   only, leaves the buffer clear, and the statistics account for them;
//! - [`off_cpu`]: `off_cpu_sleep`: sched_switch records a thread's 20 x 50 ms
//!   in nanosleep as about 1 s off the CPU in state sleep, with stacks;
//!   `off_cpu_logs_then_count_map`: 400 short sleeps in one buffer are
//!   counted whole, the first in the per-CPU logs and the rest in the count
//!   map;
//!   `off_cpu_stacks_outlive_their_map`: 120 distinct user stacks asleep,
//!   with an off-CPU stack map of 64 entries, all whole;
//!   `off_cpu_slots_die_with_their_threads`: 80 threads come and go, and
//!   the per-thread slots do not grow; threads that follow each other (and
//!   may reuse the last one's task_struct and stack) never inherit the last
//!   one's cached walk; `off_cpu_scan_past_decoys`: a wait entered with no
//!   frame pointer in rbp, over stack words laid out to look like frame
//!   records, is walked from the record a return address vouches for;
//! - [`renames`]: `task_rename_tracepoint`: `prctl(PR_SET_NAME)` renames of a
//!   watched process are announced with rising name epochs, which its
//!   samples carry; `task_rename_by_another_thread`: the same for renames
//!   written by another thread to `/proc/self/task/TID/comm` (the program
//!   tells the renamed thread by `task_struct.pid`, at the offset read from
//!   BTF); `jvm_rename_uprobe`: the name-setter uprobe, placed by the JVM
//!   runtime's symbol lookup on this binary's own `os::set_native_thread_name`
//!   stand-in, reports full names with epochs;
//! - [`python`]: `off_cpu_python_frames`: sleeps of a thread registered with
//!   a fake CPython 3.13 thread state carry its fake frame chain;
//!   `python_forked_child`: a child forked by such a thread is in the
//!   kernel's Python maps from its fork on, before any drain, and out of
//!   them after its exit; `python_*`: the on-CPU walker follows fake
//!   CPython thread states and frame chains (every layout, shim frames,
//!   truncation) in this process.
//!
//! Each check prints `PASS name: details` or `FAIL name: reason`, then a
//! summary line; the exit status is 1 if any check failed.

#[cfg(feature = "broken")]
mod broken;
mod fake_python;
mod maps;
mod off_cpu;
mod on_cpu;
mod python;
mod renames;
mod workload;

use std::{
    process::ExitCode,
    thread,
    time::{Duration, Instant},
};

use sparkprof::collect::{
    CollectError, Collector, CollectorConfig, Drain, RawSample, SampleKind, off_cpu::OffCpuConfig,
};

/// Samples per second per CPU.
const FREQUENCY_HZ: u64 = 99;
/// Kernel addresses on x86-64 start here.
const KERNEL_SPACE: u64 = 0xffff_8000_0000_0000;

/// A check on the loaded collector, with this process's id.
type Check = fn(&mut Collector, u32) -> Result<String, String>;

#[derive(Default)]
struct Report {
    passed: u32,
    failed: u32,
}

impl Report {
    fn record(&mut self, name: &str, result: Result<String, String>) {
        match result {
            Ok(details) => {
                self.passed += 1;
                println!("PASS {name}: {details}");
            }
            Err(reason) => {
                self.failed += 1;
                let mut lines = reason.lines();
                println!("FAIL {name}: {}", lines.next().unwrap_or_default());
                for line in lines {
                    println!("    {line}");
                }
            }
        }
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn"))
        .with_writer(std::io::stderr)
        .with_target(false)
        .without_time()
        .init();
    let started = Instant::now();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|release| release.trim().to_owned())
        .unwrap_or_else(|err| format!("unknown ({err})"));
    let cpus = thread::available_parallelism().map_or(0, |n| n.get());
    println!("sparkprof-vm-tests: kernel {kernel}, {cpus} CPUs");

    let mut report = Report::default();
    let pid = std::process::id();
    report.record("executable_maps", maps::check_executable_maps(pid));
    let (collector, off_cpu) = load(&mut report, pid);
    let checks: [(&str, Check); 16] = [
        ("on_cpu_samples", on_cpu::check_on_cpu),
        ("drain_hands_over_and_clears", on_cpu::check_drain),
        ("off_cpu_sleep", off_cpu::check_off_cpu),
        (
            "off_cpu_logs_then_count_map",
            off_cpu::check_off_cpu_logs_then_count_map,
        ),
        (
            "off_cpu_thread_older_than_the_watch",
            off_cpu::check_off_cpu_thread_older_than_the_watch,
        ),
        (
            "off_cpu_stacks_outlive_their_map",
            off_cpu::check_off_cpu_many_stacks,
        ),
        (
            "off_cpu_slots_die_with_their_threads",
            off_cpu::check_off_cpu_slots_die_with_their_threads,
        ),
        (
            "off_cpu_scan_past_decoys",
            off_cpu::check_off_cpu_scan_past_decoys,
        ),
        (
            "off_cpu_kernel_stacks_per_wait",
            off_cpu::check_off_cpu_kernel_stacks_per_wait,
        ),
        (
            "off_cpu_page_fault_waits",
            off_cpu::check_off_cpu_page_fault_waits,
        ),
        ("off_cpu_python_frames", python::check_off_cpu_python),
        ("python_forked_child", python::check_python_forked_child),
        (
            "python_thread_of_another_process",
            python::check_python_thread_of_another_process,
        ),
        ("task_rename_tracepoint", renames::check_task_rename),
        (
            "task_rename_by_another_thread",
            renames::check_task_rename_by_another,
        ),
        ("jvm_rename_uprobe", renames::check_uprobe),
    ];
    match collector {
        Some(mut collector) => {
            for (name, check) in checks {
                let result = if name.starts_with("off_cpu") && !off_cpu {
                    Err("not run: the off-CPU programs did not load (see load_off_cpu)".into())
                } else {
                    check(&mut collector, pid)
                };
                report.record(name, result);
            }
            for case in fake_python::FakeThread::cases() {
                report.record(case.name, python::check_python(&mut collector, pid, &case));
            }
            let stats = collector.stats();
            println!("kernel statistics: {stats:?}");
        }
        None => {
            for (name, _) in checks {
                report.record(name, Err("not run: the programs did not load".into()));
            }
            for case in fake_python::FakeThread::cases() {
                report.record(case.name, Err("not run: the programs did not load".into()));
            }
        }
    }
    #[cfg(feature = "broken")]
    report.record("broken_program", broken::check());

    println!(
        "sparkprof-vm-tests: kernel {kernel}, {:.1} s",
        started.elapsed().as_secs_f64()
    );
    println!(
        "sparkprof-vm-tests: {} passed, {} failed",
        report.passed, report.failed
    );
    if report.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn config(pid: u32, off_cpu: bool) -> CollectorConfig {
    CollectorConfig {
        frequency_hz: FREQUENCY_HZ,
        stack_depth: 127,
        stack_map_entries: 4096,
        count_map_entries: 4096,
        // Fewer than the on-CPU checks take in a drain, so that their
        // counts come from both the logs and the count map.
        sample_log_per_cpu: 64,
        target_pids: vec![pid],
        target_cgroup: None,
        off_cpu: off_cpu.then(|| OffCpuConfig {
            min_block: Duration::from_micros(100),
            // Fewer than `off_cpu_stacks_outlive_their_map` makes.
            stack_map_entries: off_cpu::OFFCPU_STACK_MAP_ENTRIES,
            count_map_entries: 1024,
            // As few as the sampler's: the off-CPU checks' counts come
            // from both the logs and the count map too.
            log_per_cpu: 64,
        }),
    }
}

/// Loads every program (`load`); if that fails, again without the
/// off-CPU programs, so the others are still checked (`load_off_cpu`
/// then says why off-CPU failed). Returns the collector and whether it
/// records off-CPU time.
fn load(report: &mut Report, pid: u32) -> (Option<Collector>, bool) {
    let started = Instant::now();
    match Collector::start(&config(pid, true)) {
        Ok(mut collector) => {
            // As the pipeline does: watch, then mark the threads the
            // process already has.
            let watched = collector
                .watch_off_cpu(pid)
                .and_then(|()| collector.mark_watched_threads());
            report.record(
                "load",
                Ok(format!(
                    "every program loaded and attached in {:.2} s (sample_on_cpu on every CPU \
                     with hotspot_walk and hotspot_finish in its tail-call slots, \
                     jvm_thread_name, task_rename, sched_switch, sched_process_exit, \
                     task_newtask, python_fork, python_exec, python_exit; the \
                     mark_watched_threads iterator run)",
                    started.elapsed().as_secs_f64()
                )),
            );
            match watched {
                Ok(()) => (Some(collector), true),
                Err(err) => {
                    report.record("load_off_cpu", Err(format!("watching this process: {err}")));
                    (Some(collector), false)
                }
            }
        }
        Err(with_off_cpu) => match Collector::start(&config(pid, false)) {
            Ok(collector) => {
                report.record(
                    "load",
                    Ok("the programs other than off-CPU's loaded and attached".into()),
                );
                report.record("load_off_cpu", Err(describe(&with_off_cpu)));
                (Some(collector), false)
            }
            Err(err) => {
                report.record("load", Err(describe(&err)));
                (None, false)
            }
        },
    }
}

/// An error with its verifier log, if it has one, on lines of their own.
fn describe(err: &CollectError) -> String {
    err.to_string()
        .replace(". Verifier output: ", ".\nVerifier output:\n")
}

fn on_cpu_samples(drain: &Drain, tid: u32) -> impl Iterator<Item = &RawSample> {
    drain
        .samples
        .iter()
        .filter(move |s| s.tid == tid && s.kind == SampleKind::OnCpu)
}

fn sum(samples: impl Iterator<Item = u64>) -> u64 {
    samples.sum()
}

/// Everything the programs counted since the last drain: off-CPU counts
/// too, which a recording holds for a few drains (profiler-user's
/// `collect::hold`; these tests are about the kernel's counts).
fn drain(collector: &mut Collector) -> Result<Drain, String> {
    collector.release_off_cpu();
    collector.drain().map_err(|err| format!("drain: {err}"))
}
