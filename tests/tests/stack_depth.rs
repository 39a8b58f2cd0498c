//! Deep stacks: a stack cut at the depth limit is marked `[truncated]`;
//! `--max-stack-depth` raises the limit for the recording and restores it.

use sparkprof_tests::{
    Recorder, SysctlGuard, Workload, build_workload, contains_in_order, read_sysctl,
};

const SYSCTL: &str = "kernel/perf_event_max_stack";

fn record_deep(extra: &[&str]) -> (Vec<sparkprof_tests::Stack>, String) {
    let work = tempfile::tempdir().unwrap();
    let chain = build_workload("chain", work.path());
    // 300 recursive frames: deeper than the default 127.
    let workload = Workload::start(&chain, &["3", "1", "300"]);
    let pid = workload.pid().to_string();
    let mut args = vec!["--duration", "1.5", "--pid", &pid];
    args.extend_from_slice(extra);
    let recording = Recorder::start(&args).wait();
    recording.assert_ok();
    (recording.stacks_of(workload.pid()), recording.log)
}

#[test]
fn cut_stacks_are_marked_and_a_raised_limit_gives_whole_stacks() {
    let _default = SysctlGuard::set(SYSCTL, "127");

    let (stacks, log) = record_deep(&[]);
    let worker: Vec<_> = stacks
        .iter()
        .filter(|s| s.frames[1] == "chainworker")
        .collect();
    assert!(!worker.is_empty(), "{log}");
    for stack in &worker {
        assert_eq!(
            stack.frames[2], "[truncated]",
            "a 300-deep stack at depth 127 is marked as cut: {stack:?}"
        );
        assert!(
            !stack.frames.iter().any(|f| f == "chain_worker_thread"),
            "its root is gone: {stack:?}"
        );
    }

    let (stacks, log) = record_deep(&["--max-stack-depth", "512"]);
    assert_eq!(
        read_sysctl(SYSCTL),
        "127",
        "the limit is restored after the recording"
    );
    let worker: Vec<_> = stacks
        .iter()
        .filter(|s| s.frames[1] == "chainworker")
        .collect();
    assert!(!worker.is_empty(), "{log}");
    let whole: u64 = worker
        .iter()
        .filter(|s| {
            !s.frames.contains(&"[truncated]".to_owned())
                && contains_in_order(
                    &s.frames,
                    &[
                        "chain_worker_thread",
                        "sparkprof_recurse",
                        "sparkprof_hot_leaf",
                    ],
                )
                && s.frames
                    .iter()
                    .filter(|f| *f == "sparkprof_recurse")
                    .count()
                    == 301
        })
        .map(|s| s.count)
        .sum();
    let total: u64 = worker.iter().map(|s| s.count).sum();
    assert!(
        whole as f64 >= 0.9 * total as f64,
        "{whole} of {total} samples have all 301 recursion frames: {worker:?}"
    );
}
