//! Processes the bench starts and reads: profiler recorders, workloads and
//! their compilers, background load, sysctls, scratch space, and what /proc
//! and BPF fdinfo say about a process (CPU time, peak RSS, program stats).

use std::{
    fs,
    io::{BufRead as _, BufReader, Write as _},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
    sync::atomic::Ordering,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use super::*;
use crate::{run_cmd, workspace_root};

/// A workload that says who it is on its first line, waits for a `go`
/// line, works, prints `elapsed SECONDS`, and exits once its stdin closes
/// (or on its own); killed if dropped.
pub(crate) struct GoWorkload {
    /// What it is, in messages.
    what: &'static str,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// Its first line, trimmed.
    pub(crate) hello: String,
}

impl GoWorkload {
    /// Starts `command` (its stdin and stdout piped) and reads its first line.
    pub(crate) fn start(command: &mut Command, what: &'static str) -> Result<Self> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {what}"))?;
        let stdin = child.stdin.take().context("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("no stdout")?);
        let mut work = Self {
            what,
            child,
            stdin: Some(stdin),
            stdout,
            hello: String::new(),
        };
        work.hello = work.line()?.trim().to_owned();
        Ok(work)
    }

    fn line(&mut self) -> Result<String> {
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .with_context(|| format!("reading the output of {}", self.what))?;
        interrupt::check()?;
        Ok(line)
    }

    /// Starts the work.
    pub(crate) fn go(&mut self) -> Result<()> {
        let what = self.what;
        let stdin = self
            .stdin
            .as_mut()
            .with_context(|| format!("{what} was told to go twice"))?;
        stdin
            .write_all(b"go\n")
            .and_then(|()| stdin.flush())
            .with_context(|| format!("starting the work of {what}"))
    }

    /// Waits for the work to end; its seconds. The process stays until
    /// [`Self::exit`].
    pub(crate) fn elapsed(&mut self) -> Result<f64> {
        let line = self.line()?;
        line.trim()
            .strip_prefix("elapsed ")
            .and_then(|seconds| seconds.parse().ok())
            .with_context(|| format!("unexpected line of {}: {line:?}", self.what))
    }

    /// Closes its stdin and checks its exit.
    pub(crate) fn exit(mut self) -> Result<()> {
        self.stdin = None;
        let status = self.child.wait()?;
        if !status.success() {
            bail!("{} failed: {status}", self.what);
        }
        Ok(())
    }

    /// Waits for the work to end and the process to exit; its seconds.
    pub(crate) fn finish(mut self) -> Result<f64> {
        let seconds = self.elapsed()?;
        self.exit()?;
        Ok(seconds)
    }
}

impl Drop for GoWorkload {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Compiles `xtask/bench/workload.c` with frame pointers (like the programs
/// sparkprof is meant for, so every profiler walks full user stacks).
pub(crate) fn compile_workload(dir: &Path) -> Result<PathBuf> {
    compile_c("workload", dir, &["-pthread"]).context("compiling the benchmark workload")
}

/// Compiles `xtask/bench/<name>.c` into `dir` with `-O2` and frame pointers.
/// A profiler process with its output in `dir`; killed if dropped before
/// [`Recorder::stop`].
pub(crate) struct Recorder {
    pub(crate) name: &'static str,
    pub(crate) child: Child,
    /// Where its output goes.
    pub(crate) dir: PathBuf,
    pub(crate) log: PathBuf,
    pub(crate) reaped: bool,
}

impl Recorder {
    /// Starts `command` with its stdout and stderr in `dir/log` and waits
    /// until the log contains `ready`.
    pub(crate) fn start(
        name: &'static str,
        mut command: Command,
        dir: PathBuf,
        ready: &str,
    ) -> Result<Self> {
        let log = dir.join("log");
        let child = spawn_logged(&mut command, &log)?;
        let mut recorder = Self {
            name,
            child,
            dir,
            log,
            reaped: false,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let log = recorder.log();
            if log.contains(ready) {
                break;
            }
            if let Some(status) = recorder.child.try_wait()? {
                recorder.reaped = true;
                bail!("{name} exited ({status}) before sampling:\n{log}");
            }
            if Instant::now() > deadline {
                bail!("{name} did not start sampling within {START_TIMEOUT:?}:\n{log}");
            }
            pause(Duration::from_millis(20))?;
        }
        Ok(recorder)
    }

    pub(crate) fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub(crate) fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGINT (sparkprof and py-spy write their output on it) and a clean
    /// exit.
    pub(crate) fn stop(&mut self) -> Result<()> {
        unsafe { libc::kill(self.pid(), libc::SIGINT) };
        let deadline = Instant::now() + STOP_TIMEOUT;
        let status = loop {
            if let Some(status) = self.child.try_wait()? {
                self.reaped = true;
                break status;
            }
            if Instant::now() > deadline {
                bail!(
                    "{} did not exit within {STOP_TIMEOUT:?} of SIGINT",
                    self.name
                );
            }
            pause(Duration::from_millis(20))?;
        };
        if !status.success() {
            bail!(
                "{} failed after SIGINT ({status}):\n{}",
                self.name,
                self.log()
            );
        }
        Ok(())
    }

    /// Frees the space for the next runs.
    pub(crate) fn remove_output(&self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Starts a profiler with no input and its stdout and stderr in `log`.
pub(crate) fn spawn_logged(command: &mut Command, log: &Path) -> Result<Child> {
    let log_file = fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    command
        .stdin(Stdio::null())
        .stdout(log_file.try_clone()?)
        .stderr(log_file)
        .spawn()
        .with_context(|| format!("starting {command:?}"))
}

/// A recording's index.json.
pub(crate) fn sparkprof_index(profiles: &Path) -> Result<serde_json::Value> {
    let index = profiles.join("index.json");
    serde_json::from_str(
        &fs::read_to_string(&index).with_context(|| format!("reading {}", index.display()))?,
    )
    .with_context(|| format!("parsing {}", index.display()))
}

/// The `index.json` of the last window a `sparkprof daemon` wrote under
/// `dir` (window names sort by their start).
pub(crate) fn last_window_index(dir: &Path) -> Result<serde_json::Value> {
    let windows = dir.join("windows");
    let last = fs::read_dir(&windows)
        .with_context(|| format!("reading {}", windows.display()))?
        .filter_map(|entry| Some(entry.ok()?.path()))
        .filter(|path| path.join("index.json").exists())
        .max()
        .with_context(|| format!("no window under {}", windows.display()))?;
    sparkprof_index(&last)
}

pub(crate) fn compile_c(name: &str, dir: &Path, extra: &[&str]) -> Result<PathBuf> {
    let source = workspace_root().join(format!("xtask/bench/{name}.c"));
    let binary = dir.join(name);
    run_cmd(
        Command::new("cc")
            .args([
                "-O2",
                "-fno-omit-frame-pointer",
                "-mno-omit-leaf-frame-pointer",
            ])
            .args(extra)
            .arg("-o")
            .arg(&binary)
            .arg(&source),
    )?;
    Ok(binary)
}

/// Name, state, wait channel and kernel stack of each thread of `pid`: what
/// a hung profiler was doing.
pub(crate) fn thread_states(pid: i32) -> String {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return format!("process {pid} is gone");
    };
    let mut lines = Vec::new();
    for task in tasks.flatten() {
        let dir = task.path();
        let read = |name: &str| fs::read_to_string(dir.join(name)).unwrap_or_default();
        let stat = read("stat");
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .unwrap_or("?")
            .to_owned();
        let stack: Vec<String> = read("stack").lines().take(6).map(str::to_owned).collect();
        lines.push(format!(
            "thread {} ({}): state {state}, wchan {}, kernel stack: {}",
            task.file_name().to_string_lossy(),
            read("comm").trim(),
            read("wchan").trim(),
            stack.join(" <- ")
        ));
    }
    lines.join("\n")
}

/// A distinct number per profiler start, for directory names.
pub(crate) fn bench_unique() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

pub(crate) fn timeval(tv: libc::timeval) -> Duration {
    Duration::from_secs(tv.tv_sec as u64) + Duration::from_micros(tv.tv_usec as u64)
}

/// The workload looping on both CPUs until dropped: the load under which
/// figures 1 and 3 are measured.
pub(crate) struct Background(pub(crate) Child);

impl Background {
    pub(crate) fn start(workload: &Path) -> Result<Self> {
        let child = Command::new(workload)
            .arg("0")
            .stdin(Stdio::null())
            .spawn()
            .context("starting the background workload")?;
        Ok(Self(child))
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Sets a sysctl and puts the previous value back when dropped, so that
/// an error or Ctrl-C does not leave BPF statistics on (they slow every BPF
/// program on the host).
pub(crate) struct SysctlGuard {
    pub(crate) path: PathBuf,
    pub(crate) previous: String,
}

impl SysctlGuard {
    pub(crate) fn set(name: &str, value: &str) -> Result<Self> {
        let path = Path::new("/proc/sys").join(name);
        let previous = fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?
            .trim()
            .to_owned();
        fs::write(&path, value)
            .with_context(|| format!("writing {value} to {}", path.display()))?;
        Ok(Self { path, previous })
    }
}

impl Drop for SysctlGuard {
    fn drop(&mut self) {
        if let Err(err) = fs::write(&self.path, &self.previous) {
            eprintln!(
                "xtask: could not restore {} to {}: {err}",
                self.path.display(),
                self.previous
            );
        }
    }
}

/// The scratch directory, removed when dropped.
pub(crate) struct Scratch(pub(crate) PathBuf);

impl Scratch {
    pub(crate) fn create() -> Result<Self> {
        let path = std::env::temp_dir().join(format!("sparkprof-bench-{}", std::process::id()));
        fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(Self(path))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Totals over a process's perf_event BPF programs, from the fdinfo of its
/// `bpf-prog` file descriptors (each program counted once by its id).
pub(crate) struct ProgStats {
    pub(crate) programs: usize,
    pub(crate) run_time_ns: u64,
    pub(crate) run_cnt: u64,
}

impl ProgStats {
    pub(crate) fn read(pid: i32) -> Result<Self> {
        let mut stats = Self {
            programs: 0,
            run_time_ns: 0,
            run_cnt: 0,
        };
        for (prog_type, path, info) in bpf_programs(pid)? {
            if prog_type != Some(BPF_PROG_TYPE_PERF_EVENT) {
                continue;
            }
            let (run_time_ns, run_cnt) = fdinfo_run_stats(&path, &info)?;
            stats.programs += 1;
            stats.run_time_ns += run_time_ns;
            stats.run_cnt += run_cnt;
        }
        if stats.programs == 0 {
            bail!("process {pid} holds no perf_event BPF program");
        }
        Ok(stats)
    }
}

/// What sparkprof's BPF programs ran in the kernel, by kind of program:
/// `run_time_ns` and `run_cnt` summed over the programs a process holds
/// (each counted once by its id), read while `kernel.bpf_stats_enabled`
/// is 1. The difference of two readings is what ran in between.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct KernelRuns {
    /// `(run_time_ns, run_cnt)` by [`KernelRuns::KINDS`].
    pub(crate) by_kind: [(u64, u64); 4],
}

impl KernelRuns {
    /// The kinds of program, as a table names them: the samplers
    /// (`perf_event`), the tracepoints (`sched_switch`, task renames and
    /// exits: BTF tracepoints are `tracing` programs), the uprobes (the
    /// JVM's thread renames: `kprobe` programs), and any other.
    pub(crate) const KINDS: [&'static str; 4] =
        ["perf_event (samples)", "tracepoints", "uprobes", "other"];

    pub(crate) fn read(pid: i32) -> Result<Self> {
        // `prog_type` numbers of the kernel's `enum bpf_prog_type`.
        const KPROBE: u64 = 2;
        const TRACEPOINT: u64 = 5;
        const RAW_TRACEPOINT: u64 = 17;
        const TRACING: u64 = 26;
        let programs = bpf_programs(pid)?;
        let mut runs = Self::default();
        for (prog_type, path, info) in &programs {
            let kind = match prog_type {
                Some(BPF_PROG_TYPE_PERF_EVENT) => 0,
                Some(TRACEPOINT | RAW_TRACEPOINT | TRACING) => 1,
                Some(KPROBE) => 2,
                _ => 3,
            };
            let (run_time_ns, run_cnt) = fdinfo_run_stats(path, info)?;
            runs.by_kind[kind].0 += run_time_ns;
            runs.by_kind[kind].1 += run_cnt;
        }
        if programs.is_empty() {
            bail!("process {pid} holds no BPF program");
        }
        Ok(runs)
    }

    /// What ran since `before` (a program loaded since counts from 0).
    pub(crate) fn since(&self, before: &Self) -> Self {
        let mut runs = *self;
        for (now, then) in runs.by_kind.iter_mut().zip(before.by_kind) {
            now.0 = now.0.saturating_sub(then.0);
            now.1 = now.1.saturating_sub(then.1);
        }
        runs
    }

    pub(crate) fn add(mut self, other: Self) -> Self {
        for (sum, more) in self.by_kind.iter_mut().zip(other.by_kind) {
            sum.0 += more.0;
            sum.1 += more.1;
        }
        self
    }

    pub(crate) fn total_ns(&self) -> u64 {
        self.by_kind.iter().map(|(ns, _)| ns).sum()
    }
}

/// `(prog_type, fdinfo path, fdinfo text)` of each BPF program process
/// `pid` holds, once by its id (a program may have several descriptors).
fn bpf_programs(pid: i32) -> Result<Vec<(Option<u64>, String, String)>> {
    let mut seen = Vec::new();
    let mut programs = Vec::new();
    for (path, info) in bpf_prog_fdinfos(pid)? {
        let id = fdinfo_field(&info, "prog_id");
        if seen.contains(&id) {
            continue;
        }
        seen.push(id);
        programs.push((fdinfo_field(&info, "prog_type"), path, info));
    }
    Ok(programs)
}

/// `(fdinfo path, fdinfo text)` of every BPF program process `pid` holds.
pub(crate) fn bpf_prog_fdinfos(pid: i32) -> Result<Vec<(String, String)>> {
    let fds = format!("/proc/{pid}/fd");
    let mut programs = Vec::new();
    for entry in fs::read_dir(&fds).with_context(|| format!("listing {fds}"))? {
        let entry = entry?;
        let is_prog = fs::read_link(entry.path())
            .map(|target| target.as_os_str() == "anon_inode:bpf-prog")
            .unwrap_or(false);
        if !is_prog {
            continue;
        }
        let path = format!("/proc/{pid}/fdinfo/{}", entry.file_name().to_string_lossy());
        // A program closed meanwhile is skipped.
        if let Ok(info) = fs::read_to_string(&path) {
            programs.push((path, info));
        }
    }
    Ok(programs)
}

pub(crate) fn fdinfo_field(info: &str, name: &str) -> Option<u64> {
    info.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key == name).then(|| value.trim().parse().ok())?
    })
}

/// `(run_time_ns, run_cnt)` of a BPF program's fdinfo text, read from
/// `path` (counted while `kernel.bpf_stats_enabled` is 1).
pub(crate) fn fdinfo_run_stats(path: &str, info: &str) -> Result<(u64, u64)> {
    match (
        fdinfo_field(info, "run_time_ns"),
        fdinfo_field(info, "run_cnt"),
    ) {
        (Some(run_time_ns), Some(run_cnt)) => Ok((run_time_ns, run_cnt)),
        _ => bail!("{path} has no run_time_ns/run_cnt (kernel too old for BPF stats?)"),
    }
}

/// User plus system CPU time of a process so far (all its threads).
pub(crate) fn cpu_time(pid: i32) -> Result<Duration> {
    let path = format!("/proc/{pid}/stat");
    let stat = fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    // The fields after the parenthesised command name start at field 3
    // (state); utime and stime are fields 14 and 15, in clock ticks.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |index: usize| -> Result<u64> {
        fields
            .get(index)
            .and_then(|value| value.parse().ok())
            .with_context(|| format!("malformed {path}"))
    };
    let total = ticks(11)? + ticks(12)?;
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Ok(Duration::from_secs_f64(total as f64 / per_second as f64))
}

/// Peak resident set size so far.
pub(crate) fn vm_hwm_kib(pid: i32) -> Result<u64> {
    Ok(status_kib(pid, &["VmHWM"])?[0])
}

/// Memory figures (`VmRSS`, `RssAnon`, ...) of `/proc/PID/status`, in KiB,
/// in the order asked for.
pub(crate) fn status_kib(pid: i32, keys: &[&str]) -> Result<Vec<u64>> {
    let path = format!("/proc/{pid}/status");
    let status = fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    keys.iter()
        .map(|key| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(key)?.strip_prefix(':'))
                .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
                .with_context(|| format!("no {key} in {path}"))
        })
        .collect()
}
