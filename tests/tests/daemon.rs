//! `sparkprof daemon`: windows that count every sample (and off-CPU
//! microsecond) once, the roll-up
//! of a (stand-in) Spark application and its completion, retention by
//! size and age, a SIGKILL and a restart, bad directories, and the
//! systemd unit verified by systemd's own `systemd-analyze verify`.

use std::{
    io::Read as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;
use sparkprof_tests::{
    Steal, Workload, build_workload,
    fake_executor::{APP_ID, FakeExecutor},
    parse_folded, pprof_raw, pprof_raw_total, read_sysctl, require_root, samples_agree,
    sparkprof_bin,
};

/// A running `sparkprof daemon`; killed if dropped.
struct Daemon {
    child: Option<Child>,
}

impl Daemon {
    fn start(dir: &Path, state: &Path, args: &[&str]) -> Self {
        require_root();
        let child = Command::new(sparkprof_bin())
            .arg("daemon")
            .arg("--output")
            .arg(dir)
            .arg("--state-dir")
            .arg(state)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn sparkprof daemon");
        Self { child: Some(child) }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    fn signal(&self, signal: i32) {
        unsafe { libc::kill(self.pid() as i32, signal) };
    }

    /// Waits for it to exit; returns (success, stderr).
    fn wait(mut self) -> (bool, String) {
        let mut child = self.child.take().unwrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "the daemon did not stop");
            std::thread::sleep(Duration::from_millis(100));
        };
        let mut log = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut log)
            .unwrap();
        (status.success(), log)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The published windows, oldest first.
fn windows(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir.join("windows"))
        .map(|entries| entries.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    found.retain(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'));
    found.sort();
    found
}

fn index(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("index.json")).unwrap()).unwrap()
}

/// Samples of `pid` in a window (or a record output) `dir`.
fn samples_of(dir: &Path, pid: u32) -> u64 {
    index(dir)["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["pid"].as_u64() == Some(u64::from(pid)) && f["kind"] == "cpu")
        .map(|f| f["samples"].as_u64().unwrap())
        .sum()
}

/// Windows the daemon says it has written (its status.json), 0 before the first.
fn windows_written(dir: &Path) -> u64 {
    std::fs::read(dir.join("status.json"))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
        .and_then(|status| status["windows_written"].as_u64())
        .unwrap_or(0)
}

/// A tmpfs mounted for a test, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, options: &str) -> Self {
        std::fs::create_dir_all(at).unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(at)
            .status()
            .expect("mount");
        assert!(mounted.success(), "mounting a tmpfs ({options})");
        Self(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// No `.partial-*` window is left in `dir/windows`.
fn assert_no_partial_window(dir: &Path, case: &str) {
    let partial: Vec<_> = std::fs::read_dir(dir.join("windows"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|name| name.to_string_lossy().starts_with(".partial"))
        .collect();
    assert!(
        partial.is_empty(),
        "{case}: partial windows left: {partial:?}"
    );
}

/// The daemon's status.json.
fn status(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("status.json")).unwrap()).unwrap()
}

fn wait_for(what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !ready() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn windows_count_every_sample_once() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("out");
    let state = work.path().join("state");
    let chain = build_workload("chain", work.path());
    let daemon = Daemon::start(&dir, &state, &["--window", "2", "--frequency", "99"]);
    wait_for("the daemon's first window", Duration::from_secs(30), || {
        !windows(&dir).is_empty()
    });
    // 6 s of CPU on two threads, across several windows.
    let steal = Steal::now();
    let workload = Workload::start(&chain, &["3", "2"]);
    let pid = workload.pid();
    let cpu_seconds = workload.wait_cpu_seconds();
    let stolen = steal.seconds_since();
    std::thread::sleep(Duration::from_secs(3));
    // SIGTERM writes the open window.
    daemon.signal(libc::SIGTERM);
    let (ok, log) = daemon.wait();
    assert!(ok, "the daemon failed:\n{log}");
    let all = windows(&dir);
    assert!(all.len() >= 4, "{} windows:\n{log}", all.len());
    for window in &all {
        assert!(window.join("index.json").exists(), "{}", window.display());
        assert!(
            window.join("samples.parquet").exists(),
            "{}",
            window.display()
        );
    }
    let per_window: Vec<u64> = all.iter().map(|w| samples_of(w, pid)).collect();
    let total: u64 = per_window.iter().sum();
    assert!(
        per_window.iter().filter(|&&n| n > 0).count() >= 2,
        "the workload spans windows: {per_window:?}"
    );
    // At 99 Hz, its CPU time in samples, each counted in one window (a
    // drain counted twice or lost would be a third of them), and the time
    // stolen from it by the hypervisor at most (see `Steal`).
    assert!(
        samples_agree(total, 99.0, cpu_seconds, stolen, 0.1),
        "{total} samples over windows {per_window:?}, expected {:.0} ({cpu_seconds:.2} s of CPU) \
         to {:.0} (and {stolen:.2} s stolen from the host meanwhile)",
        99.0 * cpu_seconds,
        99.0 * (cpu_seconds + stolen),
    );
    // Nothing half-written; a status for a person.
    assert_no_partial_window(&dir, "");
    let status = status(&dir);
    assert_eq!(status["windows_written"].as_u64(), Some(all.len() as u64));
    assert!(status["rss_bytes"].as_u64().unwrap() > 0);
    // Its CPU by pipeline stage: every stage, within the whole, the
    // collector and the symbolizer at work on the workload's samples.
    let stages = status["cpu_by_stage"].as_object().unwrap();
    let seconds = |stage: &str| stages[stage].as_f64().unwrap();
    let names: Vec<&str> = stages.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        ["collect", "enrich", "follow", "symbolize", "write"],
        "{status}"
    );
    let staged: f64 = names.iter().map(|stage| seconds(stage)).sum();
    assert!(
        seconds("collect") > 0.0 && seconds("symbolize") > 0.0,
        "{status}"
    );
    assert!(
        staged <= status["cpu_seconds"].as_f64().unwrap() + 0.01,
        "stages {staged} s of {status}"
    );
    let printed = Command::new(sparkprof_bin())
        .arg("status")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(printed.status.success());
    let printed = String::from_utf8_lossy(&printed.stdout);
    assert!(printed.contains("windows:"), "{printed}");
    assert!(
        printed.contains("s of CPU (") && printed.contains("symbolize "),
        "{printed}"
    );
    // The state file goes with a clean stop.
    assert!(!state.join("state.json").exists());
}

/// Off-CPU time is held for a few drains before it is filed (see
/// profiler-user's `collect::hold`), longer than these 2-s windows: the
/// drain that closes a window must still bring everything counted in it.
/// A thread that sleeps a known time, in windows that each hold a part of
/// it, adds up to what it measured itself.
#[test]
fn windows_count_off_cpu_time_once() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("out");
    let state = work.path().join("state");
    let binary = build_workload("offcpu", work.path());
    // Its threads exist and wait for SIGUSR1 before they start their 4 s.
    let workload = Workload::start(&binary, &["wait", "4", "go-on-signal"]);
    let pid = workload.pid();
    let pid_arg = pid.to_string();
    let daemon = Daemon::start(
        &dir,
        &state,
        &[
            "--window",
            "2",
            "--off-cpu",
            "--min-block-us",
            "50",
            "--pid",
            &pid_arg,
        ],
    );
    wait_for("the daemon's first window", Duration::from_secs(30), || {
        !windows(&dir).is_empty()
    });
    unsafe { libc::kill(pid as i32, libc::SIGUSR1) };
    let output = workload.wait();
    std::thread::sleep(Duration::from_secs(3));
    daemon.signal(libc::SIGTERM);
    let (ok, log) = daemon.wait();
    assert!(ok, "the daemon failed:\n{log}");
    let slept_us: u64 = output
        .lines()
        .find_map(|l| l.strip_prefix("slept_us "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no truth printed: {output:?}"));
    // The sleeper's sleeps in its loop, window by window.
    let per_window: Vec<u64> = windows(&dir)
        .iter()
        .map(|window| {
            index(window)["files"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|f| f["pid"].as_u64() == Some(u64::from(pid)) && f["kind"] == "offcpu")
                .flat_map(|f| {
                    let path = window.join(f["path"].as_str().unwrap());
                    parse_folded(&std::fs::read_to_string(path).unwrap())
                })
                .filter(|s| {
                    s.frames[1] == "sleeper"
                        && s.frames.last().is_some_and(|l| l == "[off-cpu: sleep]")
                        && s.frames
                            .iter()
                            .any(|f| f.contains("sparkprof_sleeper_loop"))
                })
                .map(|s| s.count)
                .sum()
        })
        .collect();
    let total: u64 = per_window.iter().sum();
    assert!(
        per_window.iter().filter(|&&us| us > 0).count() >= 2,
        "the sleeps span windows: {per_window:?}"
    );
    // Each in its own window: a window's span (its index's start and end,
    // which cover its samples) begins where the one before ended; time held
    // over into a later window would stretch that window's start back.
    let spans: Vec<(String, String)> = windows(&dir)
        .iter()
        .map(|window| {
            let index = index(window);
            let at = |key: &str| index[key].as_str().unwrap().to_owned();
            (at("start"), at("end"))
        })
        .collect();
    for pair in spans.windows(2) {
        // RFC 3339 UTC times of one precision order as their texts.
        assert!(pair[1].0 >= pair[0].1, "windows overlap: {spans:?}");
    }
    assert!(
        (total as f64 - slept_us as f64).abs() <= 0.10 * slept_us as f64,
        "{total} us asleep over windows {per_window:?}, {slept_us} us true:\n{log}"
    );
    assert_no_partial_window(&dir, "");
}

#[test]
fn a_spark_application_rolls_up_and_completes_when_it_exits() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("out");
    let state = work.path().join("state");
    // Not under /tmp's test directory: the executor's class path.
    let classes_dir = sparkprof_tests::classes_dir("daemon");
    let classes = FakeExecutor::compile(classes_dir.path()).unwrap();
    let daemon = Daemon::start(&dir, &state, &["--window", "2"]);
    wait_for("the daemon's first window", Duration::from_secs(30), || {
        !windows(&dir).is_empty()
    });
    let executor = FakeExecutor::start(&classes, 6, &[]).unwrap();
    executor.wait().unwrap();
    // Two windows after it exited.
    let after = windows(&dir).len();
    wait_for(
        "two windows after the application",
        Duration::from_secs(30),
        || windows(&dir).len() >= after + 2,
    );
    daemon.signal(libc::SIGINT);
    let (ok, log) = daemon.wait();
    let _ = std::fs::remove_dir_all(&classes);
    assert!(ok, "the daemon failed:\n{log}");
    let rollup = dir.join("apps").join(APP_ID);
    let rolled = index(&rollup);
    assert_eq!(rolled["app_id"], APP_ID);
    assert_eq!(rolled["complete"], true, "{rolled:#}\n{log}");
    // Each roll-up file is the sum of that file in every window.
    let files = rolled["files"].as_array().unwrap();
    assert!(
        files.iter().any(|f| f["stage_id"].is_u64()),
        "stage files rolled up: {rolled:#}"
    );
    for file in files {
        let rel = file["path"].as_str().unwrap();
        let summed: u64 = windows(&dir)
            .iter()
            .map(|w| w.join("spark").join(APP_ID).join(rel))
            .filter(|p| p.exists())
            .flat_map(|p| parse_folded(&std::fs::read_to_string(p).unwrap()))
            .map(|s| s.count)
            .sum();
        let in_rollup: u64 = parse_folded(&std::fs::read_to_string(rollup.join(rel)).unwrap())
            .iter()
            .map(|s| s.count)
            .sum();
        assert_eq!(in_rollup, summed, "{rel}");
        assert_eq!(file["samples"].as_u64(), Some(summed), "{rel}");
        assert!(rollup.join(file["svg"].as_str().unwrap()).exists());
        // Its pprof twin, as Go's pprof reads it, sums the same.
        let twin = pprof_raw(&rollup.join(file["pprof"].as_str().unwrap()));
        let per_unit = if file["kind"] == "cpu" { 1 } else { 1_000 };
        assert_eq!(pprof_raw_total(&twin), summed * per_unit, "{rel}");
    }
}

#[test]
fn retention_removes_the_oldest_windows_and_nothing_else() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("out");
    let state = work.path().join("state");
    // A window from 5 days ago (the default retention is 3), one of 2 MiB
    // from an hour ago, and something the daemon did not write.
    let old_window = |name: &str, bytes: usize| {
        let path = dir.join("windows").join(name);
        std::fs::create_dir_all(&path).unwrap();
        std::fs::write(
            path.join("index.json"),
            r#"{"tool":"sparkprof 0.1.0","files":[]}"#,
        )
        .unwrap();
        std::fs::write(path.join("filler.folded"), vec![b'x'; bytes]).unwrap();
        path
    };
    let stamp = |ago: u64| {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            - ago;
        let out = Command::new("date")
            .args(["-u", "-d", &format!("@{secs}"), "+%Y%m%dT%H%M%SZ"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    let aged = old_window(&stamp(5 * 86_400), 10);
    let big = old_window(&stamp(3_600), 2 << 20);
    let foreign = dir.join("windows").join("my-notes");
    std::fs::create_dir_all(&foreign).unwrap();
    let daemon = Daemon::start(&dir, &state, &["--window", "1", "--max-disk", "1"]);
    wait_for("two windows", Duration::from_secs(30), || {
        windows_written(&dir) >= 2
    });
    daemon.signal(libc::SIGTERM);
    let (ok, log) = daemon.wait();
    assert!(ok, "{log}");
    assert!(!aged.exists(), "a window older than --retain is removed");
    assert!(
        !big.exists(),
        "the oldest windows go to stay under --max-disk"
    );
    assert!(foreign.exists(), "never deletes what it did not write");
    let status = status(&dir);
    assert!(status["windows_removed"].as_u64().unwrap() >= 2, "{status}");
}

#[test]
fn a_killed_daemon_is_cleaned_up_after_by_the_next() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("out");
    let state = work.path().join("state");
    let before = read_sysctl("kernel/perf_event_max_stack");
    // A busy JVM that sparkprof asks for a perf map (--no-java-walk: the
    // fallback for JVMs whose structures it cannot read).
    let classes = tempfile::tempdir().unwrap();
    let status = Command::new("javac")
        .arg("-d")
        .arg(classes.path())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/JavaChains.java"))
        .status()
        .expect("javac (a JDK) is required");
    assert!(status.success());
    let jvm = Workload::start_ready(
        Path::new("java"),
        &[
            "-cp",
            &classes.path().display().to_string(),
            "JavaChains",
            "60",
            "1",
            "0",
        ],
        "ready",
    );
    let map = PathBuf::from(format!("/tmp/perf-{}.map", jvm.pid()));
    let _ = std::fs::remove_file(&map);
    let daemon = Daemon::start(
        &dir,
        &state,
        &[
            "--window",
            "1",
            "--max-stack-depth",
            "300",
            "--no-java-walk",
        ],
    );
    wait_for(
        "a window and the JVM's perf map",
        Duration::from_secs(60),
        || windows(&dir).len() >= 2 && map.exists(),
    );
    assert_eq!(read_sysctl("kernel/perf_event_max_stack"), "300");
    // Its state file lists the map before the kill.
    wait_for("the map in the state file", Duration::from_secs(10), || {
        std::fs::read_to_string(state.join("state.json"))
            .is_ok_and(|text| text.contains(&format!("perf-{}.map", jvm.pid())))
    });
    daemon.signal(libc::SIGKILL);
    let _ = daemon.wait();
    assert!(map.exists(), "the killed daemon could not remove the map");
    // Left behind: the raised sysctl and the state file; and, had it been
    // killed while writing one, a half-written window.
    assert_eq!(read_sysctl("kernel/perf_event_max_stack"), "300");
    assert!(state.join("state.json").exists());
    let half = dir.join("windows/.partial-20261124T000000Z");
    std::fs::create_dir_all(half.join("spark")).unwrap();
    std::fs::write(half.join("spark/stage-1.cpu.folded"), "a;b 1\n").unwrap();
    let written = windows(&dir).len();
    // The next one undoes it and goes on in the same directory.
    let next = Daemon::start(&dir, &state, &["--window", "1"]);
    wait_for("the next daemon's window", Duration::from_secs(30), || {
        windows(&dir).len() > written
    });
    assert_eq!(read_sysctl("kernel/perf_event_max_stack"), before);
    assert!(!half.exists(), "the half-written window is removed");
    assert!(
        !map.exists(),
        "the perf map the killed daemon caused is removed"
    );
    drop(jvm);
    next.signal(libc::SIGTERM);
    let (ok, log) = next.wait();
    assert!(ok, "{log}");
    assert!(log.contains("restored to"), "{log}");
    assert!(log.contains("half-written windows"), "{log}");
}

#[test]
fn bad_directories_are_refused_clearly() {
    let work = tempfile::tempdir().unwrap();
    let state = work.path().join("state");
    let file = work.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let link = work.path().join("a-link");
    std::os::unix::fs::symlink(work.path(), &link).unwrap();
    // A read-only file system (root may write anywhere else).
    let read_only = Tmpfs::mount(&work.path().join("read-only"), "ro,size=1m");
    let read_only = read_only.0.clone();
    for (dir, says) in [
        (file.clone(), "not a directory"),
        (link.clone(), "symbolic link"),
        (PathBuf::from("/proc/self/sparkprof"), "cannot be created"),
        (read_only.clone(), "is not writable"),
    ] {
        let (ok, log) = Daemon::start(&dir, &state, &["--duration", "1"]).wait();
        assert!(!ok, "{}: accepted:\n{log}", dir.display());
        assert!(log.contains(says), "{}: {log}", dir.display());
        assert!(!log.contains("panicked"), "{log}");
    }
    // A second daemon on the same directory.
    let dir = work.path().join("out");
    let first = Daemon::start(&dir, &state, &[]);
    wait_for("the first daemon's lock", Duration::from_secs(30), || {
        dir.join(".sparkprof-daemon.lock").exists()
    });
    std::thread::sleep(Duration::from_secs(1));
    let (ok, log) = Daemon::start(&dir, &work.path().join("state2"), &["--duration", "1"]).wait();
    assert!(
        !ok && log.contains("another sparkprof daemon writes here"),
        "{log}"
    );
    first.signal(libc::SIGTERM);
    assert!(first.wait().0);
}

/// A disk nearly full (below `--min-free`), then really full (writes fail
/// with ENOSPC): windows are not written, their samples are counted as
/// such, the daemon says so once, writes nothing half-way and goes on; with
/// room again, windows are written again.
#[test]
fn a_full_disk_stops_windows_not_the_daemon() {
    let work = tempfile::tempdir().unwrap();
    let state = work.path().join("state");
    let chain = build_workload("chain", work.path());
    let filler = |dir: &Path, leave: u64| {
        let path = dir.join("someone-elses-file");
        let free = {
            let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
            let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
            assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut stat) }, 0);
            stat.f_bavail * stat.f_frsize
        };
        std::fs::write(&path, vec![b'x'; (free - leave) as usize]).unwrap();
        path
    };
    let workload = Workload::start(&chain, &["30", "1"]);
    let pid = workload.pid().to_string();
    let args = ["--window", "1", "--pid", &pid];
    for (case, size, min_free, leave) in [
        // 40 MiB free of 64, under --min-free 48.
        ("below --min-free", "size=64m", "48", 40u64 << 20),
        // 8 KiB free, --min-free 0: the window's files do not fit.
        ("full", "size=4m", "0", 8 << 10),
    ] {
        let disk = Tmpfs::mount(&work.path().join(case.replace(' ', "-")), size);
        let dir = disk.0.clone();
        let planted = filler(&dir, leave);
        let daemon = Daemon::start(
            &dir,
            &state,
            &[&args[..], &["--min-free", min_free]].concat(),
        );
        wait_for("three windows not written", Duration::from_secs(60), || {
            std::fs::read(dir.join("status.json"))
                .ok()
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                .is_some_and(|s| s["windows_skipped"].as_u64() >= Some(3))
        });
        let full = status(&dir);
        assert_eq!(full["windows_written"].as_u64(), Some(0), "{case}: {full}");
        assert!(
            full["samples_not_written"].as_u64().unwrap() > 0,
            "{case}: {full}"
        );
        assert!(windows(&dir).is_empty(), "{case}: a window was published");
        // Room again: the next windows are written.
        std::fs::remove_file(&planted).unwrap();
        wait_for("a window written again", Duration::from_secs(30), || {
            windows_written(&dir) >= 2
        });
        daemon.signal(libc::SIGTERM);
        let (ok, log) = daemon.wait();
        assert!(ok, "{case}: {log}");
        assert!(!log.contains("panicked"), "{log}");
        assert_eq!(
            log.matches("windows are not written").count(),
            1,
            "{case}: said once:\n{log}"
        );
        assert!(log.contains("windows are written again"), "{case}: {log}");
        if case == "full" {
            assert!(log.contains("No space left on device"), "{case}: {log}");
        }
        // Whole windows only, each with its index; nothing half-written.
        let published = windows(&dir);
        assert!(published.len() >= 2, "{case}: {published:?}");
        for window in &published {
            assert!(window.join("index.json").exists(), "{}", window.display());
        }
        assert_no_partial_window(&dir, case);
    }
}

#[test]
fn systemd_verifies_the_unit() {
    let unit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/sparkprof.service");
    let text = std::fs::read_to_string(&unit).unwrap();
    // The unit runs /usr/local/bin/sparkprof (where the README installs
    // it); here, the binary under test.
    let text = text.replace(
        "/usr/local/bin/sparkprof",
        &sparkprof_bin().display().to_string(),
    );
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("sparkprof.service");
    std::fs::write(&copy, text).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .output()
        .expect("systemd-analyze (Debian's systemd) is required");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "systemd-analyze verify failed:\n{said}"
    );
    let ours: Vec<&str> = said
        .lines()
        .filter(|l| l.contains("sparkprof.service"))
        .collect();
    assert!(ours.is_empty(), "systemd-analyze verify warns:\n{said}");
}
