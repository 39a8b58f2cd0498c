//! Methods a JVM maps from a CDS archive (the JDK's `classes.jsa`, an
//! application's AppCDS archive), named once per host.
//!
//! Every JVM of a JDK maps the same archive of its core classes, and an
//! archived `Method` lies at the same place in the file whichever JVM maps
//! it, at whatever address (a relocated archive has its pointers patched,
//! not its contents moved). A method's name is thus keyed by the archive
//! file and the method's offset in it, and a new executor's JDK methods are
//! named without reading them: a fifth of the methods in an executor's
//! stacks came from the JDK's archive, and naming an executor's new methods
//! is most of what sparkprof reads on a Spark host.

use std::sync::{Arc, Mutex};

use crate::{
    FastMap,
    sys::proc::{FileId, Mapping},
};

/// Where a process maps archives: their mappings, with the file of each.
#[derive(Debug, Default)]
pub struct ArchiveRegions {
    regions: Vec<Region>,
}

#[derive(Debug)]
struct Region {
    start: u64,
    end: u64,
    /// Offset of `start` in the file.
    offset: u64,
    file: FileId,
}

/// An archived method: its archive and its offset in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ArchivedAt {
    file: FileId,
    offset: u64,
}

impl ArchiveRegions {
    /// The mappings of archives (files named `*.jsa`) among `maps`, those
    /// of process `pid`. A file is known by what its `/proc/PID/map_files/`
    /// entry opens (the path in `maps` is the process's, maybe in another
    /// mount namespace); one that cannot be looked at, or is not the inode
    /// the mapping names, is left out.
    pub fn of(pid: u32, maps: &[Mapping]) -> Self {
        let regions = maps
            .iter()
            .filter(|m| {
                m.file()
                    .is_some_and(|p| p.extension().is_some_and(|e| e == "jsa"))
            })
            .filter_map(|m| {
                Some(Region {
                    start: m.start,
                    end: m.end,
                    offset: m.offset,
                    file: m.file_id(pid)?,
                })
            })
            .collect();
        Self { regions }
    }

    /// Where `address` lies in an archive, if it does.
    pub fn at(&self, address: u64) -> Option<ArchivedAt> {
        self.regions
            .iter()
            .find(|r| (r.start..r.end).contains(&address))
            .map(|r| ArchivedAt {
                file: r.file,
                offset: r.offset + (address - r.start),
            })
    }

    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }
}

/// Names of archived methods kept at most (the JDK 17 default archive
/// holds about 1,300 classes; a host's archives rarely name more).
const MAX_ARCHIVED_NAMES: usize = 65_536;

/// Names of archived methods, for every JVM of the host.
#[derive(Debug, Default)]
pub struct ArchivedNames {
    names: FastMap<ArchivedAt, Arc<str>>,
}

/// [`ArchivedNames`] as every JVM's reader holds them.
pub type SharedArchivedNames = Arc<Mutex<ArchivedNames>>;

impl ArchivedNames {
    pub fn get(&self, at: &ArchivedAt) -> Option<Arc<str>> {
        self.names.get(at).cloned()
    }

    pub fn insert(&mut self, at: ArchivedAt, name: Arc<str>) {
        if self.names.len() >= MAX_ARCHIVED_NAMES {
            self.names.clear();
        }
        self.names.insert(at, name);
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::{io::Write, os::fd::AsRawFd};

    use super::*;

    /// A file mapped twice by this process, at two addresses, as two JVMs
    /// map one archive: the same place in the file is the same key.
    #[test]
    fn a_place_in_an_archive_is_one_key_wherever_it_is_mapped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("classes.jsa");
        let mut file = std::fs::File::create(&path).unwrap();
        file.write_all(&vec![7u8; 3 * 4096]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let map = |offset: i64| {
            // SAFETY: a read-only private mapping of a file we hold open.
            let at = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    2 * 4096,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE,
                    file.as_raw_fd(),
                    offset,
                )
            };
            assert_ne!(at, libc::MAP_FAILED);
            at as u64
        };
        let (whole, tail) = (map(0), map(4096));
        let me = std::process::id();
        let regions = ArchiveRegions::of(me, &crate::sys::proc::read_maps(me).unwrap());
        // The same byte of the file, through either mapping.
        let one = regions
            .at(whole + 4096 + 100)
            .expect("in the first mapping");
        let other = regions.at(tail + 100).expect("in the second mapping");
        assert_eq!(one, other);
        assert_ne!(regions.at(whole + 100), Some(one));
        // Memory that is no archive's.
        assert_eq!(regions.at(&regions as *const _ as u64), None);
        let mut names = ArchivedNames::default();
        names.insert(one, Arc::from("java.lang.Thread.run"));
        assert_eq!(names.get(&other).as_deref(), Some("java.lang.Thread.run"));
        // SAFETY: unmapping what was mapped above.
        unsafe {
            libc::munmap(whole as *mut _, 2 * 4096);
            libc::munmap(tail as *mut _, 2 * 4096);
        }
    }
}
