//! Where an ELF file's link-time addresses are in a process that maps it.

use object::{
    Object as _, ObjectSegment as _,
    read::elf::{FileHeader, ProgramHeader as _},
};

/// A file's loadable segments: (virtual address, file offset, file size).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Segments(pub Vec<(u64, u64, u64)>);

impl Segments {
    pub fn of<'data, R: object::ReadRef<'data>>(elf: &object::File<'data, R>) -> Self {
        Self(
            elf.segments()
                .map(|s| {
                    let (offset, size) = s.file_range();
                    (s.address(), offset, size)
                })
                .collect(),
        )
    }

    /// The loadable segments from the program headers alone, for a caller
    /// that reads no more of the file than it needs (what
    /// [`Segments::of`] gives for a parsed file).
    pub fn of_headers<'data, Elf: FileHeader, R: object::ReadRef<'data>>(
        header: &Elf,
        endian: Elf::Endian,
        data: R,
    ) -> object::read::Result<Self> {
        Ok(Self(
            header
                .program_headers(endian, data)?
                .iter()
                .filter(|p| p.p_type(endian) == object::elf::PT_LOAD)
                .map(|p| {
                    (
                        p.p_vaddr(endian).into(),
                        p.p_offset(endian).into(),
                        p.p_filesz(endian).into(),
                    )
                })
                .collect(),
        ))
    }

    /// The load bias of the file in a process: what to add to a link-time
    /// address. Found from a mapping of the file, given as (start address,
    /// file offset), and the loadable segment holding that mapping's file
    /// offset (segments are mapped at page granularity, and their address
    /// and offset are equal modulo the page size).
    pub fn bias(&self, mappings: impl IntoIterator<Item = (u64, u64)>) -> Option<u64> {
        mappings.into_iter().find_map(|(start, map_offset)| {
            self.0.iter().find_map(|&(vaddr, offset, size)| {
                let page_start = offset & !0xfff;
                (map_offset >= page_start && map_offset < offset.saturating_add(size.max(1))).then(
                    || {
                        start
                            .wrapping_sub(map_offset)
                            .wrapping_sub(vaddr.wrapping_sub(offset))
                    },
                )
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bias_from_a_mapping_of_a_segment() {
        // A text segment linked at 0x1000 from file offset 0x1000, mapped
        // at 0x7f00_0000_1000: bias 0x7f00_0000_0000.
        let segments = Segments(vec![(0, 0, 0x800), (0x1000, 0x1000, 0x5000)]);
        assert_eq!(
            segments.bias([(0x7f00_0000_1000, 0x1000)]),
            Some(0x7f00_0000_0000)
        );
        // A data segment whose address and offset differ by a page.
        let segments = Segments(vec![(0x3000, 0x2000, 0x100)]);
        assert_eq!(segments.bias([(0x5000_2000, 0x2000)]), Some(0x4fff_f000));
        assert_eq!(Segments::default().bias([(0x1000, 0)]), None);
    }
}
