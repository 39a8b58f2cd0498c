//! `--pid` narrows sampling to the given processes, `--cgroup` to what runs
//! in a cgroup; SIGINT and SIGTERM stop a recording with everything counted
//! so far written out.

use sparkprof_tests::{Recorder, Recording, Workload, build_workload, cgroup::Cgroup};

#[test]
fn pid_filter_samples_only_the_given_process() {
    let work = tempfile::tempdir().unwrap();
    let chain = build_workload("chain", work.path());
    let wanted = Workload::start(&chain, &["4", "1"]);
    let other = Workload::start(&chain, &["4", "1"]);
    let wanted_pid = wanted.pid().to_string();
    let recorder = Recorder::start(&["--duration", "2", "--pid", &wanted_pid]);
    assert_only_recorded(&recorder.wait(), &wanted, &other);
}

/// `--cgroup` records what runs in a cgroup or below it: the process moved
/// into a child of the cgroup given, not its twin outside. (The kernel
/// tells a thread's cgroup at each sample: what moves in or is forked
/// there later counts from then.)
#[test]
fn cgroup_filter_samples_only_what_runs_in_the_cgroup() {
    let group = Cgroup::create("sparkprof-test-scope").unwrap();
    let inner = group.child("inner").unwrap();
    let work = tempfile::tempdir().unwrap();
    let chain = build_workload("chain", work.path());
    let wanted = Workload::start(&chain, &["4", "1"]);
    let other = Workload::start(&chain, &["4", "1"]);
    inner.add(wanted.pid()).unwrap();
    let recorder = Recorder::start(&[
        "--duration",
        "2",
        "--cgroup",
        group.path().to_str().unwrap(),
    ]);
    assert_only_recorded(&recorder.wait(), &wanted, &other);
}

/// `recording` holds `wanted`'s samples, and none of `other`'s, which the
/// kernel filtered.
fn assert_only_recorded(recording: &Recording, wanted: &Workload, other: &Workload) {
    recording.assert_ok();
    let pids: Vec<u64> = recording
        .files()
        .iter()
        .filter_map(|f| f["pid"].as_u64())
        .collect();
    assert_eq!(
        pids,
        vec![u64::from(wanted.pid())],
        "only the filtered process is profiled: {:#?}",
        recording.files()
    );
    assert!(recording.files_of(other.pid()).is_empty());
    assert!(
        recording.index["stats"]["filtered"].as_u64().unwrap() > 0,
        "other samples were filtered in the kernel"
    );
    let samples = recording.files_of(wanted.pid())[0]["samples"]
        .as_u64()
        .unwrap();
    assert!(
        samples > 100,
        "the filtered process was sampled ({samples})"
    );
}

fn stops_and_flushes_on(signal: i32) {
    let work = tempfile::tempdir().unwrap();
    let chain = build_workload("chain", work.path());
    let recorder = Recorder::start(&[]); // no --duration: until a signal
    let workload = Workload::start(&chain, &["3", "1"]);
    let pid = workload.pid();
    workload.wait_cpu_seconds();
    // The workload's samples are now counted in the kernel, maybe not drained.
    let recording = recorder.stop_with(signal);
    recording.assert_ok();
    // Every sample the kernel counted is in a file.
    let stats = &recording.index["stats"];
    let counted = ["samples", "idle", "filtered", "dropped_count_map_full"]
        .map(|k| stats[k].as_u64().unwrap());
    let written: u64 = recording
        .files()
        .iter()
        .map(|f| f["samples"].as_u64().unwrap())
        .sum();
    assert_eq!(
        written,
        counted[0] - counted[1] - counted[2] - counted[3],
        "stats: {stats}"
    );
    let samples: u64 = recording.samples_of(pid);
    assert!(
        samples >= 150,
        "after the signal the workload's ~198 samples were written, got {samples}:\n{}",
        recording.log
    );
}

#[test]
fn sigint_writes_what_was_counted() {
    stops_and_flushes_on(libc::SIGINT);
}

#[test]
fn sigterm_writes_what_was_counted() {
    stops_and_flushes_on(libc::SIGTERM);
}
