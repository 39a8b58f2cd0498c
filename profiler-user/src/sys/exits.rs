//! Which processes exited, told by the kernel: a pidfd per process, all
//! polled at once. Reading `/proc/PID/stat` of every known process at
//! every drain to find the gone ones cost a few system calls each, a
//! second, for every process on the host (kernel threads included); one
//! `poll` over the pidfds costs one. A pidfd names exactly one process, so
//! a PID reused by another is not taken for the one that exited.

use std::{
    collections::{HashMap, HashSet},
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
};

/// Processes watched for their exit.
#[derive(Debug)]
pub struct Exits {
    fds: HashMap<u32, OwnedFd>,
    /// Pidfds held at most: the rest of the file descriptors stay free for
    /// everything else (perf events, maps, output files).
    limit: usize,
}

impl Default for Exits {
    fn default() -> Self {
        Self::new()
    }
}

impl Exits {
    pub fn new() -> Self {
        Self {
            fds: HashMap::new(),
            limit: open_files_limit() / 2,
        }
    }

    /// Watches `pid` from now on. `false`: it cannot be (it is gone, or
    /// too many are watched): the caller checks it its own way.
    ///
    /// Called before what the caller reads of the process: if that read
    /// finds the process, the pidfd is of that same process.
    pub fn watch(&mut self, pid: u32) -> bool {
        if self.fds.contains_key(&pid) {
            return true;
        }
        if self.fds.len() >= self.limit {
            return false;
        }
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        if fd < 0 {
            return false;
        }
        // SAFETY: the fd was just returned to us and is owned by no one else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        self.fds.insert(pid, fd);
        true
    }

    /// Whether `pid` is watched.
    pub fn watches(&self, pid: u32) -> bool {
        self.fds.contains_key(&pid)
    }

    /// Stops watching `pid`.
    pub fn forget(&mut self, pid: u32) {
        self.fds.remove(&pid);
    }

    /// How many are watched.
    pub fn len(&self) -> usize {
        self.fds.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fds.is_empty()
    }

    /// The watched processes that have exited (zombies included: they run
    /// no more), in one system call; they are still watched until
    /// [`forget`](Self::forget). `None`: the poll failed, and the caller
    /// checks its own way.
    pub fn exited(&self) -> Option<HashSet<u32>> {
        let (pids, mut polled): (Vec<u32>, Vec<libc::pollfd>) = self
            .fds
            .iter()
            .map(|(&pid, fd)| {
                (
                    pid,
                    libc::pollfd {
                        fd: fd.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    },
                )
            })
            .unzip();
        if polled.is_empty() {
            return Some(HashSet::new());
        }
        // SAFETY: `polled` is a valid array of `polled.len()` pollfds; a
        // timeout of 0 returns at once.
        let ready = unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, 0) };
        if ready < 0 {
            return None;
        }
        Some(
            pids.into_iter()
                .zip(&polled)
                .filter(|(_, p)| p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLNVAL) != 0)
                .map(|(pid, _)| pid)
                .collect(),
        )
    }
}

/// This process's soft limit on open files.
fn open_files_limit() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 1024;
    }
    usize::try_from(limit.rlim_cur)
        .unwrap_or(usize::MAX)
        .min(1 << 20)
}

/// Raises this process's soft limit on open files to its hard limit (a
/// daemon watching every process of a host holds a pidfd per process;
/// the soft limit is often 1024 where the hard one is far higher).
pub fn raise_open_files_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write the struct given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_seen_exiting_and_a_gone_pid_is_not_watched() {
        let mut exits = Exits::new();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let pid = child.id();
        assert!(exits.watch(pid));
        assert!(exits.watch(std::process::id()));
        assert_eq!(exits.exited(), Some(HashSet::new()));
        child.kill().unwrap();
        // A zombie until reaped: exited all the same.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !exits.exited().unwrap().contains(&pid) {
            assert!(std::time::Instant::now() < deadline, "exit not seen");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(!exits.exited().unwrap().contains(&std::process::id()));
        child.wait().unwrap();
        exits.forget(pid);
        assert!(!exits.watches(pid));
        // Reaped: no pidfd can be had for it any more.
        assert!(!exits.watch(pid));
        assert_eq!(exits.len(), 1);
    }
}
