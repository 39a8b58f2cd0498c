//! The collect stage alone, on the real kernel: the on-CPU program loads,
//! counts a busy child's samples per thread, and a drain hands them over and
//! clears the buffer (aya style: one program, one userspace test).

use std::{
    collections::HashSet,
    io::{BufRead, BufReader},
    path::Path,
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use sparkprof::collect::{
    Collector, CollectorConfig, RawStack, SampleKind,
    off_cpu::{OffCpuConfig, OffCpuState},
    renames::{NameFeed, RenameSource},
};
use sparkprof::enrich::Runtime;

/// The tests here sample the host and count a busy child's CPU time: run
/// them one at a time so one's JVM does not take the other's CPU.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[test]
fn counts_a_busy_process_and_drains_clean() {
    let _serial = serial();
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "loading eBPF programs needs root"
    );
    let mut child = Command::new("sh")
        .args(["-c", "while :; do :; done"])
        .spawn()
        .unwrap();
    let pid = child.id();
    let config = CollectorConfig {
        frequency_hz: 99,
        stack_depth: 127,
        stack_map_entries: 4096,
        count_map_entries: 1024,
        target_pids: vec![pid],
        jvm_rename_uprobe: true,
        off_cpu: None,
    };
    let mut collector = Collector::start(&config).expect("the eBPF programs load and attach");
    let started = Instant::now();
    thread::sleep(Duration::from_secs(2));
    let drain = collector.drain().unwrap();
    let elapsed = started.elapsed().as_secs_f64();
    let _ = child.kill();
    let _ = child.wait();

    assert!(!drain.samples.is_empty());
    assert!(
        drain.samples.iter().all(|s| s.tgid == pid),
        "only the target process is counted"
    );
    let total: u64 = drain.samples.iter().map(|s| s.count).sum();
    let expected = 99.0 * elapsed;
    assert!(
        (total as f64) > 0.8 * expected && (total as f64) < 1.2 * expected,
        "{total} samples in {elapsed:.2}s"
    );
    assert!(drain.samples.iter().all(|s| s.comm == "sh"));
    assert!(
        drain
            .samples
            .iter()
            .any(|s| matches!(&s.user, RawStack::Frames { ips, .. } if !ips.is_empty())),
        "user stacks were captured"
    );
    let stats = collector.stats();
    // Every sample the program ran for is accounted for: counted for the
    // target, filtered out, or idle (samples taken after the drain aside).
    assert!(
        stats.samples >= total + stats.filtered + stats.idle,
        "{stats:?} vs {total} counted"
    );
    assert_eq!(stats.dropped_count_map_full, 0);

    // The drained buffer is empty again: the next drain after the other
    // buffer was cleared holds only new samples.
    let second = collector.drain().unwrap();
    let third = collector.drain().unwrap();
    let leftover: u64 = second
        .samples
        .iter()
        .chain(&third.samples)
        .map(|s| s.count)
        .sum();
    assert!(
        leftover <= 5,
        "the child is dead; at most a few late samples, got {leftover}"
    );
}

/// A JVM whose two pool threads rename themselves like Spark task threads
/// (tests/workloads/spark), compiled into a temporary directory.
fn renaming_jvm(seconds: u32) -> (Child, tempfile::TempDir) {
    let classes = tempfile::Builder::new()
        .prefix("sparkprof-collect-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/workloads/spark/CoarseGrainedExecutorBackend.java");
    let status = Command::new("javac")
        .arg("-d")
        .arg(classes.path())
        .arg(&source)
        .status()
        .expect("javac (a JDK) is needed");
    assert!(status.success());
    let mut child = Command::new("java")
        .arg("-cp")
        .arg(classes.path())
        .arg("org.apache.spark.executor.CoarseGrainedExecutorBackend")
        .args(["--seconds", &seconds.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("java is needed");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    (child, classes)
}

fn libjvm_of(pid: u32) -> String {
    let maps = sparkprof::sys::proc::read_maps(pid).unwrap();
    Runtime::from_maps(&maps)
        .libjvm()
        .expect("the JVM maps libjvm.so")
        .to_owned()
}

/// Renames of a JVM's threads reach userspace with the epoch the sampler
/// then counts under, through the uprobe (full names) or the tracepoint
/// (comms only).
fn renames_carry_the_epochs_samples_use(uprobe: bool) {
    let _serial = serial();
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "loading eBPF programs needs root"
    );
    let (mut jvm, _classes) = renaming_jvm(8);
    let pid = jvm.id();
    let config = CollectorConfig {
        frequency_hz: 199,
        stack_depth: 127,
        stack_map_entries: 4096,
        count_map_entries: 4096,
        target_pids: vec![pid],
        jvm_rename_uprobe: uprobe,
        off_cpu: None,
    };
    let mut collector = Collector::start(&config).expect("the eBPF programs load and attach");
    let feed = collector.watch_jvm(pid, &libjvm_of(pid));
    if uprobe {
        assert_eq!(feed, NameFeed::Uprobe);
    } else {
        assert!(matches!(feed, NameFeed::Tracepoint { .. }), "{feed:?}");
    }
    let mut renames = Vec::new();
    let mut sampled = HashSet::new();
    for _ in 0..3 {
        thread::sleep(Duration::from_secs(1));
        let drain = collector.drain().unwrap();
        renames.extend(drain.renames);
        let announced: HashSet<(u32, u32)> = renames.iter().map(|r| (r.tid, r.epoch)).collect();
        for sample in drain.samples.iter().filter(|s| s.name_epoch > 0) {
            // Every epoch a count carries was announced by the time it is drained.
            assert!(
                announced.contains(&(sample.tid, sample.name_epoch)),
                "sample of tid {} at epoch {} before its rename arrived",
                sample.tid,
                sample.name_epoch
            );
            sampled.insert((sample.tid, sample.name_epoch));
        }
    }
    let _ = jvm.kill();
    let _ = jvm.wait();

    let ours: Vec<_> = renames.iter().filter(|r| r.tgid == pid).collect();
    assert!(ours.len() >= 6, "only {} renames seen", ours.len());
    assert!(
        sampled.len() >= 3,
        "samples spread over {} epochs",
        sampled.len()
    );
    let task_prefix = if uprobe {
        "Executor task launch worker for task "
    } else {
        "Executor task l"
    };
    assert!(
        ours.iter().any(|r| r.name.starts_with(task_prefix)),
        "{ours:?}"
    );
    let source = if uprobe {
        RenameSource::JvmNativeName
    } else {
        RenameSource::TaskRename
    };
    assert!(ours.iter().all(|r| r.source == source), "{ours:?}");
    // Each thread's epochs only go up.
    for tid in ours.iter().map(|r| r.tid).collect::<HashSet<_>>() {
        let epochs: Vec<u32> = ours
            .iter()
            .filter(|r| r.tid == tid)
            .map(|r| r.epoch)
            .collect();
        assert!(
            epochs.windows(2).all(|w| w[0] < w[1]),
            "tid {tid}: {epochs:?}"
        );
    }
    assert_eq!(collector.stats().renames_lost, 0);
}

#[test]
fn jvm_rename_uprobe_reports_full_names_with_epochs() {
    renames_carry_the_epochs_samples_use(true);
}

#[test]
fn task_rename_tracepoint_reports_watched_jvms() {
    renames_carry_the_epochs_samples_use(false);
}

/// The sched_switch program counts a watched process's blocked time, and
/// the drain turns it into microseconds with the state it waited in.
#[test]
fn off_cpu_counts_blocked_time_of_watched_processes() {
    let _serial = serial();
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "loading eBPF programs needs root"
    );
    let config = CollectorConfig {
        frequency_hz: 99,
        stack_depth: 127,
        stack_map_entries: 1024,
        count_map_entries: 1024,
        target_pids: Vec::new(),
        jvm_rename_uprobe: false,
        off_cpu: Some(OffCpuConfig {
            min_block: Duration::from_micros(100),
            stack_map_entries: 1024,
            count_map_entries: 1024,
        }),
    };
    let mut collector = Collector::start(&config).expect("the eBPF programs load and attach");
    // Half a second to be watched, then 20 waits of 100 ms in select().
    let mut child = Command::new("perl")
        .args([
            "-e",
            "select(undef,undef,undef,0.5); select(undef,undef,undef,0.1) for 1..20",
        ])
        .spawn()
        .expect("perl (Debian's perl-base) is needed");
    let pid = child.id();
    collector.watch_off_cpu(pid).unwrap();
    assert!(child.wait().unwrap().success());
    let mut blocked_us = 0;
    for _ in 0..2 {
        for sample in collector.drain().unwrap().samples {
            if sample.tgid == pid && sample.kind == SampleKind::OffCpu(OffCpuState::Sleep) {
                assert!(!matches!(sample.kernel, RawStack::Absent), "a kernel stack");
                blocked_us += sample.count;
            }
        }
    }
    // The 20 waits (2 s) and the part of the first one after it was watched.
    assert!(
        (1_900_000..=2_700_000).contains(&blocked_us),
        "{blocked_us} us blocked"
    );
    assert!(collector.stats().offcpu_switches >= 20);
}
