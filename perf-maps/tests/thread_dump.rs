//! `Jvm::thread_names` against a real JVM: the full Java names come back
//! with nids that are the Linux TIDs the kernel knows under a truncated
//! `comm`. Needs `java` and `javac` (a missing JDK fails the test).

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use perf_maps::attach::Jvm;
use perf_maps::attach::thread_dump::JavaThread;

/// Names longer than `comm`'s 15 bytes, with spaces and a `"`, so that only
/// the full-name parse can recover them. The last one is set by the thread
/// itself after it started (the way Spark renames its task threads).
const NAMES: [&str; 4] = [
    "Executor task launch worker for task 3.0 in stage 12.0 (TID 102)",
    "sparkprof \"quoted\" thread #7 daemon",
    "sparkprof trailing quote\"",
    "Executor task idle worker#1",
];

/// Starts the named threads, parks them all, and never exits on its own.
const PROGRAM: &str = r#"
public class NamedThreads {
    public static void main(String[] args) throws Exception {
        for (int i = 0; i < args.length; i++) {
            final String name = args[i];
            final boolean renameLater = i == args.length - 1;
            Thread t = new Thread(() -> {
                if (renameLater) Thread.currentThread().setName(name);
                try { Thread.sleep(Long.MAX_VALUE); } catch (InterruptedException e) {}
            }, renameLater ? "starting" : name);
            t.setDaemon(true);
            t.start();
        }
        Thread.sleep(Long.MAX_VALUE);
    }
}
"#;

/// `$JAVA_HOME/bin`, else the first `PATH` entry with both `java` and `javac`.
fn jdk_bin() -> PathBuf {
    std::env::var_os("JAVA_HOME")
        .map(|home| PathBuf::from(home).join("bin"))
        .into_iter()
        .chain(
            std::env::var_os("PATH")
                .iter()
                .flat_map(std::env::split_paths),
        )
        .find(|dir| dir.join("java").is_file() && dir.join("javac").is_file())
        .expect("java and javac are required (set JAVA_HOME or PATH)")
}

/// The JVM under test; killed and reaped on drop, its attach socket removed.
struct NamedThreadsJvm {
    child: Child,
    _classes: tempfile::TempDir,
}

impl NamedThreadsJvm {
    fn start() -> Self {
        // Under /var/tmp: readable from a JVM with a private /tmp too.
        let classes = tempfile::Builder::new()
            .prefix("perf-maps-thread-dump-")
            .tempdir_in("/var/tmp")
            .unwrap();
        std::fs::set_permissions(classes.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let source = classes.path().join("NamedThreads.java");
        std::fs::write(&source, PROGRAM).unwrap();
        let javac = Command::new(jdk_bin().join("javac"))
            .arg("-d")
            .arg(classes.path())
            .arg(&source)
            .status()
            .expect("running javac");
        assert!(javac.success(), "javac failed");
        let child = Command::new(jdk_bin().join("java"))
            .args(["-XX:-UsePerfData", "-Xmx64m", "-cp"])
            .arg(classes.path())
            .arg("NamedThreads")
            .args(NAMES)
            .env_remove("JAVA_TOOL_OPTIONS")
            .env_remove("JDK_JAVA_OPTIONS")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("starting java");
        NamedThreadsJvm {
            child,
            _classes: classes,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The `comm` of every thread of the JVM, by TID.
    fn comms(&self) -> Vec<(u32, String)> {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", self.pid())) else {
            return Vec::new();
        };
        tasks
            .flatten()
            .filter_map(|task| {
                let tid = task.file_name().to_str()?.parse().ok()?;
                let comm = std::fs::read_to_string(task.path().join("comm")).ok()?;
                Some((tid, comm.trim_end_matches('\n').to_owned()))
            })
            .collect()
    }

    /// Waits until every named thread runs under its (truncated) name, and
    /// the JVM's Signal Dispatcher is up (the attach client needs it).
    fn wait_named(&mut self) {
        let t0 = Instant::now();
        loop {
            assert!(
                self.child.try_wait().unwrap().is_none(),
                "the JVM exited during start-up"
            );
            let comms = self.comms();
            let has = |comm: &str| comms.iter().any(|(_, c)| c == comm);
            if NAMES.iter().all(|name| has(&comm_of(name))) && has("Signal Dispatch") {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "threads not named after 30 s: {comms:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for NamedThreadsJvm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(format!("/tmp/.java_pid{}", self.pid()));
        let _ = std::fs::remove_file(format!("/tmp/.attach_pid{}", self.pid()));
    }
}

/// What Linux keeps of a thread name: its first 15 bytes (ASCII here).
fn comm_of(name: &str) -> String {
    name.chars().take(15).collect()
}

#[test]
fn thread_names_are_full_and_nids_are_tids() {
    let mut jvm = NamedThreadsJvm::start();
    jvm.wait_named();
    let t0 = Instant::now();
    let threads: Vec<JavaThread> = Jvm::new(jvm.pid()).unwrap().thread_names().unwrap();
    eprintln!(
        "{} threads from Thread.print in {:?}",
        threads.len(),
        t0.elapsed()
    );
    let comms = jvm.comms();
    for name in NAMES {
        let found: Vec<&JavaThread> = threads.iter().filter(|t| t.name == name).collect();
        assert_eq!(found.len(), 1, "{name:?} in {threads:#?}");
        let nid = found[0].nid;
        let comm = comms
            .iter()
            .find(|(tid, _)| *tid == nid)
            .map(|(_, comm)| comm.as_str());
        assert_eq!(comm, Some(comm_of(name).as_str()), "nid {nid} of {name:?}");
    }
    // Every thread the dump lists is a live thread of this JVM, VM-internal
    // ones (no `#N` in the dump) included.
    for thread in &threads {
        assert!(
            comms.iter().any(|(tid, _)| *tid == thread.nid),
            "{thread:?} is not a thread of {}",
            jvm.pid()
        );
    }
    for vm_thread in ["main", "VM Thread", "Signal Dispatcher"] {
        assert!(
            threads.iter().any(|t| t.name == vm_thread),
            "{vm_thread:?} missing"
        );
    }
    assert!(threads.len() >= NAMES.len() + 5, "{threads:#?}");
}
