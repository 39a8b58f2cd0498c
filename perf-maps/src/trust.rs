//! Opening a perf map only if its owner could legitimately have written it.
//!
//! `/tmp` is world-writable, so any local user can create
//! `/tmp/perf-<pid>.map` before (or instead of) the process it is named
//! after, and make our profiles lie. We run as root and read these files for
//! every process on the host, so the rule is: **the file's owner must be the
//! process's owner (its effective uid, which is what a process creates files
//! with) or root**. Root is allowed because a root-run process writes its own
//! map as root, and root can do anything anyway.
//!
//! The checks are made on the opened descriptor (`fstat`), never on the path
//! before opening, so there is no window to swap the file in between:
//! - `O_NOFOLLOW`: the final component must not be a symlink (a symlink in
//!   `/tmp` could point at any file on the host, which we would then read as
//!   root). Intermediate magic links such as `/proc/PID/root` are fine and
//!   are how we see into containers.
//! - `O_NONBLOCK`: opening a FIFO planted under that name must not hang us.
//! - regular file only; size capped (default 256 MiB) so that a huge or
//!   sparse file cannot make us allocate without bound.
//!
//! Group- or world-writable files: accepted by default. A runtime started
//! with `umask 0` legitimately writes a 0666 map (the JDK and CPython both
//! create it with `fopen`), and refusing would lose all its names. The worst
//! another user can do by writing into such a file is make names wrong: the
//! contents are only ever parsed as text (bounded, never fatal), never
//! executed or used as paths. [`TrustPolicy::refuse_writable_by_others`]
//! turns this into a refusal for callers that prefer to be strict.

use std::fs::File;
use std::io;
use std::os::fd::FromRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::discovery::{self, DiscoveryError};

/// Default size cap: ~10x the largest map seen on a long-running Spark
/// executor, still small enough to read in one go.
pub const DEFAULT_MAX_SIZE: u64 = 256 * 1024 * 1024;

/// What a perf map must satisfy to be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustPolicy {
    /// The uid the file must belong to (besides root): the process owner.
    pub expected_uid: u32,
    /// Largest accepted file size in bytes.
    pub max_size: u64,
    /// Refuse files that are group- or world-writable (see module docs).
    pub refuse_writable_by_others: bool,
}

impl TrustPolicy {
    /// A policy for files owned by `uid` (or root), with the default size cap.
    /// Use this directly in tests, or when the owner is already known.
    pub fn for_uid(uid: u32) -> Self {
        TrustPolicy {
            expected_uid: uid,
            max_size: DEFAULT_MAX_SIZE,
            refuse_writable_by_others: false,
        }
    }

    /// A policy for the map of process `pid`: its effective uid, read from
    /// `/proc/PID/status`.
    pub fn for_pid(pid: u32) -> Result<Self, DiscoveryError> {
        Ok(Self::for_uid(discovery::process_owner(pid)?.uid))
    }

    /// Sets the size cap.
    pub fn with_max_size(mut self, max_size: u64) -> Self {
        self.max_size = max_size;
        self
    }

    /// Sets whether group/world-writable files are refused.
    pub fn with_refuse_writable_by_others(mut self, refuse: bool) -> Self {
        self.refuse_writable_by_others = refuse;
        self
    }
}

/// What kind of non-regular file was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A directory.
    Directory,
    /// A named pipe.
    Fifo,
    /// A UNIX socket.
    Socket,
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
    /// Anything else.
    Other,
}

impl FileKind {
    fn from_mode(mode: u32) -> Self {
        match mode & libc::S_IFMT {
            libc::S_IFDIR => FileKind::Directory,
            libc::S_IFIFO => FileKind::Fifo,
            libc::S_IFSOCK => FileKind::Socket,
            libc::S_IFCHR => FileKind::CharDevice,
            libc::S_IFBLK => FileKind::BlockDevice,
            _ => FileKind::Other,
        }
    }
}

/// Why a map was not opened. Each variant says why, so `doctor`-style output
/// and logs can tell "not there yet" from "someone planted this".
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// No such file (yet): the runtime has not written a map, or the process
    /// is gone.
    #[error("{path}: no such file")]
    NotFound {
        /// The path tried.
        path: PathBuf,
    },
    /// The final path component is a symbolic link.
    #[error("{path}: is a symbolic link, refusing to follow it")]
    Symlink {
        /// The path tried.
        path: PathBuf,
    },
    /// Not a regular file.
    #[error("{path}: not a regular file ({kind:?})")]
    NotRegular {
        /// The path tried.
        path: PathBuf,
        /// What it is instead.
        kind: FileKind,
    },
    /// Owned by someone other than the process owner and root.
    #[error("{path}: owned by uid {file_uid}, but the process runs as uid {process_uid}")]
    WrongOwner {
        /// The path tried.
        path: PathBuf,
        /// The file's owner.
        file_uid: u32,
        /// The expected owner.
        process_uid: u32,
    },
    /// Larger than the policy's cap.
    #[error("{path}: {size} bytes, larger than the cap of {max} bytes")]
    TooLarge {
        /// The path tried.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The cap.
        max: u64,
    },
    /// Group- or world-writable while the policy refuses that.
    #[error("{path}: writable by group or others (mode {mode:o})")]
    WritableByOthers {
        /// The path tried.
        path: PathBuf,
        /// Permission bits.
        mode: u32,
    },
    /// Any other I/O error (permission denied, too many open files, ...).
    #[error("{path}: {source}")]
    Io {
        /// The path tried.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
}

/// Identity and state of an opened file, from `fstat`: enough to tell later
/// whether it grew, shrank or was replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    /// Device of the file system.
    pub dev: u64,
    /// Inode number.
    pub ino: u64,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, seconds.
    pub mtime_sec: i64,
    /// Modification time, nanoseconds.
    pub mtime_nsec: i64,
}

impl FileStamp {
    /// From `std` metadata (from `fstat` or `lstat`).
    pub fn from_metadata(m: &std::fs::Metadata) -> Self {
        FileStamp {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_sec: m.mtime(),
            mtime_nsec: m.mtime_nsec(),
        }
    }
}

/// A map file that passed the checks, with the `fstat` result it passed them
/// with.
#[derive(Debug)]
pub struct TrustedFile {
    /// The open file (read-only, close-on-exec).
    pub file: File,
    /// Its state when checked.
    pub stamp: FileStamp,
    /// Its owner.
    pub uid: u32,
    /// Its permission bits.
    pub mode: u32,
}

/// Opens `path` read-only and checks it against `policy` (see the module docs
/// for the rules and why).
pub fn open_trusted(path: &Path, policy: &TrustPolicy) -> Result<TrustedFile, Refused> {
    let file = open_nofollow(path)?;
    let meta = file.metadata().map_err(|source| Refused::Io {
        path: path.to_owned(),
        source,
    })?;
    let mode = meta.mode();
    if mode & libc::S_IFMT != libc::S_IFREG {
        return Err(Refused::NotRegular {
            path: path.to_owned(),
            kind: FileKind::from_mode(mode),
        });
    }
    let uid = meta.uid();
    if uid != policy.expected_uid && uid != 0 {
        return Err(Refused::WrongOwner {
            path: path.to_owned(),
            file_uid: uid,
            process_uid: policy.expected_uid,
        });
    }
    if meta.size() > policy.max_size {
        return Err(Refused::TooLarge {
            path: path.to_owned(),
            size: meta.size(),
            max: policy.max_size,
        });
    }
    if mode & 0o022 != 0 {
        if policy.refuse_writable_by_others {
            return Err(Refused::WritableByOthers {
                path: path.to_owned(),
                mode: mode & 0o7777,
            });
        }
        tracing::debug!(path = %path.display(), mode = format_args!("{:o}", mode & 0o7777),
            "perf map is writable by group or others; reading it anyway");
    }
    Ok(TrustedFile {
        stamp: FileStamp::from_metadata(&meta),
        file,
        uid,
        mode: mode & 0o7777,
    })
}

fn open_nofollow(path: &Path) -> Result<File, Refused> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| Refused::Io {
        path: path.to_owned(),
        source: io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"),
    })?;
    // SAFETY: `c` is a valid NUL-terminated string; the returned fd is owned
    // by the File below.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY,
        )
    };
    if fd < 0 {
        let err = io::Error::last_os_error();
        let path = path.to_owned();
        return Err(match err.raw_os_error() {
            Some(libc::ENOENT) => Refused::NotFound { path },
            // O_NOFOLLOW on a symlink gives ELOOP.
            Some(libc::ELOOP) => Refused::Symlink { path },
            _ => Refused::Io { path, source: err },
        });
    }
    // SAFETY: fd is a freshly opened descriptor we own.
    Ok(unsafe { File::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn write(dir: &Path, name: &str, data: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, data).unwrap();
        p
    }

    #[test]
    fn regular_file_of_owner_accepted() {
        let d = tempfile::tempdir().unwrap();
        let p = write(d.path(), "perf-1.map", b"10 20 a\n");
        let t = open_trusted(&p, &TrustPolicy::for_uid(0)).unwrap();
        assert_eq!(t.stamp.size, 8);
        assert_eq!(t.uid, 0);
        // Root-owned files are accepted for any process owner.
        open_trusted(&p, &TrustPolicy::for_uid(1234)).unwrap();
    }

    #[test]
    fn missing_file() {
        let d = tempfile::tempdir().unwrap();
        let err = open_trusted(&d.path().join("nope"), &TrustPolicy::for_uid(0)).unwrap_err();
        assert!(matches!(err, Refused::NotFound { .. }), "{err}");
    }

    #[test]
    fn symlink_refused() {
        let d = tempfile::tempdir().unwrap();
        let target = write(d.path(), "target", b"10 20 a\n");
        let link = d.path().join("perf-1.map");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let err = open_trusted(&link, &TrustPolicy::for_uid(0)).unwrap_err();
        assert!(matches!(err, Refused::Symlink { .. }), "{err}");
        // Even a dangling one.
        let dangling = d.path().join("perf-2.map");
        std::os::unix::fs::symlink(d.path().join("missing"), &dangling).unwrap();
        let err = open_trusted(&dangling, &TrustPolicy::for_uid(0)).unwrap_err();
        assert!(matches!(err, Refused::Symlink { .. }), "{err}");
    }

    #[test]
    fn wrong_owner_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = write(d.path(), "perf-1.map", b"10 20 a\n");
        std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
        let err = open_trusted(&p, &TrustPolicy::for_uid(0)).unwrap_err();
        match err {
            Refused::WrongOwner {
                file_uid,
                process_uid,
                ..
            } => assert_eq!((file_uid, process_uid), (65534, 0)),
            other => panic!("unexpected {other}"),
        }
        // The right owner is accepted.
        open_trusted(&p, &TrustPolicy::for_uid(65534)).unwrap();
    }

    #[test]
    fn directory_and_fifo_refused() {
        let d = tempfile::tempdir().unwrap();
        let sub = d.path().join("dir.map");
        std::fs::create_dir(&sub).unwrap();
        let err = open_trusted(&sub, &TrustPolicy::for_uid(0)).unwrap_err();
        assert!(
            matches!(
                err,
                Refused::NotRegular {
                    kind: FileKind::Directory,
                    ..
                }
            ),
            "{err}"
        );

        let fifo = d.path().join("fifo.map");
        let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        // Must not block (O_NONBLOCK) and must be refused.
        let err = open_trusted(&fifo, &TrustPolicy::for_uid(0)).unwrap_err();
        assert!(
            matches!(
                err,
                Refused::NotRegular {
                    kind: FileKind::Fifo,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn too_large_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = write(d.path(), "perf-1.map", &[b'x'; 100]);
        let err = open_trusted(&p, &TrustPolicy::for_uid(0).with_max_size(99)).unwrap_err();
        assert!(
            matches!(
                err,
                Refused::TooLarge {
                    size: 100,
                    max: 99,
                    ..
                }
            ),
            "{err}"
        );
        open_trusted(&p, &TrustPolicy::for_uid(0).with_max_size(100)).unwrap();
        // A sparse file is judged by its apparent size.
        let sparse = d.path().join("sparse.map");
        let f = File::create(&sparse).unwrap();
        f.set_len(DEFAULT_MAX_SIZE + 1).unwrap();
        let err = open_trusted(&sparse, &TrustPolicy::for_uid(0)).unwrap_err();
        assert!(matches!(err, Refused::TooLarge { .. }), "{err}");
    }

    #[test]
    fn world_writable_policy() {
        let d = tempfile::tempdir().unwrap();
        let p = write(d.path(), "perf-1.map", b"10 20 a\n");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap();
        open_trusted(&p, &TrustPolicy::for_uid(0)).unwrap();
        let err = open_trusted(
            &p,
            &TrustPolicy::for_uid(0).with_refuse_writable_by_others(true),
        )
        .unwrap_err();
        assert!(
            matches!(err, Refused::WritableByOthers { mode: 0o666, .. }),
            "{err}"
        );
    }
}
