//! A process's executable mappings from /proc/PID/maps, to name addresses
//! that no symbol covers as `module+0xoffset` (file-backed) or `[unknown]`
//! (anonymous), so a frame is never dropped.

use std::{fs, io, path::Path};

/// One executable mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// Offset of `start` in the mapped file.
    pub file_offset: u64,
    /// The path column (file path, `[vdso]`, ...), empty for anonymous memory.
    pub path: String,
}

impl Mapping {
    /// Anonymous memory (no file, no special name): where JIT code lives.
    pub fn is_anonymous(&self) -> bool {
        self.path.is_empty() || self.path.starts_with("[anon")
    }
}

/// The executable mappings of one process, sorted by address.
#[derive(Debug, Clone, Default)]
pub struct ProcMaps {
    mappings: Vec<Mapping>,
}

impl ProcMaps {
    pub fn read(pid: u32) -> io::Result<Self> {
        Ok(Self::parse(&fs::read_to_string(format!(
            "/proc/{pid}/maps"
        ))?))
    }

    /// Parses the text of /proc/PID/maps, keeping executable mappings.
    pub fn parse(text: &str) -> Self {
        let mut mappings: Vec<Mapping> = text.lines().filter_map(parse_line).collect();
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

    /// `module+0xoffset` for file-backed memory, `[name]` for special
    /// mappings, `[unknown]` otherwise.
    pub fn describe(&self, addr: u64) -> String {
        match self.find(addr) {
            Some(m) if m.path.starts_with('/') => {
                let module = Path::new(m.path.trim_end_matches(" (deleted)"))
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| m.path.clone());
                format!("{module}+0x{:x}", addr - m.start + m.file_offset)
            }
            Some(m) if m.path.starts_with('[') => m.path.clone(),
            _ => "[unknown]".to_owned(),
        }
    }
}

fn parse_line(line: &str) -> Option<Mapping> {
    // address perms offset dev inode [path]
    let mut fields = line.splitn(6, ' ');
    let (start, end) = fields.next()?.split_once('-')?;
    let perms = fields.next()?;
    if !perms.contains('x') {
        return None;
    }
    let offset = fields.next()?;
    let _dev = fields.next()?;
    let _inode = fields.next()?;
    let path = fields.next().unwrap_or("").trim_start().to_owned();
    Some(Mapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        file_offset: u64::from_str_radix(offset, 16).ok()?,
        path,
    })
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
        let maps = ProcMaps::parse(MAPS);
        assert_eq!(maps.describe(0x55d0c0a01010), "app+0x1010");
        assert_eq!(maps.describe(0x7f1000000010), "libc.so.6+0x28010");
        assert_eq!(maps.describe(0x7f0000000010), "[unknown]");
        assert_eq!(maps.describe(0x7ffd00000001), "[vdso]");
        // Not executable, or outside every mapping.
        assert_eq!(maps.describe(0x55d0c0a00010), "[unknown]");
        assert_eq!(maps.describe(0x10), "[unknown]");
    }
}
