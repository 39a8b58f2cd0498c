//! Source lines of a method's bytecode indexes: `ConstMethod`'s compressed
//! line number table, which follows the method's bytecodes when the
//! method has one (`ConstMethod` flag bit 0).
//!
//! The table is a stream of (bci, line) steps from (0, 0): a byte `b`
//! other than 0 and 0xFF adds `b >> 3` to the bci and `b & 7` to the line;
//! 0xFF is followed by two zig-zag UNSIGNED5 numbers (bci and line
//! deltas); 0 ends it. UNSIGNED5 excludes byte values below 1 from JDK 20
//! on (0 before): the JVM's major version says which.

use super::{HotspotError, layout::HotspotLayout, vmstructs::VmStructs};
use crate::sys::memory::ReadMemory;

/// The table read at most (real tables of long methods stay far below).
const MAX_TABLE: usize = 4096;

/// Where a method's line table is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineLayout {
    pub const_method_flags: u64,
    /// Byte values below this are not in UNSIGNED5 numbers.
    pub unsigned5_excluded: u8,
}

impl LineLayout {
    pub fn from_tables(memory: &impl ReadMemory, tables: &VmStructs) -> Result<Self, HotspotError> {
        let major = tables.required_address("Abstract_VM_Version", "_vm_major_version")?;
        let major = memory.read_u32(major)?;
        if !(9..=99).contains(&major) {
            return Err(HotspotError::Garbage(format!("JDK major version {major}")));
        }
        Ok(Self {
            const_method_flags: tables
                .offset("ConstMethod", "_flags._flags")
                .or_else(|| tables.offset("ConstMethod", "_flags"))
                .ok_or_else(|| HotspotError::MissingField("ConstMethod::_flags".into()))?,
            unsigned5_excluded: u8::from(major >= 20),
        })
    }

    /// The source line of bytecode index `bci` of `method`, if its class
    /// has line numbers.
    pub fn line(
        &self,
        memory: &impl ReadMemory,
        layout: &HotspotLayout,
        method: u64,
        bci: u32,
    ) -> Option<u32> {
        let code = layout.bytecodes(memory, method)?;
        let mut flags = [0u8; 1];
        memory
            .read(code.const_method + self.const_method_flags, &mut flags)
            .ok()?;
        if flags[0] & 1 == 0 {
            return None;
        }
        // The table follows the bytecodes.
        let table = code.start + code.len;
        // Read up to the end of the page the table starts in, then on.
        let mut bytes = Vec::new();
        let mut at = table;
        while bytes.len() < MAX_TABLE {
            let len = (0x1000 - (at & 0xfff)) as usize;
            let block = memory.read_vec(at, len.min(MAX_TABLE - bytes.len())).ok()?;
            let ended = block.contains(&0);
            bytes.extend_from_slice(&block);
            at += block.len() as u64;
            if ended {
                break;
            }
        }
        line_at(&bytes, bci, self.unsigned5_excluded)
    }
}

/// The line of `target` in a compressed line table: the step with the
/// largest bci not above it.
pub fn line_at(table: &[u8], target: u32, excluded: u8) -> Option<u32> {
    let mut bytes = table.iter().copied();
    let (mut bci, mut line) = (0i64, 0i64);
    let mut best = None;
    loop {
        match bytes.next()? {
            0 => return best,
            0xFF => {
                bci += zigzag(unsigned5(&mut bytes, excluded)?);
                line += zigzag(unsigned5(&mut bytes, excluded)?);
            }
            b => {
                bci += i64::from(b >> 3);
                line += i64::from(b & 7);
            }
        }
        if bci > i64::from(target) {
            return best;
        }
        best = u32::try_from(line).ok();
    }
}

/// One UNSIGNED5 number (HotSpot's `unsigned5.hpp`), with byte values
/// below `excluded` not in use.
pub(super) fn unsigned5(bytes: &mut impl Iterator<Item = u8>, excluded: u8) -> Option<u32> {
    const L: u32 = 192;
    let mut sum = 0u32;
    for shift in (0..30).step_by(6) {
        let b = bytes.next()?;
        let value = u32::from(b.checked_sub(excluded)?);
        sum = sum.wrapping_add(value << shift);
        if u32::from(b) < L {
            return Some(sum);
        }
    }
    Some(sum)
}

fn zigzag(value: u32) -> i64 {
    i64::from(value >> 1) ^ -i64::from(value & 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// UNSIGNED5 as HotSpot writes it (`unsigned5.hpp`; JDK 17's
    /// `CompressedWriteStream` is the same with nothing excluded).
    fn encode(mut value: u32, excluded: u8) -> Vec<u8> {
        let x = u32::from(excluded);
        let l = 256 - 64 - x;
        let mut out = Vec::new();
        for i in 0..=4 {
            if value < l || i == 4 {
                out.push((value + x) as u8);
                break;
            }
            value -= l;
            out.push((l + value % 64 + x) as u8);
            value >>= 6;
        }
        out
    }

    #[test]
    fn unsigned5_round_trips_with_and_without_exclusion() {
        for excluded in [0u8, 1] {
            for value in [0u32, 1, 100, 190, 191, 192, 200, 1000, 70_000, 1 << 24] {
                let bytes = encode(value, excluded);
                assert!(bytes.iter().all(|&b| b >= excluded), "{bytes:?}");
                let mut iter = bytes.iter().copied();
                assert_eq!(
                    unsigned5(&mut iter, excluded),
                    Some(value),
                    "{value} excluded {excluded}: {bytes:?}"
                );
            }
        }
    }

    #[test]
    fn decodes_short_and_escaped_steps() {
        for excluded in [0u8, 1] {
            // (bci 0, line 3), (bci 4, line 4), then an escape: +100, +1000.
            let mut table = vec![3, (4 << 3) | 1, 0xFF];
            table.extend(encode(200, excluded)); // zig-zag of +100
            table.extend(encode(2000, excluded)); // zig-zag of +1000
            table.push(0);
            assert_eq!(line_at(&table, 0, excluded), Some(3));
            assert_eq!(line_at(&table, 3, excluded), Some(3));
            assert_eq!(line_at(&table, 4, excluded), Some(4));
            assert_eq!(line_at(&table, 103, excluded), Some(4));
            assert_eq!(line_at(&table, 104, excluded), Some(1004));
            // Cut short: the last whole step, no panic.
            assert_eq!(line_at(&table[..4], 104, excluded), None);
            assert_eq!(line_at(&table[..2], 104, excluded), None);
        }
        assert_eq!(line_at(&[0], 5, 0), None);
        assert_eq!(zigzag(3), -2);
    }
}
