//! A real Apache Spark on this host: a standalone Master and Worker from the
//! pyspark that `cargo xtask test` installs (`SPARKPROF_SPARK_VENV`), a
//! PySpark application run against them, and its event log read back as the
//! ground truth of which executor ran which stage for how long.
//!
//! Everything lives in one temporary directory (logs, work dirs, local dirs,
//! event log), and every process the cluster starts has its working directory
//! there (the Worker starts executors in `work/<app>/<id>`, and they start
//! their pyspark daemons there): [`Cluster::stop`], and the drop guard on a
//! panic, kill exactly the processes whose working directory is inside that
//! directory, plus the descendants of the processes started here.

use std::{
    collections::{BTreeMap, BTreeSet},
    io::{BufRead, BufReader},
    net::TcpListener,
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use serde_json::Value;
use tempfile::TempDir;

/// The variable `cargo xtask test` sets to the pyspark venv.
pub const VENV_VAR: &str = "SPARKPROF_SPARK_VENV";
/// The pinned pyspark (see xtask/src/spark.rs).
pub const PYSPARK_VERSION: &str = "4.3.0";

/// The pyspark install: a venv whose site-packages hold Spark itself.
#[derive(Debug, Clone)]
pub struct SparkInstall {
    pub venv: PathBuf,
    pub python: PathBuf,
    pub spark_home: PathBuf,
}

impl SparkInstall {
    /// The venv named by `SPARKPROF_SPARK_VENV` (or xtask's default place).
    /// Panics, saying how to get one, when pyspark or java is missing.
    pub fn locate() -> Self {
        let venv = std::env::var_os(VENV_VAR)
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/var/tmp/sparkprof-spark/venv"));
        let python = venv.join("bin/python");
        assert!(
            python.exists(),
            "no pyspark venv at {} ({VENV_VAR}): run the tests with `cargo xtask test`, which installs pyspark {PYSPARK_VERSION}",
            venv.display()
        );
        let spark_home = std::fs::read_dir(venv.join("lib"))
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .map(|e| e.path().join("site-packages/pyspark"))
            .find(|p| p.join("bin/spark-class").exists())
            .unwrap_or_else(|| {
                panic!(
                    "pyspark (with bin/spark-class) is missing from {}: run `cargo xtask test`",
                    venv.display()
                )
            });
        let version = std::fs::read_to_string(spark_home.join("version.py")).unwrap_or_default();
        assert!(
            version.contains(&format!("'{PYSPARK_VERSION}'"))
                || version.contains(&format!("\"{PYSPARK_VERSION}\"")),
            "{} is not pyspark {PYSPARK_VERSION}: {version:?}",
            spark_home.display()
        );
        let java = Command::new("java").arg("-version").output();
        assert!(
            java.as_ref().is_ok_and(|o| o.status.success()),
            "java (a JDK 17) is required to run Spark: {java:?}"
        );
        Self {
            venv,
            python,
            spark_home,
        }
    }
}

impl SparkInstall {
    /// `spark-submit --master local[2] SCRIPT ARGS` (a script in the
    /// repository, e.g. `fleet/stage_profiles.py`); panics with its output
    /// if it fails; returns its stdout.
    pub fn submit_local(&self, script: &Path, args: &[&std::ffi::OsStr]) -> String {
        let path = format!(
            "{}:{}",
            self.venv.join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = Command::new(self.spark_home.join("bin/spark-submit"))
            .args(["--master", "local[2]"])
            .arg(script)
            .args(args)
            .env("SPARK_HOME", &self.spark_home)
            .env("PYSPARK_PYTHON", &self.python)
            .env("PATH", path)
            .output()
            .expect("run spark-submit");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "spark-submit {} failed:\n{stdout}\n{}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }
}

/// `fleet/stage_profiles.py` in the repository.
pub fn fleet_job() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fleet/stage_profiles.py")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free TCP port on 127.0.0.1")
        .port()
}

/// A standalone Master and one Worker (2 cores) on 127.0.0.1.
pub struct Cluster {
    tmp: Option<TempDir>,
    install: SparkInstall,
    pub master_url: String,
    roots: Vec<Child>,
    /// The `cgroup.procs` every process it starts moves into (see
    /// [`Cluster::start_in`]).
    cgroup_procs: Option<std::ffi::CString>,
}

/// A finished application.
#[derive(Debug)]
pub struct Job {
    pub app_id: String,
    pub event_log: PathBuf,
    pub stdout: String,
    pub elapsed: Duration,
    /// Every process of the cluster seen while the application ran (polled
    /// every 250 ms): the ground truth for which process belongs to which
    /// executor.
    pub processes: BTreeMap<u32, Proc>,
}

impl Job {
    /// The executor ID of `pid`: that of the executor JVM it is or descends
    /// from, as far as the processes seen during the run tell.
    pub fn executor_of(&self, pid: u32) -> Option<&str> {
        let mut current = pid;
        for _ in 0..64 {
            let proc = self.processes.get(&current)?;
            if proc.is_executor() {
                return proc.arg("--executor-id");
            }
            current = proc.ppid;
        }
        None
    }

    /// The executor JVMs seen: pid -> executor ID.
    pub fn executor_pids(&self) -> BTreeMap<u32, String> {
        self.processes
            .iter()
            .filter(|(_, p)| p.is_executor())
            .filter_map(|(&pid, p)| Some((pid, p.arg("--executor-id")?.to_owned())))
            .collect()
    }
}

impl Cluster {
    fn dir(&self) -> &Path {
        self.tmp.as_ref().expect("cluster running").path()
    }

    fn command(&self, program: &Path) -> Command {
        let dir = self.dir();
        let mut command = Command::new(program);
        command
            .current_dir(dir)
            .env("SPARK_HOME", &self.install.spark_home)
            .env("SPARK_CONF_DIR", dir.join("conf"))
            .env("SPARK_LOCAL_IP", "127.0.0.1")
            .env("SPARK_LOCAL_DIRS", dir.join("local"))
            .env("SPARK_LOG_DIR", dir.join("logs"))
            .env("SPARK_WORKER_DIR", dir.join("work"))
            .env("SPARK_DAEMON_MEMORY", "512m")
            .env("PYSPARK_PYTHON", &self.install.python)
            .env("PYSPARK_DRIVER_PYTHON", &self.install.python)
            .env_remove("PYTHONPATH")
            .stdin(Stdio::null())
            // Own process group: a kill of the group reaches what it forks.
            .process_group(0);
        if let Some(procs) = self.cgroup_procs.clone() {
            // In the child before it runs the program: what it starts
            // (executors, Python workers) starts there too. Only calls
            // that are safe between fork and exec.
            unsafe {
                command.pre_exec(move || {
                    let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                    if fd < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    let written = libc::write(fd, b"0".as_ptr().cast(), 1);
                    let err = std::io::Error::last_os_error();
                    libc::close(fd);
                    if written != 1 {
                        return Err(err);
                    }
                    Ok(())
                });
            }
        }
        command
    }

    fn spawn_logged(&mut self, mut command: Command, log: &str) -> PathBuf {
        let path = self.dir().join("logs").join(log);
        let out = std::fs::File::create(&path).unwrap();
        let child = command
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {command:?}: {e}"));
        self.roots.push(child);
        path
    }

    /// Starts the Master, then the Worker, and waits for its registration.
    pub fn start(install: &SparkInstall) -> Self {
        Self::start_with(install, None)
    }

    /// [`Self::start`], with everything the cluster runs (the Master, the
    /// Worker, the executors and their Python workers, and the drivers
    /// [`Self::run_job`] starts) in `cgroup`: two clusters side by side,
    /// each in its own.
    pub fn start_in(install: &SparkInstall, cgroup: &crate::cgroup::Cgroup) -> Self {
        Self::start_with(install, Some(cgroup))
    }

    fn start_with(install: &SparkInstall, cgroup: Option<&crate::cgroup::Cgroup>) -> Self {
        crate::require_root();
        let tmp = tempfile::Builder::new()
            .prefix("sparkprof-spark-")
            .tempdir()
            .unwrap();
        for sub in ["conf", "local", "logs", "work", "events"] {
            std::fs::create_dir_all(tmp.path().join(sub)).unwrap();
        }
        let master_port = free_port();
        let mut cluster = Self {
            tmp: Some(tmp),
            install: install.clone(),
            master_url: format!("spark://127.0.0.1:{master_port}"),
            roots: Vec::new(),
            cgroup_procs: cgroup.map(|cgroup| {
                std::ffi::CString::new(cgroup.procs().into_os_string().into_encoded_bytes())
                    .expect("a cgroup path without NUL")
            }),
        };
        let spark_class = install.spark_home.join("bin/spark-class");

        let mut master = cluster.command(&spark_class);
        master.args([
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            &master_port.to_string(),
            "--webui-port",
            &free_port().to_string(),
        ]);
        let log = cluster.spawn_logged(master, "master.out");
        cluster.wait_for(&log, "elected leader", 0, Duration::from_secs(60));

        let mut worker = cluster.command(&spark_class);
        let work_dir = cluster.dir().join("work");
        worker
            .args([
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                "127.0.0.1",
                "--port",
                &free_port().to_string(),
                "--webui-port",
                &free_port().to_string(),
                "--cores",
                "2",
                "--memory",
                "3g",
                "--work-dir",
            ])
            .arg(work_dir)
            .arg(&cluster.master_url);
        let log = cluster.spawn_logged(worker, "worker.out");
        cluster.wait_for(
            &log,
            "Successfully registered with master",
            1,
            Duration::from_secs(60),
        );
        cluster
    }

    /// Waits until `log` contains `needle`; panics with the log if root
    /// process `index` exits first or time runs out.
    fn wait_for(&mut self, log: &Path, needle: &str, index: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            if text.contains(needle) {
                return;
            }
            if let Ok(Some(status)) = self.roots[index].try_wait() {
                panic!(
                    "{} exited ({status}) before {needle:?}:\n{}",
                    log.display(),
                    tail(&text, 40)
                );
            }
            if Instant::now() > deadline {
                panic!(
                    "no {needle:?} in {} within {timeout:?}:\n{}",
                    log.display(),
                    tail(&text, 40)
                );
            }
            thread::sleep(Duration::from_millis(200));
        }
    }

    /// Runs `tests/workloads/<script>` as the driver (client mode) against
    /// this cluster: `python SCRIPT MASTER_URL EVENT_DIR ARGS...`, and waits
    /// for it. The script prints `APP_ID <id>`; its event log is the one
    /// file it adds to EVENT_DIR (a cluster may run several applications
    /// one after the other: the logs of earlier ones stay there).
    pub fn run_job(&mut self, script: &str, args: &[&str], timeout: Duration) -> Job {
        let script = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("workloads")
            .join(script);
        let events = self.dir().join("events");
        let earlier: BTreeSet<PathBuf> = std::fs::read_dir(&events)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        let err_path = self.dir().join("logs/driver.err");
        let mut driver = self.command(&self.install.python.clone());
        driver
            .arg(&script)
            .arg(&self.master_url)
            .arg(&events)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&err_path).unwrap());
        let started = Instant::now();
        let mut child = driver
            .spawn()
            .unwrap_or_else(|e| panic!("spawn the PySpark driver {driver:?}: {e}"));
        let stdout = child.stdout.take().unwrap();
        self.roots.push(child);
        let index = self.roots.len() - 1;
        let watcher = Watcher::start(self.dir().to_path_buf(), self.root_pids());
        let (tx, rx) = std::sync::mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                eprintln!("spark job: {line}");
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let status = loop {
            if let Some(status) = self.roots[index].try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > timeout {
                let err = std::fs::read_to_string(&err_path).unwrap_or_default();
                panic!(
                    "the Spark application did not finish within {timeout:?}; driver log:\n{}",
                    tail(&err, 60)
                );
            }
            thread::sleep(Duration::from_millis(200));
        };
        let elapsed = started.elapsed();
        let processes = watcher.finish();
        thread::sleep(Duration::from_millis(200));
        let stdout: Vec<String> = rx.try_iter().collect();
        let err = std::fs::read_to_string(&err_path).unwrap_or_default();
        assert!(
            status.success(),
            "the Spark application failed ({status}); driver log:\n{}",
            tail(&err, 60)
        );
        let app_id = stdout
            .iter()
            .find_map(|l| l.strip_prefix("APP_ID "))
            .unwrap_or_else(|| panic!("the driver printed no APP_ID: {stdout:?}"))
            .trim()
            .to_owned();
        let logs: Vec<PathBuf> = std::fs::read_dir(&events)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| !earlier.contains(p))
            .collect();
        assert_eq!(
            logs.len(),
            1,
            "one new finished event log expected in {}: {logs:?}",
            events.display()
        );
        let event_log = logs.into_iter().next().unwrap();
        assert!(
            !event_log.to_string_lossy().ends_with(".inprogress"),
            "the event log was not closed: {}",
            event_log.display()
        );
        Job {
            app_id,
            event_log,
            stdout: stdout.join("\n"),
            elapsed,
            processes,
        }
    }

    /// Every live process that belongs to the cluster: descendants of the
    /// processes started here, and any process whose working directory is in
    /// the cluster's directory (executors and their pyspark daemons, even
    /// when orphaned).
    pub fn processes(&self) -> BTreeSet<u32> {
        match &self.tmp {
            Some(tmp) => scan(tmp.path(), &self.root_pids()).into_keys().collect(),
            None => BTreeSet::new(),
        }
    }

    fn root_pids(&self) -> Vec<u32> {
        self.roots.iter().map(Child::id).collect()
    }

    /// Kills every process of the cluster (SIGKILL: the application has
    /// finished by now), reaps them, removes what the JVMs left in /tmp and
    /// the cluster's directory. Returns the processes still alive after 10 s
    /// (none, unless something escaped).
    pub fn stop(mut self) -> Vec<u32> {
        self.kill_all()
    }

    fn kill_all(&mut self) -> Vec<u32> {
        if self.tmp.is_none() {
            return Vec::new();
        }
        let mut killed = BTreeSet::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let alive = self.processes();
            if alive.is_empty() || Instant::now() > deadline {
                for child in &mut self.roots {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                for pid in &killed {
                    for path in [
                        format!("/tmp/perf-{pid}.map"),
                        format!("/tmp/.java_pid{pid}"),
                        format!("/tmp/hsperfdata_root/{pid}"),
                    ] {
                        let _ = std::fs::remove_file(path);
                    }
                }
                self.tmp = None;
                return alive.into_iter().collect();
            }
            for &pid in &alive {
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                killed.insert(pid);
            }
            for child in &mut self.roots {
                let _ = child.try_wait();
            }
            thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let left = self.kill_all();
        if !left.is_empty() {
            eprintln!("spark cluster: processes still alive after kill: {left:?}");
        }
    }
}

/// A process of the cluster, as seen in /proc while the application ran.
#[derive(Debug, Clone)]
pub struct Proc {
    pub ppid: u32,
    pub cmdline: Vec<String>,
}

impl Proc {
    /// The value after `flag` on the command line.
    pub fn arg(&self, flag: &str) -> Option<&str> {
        let at = self.cmdline.iter().position(|a| a == flag)?;
        self.cmdline.get(at + 1).map(String::as_str)
    }

    /// True for a standalone executor JVM.
    pub fn is_executor(&self) -> bool {
        self.cmdline
            .iter()
            .any(|a| a == "org.apache.spark.executor.CoarseGrainedExecutorBackend")
    }
}

/// The live (non-zombie) processes of a cluster: descendants of `roots` and
/// processes whose working directory is under `dir` (with their descendants).
fn scan(dir: &Path, roots: &[u32]) -> BTreeMap<u32, Proc> {
    let mut all = BTreeMap::new();
    let mut found = BTreeSet::new();
    for entry in std::fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: comm may hold spaces and parens.
        let after = &stat[stat.rfind(')').map_or(0, |i| i + 1)..];
        let mut fields = after.split_whitespace();
        let state = fields.next().unwrap_or("");
        let Some(ppid) = fields.next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if state == "Z" || state == "X" {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|raw| {
                raw.split(|&b| b == 0)
                    .filter(|a| !a.is_empty())
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect()
            })
            .unwrap_or_default();
        all.insert(pid, Proc { ppid, cmdline });
        if std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(dir)) {
            found.insert(pid);
        }
    }
    let mut frontier: Vec<u32> = roots
        .iter()
        .copied()
        .filter(|p| all.contains_key(p))
        .collect();
    frontier.extend(found.iter().copied());
    found.extend(frontier.iter().copied());
    while let Some(pid) = frontier.pop() {
        for (&child, proc) in &all {
            if proc.ppid == pid && found.insert(child) {
                frontier.push(child);
            }
        }
    }
    found.remove(&std::process::id());
    found
        .into_iter()
        .filter_map(|pid| all.remove(&pid).map(|p| (pid, p)))
        .collect()
}

/// Watches the cluster's processes in the background until dropped.
struct Watcher {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    handle: Option<thread::JoinHandle<BTreeMap<u32, Proc>>>,
}

impl Watcher {
    fn start(dir: PathBuf, roots: Vec<u32>) -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let handle = thread::spawn(move || {
            let mut seen = BTreeMap::new();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                // The latest view of each process wins: a process first
                // seen between fork and exec still had its parent's command
                // line (an executor JVM looked like its Worker: the
                // executor was then missed, once in CI-like runs).
                seen.extend(scan(&dir, &roots));
                thread::sleep(Duration::from_millis(250));
            }
            seen
        });
        Self {
            stop,
            handle: Some(handle),
        }
    }

    fn finish(mut self) -> BTreeMap<u32, Proc> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.handle.take().unwrap().join().unwrap_or_default()
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Task time of one executor in one stage, summed over its tasks.
#[derive(Debug, Clone, Default)]
pub struct StageTime {
    pub tasks: u32,
    /// "Executor Run Time" (ms).
    pub run_ms: u64,
    /// "Executor CPU Time" (ns): CPU of the task thread in the executor JVM.
    pub cpu_ns: u64,
    /// Finish minus launch time (ms).
    pub wall_ms: u64,
}

/// What Spark's event log says about an application.
#[derive(Debug, Clone, Default)]
pub struct EventLog {
    pub app_id: String,
    /// Executor IDs that were added (not "driver").
    pub executors: BTreeSet<String>,
    /// (executor ID, stage ID) -> task time, for every task that ended.
    pub stages: BTreeMap<(String, u64), StageTime>,
    /// Stage ID -> stage name.
    pub stage_names: BTreeMap<u64, String>,
    /// The driver's own clock (Unix ms): application start and end, when
    /// its first job was submitted and when its last job completed.
    pub app_start_ms: Option<u64>,
    pub app_end_ms: Option<u64>,
    pub first_job_submitted_ms: Option<u64>,
    pub last_job_completed_ms: Option<u64>,
}

impl EventLog {
    /// Parses an uncompressed event log (one JSON event a line).
    pub fn read(path: &Path) -> Self {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("event log {}: {e}", path.display()));
        let mut log = Self::default();
        for (n, line) in text.lines().enumerate() {
            let event: Value = serde_json::from_str(line).unwrap_or_else(|e| {
                panic!(
                    "{}:{}: not JSON (is spark.eventLog.compress false?): {e}",
                    path.display(),
                    n + 1
                )
            });
            match event["Event"].as_str().unwrap_or_default() {
                "SparkListenerApplicationStart" => {
                    log.app_id = event["App ID"].as_str().unwrap_or_default().to_owned();
                    log.app_start_ms = event["Timestamp"].as_u64();
                }
                "SparkListenerApplicationEnd" => {
                    log.app_end_ms = event["Timestamp"].as_u64();
                }
                "SparkListenerJobStart" => {
                    if let Some(t) = event["Submission Time"].as_u64() {
                        let first = log.first_job_submitted_ms.get_or_insert(t);
                        *first = (*first).min(t);
                    }
                }
                "SparkListenerJobEnd" => {
                    if let Some(t) = event["Completion Time"].as_u64() {
                        let last = log.last_job_completed_ms.get_or_insert(t);
                        *last = (*last).max(t);
                    }
                }
                "SparkListenerExecutorAdded" => {
                    log.executors
                        .insert(event["Executor ID"].as_str().unwrap().to_owned());
                }
                "SparkListenerStageSubmitted" | "SparkListenerStageCompleted" => {
                    let info = &event["Stage Info"];
                    if let (Some(id), Some(name)) =
                        (info["Stage ID"].as_u64(), info["Stage Name"].as_str())
                    {
                        log.stage_names.insert(id, name.to_owned());
                    }
                }
                "SparkListenerTaskEnd" => {
                    let stage = event["Stage ID"].as_u64().expect("TaskEnd has a Stage ID");
                    let info = &event["Task Info"];
                    let executor = info["Executor ID"]
                        .as_str()
                        .expect("TaskEnd has an Executor ID")
                        .to_owned();
                    let metrics = &event["Task Metrics"];
                    let entry = log.stages.entry((executor, stage)).or_default();
                    entry.tasks += 1;
                    entry.run_ms += metrics["Executor Run Time"].as_u64().unwrap_or(0);
                    entry.cpu_ns += metrics["Executor CPU Time"].as_u64().unwrap_or(0);
                    entry.wall_ms += info["Finish Time"]
                        .as_u64()
                        .unwrap_or(0)
                        .saturating_sub(info["Launch Time"].as_u64().unwrap_or(0));
                }
                _ => {}
            }
        }
        assert!(
            !log.app_id.is_empty(),
            "{}: no SparkListenerApplicationStart with an App ID",
            path.display()
        );
        log
    }
}
