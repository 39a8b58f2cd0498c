//! The Python walker of both samplers: fake CPython thread states and frame
//! chains ([`crate::fake_python`]) followed on the CPU and off it.

use std::{
    thread,
    time::{Duration, Instant},
};

use profiler_common::PythonFrame;
use sparkprof::collect::{Collector, PythonThread, RawPythonStack};

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
