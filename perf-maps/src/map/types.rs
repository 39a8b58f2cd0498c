//! Plain data types shared by the parser, the symbol table and the reloader.

use std::fmt;

/// One line of a perf map, as written: `[start, start + size)` is named `name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerfMapEntry {
    /// First address of the code.
    pub start: u64,
    /// Length in bytes. Never zero in entries produced by the parser (see
    /// [`ParseStats::zero_size`] for why those are dropped).
    pub size: u64,
    /// The symbol name exactly as the runtime wrote it (trailing whitespace
    /// trimmed). Names may contain spaces: the JDK writes full signatures.
    pub name: String,
}

impl PerfMapEntry {
    /// One past the last address. The parser guarantees this does not
    /// overflow.
    pub fn end(&self) -> u64 {
        self.start + self.size
    }
}

/// How many malformed line numbers are remembered in [`ParseStats`]: enough to
/// find the problem in the file, bounded so that a file full of garbage does
/// not cost memory.
pub const MAX_REPORTED_MALFORMED: usize = 5;

/// Counters from parsing, so callers can report "N bad lines (first at 3, 17)"
/// instead of failing: one bad line in a map written by a crashing runtime
/// should not cost us the other 9,000 names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParseStats {
    /// Non-blank lines seen.
    pub lines: usize,
    /// Entries accepted.
    pub entries: usize,
    /// Lines that were not `START SIZE name`.
    pub malformed: usize,
    /// 1-based line numbers of the first [`MAX_REPORTED_MALFORMED`] malformed
    /// lines.
    pub first_malformed: Vec<usize>,
    /// Well-formed lines with size 0. They are dropped: a zero-length range
    /// covers no address, so it can never be the answer to a lookup, and
    /// treating it as "until the next symbol" (as some ELF symbolizers do for
    /// sizeless symbols) would attribute unrelated JIT code to it. They also
    /// do not trim earlier, overlapping entries.
    pub zero_size: usize,
}

impl ParseStats {
    pub(crate) fn record_malformed(&mut self, line_no: usize) {
        self.malformed += 1;
        if self.first_malformed.len() < MAX_REPORTED_MALFORMED {
            self.first_malformed.push(line_no);
        }
    }

    /// Adds the counters of a later chunk of the same file.
    pub fn merge(&mut self, other: &ParseStats) {
        self.lines += other.lines;
        self.entries += other.entries;
        self.zero_size += other.zero_size;
        self.malformed += other.malformed;
        for &n in &other.first_malformed {
            if self.first_malformed.len() < MAX_REPORTED_MALFORMED {
                self.first_malformed.push(n);
            }
        }
    }
}

/// The entries of a file in file order (the order matters: later wins) plus
/// the parse counters.
#[derive(Debug, Clone, Default)]
pub struct ParsedMap {
    /// Accepted entries, in the order they appeared.
    pub entries: Vec<PerfMapEntry>,
    /// Counters.
    pub stats: ParseStats,
}

/// Why a single line was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineError {
    /// The start address is missing or not hex.
    BadStart,
    /// The size is missing or not hex.
    BadSize,
    /// There is no name after the size.
    MissingName,
    /// `start + size` does not fit in 64 bits.
    Overflow,
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LineError::BadStart => "start address is not hex",
            LineError::BadSize => "size is not hex",
            LineError::MissingName => "no symbol name",
            LineError::Overflow => "start + size overflows",
        })
    }
}

impl std::error::Error for LineError {}

/// The answer to a lookup: the symbol covering an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Symbol<'a> {
    /// Symbol name (readable or full, depending on how the table was built).
    pub name: &'a str,
    /// Start of the symbol as written in the map. When a later entry covered
    /// part of this one, the remaining piece keeps the original start so that
    /// offsets stay relative to the real function entry.
    pub start: u64,
    /// Size as written in the map.
    pub size: u64,
    /// `address - start`.
    pub offset: u64,
}
