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
//! Fork in a multi-threaded process: the child may only do async-signal-safe
//! work. Everything (paths, the request bytes, the socket address, open
//! descriptors) is prepared before `fork`; the child makes raw system calls
//! only, never allocates, and leaves with `_exit`. Id changes use the raw
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
    // SAFETY: fork is safe to call; the child runs only async-signal-safe
    // code (see `child`) and never returns.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(parent_err("fork"));
    }
    if child == 0 {
        // SAFETY: we are the child of a fork; `plan` was built before it.
        unsafe { run_child(&plan) }
    }
    drop(wr);
    drop(dir_fd);
    drop(ns_fd);
    let result = collect(rd, start + req.timeout, req.max_reply);
    if result.is_err() {
        // SAFETY: `child` is our own child process, not yet reaped.
        unsafe { libc::kill(child, libc::SIGKILL) };
    }
    let status = reap(child);
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

/// Waits for the child; `None` if it was already reaped elsewhere.
fn reap(child: libc::pid_t) -> Option<libc::c_int> {
    let mut st = 0;
    loop {
        // SAFETY: waiting for our own child.
        let r = unsafe { libc::waitpid(child, &mut st, 0) };
        if r == child {
            return Some(st);
        }
        if r < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        return None;
    }
}

/// The child: raw syscalls only (async-signal-safe), no allocation, `_exit`.
///
/// # Safety
/// Must only be called in the child right after `fork`.
unsafe fn run_child(p: &Plan) -> ! {
    // SAFETY (whole body): raw system calls on descriptors and memory that
    // were set up before fork and are still valid in this child.
    unsafe {
        close_other_fds(&[p.ns_fd, p.dir_fd, p.out_fd]);
        if p.ns_fd >= 0 && libc::setns(p.ns_fd, libc::CLONE_NEWNS) != 0 {
            fail(p.out_fd, ST_SETNS);
        }
        if libc::fchdir(p.dir_fd) != 0 {
            fail(p.out_fd, ST_FCHDIR);
        }
        if libc::syscall(libc::SYS_setgroups, 0usize, std::ptr::null::<libc::gid_t>()) != 0 {
            fail(p.out_fd, ST_SETGROUPS);
        }
        if libc::syscall(libc::SYS_setgid, p.gid as libc::c_long) != 0 {
            fail(p.out_fd, ST_SETGID);
        }
        if libc::syscall(libc::SYS_setuid, p.uid as libc::c_long) != 0 {
            fail(p.out_fd, ST_SETUID);
        }
        if !p.guard.is_null() {
            check_guard(p);
        }
        let s = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            fail(p.out_fd, ST_SOCKET);
        }
        let tvp = (&p.tv as *const libc::timeval).cast();
        let tvl = std::mem::size_of::<libc::timeval>() as libc::socklen_t;
        libc::setsockopt(s, libc::SOL_SOCKET, libc::SO_RCVTIMEO, tvp, tvl);
        libc::setsockopt(s, libc::SOL_SOCKET, libc::SO_SNDTIMEO, tvp, tvl);
        let addr = (&p.addr as *const libc::sockaddr_un).cast::<libc::sockaddr>();
        while libc::connect(s, addr, p.addr_len) != 0 {
            if *libc::__errno_location() != libc::EINTR {
                fail(p.out_fd, ST_CONNECT);
            }
        }
        let mut off = 0;
        while off < p.payload_len {
            let n = libc::send(
                s,
                p.payload.add(off).cast(),
                p.payload_len - off,
                libc::MSG_NOSIGNAL,
            );
            if n < 0 {
                if *libc::__errno_location() == libc::EINTR {
                    continue;
                }
                fail(p.out_fd, ST_SEND);
            }
            off += n as usize;
        }
        let mut buf = [0u8; 8192];
        loop {
            let n = libc::read(s, buf.as_mut_ptr().cast(), buf.len());
            if n == 0 {
                break;
            }
            if n < 0 {
                if *libc::__errno_location() == libc::EINTR {
                    continue;
                }
                fail(p.out_fd, ST_RECV);
            }
            if !write_all(p.out_fd, buf.as_ptr(), n as usize) {
                libc::_exit(125);
            }
        }
        libc::_exit(0)
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
    // SAFETY (whole body): raw system calls on a NUL-terminated name and a
    // stat buffer on this stack.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(p.dir_fd, &mut st) != 0 {
            fail(p.out_fd, GuardCheck::Create.code());
        }
        if st.st_mode & libc::S_IWOTH != 0 && st.st_mode & libc::S_ISVTX == 0 {
            fail_with(p.out_fd, GuardCheck::OpenDirectory.code(), st.st_mode);
        }
        let flags = libc::O_WRONLY
            | libc::O_CREAT
            | libc::O_EXCL
            | libc::O_NOFOLLOW
            | libc::O_NONBLOCK
            | libc::O_CLOEXEC;
        let fd = libc::open(p.guard, flags, 0o600 as libc::c_uint);
        if fd >= 0 {
            libc::close(fd);
            return;
        }
        if *libc::__errno_location() != libc::EEXIST {
            fail(p.out_fd, GuardCheck::Create.code());
        }
        // Something is there: look at it without opening it (a FIFO would
        // block, a device could act) and without following a link.
        let fd = libc::open(p.guard, libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC);
        if fd < 0 || libc::fstat(fd, &mut st) != 0 {
            fail(p.out_fd, GuardCheck::Create.code());
        }
        libc::close(fd);
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
}

/// Closes every descriptor except `keep` (and stdio), so that our pipe's write
/// end is not held open by unrelated inherited descriptors and theirs are
/// not held by us. Best effort: `close_range` needs Linux 5.9.
unsafe fn close_other_fds(keep: &[libc::c_int]) {
    let mut k = [keep[0], keep[1], keep[2]];
    k.sort_unstable();
    let mut from: libc::c_uint = 3;
    for &fd in &k {
        if fd < 0 {
            continue;
        }
        let fd = fd as libc::c_uint;
        if fd > from {
            // SAFETY: raw syscall on our own descriptor table.
            unsafe { libc::syscall(libc::SYS_close_range, from, fd - 1, 0) };
        }
        from = from.max(fd + 1);
    }
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_close_range, from, libc::c_uint::MAX, 0) };
}

/// Sends errno to the parent, then exits with the stage code.
unsafe fn fail(out: libc::c_int, stage: i32) -> ! {
    // SAFETY: errno location is thread-local and valid; out is our pipe.
    unsafe {
        let e = (*libc::__errno_location()).to_ne_bytes();
        write_all(out, e.as_ptr(), e.len());
        libc::_exit(stage)
    }
}

/// Sends `value` in the errno slot, then exits with `stage`.
unsafe fn fail_with(out: libc::c_int, stage: i32, value: u32) -> ! {
    // SAFETY: out is our pipe.
    unsafe {
        let bytes = (value as i32).to_ne_bytes();
        write_all(out, bytes.as_ptr(), bytes.len());
        libc::_exit(stage)
    }
}

unsafe fn write_all(fd: libc::c_int, mut p: *const u8, mut len: usize) -> bool {
    while len > 0 {
        // SAFETY: p..p+len is valid memory owned by the caller.
        let n = unsafe { libc::write(fd, p.cast(), len) };
        if n < 0 {
            // SAFETY: thread-local errno.
            if unsafe { *libc::__errno_location() } == libc::EINTR {
                continue;
            }
            return false;
        }
        // SAFETY: n <= len.
        p = unsafe { p.add(n as usize) };
        len -= n as usize;
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

    #[test]
    fn connect_failure_reports_stage() {
        let d = tempfile::tempdir().unwrap();
        let err = exchange(&Request {
            dir: d.path(),
            name: "missing",
            mnt_ns: None,
            uid: 0,
            gid: 0,
            payload: b"x",
            timeout: Duration::from_secs(5),
            max_reply: 1024,
            guard: None,
        })
        .unwrap_err();
        match err {
            ExchangeError::Child { stage, errno } => {
                assert_eq!((stage, errno), ("connect", libc::ENOENT));
            }
            other => panic!("{other:?}"),
        }
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
