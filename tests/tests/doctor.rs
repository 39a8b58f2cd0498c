//! `sparkprof doctor` reports the host's facts and every JVM's frame-pointer flag.

use std::{process::Command, time::Duration};

use sparkprof_tests::{kill_and_reap, on_bare_host, read_sysctl, require_root, sparkprof_bin};

#[test]
fn doctor_reports_host_facts_and_jvms() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("Idle.java");
    std::fs::write(&source, "public class Idle { public static void main(String[] a) throws Exception { Thread.sleep(60000); } }").unwrap();
    let java = |flag: &str| {
        Command::new("java")
            .arg(flag)
            .arg(&source)
            .spawn()
            .expect("java (a JDK) is required by the integration tests")
    };
    let mut with_fp = java("-XX:+PreserveFramePointer");
    let mut without_fp = java("-Xmx64m");
    // Wait until both JVMs have mapped libjvm.so.
    let mapped = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/maps"))
            .unwrap_or_default()
            .contains("libjvm.so")
    };
    for _ in 0..100 {
        if mapped(with_fp.id()) && mapped(without_fp.id()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }

    // ... and are past start-up (their Signal Dispatcher thread runs).
    std::thread::sleep(Duration::from_millis(1500));
    let output = Command::new(sparkprof_bin())
        .arg("doctor")
        .output()
        .unwrap();
    kill_and_reap(&mut with_fp);
    kill_and_reap(&mut without_fp);
    assert!(output.status.success());
    let report = String::from_utf8_lossy(&output.stdout);
    let value = |key: &str| {
        report
            .lines()
            .find(|l| l.starts_with(key))
            .unwrap_or_else(|| panic!("{key} missing from:\n{report}"))
            .to_owned()
    };
    assert!(value("kernel").contains(&read_sysctl("kernel/osrelease")));
    assert!(value("btf").contains("yes"));
    assert!(value("perf_event_paranoid").contains(&read_sysctl("kernel/perf_event_paranoid")));
    assert!(value("kptr_restrict").contains(&read_sysctl("kernel/kptr_restrict")));
    assert!(value("perf_event_max_stack").contains(&read_sysctl("kernel/perf_event_max_stack")));
    // Every tracepoint is attached by BTF, whatever tracefs's state.
    let tracepoints = value("tracepoints");
    assert!(
        tracepoints
            .contains("by BTF (sched_switch, sched_process_exit, task_rename, sched_process_fork, sched_process_exec; task_struct.pid at "),
        "{tracepoints}"
    );
    assert!(tracepoints.contains("tracefs"), "{tracepoints}");
    // On a bare host it says that record needs no tracefs, not a step to take.
    let bare = on_bare_host(Command::new(sparkprof_bin()).arg("doctor"))
        .output()
        .unwrap();
    assert!(bare.status.success());
    let bare = String::from_utf8_lossy(&bare.stdout);
    let bare_line = bare
        .lines()
        .find(|l| l.starts_with("tracepoints"))
        .unwrap_or_else(|| panic!("no tracepoints line:\n{bare}"));
    assert!(
        bare_line.contains("by BTF (") && bare_line.ends_with("tracefs not mounted, not needed"),
        "{bare_line}"
    );
    assert!(value("capabilities").contains("CAP_BPF"));
    assert!(value("can record").contains("yes"));
    let jvm_line = |pid: u32| {
        report
            .lines()
            .find(|l| l.contains(&format!("pid {pid} ")))
            .map(str::to_owned)
    };
    let with =
        jvm_line(with_fp.id()).unwrap_or_else(|| panic!("JVM {} missing:\n{report}", with_fp.id()));
    let without = jvm_line(without_fp.id())
        .unwrap_or_else(|| panic!("JVM {} missing:\n{report}", without_fp.id()));
    // HotSpot's structures are readable: sparkprof walks Java frames
    // itself, with or without the flag.
    assert!(
        with.contains(
            "Java stacks walked by sparkprof; -XX:+PreserveFramePointer is set and not needed"
        ),
        "{with}"
    );
    assert!(
        without
            .contains("Java stacks walked by sparkprof: whole without -XX:+PreserveFramePointer"),
        "{without}"
    );
    assert!(
        report.contains("perf map refreshed by sparkprof through the attach mechanism"),
        "JIT naming status shown:\n{report}"
    );
    // The machine's libjvm.so has the rename symbol: exact thread names.
    assert!(
        report.contains("thread names: exact, from a uprobe on"),
        "thread-name source shown:\n{report}"
    );
    assert!(report.contains("Spark: jvm"), "Spark role shown:\n{report}");
    // Its own structures: tables, layout, code cache and method names.
    assert!(
        report.contains("HotSpot structures: readable (JDK 9-22 code blobs; 3 code heaps"),
        "HotSpot structures shown:\n{report}"
    );
}
