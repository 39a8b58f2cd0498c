//! sparkprof's kernel matrix, guest side.
//!
//! `cargo xtask vm-test` boots this binary (statically linked) as the only
//! program of a guest kernel (6.1, 6.12) under qemu; it also runs on any
//! host as root. It loads every eBPF program sparkprof ships through
//! `profiler_user::collect::Collector`, exactly as `sparkprof record` does,
//! and checks that each one *works* on this kernel, not only that it
//! loads, against a known workload in a thread of its own:
//!
//! - `load`: every program loads and attaches (a verifier rejection fails
//!   here, with the verifier's log);
//! - `on_cpu_samples`: the cpu-clock sampler counts a spinning thread at
//!   the configured rate with the leaf of its user stacks inside the spin
//!   function, and a thread reading /dev/zero with kernel stacks;
//! - `off_cpu_sleep`: sched_switch records a thread's 20 x 50 ms in
//!   nanosleep as about 1 s off the CPU in state sleep, with stacks;
//! - `off_cpu_stacks_outlive_their_map`: 120 distinct user stacks asleep,
//!   with an off-CPU stack map of 64 entries, all whole;
//! - `off_cpu_python_frames`: the same sleeps of a thread registered with a
//!   fake CPython 3.13 thread state carry its fake frame chain;
//! - `task_rename_tracepoint`: `prctl(PR_SET_NAME)` renames of a watched
//!   process are announced with rising name epochs, which its samples carry;
//! - `task_rename_by_another_thread`: the same for renames written by
//!   another thread to `/proc/self/task/TID/comm` (the program tells the
//!   renamed thread by `task_struct.pid`, at the offset read from BTF);
//! - `jvm_rename_uprobe`: the rename uprobe, placed on this binary's own
//!   `os::set_native_thread_name` stand-in, reports full names with epochs;
//! - `python_*`: the Python walker follows fake CPython thread states and
//!   frame chains (every layout, shim frames, truncation) in this process.
//!
//! Each check prints `PASS name: details` or `FAIL name: reason`, then a
//! summary line; the exit status is 1 if any check failed.

#[cfg(feature = "broken")]
mod broken;
mod python;
mod workload;

use std::{
    collections::HashSet,
    ffi::CString,
    process::ExitCode,
    thread,
    time::{Duration, Instant},
};

use profiler_common::PythonFrame;
use sparkprof::collect::{
    CollectError, Collector, CollectorConfig, Drain, PythonThread, RawPythonStack, RawSample,
    RawStack, SampleKind,
    off_cpu::{OffCpuConfig, OffCpuState},
    renames::{NameFeed, RenameSource, ThreadRename},
};
use workload::Worker;

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
    let (collector, off_cpu) = load(&mut report, pid);
    let checks: [(&str, Check); 7] = [
        ("on_cpu_samples", check_on_cpu),
        ("off_cpu_sleep", check_off_cpu),
        (
            "off_cpu_stacks_outlive_their_map",
            check_off_cpu_many_stacks,
        ),
        ("off_cpu_python_frames", check_off_cpu_python),
        ("task_rename_tracepoint", check_task_rename),
        (
            "task_rename_by_another_thread",
            check_task_rename_by_another,
        ),
        ("jvm_rename_uprobe", check_uprobe),
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
            for case in python::FakeThread::cases() {
                report.record(case.name, check_python(&mut collector, pid, &case));
            }
            let stats = collector.stats();
            println!("kernel statistics: {stats:?}");
        }
        None => {
            for (name, _) in checks {
                report.record(name, Err("not run: the programs did not load".into()));
            }
            for case in python::FakeThread::cases() {
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
        target_pids: vec![pid],
        jvm_rename_uprobe: true,
        off_cpu: off_cpu.then(|| OffCpuConfig {
            min_block: Duration::from_micros(100),
            // Fewer than `off_cpu_stacks_outlive_their_map` makes.
            stack_map_entries: OFFCPU_STACK_MAP_ENTRIES,
            count_map_entries: 1024,
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
            let watched = collector.watch_off_cpu(pid);
            report.record(
                "load",
                Ok(format!(
                    "every program loaded and attached in {:.2} s (sample_on_cpu on every CPU, \
                     jvm_thread_name, task_rename, sched_switch, sched_process_exit)",
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

fn drain(collector: &mut Collector) -> Result<Drain, String> {
    collector.drain().map_err(|err| format!("drain: {err}"))
}

/// Spinning thread: the rate and where its user stacks end; a thread
/// reading /dev/zero: kernel stacks.
fn check_on_cpu(collector: &mut Collector, _pid: u32) -> Result<String, String> {
    let spin = workload::function_range(workload::SPIN_SYMBOL, workload::spin_address())?;
    drain(collector)?;
    let spinner = Worker::spawn(|stop| {
        workload::sparkprof_vm_spin(stop);
    });
    let reader = Worker::spawn(workload::read_zeroes);
    let started = Instant::now();
    thread::sleep(Duration::from_secs(2));
    let drained = drain(collector)?;
    let elapsed = started.elapsed().as_secs_f64();
    let (spinner_tid, reader_tid) = (spinner.tid, reader.tid);
    spinner.finish();
    reader.finish();

    let total = sum(on_cpu_samples(&drained, spinner_tid).map(|s| s.count));
    let in_spin = sum(on_cpu_samples(&drained, spinner_tid)
        .filter(|s| matches!(&s.user, RawStack::Frames { ips, .. } if spin.contains(&ips[0])))
        .map(|s| s.count));
    let expected = FREQUENCY_HZ as f64 * elapsed;
    if (total as f64) < 0.3 * expected || (total as f64) > 1.3 * expected {
        return Err(format!(
            "{total} samples of the spinning thread in {elapsed:.2} s at {FREQUENCY_HZ} Hz \
             (expected about {expected:.0})"
        ));
    }
    if (in_spin as f64) < 0.9 * total as f64 {
        return Err(format!(
            "only {in_spin} of {total} samples of the spinning thread have their user leaf in \
             {} [{:#x}, {:#x})",
            workload::SPIN_SYMBOL,
            spin.start,
            spin.end
        ));
    }
    let reader_total = sum(on_cpu_samples(&drained, reader_tid).map(|s| s.count));
    let in_kernel = sum(on_cpu_samples(&drained, reader_tid)
        .filter(|s| {
            matches!(&s.kernel, RawStack::Frames { ips, .. }
                if ips.iter().all(|&ip| ip >= KERNEL_SPACE))
        })
        .map(|s| s.count));
    if in_kernel < 5 {
        return Err(format!(
            "{in_kernel} of {reader_total} samples of the /dev/zero reader have a kernel stack"
        ));
    }
    Ok(format!(
        "{total} samples of the spinning thread in {elapsed:.2} s (expected {expected:.0}), \
         {in_spin} with the user leaf in {}; {in_kernel} of {reader_total} samples of the \
         /dev/zero reader with kernel stacks",
        workload::SPIN_SYMBOL
    ))
}

/// 20 x 50 ms in nanosleep: about 1 s off the CPU, state sleep.
fn check_off_cpu(collector: &mut Collector, _pid: u32) -> Result<String, String> {
    drain(collector)?;
    let sleeper = Worker::spawn(|_| workload::sleep_in_nanosleep(20, Duration::from_millis(50)));
    let tid = sleeper.tid;
    sleeper.finish();
    let mut samples = drain(collector)?.samples;
    samples.extend(drain(collector)?.samples);
    let ours: Vec<&RawSample> = samples.iter().filter(|s| s.tid == tid).collect();
    let slept_us = sum(ours
        .iter()
        .filter(|s| s.kind == SampleKind::OffCpu(OffCpuState::Sleep))
        .map(|s| s.count));
    if !(900_000..=1_600_000).contains(&slept_us) {
        let kinds: Vec<String> = ours
            .iter()
            .map(|s| format!("{:?} {}", s.kind, s.count))
            .collect();
        return Err(format!(
            "{slept_us} us off the CPU in state sleep, expected about 1000000 (20 x 50 ms); \
             the thread's counts: {kinds:?}"
        ));
    }
    let with_kernel = ours
        .iter()
        .filter(|s| s.kind == SampleKind::OffCpu(OffCpuState::Sleep))
        .any(|s| {
            matches!(&s.kernel, RawStack::Frames { ips, .. }
                if ips.iter().all(|&ip| ip >= KERNEL_SPACE))
        });
    let with_user = ours
        .iter()
        .filter(|s| s.kind == SampleKind::OffCpu(OffCpuState::Sleep))
        .any(|s| matches!(&s.user, RawStack::Frames { ips, .. } if !ips.is_empty()));
    if !with_kernel || !with_user {
        return Err(format!(
            "{slept_us} us in state sleep, but kernel stack: {with_kernel}, user stack: {with_user}"
        ));
    }
    Ok(format!(
        "{slept_us} us off the CPU in state sleep for 20 x 50 ms in nanosleep, with kernel and \
         user stacks"
    ))
}

/// Entries of the off-CPU user-stack map in these checks.
const OFFCPU_STACK_MAP_ENTRIES: u32 = 64;
/// Distinct user stacks `off_cpu_stacks_outlive_their_map` sleeps in.
const DISTINCT_STACKS: u32 = 120;

/// A thread sleeps 2 ms at each recursion depth from 1 to 120: 120 distinct
/// user stacks, about twice what the off-CPU stack map holds. Every sleep
/// still carries its whole user stack (new stacks reach userspace through
/// the ring; the map only evicts), none is lost or missing.
fn check_off_cpu_many_stacks(collector: &mut Collector, _pid: u32) -> Result<String, String> {
    drain(collector)?;
    let sleeper = Worker::spawn(|_| {
        for depth in 1..=DISTINCT_STACKS {
            workload::sparkprof_vm_deep_sleep(depth, Duration::from_millis(2));
        }
    });
    let tid = sleeper.tid;
    sleeper.finish();
    let mut samples = drain(collector)?.samples;
    samples.extend(drain(collector)?.samples);
    let asleep: Vec<&RawSample> = samples
        .iter()
        .filter(|s| s.tid == tid && s.kind == SampleKind::OffCpu(OffCpuState::Sleep))
        .collect();
    let total = sum(asleep.iter().map(|s| s.count));
    let whole: Vec<&Vec<u64>> = asleep
        .iter()
        .filter_map(|s| match &s.user {
            RawStack::Frames { ips, .. } => Some(ips),
            _ => None,
        })
        .collect();
    let with_user = sum(asleep
        .iter()
        .filter(|s| matches!(&s.user, RawStack::Frames { .. }))
        .map(|s| s.count));
    let distinct: HashSet<&Vec<u64>> = whole.iter().copied().collect();
    let others: Vec<String> = asleep
        .iter()
        .filter(|s| !matches!(&s.user, RawStack::Frames { .. }))
        .map(|s| format!("{:?} {} us", s.user, s.count))
        .collect();
    if total < 200_000 || with_user != total || distinct.len() < DISTINCT_STACKS as usize {
        return Err(format!(
            "{with_user} of {total} us asleep with a user stack, {} distinct stacks (expected \
             {DISTINCT_STACKS}, map of {OFFCPU_STACK_MAP_ENTRIES}); without: {others:?}",
            distinct.len()
        ));
    }
    Ok(format!(
        "{with_user} of {total} us asleep with their user stacks, {} distinct (map of \
         {OFFCPU_STACK_MAP_ENTRIES} entries)",
        distinct.len()
    ))
}

/// A thread registered with a fake CPython 3.13 thread state sleeps 20 x
/// 50 ms: the off-CPU program walks its fake frames as it leaves the CPU,
/// and its time asleep carries them.
fn check_off_cpu_python(collector: &mut Collector, pid: u32) -> Result<String, String> {
    let case = python::FakeThread::cases()
        .into_iter()
        .next()
        .expect("a fake thread");
    collector
        .watch_python(pid, &case.offsets)
        .map_err(|err| format!("watch_python: {err}"))?;
    drain(collector)?;
    let sleeper = Worker::spawn(|_| workload::sleep_in_nanosleep(20, Duration::from_millis(50)));
    collector.set_python_threads(
        pid,
        &[PythonThread {
            tid: sleeper.tid,
            tstate: case.tstate(),
        }],
    );
    let tid = sleeper.tid;
    sleeper.finish();
    let mut samples = drain(collector)?.samples;
    samples.extend(drain(collector)?.samples);
    collector.set_python_threads(pid, &[]);

    let want = RawPythonStack {
        frames: case.expected.clone(),
        truncated: case.truncated,
    };
    let asleep: Vec<&RawSample> = samples
        .iter()
        .filter(|s| s.tid == tid && s.kind == SampleKind::OffCpu(OffCpuState::Sleep))
        .collect();
    let total = sum(asleep.iter().map(|s| s.count));
    let matching = sum(asleep
        .iter()
        .filter(|s| s.python.as_ref() == Some(&want))
        .map(|s| s.count));
    if !(900_000..=1_600_000).contains(&total) {
        return Err(format!(
            "{total} us off the CPU in state sleep, expected about 1000000 (20 x 50 ms)"
        ));
    }
    // The first sleep may begin before the thread is registered.
    if (matching as f64) < 0.85 * total as f64 {
        let other = asleep
            .iter()
            .find(|s| s.python.as_ref() != Some(&want))
            .map(|s| describe_python(s.python.as_ref()));
        return Err(format!(
            "{matching} of {total} us asleep carry the fake chain ({} frames); another: {}",
            want.frames.len(),
            other.unwrap_or_default()
        ));
    }
    Ok(format!(
        "{matching} of {total} us asleep carry the {} fake frames exactly",
        want.frames.len()
    ))
}

/// Renames a worker with `rename` for each of `names`, then spins; returns
/// what the drain after it announced and counted.
fn renamed_worker(
    collector: &mut Collector,
    names: &'static [&'static str],
    rename: fn(&CString),
) -> Result<(u32, Drain), String> {
    drain(collector)?;
    let worker = Worker::spawn(move |stop| {
        for name in names {
            rename(&CString::new(*name).expect("no NUL"));
            thread::sleep(Duration::from_millis(20));
        }
        workload::sparkprof_vm_spin(stop);
    });
    thread::sleep(Duration::from_millis(20 * names.len() as u64 + 800));
    let drained = drain(collector)?;
    let tid = worker.tid;
    worker.finish();
    Ok((tid, drained))
}

/// The renames of `tid` from `source` carry `names` in order with rising
/// epochs, and the thread's later samples the last epoch.
fn check_renames(
    drained: &Drain,
    tid: u32,
    source: RenameSource,
    names: &[&str],
) -> Result<String, String> {
    let renames: Vec<&ThreadRename> = drained
        .renames
        .iter()
        .filter(|r| r.tid == tid && r.source == source)
        .collect();
    let got: Vec<&str> = renames.iter().map(|r| r.name.as_str()).collect();
    if got != names {
        return Err(format!(
            "renames announced for the thread: {got:?}, expected {names:?}"
        ));
    }
    if renames.iter().any(|r| r.truncated) {
        return Err(format!("a name was cut: {renames:?}"));
    }
    let epochs: Vec<u32> = renames.iter().map(|r| r.epoch).collect();
    if !epochs.windows(2).all(|w| w[0] < w[1]) || epochs.first() == Some(&0) {
        return Err(format!("epochs do not rise: {epochs:?}"));
    }
    let announced: HashSet<u32> = drained
        .renames
        .iter()
        .filter(|r| r.tid == tid)
        .map(|r| r.epoch)
        .collect();
    let last = *epochs.last().expect("names is not empty");
    let total = sum(on_cpu_samples(drained, tid).map(|s| s.count));
    let at_last = sum(on_cpu_samples(drained, tid)
        .filter(|s| s.name_epoch == last)
        .map(|s| s.count));
    if let Some(stray) = on_cpu_samples(drained, tid)
        .find(|s| s.name_epoch != 0 && !announced.contains(&s.name_epoch))
    {
        return Err(format!(
            "a sample at epoch {} that no rename announced (announced: {announced:?})",
            stray.name_epoch
        ));
    }
    if total == 0 || (at_last as f64) < 0.9 * total as f64 {
        return Err(format!(
            "{at_last} of {total} samples of the renamed thread carry its last epoch {last}"
        ));
    }
    Ok(format!(
        "{} renames with epochs {epochs:?}; {at_last} of {total} samples after them at epoch {last}",
        names.len()
    ))
}

const COMM_NAMES: &[&str] = &["vmt-rename-1", "vmt-rename-2", "vmt-rename-3"];

/// Watches this process as a "JVM" whose libjvm.so cannot get the
/// uprobe: through the task_rename tracepoint instead.
fn watch_through_task_rename(collector: &mut Collector, pid: u32) -> Result<(), String> {
    match collector.watch_jvm(pid, "/sparkprof-vm-tests/no-such/libjvm.so") {
        NameFeed::Tracepoint { .. } => Ok(()),
        other => Err(format!(
            "the tracepoint does not watch this process: {other:?}"
        )),
    }
}

fn check_task_rename(collector: &mut Collector, pid: u32) -> Result<String, String> {
    watch_through_task_rename(collector, pid)?;
    let (tid, drained) = renamed_worker(collector, COMM_NAMES, |name| {
        if let Err(err) = workload::set_comm(name) {
            eprintln!("{err}");
        }
    })?;
    check_renames(&drained, tid, RenameSource::TaskRename, COMM_NAMES)
}

const OTHER_NAMES: &[&str] = &["vmt-other-1", "vmt-other-2"];

/// A spinning thread renamed by this one through
/// `/proc/self/task/TID/comm`: the tracepoint runs in the writer's context,
/// so only `task_struct.pid` tells which thread was renamed.
fn check_task_rename_by_another(collector: &mut Collector, pid: u32) -> Result<String, String> {
    watch_through_task_rename(collector, pid)?;
    drain(collector)?;
    let spinner = Worker::spawn(|stop| {
        workload::sparkprof_vm_spin(stop);
    });
    let tid = spinner.tid;
    for name in OTHER_NAMES {
        let path = format!("/proc/self/task/{tid}/comm");
        if let Err(err) = std::fs::write(&path, name) {
            spinner.finish();
            return Err(format!("writing {path}: {err}"));
        }
        thread::sleep(Duration::from_millis(20));
    }
    thread::sleep(Duration::from_millis(800));
    let drained = drain(collector)?;
    spinner.finish();
    check_renames(&drained, tid, RenameSource::TaskRename, OTHER_NAMES)
}

const JVM_NAMES: &[&str] = &[
    "Executor task launch worker for task 1.0 in stage 2.0 (TID 3)",
    "Executor task launch worker for task 4.0 in stage 5.0 (TID 6)",
];

fn check_uprobe(collector: &mut Collector, pid: u32) -> Result<String, String> {
    let exe =
        std::fs::read_link("/proc/self/exe").map_err(|err| format!("/proc/self/exe: {err}"))?;
    let exe = exe.to_string_lossy().into_owned();
    match collector.watch_jvm(pid, &exe) {
        NameFeed::Uprobe => {}
        other => {
            return Err(format!(
                "the uprobe was not placed on {exe}'s set_native_thread_name: {other:?}"
            ));
        }
    }
    let (tid, drained) = renamed_worker(collector, JVM_NAMES, |name| {
        workload::call_set_native_thread_name(name);
    })?;
    check_renames(&drained, tid, RenameSource::JvmNativeName, JVM_NAMES)
}

/// A spinning thread registered with a fake thread state: its samples
/// carry exactly the fake chain's frames.
fn check_python(
    collector: &mut Collector,
    pid: u32,
    case: &python::FakeThread,
) -> Result<String, String> {
    collector
        .watch_python(pid, &case.offsets)
        .map_err(|err| format!("watch_python: {err}"))?;
    let spinner = Worker::spawn(|stop| {
        workload::sparkprof_vm_spin(stop);
    });
    collector.set_python_threads(
        pid,
        &[PythonThread {
            tid: spinner.tid,
            tstate: case.tstate(),
        }],
    );
    drain(collector)?;
    let started = Instant::now();
    thread::sleep(Duration::from_millis(1200));
    let drained = drain(collector)?;
    let elapsed = started.elapsed().as_secs_f64();
    let tid = spinner.tid;
    spinner.finish();
    collector.set_python_threads(pid, &[]);

    let want = RawPythonStack {
        frames: case.expected.clone(),
        truncated: case.truncated,
    };
    let total = sum(on_cpu_samples(&drained, tid).map(|s| s.count));
    let matching = sum(on_cpu_samples(&drained, tid)
        .filter(|s| s.python.as_ref() == Some(&want))
        .map(|s| s.count));
    let expected = FREQUENCY_HZ as f64 * elapsed;
    if (total as f64) < 0.4 * expected {
        return Err(format!(
            "{total} samples of the thread in {elapsed:.2} s (expected about {expected:.0})"
        ));
    }
    if (matching as f64) < 0.9 * total as f64 {
        let other = on_cpu_samples(&drained, tid)
            .find(|s| s.python.as_ref() != Some(&want))
            .map(|s| describe_python(s.python.as_ref()));
        return Err(format!(
            "{matching} of {total} samples carry the fake chain ({} frames{}); another: {}",
            want.frames.len(),
            if want.truncated { ", truncated" } else { "" },
            other.unwrap_or_default()
        ));
    }
    Ok(format!(
        "{matching} of {total} samples carry the {} fake frames{} exactly",
        want.frames.len(),
        if want.truncated { " (truncated)" } else { "" }
    ))
}

fn describe_python(stack: Option<&RawPythonStack>) -> String {
    match stack {
        None => "no Python stack".into(),
        Some(stack) => {
            let frames: Vec<String> = stack
                .frames
                .iter()
                .take(6)
                .map(|PythonFrame { code, instr }| format!("({code:#x}, {instr:#x})"))
                .collect();
            format!(
                "{} frames [{}{}], truncated {}",
                stack.frames.len(),
                frames.join(", "),
                if stack.frames.len() > 6 { ", ..." } else { "" },
                stack.truncated
            )
        }
    }
}
