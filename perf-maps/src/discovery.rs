//! Where a process's perf map is, and who owns the process.
//!
//! A runtime writes `/tmp/perf-<pid>.map` using *its own* view: its mount
//! namespace's `/tmp` and its PID as seen in its own PID namespace. From the
//! host, a containerised process's map is therefore
//! `/proc/PID/root/tmp/perf-<nspid>.map`, where nspid is the last (innermost)
//! field of the `NStgid:` line in `/proc/PID/status`. For a process in our
//! own namespaces this is simply `/tmp/perf-<pid>.map`, reached through the
//! `/proc/PID/root` magic link, which also handles a chrooted process.

use std::io;
use std::path::PathBuf;

/// Errors reading `/proc/PID/...`.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// `/proc/PID` does not exist: the process has exited.
    #[error("process {pid} does not exist")]
    NoSuchProcess {
        /// The PID.
        pid: u32,
    },
    /// Some other error reading procfs.
    #[error("reading /proc/{pid}/{file}: {source}")]
    Io {
        /// The PID.
        pid: u32,
        /// Which file.
        file: &'static str,
        /// The error.
        source: io::Error,
    },
    /// A field we need is missing or unparsable.
    #[error("/proc/{pid}/status: cannot parse {field}")]
    Malformed {
        /// The PID.
        pid: u32,
        /// The field.
        field: &'static str,
    },
}

/// A process owner. We use the **effective** ids: they are what the kernel
/// puts on files the process creates (the fs ids follow the effective ones
/// unless changed with `setfsuid`, which JVMs and CPython don't), and what
/// HotSpot compares attach peers against. Real ids differ only for setuid
/// programs, which a JVM is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    /// Effective uid.
    pub uid: u32,
    /// Effective gid.
    pub gid: u32,
}

/// The fields of `/proc/PID/status` this crate uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStatus {
    /// The PID (in our namespace).
    pub pid: u32,
    /// `Name:` (the comm).
    pub name: String,
    /// First letter of `State:` (`R`, `S`, `Z`, ...).
    pub state: char,
    /// `NStgid:`, outermost namespace first. Kernels before 4.1 lack it; then
    /// it is just `[pid]`.
    pub nstgid: Vec<u32>,
    /// `Uid:` real, effective, saved, filesystem.
    pub uid: [u32; 4],
    /// `Gid:` real, effective, saved, filesystem.
    pub gid: [u32; 4],
    /// `SigCgt:`: signals with a handler installed (bit N-1 for signal N).
    pub sig_cgt: u64,
}

impl ProcStatus {
    /// Reads `/proc/PID/status` (through the procfs crate).
    pub fn read(pid: u32) -> Result<Self, DiscoveryError> {
        let status = process(pid)?
            .status()
            .map_err(|err| proc_error(pid, "status", err))?;
        Ok(Self::from_procfs(pid, status))
    }

    /// Parses the text of a status file.
    pub fn parse(pid: u32, text: &str) -> Result<Self, DiscoveryError> {
        use procfs::FromBufRead as _;
        let status = procfs::process::Status::from_buf_read(text.as_bytes()).map_err(|_| {
            DiscoveryError::Malformed {
                pid,
                field: "status",
            }
        })?;
        Ok(Self::from_procfs(pid, status))
    }

    fn from_procfs(pid: u32, status: procfs::process::Status) -> Self {
        let nstgid: Vec<u32> = status
            .nstgid
            .unwrap_or_default()
            .into_iter()
            .filter_map(|id| u32::try_from(id).ok())
            .collect();
        ProcStatus {
            pid,
            name: status.name,
            state: status.state.chars().next().unwrap_or('?'),
            // Kernels before 4.1 lack NStgid: then it is just the PID.
            nstgid: if nstgid.is_empty() { vec![pid] } else { nstgid },
            uid: [status.ruid, status.euid, status.suid, status.fuid],
            gid: [status.rgid, status.egid, status.sgid, status.fgid],
            sig_cgt: status.sigcgt,
        }
    }

    /// The PID as the process sees itself (innermost PID namespace).
    pub fn ns_pid(&self) -> u32 {
        *self.nstgid.last().unwrap_or(&self.pid)
    }

    /// The effective uid/gid (see [`Owner`] for why effective).
    pub fn owner(&self) -> Owner {
        Owner {
            uid: self.uid[1],
            gid: self.gid[1],
        }
    }

    /// True if the process has a handler for signal `sig` (1-based, as in
    /// `SIGQUIT` = 3; signal N is bit N-1 of the mask).
    pub fn catches(&self, sig: i32) -> bool {
        (1..=64).contains(&sig) && self.sig_cgt & (1u64 << (sig - 1)) != 0
    }

    /// True for a zombie or dead process: it has exited, even though
    /// `/proc/PID` is still there until its parent reaps it.
    pub fn has_exited(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// A process's /proc entry, through the procfs crate.
pub(crate) fn process(pid: u32) -> Result<procfs::process::Process, DiscoveryError> {
    let id = i32::try_from(pid).map_err(|_| DiscoveryError::NoSuchProcess { pid })?;
    procfs::process::Process::new(id).map_err(|err| proc_error(pid, "", err))
}

/// A procfs error as ours: a process that is gone is
/// [`DiscoveryError::NoSuchProcess`].
pub(crate) fn proc_error(pid: u32, file: &'static str, err: procfs::ProcError) -> DiscoveryError {
    use procfs::ProcError;
    let source = match err {
        ProcError::NotFound(_) => return DiscoveryError::NoSuchProcess { pid },
        ProcError::Io(source, _) => source,
        ProcError::PermissionDenied(_) => io::ErrorKind::PermissionDenied.into(),
        other => io::Error::new(io::ErrorKind::InvalidData, other.to_string()),
    };
    match source.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ESRCH) => DiscoveryError::NoSuchProcess { pid },
        _ => DiscoveryError::Io { pid, file, source },
    }
}

/// The process's PID in its own (innermost) PID namespace.
pub fn ns_pid(pid: u32) -> Result<u32, DiscoveryError> {
    Ok(ProcStatus::read(pid)?.ns_pid())
}

/// The process's effective uid/gid.
pub fn process_owner(pid: u32) -> Result<Owner, DiscoveryError> {
    Ok(ProcStatus::read(pid)?.owner())
}

/// `/proc/PID/root/tmp`: the process's `/tmp`, seen from the host.
pub fn proc_tmp_dir(pid: u32) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/root/tmp"))
}

/// The map path for a process whose namespace PID is already known.
pub fn perf_map_path_for(pid: u32, nspid: u32) -> PathBuf {
    proc_tmp_dir(pid).join(format!("perf-{nspid}.map"))
}

/// `/proc/PID/root/tmp/perf-<nspid>.map`.
pub fn perf_map_path(pid: u32) -> Result<PathBuf, DiscoveryError> {
    Ok(perf_map_path_for(pid, ns_pid(pid)?))
}

/// Everything needed to open a process's map safely, from one read of
/// `/proc/PID/status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerfMapLocation {
    /// PID in our namespace.
    pub pid: u32,
    /// PID in the process's namespace (the number in the file name).
    pub nspid: u32,
    /// Path to the map, through `/proc/PID/root`.
    pub path: PathBuf,
    /// The process owner, who must own the file (or root).
    pub owner: Owner,
}

/// Locates process `pid`'s perf map.
pub fn locate(pid: u32) -> Result<PerfMapLocation, DiscoveryError> {
    let st = ProcStatus::read(pid)?;
    let nspid = st.ns_pid();
    Ok(PerfMapLocation {
        pid,
        nspid,
        path: perf_map_path_for(pid, nspid),
        owner: st.owner(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A status file as the kernel writes it (the fields procfs requires),
    /// with these values.
    fn status(state: &str, nstgid: Option<&str>, uid: &str, gid: &str, sigcgt: &str) -> String {
        let nstgid = nstgid
            .map(|ids| format!("NStgid:\t{ids}\n"))
            .unwrap_or_default();
        format!(
            "Name:\tjava\nUmask:\t0022\nState:\t{state}\nTgid:\t4242\nNgid:\t0\nPid:\t4242\n\
             PPid:\t1\nTracerPid:\t0\nUid:\t{uid}\nGid:\t{gid}\nFDSize:\t64\nGroups:\t\n\
             {nstgid}Threads:\t1\nSigQ:\t0/1000\nSigPnd:\t0000000000000000\n\
             ShdPnd:\t0000000000000000\nSigBlk:\t0000000000000000\n\
             SigIgn:\t0000000000000000\nSigCgt:\t{sigcgt}\nCapInh:\t0000000000000000\n\
             CapPrm:\t0000000000000000\nCapEff:\t0000000000000000\n"
        )
    }

    #[test]
    fn parse_container_status() {
        let text = status(
            "S (sleeping)",
            Some("4242\t17"),
            "1000\t1001\t1002\t1003",
            "2000\t2001\t2002\t2003",
            "0000000000000004",
        );
        let st = ProcStatus::parse(4242, &text).unwrap();
        assert_eq!(st.ns_pid(), 17);
        assert_eq!(
            st.owner(),
            Owner {
                uid: 1001,
                gid: 2001
            }
        );
        assert!(st.catches(libc::SIGQUIT));
        assert!(!st.catches(libc::SIGINT));
        assert!(!st.catches(0));
        assert!(!st.has_exited());
        assert_eq!(st.name, "java");
        assert_eq!(
            perf_map_path_for(4242, st.ns_pid()),
            PathBuf::from("/proc/4242/root/tmp/perf-17.map")
        );
    }

    #[test]
    fn missing_nstgid_falls_back_to_pid() {
        let text = status("Z (zombie)", None, "0 0 0 0", "0 0 0 0", "0000000000000000");
        let st = ProcStatus::parse(5, &text).unwrap();
        assert_eq!(st.ns_pid(), 5);
        assert!(st.has_exited());
    }

    #[test]
    fn malformed_status() {
        assert!(ProcStatus::parse(1, "Gid:\t0 0 0 0\n").is_err());
        let bad_uid = status(
            "S (sleeping)",
            None,
            "0 x 0 0",
            "0 0 0 0",
            "0000000000000000",
        );
        assert!(ProcStatus::parse(1, &bad_uid).is_err());
    }

    #[test]
    fn own_process() {
        let me = std::process::id();
        let loc = locate(me).unwrap();
        // Tests run in the host namespaces here.
        assert_eq!(loc.nspid, ns_pid(me).unwrap());
        // SAFETY: trivial getters.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        assert_eq!(loc.owner, Owner { uid, gid });
        assert!(
            loc.path
                .to_str()
                .unwrap()
                .ends_with(&format!("/root/tmp/perf-{}.map", loc.nspid))
        );
    }

    #[test]
    fn missing_process() {
        // PIDs are below 2^22 on Linux.
        let err = ProcStatus::read(u32::MAX - 1).unwrap_err();
        assert!(matches!(err, DiscoveryError::NoSuchProcess { .. }), "{err}");
    }
}
