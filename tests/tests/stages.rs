//! Spark stage attribution without Spark: a JVM that looks like a standalone
//! executor (main class, `--executor-id`, `--app-id`) and renames its pool
//! threads exactly as Spark's task threads do, through four stages, each
//! running its own hot method (`workloads/spark/CoarseGrainedExecutorBackend.java`).
//! Stage S's method must land in stage S's file, tasks shorter than a second
//! included.

use std::collections::HashMap;

use sparkprof_tests::{
    Host, Recorder, Recording, Stack,
    fake_executor::{APP_ID, EXECUTOR_ID, FakeExecutor},
    require_root,
};

/// The hot method of each stage, by stage ID.
const STAGE_METHODS: [&str; 4] = [
    "stageZeroHot",
    "stageOneHot",
    "stageTwoHot",
    "stageThreeHot",
];

/// Starts the fake executor for `seconds` (compiled into a directory
/// outside /tmp) and waits until its pool runs.
fn start_executor(seconds: u32) -> (FakeExecutor, tempfile::TempDir) {
    require_root();
    let dir = sparkprof_tests::classes_dir("executor");
    let classes = FakeExecutor::compile(dir.path()).expect("the Spark tagging tests need a JDK");
    let executor = FakeExecutor::start(&classes, seconds, &[]).expect("the fake executor starts");
    (executor, dir)
}

/// Samples of each stage's hot method, by the stage of the file they landed
/// in (`None`: a file without a stage).
fn method_placement(
    recording: &Recording,
    pid: u32,
) -> HashMap<&'static str, HashMap<Option<u64>, u64>> {
    let mut placement: HashMap<&str, HashMap<Option<u64>, u64>> = HashMap::new();
    for entry in recording.files_of(pid) {
        let stage = entry["stage_id"].as_u64();
        for stack in recording.stacks(entry) {
            if let Some(method) = hot_method(&stack) {
                *placement
                    .entry(method)
                    .or_default()
                    .entry(stage)
                    .or_default() += stack.count;
            }
        }
    }
    placement
}

/// The stage method a stack runs, if any.
fn hot_method(stack: &Stack) -> Option<&'static str> {
    STAGE_METHODS.iter().copied().find(|method| {
        stack
            .frames
            .iter()
            .any(|frame| frame.contains(&format!("CoarseGrainedExecutorBackend.{method}")))
    })
}

fn stage_files(recording: &Recording, pid: u32) -> Vec<&serde_json::Value> {
    recording
        .files_of(pid)
        .into_iter()
        .filter(|entry| entry["stage_id"].is_u64())
        .collect()
}

#[test]
fn task_samples_land_in_their_stage_files() {
    // sparkprof first, as on a worker host: the executor starts after it.
    let recorder = Recorder::start(&["--frequency", "199", "--task-frames"]);
    let (executor, _classes) = start_executor(10);
    let pid = executor.pid();
    let tasks = executor.wait().expect("the fake executor ran");
    let recording = recorder.stop_with(libc::SIGINT);
    recording.assert_ok();

    // Every stage has its file, tagged in the index.
    let stages = stage_files(&recording, pid);
    let mut stage_ids: Vec<u64> = stages
        .iter()
        .map(|e| e["stage_id"].as_u64().unwrap())
        .collect();
    stage_ids.sort_unstable();
    assert_eq!(stage_ids, vec![0, 1, 2, 3], "stage files: {stages:?}");
    for entry in &stages {
        assert_eq!(entry["role"], "executor");
        assert_eq!(entry["app_id"], APP_ID);
        assert_eq!(entry["executor_id"], EXECUTOR_ID);
        let stage = entry["stage_id"].as_u64().unwrap();
        assert_eq!(
            entry["path"],
            format!("spark/{APP_ID}/executor-{EXECUTOR_ID}/stage-{stage}.cpu.folded")
        );
    }

    // At least 95% of each method's samples are in its stage's file.
    let placement = method_placement(&recording, pid);
    for (stage, method) in STAGE_METHODS.iter().enumerate() {
        let by_file = placement.get(method).cloned().unwrap_or_default();
        let total: u64 = by_file.values().sum();
        let right = by_file.get(&Some(stage as u64)).copied().unwrap_or(0);
        eprintln!("{method}: {right} of {total} samples in stage {stage}'s file ({by_file:?})");
        assert!(
            total >= 50,
            "{method}: only {total} samples ({tasks} tasks ran)"
        );
        assert!(
            right as f64 >= 0.95 * total as f64,
            "{method}: {right} of {total} samples in stage {stage}'s file: {by_file:?}"
        );
    }

    // With --task-frames the thread frame names the task. The executor runs
    // task T in stage T % 4, and tasks with T % 3 != 0 last 150-300 ms: those
    // short tasks are attributed to the right stage too.
    let mut short_task_samples = 0;
    let mut wrong = 0;
    let mut total = 0;
    for entry in &stages {
        let stage = entry["stage_id"].as_u64().unwrap();
        for stack in recording.stacks(entry) {
            let tid: u64 = stack.frames[1]
                .rsplit("TID ")
                .next()
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(|| panic!("thread frame {:?} names no task", stack.frames[1]));
            total += stack.count;
            if tid % 4 != stage {
                wrong += stack.count;
            }
            if !tid.is_multiple_of(3) {
                short_task_samples += stack.count;
            }
        }
    }
    assert!(
        wrong as f64 <= 0.01 * total as f64,
        "{wrong} of {total} stage-file samples belong to a task of another stage"
    );
    assert!(
        short_task_samples >= 50,
        "only {short_task_samples} samples of sub-second tasks in stage files"
    );
}

#[test]
fn thread_dump_names_never_put_a_task_in_the_wrong_stage() {
    // Without the uprobe: renames are reported by the task_rename tracepoint
    // and the full names come from Thread.print. Names are then only known
    // at dump time, so short tasks may fall back to the executor's file, but
    // a sample that lands in a stage file must belong to that stage.
    // Run on a bare host (no tracefs): the tracepoint is BTF-typed and
    // needs none.
    let (executor, _classes) = start_executor(12);
    let pid = executor.pid();
    let recorder = Recorder::start_on(
        Host::Bare,
        &["--frequency", "199", "--thread-names", "dumps"],
    );
    let tasks = executor.wait().expect("the fake executor ran");
    let recording = recorder.stop_with(libc::SIGINT);
    recording.assert_ok();
    assert!(
        !recording.log.contains("task_rename"),
        "the task_rename tracepoint did not attach:\n{}",
        recording.log
    );
    assert!(
        recording
            .log
            .contains("full thread names from thread dumps"),
        "the log does not say which JVMs get names from dumps:\n{}",
        recording.log
    );

    let placement = method_placement(&recording, pid);
    let mut in_stage_files = 0;
    for (stage, method) in STAGE_METHODS.iter().enumerate() {
        let by_file = placement.get(method).cloned().unwrap_or_default();
        for (file_stage, count) in &by_file {
            if let Some(file_stage) = file_stage {
                in_stage_files += count;
                assert_eq!(
                    *file_stage, stage as u64,
                    "{count} samples of {method} landed in stage {file_stage}'s file ({tasks} tasks)"
                );
            }
        }
    }
    assert!(
        in_stage_files >= 100,
        "only {in_stage_files} samples reached stage files through thread dumps"
    );
    assert!(recording.index["threads"]["thread_dumps"].as_u64().unwrap() >= 2);
}
