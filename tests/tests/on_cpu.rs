//! The on-CPU sampler end to end: a workload with a known call chain,
//! sampled system-wide, must show the whole chain, the right thread and
//! about frequency x CPU time samples; kernel frames must be named.

use sparkprof_tests::{
    Recorder, Steal, Workload, build_workload, contains_in_order, samples_agree,
};

const CHAIN: &[&str] = &[
    "chain_worker_thread",
    "sparkprof_level_one",
    "sparkprof_level_two",
    "sparkprof_hot_leaf",
];

#[test]
fn system_wide_samples_carry_the_full_chain_and_the_expected_count() {
    let work = tempfile::tempdir().unwrap();
    let chain = build_workload("chain", work.path());
    let recorder = Recorder::start(&["--duration", "8", "--frequency", "99"]);
    let steal = Steal::now();
    let workload = Workload::start(&chain, &["3", "2"]);
    let pid = workload.pid();
    let cpu_seconds = workload.wait_cpu_seconds();
    let stolen = steal.seconds_since();
    let recording = recorder.wait();
    recording.assert_ok();

    let files = recording.files_of(pid);
    assert_eq!(
        files.len(),
        1,
        "one file for the workload process: {:#?}",
        recording.files()
    );
    let entry = files[0];
    assert_eq!(entry["kind"], "cpu");
    assert!(
        entry["path"]
            .as_str()
            .unwrap()
            .starts_with("processes/chain-")
    );
    let svg = recording.dir().join(entry["svg"].as_str().unwrap());
    assert!(
        std::fs::read_to_string(&svg)
            .unwrap()
            .contains("sparkprof_hot_leaf"),
        "SVG shows the hot function"
    );

    let stacks = recording.stacks(entry);
    let total: u64 = stacks.iter().map(|s| s.count).sum();
    assert_eq!(
        Some(total),
        entry["samples"].as_u64(),
        "index sample count matches the file"
    );
    let worker: Vec<_> = stacks
        .iter()
        .filter(|s| s.frames[1] == "chainworker")
        .collect();
    let worker_total: u64 = worker.iter().map(|s| s.count).sum();
    let with_chain: u64 = worker
        .iter()
        .filter(|s| contains_in_order(&s.frames, CHAIN))
        .map(|s| s.count)
        .sum();
    assert!(
        worker_total > 0,
        "no samples of the worker threads: {stacks:#?}"
    );
    let share = with_chain as f64 / worker_total as f64;
    assert!(
        share >= 0.90,
        "only {:.1}% of worker samples carry the full chain: {stacks:#?}",
        share * 100.0
    );
    for stack in &stacks {
        assert_eq!(
            stack.frames[0],
            format!("chain [{pid}]"),
            "process frame first"
        );
    }

    // About its CPU time at 99 Hz, and the time stolen from it by the
    // hypervisor at most (see `Steal`).
    assert!(
        samples_agree(total, 99.0, cpu_seconds, stolen, 0.2),
        "{total} samples for {cpu_seconds:.2} CPU seconds at 99 Hz (expected about {:.0}, \
         or up to {:.0} with the {stolen:.2} s stolen from the host meanwhile)",
        99.0 * cpu_seconds,
        99.0 * (cpu_seconds + stolen),
    );
}

#[test]
fn kernel_frames_are_named_and_marked() {
    let work = tempfile::tempdir().unwrap();
    let syscalls = build_workload("syscalls", work.path());
    let recorder = Recorder::start(&["--duration", "5"]);
    let workload = Workload::start(&syscalls, &["3"]);
    let pid = workload.pid();
    workload.wait();
    let recording = recorder.wait();
    recording.assert_ok();
    let stacks = recording.stacks_of(pid);
    let total: u64 = stacks.iter().map(|s| s.count).sum();
    // Samples in the system call path, under main (frame-pointer unwinding
    // from inside libc's write, which keeps no frame pointer, skips its caller).
    let in_kernel: u64 = stacks
        .iter()
        .filter(|s| {
            contains_in_order(&s.frames, &["main"])
                && s.frames
                    .iter()
                    .any(|f| f.ends_with("_[k]") && !f.starts_with("[unknown"))
        })
        .map(|s| s.count)
        .sum();
    assert!(
        total > 50,
        "too few samples ({total}) of the syscall workload"
    );
    assert!(
        in_kernel as f64 >= 0.3 * total as f64,
        "only {in_kernel} of {total} samples show main calling into named kernel code: {stacks:#?}"
    );
    assert!(
        stacks.iter().any(|s| s
            .frames
            .iter()
            .any(|f| f.ends_with("_[k]") && f.contains("write"))),
        "the kernel's write path is named: {stacks:#?}"
    );
    // Kernel frames come after (below) every user frame.
    for stack in &stacks {
        if let Some(first_kernel) = stack.frames.iter().position(|f| f.ends_with("_[k]")) {
            assert!(
                stack.frames[first_kernel..]
                    .iter()
                    .all(|f| f.ends_with("_[k]")),
                "kernel frames are the leaf end: {stack:?}"
            );
        }
    }
}

/// A thread renamed mid-run is filed under each name for the time it had
/// it. The sampler keeps the comm of the thread a CPU sampled last (a
/// lone busy thread under `--pid` keeps it for the whole run): only the
/// rename moving its generation on makes it read the new one.
#[test]
fn a_thread_renamed_mid_run_is_named_as_it_was_at_each_sample() {
    let work = tempfile::tempdir().unwrap();
    let rename = build_workload("rename", work.path());
    let workload = Workload::start_ready(&rename, &["2"], "ready");
    let pid = workload.pid();
    let recorder = Recorder::start(&["--pid", &pid.to_string(), "--frequency", "99"]);
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    let halves = workload.wait();
    let recording = recorder.stop_with(libc::SIGINT);
    recording.assert_ok();

    let stacks = recording.stacks_of(pid);
    let named = |name: &str| -> u64 {
        stacks
            .iter()
            .filter(|s| s.frames.get(1).map(String::as_str) == Some(name))
            .map(|s| s.count)
            .sum()
    };
    let (before, after) = (named("beforename"), named("aftername"));
    let total: u64 = stacks.iter().map(|s| s.count).sum();
    // Each half is 2 CPU seconds: about 198 samples at 99 Hz.
    assert!(
        (140..=260).contains(&before) && (140..=260).contains(&after),
        "{before} samples named beforename and {after} aftername, of {total} ({halves}): {stacks:#?}"
    );
    assert!(
        before + after + 5 >= total,
        "samples under neither name: {stacks:#?}"
    );
}
