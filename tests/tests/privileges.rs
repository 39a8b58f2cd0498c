//! Privileges: root records whatever kernel.perf_event_paranoid says; an
//! unprivileged user gets one clear line naming what is missing.

use std::{os::unix::fs::PermissionsExt, os::unix::process::CommandExt, process::Command};

use sparkprof_tests::{
    Recorder, SysctlGuard, Workload, build_workload, require_root, sparkprof_bin,
};

#[test]
fn root_records_at_paranoid_2_and_3() {
    let work = tempfile::tempdir().unwrap();
    let chain = build_workload("chain", work.path());
    for level in ["2", "3"] {
        let _paranoid = SysctlGuard::set("kernel/perf_event_paranoid", level);
        let workload = Workload::start(&chain, &["3", "1"]);
        let pid = workload.pid().to_string();
        let recording = Recorder::start(&["--duration", "1.5", "--pid", &pid]).wait();
        recording.assert_ok();
        let samples: u64 = recording.samples_of(workload.pid());
        assert!(
            samples > 50,
            "paranoid={level}: only {samples} samples:\n{}",
            recording.log
        );
    }
}

#[test]
fn unprivileged_user_gets_one_clear_line() {
    require_root();
    // A copy nobody can execute, in a directory nobody can enter.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let binary = dir.path().join("sparkprof");
    std::fs::copy(sparkprof_bin(), &binary).unwrap();
    std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
    let output = Command::new(&binary)
        .args([
            "record",
            "--duration",
            "1",
            "--output",
            "/tmp/sparkprof-unprivileged-test",
        ])
        .uid(65534)
        .gid(65534)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(77),
        "distinct exit code for missing privileges; stderr:\n{stderr}"
    );
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "exactly one line, got:\n{stderr}");
    let line = lines[0];
    for needed in [
        "missing capabilities",
        "cap_bpf",
        "cap_perfmon",
        "cap_sys_ptrace",
        "setcap",
        "root",
    ] {
        assert!(line.contains(needed), "{needed:?} missing from {line:?}");
    }
    assert!(!line.contains("os error"), "no errno dump: {line:?}");
    assert!(
        !std::path::Path::new("/tmp/sparkprof-unprivileged-test").exists(),
        "nothing written"
    );
}
