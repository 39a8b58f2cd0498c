//! Objects in a CPython process: strings, bytes and code objects, checked
//! against their type objects where the module exports them.

use std::sync::Arc;

use profiler_common::PY_NO_OFFSET;
use tracing::debug;

use super::types::{InstrFormat, PythonError, StructOffsets};
use super::{
    line_table::LineTable,
    memory::{Memory, ReadMemory, field_u32, field_u64},
};

/// Characters of a string (function or file name) read at most; a longer
/// one is cut and ends with `…`.
pub const MAX_STRING_CHARS: usize = 1024;
/// Bytes of a line table read at most (a generated module of some 100,000
/// lines stays below).
pub const MAX_LINE_TABLE_BYTES: usize = 4 << 20;

/// Where a process's type objects are (run-time addresses): objects are
/// checked against them. `None` when the module does not export one; the
/// checks of that type are then structural only.
#[derive(Debug, Clone, Copy, Default)]
pub struct TypeAddresses {
    pub code: Option<u64>,
    pub unicode: Option<u64>,
    pub bytes: Option<u64>,
}

/// Whether `addr` can be an object's (non-null, aligned).
pub fn object_address(addr: u64) -> bool {
    addr != 0 && addr.is_multiple_of(8)
}

/// What a code object is called in errors.
const CODE: &str = "code object";

/// Reads CPython objects of one version from one process, through
/// `memory`: the process's, or blocks of it read ahead (see
/// [`crate::sys::memory::CachedMemory`]).
#[derive(Debug, Clone, Copy)]
pub struct ObjectReader<M = Memory> {
    pub pid: u32,
    pub memory: M,
    pub offsets: &'static StructOffsets,
    pub types: TypeAddresses,
}

impl<M> ObjectReader<M> {
    /// The same reader of the same process, through `memory` instead.
    pub fn through<N>(&self, memory: N) -> ObjectReader<N> {
        ObjectReader {
            pid: self.pid,
            memory,
            offsets: self.offsets,
            types: self.types,
        }
    }
}

impl<M: ReadMemory> ObjectReader<M> {
    fn bad(&self, what: &'static str, addr: u64, reason: impl Into<String>) -> PythonError {
        PythonError::BadObject {
            pid: self.pid,
            what,
            addr,
            reason: reason.into(),
        }
    }

    fn check_type(
        &self,
        what: &'static str,
        addr: u64,
        block: &[u8],
        expected: Option<u64>,
    ) -> Result<(), PythonError> {
        let actual = field_u64(block, self.offsets.object_type).unwrap_or(0);
        match expected {
            Some(expected) if actual != expected => Err(self.bad(
                what,
                addr,
                format!("its type is {actual:#x}, not {expected:#x}"),
            )),
            None if actual == 0 => Err(self.bad(what, addr, "it has no type")),
            _ => Ok(()),
        }
    }

    /// A `str` object: compact ASCII, or compact with 1-, 2- or 4-byte code
    /// points. At most [`MAX_STRING_CHARS`] characters are read.
    pub fn read_unicode(&self, addr: u64) -> Result<String, PythonError> {
        const WHAT: &str = "str object";
        let o = self.offsets;
        let header = self.memory.read_vec(addr, o.unicode_state as usize + 4)?;
        self.check_type(WHAT, addr, &header, self.types.unicode)?;
        let length = field_u64(&header, o.unicode_length).unwrap_or(u64::MAX) as i64;
        let state = field_u32(&header, o.unicode_state).unwrap_or(0);
        let kind = (state >> o.unicode_kind_shift) & 7;
        let compact = (state >> o.unicode_compact_bit) & 1 == 1;
        let ascii = (state >> o.unicode_ascii_bit) & 1 == 1;
        if !compact {
            return Err(self.bad(WHAT, addr, "not a compact string"));
        }
        if length < 0 {
            return Err(self.bad(WHAT, addr, format!("length {length}")));
        }
        if !matches!(kind, 1 | 2 | 4) || (ascii && kind != 1) {
            return Err(self.bad(WHAT, addr, format!("kind {kind}, ascii {ascii}")));
        }
        let chars = (length as usize).min(MAX_STRING_CHARS);
        let data = addr
            + u64::from(if ascii {
                o.unicode_ascii_size
            } else {
                o.unicode_compact_size
            });
        let bytes = self.memory.read_vec(data, chars * kind as usize)?;
        let mut text: String = match kind {
            1 if ascii => {
                if !bytes.is_ascii() {
                    return Err(self.bad(WHAT, addr, "an ASCII string with non-ASCII bytes"));
                }
                bytes.iter().map(|&b| char::from(b)).collect()
            }
            1 => bytes.iter().map(|&b| char::from(b)).collect(),
            2 => bytes
                .as_chunks::<2>()
                .0
                .iter()
                .map(|&c| {
                    char::from_u32(u32::from(u16::from_le_bytes(c)))
                        .unwrap_or(char::REPLACEMENT_CHARACTER)
                })
                .collect(),
            _ => bytes
                .as_chunks::<4>()
                .0
                .iter()
                .map(|&c| {
                    char::from_u32(u32::from_le_bytes(c)).unwrap_or(char::REPLACEMENT_CHARACTER)
                })
                .collect(),
        };
        if length as usize > chars {
            text.push('…');
        }
        Ok(text)
    }

    /// The size of a `bytes` object and where its data starts.
    pub fn bytes_extent(&self, addr: u64) -> Result<(u64, u64), PythonError> {
        const WHAT: &str = "bytes object";
        let o = self.offsets;
        let header = self.memory.read_vec(addr, o.bytes_size as usize + 8)?;
        self.check_type(WHAT, addr, &header, self.types.bytes)?;
        let size = field_u64(&header, o.bytes_size).unwrap_or(u64::MAX) as i64;
        if size < 0 {
            return Err(self.bad(WHAT, addr, format!("size {size}")));
        }
        Ok((size as u64, addr + u64::from(o.bytes_data)))
    }

    /// The contents of a `bytes` object of at most `max` bytes.
    pub fn read_bytes(&self, addr: u64, max: usize) -> Result<Vec<u8>, PythonError> {
        let (size, data) = self.bytes_extent(addr)?;
        if size > max as u64 {
            return Err(self.bad(
                "bytes object",
                addr,
                format!("{size} bytes, more than {max}"),
            ));
        }
        Ok(self.memory.read_vec(data, size as usize)?)
    }

    /// The fixed part of a code object: checks that `addr` holds one.
    pub fn read_code_header(&self, addr: u64) -> Result<CodeHeader, PythonError> {
        if !object_address(addr) {
            return Err(self.bad(CODE, addr, "not an object address"));
        }
        let block = self.memory.read_vec(addr, self.offsets.code_read_len())?;
        self.code_header(addr, &block)
    }

    /// The fixed part of the code object at `addr` from its bytes (as
    /// many as [`StructOffsets::code_read_len`] says), checked.
    pub fn code_header(&self, addr: u64, block: &[u8]) -> Result<CodeHeader, PythonError> {
        let o = self.offsets;
        self.check_type(CODE, addr, block, self.types.code)?;
        let pointer = |offset: u32| field_u64(block, offset).unwrap_or(0);
        let header = CodeHeader {
            firstlineno: field_u32(block, o.code_firstlineno).unwrap_or(0) as i32,
            name: pointer(if o.code_qualname != PY_NO_OFFSET {
                o.code_qualname
            } else {
                o.code_name
            }),
            filename: pointer(o.code_filename),
            linetable: pointer(o.code_linetable),
            code: pointer(o.code_code),
            size: field_u64(block, o.code_size),
        };
        if header.firstlineno < 0 {
            return Err(self.bad(CODE, addr, format!("first line {}", header.firstlineno)));
        }
        if header.name == 0 || header.filename == 0 || header.linetable == 0 {
            return Err(self.bad(CODE, addr, "a null name, file name or line table"));
        }
        if header
            .size
            .is_some_and(|size| size as i64 <= 0 || size > 1 << 28)
        {
            return Err(self.bad(CODE, addr, format!("{:?} code units", header.size)));
        }
        Ok(header)
    }

    /// Everything needed to name frames of a code object.
    pub fn read_code(&self, addr: u64, header: &CodeHeader) -> Result<CodeInfo, PythonError> {
        let o = self.offsets;
        let function = self.read_unicode(header.name)?;
        let file = self.read_unicode(header.filename)?;
        // The bytecode's length only bounds the instructions accepted.
        let code_bytes = match header.size {
            Some(units) => Some(units * 2),
            None => match self.bytes_extent(header.code) {
                Ok((size, _)) => Some(size),
                Err(e) if e.is_process_gone() => return Err(e),
                Err(_) => None,
            },
        };
        // A table that cannot be read costs the lines, not the name.
        let lines = match self.read_bytes(header.linetable, MAX_LINE_TABLE_BYTES) {
            Ok(table) => Some(LineTable::decode(o.line_table, &table, header.firstlineno)),
            Err(e) if e.is_process_gone() => return Err(e),
            Err(e) => {
                debug!(code = addr, error = %e, "python line table unreadable");
                None
            }
        };
        Ok(CodeInfo {
            header: *header,
            function: function.into(),
            file: file.into(),
            code_bytes,
            lines,
        })
    }
}

/// The fixed fields of a code object; also its cheap identity: a code
/// object freed and another allocated at its address would have to agree
/// on all of them (its name, file name and line table objects included)
/// to be mistaken for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodeHeader {
    pub firstlineno: i32,
    /// `co_qualname` on 3.11+, else `co_name`.
    pub name: u64,
    pub filename: u64,
    pub linetable: u64,
    /// `co_code` (3.8–3.10), 0 otherwise.
    pub code: u64,
    /// Code units (3.11+).
    pub size: Option<u64>,
}

/// A code object, read.
#[derive(Debug, Clone)]
pub struct CodeInfo {
    pub header: CodeHeader,
    pub function: Arc<str>,
    pub file: Arc<str>,
    /// Length of the bytecode in bytes, where known.
    pub code_bytes: Option<u64>,
    pub lines: Option<LineTable>,
}

impl CodeInfo {
    /// The line of an instruction the kernel recorded (see
    /// [`InstrFormat`]); `None` when it is out of range or the table has
    /// no line for it.
    pub fn line(&self, offsets: &StructOffsets, code_addr: u64, instr: u64) -> Option<u32> {
        let offset: i64 = match offsets.instr {
            // The kernel copies the 4-byte int into a u64: its low half.
            InstrFormat::LastiBytes => i64::from(instr as u32 as i32),
            InstrFormat::LastiCodeUnits => i64::from(instr as u32 as i32) * 2,
            InstrFormat::Pointer => {
                let first = code_addr.wrapping_add(u64::from(offsets.code_code_adaptive));
                let delta = instr.wrapping_sub(first) as i64;
                if delta % 2 != 0 {
                    return None;
                }
                delta
            }
        };
        // Before the first instruction (a frame that has not started):
        // CPython reports the first line.
        if (-2..0).contains(&offset) {
            return u32::try_from(self.header.firstlineno)
                .ok()
                .filter(|&l| l > 0);
        }
        if offset < 0 || self.code_bytes.is_some_and(|len| offset as u64 >= len) {
            return None;
        }
        self.lines.as_ref()?.line_at(u32::try_from(offset).ok()?)
    }
}
