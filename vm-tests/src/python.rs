//! The Python walker of both samplers: fake CPython thread states and frame
//! chains ([`crate::fake_python`]) followed on the CPU and off it.

use std::{
    thread,
    time::{Duration, Instant},
};

use profiler_common::PythonFrame;
use sparkprof::collect::{Collector, RawPythonStack, RawSample};

use crate::{
    FREQUENCY_HZ, drain, fake_python, on_cpu_samples, sum,
    workload::{self, Worker},
};

/// A thread registered with a fake CPython 3.13 thread state sleeps 20 x
/// 50 ms: the off-CPU program walks its fake frames as it leaves the CPU,
/// and its time asleep carries them.
pub fn check_off_cpu_python(collector: &mut Collector, pid: u32) -> Result<String, String> {
    let case = fake_python::FakeThread::cases()
        .into_iter()
        .next()
        .expect("a fake thread");
    collector
        .watch_python(pid, &case.offsets)
        .map_err(|err| format!("watch_python: {err}"))?;
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
