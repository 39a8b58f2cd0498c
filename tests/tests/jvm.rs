//! JIT frames of real JVMs: named through perf maps that sparkprof makes the
//! JVMs write (HotSpot attach), in a private mount namespace too; hostile
//! maps are refused; a JVM that cannot or will not be attached to is never
//! harmed.
//!
//! Perf maps are the fallback for JVMs whose own structures sparkprof
//! cannot read (their Java frames are otherwise walked and named from
//! HotSpot's structures, see java_frames.rs): these tests force it with
//! `--no-java-walk`.

use std::{
    io::{BufRead, BufReader},
    os::unix::fs::{FileTypeExt as _, symlink},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use sparkprof_tests::{Recorder, Recording, SysctlGuard, read_sysctl, require_root};

const HOT: &str = "HotMethods.sparkprofAlphaHot";

/// Compiles HotMethods.java into a [`sparkprof_tests::classes_dir`] (not
/// the target dir, which a checkout under /tmp would put where the
/// private-tmp JVM cannot see it), removed with the JVM that runs it.
fn classes() -> tempfile::TempDir {
    let dir = sparkprof_tests::classes_dir("classes");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/HotMethods.java");
    let status = Command::new("javac")
        .arg("-d")
        .arg(dir.path())
        .arg(&source)
        .status()
        .expect("javac (a JDK) is required by the JVM tests");
    assert!(status.success(), "javac failed");
    dir
}

/// A running test JVM; killed on drop.
struct TestJvm {
    child: Child,
    pid: u32,
    /// Its classes, removed after it is killed.
    _classes: tempfile::TempDir,
}

impl TestJvm {
    /// Starts `java FLAGS -cp CLASSES HotMethods SECONDS 1` (in a private
    /// mount namespace with its own /tmp if asked), waits for "ready" and for
    /// warm-up.
    fn start(flags: &[&str], seconds: u32, private_tmp: bool) -> Self {
        require_root();
        let classes = classes();
        let java = format!(
            "exec java {} -cp {} HotMethods {seconds} 1",
            flags.join(" "),
            classes.path().display()
        );
        let script = if private_tmp {
            // Its own mount namespace with an empty tmpfs on /tmp, like a container.
            format!(
                "exec unshare --mount --propagation private sh -c 'mount -t tmpfs tmpfs /tmp && {java}'"
            )
        } else {
            java
        };
        let mut command = Command::new("sh");
        command.args(["-c", &script]);
        let mut child = command.stdout(Stdio::piped()).spawn().expect("spawn java");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready", "the JVM did not start");
        let pid = sparkprof_tests::jvm_at_or_below(child.id());
        // Let the hot loop get compiled.
        std::thread::sleep(Duration::from_secs(2));
        Self {
            child,
            pid,
            _classes: classes,
        }
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for TestJvm {
    fn drop(&mut self) {
        sparkprof_tests::kill_and_reap(&mut self.child);
    }
}

/// The share of the hot worker's samples that carry a frame of the hot method.
fn hot_share(recording: &Recording, pid: u32) -> (f64, u64) {
    let stacks = recording.stacks_of(pid);
    let worker: Vec<_> = stacks
        .iter()
        .filter(|s| s.frames[1] == "hotworker-0")
        .collect();
    let total: u64 = worker.iter().map(|s| s.count).sum();
    let named: u64 = worker
        .iter()
        .filter(|s| {
            s.frames
                .iter()
                .any(|f| f.contains(HOT) && f.ends_with("_[j]"))
        })
        .map(|s| s.count)
        .sum();
    (
        if total == 0 {
            0.0
        } else {
            named as f64 / total as f64
        },
        total,
    )
}

#[test]
fn hot_java_methods_are_named_without_any_preparation() {
    let mut jvm = TestJvm::start(&["-XX:+PreserveFramePointer"], 30, false);
    let map = PathBuf::from(format!("/tmp/perf-{}.map", jvm.pid));
    assert!(!map.exists(), "no perf map on disk beforehand");
    let pid = jvm.pid.to_string();
    let recording = Recorder::start(&["--no-java-walk", "--duration", "5", "--pid", &pid]).wait();
    recording.assert_ok();
    let (share, total) = hot_share(&recording, jvm.pid);
    assert!(total > 300, "the worker was sampled ({total})");
    assert!(
        share >= 0.90,
        "only {:.1}% of worker samples name {HOT}:\n{}",
        share * 100.0,
        recording.log
    );
    let jit = &recording.index["jit"];
    assert!(jit["perf_map_dumps"].as_u64().unwrap() >= 1, "{jit}");
    assert!(jvm.alive(), "the JVM survived being attached to");
    assert!(
        !map.exists(),
        "the map sparkprof caused to be written is removed at the end"
    );
}

#[test]
fn a_jvm_with_a_private_tmp_is_named_through_proc_root() {
    let mut jvm = TestJvm::start(&["-XX:+PreserveFramePointer"], 30, true);
    let pid = jvm.pid.to_string();
    let recording = Recorder::start(&["--no-java-walk", "--duration", "5", "--pid", &pid]).wait();
    recording.assert_ok();
    let (share, total) = hot_share(&recording, jvm.pid);
    assert!(total > 300, "the worker was sampled ({total})");
    assert!(
        share >= 0.90,
        "only {:.1}% named in a private /tmp:\n{}",
        share * 100.0,
        recording.log
    );
    assert!(
        !Path::new(&format!("/tmp/perf-{}.map", jvm.pid)).exists(),
        "nothing in the host's /tmp"
    );
    assert!(jvm.alive());
}

#[test]
fn jvms_that_refuse_or_vanish_are_never_harmed() {
    // -Xrs: SIGQUIT would kill it; it must survive the recording.
    let mut reduced = TestJvm::start(&["-Xrs", "-XX:+PreserveFramePointer"], 30, false);
    // Exits while the recording (and maybe an attach) is under way: its
    // last 2 s or so (after its 2 s warm-up) fall in the recording once
    // sparkprof has loaded its programs (0.5 to 1 s here).
    let mut short = TestJvm::start(&["-XX:+PreserveFramePointer"], 4, false);
    let recording = Recorder::start(&["--no-java-walk", "--duration", "5"]).wait();
    recording.assert_ok();
    assert!(reduced.alive(), "the -Xrs JVM is alive:\n{}", recording.log);
    assert!(!recording.log.contains("panicked"), "{}", recording.log);
    assert!(
        !recording.files_of(short.pid).is_empty(),
        "the exited JVM's samples were written"
    );
    assert!(!short.alive());
}

#[test]
fn planted_perf_maps_are_refused() {
    // The JVM cannot be attached to, so only a map on disk could name it.
    let jvm = TestJvm::start(
        &["-XX:+DisableAttachMechanism", "-XX:+PreserveFramePointer"],
        30,
        false,
    );
    let map = PathBuf::from(format!("/tmp/perf-{}.map", jvm.pid));
    let planted = "0 ffffffffffffffff PLANTED_BY_ANOTHER_USER\n";
    let dir = tempfile::tempdir().unwrap();

    // Owned by another user than the JVM's (root).
    std::fs::write(&map, planted).unwrap();
    std::os::unix::fs::chown(&map, Some(65534), Some(65534)).unwrap();
    let pid = jvm.pid.to_string();
    let recording = Recorder::start(&["--no-java-walk", "--duration", "2", "--pid", &pid]).wait();
    recording.assert_ok();
    let stacks = recording.stacks_of(jvm.pid);
    assert!(!stacks.is_empty());
    assert!(
        !stacks
            .iter()
            .any(|s| s.frames.iter().any(|f| f.contains("PLANTED"))),
        "wrong-owner map used"
    );
    assert!(
        recording.log.contains("not used"),
        "the refusal is logged:\n{}",
        recording.log
    );
    std::fs::remove_file(&map).unwrap();

    // A symlink to a root-owned map.
    let target = dir.path().join("target.map");
    std::fs::write(&target, planted).unwrap();
    symlink(&target, &map).unwrap();
    let recording = Recorder::start(&["--no-java-walk", "--duration", "2", "--pid", &pid]).wait();
    recording.assert_ok();
    let stacks = recording.stacks_of(jvm.pid);
    assert!(
        !stacks
            .iter()
            .any(|s| s.frames.iter().any(|f| f.contains("PLANTED"))),
        "symlinked map used"
    );
    assert!(
        recording.log.contains("not used"),
        "the refusal is logged:\n{}",
        recording.log
    );
    std::fs::remove_file(&map).unwrap();
}

/// SIGHUP (a closed terminal, a service manager) stops a recording like
/// SIGINT: everything counted is written, the perf map sparkprof caused is
/// removed and a raised `kernel.perf_event_max_stack` is restored.
#[test]
fn sighup_writes_the_recording_and_restores_the_host() {
    let _depth = SysctlGuard::set("kernel/perf_event_max_stack", "127");
    let mut jvm = TestJvm::start(&["-XX:+PreserveFramePointer"], 30, false);
    let map = PathBuf::from(format!("/tmp/perf-{}.map", jvm.pid));
    let pid = jvm.pid.to_string();
    let recorder = Recorder::start(&["--no-java-walk", "--pid", &pid, "--max-stack-depth", "300"]);
    assert_eq!(read_sysctl("kernel/perf_event_max_stack"), "300");
    // Until the map sparkprof asked for is there.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !map.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(map.exists(), "sparkprof caused a perf map");
    std::thread::sleep(Duration::from_secs(1));
    let recording = recorder.stop_with(libc::SIGHUP);
    recording.assert_ok();
    assert!(
        recording.log.contains("SIGHUP: draining"),
        "{}",
        recording.log
    );
    let (share, total) = hot_share(&recording, jvm.pid);
    assert!(total > 50, "the worker's samples were written ({total})");
    assert!(share >= 0.5, "JIT frames named ({:.0}%)", share * 100.0);
    assert_eq!(read_sysctl("kernel/perf_event_max_stack"), "127");
    assert!(!map.exists(), "the map sparkprof caused is removed");
    assert!(jvm.alive());
}

/// A FIFO planted at a JVM's perf-map path: the JVM is not asked to write
/// there (it would freeze opening it), the log and `doctor` say why, the
/// recording ends on time and the JVM keeps running.
#[test]
fn a_fifo_at_the_perf_map_path_is_never_written_through() {
    let mut jvm = TestJvm::start(&["-XX:+PreserveFramePointer"], 30, false);
    let map = PathBuf::from(format!("/tmp/perf-{}.map", jvm.pid));
    let _ = std::fs::remove_file(&map);
    let status = Command::new("mkfifo").arg(&map).status().expect("mkfifo");
    assert!(status.success());
    let doctor = Command::new(sparkprof_tests::sparkprof_bin())
        .arg("doctor")
        .output()
        .unwrap();
    let doctor = String::from_utf8_lossy(&doctor.stdout);
    assert!(
        doctor.contains(&format!(
            "NOT asked to write its perf map: {} is a FIFO",
            map.display()
        )),
        "{doctor}"
    );
    let pid = jvm.pid.to_string();
    let started = Instant::now();
    let recording = Recorder::start(&["--no-java-walk", "--duration", "3", "--pid", &pid]).wait();
    let took = started.elapsed();
    recording.assert_ok();
    assert!(
        recording.log.contains(&format!(
            "not asked to write its perf map: {} is a FIFO, not a regular file",
            map.display()
        )),
        "{}",
        recording.log
    );
    assert!(
        took < Duration::from_secs(15),
        "the recording took {took:?}"
    );
    assert!(
        std::fs::symlink_metadata(&map)
            .unwrap()
            .file_type()
            .is_fifo(),
        "the FIFO is left as it was"
    );
    let _ = std::fs::remove_file(&map);
    // Not frozen: it still answers a thread dump at once.
    let t0 = Instant::now();
    let dump = perf_maps::Jvm::new(jvm.pid)
        .unwrap()
        .jcmd("Thread.print")
        .expect("the JVM answers");
    assert!(dump.output.contains("hotworker-0"));
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert!(jvm.alive());
}
