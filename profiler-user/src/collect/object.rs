//! The embedded eBPF object, and the one edit made to it before loading.
//!
//! The kernel fixes the depth of a `BPF_MAP_TYPE_STACK_TRACE` map when the map
//! is created (value size = 8 bytes x frames) and refuses a depth above
//! `kernel.perf_event_max_stack`. aya can resize `max_entries` but not the
//! value size, so the depth is chosen here, per recording, by rewriting the
//! `value_size` field of the stack maps' legacy `bpf_map_def` records in the
//! object's `maps` section before aya parses it.

use object::{Object as _, ObjectSection as _, ObjectSymbol as _};
use profiler_common::{COMPILED_STACK_DEPTH, names};
use thiserror::Error;

/// The eBPF object built by `build.rs` (aya-build) from `profiler-ebpf`.
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/profiler"));

/// Offset of `value_size` in `struct bpf_map_def` (type, key_size, value_size, ...).
const VALUE_SIZE_OFFSET: usize = 8;

/// Why the object could not be prepared.
#[derive(Debug, Error)]
pub enum ObjectError {
    #[error("the embedded eBPF object is not a valid ELF file: {0}")]
    Elf(#[from] object::Error),
    #[error("the eBPF object has no `maps` section (was it built by profiler-ebpf?)")]
    NoMapsSection,
    #[error("the eBPF object has no map named {0}")]
    NoSuchMap(&'static str),
    #[error(
        "map {name} has value size {found}, expected {expected} (object and userspace out of step)"
    )]
    UnexpectedValueSize {
        name: &'static str,
        found: u32,
        expected: u32,
    },
}

/// Returns a copy of the embedded object whose stack maps hold `depth` frames.
pub fn object_with_stack_depth(depth: u32) -> Result<Vec<u8>, ObjectError> {
    let mut bytes = EBPF_OBJECT.to_vec();
    let file = object::File::parse(EBPF_OBJECT)?;
    let maps = file
        .section_by_name("maps")
        .ok_or(ObjectError::NoMapsSection)?;
    let (section_offset, _) = maps.file_range().ok_or(ObjectError::NoMapsSection)?;
    for name in names::ALL_STACKS {
        let symbol = file
            .symbols()
            .find(|symbol| {
                symbol.name() == Ok(name) && symbol.section_index() == Some(maps.index())
            })
            .ok_or(ObjectError::NoSuchMap(name))?;
        let at = (section_offset + symbol.address()) as usize + VALUE_SIZE_OFFSET;
        let field: &mut [u8; 4] = (&mut bytes[at..at + 4]).try_into().expect("4 bytes");
        let found = u32::from_le_bytes(*field);
        let expected = COMPILED_STACK_DEPTH * 8;
        if found != expected {
            return Err(ObjectError::UnexpectedValueSize {
                name,
                found,
                expected,
            });
        }
        *field = (depth * 8).to_le_bytes();
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value_size_of(bytes: &[u8], name: &str) -> u32 {
        let file = object::File::parse(bytes).unwrap();
        let maps = file.section_by_name("maps").unwrap();
        let data = maps.data().unwrap();
        let symbol = file.symbols().find(|s| s.name() == Ok(name)).unwrap();
        let at = symbol.address() as usize + VALUE_SIZE_OFFSET;
        u32::from_le_bytes(data[at..at + 4].try_into().unwrap())
    }

    #[test]
    fn rewrites_only_the_stack_maps_value_size() {
        let patched = object_with_stack_depth(512).unwrap();
        for name in names::ALL_STACKS {
            assert_eq!(value_size_of(EBPF_OBJECT, name), COMPILED_STACK_DEPTH * 8);
            assert_eq!(value_size_of(&patched, name), 512 * 8);
        }
        for name in names::COUNTS {
            assert_eq!(
                value_size_of(&patched, name),
                value_size_of(EBPF_OBJECT, name)
            );
        }
        assert_eq!(patched.len(), EBPF_OBJECT.len());
    }
}
