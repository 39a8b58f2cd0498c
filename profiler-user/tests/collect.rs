//! The collect stage alone, on the real kernel: the on-CPU program loads,
//! counts a busy child's samples per thread, and a drain hands them over and
//! clears the buffer (aya style: one program, one userspace test).

use std::{
    process::Command,
    thread,
    time::{Duration, Instant},
};

use sparkprof::collect::{Collector, CollectorConfig, RawStack};

#[test]
fn counts_a_busy_process_and_drains_clean() {
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
