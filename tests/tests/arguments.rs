//! Bad arguments get a clear error before anything is recorded: never a
//! panic, never a recording that silently holds nothing.

use std::process::Command;

use sparkprof_tests::{require_root, sparkprof_bin};

/// Runs `sparkprof record ARGS` and returns its stderr; it must fail
/// cleanly (no panic) and leave no output directory behind.
fn refused(args: &[&str]) -> String {
    require_root();
    let base = tempfile::tempdir().unwrap();
    let out = base.path().join("out");
    let output = Command::new(sparkprof_bin())
        .arg("record")
        .arg("--output")
        .arg(&out)
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "{args:?} accepted:\n{stderr}");
    assert_ne!(
        output.status.code(),
        Some(101),
        "{args:?} panicked:\n{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{args:?}:\n{stderr}");
    assert!(!out.exists(), "{args:?} created the output directory");
    stderr
}

#[test]
fn durations_that_are_not_a_positive_time_are_refused() {
    for bad in ["-1", "0", "nan", "inf", "1e300", "soon"] {
        let stderr = refused(&[&format!("--duration={bad}")]);
        assert!(
            stderr.contains("the duration must be more than 0")
                || stderr.contains("is not a number of seconds"),
            "--duration {bad}:\n{stderr}"
        );
    }
}

#[test]
fn processes_that_cannot_be_profiled_are_refused() {
    let stderr = refused(&["--pid", "999999", "--duration", "1"]);
    assert!(stderr.contains("--pid 999999: no such process"), "{stderr}");
    // PID 2 is kthreadd, a kernel thread.
    let stderr = refused(&["--pid", "2", "--duration", "1"]);
    assert!(
        stderr.contains("--pid 2: a kernel thread (kthreadd)"),
        "{stderr}"
    );
}

#[test]
fn a_cgroup_that_is_not_one_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let stderr = refused(&["--cgroup", path, "--duration", "1"]);
    assert!(
        stderr.contains(&format!("--cgroup {path} is not a cgroup")),
        "{stderr}"
    );
    let gone = format!("{path}/gone");
    let stderr = refused(&["--cgroup", &gone, "--duration", "1"]);
    assert!(stderr.contains(&format!("--cgroup {gone}: ")), "{stderr}");
    let stderr = refused(&["--cgroup", "/sys/fs/cgroup", "--pid", "1"]);
    assert!(stderr.contains("cannot be used with"), "{stderr}");
}

#[test]
fn map_sizes_and_budgets_out_of_range_are_refused() {
    let stderr = refused(&["--stack-map-entries", "0", "--duration", "1"]);
    assert!(stderr.contains("--stack-map-entries"), "{stderr}");
    for bad in ["0", "-5", "nan", "101"] {
        let stderr = refused(&[&format!("--jit-dump-budget={bad}"), "--duration", "1"]);
        assert!(
            stderr.contains("per cent"),
            "--jit-dump-budget {bad}:\n{stderr}"
        );
    }
}
