//! Line tables of code objects (`co_lnotab` before 3.10, `co_linetable`
//! after, in their three formats): from an instruction to its line. Bounded,
//! and never panics on a corrupt table.

use super::types::LineTableFormat;

/// A decoded line table: sorted, contiguous address ranges by their start
/// (byte offset into the bytecode) and line (`None`: no line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineTable {
    starts: Vec<(u32, Option<u32>)>,
    /// End of the last range; `None` when the format does not say (lnotab).
    end: Option<u32>,
}

/// Entries decoded at most (a table has about one per instruction).
const MAX_LINE_ENTRIES: usize = 1 << 20;

fn to_line(line: i64) -> Option<u32> {
    u32::try_from(line).ok().filter(|&l| l > 0)
}

impl LineTable {
    pub fn decode(format: LineTableFormat, table: &[u8], firstlineno: i32) -> Self {
        let first = i64::from(firstlineno);
        match format {
            LineTableFormat::Lnotab => Self::lnotab(table, first),
            LineTableFormat::Linetable310 => Self::linetable310(table, first),
            LineTableFormat::Locations => Self::locations(table, first),
        }
    }

    /// 3.8–3.9 `co_lnotab` (Objects/lnotab_notes.txt): pairs of (unsigned
    /// byte offset increment, signed line increment). The line of offset
    /// `o` is the first line plus every line increment whose cumulated
    /// offset is at most `o`.
    fn lnotab(table: &[u8], first: i64) -> Self {
        let mut starts = vec![(0, to_line(first))];
        let (mut addr, mut line) = (0u32, first);
        for &[offset_step, line_step] in table.as_chunks::<2>().0.iter().take(MAX_LINE_ENTRIES) {
            addr = addr.saturating_add(u32::from(offset_step));
            line += i64::from(line_step as i8);
            match starts.last_mut() {
                Some(last) if last.0 == addr => last.1 = to_line(line),
                _ => starts.push((addr, to_line(line))),
            }
        }
        Self { starts, end: None }
    }

    /// 3.10 `co_linetable`: pairs of (unsigned byte length, signed line
    /// delta); a delta of -128 means "no line" and does not move the line.
    /// Empty ranges only move the line.
    fn linetable310(table: &[u8], first: i64) -> Self {
        let mut starts = Vec::new();
        let (mut end, mut line) = (0u32, first);
        for &[length, delta] in table.as_chunks::<2>().0.iter().take(MAX_LINE_ENTRIES) {
            let start = end;
            end = end.saturating_add(u32::from(length));
            let delta = delta as i8;
            let this = if delta == -128 {
                None
            } else {
                line += i64::from(delta);
                to_line(line)
            };
            if end > start {
                starts.push((start, this));
            }
        }
        Self {
            starts,
            end: Some(end),
        }
    }

    /// 3.11+ location table (Objects/locations.md). Each entry starts with
    /// a byte with the high bit set: bits 3–6 a code, bits 0–2 the length
    /// in code units minus one. Codes 0–9 keep the line (one column byte
    /// follows), 10–12 add 0–2 (two column bytes), 13 and 14 add a signed
    /// varint (14 then has three more varints of columns), 15 has no line.
    /// Continuation bytes never have the high bit set, so after reading
    /// the line delta the rest of an entry is skipped to the next start.
    fn locations(table: &[u8], first: i64) -> Self {
        let mut starts = Vec::new();
        let (mut end, mut line) = (0u32, first);
        let mut i = 0;
        while i < table.len() && starts.len() < MAX_LINE_ENTRIES {
            let head = table[i];
            i += 1;
            if head & 0x80 == 0 {
                break; // not an entry start: the table is corrupt
            }
            let code = (head >> 3) & 15;
            let units = u32::from(head & 7) + 1;
            let this = match code {
                15 => None,
                13 | 14 => {
                    let Some((delta, used)) = read_svarint(&table[i..]) else {
                        break;
                    };
                    i += used;
                    line += delta;
                    to_line(line)
                }
                10..=12 => {
                    line += i64::from(code - 10);
                    to_line(line)
                }
                _ => to_line(line),
            };
            while i < table.len() && table[i] & 0x80 == 0 {
                i += 1;
            }
            let start = end;
            end = end.saturating_add(units * 2);
            starts.push((start, this));
        }
        Self {
            starts,
            end: Some(end),
        }
    }

    /// The line of the instruction at byte offset `offset`.
    pub fn line_at(&self, offset: u32) -> Option<u32> {
        if self.end.is_some_and(|end| offset >= end) {
            return None;
        }
        let index = self.starts.partition_point(|&(start, _)| start <= offset);
        self.starts.get(index.checked_sub(1)?)?.1
    }
}

/// A location table varint: 6-bit groups, least significant first, bit 6
/// set on all but the last. Returns the value and the bytes used.
fn read_varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        value |= u64::from(b & 63) << (6 * i);
        if b & 64 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// A signed varint: the sign in the lowest bit.
fn read_svarint(bytes: &[u8]) -> Option<(i64, usize)> {
    let (value, used) = read_varint(bytes)?;
    let magnitude = (value >> 1) as i64;
    Some((
        if value & 1 == 1 {
            -magnitude
        } else {
            magnitude
        },
        used,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lnotab_lines() {
        // first line 10; offset 0..6 line 10, 6.. line 11, 20.. line 9 (a
        // negative step), 300.. line 200 (a 255 offset step and two line
        // steps at one offset).
        let table = [6, 1, 14, (-2i8) as u8, 255, 0, 25, 127, 0, 64];
        let t = LineTable::decode(LineTableFormat::Lnotab, &table, 10);
        assert_eq!(t.line_at(0), Some(10));
        assert_eq!(t.line_at(5), Some(10));
        assert_eq!(t.line_at(6), Some(11));
        assert_eq!(t.line_at(19), Some(11));
        assert_eq!(t.line_at(20), Some(9));
        assert_eq!(t.line_at(274), Some(9));
        assert_eq!(t.line_at(300), Some(200));
    }

    #[test]
    fn linetable310_lines() {
        // first line 5: [0,4) line 6, [4,4) empty with +2 -> 8, [4,10)
        // line 8 (delta 0), [10,12) no line, [12,14) line 7.
        let table = [4, 1, 0, 2, 6, 0, 2, 0x80, 2, (-1i8) as u8];
        let t = LineTable::decode(LineTableFormat::Linetable310, &table, 5);
        assert_eq!(t.line_at(0), Some(6));
        assert_eq!(t.line_at(3), Some(6));
        assert_eq!(t.line_at(4), Some(8));
        assert_eq!(t.line_at(9), Some(8));
        assert_eq!(t.line_at(10), None);
        assert_eq!(t.line_at(12), Some(7));
        assert_eq!(t.line_at(14), None);
    }

    #[test]
    fn location_table_lines() {
        // first line 20:
        // 0x80|13<<3|0: 1 unit, no columns, svarint +2 (4) -> 22
        // 0x80|5<<3|2: 3 units, short form (one column byte) -> 22
        // 0x80|11<<3|0: 1 unit, one-line form +1, two column bytes -> 23
        // 0x80|15<<3|1: 2 units, no location -> None
        // 0x80|14<<3|0: 1 unit, long form, svarint -3 (7), end-line and
        //   columns varints (one of two bytes) -> 20
        // 0x80|13<<3|0: 1 unit, svarint +100 (200 = 0x48|0x40, 3) -> 120
        let table = [
            0x80 | 13 << 3,
            4,
            0x80 | 5 << 3 | 2,
            0x12,
            0x80 | 11 << 3,
            3,
            9,
            0x80 | 15 << 3 | 1,
            0x80 | 14 << 3,
            7,
            0,
            0x41,
            0x01,
            5,
            0x80 | 13 << 3,
            0x48 | 0x40,
            3,
        ];
        let t = LineTable::decode(LineTableFormat::Locations, &table, 20);
        let lines: Vec<_> = (0..10).map(|unit| t.line_at(unit * 2)).collect();
        assert_eq!(
            lines,
            vec![
                Some(22),
                Some(22),
                Some(22),
                Some(22),
                Some(23),
                None,
                None,
                Some(20),
                Some(120),
                None
            ]
        );
    }

    #[test]
    fn corrupt_tables_do_not_panic() {
        for format in [
            LineTableFormat::Lnotab,
            LineTableFormat::Linetable310,
            LineTableFormat::Locations,
        ] {
            for table in [&[][..], &[0xff], &[0x7f, 0x7f, 0x7f], &[0xf0, 0xff, 0xff]] {
                let t = LineTable::decode(format, table, i32::MAX);
                let _ = t.line_at(0);
                let _ = t.line_at(u32::MAX);
            }
        }
    }
}
