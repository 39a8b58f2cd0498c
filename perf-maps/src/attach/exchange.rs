//! One request/reply over the attach socket, made from a forked child that
//! has taken the JVM's credentials.
//!
//! Why a child: HotSpot checks the peer credentials of every connection
//! (`SO_PEERCRED`; JDK 8 requires exactly its euid/egid, newer JDKs also
//! accept root), and the socket is mode 0600 owned by the JVM user. Changing
//! the ids of the profiler itself would be wrong (it is multi-threaded and
//! needs root for BPF), so a short-lived child does the switch and the
//! connection, and streams the reply back over a pipe.
//!
//! The child shares the profiler's memory (`clone` with `CLONE_VM`, on a
//! stack of its own), as `posix_spawn`'s does, and is not a fork. A fork
//! write-protects every page of the profiler (tens of MiB on a Spark host)
//! and each page it writes after that faults again, copied while the child
//! lives: the forks for a testbed job's three new JVMs were more than half
//! of the profiler's page faults over the job, and about a tenth of its
//! CPU. Sharing memory, the child must not touch anything the parent
//! uses: everything (paths, the request bytes, the socket address, open
//! descriptors) is prepared before the `clone` and left alone until the
//! child has been reaped; the child never allocates, cannot panic, runs
//! with every signal blocked, and makes its system calls through
//! [`super::raw`] (libc's wrappers would write the parent thread's `errno`).
//! It has its own descriptor table and working directory (no `CLONE_FILES`,
//! no `CLONE_FS`) and is its own process, so its `setns`, `fchdir`, closes
//! and id changes are its alone. Id changes use the raw
//! `setgroups`/`setgid`/`setuid` syscalls, which change only the calling
//! thread (the only one in the child), rather than glibc's wrappers that
//! try to broadcast the change to all threads.
//!
//! The child finds the socket through a directory descriptor opened by the
//! parent (`/proc/PID/root/tmp`): it `fchdir`s there (while still root) and
//! connects to the relative name `.java_pid<nspid>`. That works for a
//! process in another mount namespace or chroot, keeps the address well
//! under the 108-byte `sun_path` limit, and after dropping to the JVM user
//! needs no access to `/proc/PID/root` (which needs ptrace rights a
//! non-dumpable JVM would deny). If the JVM is in another mount namespace,
//! the child also `setns`es into it first, so that the connection is made
//! from inside the JVM's namespace as a `jcmd` run in the container would.
//!
//! A request that makes the JVM write a file by name (`Compiler.perfmap`
//! writes `/tmp/perf-<pid>.map`, following links, blocking on a FIFO) names
//! it as the request's *guard*: before connecting, the child, already the
//! JVM's user, creates it exclusively without following links, or finds a
//! regular file of that user's with one link there. Anything else (a FIFO,
//! a symlink, another user's file, a hard link, or a directory that others
//! may write without the sticky bit, where the file could be swapped
//! afterwards) and the request is not sent.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant};

use super::raw;

/// Why an exchange failed.
#[derive(Debug)]
pub(crate) enum ExchangeError {
    /// No complete reply within the timeout; the child was killed.
    Timeout,
    /// The reply exceeded the cap; the child was killed.
    TooLarge,
    /// A step in the child failed with an errno.
    Child { stage: &'static str, errno: i32 },
    /// The guard file is not safe to have the JVM write (see the module
    /// documentation); nothing was sent.
    Unsafe { check: GuardCheck, value: u32 },
    /// A step in the parent failed.
    Parent {
        stage: &'static str,
        source: io::Error,
    },
}

/// Child exit codes name the failed step; 0 is success.
const STAGES: [&str; 10] = [
    "ok",
    "setns",
    "fchdir",
    "setgroups",
    "setgid",
    "setuid",
    "socket",
    "connect",
    "send",
    "recv",
];
const ST_SETNS: i32 = 1;
const ST_FCHDIR: i32 = 2;
const ST_SETGROUPS: i32 = 3;
const ST_SETGID: i32 = 4;
const ST_SETUID: i32 = 5;
const ST_SOCKET: i32 = 6;
const ST_CONNECT: i32 = 7;
const ST_SEND: i32 = 8;
const ST_RECV: i32 = 9;
/// Guard checks: exit codes above the stages, the offending value in the
/// errno slot.
const ST_GUARD: i32 = 20;

/// Which check the guard file failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GuardCheck {
    /// Its directory is writable by others and not sticky (value: mode).
    OpenDirectory,
    /// It could not be created or looked at (value: errno).
    Create,
    /// Not a regular file (value: `st_mode & S_IFMT`).
    Kind,
    /// Owned by another user (value: its uid).
    Owner,
    /// More than one link (value: the link count).
    Links,
}

impl GuardCheck {
    const ALL: [GuardCheck; 5] = [
        GuardCheck::OpenDirectory,
        GuardCheck::Create,
        GuardCheck::Kind,
        GuardCheck::Owner,
        GuardCheck::Links,
    ];

    fn code(self) -> i32 {
        ST_GUARD + self as i32
    }

    fn from_code(code: i32) -> Option<Self> {
        Self::ALL.into_iter().find(|check| check.code() == code)
    }

    /// Why `name` (in `dir`) is refused, in words.
    pub(crate) fn describe(self, value: u32, dir: &Path, name: &str) -> String {
        let path = dir.join(name);
        let path = path.display();
        match self {
            GuardCheck::OpenDirectory => format!(
                "{} is writable by others without the sticky bit (mode {:o}): a file there can be swapped",
                dir.display(),
                value & 0o7777
            ),
            GuardCheck::Create => format!(
                "{path} cannot be created or checked: {}",
                io::Error::from_raw_os_error(value as i32)
            ),
            GuardCheck::Kind => format!("{path} is {}, not a regular file", file_kind(value)),
            GuardCheck::Owner => format!("{path} belongs to uid {value}, not to the JVM's user"),
            GuardCheck::Links => format!("{path} has {value} hard links"),
        }
    }
}

/// `st_mode & S_IFMT` in words.
pub(crate) fn file_kind(format: u32) -> &'static str {
    match format & libc::S_IFMT {
        libc::S_IFIFO => "a FIFO",
        libc::S_IFLNK => "a symbolic link",
        libc::S_IFDIR => "a directory",
        libc::S_IFSOCK => "a socket",
        libc::S_IFCHR => "a character device",
        libc::S_IFBLK => "a block device",
        libc::S_IFREG => "a regular file",
        _ => "of an unknown kind",
    }
}

/// What to connect to and as whom.
pub(crate) struct Request<'a> {
    /// Directory holding the socket, as seen from here (e.g. `/proc/PID/root/tmp`).
    pub dir: &'a Path,
    /// Socket file name inside `dir`.
    pub name: &'a str,
    /// Mount namespace to join first, if the JVM's differs from ours.
    pub mnt_ns: Option<&'a Path>,
    /// Credentials to connect with.
    pub uid: u32,
    /// Group to connect with.
    pub gid: u32,
    /// Bytes to send.
    pub payload: &'a [u8],
    /// Overall limit for connect + send + reply.
    pub timeout: Duration,
    /// Reply size cap.
    pub max_reply: usize,
    /// A file in `dir` the request makes the JVM write (see the module
    /// documentation), checked or created before anything is sent.
    pub guard: Option<&'a str>,
}

/// Everything the child needs, prepared before fork.
struct Plan {
    ns_fd: libc::c_int,
    dir_fd: libc::c_int,
    addr: libc::sockaddr_un,
    addr_len: libc::socklen_t,
    uid: libc::uid_t,
    gid: libc::gid_t,
    payload: *const u8,
    payload_len: usize,
    tv: libc::timeval,
    out_fd: libc::c_int,
    /// The guard file's name (NUL-terminated), or null.
    guard: *const libc::c_char,
}

fn parent_err(stage: &'static str) -> ExchangeError {
    ExchangeError::Parent {
        stage,
        source: io::Error::last_os_error(),
    }
}

fn open_fd(path: &Path, flags: libc::c_int, stage: &'static str) -> Result<OwnedFd, ExchangeError> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| ExchangeError::Parent {
        stage,
        source: io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"),
    })?;
    // SAFETY: valid C string; the fd is wrapped in OwnedFd at once.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(parent_err(stage));
    }
    // SAFETY: fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Runs the exchange; returns the raw reply bytes.
pub(crate) fn exchange(req: &Request<'_>) -> Result<Vec<u8>, ExchangeError> {
    let dir_fd = open_fd(
        req.dir,
        libc::O_PATH | libc::O_DIRECTORY,
        "open socket directory",
    )?;
    let ns_fd = match req.mnt_ns {
        Some(p) => Some(open_fd(p, libc::O_RDONLY, "open mount namespace")?),
        None => None,
    };

    // SAFETY: sockaddr_un is plain data; all-zero is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let name = req.name.as_bytes();
    if name.is_empty() || name.len() >= addr.sun_path.len() || name.contains(&0) {
        return Err(ExchangeError::Parent {
            stage: "socket address",
            source: io::Error::new(io::ErrorKind::InvalidInput, "bad socket name"),
        });
    }
    for (d, &s) in addr.sun_path.iter_mut().zip(name) {
        *d = s as libc::c_char;
    }
    let addr_len =
        (std::mem::offset_of!(libc::sockaddr_un, sun_path) + name.len() + 1) as libc::socklen_t;

    let guard = req
        .guard
        .map(|name| {
            CString::new(name).map_err(|_| ExchangeError::Parent {
                stage: "guard file name",
                source: io::Error::new(io::ErrorKind::InvalidInput, "NUL in name"),
            })
        })
        .transpose()?;

    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: fds is a valid 2-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(parent_err("pipe"));
    }
    // SAFETY: pipe2 just returned these fds to us.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };

    let plan = Plan {
        ns_fd: ns_fd.as_ref().map_or(-1, |f| f.as_raw_fd()),
        dir_fd: dir_fd.as_raw_fd(),
        addr,
        addr_len,
        uid: req.uid,
        gid: req.gid,
        payload: req.payload.as_ptr(),
        payload_len: req.payload.len(),
        tv: libc::timeval {
            tv_sec: req.timeout.as_secs() as libc::time_t,
            tv_usec: req.timeout.subsec_micros() as libc::suseconds_t,
        },
        out_fd: wr.as_raw_fd(),
        guard: guard
            .as_ref()
            .map_or(std::ptr::null(), |name| name.as_ptr()),
    };

    let start = Instant::now();
    // Dropped in the reverse order: the child (killed and reaped if still
    // there) before its stack, and both before the plan and what it points
    // to, which the child reads.
    let stack = ChildStack::new()?;
    let child = Child::start(&plan, &stack)?;
    drop(wr);
    drop(dir_fd);
    drop(ns_fd);
    let result = collect(rd, start + req.timeout, req.max_reply);
    let status = match result {
        Ok(_) => child.reap(),
        // Killed and reaped as it is dropped.
        Err(_) => None,
    };
    let mut data = result?;
    match status {
        // SIGCHLD ignored by the embedding program: the child was reaped
        // automatically and its status is lost; let the reply parser judge.
        None => Ok(data),
        Some(st) if libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0 => Ok(data),
        Some(st) if libc::WIFEXITED(st) => {
            let code = libc::WEXITSTATUS(st);
            let stage = STAGES.get(code as usize).copied().unwrap_or("child");
            let errno = if data.len() >= 4 {
                let tail = data.split_off(data.len() - 4);
                i32::from_ne_bytes([tail[0], tail[1], tail[2], tail[3]])
            } else {
                0
            };
            if let Some(check) = GuardCheck::from_code(code) {
                return Err(ExchangeError::Unsafe {
                    check,
                    value: errno as u32,
                });
            }
            if code == ST_RECV && errno == libc::EAGAIN {
                return Err(ExchangeError::Timeout);
            }
            Err(ExchangeError::Child { stage, errno })
        }
        Some(st) => Err(ExchangeError::Parent {
            stage: "attach child",
            source: io::Error::other(format!("killed by signal {}", libc::WTERMSIG(st))),
        }),
    }
}

/// Reads the pipe until EOF, the deadline or the size cap.
fn collect(rd: OwnedFd, deadline: Instant, max: usize) -> Result<Vec<u8>, ExchangeError> {
    let mut out = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ExchangeError::Timeout);
        }
        let mut pfd = libc::pollfd {
            fd: rd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(parent_err("poll"));
        }
        if n == 0 {
            continue; // deadline re-checked at the top
        }
        // SAFETY: buf is valid for buf.len() bytes.
        let r = unsafe { libc::read(rd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if r < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(parent_err("read pipe"));
        }
        if r == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&buf[..r as usize]);
        // +4: room for the child's errno trailer.
        if out.len() > max + 4 {
            return Err(ExchangeError::TooLarge);
        }
    }
}

/// Bytes of the child's stack: it needs a few KiB (an 8 KiB read buffer,
/// a `stat`), and a page below it is left unmapped, so that running past
/// it faults instead of writing over the parent's memory.
const CHILD_STACK: usize = 64 * 1024;

/// The stack the child runs on, unmapped when dropped.
struct ChildStack {
    base: *mut libc::c_void,
    len: usize,
}

impl ChildStack {
    fn new() -> Result<Self, ExchangeError> {
        // SAFETY: sysconf takes a name.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let len = CHILD_STACK + page;
        // SAFETY: a fresh anonymous mapping, ours alone.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(parent_err("child stack"));
        }
        let stack = Self { base, len };
        // The stack grows down: its lowest page is the guard.
        // SAFETY: the first page of the mapping just made.
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
            return Err(parent_err("child stack guard"));
        }
        Ok(stack)
    }

    /// Its top, 16-byte aligned, where the child starts.
    fn top(&self) -> *mut libc::c_void {
        // SAFETY: one past the end of the mapping, which is page aligned.
        unsafe { self.base.cast::<u8>().add(self.len).cast() }
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`; the child using it has been
        // reaped (`Child` is dropped first).
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// The child making the exchange. Dropped before it was reaped, it is
/// killed and reaped then: nothing it shares (its stack, the plan) may be
/// let go while it runs.
struct Child {
    pid: libc::pid_t,
    reaped: bool,
}

impl Child {
    /// Starts the child on `stack`, with every signal blocked (no handler
    /// of the parent's runs on the child's stack), running [`run_child`].
    fn start(plan: &Plan, stack: &ChildStack) -> Result<Self, ExchangeError> {
        extern "C" fn entry(plan: *mut libc::c_void) -> libc::c_int {
            // SAFETY: `start` passes the plan, which outlives this child.
            unsafe { run_child(&*plan.cast::<Plan>()) }
        }
        // SAFETY: sigset_t is plain data, filled before use.
        let (mut all, mut before): (libc::sigset_t, libc::sigset_t) =
            unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        // SAFETY: valid sets; the mask is this thread's, restored below.
        unsafe {
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut before);
        }
        // SAFETY: the child runs `entry` on its own stack, shares our
        // memory and touches only the plan and that stack (see `run_child`),
        // both kept until it is reaped.
        let pid = unsafe {
            libc::clone(
                entry,
                stack.top(),
                libc::CLONE_VM | libc::SIGCHLD,
                std::ptr::from_ref(plan).cast_mut().cast(),
            )
        };
        let err = io::Error::last_os_error();
        // SAFETY: restores this thread's own mask.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &before, std::ptr::null_mut()) };
        if pid < 0 {
            return Err(ExchangeError::Parent {
                stage: "clone",
                source: err,
            });
        }
        Ok(Self { pid, reaped: false })
    }

    /// Waits for the child; `None` if it was reaped elsewhere (SIGCHLD
    /// ignored by the embedding program: then `waitpid` returns once it has
    /// exited, without its status).
    fn reap(mut self) -> Option<libc::c_int> {
        self.wait()
    }

    /// [`Self::reap`], for `drop` too.
    fn wait(&mut self) -> Option<libc::c_int> {
        self.reaped = true;
        let mut st = 0;
        loop {
            // SAFETY: waiting for our own child.
            let r = unsafe { libc::waitpid(self.pid, &mut st, 0) };
            if r == self.pid {
                return Some(st);
            }
            if r < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return None;
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if !self.reaped {
            // SAFETY: our own child, not reaped yet: its pid is not reused.
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            self.wait();
        }
    }
}

/// The child. It shares the parent's memory: it writes only to its own
/// stack, allocates nothing, cannot panic (no indexing, no arithmetic that
/// can overflow), and makes its system calls through [`raw`]. Leaves with
/// [`raw::exit`].
///
/// # Safety
/// Only as the child [`Child::start`] starts, with the plan it was given.
unsafe fn run_child(p: &Plan) -> ! {
    use libc::{
        AF_UNIX, CLONE_NEWNS, MSG_NOSIGNAL, SO_RCVTIMEO, SO_SNDTIMEO, SOCK_CLOEXEC, SOCK_STREAM,
        SOL_SOCKET,
    };
    close_other_fds(p);
    if p.ns_fd >= 0 {
        // SAFETY: a descriptor the parent opened on a mount namespace.
        let joined = unsafe { sys(libc::SYS_setns, [p.ns_fd as usize, CLONE_NEWNS as usize]) };
        or_fail(p, joined, ST_SETNS);
    }
    // SAFETY: a directory descriptor the parent opened.
    or_fail(
        p,
        unsafe { sys(libc::SYS_fchdir, [p.dir_fd as usize]) },
        ST_FCHDIR,
    );
    // SAFETY: no groups (a null list of none).
    or_fail(p, unsafe { sys(libc::SYS_setgroups, [0, 0]) }, ST_SETGROUPS);
    // SAFETY: ids by value.
    or_fail(
        p,
        unsafe { sys(libc::SYS_setgid, [p.gid as usize]) },
        ST_SETGID,
    );
    // SAFETY: as above.
    or_fail(
        p,
        unsafe { sys(libc::SYS_setuid, [p.uid as usize]) },
        ST_SETUID,
    );
    if !p.guard.is_null() {
        // SAFETY: after the id switch and the `fchdir`.
        unsafe { check_guard(p) };
    }
    let flags = (SOCK_STREAM | SOCK_CLOEXEC) as usize;
    // SAFETY: arguments by value.
    let s = or_fail(
        p,
        unsafe { sys(libc::SYS_socket, [AF_UNIX as usize, flags, 0]) },
        ST_SOCKET,
    );
    let tv = std::ptr::from_ref(&p.tv) as usize;
    let tvl = std::mem::size_of::<libc::timeval>();
    for option in [SO_RCVTIMEO, SO_SNDTIMEO] {
        let level = SOL_SOCKET as usize;
        // SAFETY: a timeval of the plan's and its size. Best effort.
        let _ = unsafe { sys(libc::SYS_setsockopt, [s, level, option as usize, tv, tvl]) };
    }
    let addr = std::ptr::from_ref(&p.addr) as usize;
    loop {
        // SAFETY: the plan's address and its length.
        match unsafe { sys(libc::SYS_connect, [s, addr, p.addr_len as usize]) } {
            Err(libc::EINTR) => continue,
            connected => {
                or_fail(p, connected, ST_CONNECT);
                break;
            }
        }
    }
    let mut off = 0;
    while off < p.payload_len {
        // SAFETY: `off < payload_len`: inside the plan's payload.
        let at = unsafe { p.payload.add(off) } as usize;
        let left = p.payload_len - off;
        // SAFETY: that part of the payload, no address (a connected socket).
        let sent = unsafe { sys(libc::SYS_sendto, [s, at, left, MSG_NOSIGNAL as usize, 0, 0]) };
        match sent {
            Err(libc::EINTR) => {}
            sent => off += or_fail(p, sent, ST_SEND),
        }
    }
    let mut buf = [0u8; 8192];
    let room = (buf.as_mut_ptr() as usize, buf.len());
    loop {
        // SAFETY: into `buf`, on this stack.
        match unsafe { sys(libc::SYS_read, [s, room.0, room.1]) } {
            Ok(0) => break,
            Err(libc::EINTR) => {}
            read => {
                let n = or_fail(p, read, ST_RECV);
                // SAFETY: the `n <= buf.len()` bytes just read into `buf`.
                if unsafe { !write_all(p.out_fd, buf.as_ptr(), n) } {
                    raw::exit(125);
                }
            }
        }
    }
    raw::exit(0)
}

/// System call `nr` with the arguments given (the rest zero).
///
/// # Safety
/// As [`raw::syscall`].
unsafe fn sys<const N: usize>(nr: libc::c_long, given: [usize; N]) -> raw::SysResult {
    let mut args = [0usize; 6];
    for (arg, value) in args.iter_mut().zip(given) {
        *arg = value;
    }
    // SAFETY: as the caller's.
    unsafe { raw::syscall(nr, args) }
}

/// The value of `ret`; an error is reported as `stage`, and the child exits.
fn or_fail(p: &Plan, ret: raw::SysResult, stage: i32) -> usize {
    match ret {
        Ok(value) => value,
        Err(errno) => fail_with(p.out_fd, stage, errno as u32),
    }
}

/// In the child, as the JVM's user, in its `/tmp`: creates the guard file
/// exclusively without following links, or makes sure the one there is a
/// regular file of this user's with one link; exits with the failed
/// [`GuardCheck`] otherwise.
///
/// # Safety
/// Only in the child, after the id switch and the `fchdir`.
unsafe fn check_guard(p: &Plan) {
    let create = GuardCheck::Create.code();
    // SAFETY: stat is plain data.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let st_at = std::ptr::from_mut(&mut st) as usize;
    // SAFETY: the plan's directory, into `st` on this stack.
    or_fail(
        p,
        unsafe { sys(libc::SYS_fstat, [p.dir_fd as usize, st_at]) },
        create,
    );
    if st.st_mode & libc::S_IWOTH != 0 && st.st_mode & libc::S_ISVTX == 0 {
        fail_with(p.out_fd, GuardCheck::OpenDirectory.code(), st.st_mode);
    }
    let cwd = libc::AT_FDCWD as usize;
    let name = p.guard as usize;
    let flags = libc::O_WRONLY
        | libc::O_CREAT
        | libc::O_EXCL
        | libc::O_NOFOLLOW
        | libc::O_NONBLOCK
        | libc::O_CLOEXEC;
    // SAFETY: the plan's NUL-terminated name, relative to the directory.
    match unsafe { sys(libc::SYS_openat, [cwd, name, flags as usize, 0o600]) } {
        Ok(fd) => {
            // SAFETY: the descriptor just opened.
            let _ = unsafe { sys(libc::SYS_close, [fd]) };
            return;
        }
        Err(libc::EEXIST) => {}
        Err(errno) => fail_with(p.out_fd, create, errno as u32),
    }
    // Something is there: look at it without opening it (a FIFO would
    // block, a device could act) and without following a link.
    let flags = (libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC) as usize;
    // SAFETY: as above.
    let fd = or_fail(
        p,
        unsafe { sys(libc::SYS_openat, [cwd, name, flags]) },
        create,
    );
    // SAFETY: the descriptor just opened, into `st`.
    or_fail(p, unsafe { sys(libc::SYS_fstat, [fd, st_at]) }, create);
    // SAFETY: the descriptor just opened.
    let _ = unsafe { sys(libc::SYS_close, [fd]) };
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        fail_with(p.out_fd, GuardCheck::Kind.code(), st.st_mode & libc::S_IFMT);
    }
    if st.st_uid != p.uid {
        fail_with(p.out_fd, GuardCheck::Owner.code(), st.st_uid);
    }
    if st.st_nlink != 1 {
        fail_with(p.out_fd, GuardCheck::Links.code(), st.st_nlink as u32);
    }
}

/// Closes every descriptor but the plan's (and stdio), so that our pipe's
/// write end is not held open by unrelated inherited descriptors and theirs
/// are not held by us. Best effort: `close_range` needs Linux 5.9.
fn close_other_fds(p: &Plan) {
    let mut keep = [p.ns_fd, p.dir_fd, p.out_fd];
    keep.sort_unstable();
    let mut from: u32 = 3;
    for fd in keep {
        let Ok(fd) = u32::try_from(fd) else { continue };
        if fd > from {
            // SAFETY: our own (the child's) descriptor table.
            let _ = unsafe { sys(libc::SYS_close_range, [from as usize, (fd - 1) as usize, 0]) };
        }
        from = from.max(fd.saturating_add(1));
    }
    // SAFETY: as above.
    let _ = unsafe { sys(libc::SYS_close_range, [from as usize, u32::MAX as usize, 0]) };
}

/// Sends `value` in the errno slot, then exits with `stage`.
fn fail_with(out: libc::c_int, stage: i32, value: u32) -> ! {
    let bytes = (value as i32).to_ne_bytes();
    // SAFETY: four bytes on this stack, to our pipe.
    unsafe { write_all(out, bytes.as_ptr(), bytes.len()) };
    raw::exit(stage)
}

/// Writes `len` bytes at `p` to `fd`, through [`raw`].
///
/// # Safety
/// `p..p + len` must be readable.
unsafe fn write_all(fd: libc::c_int, mut p: *const u8, mut len: usize) -> bool {
    while len > 0 {
        // SAFETY: p..p+len is readable (the caller's).
        match unsafe { sys(libc::SYS_write, [fd as usize, p as usize, len]) } {
            Ok(n) => {
                let n = n.min(len);
                // SAFETY: n <= len.
                p = unsafe { p.add(n) };
                len -= n;
            }
            Err(libc::EINTR) => {}
            Err(_) => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::net::UnixListener;

    fn peer_cred(s: &std::os::unix::net::UnixStream) -> libc::ucred {
        let mut cred = libc::ucred {
            pid: 0,
            uid: 0,
            gid: 0,
        };
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: valid buffer and length for SO_PEERCRED.
        let r = unsafe {
            libc::getsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                (&mut cred as *mut libc::ucred).cast(),
                &mut len,
            )
        };
        assert_eq!(r, 0);
        cred
    }

    /// The child really connects with the requested uid/gid (what HotSpot
    /// checks), and the calling process keeps its own ids.
    #[test]
    fn child_connects_with_requested_credentials() {
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let sock = d.path().join("s");
        let l = UnixListener::bind(&sock).unwrap();
        std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o777)).unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let cred = peer_cred(&s);
            let mut req = [0u8; 5];
            s.read_exact(&mut req).unwrap();
            s.write_all(b"0\nhello\n").unwrap();
            (cred.uid, cred.gid, req)
        });
        let reply = exchange(&Request {
            dir: d.path(),
            name: "s",
            mnt_ns: None,
            uid: 65534,
            gid: 65534,
            payload: b"1\0x\0\0",
            timeout: Duration::from_secs(5),
            max_reply: 1024,
            guard: None,
        })
        .unwrap();
        assert_eq!(reply, b"0\nhello\n");
        let (uid, gid, req) = server.join().unwrap();
        assert_eq!((uid, gid), (65534, 65534));
        assert_eq!(&req, b"1\0x\0\0");
        // SAFETY: trivial getters.
        assert_eq!(unsafe { (libc::geteuid(), libc::getegid()) }, (0, 0));
    }

    /// A request to a socket `dir` does not have, as root.
    fn to_missing_socket(dir: &Path) -> Request<'_> {
        Request {
            dir,
            name: "missing",
            mnt_ns: None,
            uid: 0,
            gid: 0,
            payload: b"x",
            timeout: Duration::from_secs(5),
            max_reply: 1024,
            guard: None,
        }
    }

    #[test]
    fn connect_failure_reports_stage() {
        let d = tempfile::tempdir().unwrap();
        let err = exchange(&to_missing_socket(d.path())).unwrap_err();
        match err {
            ExchangeError::Child { stage, errno } => {
                assert_eq!((stage, errno), ("connect", libc::ENOENT));
            }
            other => panic!("{other:?}"),
        }
    }

    /// The child shares our memory: a failing one leaves the errno of the
    /// thread that made it alone (libc's wrappers in the child would write
    /// it), and our pages are not made copy-on-write (a fork makes every
    /// page written after it fault again).
    #[test]
    fn the_child_shares_memory_without_touching_the_callers() {
        let pages = 4096;
        let mut memory = vec![1u8; pages * 4096];
        let d = tempfile::tempdir().unwrap();
        let faults = || {
            // SAFETY: rusage is plain data, filled by getrusage.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: this thread's usage into `usage`.
            assert_eq!(
                unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) },
                0
            );
            usage.ru_minflt
        };
        // SAFETY: this thread's errno.
        unsafe { *libc::__errno_location() = libc::EDOM };
        let err = exchange(&to_missing_socket(d.path())).unwrap_err();
        // SAFETY: as above.
        let errno = unsafe { *libc::__errno_location() };
        assert!(
            matches!(
                err,
                ExchangeError::Child {
                    stage: "connect",
                    errno: libc::ENOENT
                }
            ),
            "{err:?}"
        );
        assert_eq!(errno, libc::EDOM, "the child wrote its errno into ours");
        let before = faults();
        for page in memory.chunks_mut(4096) {
            page[0] = 2;
        }
        let after = faults();
        assert!(
            after - before < pages as i64 / 8,
            "{} of {pages} pages faulted again",
            after - before
        );
        assert!(
            std::hint::black_box(&memory)
                .iter()
                .step_by(4096)
                .all(|&b| b == 2)
        );
    }

    #[test]
    fn silent_peer_times_out() {
        let d = tempfile::tempdir().unwrap();
        let l = UnixListener::bind(d.path().join("s")).unwrap();
        let t0 = Instant::now();
        let err = exchange(&Request {
            dir: d.path(),
            name: "s",
            mnt_ns: None,
            uid: 0,
            gid: 0,
            payload: b"x",
            timeout: Duration::from_millis(300),
            max_reply: 1024,
            guard: None,
        })
        .unwrap_err();
        assert!(matches!(err, ExchangeError::Timeout), "{err:?}");
        assert!(t0.elapsed() < Duration::from_secs(3));
        drop(l);
    }
}
