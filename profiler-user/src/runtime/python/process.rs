//! What a CPython process's /proc entry says: its file-backed mappings
//! (from [`crate::sys::proc`]) and its threads' ids, with errors that tell a
//! process that exited from one that could not be read.

use std::{
    collections::HashMap,
    io,
    path::{Path, PathBuf},
};

use super::types::PythonError;
use crate::sys::proc::{self, Mapping};

/// One line of /proc/PID/maps backed by a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMapping {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    pub inode: u64,
    /// The path as the process sees it (inside its mount namespace),
    /// without a ` (deleted)` suffix.
    pub path: String,
}

/// Whether `/proc/PID` still exists: tells a process that exited from one
/// whose files could not be read for another reason.
pub fn process_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// An error on a /proc file of `pid`: [`PythonError::ProcessGone`] when the
/// process went away.
pub fn proc_error(pid: u32, path: PathBuf, source: io::Error) -> PythonError {
    // A missing file may be a module path that no longer exists: only the
    // process's own /proc entry tells that the process went away.
    if source.raw_os_error() == Some(libc::ESRCH) || !process_exists(pid) {
        PythonError::ProcessGone { pid }
    } else {
        PythonError::Io { path, source }
    }
}

/// The file-backed ones of a process's mappings.
pub fn file_mappings(maps: &[Mapping]) -> Vec<FileMapping> {
    maps.iter()
        .filter_map(|m| {
            Some(FileMapping {
                start: m.start,
                end: m.end,
                offset: m.offset,
                inode: m.inode,
                path: m.file()?.to_string_lossy().into_owned(),
            })
        })
        .collect()
}

/// The live threads of a process, as (thread id in the process's own PID
/// namespace, thread id on this host). The two differ in a container: the
/// interpreter and the C library record the former, the kernel's samples
/// carry the latter. `nested`: whether it runs in a PID namespace of its
/// own ([`nested_pid_namespace`]).
pub fn live_threads(pid: u32, nested: bool) -> Result<HashMap<u32, u32>, PythonError> {
    let threads = proc::namespace_threads_known(pid, nested)
        .map_err(|e| proc_error(pid, PathBuf::from(format!("/proc/{pid}/task")), e))?;
    if threads.is_empty() {
        return Err(PythonError::ProcessGone { pid });
    }
    Ok(threads)
}

/// Whether process `pid` runs in a PID namespace of its own (read once:
/// a process keeps its namespace).
pub fn nested_pid_namespace(pid: u32) -> Result<bool, PythonError> {
    proc::in_nested_pid_namespace(pid)
        .map_err(|e| proc_error(pid, PathBuf::from(format!("/proc/{pid}/status")), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_parse() {
        let text = "\
7f00-7f10 r--p 00000000 08:01 1234 /usr/lib/libpython3.11.so.1.0
7f10-7f20 r-xp 00010000 08:01 1234 /usr/lib/libpython3.11.so.1.0
7f30-7f40 rw-p 00000000 00:00 0 \n\
7f40-7f50 r--p 00000000 08:01 99 /tmp/a b (deleted)
7f50-7f60 r--p 00000000 00:00 0 [stack]";
        let maps = file_mappings(&proc::parse_maps(text).unwrap());
        assert_eq!(maps.len(), 3);
        assert_eq!(maps[1].offset, 0x10000);
        assert_eq!(maps[1].inode, 1234);
        assert_eq!(maps[2].path, "/tmp/a b");
    }
}
