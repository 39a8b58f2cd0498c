//! Fields of blocks read from a CPython process (its memory is read
//! through [`crate::sys::memory`]); a field a version does not have is
//! [`PY_NO_OFFSET`].

use profiler_common::PY_NO_OFFSET;

pub use crate::sys::memory::{Memory, ReadMemory};

/// The little-endian `u64` at `offset` of a block read from the target;
/// `None` for a field the version does not have (or outside the block).
pub fn field_u64(block: &[u8], offset: u32) -> Option<u64> {
    if offset == PY_NO_OFFSET {
        return None;
    }
    let start = offset as usize;
    let bytes = block.get(start..start.checked_add(8)?)?;
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

/// The little-endian `u32` at `offset` of a block.
pub fn field_u32(block: &[u8], offset: u32) -> Option<u32> {
    if offset == PY_NO_OFFSET {
        return None;
    }
    let start = offset as usize;
    let bytes = block.get(start..start.checked_add(4)?)?;
    Some(u32::from_le_bytes(bytes.try_into().ok()?))
}
