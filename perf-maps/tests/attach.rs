//! End-to-end tests of the attach client against real JVMs (JDK 17 here).
//!
//! These need `java` and `javac` and root (to attach to a JVM of another
//! user); a missing JDK is a failure, not a skip, so CI cannot go green
//! without having exercised the attach path.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use perf_maps::attach::{self, AttachError, Jvm};
use perf_maps::{NameStyle, PerfMapFile, ProcStatus, Refresh};

const BUSY: &str = r#"
public class Busy {
    static int sink;
    static int hash(int x) { x ^= x << 13; x ^= x >>> 17; x ^= x << 5; return x; }
    static void work() { for (int i = 0; i < 200000; i++) sink += hash(i + sink); }
    public static void main(String[] args) throws Exception {
        while (true) { work(); Thread.sleep(2); }
    }
}
"#;

/// The JDK's bin directory: `$JAVA_HOME/bin`, else `javac` on `PATH`, else
/// the Debian JDK 17. Panics (fails the test) if none has java and javac.
fn jdk_bin() -> PathBuf {
    let mut candidates = Vec::new();
    if let Some(h) = std::env::var_os("JAVA_HOME") {
        candidates.push(PathBuf::from(h).join("bin"));
    }
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path));
    }
    candidates.push(PathBuf::from("/usr/lib/jvm/java-17-openjdk-amd64/bin"));
    candidates
        .into_iter()
        .find(|d| d.join("javac").is_file() && d.join("java").is_file())
        .expect("java and javac are required for these tests (set JAVA_HOME or PATH)")
}

/// Compiles Busy.java into a fresh directory under /tmp that other users can
/// read (the non-root JVM must load the class from it).
fn compile() -> tempfile::TempDir {
    compile_in("/tmp")
}

/// Like [`compile`], under `base`.
fn compile_in(base: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("perf-maps-java-")
        .tempdir_in(base)
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let src = dir.path().join("Busy.java");
    std::fs::write(&src, BUSY).unwrap();
    let st = Command::new(jdk_bin().join("javac"))
        .arg("-d")
        .arg(dir.path())
        .arg(&src)
        .status()
        .expect("running javac");
    assert!(st.success(), "javac failed");
    let class = dir.path().join("Busy.class");
    std::fs::set_permissions(&class, std::fs::Permissions::from_mode(0o644)).unwrap();
    dir
}

/// A test JVM; killed, reaped and cleaned up after on drop.
struct TestJvm {
    /// `java`, or `unshare` for a namespaced JVM.
    child: Child,
    /// The JVM's PID in our namespace.
    pid: u32,
    /// Runs in its own mount and PID namespaces with a private /tmp.
    namespaced: bool,
    _dir: tempfile::TempDir,
}

impl TestJvm {
    fn start(jvm_args: &[&str], env: &[(&str, &str)], uid: Option<u32>) -> TestJvm {
        let dir = compile();
        let mut cmd = Command::new(jdk_bin().join("java"));
        // -XX:-UsePerfData: no hsperfdata files left behind in /tmp.
        cmd.arg("-XX:+PreserveFramePointer")
            .arg("-XX:-UsePerfData")
            .args(jvm_args)
            .arg("-cp")
            .arg(dir.path())
            .arg("Busy")
            .current_dir(dir.path())
            .env_remove("JAVA_TOOL_OPTIONS")
            .env_remove("JDK_JAVA_OPTIONS")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        if let Some(uid) = uid {
            cmd.uid(uid).gid(uid);
        }
        let child = cmd.spawn().expect("starting java");
        let pid = child.id();
        let j = TestJvm {
            child,
            pid,
            namespaced: false,
            _dir: dir,
        };
        // A map left by an earlier process with the same PID would not be
        // writable by a non-root JVM.
        let _ = std::fs::remove_file(j.tmp_map());
        j
    }

    /// Starts a JVM the way a container would: new mount and PID namespaces
    /// (it is PID 1 there) and a private tmpfs on /tmp, so its map and attach
    /// socket are only reachable through /proc/PID/root and under its
    /// namespace PID.
    fn start_namespaced() -> TestJvm {
        // Not under /tmp: the JVM would look for its class path inside the
        // tmpfs mounted over it.
        let dir = compile_in("/var/tmp");
        let java = jdk_bin().join("java");
        let script = format!(
            "mount -t tmpfs tmpfs /tmp && exec {} -XX:+PreserveFramePointer -XX:-UsePerfData -cp . Busy",
            java.display()
        );
        let mut child = Command::new("unshare")
            .args(["--mount", "--pid", "--fork", "--propagation", "private"])
            .args(["sh", "-c", &script])
            .current_dir(dir.path())
            .env_remove("JAVA_TOOL_OPTIONS")
            .env_remove("JDK_JAVA_OPTIONS")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("running unshare");
        // The JVM is unshare's child, once `sh` has exec'd java.
        let t0 = Instant::now();
        let pid = loop {
            assert!(child.try_wait().unwrap().is_none(), "unshare exited early");
            let children =
                std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", child.id()))
                    .unwrap_or_default();
            if let Some(pid) = children.split_whitespace().next() {
                let pid: u32 = pid.parse().unwrap();
                if std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|c| c.trim() == "java")
                {
                    break pid;
                }
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "no java process");
            std::thread::sleep(Duration::from_millis(20));
        };
        TestJvm {
            child,
            pid,
            namespaced: true,
            _dir: dir,
        }
    }

    fn pid(&self) -> u32 {
        self.pid
    }

    fn tmp_map(&self) -> PathBuf {
        PathBuf::from(format!("/tmp/perf-{}.map", self.pid()))
    }

    fn alive(&self) -> bool {
        ProcStatus::read(self.pid()).is_ok_and(|s| !s.has_exited())
    }

    /// Waits until the JVM has installed its SIGQUIT handler (before that,
    /// SIGQUIT would kill it, and our client refuses to attach).
    fn wait_ready(&self) {
        let t0 = Instant::now();
        loop {
            let st = ProcStatus::read(self.pid()).expect("JVM exited during start-up");
            assert!(!st.has_exited(), "JVM exited during start-up");
            if st.catches(libc::SIGQUIT) {
                return;
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "JVM did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until libjvm.so is mapped and a few threads exist (used for JVMs
    /// that never get a SIGQUIT handler).
    fn wait_started(&self) {
        let t0 = Instant::now();
        loop {
            let maps = std::fs::read_to_string(format!("/proc/{}/maps", self.pid())).unwrap();
            let threads = std::fs::read_dir(format!("/proc/{}/task", self.pid()))
                .unwrap()
                .count();
            if maps.contains("/libjvm.so") && threads > 5 {
                return;
            }
            assert!(t0.elapsed() < Duration::from_secs(30), "JVM did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for TestJvm {
    fn drop(&mut self) {
        // Already reaped by the test: its PID may belong to someone else now.
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        // SIGTERM first so the JVM removes its attach socket itself. Until
        // we reap our child, its PID cannot be reused, so signalling and
        // cleaning up by PID is safe.
        // SAFETY: signalling the JVM we started, not yet reaped.
        unsafe { libc::kill(self.pid() as libc::pid_t, libc::SIGTERM) };
        let gone = |pid: u32| ProcStatus::read(pid).map_or(true, |s| s.has_exited());
        let t0 = Instant::now();
        while !gone(self.pid()) && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: as above.
        unsafe { libc::kill(self.pid() as libc::pid_t, libc::SIGKILL) };
        if !self.namespaced {
            // (A namespaced JVM's /tmp was a tmpfs that dies with it.)
            let _ = std::fs::remove_file(self.tmp_map());
            let _ = std::fs::remove_file(format!("/tmp/.java_pid{}", self.pid()));
            let _ = std::fs::remove_file(format!("/tmp/.attach_pid{}", self.pid()));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `Compiler.perfmap` until the map names the Busy class (it needs a
/// moment of running to get compiled), then checks the map.
fn dump_and_check_map(jvm: &TestJvm, expected_owner: u32) {
    let client = Jvm::new(jvm.pid()).unwrap();
    assert_eq!(client.owner().uid, expected_owner);
    assert_eq!(client.major_version().unwrap(), 17);
    assert!(client.supports_perf_map_dump().unwrap());

    let t0 = Instant::now();
    loop {
        let path = client.dump_perf_map().unwrap();
        assert_eq!(path, client.perf_map_path());
        assert!(path.exists(), "{} missing", path.display());
        assert_eq!(jvm.tmp_map().exists(), !jvm.namespaced);
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), expected_owner);

        let mut map = PerfMapFile::for_pid(jvm.pid()).unwrap();
        let Refresh::Loaded { entries } = map.refresh().unwrap() else {
            panic!("first refresh must load");
        };
        assert!(entries > 100, "only {entries} entries");
        assert_eq!(map.stats().malformed, 0, "{:?}", map.stats());
        let busy: Vec<String> = map
            .table()
            .iter()
            .filter(|(_, s)| s.name.starts_with("Busy."))
            .map(|(_, s)| s.name.to_owned())
            .collect();
        if !busy.is_empty() {
            eprintln!(
                "pid {}: {entries} entries after {:?}, Busy methods: {busy:?}",
                jvm.pid(),
                t0.elapsed()
            );
            // Readable names: no return type, no parameter list.
            assert!(busy.iter().all(|n| !n.contains(' ') && !n.contains('(')));
            // Lookup inside a Busy method gives it back.
            let (range, sym) = map
                .table()
                .iter()
                .find(|(_, s)| s.name.starts_with("Busy."))
                .unwrap();
            let got = map.lookup(range.start + 1).unwrap();
            assert_eq!(got.name, sym.name);
            // The full style keeps the JDK's signature.
            let mut full = PerfMapFile::for_pid(jvm.pid())
                .unwrap()
                .with_name_style(NameStyle::Full);
            full.refresh().unwrap();
            assert!(
                full.table()
                    .iter()
                    .any(|(_, s)| s.name.contains(" Busy.") && s.name.ends_with(')'))
            );
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "no Busy method in the map after {:?}",
            t0.elapsed()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The tests here each start JVMs and time their attach (one kills its JVM
/// the moment the client's short-lived trigger file appears): run them one
/// at a time, so that on a small host one test's JVMs do not starve
/// another's watcher thread.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[test]
fn perfmap_and_thread_print_as_root() {
    let _serial = serial();
    let jvm = TestJvm::start(&[], &[], None);
    jvm.wait_ready();
    // SigCgt shows the handler a few ms before HotSpot's Signal Dispatcher
    // thread exists; in that window the JVM is "still starting", and jcmd
    // below waits it out before signalling.
    match attach::check_attachable(jvm.pid()) {
        Ok(()) | Err(AttachError::StillStarting { .. }) => {}
        Err(e) => panic!("{e}"),
    }
    let t0 = Instant::now();
    dump_and_check_map(&jvm, 0);
    eprintln!("root JVM: perf map checks took {:?}", t0.elapsed());

    let client = Jvm::new(jvm.pid()).unwrap();
    let t0 = Instant::now();
    let r = client.jcmd("Thread.print").unwrap();
    eprintln!("Thread.print (listener already up) took {:?}", t0.elapsed());
    assert_eq!(r.status, 0);
    assert!(r.output.contains("\"main\""), "{}", r.output);
    // The listener is up now: still attachable, no signal needed.
    attach::check_attachable(jvm.pid()).unwrap();
    // An unknown command is reported, not a crash.
    let r = client.jcmd("No.such.command").unwrap();
    assert_ne!(r.status, 0);
    assert!(r.output.contains("Unknown diagnostic command"), "{r:?}");
    assert!(jvm.alive());
}

/// The inode and change time of `/tmp/NAME` in the host's /tmp, if any.
fn host_tmp_entry(name: &str) -> Option<(u64, i64, i64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(Path::new("/tmp").join(name)).ok()?;
    Some((meta.ino(), meta.ctime(), meta.ctime_nsec()))
}

#[test]
fn attach_into_other_namespaces() {
    let _serial = serial();
    // The host's /tmp may hold a `.java_pid1` of some other namespaced JVM
    // (one killed before it could remove it): what must not happen is this
    // test creating or replacing one.
    let host_pid1 = host_tmp_entry(".java_pid1");
    let jvm = TestJvm::start_namespaced();
    jvm.wait_ready();
    let st = ProcStatus::read(jvm.pid()).unwrap();
    assert_eq!(st.nstgid.len(), 2, "{:?}", st.nstgid);
    assert_eq!(st.ns_pid(), 1);
    let client = Jvm::new(jvm.pid()).unwrap();
    assert_eq!(client.nspid(), 1);
    dump_and_check_map(&jvm, 0);
    assert_eq!(
        client.perf_map_path(),
        PathBuf::from(format!("/proc/{}/root/tmp/perf-1.map", jvm.pid()))
    );
    assert_eq!(client.dump_perf_map().unwrap(), client.perf_map_path(),);
    // Nothing leaked into the host's /tmp.
    assert!(!Path::new(&format!("/tmp/.java_pid{}", jvm.pid())).exists());
    assert_eq!(host_tmp_entry(".java_pid1"), host_pid1);
    let r = client.jcmd("Thread.print").unwrap();
    assert!(r.output.contains("\"main\""));
    assert!(jvm.alive());
}

#[test]
fn attach_as_non_root_user() {
    let _serial = serial();
    // uid 65534 (`nobody`): the attach socket is 0600 nobody, so only a
    // child that really switched to nobody can talk to it (JDK 17 also
    // accepts root peers, JDK 8 does not).
    let jvm = TestJvm::start(&[], &[], Some(65534));
    jvm.wait_ready();
    dump_and_check_map(&jvm, 65534);
    let r = Jvm::new(jvm.pid()).unwrap().jcmd("Thread.print").unwrap();
    assert!(r.output.contains("\"main\""));
    let sock = format!("/proc/{}/root/tmp/.java_pid{}", jvm.pid(), jvm.pid());
    let meta = std::fs::symlink_metadata(&sock).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), 65534);
    // The caller's own ids are untouched.
    // SAFETY: trivial getters.
    assert_eq!(unsafe { (libc::geteuid(), libc::getegid()) }, (0, 0));
}

/// Whatever is planted at a JVM's perf-map path, the JVM is not asked to
/// write through it: a FIFO (the JVM would block opening it inside the VM
/// operation, frozen), a symlink (it would overwrite the target), another
/// user's file (that user would read the code-cache layout) or a hard link
/// (it would overwrite the other name's file). Each is refused before
/// anything is sent, `perf_map_hazard` (doctor) says the same, the planted
/// file is untouched and the JVM keeps answering; with the path clear
/// again, the map is written.
#[test]
fn planted_perf_map_paths_are_refused() {
    let _serial = serial();
    let jvm = TestJvm::start(&[], &[], None);
    jvm.wait_ready();
    let client = Jvm::new(jvm.pid()).unwrap();
    let map = jvm.tmp_map();
    let victim_dir = tempfile::tempdir_in("/tmp").unwrap();
    let victim = victim_dir.path().join("victim");
    const CONTENT: &str = "a file the JVM must never overwrite\n";
    std::fs::write(&victim, CONTENT).unwrap();

    type Plant = fn(&Path, &Path);
    let cases: [(&str, Plant, &str); 4] = [
        (
            "fifo",
            |map, _| mkfifo(map),
            "is a FIFO, not a regular file",
        ),
        (
            "symlink",
            |map, victim| std::os::unix::fs::symlink(victim, map).unwrap(),
            "is a symbolic link, not a regular file",
        ),
        (
            "another user's file",
            |map, _| {
                std::fs::write(map, "").unwrap();
                std::os::unix::fs::chown(map, Some(65534), Some(65534)).unwrap();
            },
            "belongs to uid 65534, not to the JVM's user",
        ),
        (
            "hard link",
            |map, victim| std::fs::hard_link(victim, map).unwrap(),
            "has 2 hard links",
        ),
    ];
    for (what, plant, says) in cases {
        let _ = std::fs::remove_file(&map);
        plant(&map, &victim);
        let hazard = client.perf_map_hazard();
        assert!(
            hazard.as_deref().is_some_and(|h| h.contains(says)),
            "{what}: doctor's check says {hazard:?}"
        );
        let t0 = Instant::now();
        match client.dump_perf_map() {
            Err(AttachError::UnsafePerfMap { reason, .. }) => {
                assert!(reason.contains(says), "{what}: {reason}")
            }
            other => panic!("{what}: the JVM was asked anyway: {other:?}"),
        }
        // The JVM is not frozen: it answers at once.
        let r = client.jcmd("Thread.print").unwrap();
        assert!(r.output.contains("\"main\""), "{what}");
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{what}: {:?}",
            t0.elapsed()
        );
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), CONTENT, "{what}");
        let planted = std::fs::symlink_metadata(&map).unwrap();
        assert!(
            planted.file_type().is_symlink()
                || planted.len() == CONTENT.len() as u64
                || planted.len() == 0,
            "{what}: the planted file was written"
        );
    }
    std::fs::remove_file(&map).unwrap();
    assert_eq!(client.perf_map_hazard(), None);
    dump_and_check_map(&jvm, 0);
    assert!(jvm.alive());
}

fn mkfifo(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0, "mkfifo");
}

/// Waits for the JVM's attach socket to appear (without signalling it).
fn wait_socket(j: &TestJvm) -> PathBuf {
    let sock = PathBuf::from(format!("/tmp/.java_pid{}", j.pid()));
    let t0 = Instant::now();
    while !sock.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no attach socket for -Xrs JVM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    sock
}

#[test]
fn reduced_signals_jvm_is_refused_and_survives() {
    let _serial = serial();
    // -Xrs: no SIGQUIT handler, so SIGQUIT would kill the JVM. HotSpot then
    // starts the attach listener at start-up instead, so attaching through
    // the existing socket is fine; but once the socket file is gone (e.g. a
    // /tmp cleaner removed it) we must refuse rather than signal.
    let xrs = TestJvm::start(&["-Xrs"], &[], None);
    let env = TestJvm::start(&[], &[("JAVA_TOOL_OPTIONS", "-Xrs")], None);
    let disabled = TestJvm::start(&["-XX:+DisableAttachMechanism"], &[], None);
    xrs.wait_started();
    env.wait_started();
    disabled.wait_ready();
    for j in [&xrs, &env] {
        // SigCgt agrees: no SIGQUIT handler.
        assert!(!ProcStatus::read(j.pid()).unwrap().catches(libc::SIGQUIT));
        let sock = wait_socket(j);
        attach::check_attachable(j.pid()).unwrap();
        let r = Jvm::new(j.pid()).unwrap().jcmd("Thread.print").unwrap();
        assert!(r.output.contains("\"main\""));

        std::fs::remove_file(&sock).unwrap();
        let err = attach::check_attachable(j.pid()).unwrap_err();
        assert!(matches!(err, AttachError::ReducedSignals { .. }), "{err}");
        let err = Jvm::new(j.pid()).unwrap().jcmd("Thread.print").unwrap_err();
        assert!(matches!(err, AttachError::ReducedSignals { .. }), "{err}");
    }
    let err = attach::check_attachable(disabled.pid()).unwrap_err();
    assert!(matches!(err, AttachError::AttachDisabled { .. }), "{err}");
    let err = Jvm::new(disabled.pid())
        .unwrap()
        .jcmd("Thread.print")
        .unwrap_err();
    assert!(matches!(err, AttachError::AttachDisabled { .. }), "{err}");
    std::thread::sleep(Duration::from_millis(300));
    for j in [&xrs, &env, &disabled] {
        assert!(j.alive(), "JVM {} was killed", j.pid());
        assert!(!Path::new(&format!("/tmp/.attach_pid{}", j.pid())).exists());
    }
}

#[test]
fn jvm_exiting_during_attach_is_reported() {
    let _serial = serial();
    let mut jvm = TestJvm::start(&[], &[], None);
    jvm.wait_ready();
    let pid = jvm.pid();
    // Kill the JVM the moment our client drops its .attach_pid trigger file
    // into the JVM's working directory, i.e. in the middle of the attach.
    // Stopped first, the JVM cannot answer the attach before the kill: a
    // running one once did (the trigger came and went between two looks
    // of the killer, and the attach succeeded). Stopped once it can be
    // asked (its Signal Dispatcher thread is there), or the client waits
    // for that thread, which a stopped JVM never starts.
    let t0 = Instant::now();
    while let Err(err) = attach::check_attachable(pid) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "never attachable: {err}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: plain signal to the test's own child.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) };
    let trigger = PathBuf::from(format!("/proc/{pid}/cwd/.attach_pid{pid}"));
    let killer = std::thread::spawn(move || {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(20) {
            if trigger.exists() {
                // SAFETY: plain kill of the test's own child.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                return true;
            }
            std::thread::yield_now();
        }
        false
    });
    let res = Jvm::new(pid).unwrap().jcmd("Thread.print");
    assert!(killer.join().unwrap(), "trigger file never appeared");
    match res {
        Err(AttachError::ProcessExited { pid: p }) => assert_eq!(p, pid),
        other => panic!("expected ProcessExited, got {other:?}"),
    }
    // The process is now a zombie (we have not reaped it): still "exited".
    assert!(matches!(
        Jvm::new(pid),
        Err(AttachError::ProcessExited { .. })
    ));
    assert!(matches!(
        attach::check_attachable(pid),
        Err(AttachError::ProcessExited { .. })
    ));
    let _ = jvm.child.wait();
    // Fully gone now.
    assert!(matches!(
        Jvm::new(pid),
        Err(AttachError::NoSuchProcess { .. })
    ));
}
