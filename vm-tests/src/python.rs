//! The Python walker of both samplers: fake CPython thread states and frame
//! chains ([`crate::fake_python`]) followed on the CPU and off it.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU32, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use profiler_common::PythonFrame;
use sparkprof::collect::{Collector, RawPythonStack, RawSample};

use crate::{
    FREQUENCY_HZ, drain, fake_python, on_cpu_samples, sum,
    workload::{self, Worker},
};

/// The first fake thread case, its offsets given to the collector for
/// process `pid`.
fn follow_first_case(
    collector: &mut Collector,
    pid: u32,
) -> Result<fake_python::FakeThread, String> {
    let case = fake_python::FakeThread::cases()
        .into_iter()
        .next()
        .expect("a fake thread");
    collector
        .watch_python(pid, &case.offsets)
        .map_err(|err| format!("watch_python: {err}"))?;
    Ok(case)
}

/// A thread registered with a fake CPython 3.13 thread state sleeps 20 x
/// 50 ms: the off-CPU program walks its fake frames as it leaves the CPU,
/// and its time asleep carries them.
pub fn check_off_cpu_python(collector: &mut Collector, pid: u32) -> Result<String, String> {
    let case = follow_first_case(collector, pid)?;
    drain(collector)?;
    let sleeper = Worker::spawn(|_| workload::sleep_in_nanosleep(20, Duration::from_millis(50)));
    collector.set_python_threads(pid, &[case.thread(sleeper.tid)]);
    let tid = sleeper.tid;
    sleeper.finish();
    let mut samples = drain(collector)?.samples;
    samples.extend(drain(collector)?.samples);
    collector.set_python_threads(pid, &[]);

    let want = case.want();
    let asleep = crate::off_cpu::asleep_of(&samples, tid);
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

/// A spinning thread registered with a fake thread state: its samples
/// carry exactly the fake chain's frames.
pub fn check_python(
    collector: &mut Collector,
    pid: u32,
    case: &fake_python::FakeThread,
) -> Result<String, String> {
    collector
        .watch_python(pid, &case.offsets)
        .map_err(|err| format!("watch_python: {err}"))?;
    let spun = spin_registered(collector, |collector, tid| {
        collector.set_python_threads(pid, &[case.thread(tid)]);
    })?;
    collector.set_python_threads(pid, &[]);
    let (total, matching) = spun.carrying(&case.want())?;
    if (matching as f64) < 0.9 * total as f64 {
        return Err(format!(
            "{matching} of {total} samples carry the fake chain ({} frames{}); another: {}",
            case.expected.len(),
            if case.truncated { ", truncated" } else { "" },
            spun.other(&case.want())
        ));
    }
    Ok(format!(
        "{matching} of {total} samples carry the {} fake frames{} exactly",
        case.expected.len(),
        if case.truncated { " (truncated)" } else { "" }
    ))
}

/// A registered thread of a followed process forks: the kernel follows the
/// child from its fork on, its main thread with the forking thread's state
/// (the child's memory is a copy of the parent's), with no drain between,
/// and forgets it as it exits. (The child is not sampled here: the
/// collector samples only this process; `tests/` records a real CPython's
/// forked children whole-host.)
pub fn check_python_forked_child(collector: &mut Collector, pid: u32) -> Result<String, String> {
    let case = follow_first_case(collector, pid)?;
    let registered = Arc::new(AtomicBool::new(false));
    let child = Arc::new(AtomicU32::new(0));
    let (go, forked) = (Arc::clone(&registered), Arc::clone(&child));
    let forker = Worker::spawn(move |_| {
        while !go.load(Ordering::Acquire) {
            thread::sleep(Duration::from_millis(1));
        }
        // SAFETY: the child only sleeps and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let nap = libc::timespec {
                tv_sec: 0,
                tv_nsec: 500_000_000,
            };
            // SAFETY: async-signal-safe calls only, as a forked child of a
            // threaded process must.
            unsafe {
                libc::nanosleep(&nap, std::ptr::null_mut());
                libc::_exit(0);
            }
        }
        forked.store(pid.max(0) as u32, Ordering::Release);
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
    });
    let state = case.thread(forker.tid).tstate;
    collector.set_python_threads(pid, &[case.thread(forker.tid)]);
    registered.store(true, Ordering::Release);
    let started = Instant::now();
    let child = loop {
        let child = child.load(Ordering::Acquire);
        if child != 0 || started.elapsed() > Duration::from_secs(2) {
            break child;
        }
        thread::sleep(Duration::from_millis(5));
    };
    let alive = collector.python_followed(child, child);
    forker.finish();
    let gone = collector.python_followed(child, child);
    collector.set_python_threads(pid, &[]);
    if child == 0 {
        return Err("fork failed".into());
    }
    if alive != (true, Some((child, state))) {
        return Err(format!(
            "while the child {child} lived the kernel's maps held {alive:?} for it, not \
             (followed, its main thread at the forking thread's state {state:#x})"
        ));
    }
    if gone != (false, None) {
        return Err(format!(
            "after the child {child} exited the kernel's maps still held {gone:?} for it"
        ));
    }
    Ok(format!(
        "child {child} followed from its fork with state {state:#x}, forgotten at its exit"
    ))
}

/// A thread id registered by another followed process (as when a thread
/// exits and its id goes to another process's before a drain says so) is
/// not walked with that process's thread state; once this process
/// registers it, the other one letting go of its threads leaves it be.
pub fn check_python_thread_of_another_process(
    collector: &mut Collector,
    pid: u32,
) -> Result<String, String> {
    let case = fake_python::FakeThread::cases()
        .into_iter()
        .next()
        .expect("a fake thread");
    // A followed process that does not exist: no sample is its own.
    let other = u32::MAX - 1;
    for process in [pid, other] {
        collector
            .watch_python(process, &case.offsets)
            .map_err(|err| format!("watch_python({process}): {err}"))?;
    }
    let want = case.want();
    let foreign = spin_registered(collector, |collector, tid| {
        collector.set_python_threads(other, &[case.thread(tid)]);
    });
    let ours = spin_registered(collector, |collector, tid| {
        collector.set_python_threads(other, &[case.thread(tid)]);
        collector.set_python_threads(pid, &[case.thread(tid)]);
        collector.set_python_threads(other, &[]);
    });
    collector.set_python_threads(pid, &[]);
    collector.forget(other);
    let (foreign, ours) = (foreign?, ours?);
    let (total, walked) = foreign.carrying(&want)?;
    if walked > 0 {
        return Err(format!(
            "{walked} of {total} samples were walked with another process's thread state"
        ));
    }
    let (our_total, matching) = ours.carrying(&want)?;
    if (matching as f64) < 0.9 * our_total as f64 {
        return Err(format!(
            "once its own, {matching} of {our_total} samples carry the fake chain (the other \
             process's leaving removed it?); another: {}",
            ours.other(&want)
        ));
    }
    Ok(format!(
        "0 of {total} samples walked while another process's; {matching} of {our_total} once its own"
    ))
}

/// A spinning thread's on-CPU samples over 1.2 s, once `register` (given
/// its tid) told the collector about it.
struct Spun {
    samples: Vec<RawSample>,
    seconds: f64,
}

fn spin_registered(
    collector: &mut Collector,
    register: impl FnOnce(&mut Collector, u32),
) -> Result<Spun, String> {
    let spinner = Worker::spawn(|stop| {
        workload::sparkprof_vm_spin(stop);
    });
    register(collector, spinner.tid);
    drain(collector)?;
    let started = Instant::now();
    thread::sleep(Duration::from_millis(1200));
    let drained = drain(collector)?;
    let seconds = started.elapsed().as_secs_f64();
    let tid = spinner.tid;
    spinner.finish();
    Ok(Spun {
        samples: on_cpu_samples(&drained, tid).cloned().collect(),
        seconds,
    })
}

impl Spun {
    /// Its samples in all, and those that carry `want`; an error if there
    /// were too few samples to tell.
    fn carrying(&self, want: &RawPythonStack) -> Result<(u64, u64), String> {
        let total = sum(self.samples.iter().map(|s| s.count));
        let expected = FREQUENCY_HZ as f64 * self.seconds;
        if (total as f64) < 0.4 * expected {
            return Err(format!(
                "{total} samples of the thread in {:.2} s (expected about {expected:.0})",
                self.seconds
            ));
        }
        let matching = sum(self
            .samples
            .iter()
            .filter(|s| s.python.as_ref() == Some(want))
            .map(|s| s.count));
        Ok((total, matching))
    }

    /// A sample's Python stack other than `want`, described.
    fn other(&self, want: &RawPythonStack) -> String {
        self.samples
            .iter()
            .find(|s| s.python.as_ref() != Some(want))
            .map(|s| describe_python(s.python.as_ref()))
            .unwrap_or_default()
    }
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
