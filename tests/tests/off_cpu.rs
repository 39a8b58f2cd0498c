//! Off-CPU time on the real kernel (`record --off-cpu`, sched_switch): a
//! thread that sleeps a known share of its time, threads blocked on a pipe
//! and on a lock, Java threads in Thread.sleep and at a monitor, and CPU
//! contention, which must show as preemption and not as sleep.

use rstest::rstest;
use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Command, Stdio},
    time::Duration,
};

use sparkprof_tests::{
    Host, Recorder, Recording, Stack, Workload, build_workload, pseudo_fs_mounts, require_root,
};

/// Off-CPU stacks of a process, from its `offcpu` files.
fn off_cpu_stacks(recording: &Recording, pid: u32) -> Vec<Stack> {
    let files: Vec<_> = recording
        .files_of(pid)
        .into_iter()
        .filter(|entry| entry["kind"] == "offcpu")
        .collect();
    assert!(
        !files.is_empty(),
        "no off-CPU file for {pid}: {:?}",
        recording.files()
    );
    for entry in &files {
        assert_eq!(entry["unit"], "microseconds");
        // Counted while the process was known: filed with its identity, not
        // as a process that had exited unseen.
        assert!(
            !entry["process"].as_str().unwrap().contains("[exited]"),
            "{entry}"
        );
        assert!(
            entry["path"].as_str().unwrap().ends_with(".offcpu.folded"),
            "{entry}"
        );
    }
    files.iter().flat_map(|e| recording.stacks(e)).collect()
}

/// Microseconds of the stacks of thread `thread` that satisfy `wanted`.
fn micros(stacks: &[Stack], thread: &str, wanted: impl Fn(&Stack) -> bool) -> u64 {
    stacks
        .iter()
        .filter(|s| s.frames[1] == thread && wanted(s))
        .map(|s| s.count)
        .sum()
}

fn leaf_is(stack: &Stack, marker: &str) -> bool {
    stack.frames.last().is_some_and(|leaf| leaf == marker)
}

fn has_frame(stack: &Stack, part: &str) -> bool {
    stack.frames.iter().any(|frame| frame.contains(part))
}

/// The workload's threads start once sparkprof records (each is marked
/// for off-CPU time as it is created), or exist before it starts and start
/// their work then (marked by the task iterator when their process is
/// first watched).
#[rstest]
#[case::threads_created_while_recording(Threads::CreatedWhileRecording)]
#[case::threads_there_before_recording(Threads::ThereBefore)]
fn blocked_time_where_threads_wait(#[case] threads: Threads) {
    blocked_time_of_known_waits(Host::AsIs, threads, Duration::ZERO);
}

/// The process exits seconds before the recording stops: a drain, not the
/// last one, reports it exited, and the off-CPU time held for it until
/// then (see profiler-user's `collect::hold`) comes with that drain, named
/// while its process was still known.
#[test]
fn blocked_time_of_a_process_that_exited_while_recording() {
    blocked_time_of_known_waits(
        Host::AsIs,
        Threads::CreatedWhileRecording,
        Duration::from_secs(3),
    );
}

/// The same on a bare host (a fresh machine, a container): no tracefs or
/// debugfs in sparkprof's mount namespace, and the host's own mounts left
/// as they were.
#[test]
fn blocked_time_on_a_bare_host() {
    let before = pseudo_fs_mounts(std::process::id());
    blocked_time_of_known_waits(Host::Bare, Threads::CreatedWhileRecording, Duration::ZERO);
    assert_eq!(pseudo_fs_mounts(std::process::id()), before);
}

/// When the waiting threads of the `offcpu wait` workload are created.
#[derive(Debug, Clone, Copy)]
enum Threads {
    CreatedWhileRecording,
    ThereBefore,
}

/// Records the `offcpu wait` workload with `--off-cpu` on `host` and checks
/// its on-CPU samples, its off-CPU time against the workload's own
/// measurement, where each thread waits, and the wall-clock view. The
/// recording goes on for `after_exit` once the workload has exited.
fn blocked_time_of_known_waits(host: Host, threads: Threads, after_exit: Duration) {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let binary = build_workload("offcpu", dir.path());
    // --pid: the workload is the process of interest (not a JVM or Python).
    // Its threads start their waits on SIGUSR1, once sparkprof records.
    let workload = match threads {
        Threads::CreatedWhileRecording => Workload::start(&binary, &["wait", "4", "go-on-signal"]),
        // Once it says so, its threads exist, each held at a gate.
        Threads::ThereBefore => {
            Workload::start_ready(&binary, &["wait", "4", "threads-first"], "waiting")
        }
    };
    let pid = workload.pid();
    let pid_arg = pid.to_string();
    let recorder = Recorder::start_on(
        host,
        &["--off-cpu", "--min-block-us", "50", "--pid", &pid_arg],
    );
    unsafe { libc::kill(pid as i32, libc::SIGUSR1) };
    let output = workload.wait();
    std::thread::sleep(after_exit);
    let recording = recorder.stop_with(libc::SIGINT);
    recording.assert_ok();
    // Every program attached: nothing about tracepoints or tracefs.
    for complaint in ["tracefs", "tracepoint", "not attached"] {
        assert!(
            !recording.log.contains(complaint),
            "{complaint:?} in the log:\n{}",
            recording.log
        );
    }

    // On the CPU: the sleeper burns ~20 ms of every 50 (about 1.6 s of its
    // 4 s at 99 Hz: ~160 samples) in its loop.
    let on_cpu: u64 = recording
        .files_of(pid)
        .into_iter()
        .filter(|entry| entry["kind"] == "cpu")
        .flat_map(|entry| recording.stacks(entry))
        .filter(|s| s.frames[1] == "sleeper" && has_frame(s, "sparkprof_sleeper_loop"))
        .map(|s| s.count)
        .sum();
    assert!(
        on_cpu >= 80,
        "only {on_cpu} on-CPU samples of the sleeper in its loop"
    );
    let slept_us: u64 = output
        .lines()
        .find_map(|l| l.strip_prefix("slept_us "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no truth printed: {output:?}"));
    let stacks = off_cpu_stacks(&recording, pid);

    // The sleeper: its sleeps, as measured by itself, within 10%.
    let sleeping = micros(&stacks, "sleeper", |s| {
        leaf_is(s, "[off-cpu: sleep]") && has_frame(s, "sparkprof_sleeper_loop")
    });
    eprintln!("sleeper: {sleeping} us off-CPU asleep, truth {slept_us} us");
    assert!(
        (sleeping as f64 - slept_us as f64).abs() <= 0.10 * slept_us as f64,
        "sleeper: {sleeping} us reported, {slept_us} us true"
    );

    // The wall-clock file beside it: the sleeper's on-CPU samples as time
    // (one sampling period each, under `[on-cpu]`) and its off-CPU time
    // add up to its life, the 4 s it ran for.
    let wall: Vec<Stack> = recording
        .files_of(pid)
        .into_iter()
        .filter(|entry| entry["kind"] == "wall")
        .inspect(|entry| {
            assert_eq!(entry["unit"], "microseconds");
            assert!(entry["path"].as_str().unwrap().ends_with(".wall.folded"));
        })
        .flat_map(|entry| recording.stacks(entry))
        .collect();
    let sleeper_on = micros(&wall, "sleeper", |s| {
        leaf_is(s, "[on-cpu]") && has_frame(s, "sparkprof_sleeper_loop")
    });
    let sleeper_off = micros(&wall, "sleeper", |s| {
        s.frames.last().is_some_and(|l| l.starts_with("[off-cpu: "))
    });
    let life_us = 4_000_000.0;
    eprintln!(
        "sleeper wall clock: {sleeper_on} us on the CPU + {sleeper_off} us off it, life {life_us} us, slept {slept_us} us"
    );
    assert!(
        ((sleeper_on + sleeper_off) as f64 - life_us).abs() <= 0.10 * life_us,
        "sleeper: {sleeper_on} us on + {sleeper_off} us off the CPU, life {life_us} us"
    );
    let awake_us = life_us - slept_us as f64;
    assert!(
        (sleeper_on as f64 - awake_us).abs() <= 0.25 * awake_us,
        "sleeper: {sleeper_on} us on the CPU, {awake_us} us awake"
    );

    // The pipe reader waits in read(), in the kernel's pipe read.
    let piped = micros(&stacks, "piperead", |s| {
        leaf_is(s, "[off-cpu: sleep]")
            && has_frame(s, "pipe_reader")
            && s.frames
                .iter()
                .any(|f| f.contains("pipe_read") && f.ends_with("_[k]"))
    });
    assert!(
        piped >= 2_000_000,
        "pipe reader blocked only {piped} us in pipe_read:\n{stacks:#?}"
    );

    // The contender waits for the mutex: a futex wait under its own frame.
    let locked = micros(&stacks, "contender", |s| {
        leaf_is(s, "[off-cpu: sleep]")
            && has_frame(s, "contender")
            && s.frames
                .iter()
                .any(|f| f.starts_with("futex_wait") && f.ends_with("_[k]"))
    });
    assert!(
        locked >= 1_000_000,
        "contender blocked {locked} us on the lock"
    );

    // Off-CPU counts are time, not samples: the summary and the JIT
    // statistics only count on-CPU samples.
    let cpu_samples: u64 = recording
        .files()
        .iter()
        .filter(|e| e["kind"] == "cpu")
        .map(|e| e["samples"].as_u64().unwrap())
        .sum();
    let stats = &recording.index["stats"];
    assert!(cpu_samples <= stats["samples"].as_u64().unwrap());
    assert!(stats["offcpu_switches"].as_u64().unwrap() > 0);
}

#[test]
fn cpu_contention_is_preemption_not_sleep() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let binary = build_workload("offcpu", dir.path());
    let busy_threads = (2 * std::thread::available_parallelism().unwrap().get()).to_string();
    // --pid: the workload is the process of interest (not a JVM or Python).
    // Its threads spin for a fixed wall time from their start, and the
    // recorder starts after them (it needs the pid): 8 s leaves several
    // seconds to record however slow its start. With 4 s, a start of about
    // 3.5 s on a slow host left 0.75 s of preemption, under the 1 s asked.
    let workload = Workload::start(&binary, &["contend", "8", &busy_threads]);
    let pid = workload.pid();
    let pid_arg = pid.to_string();
    let recorder = Recorder::start(&["--off-cpu", "--pid", &pid_arg]);
    workload.wait();
    let recording = recorder.stop_with(libc::SIGINT);
    recording.assert_ok();
    let stacks = off_cpu_stacks(&recording, pid);
    let preempted = micros(&stacks, "busy", |s| leaf_is(s, "[off-cpu: preempted]"));
    let asleep = micros(&stacks, "busy", |s| leaf_is(s, "[off-cpu: sleep]"));
    eprintln!("busy threads: {preempted} us preempted, {asleep} us asleep");
    // Twice as many threads as CPUs: about half of their time is spent
    // waiting for a CPU, and (almost) none asleep.
    assert!(preempted >= 1_000_000, "only {preempted} us of preemption");
    assert!(
        asleep * 20 <= preempted,
        "{asleep} us asleep vs {preempted} us preempted"
    );
    // A runnable thread's period is kept without its user frames (where it
    // ran is what its on-CPU samples show): none under the spin loop.
    let with_user_frames = micros(&stacks, "busy", |s| {
        leaf_is(s, "[off-cpu: preempted]") && has_frame(s, "sparkprof_busy")
    });
    assert_eq!(with_user_frames, 0, "preempted time under sparkprof_busy");
    // The on-CPU samples do show it.
    let on_cpu_busy = recording
        .files_of(pid)
        .into_iter()
        .filter(|entry| entry["kind"] == "cpu")
        .flat_map(|entry| recording.stacks(entry))
        .any(|s| has_frame(&s, "sparkprof_busy"));
    assert!(on_cpu_busy, "no on-CPU sample in sparkprof_busy");
}

#[test]
fn java_threads_waiting_in_sleep_and_at_a_monitor() {
    require_root();
    let classes_dir = sparkprof_tests::classes_dir("waits");
    let classes = classes_dir.path();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/Waits.java");
    let status = Command::new("javac")
        .arg("-d")
        .arg(classes)
        .arg(&source)
        .status()
        .expect("javac (a JDK) is required by the off-CPU tests");
    assert!(status.success());
    // By default off-CPU time is recorded for every JVM (and Python): no --pid.
    let recorder = Recorder::start(&["--off-cpu"]);
    let mut java = Command::new("java")
        .args(["-XX:+PreserveFramePointer", "-cp"])
        .arg(classes)
        .args(["Waits", "5"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("java is required by the off-CPU tests");
    let pid = java.id();
    let mut line = String::new();
    BufReader::new(java.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    assert!(java.wait().unwrap().success());
    let recording = recorder.stop_with(libc::SIGINT);
    recording.assert_ok();
    drop(classes_dir);
    let stacks = off_cpu_stacks(&recording, pid);

    // Both wait in the kernel's futex wait, voluntarily, most of the time,
    // and the wait shows the call chain that led there through the JVM:
    // the C library's wait keeps no frame pointer, so this needs the
    // walk that finds the next frame record on the stack.
    for (thread, through) in [
        ("javasleeper", &["JVM_Sleep"][..]),
        (
            "javalocker",
            &[
                "ObjectSynchronizer::enter",
                "ObjectMonitor::enter",
                "monitorenter",
            ][..],
        ),
    ] {
        let waiting = micros(&stacks, thread, |s| {
            leaf_is(s, "[off-cpu: sleep]")
                && s.frames
                    .iter()
                    .any(|f| f.starts_with("futex_wait") && f.ends_with("_[k]"))
                && s.frames
                    .iter()
                    .any(|f| through.iter().any(|name| f.contains(name)))
        });
        eprintln!("{thread}: {waiting} us in futex waits under {through:?}");
        if waiting < 2_500_000 {
            // What the thread's waits were recorded as instead.
            let mut own: Vec<&Stack> = stacks.iter().filter(|s| s.frames[1] == thread).collect();
            own.sort_by_key(|s| std::cmp::Reverse(s.count));
            for stack in own.iter().take(5) {
                eprintln!("  {} us: {}", stack.count, stack.frames.join(";"));
            }
            if own.is_empty() {
                // Recorded under another thread name, or not at all.
                let mut threads = std::collections::BTreeMap::<&str, u64>::new();
                for stack in &stacks {
                    *threads.entry(stack.frames[1].as_str()).or_default() += stack.count;
                }
                eprintln!("  no stack of {thread}; threads recorded (us): {threads:?}");
            }
        }
        assert!(
            waiting >= 2_500_000,
            "{thread}: only {waiting} us waiting in futex under {through:?}"
        );
    }
}
