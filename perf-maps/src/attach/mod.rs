//! A client for HotSpot's dynamic attach protocol (version 1), the mechanism
//! behind `jcmd`, `jstack` and jattach, with no JDK tool needed on the host.
//!
//! We need it to make JVMs write their perf maps on demand (`jcmd <pid>
//! Compiler.perfmap`, JDK 17+) and to read thread names (`Thread.print`).
//! Shelling out to `jcmd` is not an option: the host may have no JDK, a
//! container's JDK may not match, and `jcmd` must run as the JVM's user.
//!
//! The steps, as HotSpot expects them:
//! 1. The JVM listens on `/tmp/.java_pid<nspid>` in its own mount namespace
//!    (seen from the host as `/proc/PID/root/tmp/...`), but only once asked.
//! 2. To ask: create `.attach_pid<nspid>` in its working directory (or its
//!    `/tmp`), owned by the JVM's user, and send `SIGQUIT`; the JVM's signal
//!    handler sees the file and starts the listener. **Safety first:** a JVM
//!    without a `SIGQUIT` handler (still starting, or run with `-Xrs`) is
//!    killed by that signal, so [`check_attachable`] refuses unless
//!    `/proc/PID/status` shows the handler, and refuses outright for `-Xrs`
//!    and `-XX:+DisableAttachMechanism` (the latter would just print a thread
//!    dump to the application's stdout), and for processes without
//!    `libjvm.so` (other runtimes, e.g. Go, exit on `SIGQUIT`).
//!
//!    These checks guard the *signal* only. A JVM with `-Xrs` starts its
//!    listener at start-up instead (HotSpot's `init_at_startup`, since it
//!    cannot be triggered later), so while its socket exists it is attached
//!    to normally; if the socket file was removed (e.g. by a `/tmp`
//!    cleaner), it is refused with [`AttachError::ReducedSignals`] and never
//!    signalled.
//! 3. Connect as the JVM's euid/egid from a child process (the private
//!    `exchange` module explains why and how) and send
//!    `1\0<cmd>\0<a1>\0<a2>\0<a3>\0`; the reply is a decimal status line,
//!    then output until EOF.
//!
//! Every wait is bounded ([`AttachOptions`]); a JVM that exits meanwhile is
//! reported as [`AttachError::ProcessExited`], never a panic.

pub mod backoff;
mod exchange;
mod raw;
pub mod thread_dump;
pub mod version;

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::discovery::{self, DiscoveryError, Owner, ProcStatus};
pub use backoff::{AttachBackoff, MAX_ATTACH_FAILURES, Retry};
use exchange::{ExchangeError, GuardCheck, Request};
pub use version::{VersionError, jvm_major_version, parse_java_version};

/// HotSpot's limit on each argument (`AttachOperation::arg_length_max`).
const ARG_LENGTH_MAX: usize = 1024;
/// HotSpot's limit on the command name (`AttachOperation::name_length_max`).
const NAME_LENGTH_MAX: usize = 16;

/// Errors from attaching. All are recoverable: the profiler carries on
/// without names for that JVM.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// No such process.
    #[error("process {pid} does not exist")]
    NoSuchProcess {
        /// The PID.
        pid: u32,
    },
    /// The process exited (or became a zombie) before or during the attach.
    #[error("process {pid} exited during attach")]
    ProcessExited {
        /// The PID.
        pid: u32,
    },
    /// Not a HotSpot JVM: no `libjvm.so` mapped.
    #[error("process {pid} is not a HotSpot JVM (no libjvm.so mapped)")]
    NotAJvm {
        /// The PID.
        pid: u32,
    },
    /// The JVM has no SIGQUIT handler (yet): still starting, or `-Xrs` set
    /// some other way. Sending SIGQUIT would kill it.
    #[error(
        "JVM {pid} has no SIGQUIT handler (still starting, or reduced signal use); not signalling it"
    )]
    NoSigquitHandler {
        /// The PID.
        pid: u32,
    },
    /// The JVM has a SIGQUIT handler but not yet its "Signal Dispatcher"
    /// thread, which is what reacts to the signal: a SIGQUIT now may be lost.
    #[error("JVM {pid} is still starting (no Signal Dispatcher thread yet)")]
    StillStarting {
        /// The PID.
        pid: u32,
    },
    /// The JVM runs with `-Xrs` / `-XX:+ReduceSignalUsage`: SIGQUIT would kill it.
    #[error("JVM {pid} runs with -Xrs (reduced signal usage); SIGQUIT would kill it")]
    ReducedSignals {
        /// The PID.
        pid: u32,
    },
    /// The JVM runs with `-XX:+DisableAttachMechanism`.
    #[error("JVM {pid} runs with -XX:+DisableAttachMechanism")]
    AttachDisabled {
        /// The PID.
        pid: u32,
    },
    /// The attach listener did not appear after SIGQUIT.
    #[error("JVM {pid} did not start its attach listener within {waited:?}")]
    ListenerTimeout {
        /// The PID.
        pid: u32,
        /// How long we waited.
        waited: Duration,
    },
    /// No complete reply in time; the helper child was killed.
    #[error("JVM {pid}: no complete reply within {timeout:?}")]
    Timeout {
        /// The PID.
        pid: u32,
        /// The limit.
        timeout: Duration,
    },
    /// The reply exceeded [`AttachOptions::max_reply`].
    #[error("JVM {pid}: reply larger than {max} bytes")]
    ReplyTooLarge {
        /// The PID.
        pid: u32,
        /// The cap.
        max: usize,
    },
    /// A system call failed.
    #[error("JVM {pid}: {stage}: {source}")]
    Os {
        /// The PID.
        pid: u32,
        /// What we were doing.
        stage: &'static str,
        /// The error.
        source: io::Error,
    },
    /// The request would make the JVM write through something planted at
    /// the file's path (a FIFO would freeze it, a symlink would have it
    /// overwrite the target, another user's file would be read by that
    /// user): it was not sent.
    #[error("JVM {pid} not asked to write its perf map: {reason}")]
    UnsafePerfMap {
        /// The PID.
        pid: u32,
        /// What is at the path, in words.
        reason: String,
    },
    /// The reply did not start with a status line.
    #[error("JVM {pid}: malformed attach reply: {reason}")]
    Protocol {
        /// The PID.
        pid: u32,
        /// What was wrong.
        reason: String,
    },
    /// The JVM answered, but with an error (non-zero status, or a jcmd
    /// error message).
    #[error("JVM {pid}: command failed (status {status}): {output}")]
    CommandFailed {
        /// The PID.
        pid: u32,
        /// The status line.
        status: i32,
        /// The output.
        output: String,
    },
    /// The command or an argument cannot be sent (NUL byte, too long).
    #[error("invalid attach request: {0}")]
    InvalidArgument(String),
    /// Reading `/proc` failed.
    #[error(transparent)]
    Discovery(DiscoveryError),
}

impl From<DiscoveryError> for AttachError {
    fn from(e: DiscoveryError) -> Self {
        match e {
            DiscoveryError::NoSuchProcess { pid } => AttachError::NoSuchProcess { pid },
            e => AttachError::Discovery(e),
        }
    }
}

/// A reply: the status line and everything after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachResponse {
    /// The decimal status from the first line (0 = the operation ran).
    pub status: i32,
    /// The rest of the reply (lossily decoded as UTF-8).
    pub output: String,
}

/// Time and size limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachOptions {
    /// How long to wait for the listener to appear after SIGQUIT. The first
    /// attach to a JVM takes ~0.7-0.9 s here; 5 s leaves room for a loaded
    /// host.
    pub listener_timeout: Duration,
    /// Limit for connect + request + full reply. `Thread.print` needs a
    /// safepoint, which a busy JVM may take a while to reach.
    pub command_timeout: Duration,
    /// Largest reply accepted (a thread dump of thousands of threads is a
    /// few MiB).
    pub max_reply: usize,
}

impl Default for AttachOptions {
    fn default() -> Self {
        AttachOptions {
            listener_timeout: Duration::from_secs(5),
            command_timeout: Duration::from_secs(10),
            max_reply: 64 * 1024 * 1024,
        }
    }
}

/// A JVM to attach to. Creating one only reads `/proc`; nothing is sent
/// until a command is run.
#[derive(Debug, Clone)]
pub struct Jvm {
    pid: u32,
    nspid: u32,
    owner: Owner,
    options: AttachOptions,
}

impl Jvm {
    /// Looks up process `pid` (its namespace PID and owner).
    pub fn new(pid: u32) -> Result<Jvm, AttachError> {
        let st = ProcStatus::read(pid)?;
        if st.has_exited() {
            return Err(AttachError::ProcessExited { pid });
        }
        Ok(Jvm {
            pid,
            nspid: st.ns_pid(),
            owner: st.owner(),
            options: AttachOptions::default(),
        })
    }

    /// Replaces the limits.
    pub fn with_options(mut self, options: AttachOptions) -> Self {
        self.options = options;
        self
    }

    /// PID in our namespace.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// PID inside the JVM's namespace.
    pub fn nspid(&self) -> u32 {
        self.nspid
    }

    /// The JVM's effective uid/gid, which the attach connection uses.
    pub fn owner(&self) -> Owner {
        self.owner
    }

    /// Where the JVM writes its perf map, seen from here.
    pub fn perf_map_path(&self) -> PathBuf {
        discovery::perf_map_path_for(self.pid, self.nspid)
    }

    /// The perf map's file name in the JVM's `/tmp`.
    fn perf_map_name(&self) -> String {
        format!("perf-{}.map", self.nspid)
    }

    /// Runs a diagnostic command, as `jcmd <pid> <command line>` does: the
    /// whole command line (e.g. `Thread.print -l`) goes in one argument.
    pub fn jcmd(&self, command_line: &str) -> Result<AttachResponse, AttachError> {
        self.execute("jcmd", &[command_line])
    }

    /// Runs any attach operation (`jcmd`, `properties`, `threaddump`, ...)
    /// with up to three arguments.
    pub fn execute(&self, command: &str, args: &[&str]) -> Result<AttachResponse, AttachError> {
        self.request(command, args, None)
    }

    /// Runs an attach operation that makes the JVM write the file `guard`
    /// in its `/tmp` (see `exchange`'s guard): refused unless that file is
    /// safe to write.
    fn request(
        &self,
        command: &str,
        args: &[&str],
        guard: Option<&str>,
    ) -> Result<AttachResponse, AttachError> {
        let payload = build_request(command, args)?;
        self.ensure_listener()?;
        let tmp = discovery::proc_tmp_dir(self.pid);
        let name = format!(".java_pid{}", self.nspid);
        let ns_path = PathBuf::from(format!("/proc/{}/ns/mnt", self.pid));
        let mnt_ns =
            if other_mount_ns(&ns_path).map_err(|source| self.os("mount namespace", source))? {
                Some(ns_path.as_path())
            } else {
                None
            };
        let t0 = Instant::now();
        let res = exchange::exchange(&Request {
            dir: &tmp,
            name: &name,
            mnt_ns,
            uid: self.owner.uid,
            gid: self.owner.gid,
            payload: &payload,
            timeout: self.options.command_timeout,
            max_reply: self.options.max_reply,
            guard,
        });
        tracing::debug!(pid = self.pid, command, ?args, elapsed = ?t0.elapsed(), ok = res.is_ok(), "attach exchange");
        let res = match res {
            Ok(bytes) => parse_reply(self.pid, &bytes),
            Err(e) => Err(self.exchange_error(e)),
        };
        // Whatever went wrong, a JVM that is gone explains it best.
        match res {
            Err(_) if !self.alive() => Err(AttachError::ProcessExited { pid: self.pid }),
            other => other,
        }
    }

    /// Asks the JVM to (re)write its perf map with a snapshot of the code
    /// cache (`Compiler.perfmap`, JDK 17+) and returns the map's path.
    ///
    /// The JVM writes `/tmp/perf-<nspid>.map` by name, following links and
    /// blocking on a FIFO, so the request is only sent once that path holds
    /// a regular file of the JVM's user with one link (created here, as that
    /// user, if there is none): anything planted there is refused with
    /// [`AttachError::UnsafePerfMap`].
    pub fn dump_perf_map(&self) -> Result<PathBuf, AttachError> {
        let name = self.perf_map_name();
        let r = self.request("jcmd", &["Compiler.perfmap"], Some(&name))?;
        // JDK 17 answers an unknown command with status -1 and the exception
        // text; older versions may say so with status 0.
        if r.status != 0 || r.output.contains("Unknown diagnostic command") {
            return Err(AttachError::CommandFailed {
                pid: self.pid,
                status: r.status,
                output: r.output,
            });
        }
        Ok(self.perf_map_path())
    }

    /// Why the JVM would not be asked to write its perf map, checked from
    /// here without touching anything (for `doctor`; [`Jvm::dump_perf_map`]
    /// checks again, as the JVM's user, right before asking). `None`: it
    /// would be asked.
    pub fn perf_map_hazard(&self) -> Option<String> {
        let dir = discovery::proc_tmp_dir(self.pid);
        let name = self.perf_map_name();
        let shown = Path::new("/tmp");
        let check = |check: GuardCheck, value: u32| Some(check.describe(value, shown, &name));
        match std::fs::metadata(&dir) {
            Ok(meta) if meta.mode() & 0o002 != 0 && meta.mode() & 0o1000 == 0 => {
                return check(GuardCheck::OpenDirectory, meta.mode());
            }
            Ok(_) => {}
            Err(err) => return check(GuardCheck::Create, err.raw_os_error().unwrap_or(0) as u32),
        }
        match std::fs::symlink_metadata(dir.join(&name)) {
            Err(err) if err.kind() == io::ErrorKind::NotFound => None,
            Err(err) => check(GuardCheck::Create, err.raw_os_error().unwrap_or(0) as u32),
            Ok(meta) if meta.mode() & libc::S_IFMT != libc::S_IFREG => {
                check(GuardCheck::Kind, meta.mode() & libc::S_IFMT)
            }
            Ok(meta) if meta.uid() != self.owner.uid => check(GuardCheck::Owner, meta.uid()),
            Ok(meta) if meta.nlink() != 1 => check(GuardCheck::Links, meta.nlink() as u32),
            Ok(_) => None,
        }
    }

    /// The JVM's Java major version: from its JDK's `release` file if
    /// possible (cheap, no attach), else from the JVM's
    /// `java.specification.version` property over the attach socket.
    pub fn major_version(&self) -> Result<u32, AttachError> {
        match jvm_major_version(self.pid) {
            Ok(v) => return Ok(v),
            Err(VersionError::NotAJvm { pid }) => return Err(AttachError::NotAJvm { pid }),
            Err(VersionError::Discovery(e)) => return Err(e.into()),
            Err(e) => {
                tracing::debug!(pid = self.pid, error = %e, "no release file; asking the JVM")
            }
        }
        let r = self.execute("properties", &[])?;
        r.output
            .lines()
            .find_map(|l| l.strip_prefix("java.specification.version="))
            .and_then(|v| parse_java_version(v.trim()))
            .ok_or_else(|| AttachError::Protocol {
                pid: self.pid,
                reason: "no java.specification.version in properties".into(),
            })
    }

    /// Every Java thread's full name with its Linux TID, from `jcmd
    /// Thread.print` (see [`thread_dump`]). Costs the JVM a safepoint.
    pub fn thread_names(&self) -> Result<Vec<thread_dump::JavaThread>, AttachError> {
        let r = self.jcmd("Thread.print")?;
        if r.status != 0 {
            return Err(AttachError::CommandFailed {
                pid: self.pid,
                status: r.status,
                output: r.output,
            });
        }
        Ok(thread_dump::parse_thread_dump(&r.output))
    }

    /// True if `Compiler.perfmap` exists in this JVM (JDK 17 and later).
    pub fn supports_perf_map_dump(&self) -> Result<bool, AttachError> {
        Ok(self.major_version()? >= 17)
    }

    fn socket_path(&self) -> PathBuf {
        discovery::proc_tmp_dir(self.pid).join(format!(".java_pid{}", self.nspid))
    }

    fn alive(&self) -> bool {
        ProcStatus::read(self.pid).is_ok_and(|st| !st.has_exited())
    }

    fn os(&self, stage: &'static str, source: io::Error) -> AttachError {
        AttachError::Os {
            pid: self.pid,
            stage,
            source,
        }
    }

    fn exchange_error(&self, e: ExchangeError) -> AttachError {
        match e {
            ExchangeError::Timeout => AttachError::Timeout {
                pid: self.pid,
                timeout: self.options.command_timeout,
            },
            ExchangeError::TooLarge => AttachError::ReplyTooLarge {
                pid: self.pid,
                max: self.options.max_reply,
            },
            ExchangeError::Child { stage, errno } => {
                self.os(stage, io::Error::from_raw_os_error(errno))
            }
            ExchangeError::Parent { stage, source } => self.os(stage, source),
            // The only file a request makes the JVM write is its perf map.
            ExchangeError::Unsafe { check, value } => AttachError::UnsafePerfMap {
                pid: self.pid,
                reason: check.describe(value, Path::new("/tmp"), &self.perf_map_name()),
            },
        }
    }

    /// Makes sure the attach listener is running, starting it if needed.
    fn ensure_listener(&self) -> Result<(), AttachError> {
        if is_socket(&self.socket_path()) {
            return Ok(());
        }
        let t0 = Instant::now();
        let limit = self.options.listener_timeout;
        // A JVM that just started may not be ready for SIGQUIT yet; give it
        // (part of) the same time budget.
        let mut delay = Duration::from_millis(20);
        loop {
            let st = ProcStatus::read(self.pid)?;
            match check_signal_safety(self.pid, &st) {
                Err(AttachError::StillStarting { .. }) if t0.elapsed() < limit => {
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(Duration::from_millis(200));
                }
                other => break other?,
            }
        }

        let trigger = TriggerFile::create(self.pid, self.nspid, self.owner)?;
        tracing::debug!(pid = self.pid, file = %trigger.path.display(), "starting JVM attach listener");
        self.sigquit()?;
        let t0 = Instant::now();
        let mut resent = false;
        let mut delay = Duration::from_millis(20);
        loop {
            if is_socket(&self.socket_path()) {
                tracing::debug!(pid = self.pid, elapsed = ?t0.elapsed(), "attach listener is up");
                return Ok(());
            }
            let st = ProcStatus::read(self.pid)
                .map_err(|_| AttachError::ProcessExited { pid: self.pid })?;
            if st.has_exited() {
                return Err(AttachError::ProcessExited { pid: self.pid });
            }
            let waited = t0.elapsed();
            if waited >= limit {
                return Err(AttachError::ListenerTimeout {
                    pid: self.pid,
                    waited,
                });
            }
            // Like the JDK's own client: one more SIGQUIT half-way, in case
            // the first was lost; re-checked, since the JVM may have changed.
            if !resent && waited >= limit / 2 {
                resent = true;
                check_signal_safety(self.pid, &st)?;
                tracing::debug!(
                    pid = self.pid,
                    "no attach listener yet; sending SIGQUIT again"
                );
                self.sigquit()?;
            }
            std::thread::sleep(delay.min(limit - waited));
            delay = (delay * 2).min(Duration::from_millis(500));
        }
        // `trigger` is removed on drop, on every path.
    }

    fn sigquit(&self) -> Result<(), AttachError> {
        // SAFETY: plain kill(2).
        if unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGQUIT) } != 0 {
            let err = io::Error::last_os_error();
            return Err(if err.raw_os_error() == Some(libc::ESRCH) {
                AttachError::ProcessExited { pid: self.pid }
            } else {
                self.os("send SIGQUIT", err)
            });
        }
        Ok(())
    }
}

/// Checks, without touching the JVM, whether attaching is safe and possible:
/// the process exists, is a HotSpot JVM, and either already has its attach
/// listener or can start it with SIGQUIT without being killed. Meant for a
/// `doctor` command; the same checks run before every SIGQUIT.
///
/// [`AttachError::StillStarting`] is transient (a JVM in its first ~30 ms);
/// [`Jvm::jcmd`] waits that out within its listener timeout.
pub fn check_attachable(pid: u32) -> Result<(), AttachError> {
    let st = ProcStatus::read(pid)?;
    if st.has_exited() {
        return Err(AttachError::ProcessExited { pid });
    }
    let sock = discovery::proc_tmp_dir(pid).join(format!(".java_pid{}", st.ns_pid()));
    if is_socket(&sock) {
        return Ok(());
    }
    check_signal_safety(pid, &st)
}

/// The checks that must pass before sending SIGQUIT (see module docs).
fn check_signal_safety(pid: u32, st: &ProcStatus) -> Result<(), AttachError> {
    if st.has_exited() {
        return Err(AttachError::ProcessExited { pid });
    }
    if version::libjvm_path(pid)?.is_none() {
        return Err(AttachError::NotAJvm { pid });
    }
    let flags = jvm_flags(pid)?;
    if flags.reduce_signals {
        return Err(AttachError::ReducedSignals { pid });
    }
    if flags.attach_disabled {
        return Err(AttachError::AttachDisabled { pid });
    }
    if !st.catches(libc::SIGQUIT) {
        return Err(AttachError::NoSigquitHandler { pid });
    }
    if !signal_dispatcher_ready(pid) {
        return Err(AttachError::StillStarting { pid });
    }
    Ok(())
}

/// How old a JVM whose threads carry no names must be before we trust its
/// SIGQUIT handling (see [`signal_dispatcher_ready`]).
const UNNAMED_THREADS_MIN_AGE: Duration = Duration::from_secs(1);

/// HotSpot installs its SIGQUIT handler (visible in SigCgt ~20 ms after
/// start) before it creates the "Signal Dispatcher" thread that acts on it
/// (~30 ms); a SIGQUIT in between can be lost, and the attach then times out.
/// That thread's name (cut to 15 characters in `comm`) is the precise
/// readiness sign. JDK 8 does not name its native threads (all are `java`),
/// so there we fall back to the process's age.
fn signal_dispatcher_ready(pid: u32) -> bool {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    let mut named = false;
    for t in dir.flatten() {
        let Ok(comm) = std::fs::read(t.path().join("comm")) else {
            continue;
        };
        let comm = comm.strip_suffix(b"\n").unwrap_or(&comm);
        if comm == b"Signal Dispatch" {
            return true;
        }
        named |= comm != b"java";
    }
    !named && process_age(pid).is_some_and(|age| age >= UNNAMED_THREADS_MIN_AGE)
}

/// Time since the process started (`starttime` in `/proc/PID/stat`, against
/// `/proc/uptime`).
fn process_age(pid: u32) -> Option<Duration> {
    let start_ticks = discovery::process(pid).ok()?.stat().ok()?.starttime;
    let uptime = <procfs::Uptime as procfs::Current>::current()
        .ok()?
        .uptime_duration();
    let started =
        Duration::from_secs_f64(start_ticks as f64 / procfs::ticks_per_second().max(1) as f64);
    uptime.checked_sub(started)
}

/// The JVM options sparkprof cares about, as the JVM would take them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct JvmFlags {
    /// `-Xrs` / `-XX:+ReduceSignalUsage`: SIGQUIT would kill it.
    pub reduce_signals: bool,
    /// `-XX:+DisableAttachMechanism`.
    pub attach_disabled: bool,
    /// `-XX:+/-PreserveFramePointer`, if given (off by default).
    pub preserve_frame_pointer: Option<bool>,
}

/// The options of a JVM from its command line and from `JAVA_TOOL_OPTIONS` /
/// `JDK_JAVA_OPTIONS` (which the JVM also honours, before the command
/// line). Later occurrences win, as in HotSpot. Conservative: an
/// application argument spelled `-Xrs` also counts; a false refusal is
/// harmless, a false acceptance kills the JVM (the SigCgt check backs this
/// up anyway).
pub fn jvm_flags(pid: u32) -> Result<JvmFlags, AttachError> {
    let process = discovery::process(pid)?;
    let mut words: Vec<String> = Vec::new();
    // Environment first: the command line overrides it.
    if let Ok(env) = process.environ() {
        for key in ["JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS"] {
            if let Some(value) = env.get(std::ffi::OsStr::new(key)) {
                words.extend(
                    value
                        .to_string_lossy()
                        .split_whitespace()
                        .map(str::to_owned),
                );
            }
        }
    }
    let cmdline = process
        .cmdline()
        .map_err(|err| discovery::proc_error(pid, "cmdline", err))?;
    words.extend(cmdline);
    Ok(flags_from_words(words.iter().map(String::as_str)))
}

fn flags_from_words<'a>(words: impl Iterator<Item = &'a str>) -> JvmFlags {
    let mut f = JvmFlags::default();
    for w in words {
        match w {
            "-Xrs" | "-XX:+ReduceSignalUsage" => f.reduce_signals = true,
            "-XX:-ReduceSignalUsage" => f.reduce_signals = false,
            "-XX:+DisableAttachMechanism" => f.attach_disabled = true,
            "-XX:-DisableAttachMechanism" => f.attach_disabled = false,
            "-XX:+PreserveFramePointer" => f.preserve_frame_pointer = Some(true),
            "-XX:-PreserveFramePointer" => f.preserve_frame_pointer = Some(false),
            _ => {}
        }
    }
    f
}

fn is_socket(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

/// True if `/proc/PID/ns/mnt` differs from ours.
fn other_mount_ns(theirs: &Path) -> io::Result<bool> {
    let ours = std::fs::metadata("/proc/self/ns/mnt")?;
    let theirs = std::fs::metadata(theirs)?;
    Ok((ours.dev(), ours.ino()) != (theirs.dev(), theirs.ino()))
}

/// `1\0<cmd>\0<a1>\0<a2>\0<a3>\0`, missing args empty.
fn build_request(command: &str, args: &[&str]) -> Result<Vec<u8>, AttachError> {
    if command.is_empty() || command.len() > NAME_LENGTH_MAX || command.contains('\0') {
        return Err(AttachError::InvalidArgument(format!(
            "command {command:?} (1-{NAME_LENGTH_MAX} bytes, no NUL)"
        )));
    }
    if args.len() > 3 {
        return Err(AttachError::InvalidArgument(format!(
            "{} arguments, at most 3",
            args.len()
        )));
    }
    let mut out = b"1\0".to_vec();
    out.extend_from_slice(command.as_bytes());
    out.push(0);
    for i in 0..3 {
        let a = args.get(i).copied().unwrap_or("");
        if a.len() > ARG_LENGTH_MAX || a.contains('\0') {
            return Err(AttachError::InvalidArgument(format!(
                "argument {} ({} bytes, at most {ARG_LENGTH_MAX}, no NUL)",
                i + 1,
                a.len()
            )));
        }
        out.extend_from_slice(a.as_bytes());
        out.push(0);
    }
    Ok(out)
}

fn parse_reply(pid: u32, bytes: &[u8]) -> Result<AttachResponse, AttachError> {
    if bytes.is_empty() {
        return Err(AttachError::Protocol {
            pid,
            reason: "empty reply".into(),
        });
    }
    let text = String::from_utf8_lossy(bytes);
    let (first, rest) = text.split_once('\n').unwrap_or((&text, ""));
    let status = first
        .trim()
        .parse::<i32>()
        .map_err(|_| AttachError::Protocol {
            pid,
            reason: format!(
                "status line {:?}",
                first.chars().take(40).collect::<String>()
            ),
        })?;
    Ok(AttachResponse {
        status,
        output: rest.to_owned(),
    })
}

/// The `.attach_pid<nspid>` file that tells the JVM's SIGQUIT handler to
/// start the listener. Removed on drop, unless it was already there (then it
/// is not ours to delete).
struct TriggerFile {
    path: PathBuf,
    ours: bool,
}

impl TriggerFile {
    fn create(pid: u32, nspid: u32, owner: Owner) -> Result<TriggerFile, AttachError> {
        let name = format!(".attach_pid{nspid}");
        // HotSpot looks in its working directory first, then in /tmp.
        let candidates = [
            PathBuf::from(format!("/proc/{pid}/cwd")).join(&name),
            discovery::proc_tmp_dir(pid).join(&name),
        ];
        let mut last_err = None;
        for path in candidates {
            match create_owned(&path, owner) {
                Ok(ours) => return Ok(TriggerFile { path, ours }),
                Err(e) => {
                    tracing::debug!(path = %path.display(), error = %e, "cannot create attach trigger");
                    last_err = Some(e);
                }
            }
        }
        Err(AttachError::Os {
            pid,
            stage: "create .attach_pid file",
            source: last_err.unwrap_or_else(|| io::Error::other("no candidate")),
        })
    }
}

impl Drop for TriggerFile {
    fn drop(&mut self) {
        if self.ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Creates `path` exclusively (never through a symlink, never reusing someone
/// else's file) and gives it to the JVM's user. Returns false if a file was
/// already there, which we then leave alone.
fn create_owned(path: &Path, owner: Owner) -> io::Result<bool> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: valid C string; fd closed below.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o600 as libc::c_uint,
        )
    };
    if fd < 0 {
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EEXIST) && std::fs::symlink_metadata(path)?.is_file() {
            return Ok(false);
        }
        return Err(err);
    }
    // SAFETY: fd is ours.
    let r = unsafe { libc::fchown(fd, owner.uid, owner.gid) };
    let err = io::Error::last_os_error();
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    if r != 0 {
        let _ = std::fs::remove_file(path);
        return Err(err);
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_bytes() {
        assert_eq!(
            build_request("jcmd", &["Thread.print"]).unwrap(),
            b"1\0jcmd\0Thread.print\0\0\0"
        );
        assert_eq!(
            build_request("properties", &[]).unwrap(),
            b"1\0properties\0\0\0\0"
        );
        assert!(build_request("jcmd", &["a\0b"]).is_err());
        assert!(build_request("", &[]).is_err());
        assert!(build_request("jcmd", &["a", "b", "c", "d"]).is_err());
        assert!(build_request("jcmd", &[&"x".repeat(1025)]).is_err());
    }

    #[test]
    fn replies() {
        let r = parse_reply(1, b"0\nhello\nworld\n").unwrap();
        assert_eq!(r.status, 0);
        assert_eq!(r.output, "hello\nworld\n");
        let r = parse_reply(1, b"-1").unwrap();
        assert_eq!((r.status, r.output.as_str()), (-1, ""));
        assert!(parse_reply(1, b"").is_err());
        assert!(parse_reply(1, b"garbage\n").is_err());
    }

    #[test]
    fn flags() {
        let f = |w: &[&str]| flags_from_words(w.iter().copied());
        assert_eq!(f(&["java", "-cp", "x", "Main"]), JvmFlags::default());
        assert!(f(&["java", "-Xrs", "Main"]).reduce_signals);
        assert!(!f(&["-XX:+ReduceSignalUsage", "-XX:-ReduceSignalUsage"]).reduce_signals);
        assert!(f(&["java", "-XX:+DisableAttachMechanism", "Main"]).attach_disabled);
    }

    #[test]
    fn non_jvm_refused() {
        // This test binary is no JVM: never signal it.
        let err = check_attachable(std::process::id()).unwrap_err();
        assert!(matches!(err, AttachError::NotAJvm { .. }), "{err}");
        let err = Jvm::new(std::process::id())
            .unwrap()
            .jcmd("Thread.print")
            .unwrap_err();
        assert!(matches!(err, AttachError::NotAJvm { .. }), "{err}");
    }

    #[test]
    fn own_age() {
        let age = process_age(std::process::id()).unwrap();
        assert!(age < Duration::from_secs(3600), "{age:?}");
        // pid 1 started before us.
        assert!(process_age(1).unwrap() >= age);
    }

    #[test]
    fn missing_process() {
        let err = Jvm::new(u32::MAX - 1).unwrap_err();
        assert!(matches!(err, AttachError::NoSuchProcess { .. }), "{err}");
        let err = check_attachable(u32::MAX - 1).unwrap_err();
        assert!(matches!(err, AttachError::NoSuchProcess { .. }), "{err}");
    }
}
