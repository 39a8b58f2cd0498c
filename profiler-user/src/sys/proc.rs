//! What /proc says about a process, read in one place through the procfs
//! crate: its mappings (`/proc/PID/maps`; the executable ones alone are
//! asked of the kernel through [`super::vma_query`] where it answers), so
//! that every consumer (native frame names, the JIT and trampoline
//! partitions, Python interpreters, runtime recognition, `doctor`) sees the
//! same mappings and takes `(deleted)` off a path the same way, each
//! filtering the list for what it needs; its threads' ids inside and
//! outside its PID namespace; its command line, environment, parent, comm
//! and start time.

use std::{
    borrow::Cow,
    collections::HashMap,
    ffi::OsStr,
    fs, io,
    os::unix::{ffi::OsStrExt as _, fs::MetadataExt as _},
    path::{Path, PathBuf},
    sync::OnceLock,
    time::{Duration, SystemTime},
};

use procfs::{
    FromBufRead as _, ProcError,
    process::{MMPermissions, MMapPath, MemoryMap, MemoryMaps, Process},
};

/// A mapping's file in `/proc/PID/map_files`: exactly the mapped file,
/// even if it was replaced or deleted since, and across mount namespaces
/// (containers).
pub fn map_file(pid: u32, start: u64, end: u64) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/map_files/{start:x}-{end:x}"))
}

/// A file's identity, to keep what was read from it for every process
/// that maps it: the same device, inode, size and modification time are
/// the same bytes (an inode freed and reused has another time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
}

impl FileId {
    pub fn of(meta: &fs::Metadata) -> Self {
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
        }
    }
}

/// One mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// Offset of `start` in the mapped file.
    pub offset: u64,
    /// The file's inode (0 for memory without a file).
    pub inode: u64,
    pub executable: bool,
    pub path: MapPath,
}

/// What a mapping maps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MapPath {
    /// A file, by the path the process sees; `deleted` when it was removed
    /// or replaced on disk since it was mapped (the kernel's `(deleted)`).
    File { path: PathBuf, deleted: bool },
    /// Anonymous memory (where JIT code lives), with its `[anon:...]` name
    /// if the process gave it one.
    Anonymous { name: Option<String> },
    /// One of the kernel's own: `[vdso]`, `[heap]`, `[stack]`, ...
    Special(String),
}

impl MapPath {
    /// A mapped file by its path as the kernel shows it (bytes, as the
    /// file system has them), its ` (deleted)` taken off and said.
    pub fn file(shown: &[u8]) -> Self {
        let (path, deleted) = match shown.strip_suffix(b" (deleted)") {
            Some(kept) => (kept, true),
            None => (shown, false),
        };
        MapPath::File {
            path: PathBuf::from(OsStr::from_bytes(path)),
            deleted,
        }
    }
}

impl Mapping {
    /// The file this mapping of process `pid` maps, as its
    /// `/proc/PID/map_files/` entry opens it (the path is the process's,
    /// maybe in another mount namespace); `None` for memory in no file, or
    /// one that cannot be looked at or is not the inode the mapping names.
    pub fn file_id(&self, pid: u32) -> Option<FileId> {
        if self.inode == 0 {
            return None;
        }
        let meta = fs::metadata(map_file(pid, self.start, self.end)).ok()?;
        (meta.ino() == self.inode).then(|| FileId::of(&meta))
    }

    /// Anonymous memory.
    pub fn is_anonymous(&self) -> bool {
        matches!(self.path, MapPath::Anonymous { .. })
    }

    /// The mapped file, if it is one.
    pub fn file(&self) -> Option<&Path> {
        match &self.path {
            MapPath::File { path, .. } => Some(path),
            _ => None,
        }
    }

    fn from_procfs(map: MemoryMap) -> Self {
        let path = match map.pathname {
            MMapPath::Path(path) => MapPath::file(path.as_os_str().as_bytes()),
            MMapPath::Anonymous => MapPath::Anonymous { name: None },
            MMapPath::Other(name) if name.starts_with("anon:") => MapPath::Anonymous {
                name: Some(format!("[{name}]")),
            },
            MMapPath::Other(name) => MapPath::Special(format!("[{name}]")),
            MMapPath::Heap => MapPath::Special("[heap]".into()),
            MMapPath::Stack => MapPath::Special("[stack]".into()),
            MMapPath::TStack(tid) => MapPath::Special(format!("[stack:{tid}]")),
            MMapPath::Vdso => MapPath::Special("[vdso]".into()),
            MMapPath::Vvar => MapPath::Special("[vvar]".into()),
            MMapPath::Vsyscall => MapPath::Special("[vsyscall]".into()),
            MMapPath::Vsys(key) => MapPath::Special(format!("/SYSV{:08x}", key as u32)),
            other => MapPath::Special(format!("{other:?}")),
        };
        Self {
            start: map.address.0,
            end: map.address.1,
            offset: map.offset,
            inode: map.inode,
            executable: map.perms.contains(MMPermissions::EXECUTE),
            path,
        }
    }
}

/// The mappings of a process, in address order.
pub fn read_maps(pid: u32) -> io::Result<Vec<Mapping>> {
    let maps = process(pid)?.maps().map_err(io_error)?;
    Ok(maps.into_iter().map(Mapping::from_procfs).collect())
}

/// The executable mappings of a process, in address order: asked of the
/// kernel one by one where it can be (see [`super::vma_query`]: the
/// text of every mapping need not be made and parsed for the few that
/// hold code), else read from its maps file: on a kernel without the
/// query (remembered), and when a query fails (the text says then whether
/// the process is gone).
pub fn read_executable_maps(pid: u32) -> io::Result<Vec<Mapping>> {
    use super::vma_query::{QueryError, executable_mappings};
    static UNSUPPORTED: OnceLock<()> = OnceLock::new();
    if UNSUPPORTED.get().is_none() {
        match executable_mappings(pid) {
            Ok(mappings) => return Ok(mappings),
            Err(QueryError::Unsupported) => {
                tracing::debug!("no PROCMAP_QUERY on this kernel: maps are read as text");
                let _ = UNSUPPORTED.set(());
            }
            Err(QueryError::Failed(err)) => {
                tracing::debug!(pid, "PROCMAP_QUERY failed ({err}): maps read as text");
            }
        }
    }
    read_text_executable_maps(pid)
}

/// [`read_executable_maps`] from the text of the maps file, which lists
/// the `[vsyscall]` page too: left out, as the kernel's query leaves it.
/// (Public as what the query must match.)
pub fn read_text_executable_maps(pid: u32) -> io::Result<Vec<Mapping>> {
    let mut maps = read_maps(pid)?;
    maps.retain(|m| m.executable && m.path != MapPath::Special("[vsyscall]".into()));
    Ok(maps)
}

/// The mappings of process `pid` a caller already has (read in this
/// drain), else read now: the stages that may be handed a process's maps
/// fall back to reading them here.
pub fn maps_or_read(pid: u32, maps: Option<&[Mapping]>) -> io::Result<Cow<'_, [Mapping]>> {
    match maps {
        Some(maps) => Ok(Cow::Borrowed(maps)),
        None => read_maps(pid).map(Cow::Owned),
    }
}

/// Mappings from the text of a maps file (tests, and readers of a saved one).
pub fn parse_maps(text: &str) -> io::Result<Vec<Mapping>> {
    let maps = MemoryMaps::from_buf_read(text.as_bytes()).map_err(io_error)?;
    Ok(maps.into_iter().map(Mapping::from_procfs).collect())
}

/// The live threads of a process, as (thread id in the process's own PID
/// namespace, thread id on this host). The two differ in a container: the
/// process itself (a C library, an interpreter, a JVM's thread dump) knows
/// the former, the kernel's samples carry the latter. Empty when the
/// process is gone.
pub fn namespace_threads(pid: u32) -> io::Result<HashMap<u32, u32>> {
    let process = process(pid)?;
    let nested = nested_pid_namespace(&process)?;
    threads_by_namespace_id(&process, nested)
}

/// [`namespace_threads`] of a process known to be in a nested PID
/// namespace or not ([`in_nested_pid_namespace`]: a process never changes
/// namespace), for callers that list its threads every drain: one status
/// read less each time.
pub fn namespace_threads_known(pid: u32, nested: bool) -> io::Result<HashMap<u32, u32>> {
    threads_by_namespace_id(&process(pid)?, nested)
}

fn threads_by_namespace_id(
    process: &procfs::process::Process,
    nested: bool,
) -> io::Result<HashMap<u32, u32>> {
    // Not nested: ids are equal, and no thread's status needs reading.
    let mut threads = HashMap::new();
    for task in process.tasks().map_err(io_error)?.flatten() {
        let Ok(host) = u32::try_from(task.tid) else {
            continue;
        };
        let inner = if nested {
            // A thread that exited meanwhile has no status: left out.
            match task
                .status()
                .ok()
                .and_then(|status| status.nspid?.last().copied())
            {
                Some(inner) => u32::try_from(inner).unwrap_or(host),
                None => continue,
            }
        } else {
            host
        };
        threads.insert(inner, host);
    }
    Ok(threads)
}

/// Whether process `pid` is in this process's namespace of `kind`
/// (`net`, `mnt`, ...): `false` when either cannot be looked at.
pub fn shares_namespace(pid: u32, kind: &str) -> bool {
    let ns = |path: String| fs::metadata(path).map(|m| (m.dev(), m.ino()));
    match (
        ns(format!("/proc/{pid}/ns/{kind}")),
        ns(format!("/proc/self/ns/{kind}")),
    ) {
        (Ok(theirs), Ok(ours)) => theirs == ours,
        _ => false,
    }
}

/// Whether process `pid` runs in a PID namespace of its own (a
/// container's), where its thread ids are not this host's.
pub fn in_nested_pid_namespace(pid: u32) -> io::Result<bool> {
    nested_pid_namespace(&process(pid)?)
}

/// One PID namespace level (the NSpid line has one id): not nested.
fn nested_pid_namespace(process: &procfs::process::Process) -> io::Result<bool> {
    Ok(process
        .status()
        .map_err(io_error)?
        .nspid
        .is_some_and(|ids| ids.len() > 1))
}

/// The processes running now, by PID.
pub fn pids() -> Vec<u32> {
    let Ok(processes) = procfs::process::all_processes() else {
        return Vec::new();
    };
    processes
        .flatten()
        .filter_map(|process| u32::try_from(process.pid).ok())
        .collect()
}

/// What sparkprof uses of `/proc/PID/stat`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcStat {
    /// The comm.
    pub comm: String,
    /// Start time in clock ticks since boot: with the PID it identifies the
    /// process across PID reuse.
    pub start_ticks: u64,
    /// A kernel thread (`PF_KTHREAD`): no user address space.
    pub kernel_thread: bool,
}

/// `PF_KTHREAD` in the flags field of /proc/PID/stat.
const PF_KTHREAD: u32 = 0x0020_0000;

/// A process's `/proc/PID/stat`.
pub fn stat(pid: u32) -> io::Result<ProcStat> {
    let stat = process(pid)?.stat().map_err(io_error)?;
    Ok(ProcStat {
        comm: stat.comm,
        start_ticks: stat.starttime,
        kernel_thread: stat.flags & PF_KTHREAD != 0,
    })
}

/// The wall-clock time a process with these start ticks started; `None`
/// for 0 (unknown). Boot time is taken to the nanosecond, as now less the
/// time since boot on the clock start times count on (`CLOCK_BOOTTIME`),
/// once: both clocks advance alike (a later step of the wall clock is not
/// followed, which is right for ordering within one run).
pub fn started_at(start_ticks: u64) -> Option<SystemTime> {
    static BOOT: OnceLock<Option<SystemTime>> = OnceLock::new();
    if start_ticks == 0 {
        return None;
    }
    let boot = (*BOOT.get_or_init(|| {
        let mut since_boot = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid clock id and a pointer to a timespec we own.
        if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut since_boot) } != 0 {
            return None;
        }
        let since_boot = Duration::new(
            u64::try_from(since_boot.tv_sec).ok()?,
            u32::try_from(since_boot.tv_nsec).ok()?,
        );
        SystemTime::now().checked_sub(since_boot)
    }))?;
    let hz = procfs::ticks_per_second().max(1);
    Some(boot + Duration::from_nanos(start_ticks.saturating_mul(1_000_000_000 / hz)))
}

/// A process's command line, word by word (empty for a kernel thread or a
/// zombie).
pub fn cmdline(pid: u32) -> io::Result<Vec<String>> {
    process(pid)?.cmdline().map_err(io_error)
}

/// A process's environment, sorted by name.
pub fn environ(pid: u32) -> io::Result<Vec<(String, String)>> {
    let mut vars: Vec<(String, String)> = process(pid)?
        .environ()
        .map_err(io_error)?
        .into_iter()
        .map(|(key, value)| {
            (
                key.to_string_lossy().into_owned(),
                value.to_string_lossy().into_owned(),
            )
        })
        .collect();
    vars.sort();
    Ok(vars)
}

/// The program a process runs now (`/proc/PID/exe`): it changes when the
/// process execs another. One `readlink`, not procfs's `Process` (which
/// opens the process's directory first): it is asked every drain.
pub fn exe(pid: u32) -> io::Result<PathBuf> {
    fs::read_link(format!("/proc/{pid}/exe"))
}

/// A process's parent, `None` for none (PID 0: init, kernel threads' root).
pub fn parent(pid: u32) -> io::Result<Option<u32>> {
    let ppid = process(pid)?.stat().map_err(io_error)?.ppid;
    Ok(u32::try_from(ppid).ok().filter(|&ppid| ppid != 0))
}

fn process(pid: u32) -> io::Result<Process> {
    let pid = i32::try_from(pid).map_err(|_| io::Error::from(io::ErrorKind::NotFound))?;
    Process::new(pid).map_err(io_error)
}

/// procfs's error as the I/O error it came from, so that callers can tell a
/// process that is gone (`ESRCH`, not found) from one they may not read.
fn io_error(err: ProcError) -> io::Error {
    match err {
        ProcError::Io(err, _) => err,
        ProcError::NotFound(_) => io::ErrorKind::NotFound.into(),
        ProcError::PermissionDenied(_) => io::ErrorKind::PermissionDenied.into(),
        other => io::Error::new(io::ErrorKind::InvalidData, other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0c0a00000-55d0c0a01000 r--p 00000000 fd:00 123                        /usr/bin/app
55d0c0a01000-55d0c0a05000 r-xp 00001000 fd:00 123                        /usr/bin/my app
7f0000000000-7f0000100000 rwxp 00000000 00:00 0 
7f0800000000-7f0800001000 rw-p 00000000 00:00 0                          [anon:libc_malloc]
7f1000000000-7f1000200000 r-xp 00028000 fd:00 456                        /usr/lib/libc.so.6 (deleted)
7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0                          [vdso]
";

    #[test]
    fn files_anonymous_and_special_mappings() {
        let maps = parse_maps(MAPS).unwrap();
        let paths: Vec<(&MapPath, bool)> = maps.iter().map(|m| (&m.path, m.executable)).collect();
        let file = |path: &str, deleted| MapPath::File {
            path: path.into(),
            deleted,
        };
        assert_eq!(
            paths,
            [
                (&file("/usr/bin/app", false), false),
                (&file("/usr/bin/my app", false), true),
                (&MapPath::Anonymous { name: None }, true),
                (
                    &MapPath::Anonymous {
                        name: Some("[anon:libc_malloc]".into())
                    },
                    false
                ),
                (&file("/usr/lib/libc.so.6", true), true),
                (&MapPath::Special("[vdso]".into()), true),
            ]
        );
        assert_eq!(
            (maps[1].start, maps[1].end, maps[1].offset, maps[1].inode),
            (0x55d0c0a01000, 0x55d0c0a05000, 0x1000, 123)
        );
    }

    #[test]
    fn our_own_maps_hold_this_test_binary() {
        let maps = read_maps(std::process::id()).unwrap();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert!(
            maps.iter()
                .any(|m| m.executable && m.file() == Some(exe.as_path())),
            "{maps:#?}"
        );
        let gone = read_maps(u32::MAX >> 2).unwrap_err();
        assert_eq!(gone.kind(), io::ErrorKind::NotFound, "{gone}");
    }

    #[test]
    fn our_stat_and_start_time() {
        let me = stat(std::process::id()).unwrap();
        assert!(!me.kernel_thread);
        let all = pids();
        assert!(
            all.contains(&std::process::id()) && all.contains(&1),
            "{all:?}"
        );
        let started = started_at(me.start_ticks).unwrap();
        let age = SystemTime::now().duration_since(started).unwrap();
        assert!(age < Duration::from_secs(3600), "started {age:?} ago");
        assert!(stat(2).unwrap().kernel_thread, "kthreadd");
        assert_eq!(started_at(0), None);
    }

    #[test]
    fn our_command_line_environment_and_parent() {
        let me = std::process::id();
        let args: Vec<String> = std::env::args().collect();
        assert_eq!(cmdline(me).unwrap(), args);
        let env = environ(me).unwrap();
        let path = std::env::var("PATH").unwrap();
        assert!(
            env.iter().any(|(k, v)| k == "PATH" && *v == path),
            "{env:?}"
        );
        assert_eq!(
            parent(me).unwrap(),
            Some(std::os::unix::process::parent_id())
        );
        assert_eq!(parent(1).unwrap(), None);
    }

    #[test]
    fn our_threads_map_to_themselves_outside_a_container() {
        let spawned =
            std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_millis(500)));
        let threads = namespace_threads(std::process::id()).unwrap();
        assert!(threads.len() >= 2, "{threads:?}");
        assert!(
            threads.iter().all(|(inner, host)| inner == host),
            "{threads:?}"
        );
        assert_eq!(threads.get(&std::process::id()), Some(&std::process::id()));
        spawned.join().unwrap();
    }
}
