//! HotSpot's own description of its layout: the `gHotSpotVMStructs`,
//! `gHotSpotVMTypes`, `gHotSpotVMIntConstants` and `gHotSpotVMLongConstants`
//! tables libjvm.so exports (what the serviceability agent reads).
//!
//! Each table is an array of entries ended by one whose name is NULL; the
//! entries' layout (offsets of their members, and their stride) is itself
//! exported, in variables filled when libjvm.so is loaded. Everything is
//! read from the live process (the table pointers and the strings are
//! relocated there), and bounded: a table that does not end, a stride or
//! string that makes no sense, is an error, never a hang.
//!
//! The tables are the same in every process of one libjvm.so but for where
//! it was loaded, so what one JVM's read found serves the next JVMs of that
//! file ([`SharedVmStructs`]): reading them (some 2,000 entries, each with
//! its names) took about 3.7 ms of sparkprof's CPU for every JVM a Spark
//! host starts, a thirtieth of its CPU over a testbed job.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
};

use super::HotspotError;
use crate::sys::{memory::ReadMemory, proc::FileId};

/// Entries read from one table at most.
const MAX_ENTRIES: usize = 1 << 15;
/// Longest type, field or constant name read.
const MAX_NAME: usize = 256;
/// Largest entry stride believed.
const MAX_STRIDE: u64 = 256;

/// The exported variables that describe the tables, at their run-time
/// addresses in the process.
pub const TABLE_SYMBOLS: [&str; 24] = [
    "gHotSpotVMStructs",
    "gHotSpotVMStructEntryTypeNameOffset",
    "gHotSpotVMStructEntryFieldNameOffset",
    "gHotSpotVMStructEntryTypeStringOffset",
    "gHotSpotVMStructEntryIsStaticOffset",
    "gHotSpotVMStructEntryOffsetOffset",
    "gHotSpotVMStructEntryAddressOffset",
    "gHotSpotVMStructEntryArrayStride",
    "gHotSpotVMTypes",
    "gHotSpotVMTypeEntryTypeNameOffset",
    "gHotSpotVMTypeEntrySuperclassNameOffset",
    "gHotSpotVMTypeEntryIsOopTypeOffset",
    "gHotSpotVMTypeEntryIsIntegerTypeOffset",
    "gHotSpotVMTypeEntryIsUnsignedOffset",
    "gHotSpotVMTypeEntrySizeOffset",
    "gHotSpotVMTypeEntryArrayStride",
    "gHotSpotVMIntConstants",
    "gHotSpotVMIntConstantEntryNameOffset",
    "gHotSpotVMIntConstantEntryValueOffset",
    "gHotSpotVMIntConstantEntryArrayStride",
    "gHotSpotVMLongConstants",
    "gHotSpotVMLongConstantEntryNameOffset",
    "gHotSpotVMLongConstantEntryValueOffset",
    "gHotSpotVMLongConstantEntryArrayStride",
];

/// A field of a VM type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Its C++ type, e.g. `int`, `address`, `GrowableArray<CodeHeap*>*`.
    pub type_string: String,
    /// A static field: its address is in [`Field::address`].
    pub is_static: bool,
    /// Offset in its type (non-static fields).
    pub offset: u64,
    /// Run-time address (static fields).
    pub address: u64,
}

/// What the tables say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VmStructs {
    /// (type, field) → field.
    pub fields: HashMap<(String, String), Field>,
    /// Type → size in bytes.
    pub type_sizes: HashMap<String, u64>,
    pub int_constants: HashMap<String, i32>,
    pub long_constants: HashMap<String, u64>,
}

/// The tables as one process of a libjvm.so had them, for the next ones.
#[derive(Debug)]
struct KnownTables {
    /// The run-time address of `gHotSpotVMStructs` in that process, and
    /// the table's address (the variable's value) and its first entry's
    /// first word (a pointer to a name) there: another process of the file
    /// has them all moved by the same distance, or it is read afresh.
    anchor: u64,
    table: u64,
    first_word: u64,
    tables: VmStructs,
}

/// The VMStructs read from each libjvm.so, by file, for every JVM of it.
#[derive(Debug, Clone, Default)]
pub struct SharedVmStructs(Arc<Mutex<HashMap<FileId, Arc<KnownTables>>>>);

/// libjvm.so files whose tables are kept at most (a host has a few JDKs).
const MAX_KNOWN_FILES: usize = 16;

impl SharedVmStructs {
    /// The tables of a process of libjvm file `file` (`None`: unknown, read
    /// and not kept): those another process of the file had, moved to
    /// where this one loaded it, if its table and first entry are where
    /// that says; else read from `memory` (see [`VmStructs::read`]) and
    /// kept for the next.
    pub fn read(
        &self,
        memory: &impl ReadMemory,
        symbols: &HashMap<String, u64>,
        file: Option<FileId>,
    ) -> Result<VmStructs, HotspotError> {
        let anchor = *symbols
            .get(TABLE_SYMBOLS[0])
            .ok_or_else(|| HotspotError::MissingSymbol(TABLE_SYMBOLS[0].to_owned()))?;
        let known = file.and_then(|file| {
            let known = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            known.get(&file).cloned()
        });
        if let Some(known) = known {
            let moved = anchor.wrapping_sub(known.anchor);
            let table = memory.read_u64(anchor)?;
            if table == known.table.wrapping_add(moved)
                && memory.read_u64(table)? == known.first_word.wrapping_add(moved)
            {
                return Ok(known.tables.moved(moved));
            }
        }
        let tables = VmStructs::read(memory, symbols)?;
        if let Some(file) = file {
            let table = memory.read_u64(anchor)?;
            let first_word = memory.read_u64(table)?;
            let mut known = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            if known.len() >= MAX_KNOWN_FILES {
                known.clear();
            }
            known.insert(
                file,
                Arc::new(KnownTables {
                    anchor,
                    table,
                    first_word,
                    tables: tables.clone(),
                }),
            );
        }
        Ok(tables)
    }

    /// libjvm files whose tables are kept.
    pub fn files(&self) -> usize {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

impl VmStructs {
    /// These tables for libjvm loaded `moved` bytes from where they were
    /// read: static fields' addresses move with it; the rest is the file's.
    fn moved(&self, moved: u64) -> Self {
        let mut tables = self.clone();
        for field in tables.fields.values_mut().filter(|f| f.is_static) {
            field.address = field.address.wrapping_add(moved);
        }
        tables
    }

    /// Reads the four tables from `memory`, given the run-time address of
    /// every exported table variable (`symbols`: [`TABLE_SYMBOLS`]).
    pub fn read(
        memory: &impl ReadMemory,
        symbols: &HashMap<String, u64>,
    ) -> Result<Self, HotspotError> {
        let value = |name: &str| -> Result<u64, HotspotError> {
            let addr = *symbols
                .get(name)
                .ok_or_else(|| HotspotError::MissingSymbol(name.to_owned()))?;
            Ok(memory.read_u64(addr)?)
        };
        let mut tables = Self::default();

        let layout = Layout::new(
            "gHotSpotVMStructs",
            value("gHotSpotVMStructEntryArrayStride")?,
            &[
                value("gHotSpotVMStructEntryTypeNameOffset")?,
                value("gHotSpotVMStructEntryFieldNameOffset")?,
                value("gHotSpotVMStructEntryTypeStringOffset")?,
                value("gHotSpotVMStructEntryIsStaticOffset")?,
                value("gHotSpotVMStructEntryOffsetOffset")?,
                value("gHotSpotVMStructEntryAddressOffset")?,
            ],
        )?;
        for entry in layout.entries(memory, value("gHotSpotVMStructs")?)? {
            let entry = entry?;
            let [
                type_name,
                field_name,
                type_string,
                is_static,
                offset,
                address,
            ] = layout.members::<6>(&entry);
            let field_name = read_name(memory, field_name)?;
            let field = Field {
                type_string: read_name(memory, type_string).unwrap_or_default(),
                is_static: is_static as u32 != 0,
                offset,
                address,
            };
            tables
                .fields
                .insert((read_name(memory, type_name)?, field_name), field);
        }

        let layout = Layout::new(
            "gHotSpotVMTypes",
            value("gHotSpotVMTypeEntryArrayStride")?,
            &[
                value("gHotSpotVMTypeEntryTypeNameOffset")?,
                value("gHotSpotVMTypeEntrySizeOffset")?,
            ],
        )?;
        for entry in layout.entries(memory, value("gHotSpotVMTypes")?)? {
            let [type_name, size] = layout.members::<2>(&entry?);
            tables
                .type_sizes
                .insert(read_name(memory, type_name)?, size);
        }

        let layout = Layout::new(
            "gHotSpotVMIntConstants",
            value("gHotSpotVMIntConstantEntryArrayStride")?,
            &[
                value("gHotSpotVMIntConstantEntryNameOffset")?,
                value("gHotSpotVMIntConstantEntryValueOffset")?,
            ],
        )?;
        for entry in layout.entries(memory, value("gHotSpotVMIntConstants")?)? {
            let [name, value] = layout.members::<2>(&entry?);
            tables
                .int_constants
                .insert(read_name(memory, name)?, value as u32 as i32);
        }

        let layout = Layout::new(
            "gHotSpotVMLongConstants",
            value("gHotSpotVMLongConstantEntryArrayStride")?,
            &[
                value("gHotSpotVMLongConstantEntryNameOffset")?,
                value("gHotSpotVMLongConstantEntryValueOffset")?,
            ],
        )?;
        for entry in layout.entries(memory, value("gHotSpotVMLongConstants")?)? {
            let [name, value] = layout.members::<2>(&entry?);
            tables
                .long_constants
                .insert(read_name(memory, name)?, value);
        }
        Ok(tables)
    }

    /// A non-static field's offset in its type.
    pub fn offset(&self, type_name: &str, field: &str) -> Option<u64> {
        self.fields
            .get(&(type_name.to_owned(), field.to_owned()))
            .filter(|f| !f.is_static)
            .map(|f| f.offset)
    }

    /// A static field's run-time address.
    pub fn address(&self, type_name: &str, field: &str) -> Option<u64> {
        self.fields
            .get(&(type_name.to_owned(), field.to_owned()))
            .filter(|f| f.is_static)
            .map(|f| f.address)
    }

    /// A field's C++ type.
    pub fn type_string(&self, type_name: &str, field: &str) -> Option<&str> {
        self.fields
            .get(&(type_name.to_owned(), field.to_owned()))
            .map(|f| f.type_string.as_str())
    }

    pub fn size(&self, type_name: &str) -> Option<u64> {
        self.type_sizes.get(type_name).copied()
    }

    /// [`Self::offset`], or the error that names the missing field.
    pub fn required_offset(&self, type_name: &str, field: &str) -> Result<u64, HotspotError> {
        self.offset(type_name, field)
            .ok_or_else(|| HotspotError::MissingField(format!("{type_name}::{field}")))
    }

    /// [`Self::address`], or the error that names the missing field.
    pub fn required_address(&self, type_name: &str, field: &str) -> Result<u64, HotspotError> {
        self.address(type_name, field)
            .ok_or_else(|| HotspotError::MissingField(format!("static {type_name}::{field}")))
    }

    /// [`Self::size`], or the error that names the missing type.
    pub fn required_size(&self, type_name: &str) -> Result<u64, HotspotError> {
        self.size(type_name)
            .ok_or_else(|| HotspotError::MissingField(format!("sizeof({type_name})")))
    }

    /// The offset of a field under the first of the names (type, field)
    /// it has had in one JDK or another; the error names the first.
    pub fn first_offset(&self, candidates: &[(&str, &str)]) -> Result<u64, HotspotError> {
        candidates
            .iter()
            .find_map(|(type_name, field)| self.offset(type_name, field))
            .ok_or_else(|| {
                let (type_name, field) = candidates[0];
                HotspotError::MissingField(format!("{type_name}::{field}"))
            })
    }
}

/// One table's entry layout: its stride, and the offsets of the members
/// read (the first always the entry's name, NULL at the end).
struct Layout {
    table: &'static str,
    stride: u64,
    members: Vec<u64>,
}

impl Layout {
    fn new(table: &'static str, stride: u64, members: &[u64]) -> Result<Self, HotspotError> {
        if !(8..=MAX_STRIDE).contains(&stride) || members.iter().any(|&m| m + 8 > stride) {
            return Err(HotspotError::Garbage(format!(
                "{table}: entries of {stride} bytes with members at {members:?}"
            )));
        }
        Ok(Self {
            table,
            stride,
            members: members.to_vec(),
        })
    }

    /// The entries of the table at `start` (the table pointer's value), up
    /// to the first whose name is NULL.
    fn entries<'a, M: ReadMemory>(
        &'a self,
        memory: &'a M,
        start: u64,
    ) -> Result<impl Iterator<Item = Result<Vec<u8>, HotspotError>> + 'a, HotspotError> {
        if start == 0 {
            return Err(HotspotError::Garbage(format!("{} is NULL", self.table)));
        }
        let mut index = 0usize;
        let mut ended = false;
        Ok(std::iter::from_fn(move || {
            if ended {
                return None;
            }
            if index == MAX_ENTRIES {
                ended = true;
                return Some(Err(HotspotError::Garbage(format!(
                    "{} has no end within {MAX_ENTRIES} entries",
                    self.table
                ))));
            }
            let addr = start + index as u64 * self.stride;
            index += 1;
            match memory.read_vec(addr, self.stride as usize) {
                Err(err) => {
                    ended = true;
                    Some(Err(err.into()))
                }
                Ok(entry) if member(&entry, self.members[0]) == 0 => {
                    ended = true;
                    None
                }
                Ok(entry) => Some(Ok(entry)),
            }
        }))
    }

    /// The members of an entry, as 64-bit values (a 32-bit member's upper
    /// half is its neighbour's: callers narrow what is narrower).
    fn members<const N: usize>(&self, entry: &[u8]) -> [u64; N] {
        std::array::from_fn(|i| member(entry, self.members[i]))
    }
}

fn member(entry: &[u8], offset: u64) -> u64 {
    let start = offset as usize;
    entry.get(start..start + 8).map_or(0, |bytes| {
        u64::from_le_bytes(bytes.try_into().unwrap_or([0; 8]))
    })
}

fn read_name(memory: &impl ReadMemory, addr: u64) -> Result<String, HotspotError> {
    if addr == 0 {
        return Ok(String::new());
    }
    let name = memory.read_c_string(addr, MAX_NAME)?;
    if name.len() == MAX_NAME || name.chars().any(|c| c.is_control()) {
        return Err(HotspotError::Garbage(format!(
            "a name at {addr:#x} is not one: {name:?}"
        )));
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::memory::MemoryError;

    /// A fake address space: one block of bytes at a base address.
    struct Fake {
        base: u64,
        bytes: Vec<u8>,
    }

    impl ReadMemory for Fake {
        fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
            let start = addr.checked_sub(self.base).map(|s| s as usize);
            match start.and_then(|s| self.bytes.get(s..s + buf.len())) {
                Some(src) => {
                    buf.copy_from_slice(src);
                    Ok(())
                }
                None => Err(MemoryError::Read {
                    pid: 0,
                    addr,
                    len: buf.len(),
                    source: std::io::Error::from_raw_os_error(libc::EFAULT),
                }),
            }
        }
    }

    const BASE: u64 = 0x10_0000;

    /// Tables of one struct entry each (layouts as on x86-64 JDKs), plus
    /// `edit` applied to the bytes before reading.
    fn fake(
        edit: impl FnOnce(&mut Vec<u8>, &mut HashMap<String, u64>),
    ) -> (Fake, HashMap<String, u64>) {
        let mut bytes = vec![0u8; 0x4000];
        let mut symbols = HashMap::new();
        let put = |bytes: &mut Vec<u8>, at: usize, value: u64| {
            bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
        };
        let mut strings = 0x3000;
        let mut string = |bytes: &mut Vec<u8>, text: &str| {
            bytes[strings..strings + text.len()].copy_from_slice(text.as_bytes());
            let addr = BASE + strings as u64;
            strings += text.len() + 1;
            addr
        };
        // Variables, one per symbol, from 0x100.
        let values: [(&str, u64); 24] = [
            ("gHotSpotVMStructs", BASE + 0x1000),
            ("gHotSpotVMStructEntryTypeNameOffset", 0),
            ("gHotSpotVMStructEntryFieldNameOffset", 8),
            ("gHotSpotVMStructEntryTypeStringOffset", 16),
            ("gHotSpotVMStructEntryIsStaticOffset", 24),
            ("gHotSpotVMStructEntryOffsetOffset", 32),
            ("gHotSpotVMStructEntryAddressOffset", 40),
            ("gHotSpotVMStructEntryArrayStride", 48),
            ("gHotSpotVMTypes", BASE + 0x2000),
            ("gHotSpotVMTypeEntryTypeNameOffset", 0),
            ("gHotSpotVMTypeEntrySuperclassNameOffset", 8),
            ("gHotSpotVMTypeEntryIsOopTypeOffset", 16),
            ("gHotSpotVMTypeEntryIsIntegerTypeOffset", 20),
            ("gHotSpotVMTypeEntryIsUnsignedOffset", 24),
            ("gHotSpotVMTypeEntrySizeOffset", 32),
            ("gHotSpotVMTypeEntryArrayStride", 40),
            ("gHotSpotVMIntConstants", BASE + 0x2800),
            ("gHotSpotVMIntConstantEntryNameOffset", 0),
            ("gHotSpotVMIntConstantEntryValueOffset", 8),
            ("gHotSpotVMIntConstantEntryArrayStride", 16),
            ("gHotSpotVMLongConstants", BASE + 0x2c00),
            ("gHotSpotVMLongConstantEntryNameOffset", 0),
            ("gHotSpotVMLongConstantEntryValueOffset", 8),
            ("gHotSpotVMLongConstantEntryArrayStride", 16),
        ];
        for (i, (name, value)) in values.iter().enumerate() {
            let at = 0x100 + 8 * i;
            put(&mut bytes, at, *value);
            symbols.insert(name.to_string(), BASE + at as u64);
        }
        let (blob, frame_size, int) = (
            string(&mut bytes, "CodeBlob"),
            string(&mut bytes, "_frame_size"),
            string(&mut bytes, "int"),
        );
        put(&mut bytes, 0x1000, blob);
        put(&mut bytes, 0x1008, frame_size);
        put(&mut bytes, 0x1010, int);
        put(&mut bytes, 0x1020, 28);
        put(&mut bytes, 0x2000, blob);
        put(&mut bytes, 0x2020, 104);
        let constant = string(&mut bytes, "frame::interpreter_frame_sender_sp_offset");
        put(&mut bytes, 0x2800, constant);
        put(&mut bytes, 0x2808, (-1i32) as u32 as u64);
        edit(&mut bytes, &mut symbols);
        (Fake { base: BASE, bytes }, symbols)
    }

    #[test]
    fn reads_the_four_tables() {
        let (memory, symbols) = fake(|_, _| {});
        let tables = VmStructs::read(&memory, &symbols).unwrap();
        assert_eq!(tables.offset("CodeBlob", "_frame_size"), Some(28));
        assert_eq!(tables.type_string("CodeBlob", "_frame_size"), Some("int"));
        assert_eq!(tables.size("CodeBlob"), Some(104));
        assert_eq!(
            tables.int_constants["frame::interpreter_frame_sender_sp_offset"],
            -1
        );
        assert!(tables.long_constants.is_empty());
    }

    #[test]
    fn required_lookups_name_what_is_missing() {
        let (memory, symbols) = fake(|_, _| {});
        let tables = VmStructs::read(&memory, &symbols).unwrap();
        assert_eq!(
            tables.required_offset("CodeBlob", "_frame_size").unwrap(),
            28
        );
        assert_eq!(tables.required_size("CodeBlob").unwrap(), 104);
        assert_eq!(
            tables
                .first_offset(&[("nmethod", "_frame_size"), ("CodeBlob", "_frame_size")])
                .unwrap(),
            28
        );
        let missing = |err: HotspotError| match err {
            HotspotError::MissingField(what) => what,
            other => panic!("{other}"),
        };
        assert_eq!(
            missing(tables.required_offset("CodeBlob", "_name").unwrap_err()),
            "CodeBlob::_name"
        );
        // A field, not a static: no address.
        assert_eq!(
            missing(
                tables
                    .required_address("CodeBlob", "_frame_size")
                    .unwrap_err()
            ),
            "static CodeBlob::_frame_size"
        );
        assert_eq!(
            missing(tables.required_size("nmethod").unwrap_err()),
            "sizeof(nmethod)"
        );
        assert_eq!(
            missing(
                tables
                    .first_offset(&[("JavaThread", "_osthread"), ("Thread", "_osthread")])
                    .unwrap_err()
            ),
            "JavaThread::_osthread"
        );
    }

    #[test]
    fn garbage_tables_are_errors_not_hangs() {
        // A struct table with no NULL entry: every entry names something.
        let (memory, symbols) = fake(|bytes, _| {
            let name = (BASE + 0x3000).to_le_bytes();
            for entry in (0x1000..0x2000).step_by(48) {
                bytes[entry..entry + 8].copy_from_slice(&name);
            }
        });
        let err = VmStructs::read(&memory, &symbols).unwrap_err();
        assert!(matches!(err, HotspotError::Read(_)), "{err}");

        // A stride of 0, and one smaller than the members.
        for stride in [0u64, 16] {
            let (memory, symbols) = fake(|bytes, symbols| {
                let at = (symbols["gHotSpotVMStructEntryArrayStride"] - BASE) as usize;
                bytes[at..at + 8].copy_from_slice(&stride.to_le_bytes());
            });
            let err = VmStructs::read(&memory, &symbols).unwrap_err();
            assert!(matches!(err, HotspotError::Garbage(_)), "{err}");
        }

        // A name pointer into nowhere, and a table cut short (truncated).
        let (memory, symbols) = fake(|bytes, _| {
            bytes[0x1000..0x1008].copy_from_slice(&0xdead_0000u64.to_le_bytes());
        });
        assert!(VmStructs::read(&memory, &symbols).is_err());
        let (mut memory, symbols) = fake(|_, _| {});
        memory.bytes.truncate(0x1010);
        assert!(VmStructs::read(&memory, &symbols).is_err());

        // A missing symbol.
        let (memory, mut symbols) = fake(|_, _| {});
        symbols.remove("gHotSpotVMTypes");
        let err = VmStructs::read(&memory, &symbols).unwrap_err();
        assert!(matches!(err, HotspotError::MissingSymbol(_)), "{err}");
    }
}
