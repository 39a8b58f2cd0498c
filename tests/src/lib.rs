//! Shared harness of sparkprof's integration tests.
//!
//! The tests run the real release binary (`SPARKPROF_BIN`, set by
//! `cargo xtask test`) as root against real workloads compiled here with the
//! machine's C compiler. Whatever they need and cannot find makes them fail,
//! loudly: nothing is skipped.

pub mod cgroup;
pub mod fake_executor;
pub mod spark;

use std::{
    ffi::CString,
    io::{BufRead, BufReader, Read},
    os::unix::{ffi::OsStrExt as _, process::CommandExt as _},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use serde_json::Value;
use tempfile::TempDir;

/// JVM flags of the fake Spark executor (`workloads/spark`): each hot method
/// is compiled once, never inlined and never replaced (no tiers, no
/// on-stack replacement), so its code never moves in the code cache and JIT
/// names cannot drift while stage attribution is measured. (With OSR, an
/// OSR method freed early had its addresses reused by another stage's
/// method, and a perf map not yet refreshed named that code after the old
/// one.)
pub const FAKE_EXECUTOR_JVM_FLAGS: &[&str] = &[
    "-XX:+PreserveFramePointer",
    "-XX:-TieredCompilation",
    "-XX:-UseOnStackReplacement",
    "-XX:CompileCommand=quiet",
    "-XX:CompileCommand=dontinline,org.apache.spark.executor.CoarseGrainedExecutorBackend::stage*",
];

/// Panics unless running as root: these tests load eBPF programs.
pub fn require_root() {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "integration tests must run as root (they load eBPF programs); run `cargo xtask test` as root"
    );
}

/// A directory for a test's compiled Java classes, removed when dropped
/// (after the JVM that runs them: hold it as long). Under /var/tmp, not
/// /tmp: a JVM with a private /tmp, or a PID namespace of its own, mounts
/// an empty tmpfs over /tmp. Readable by everyone. A directory named after
/// the test process, as before, was left behind by every run.
pub fn classes_dir(what: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix(&format!("sparkprof-test-{what}-"))
        .tempdir_in("/var/tmp")
        .expect("a directory under /var/tmp");
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("its mode");
    dir
}

/// `sparkprof merge --output OUT DIRS...`, which must succeed.
pub fn merge(out: &Path, dirs: &[&Path]) {
    let merged = Command::new(sparkprof_bin())
        .arg("merge")
        .arg("--output")
        .arg(out)
        .args(dirs)
        .output()
        .unwrap();
    assert!(
        merged.status.success(),
        "{}",
        String::from_utf8_lossy(&merged.stderr)
    );
}

/// The sparkprof binary under test.
pub fn sparkprof_bin() -> PathBuf {
    let path = std::env::var_os("SPARKPROF_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/sparkprof")
        });
    assert!(
        path.exists(),
        "sparkprof binary not found at {} (run `cargo xtask test`)",
        path.display()
    );
    path
}

/// Compiles `workloads/<name>.c` with frame pointers and no inlining into `dir`.
pub fn build_workload(name: &str, dir: &Path) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("workloads")
        .join(format!("{name}.c"));
    let binary = dir.join(name);
    let status = Command::new("cc")
        .args([
            "-O1",
            "-g",
            "-fno-omit-frame-pointer",
            "-mno-omit-leaf-frame-pointer",
            "-fno-inline",
            "-pthread",
            "-o",
        ])
        .arg(&binary)
        .arg(&source)
        .status()
        .expect("a C compiler (cc) is required by the integration tests");
    assert!(status.success(), "compiling {} failed", source.display());
    binary
}

/// A temporary output directory, removed when the recording is dropped.
fn output_dir() -> TempDir {
    tempfile::Builder::new()
        .prefix("sparkprof-test-")
        .tempdir()
        .unwrap()
}

/// A running `sparkprof record`.
pub struct Recorder {
    child: Child,
    dir: PathBuf,
    tmp: Option<TempDir>,
    stderr: mpsc::Receiver<String>,
    log: Vec<String>,
}

/// A finished recording.
pub struct Recording {
    dir: PathBuf,
    _tmp: Option<TempDir>,
    pub status: ExitStatus,
    pub log: String,
    pub index: Value,
}

/// One line of a folded file.
#[derive(Debug, Clone)]
pub struct Stack {
    pub frames: Vec<String>,
    pub count: u64,
}

impl Recorder {
    /// Starts `sparkprof record -o <tempdir> ARGS` and waits until it samples.
    pub fn start(args: &[&str]) -> Self {
        Self::start_on(Host::AsIs, args)
    }

    /// Starts `sparkprof record -o DIR ARGS` and waits until it samples.
    pub fn start_in(dir: PathBuf, tmp: Option<TempDir>, args: &[&str]) -> Self {
        Self::spawn(Command::new(sparkprof_bin()), dir, tmp, args)
    }

    /// Starts `sparkprof record -o <tempdir> ARGS` as if on another host:
    /// in a UTS namespace of its own named `hostname` (what sparkprof
    /// writes as the host), and waits until it samples.
    pub fn start_as_host(hostname: &str, args: &[&str]) -> Self {
        let tmp = output_dir();
        let mut command = Command::new("unshare");
        command
            .args(["--uts", "sh", "-c", "hostname \"$0\" && exec \"$@\""])
            .arg(hostname)
            .arg(sparkprof_bin());
        Self::spawn(command, tmp.path().to_path_buf(), Some(tmp), args)
    }

    /// Starts `sparkprof record -o <tempdir> ARGS` on `host` and waits
    /// until it samples. On a [`Host::Bare`], checks that its mount
    /// namespace has no tracefs or debugfs while it records.
    pub fn start_on(host: Host, args: &[&str]) -> Self {
        let tmp = output_dir();
        let mut command = Command::new(sparkprof_bin());
        if host == Host::Bare {
            on_bare_host(&mut command);
        }
        let recorder = Self::spawn(command, tmp.path().to_path_buf(), Some(tmp), args);
        if host == Host::Bare {
            let left = pseudo_fs_mounts(recorder.pid());
            assert!(
                left.is_empty(),
                "sparkprof's mount namespace still has {left:?}"
            );
        }
        recorder
    }

    fn spawn(mut command: Command, dir: PathBuf, tmp: Option<TempDir>, args: &[&str]) -> Self {
        require_root();
        let mut child = command
            .arg("record")
            .arg("--output")
            .arg(&dir)
            .args(args)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn sparkprof");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut recorder = Self {
            child,
            dir,
            tmp,
            stderr: rx,
            log: Vec::new(),
        };
        recorder.wait_for_log("recording on", Duration::from_secs(60));
        recorder
    }

    /// Waits until sparkprof logs a line containing `needle`.
    pub fn wait_for_log(&mut self, needle: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            match self.stderr.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    let found = line.contains(needle);
                    self.log.push(line);
                    if found {
                        return;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if let Ok(Some(status)) = self.child.try_wait() {
                        panic!(
                            "sparkprof exited ({status}) before sampling:\n{}",
                            self.drain_log()
                        );
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    panic!(
                        "sparkprof closed stderr before sampling:\n{}",
                        self.log.join("\n")
                    )
                }
            }
        }
        panic!(
            "sparkprof did not start sampling within {timeout:?}:\n{}",
            self.log.join("\n")
        );
    }

    fn drain_log(&mut self) -> String {
        while let Ok(line) = self.stderr.recv_timeout(Duration::from_millis(200)) {
            self.log.push(line);
        }
        self.log.join("\n")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The output directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Waits for the recording to end by itself.
    pub fn wait(mut self) -> Recording {
        let status = self.child.wait().unwrap();
        self.finish(status)
    }

    /// Sends `signal` and waits for the flush and exit.
    pub fn stop_with(mut self, signal: i32) -> Recording {
        unsafe { libc::kill(self.child.id() as i32, signal) };
        let status = self.child.wait().unwrap();
        self.finish(status)
    }

    fn finish(mut self, status: ExitStatus) -> Recording {
        let log = self.drain_log();
        let index_path = self.dir.join("index.json");
        let index = std::fs::read(&index_path)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or(Value::Null);
        Recording {
            dir: self.dir,
            _tmp: self.tmp,
            status,
            log,
            index,
        }
    }
}

impl Recording {
    /// The output directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Asserts a clean exit with an index.
    pub fn assert_ok(&self) -> &Self {
        assert!(
            self.status.success(),
            "sparkprof failed ({}):\n{}",
            self.status,
            self.log
        );
        assert!(self.index.is_object(), "no valid index.json:\n{}", self.log);
        // The closing line says what index.json lists.
        let closing = self
            .log
            .lines()
            .rev()
            .find_map(|line| line.strip_prefix("sparkprof: "))
            .unwrap_or_else(|| panic!("no closing line:\n{}", self.log));
        let words: Vec<&str> = closing.split_whitespace().collect();
        let (samples, files): (u64, usize) = match words.as_slice() {
            [samples, "samples", "in", files, "files", ..] => {
                (samples.parse().unwrap(), files.parse().unwrap())
            }
            _ => panic!("unexpected closing line: {closing}"),
        };
        let listed = self.files();
        let cpu: u64 = listed
            .iter()
            .filter(|entry| entry["kind"] == "cpu")
            .map(|entry| entry["samples"].as_u64().unwrap())
            .sum();
        assert_eq!(
            (samples, files),
            (cpu, listed.len()),
            "the closing line disagrees with index.json: {closing}"
        );
        self
    }

    /// index.json entries.
    pub fn files(&self) -> Vec<&Value> {
        self.index["files"]
            .as_array()
            .map(|a| a.iter().collect())
            .unwrap_or_default()
    }

    /// Entries of one process.
    pub fn files_of(&self, pid: u32) -> Vec<&Value> {
        self.files()
            .into_iter()
            .filter(|f| f["pid"].as_u64() == Some(u64::from(pid)))
            .collect()
    }

    /// Samples written for one process, over all its files.
    pub fn samples_of(&self, pid: u32) -> u64 {
        self.files_of(pid)
            .iter()
            .map(|f| f["samples"].as_u64().unwrap())
            .sum()
    }

    /// The stacks of an index entry's folded file.
    pub fn stacks(&self, entry: &Value) -> Vec<Stack> {
        let path = self
            .dir
            .join(entry["path"].as_str().expect("entry has a path"));
        parse_folded(
            &std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        )
    }

    /// All stacks of one process.
    pub fn stacks_of(&self, pid: u32) -> Vec<Stack> {
        self.files_of(pid)
            .into_iter()
            .flat_map(|f| self.stacks(f))
            .collect()
    }
}

/// Parses folded text; panics on a malformed line (our output must be valid).
pub fn parse_folded(text: &str) -> Vec<Stack> {
    text.lines()
        .map(|line| {
            let (stack, count) = line
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("malformed folded line {line:?}"));
            Stack {
                frames: stack.split(';').map(str::to_owned).collect(),
                count: count
                    .parse()
                    .unwrap_or_else(|_| panic!("bad count in {line:?}")),
            }
        })
        .collect()
}

/// True when `wanted` occur in `frames` in this order (other frames may sit between).
pub fn contains_in_order(frames: &[String], wanted: &[&str]) -> bool {
    let mut wanted = wanted.iter().peekable();
    for frame in frames {
        if wanted.peek().is_some_and(|w| frame == *w) {
            wanted.next();
        }
    }
    wanted.peek().is_none()
}

/// Time the hypervisor took from this host's CPUs (`steal` in
/// /proc/stat), read before a CPU-bound workload starts, to bound the
/// samples it can get: the sampler's timer runs on the guest's clock, so a
/// vCPU taken away mid-period is sampled as the task it was running, while
/// that task's CPU time leaves the stolen time out (the kernel's
/// paravirtual steal accounting, on in this machine's kernel). One CI run
/// counted 17 % more samples than a workload's CPU time at 99 Hz (the
/// steal then was not read; it is now, and said when a count disagrees).
#[derive(Debug, Clone, Copy)]
pub struct Steal(std::time::Duration);

impl Steal {
    pub fn now() -> Self {
        use procfs::CurrentSI as _;
        let stat = procfs::KernelStats::current().expect("reading /proc/stat");
        Self(stat.total.steal_duration().unwrap_or_default())
    }

    /// Seconds stolen from all CPUs since `self`.
    pub fn seconds_since(self) -> f64 {
        Self::now().0.saturating_sub(self.0).as_secs_f64()
    }
}

/// Whether `samples` at `hz` agree, within `tolerance` (a fraction), with
/// a CPU-bound workload that used `cpu_seconds` of CPU while `steal_seconds`
/// were stolen from the host (at most all of it from the workload's time):
/// at least `(1 - tolerance) * hz * cpu_seconds`, at most `(1 + tolerance)
/// * hz * (cpu_seconds + steal_seconds)`.
pub fn samples_agree(
    samples: u64,
    hz: f64,
    cpu_seconds: f64,
    steal_seconds: f64,
    tolerance: f64,
) -> bool {
    let samples = samples as f64;
    samples >= (1.0 - tolerance) * hz * cpu_seconds
        && samples <= (1.0 + tolerance) * hz * (cpu_seconds + steal_seconds)
}

/// A workload process.
pub struct Workload {
    child: Option<Child>,
}

impl Workload {
    pub fn start(binary: &Path, args: &[&str]) -> Self {
        let child = Command::new(binary)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", binary.display()));
        Self { child: Some(child) }
    }

    /// Starts it and waits until the first line it prints is `ready`
    /// (read byte by byte, so that [`Workload::wait`] still gets the rest).
    pub fn start_ready(program: &Path, args: &[&str], ready: &str) -> Self {
        let mut workload = Self::start(program, args);
        let stdout = workload
            .child
            .as_mut()
            .and_then(|child| child.stdout.as_mut())
            .expect("piped stdout");
        // One byte per read: a buffer would swallow what follows the line.
        let mut line = Vec::new();
        let mut byte = [0u8];
        loop {
            match stdout.read(&mut byte) {
                Ok(0) => break,
                Ok(_) if byte[0] == b'\n' => break,
                Ok(_) => line.push(byte[0]),
                Err(err) => panic!("reading {}: {err}", program.display()),
            }
        }
        assert_eq!(
            String::from_utf8_lossy(&line),
            ready,
            "{} did not start",
            program.display()
        );
        workload
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Waits for the workload; returns its stdout.
    pub fn wait(mut self) -> String {
        let output = self
            .child
            .take()
            .expect("running")
            .wait_with_output()
            .unwrap();
        assert!(
            output.status.success(),
            "workload failed: {}",
            output.status
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Waits for a `chain` workload and returns the CPU seconds it reported.
    pub fn wait_cpu_seconds(self) -> f64 {
        let out = self.wait();
        out.lines()
            .find_map(|l| l.strip_prefix("cpu_seconds="))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no cpu_seconds in {out:?}"))
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_and_reap(&mut child);
        }
    }
}

/// Kills a process the tests started and reaps it. A JVM killed this way
/// cannot remove what it keeps in the host's /tmp under its pid (its attach
/// socket, perf map and perf data), and runs after runs would pile them up
/// there: they are removed while the child is a zombie, when its pid cannot
/// yet be another process's.
pub fn kill_and_reap(child: &mut Child) {
    let pid = child.id();
    let _ = child.kill();
    // SAFETY: an all-zero siginfo_t is valid; waitid only writes it.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // WNOWAIT: waits for the exit but leaves the zombie (and its pid) be.
    // SAFETY: our own child, and a valid out-pointer.
    let exited =
        unsafe { libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOWAIT) } == 0;
    if exited {
        let tmp = Path::new("/tmp");
        let mut leftovers = vec![
            tmp.join(format!(".java_pid{pid}")),
            tmp.join(format!(".attach_pid{pid}")),
            tmp.join(format!("perf-{pid}.map")),
        ];
        leftovers.extend(
            std::fs::read_dir(tmp)
                .into_iter()
                .flatten()
                .flatten()
                .filter(|entry| {
                    entry
                        .file_name()
                        .to_string_lossy()
                        .starts_with("hsperfdata_")
                })
                .map(|entry| entry.path().join(pid.to_string())),
        );
        for path in leftovers {
            let _ = std::fs::remove_file(path);
        }
    }
    let _ = child.wait();
}

/// The JVM started by a launcher (`sh -c 'exec ...'`, `unshare`): the first
/// process at or below `pid` that maps libjvm.so.
pub fn jvm_at_or_below(pid: u32) -> u32 {
    let maps_jvm = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/maps"))
            .unwrap_or_default()
            .contains("libjvm.so")
    };
    let mut current = pid;
    for _ in 0..4 {
        if maps_jvm(current) {
            return current;
        }
        let children = std::fs::read_to_string(format!("/proc/{current}/task/{current}/children"))
            .unwrap_or_default();
        match children
            .split_whitespace()
            .next()
            .and_then(|c| c.parse().ok())
        {
            Some(child) => current = child,
            None => break,
        }
    }
    panic!("no JVM under pid {pid}");
}

/// Reads a sysctl under /proc/sys.
pub fn read_sysctl(name: &str) -> String {
    std::fs::read_to_string(Path::new("/proc/sys").join(name))
        .unwrap()
        .trim()
        .to_owned()
}

/// Writes a sysctl, retrying while the kernel says EBUSY (perf_event_max_stack
/// is busy until the BPF stack maps of a finished recording are freed).
pub fn write_sysctl(name: &str, value: &str) -> std::io::Result<()> {
    for _ in 0..60 {
        match std::fs::write(Path::new("/proc/sys").join(name), value) {
            Err(err) if err.raw_os_error() == Some(libc::EBUSY) => {
                thread::sleep(Duration::from_millis(50))
            }
            result => return result,
        }
    }
    std::fs::write(Path::new("/proc/sys").join(name), value)
}

/// Sets a sysctl for the guard's lifetime.
pub struct SysctlGuard {
    name: &'static str,
    original: String,
}

impl SysctlGuard {
    pub fn set(name: &'static str, value: &str) -> Self {
        let original = read_sysctl(name);
        write_sysctl(name, value).unwrap_or_else(|e| panic!("set {name}: {e}"));
        Self { name, original }
    }
}

impl Drop for SysctlGuard {
    fn drop(&mut self) {
        let _ = write_sysctl(self.name, &self.original);
    }
}

/// Where sparkprof runs in a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host {
    /// This machine as it is (tracefs mounted or not).
    AsIs,
    /// A bare host: see [`on_bare_host`].
    Bare,
}

/// File systems a fresh host (or a container) does not have mounted, and
/// that a profiler might wrongly depend on.
pub const PSEUDO_FILE_SYSTEMS: [&str; 2] = ["tracefs", "debugfs"];

/// Mount points of tracefs and debugfs in process `pid`'s mount namespace,
/// deepest first.
pub fn pseudo_fs_mounts(pid: u32) -> Vec<PathBuf> {
    let mounts = procfs::process::Process::new(pid as i32)
        .and_then(|process| process.mountinfo())
        .unwrap_or_else(|err| panic!("/proc/{pid}/mountinfo: {err}"));
    let mut points: Vec<PathBuf> = mounts
        .into_iter()
        .filter(|mount| PSEUDO_FILE_SYSTEMS.contains(&mount.fs_type.as_str()))
        .map(|mount| mount.mount_point)
        .collect();
    points.sort_by_key(|point| std::cmp::Reverse(point.components().count()));
    points
}

/// Makes `command` run on a bare host, whatever this one has mounted: in a
/// private mount namespace of its own (nothing it does there reaches the
/// host's), with every tracefs and debugfs unmounted, as on a fresh machine
/// or in a container. The host's own mounts are left as they are.
pub fn on_bare_host(command: &mut Command) -> &mut Command {
    let points: Vec<CString> = pseudo_fs_mounts(std::process::id())
        .iter()
        .map(|point| CString::new(point.as_os_str().as_bytes()).expect("no NUL in a path"))
        .collect();
    let hook = move || -> std::io::Result<()> {
        // Only system calls here: this runs between fork and exec.
        let check = |rc: libc::c_int| {
            if rc == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        };
        // SAFETY: plain system calls on NUL-terminated strings.
        unsafe {
            check(libc::unshare(libc::CLONE_NEWNS))?;
            // Private first, or the unmounts below would propagate to the
            // host's namespace through shared mounts.
            check(libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            for point in &points {
                // Deepest first; a point already gone with its parent is fine.
                if libc::umount2(point.as_ptr(), libc::MNT_DETACH) != 0 {
                    let err = std::io::Error::last_os_error();
                    if !matches!(err.raw_os_error(), Some(libc::EINVAL | libc::ENOENT)) {
                        return Err(err);
                    }
                }
            }
        }
        Ok(())
    };
    // SAFETY: the hook makes only async-signal-safe system calls.
    unsafe { command.pre_exec(hook) }
}

/// `go tool pprof -raw`: the profile as Go's reader decodes it.
pub fn pprof_raw(path: &Path) -> String {
    let out = Command::new("go")
        .args(["tool", "pprof", "-raw"])
        .arg(path)
        .env(
            "GOCACHE",
            std::env::temp_dir().join("sparkprof-test-gocache"),
        )
        .output()
        .expect("go (Debian's golang-go, installed by `cargo xtask test`) is needed");
    assert!(
        out.status.success(),
        "go tool pprof -raw {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Sum of the first value of every sample in `-raw` output (the lines
/// `   <v1> [<v2>]: <location ids>` between `Samples:` and `Locations`).
pub fn pprof_raw_total(raw: &str) -> u64 {
    raw.lines()
        .skip_while(|l| !l.starts_with("Samples:"))
        .take_while(|l| !l.starts_with("Locations"))
        .filter_map(|l| {
            let (values, _) = l.split_once(':')?;
            values.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum()
}
