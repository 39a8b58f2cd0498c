//! A process's executable mappings asked of the kernel one at a time with
//! the `PROCMAP_QUERY` ioctl on its `/proc/PID/maps` (Linux 6.11+),
//! instead of reading the whole file as text.
//!
//! Why: naming native frames needs only the executable mappings (a JVM has
//! about 30 of its 350 to 1,000), but the text of every mapping is made by
//! the kernel and parsed here each time a process's maps are read. Over a
//! testbed job (`sparkprof record --off-cpu` over one section-5 job, a
//! build counting its reads) sparkprof read them 32 times for native
//! frames alone; a Spark Master's JVM's 342-line maps file took 244 µs to
//! read as text (the kernel's part alone), its 27 executable mappings 44 µs
//! to ask for (200 rounds of each, a timing program not kept; 2026-12-07).
//! In `perf record` of the job, these reads went from 2.8 % of sparkprof's
//! CPU to 0.9 %.
//!
//! The one line of the text not asked for is `[vsyscall]`: the kernel's
//! page at the top of the address space (`0xffffffffff600000`), which is no
//! mapping of the process, and where no user address lies.
//!
//! [`executable_mappings`] says [`QueryError::Unsupported`] on an older
//! kernel, and the caller reads the text (see
//! [`super::proc::read_executable_maps`]), as it does when a query fails.

use std::{fs::File, io, os::fd::AsRawFd as _};

use super::proc::{MapPath, Mapping};

/// `_IOWR(PROCFS_IOCTL_MAGIC = 'f', 17, struct procmap_query)`.
const PROCMAP_QUERY: libc::c_ulong = 0xC068_6611;
/// Query flags (`enum procmap_query_flags`, include/uapi/linux/fs.h).
const VMA_EXECUTABLE: u64 = 0x04;
/// The mapping at the address, or else the first one after it.
const COVERING_OR_NEXT_VMA: u64 = 0x10;
/// Room for a mapping's name: a path is at most `PATH_MAX` bytes.
const NAME_ROOM: usize = 4096;

/// `struct procmap_query`, as the kernel's uapi header lays it out.
#[repr(C)]
#[derive(Debug, Default)]
struct ProcmapQuery {
    size: u64,
    query_flags: u64,
    query_addr: u64,
    vma_start: u64,
    vma_end: u64,
    vma_flags: u64,
    vma_page_size: u64,
    vma_offset: u64,
    inode: u64,
    dev_major: u32,
    dev_minor: u32,
    vma_name_size: u32,
    build_id_size: u32,
    vma_name_addr: u64,
    build_id_addr: u64,
}

/// Why the mappings were not asked.
#[derive(Debug)]
pub enum QueryError {
    /// This kernel has no `PROCMAP_QUERY`.
    Unsupported,
    /// The process's maps could not be opened (it is gone, say) or a query
    /// failed (a name longer than a path, say).
    Failed(io::Error),
}

/// The executable mappings of process `pid`, in address order.
pub fn executable_mappings(pid: u32) -> Result<Vec<Mapping>, QueryError> {
    let maps = File::open(format!("/proc/{pid}/maps")).map_err(QueryError::Failed)?;
    let mut name = vec![0u8; NAME_ROOM];
    let mut mappings = Vec::new();
    let mut addr = 0u64;
    loop {
        let mut query = ProcmapQuery {
            size: std::mem::size_of::<ProcmapQuery>() as u64,
            query_flags: COVERING_OR_NEXT_VMA | VMA_EXECUTABLE,
            query_addr: addr,
            vma_name_size: NAME_ROOM as u32,
            vma_name_addr: name.as_mut_ptr() as u64,
            ..ProcmapQuery::default()
        };
        // SAFETY: `query` is a `struct procmap_query` of the size it says;
        // the kernel writes at most `vma_name_size` bytes at
        // `vma_name_addr`, which is `name`, alive and that long.
        let done = unsafe { libc::ioctl(maps.as_raw_fd(), PROCMAP_QUERY, &mut query) };
        if done < 0 {
            let error = io::Error::last_os_error();
            return match error.raw_os_error() {
                // No executable mapping at or after `addr`.
                Some(libc::ENOENT) => Ok(mappings),
                // An ioctl this kernel's maps file does not know.
                Some(libc::ENOTTY | libc::EINVAL | libc::EOPNOTSUPP) if mappings.is_empty() => {
                    Err(QueryError::Unsupported)
                }
                _ => Err(QueryError::Failed(error)),
            };
        }
        // The name's size counts its NUL; 0: an anonymous mapping.
        let len = (query.vma_name_size as usize).min(NAME_ROOM);
        let text = &name[..len.saturating_sub(1)];
        mappings.push(Mapping {
            start: query.vma_start,
            end: query.vma_end,
            offset: query.vma_offset,
            inode: query.inode,
            executable: query.vma_flags & VMA_EXECUTABLE != 0,
            path: path_of(text),
        });
        if query.vma_end <= addr {
            // Never the case; but a loop that did not advance would not end.
            return Err(QueryError::Failed(io::Error::other(
                "PROCMAP_QUERY went backwards",
            )));
        }
        addr = query.vma_end;
    }
}

/// What a mapping maps, from its name as the kernel gives it (the text
/// /proc/PID/maps shows in its last column): a file's path is bytes, as
/// the file system has it.
fn path_of(name: &[u8]) -> MapPath {
    let text = || String::from_utf8_lossy(name).into_owned();
    if name.is_empty() {
        MapPath::Anonymous { name: None }
    } else if name.starts_with(b"[anon:") {
        MapPath::Anonymous { name: Some(text()) }
    } else if name.starts_with(b"[") {
        MapPath::Special(text())
    } else {
        MapPath::file(name)
    }
}

#[cfg(test)]
mod tests {
    use std::{ffi::OsStr, os::unix::ffi::OsStrExt as _, path::PathBuf};

    use super::*;
    use crate::sys::proc;

    /// The struct is the kernel's: 104 bytes (`PROCMAP_QUERY`'s size field).
    #[test]
    fn the_query_is_laid_out_as_the_kernels() {
        assert_eq!(std::mem::size_of::<ProcmapQuery>(), 104);
        assert_eq!((PROCMAP_QUERY >> 16) & 0x3fff, 104);
    }

    /// Asked of this kernel (6.11+, as on every machine this runs on), this
    /// process's executable mappings are the ones its maps file lists, but
    /// for `[vsyscall]`.
    #[test]
    fn asked_mappings_are_the_executable_lines_of_the_maps_file() {
        let pid = std::process::id();
        let asked = executable_mappings(pid).expect("PROCMAP_QUERY answers on this kernel");
        let read = proc::read_text_executable_maps(pid).unwrap();
        assert!(
            asked.iter().any(|m| m.file().is_some()),
            "no file among {asked:?}"
        );
        assert_eq!(asked, read);
    }

    #[test]
    fn names_are_read_as_the_maps_file_shows_them() {
        assert_eq!(path_of(b""), MapPath::Anonymous { name: None });
        assert_eq!(
            path_of(b"[anon:libc_malloc]"),
            MapPath::Anonymous {
                name: Some("[anon:libc_malloc]".into())
            }
        );
        assert_eq!(path_of(b"[vdso]"), MapPath::Special("[vdso]".into()));
        assert_eq!(
            path_of(b"/usr/lib/libc.so.6 (deleted)"),
            MapPath::File {
                path: "/usr/lib/libc.so.6".into(),
                deleted: true
            }
        );
        assert_eq!(
            path_of(b"/usr/bin/my app"),
            MapPath::File {
                path: "/usr/bin/my app".into(),
                deleted: false
            }
        );
    }

    #[test]
    fn a_process_gone_is_an_error_not_unsupported() {
        assert!(matches!(
            executable_mappings(u32::MAX >> 2),
            Err(QueryError::Failed(_))
        ));
    }

    /// A file's path is kept as bytes: one that is not UTF-8 is still a file.
    #[test]
    fn a_path_that_is_not_utf8_is_a_file() {
        assert_eq!(
            path_of(b"/opt/caf\xe9/lib.so"),
            MapPath::File {
                path: PathBuf::from(OsStr::from_bytes(b"/opt/caf\xe9/lib.so")),
                deleted: false
            }
        );
    }
}
