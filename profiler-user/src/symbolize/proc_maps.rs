//! A process's executable mappings from /proc/PID/maps, to name addresses
//! that no symbol covers as `module+0xoffset` (file-backed) or `[unknown]`
//! (anonymous), so a frame is never dropped.

use std::io;

use crate::sys::proc::{self, MapPath, Mapping};

/// The executable mappings of one process, sorted by address.
#[derive(Debug, Clone, Default)]
pub struct ProcMaps {
    mappings: Vec<Mapping>,
}

impl ProcMaps {
    pub fn read(pid: u32) -> io::Result<Self> {
        Ok(Self::executable(&proc::read_executable_maps(pid)?))
    }

    /// The executable ones of a process's mappings.
    pub fn executable(mappings: &[Mapping]) -> Self {
        let mut mappings: Vec<Mapping> =
            mappings.iter().filter(|m| m.executable).cloned().collect();
        mappings.sort_by_key(|m| m.start);
        Self { mappings }
    }

    /// The mapping that holds `addr`.
    pub fn find(&self, addr: u64) -> Option<&Mapping> {
        let index = self
            .mappings
            .partition_point(|m| m.start <= addr)
            .checked_sub(1)?;
        let mapping = &self.mappings[index];
        (addr < mapping.end).then_some(mapping)
    }

    /// `module+0xoffset` for file-backed memory, `[name]` for special and
    /// named anonymous mappings, `[unknown]` otherwise.
    pub fn describe(&self, addr: u64) -> String {
        let Some(m) = self.find(addr) else {
            return "[unknown]".to_owned();
        };
        match &m.path {
            MapPath::File { path, .. } => {
                let module = path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| path.display().to_string());
                format!("{module}+0x{:x}", addr - m.start + m.offset)
            }
            MapPath::Special(name) => name.clone(),
            MapPath::Anonymous { name: Some(name) } => name.clone(),
            MapPath::Anonymous { name: None } => "[unknown]".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0c0a00000-55d0c0a01000 r--p 00000000 fd:00 123 /usr/bin/app
55d0c0a01000-55d0c0a05000 r-xp 00001000 fd:00 123 /usr/bin/app
7f0000000000-7f0000100000 rwxp 00000000 00:00 0 
7f1000000000-7f1000200000 r-xp 00028000 fd:00 456 /usr/lib/libc.so.6 (deleted)
7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0                          [vdso]
";

    #[test]
    fn describes_file_anonymous_and_special_mappings() {
        let maps = ProcMaps::executable(&proc::parse_maps(MAPS).unwrap());
        assert_eq!(maps.describe(0x55d0c0a01010), "app+0x1010");
        assert_eq!(maps.describe(0x7f1000000010), "libc.so.6+0x28010");
        assert_eq!(maps.describe(0x7f0000000010), "[unknown]");
        assert_eq!(maps.describe(0x7ffd00000001), "[vdso]");
        // Not executable, or outside every mapping.
        assert_eq!(maps.describe(0x55d0c0a00010), "[unknown]");
        assert_eq!(maps.describe(0x10), "[unknown]");
    }
}
