//! Reading a CPython process from the outside: finding the interpreter
//! module and its version, walking its interpreter and thread lists,
//! walking a thread's frames as the kernel does, and reading code objects,
//! strings and line tables.
//!
//! Everything read from the target is treated as hostile (it may be torn by
//! a running interpreter, freed, or not Python at all): every list walk is
//! bounded and stops on a cycle, every length is bounded, objects are
//! checked against their type object where the module exports it, and
//! nothing here panics on any input.

use std::{
    collections::{HashMap, HashSet},
    fs, io,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, OnceLock},
};

use object::{Object as _, ObjectSegment as _, ObjectSymbol as _};
use profiler_common::{PY_NO_OFFSET, PythonFrame, python_layout};
use tracing::debug;

use super::types::{InstrFormat, LineTableFormat, PythonError, PythonVersion, StructOffsets};
use crate::sys::proc::{self, Mapping};

/// Characters of a string (function or file name) read at most; a longer
/// one is cut and ends with `…`.
pub const MAX_STRING_CHARS: usize = 1024;
/// Bytes of a line table read at most (a generated module of some 100,000
/// lines stays below).
pub const MAX_LINE_TABLE_BYTES: usize = 4 << 20;
/// Interpreters walked at most.
pub const MAX_INTERPRETERS: usize = 256;
/// Thread states walked at most, over all interpreters.
pub const MAX_THREADS: usize = 4096;
/// Where glibc (x86-64, 2.26 and later) keeps `tid` in `struct pthread`,
/// which a `pthread_t` points at. Tried first; other C libraries are
/// calibrated (see [`calibrate_pthread_tid`]).
pub const GLIBC_PTHREAD_TID_OFFSET: u32 = 0x2d0;
/// Bytes of a `struct pthread` searched when calibrating.
const PTHREAD_SCAN_BYTES: usize = 0x1000;

// ---------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------

/// Reads another process's memory with `process_vm_readv` (one system call
/// per read, no stop of the target).
#[derive(Debug, Clone, Copy)]
pub struct Memory {
    pid: u32,
}

impl Memory {
    pub fn new(pid: u32) -> Self {
        Self { pid }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    fn fault(&self, addr: u64, len: usize, source: io::Error) -> PythonError {
        PythonError::Read {
            pid: self.pid,
            addr,
            len,
            source,
        }
    }

    /// Fills `buf` from `addr`, entirely or not at all.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), PythonError> {
        if buf.is_empty() {
            return Ok(());
        }
        let len = buf.len();
        // Address 0 is never mapped, and user space ends below 2^63 on
        // every 64-bit Linux: reject garbage without a system call.
        if addr == 0 || addr.checked_add(len as u64).is_none_or(|end| end > 1 << 63) {
            return Err(self.fault(addr, len, io::Error::from_raw_os_error(libc::EFAULT)));
        }
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: len,
        };
        let remote = libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: len,
        };
        // SAFETY: `local` describes `buf`, valid and writable for `len`
        // bytes for the duration of the call; `remote` is only dereferenced
        // by the kernel, in the target's address space.
        let read =
            unsafe { libc::process_vm_readv(self.pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        if read < 0 {
            let error = io::Error::last_os_error();
            if error.raw_os_error() == Some(libc::ESRCH) {
                return Err(PythonError::ProcessGone { pid: self.pid });
            }
            return Err(self.fault(addr, len, error));
        }
        if read as usize != len {
            return Err(self.fault(
                addr,
                len,
                io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("short read of {read} bytes"),
                ),
            ));
        }
        Ok(())
    }

    pub fn read_vec(&self, addr: u64, len: usize) -> Result<Vec<u8>, PythonError> {
        let mut buf = vec![0; len];
        self.read(addr, &mut buf)?;
        Ok(buf)
    }

    pub fn read_u64(&self, addr: u64) -> Result<u64, PythonError> {
        let mut buf = [0; 8];
        self.read(addr, &mut buf)?;
        Ok(u64::from_le_bytes(buf))
    }

    pub fn read_u32(&self, addr: u64) -> Result<u32, PythonError> {
        let mut buf = [0; 4];
        self.read(addr, &mut buf)?;
        Ok(u32::from_le_bytes(buf))
    }
}

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

// ---------------------------------------------------------------------------
// /proc
// ---------------------------------------------------------------------------

/// One line of /proc/PID/maps backed by a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMapping {
    pub start: u64,
    pub end: u64,
    pub offset: u64,
    pub inode: u64,
    /// The path as the process sees it (inside its mount namespace),
    /// without a ` (deleted)` suffix.
    pub path: String,
}

/// Whether `/proc/PID` still exists: tells a process that exited from one
/// whose files could not be read for another reason.
pub fn process_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// An error on a /proc file of `pid`: [`PythonError::ProcessGone`] when the
/// process went away.
pub fn proc_error(pid: u32, path: PathBuf, source: io::Error) -> PythonError {
    // A missing file may be a module path that no longer exists: only the
    // process's own /proc entry tells that the process went away.
    if source.raw_os_error() == Some(libc::ESRCH) || !process_exists(pid) {
        PythonError::ProcessGone { pid }
    } else {
        PythonError::Io { path, source }
    }
}

/// The file-backed mappings of a process.
pub fn read_file_mappings(pid: u32) -> Result<Vec<FileMapping>, PythonError> {
    let maps = proc::read_maps(pid)
        .map_err(|e| proc_error(pid, PathBuf::from(format!("/proc/{pid}/maps")), e))?;
    Ok(file_mappings(maps))
}

/// The file-backed ones of a process's mappings.
pub fn file_mappings(maps: Vec<Mapping>) -> Vec<FileMapping> {
    maps.into_iter()
        .filter_map(|m| {
            Some(FileMapping {
                start: m.start,
                end: m.end,
                offset: m.offset,
                inode: m.inode,
                path: m.file()?.to_string_lossy().into_owned(),
            })
        })
        .collect()
}

/// The live threads of a process, as (thread id in the process's own PID
/// namespace, thread id on this host). The two differ in a container: the
/// interpreter and the C library record the former, the kernel's samples
/// carry the latter.
pub fn live_threads(pid: u32) -> Result<HashMap<u32, u32>, PythonError> {
    let threads = proc::namespace_threads(pid)
        .map_err(|e| proc_error(pid, PathBuf::from(format!("/proc/{pid}/task")), e))?;
    if threads.is_empty() {
        return Err(PythonError::ProcessGone { pid });
    }
    Ok(threads)
}

// ---------------------------------------------------------------------------
// The interpreter module
// ---------------------------------------------------------------------------

/// What sparkprof needs from a module's ELF file.
#[derive(Debug, Clone, Default)]
pub struct ModuleSymbols {
    /// `_PyRuntime` (the runtime state), as a link-time address.
    pub runtime: Option<u64>,
    /// `Py_Version` (3.11+), a `const unsigned long PY_VERSION_HEX`.
    pub py_version: Option<u64>,
    /// The type objects that identify code objects, strings and bytes.
    pub code_type: Option<u64>,
    pub unicode_type: Option<u64>,
    pub bytes_type: Option<u64>,
    /// The version told by which API functions the module exports, for
    /// modules without `Py_Version` (3.8–3.10) whose file name does not
    /// say: see [`MARKERS`]. (The `PY_VERSION` string is no help: compilers
    /// store the short literal as immediates in the code, and none of the
    /// 3.8–3.10 libraries installed here has it in `.rodata`.)
    pub marker_version: Option<PythonVersion>,
    /// Loadable segments: (virtual address, file offset, file size).
    pub segments: Vec<(u64, u64, u64)>,
}

const SYMBOL_NAMES: [&str; 5] = [
    "_PyRuntime",
    "Py_Version",
    "PyCode_Type",
    "PyUnicode_Type",
    "PyBytes_Type",
];

impl ModuleSymbols {
    fn set(&mut self, name: &[u8], address: u64) {
        let slot = match name {
            b"_PyRuntime" => &mut self.runtime,
            b"Py_Version" => &mut self.py_version,
            b"PyCode_Type" => &mut self.code_type,
            b"PyUnicode_Type" => &mut self.unicode_type,
            b"PyBytes_Type" => &mut self.bytes_type,
            _ => return,
        };
        if slot.is_none() && address != 0 {
            *slot = Some(address);
        }
    }

    fn complete(&self) -> bool {
        self.runtime.is_some()
            && self.code_type.is_some()
            && self.unicode_type.is_some()
            && self.bytes_type.is_some()
    }

    /// Reads the symbols of an ELF file, parsing only the parts it needs
    /// (a non-Python executable can be large).
    pub fn load(file: fs::File, path: &Path) -> Result<Self, PythonError> {
        let cache = object::ReadCache::new(file);
        let elf = object::File::parse(&cache).map_err(|e| PythonError::Elf {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
        let mut symbols = Self::default();
        if !elf.is_64() || !elf.is_little_endian() {
            debug!(path = %path.display(), "not a 64-bit little-endian ELF file");
            return Ok(symbols);
        }
        // Everything is exported (extension modules link against it), so
        // `.dynsym` suffices. `.symtab` is the fallback for odd builds
        // (a static interpreter that exports nothing), searched only in a
        // file that looks like Python: it can be tens of megabytes in any
        // large executable, and every executable on the host is probed.
        let mut exports_python = false;
        let mut newest_marker = None;
        for symbol in elf.dynamic_symbols() {
            if let Ok(name) = symbol.name_bytes() {
                exports_python |= name.starts_with(b"Py_") || name.starts_with(b"_Py");
                if symbol.is_definition() && SYMBOL_NAMES.iter().any(|n| n.as_bytes() == name) {
                    symbols.set(name, symbol.address());
                }
                if symbol.is_definition()
                    && let Some(&(_, version)) = MARKERS.iter().find(|(n, _)| n.as_bytes() == name)
                {
                    newest_marker = newest_marker.max(Some(version));
                }
            }
        }
        let named_python = path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().to_ascii_lowercase().contains("python"));
        if !symbols.complete() && (exports_python || named_python) {
            for symbol in elf.symbols() {
                if let Ok(name) = symbol.name_bytes()
                    && symbol.is_definition()
                    && SYMBOL_NAMES.iter().any(|n| n.as_bytes() == name)
                {
                    symbols.set(name, symbol.address());
                }
            }
        }
        if symbols.runtime.is_none() {
            return Ok(symbols);
        }
        symbols.segments = elf
            .segments()
            .map(|s| {
                let (offset, size) = s.file_range();
                (s.address(), offset, size)
            })
            .collect();
        if symbols.py_version.is_none() {
            // With `_PyRuntime` (3.7+) and none of the markers: 3.7.
            symbols.marker_version = newest_marker.or(Some(PythonVersion::new(3, 7)));
        }
        Ok(symbols)
    }

    /// The load bias of the module in a process: what to add to a
    /// link-time address. Found from a mapping of the file and the
    /// loadable segment holding that mapping's file offset (segments are
    /// mapped at page granularity, and their address and offset are equal
    /// modulo the page size).
    pub fn bias(&self, mappings: &[&FileMapping]) -> Option<u64> {
        mappings.iter().find_map(|m| {
            self.segments.iter().find_map(|&(vaddr, offset, size)| {
                let page_start = offset & !0xfff;
                (m.offset >= page_start && m.offset < offset.saturating_add(size.max(1))).then(
                    || {
                        m.start
                            .wrapping_sub(m.offset)
                            .wrapping_sub(vaddr.wrapping_sub(offset))
                    },
                )
            })
        })
    }
}

/// API functions that appeared in a version and stayed exported through
/// 3.10: the newest one a module exports tells its version when nothing
/// else does. (Checked against the installed 3.8 to 3.13 libraries by the
/// tests.)
pub const MARKERS: [(&str, PythonVersion); 3] = [
    ("PyCode_NewWithPosOnlyArgs", PythonVersion::new(3, 8)),
    ("PyFrame_GetCode", PythonVersion::new(3, 9)),
    ("PyModule_AddObjectRef", PythonVersion::new(3, 10)),
];

/// What a module's file name says: `python3.11`, `libpython3.11.so.1.0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileNameVersion {
    /// A plain build of this version.
    Version(PythonVersion),
    /// A build whose objects are laid out differently: debug (`d`) or
    /// free-threaded (`t`), e.g. `python3.13t`.
    Flavour(PythonVersion, char),
}

/// The version in a module's file name, if it has one.
pub fn version_from_file_name(name: &str) -> Option<FileNameVersion> {
    let rest = name
        .strip_prefix("libpython")
        .or_else(|| name.strip_prefix("python"))?;
    let rest = rest.strip_prefix("3.")?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let minor: u8 = rest.get(..digits)?.parse().ok()?;
    let rest = &rest[digits..];
    let flags_len = rest.bytes().take_while(u8::is_ascii_lowercase).count();
    let (flags, tail) = rest.split_at(flags_len);
    if !(tail.is_empty() || tail.starts_with(".so")) {
        return None;
    }
    let version = PythonVersion::new(3, minor);
    match flags.chars().find(|c| matches!(c, 'd' | 't')) {
        Some(flavour) => Some(FileNameVersion::Flavour(version, flavour)),
        None if flags.chars().all(|c| c == 'm') => Some(FileNameVersion::Version(version)),
        None => None,
    }
}

/// A file's identity: device, inode, size, modification time.
type FileKey = (u64, u64, u64, i64);
type SymbolCache = Mutex<HashMap<FileKey, Arc<ModuleSymbols>>>;

/// Parsed module symbols by file identity (device, inode, size, mtime):
/// the many processes of one interpreter (PySpark workers are forks) parse
/// its file once.
fn symbol_cache() -> &'static SymbolCache {
    static CACHE: OnceLock<SymbolCache> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}
/// Files remembered (most are not Python, and their entry is small).
const SYMBOL_CACHE_ENTRIES: usize = 4096;

/// Opens the file behind a mapping: through `/proc/PID/map_files`, which
/// is exactly the mapped file even if it was replaced or deleted, and
/// works across mount namespaces (containers); else through
/// `/proc/PID/root`, checking the inode.
fn open_mapped_file(pid: u32, mapping: &FileMapping) -> Result<fs::File, PythonError> {
    let map_file = PathBuf::from(format!(
        "/proc/{pid}/map_files/{:x}-{:x}",
        mapping.start, mapping.end
    ));
    if let Ok(file) = fs::File::open(&map_file) {
        return Ok(file);
    }
    let path = PathBuf::from(format!("/proc/{pid}/root{}", mapping.path));
    let file = fs::File::open(&path).map_err(|e| proc_error(pid, path.clone(), e))?;
    let inode = file
        .metadata()
        .map_err(|source| PythonError::Io {
            path: path.clone(),
            source,
        })?
        .ino();
    if mapping.inode != 0 && inode != mapping.inode {
        return Err(PythonError::Io {
            path,
            source: io::Error::other("the file was replaced since it was mapped"),
        });
    }
    Ok(file)
}

/// The symbols of the file behind `mapping`, parsed once per file.
pub fn module_symbols(pid: u32, mapping: &FileMapping) -> Result<Arc<ModuleSymbols>, PythonError> {
    let file = open_mapped_file(pid, mapping)?;
    let path = PathBuf::from(&mapping.path);
    let meta = file.metadata().map_err(|source| PythonError::Io {
        path: path.clone(),
        source,
    })?;
    let key = (meta.dev(), meta.ino(), meta.size(), meta.mtime());
    if let Some(symbols) = symbol_cache()
        .lock()
        .ok()
        .and_then(|cache| cache.get(&key).cloned())
    {
        return Ok(symbols);
    }
    let symbols = Arc::new(ModuleSymbols::load(file, &path)?);
    if let Ok(mut cache) = symbol_cache().lock() {
        if cache.len() >= SYMBOL_CACHE_ENTRIES {
            cache.clear();
        }
        cache.insert(key, symbols.clone());
    }
    Ok(symbols)
}

/// The modules of a process that may hold the interpreter, in the order to
/// try them: the executable, then every mapped `libpython*.so*`. The
/// executable comes first because when it defines `_PyRuntime` its copy is
/// the live one: it is a static interpreter, or a non-PIE program whose
/// reference to libpython's `_PyRuntime` became a copy relocation (the
/// loader then binds every use, libpython's own included, to the
/// executable's copy).
pub fn candidate_modules(pid: u32, mappings: &[FileMapping]) -> Result<Vec<String>, PythonError> {
    let mut candidates: Vec<String> = Vec::new();
    let exe = PathBuf::from(format!("/proc/{pid}/exe"));
    match fs::read_link(&exe) {
        Ok(target) => {
            let target = target.to_string_lossy();
            let target = target.trim_end_matches(" (deleted)");
            if mappings.iter().any(|m| m.path == target) {
                candidates.push(target.to_owned());
            }
        }
        // A kernel thread has no executable; a process that exited has no
        // /proc entry.
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) && process_exists(pid) => {}
        Err(e) => return Err(proc_error(pid, exe, e)),
    }
    for m in mappings {
        let name = file_name(&m.path);
        if name.starts_with("libpython") && name.contains(".so") && !candidates.contains(&m.path) {
            candidates.push(m.path.clone());
        }
    }
    Ok(candidates)
}

/// The last component of a path.
pub fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

// ---------------------------------------------------------------------------
// Objects
// ---------------------------------------------------------------------------

/// Where a process's type objects are (run-time addresses): objects are
/// checked against them. `None` when the module does not export one; the
/// checks of that type are then structural only.
#[derive(Debug, Clone, Copy, Default)]
pub struct TypeAddresses {
    pub code: Option<u64>,
    pub unicode: Option<u64>,
    pub bytes: Option<u64>,
}

/// Reads CPython objects of one version from one process.
#[derive(Debug, Clone, Copy)]
pub struct ObjectReader {
    pub memory: Memory,
    pub offsets: &'static StructOffsets,
    pub types: TypeAddresses,
}

impl ObjectReader {
    fn bad(&self, what: &'static str, addr: u64, reason: impl Into<String>) -> PythonError {
        PythonError::BadObject {
            pid: self.memory.pid(),
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
        self.memory.read_vec(data, size as usize)
    }

    /// The fixed part of a code object: checks that `addr` holds one.
    pub fn read_code_header(&self, addr: u64) -> Result<CodeHeader, PythonError> {
        const WHAT: &str = "code object";
        let o = self.offsets;
        if addr == 0 || !addr.is_multiple_of(8) {
            return Err(self.bad(WHAT, addr, "not an object address"));
        }
        let block = self.memory.read_vec(addr, o.code_read_len())?;
        self.check_type(WHAT, addr, &block, self.types.code)?;
        let pointer = |offset: u32| field_u64(&block, offset).unwrap_or(0);
        let header = CodeHeader {
            firstlineno: field_u32(&block, o.code_firstlineno).unwrap_or(0) as i32,
            name: pointer(if o.code_qualname != PY_NO_OFFSET {
                o.code_qualname
            } else {
                o.code_name
            }),
            filename: pointer(o.code_filename),
            linetable: pointer(o.code_linetable),
            code: pointer(o.code_code),
            size: field_u64(&block, o.code_size),
        };
        if header.firstlineno < 0 {
            return Err(self.bad(WHAT, addr, format!("first line {}", header.firstlineno)));
        }
        if header.name == 0 || header.filename == 0 || header.linetable == 0 {
            return Err(self.bad(WHAT, addr, "a null name, file name or line table"));
        }
        if header
            .size
            .is_some_and(|size| size as i64 <= 0 || size > 1 << 28)
        {
            return Err(self.bad(WHAT, addr, format!("{:?} code units", header.size)));
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

// ---------------------------------------------------------------------------
// Line tables
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Threads and frames
// ---------------------------------------------------------------------------

/// A `PyThreadState` as found in an interpreter's list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawThread {
    pub tstate: u64,
    pub interp: u64,
    /// `thread_id`: the `pthread_t`.
    pub pthread: u64,
    /// `native_thread_id` (3.11+), in the process's PID namespace.
    pub native_id: Option<u64>,
    /// `_status.active` (3.12+): its thread runs this thread state now.
    pub active: Option<bool>,
}

/// Every thread state of every interpreter, the main interpreter's first,
/// each list in its own order (newest thread first). Bounded by
/// [`MAX_INTERPRETERS`] and [`MAX_THREADS`]; a cycle, or a thread state
/// that says it belongs to another interpreter (torn or freed memory),
/// ends that list.
pub fn list_thread_states(
    memory: &Memory,
    offsets: &StructOffsets,
    runtime: u64,
) -> Result<Vec<RawThread>, PythonError> {
    let main = memory.read_u64(runtime + u64::from(offsets.runtime_interpreters_main))?;
    let head = memory.read_u64(runtime + u64::from(offsets.runtime_interpreters_head))?;
    let mut interpreters = Vec::new();
    if main != 0 {
        interpreters.push(main);
    }
    let mut next = head;
    let mut seen_interp = HashSet::new();
    while next != 0 && seen_interp.len() < MAX_INTERPRETERS && seen_interp.insert(next) {
        if next != main {
            interpreters.push(next);
        }
        next = match memory.read_u64(next + u64::from(offsets.interp_next)) {
            Ok(next) => next,
            Err(e) if e.is_process_gone() => return Err(e),
            Err(e) => {
                debug!(error = %e, "python interpreter list cut short");
                break;
            }
        };
    }

    let mut threads = Vec::new();
    let mut seen = HashSet::new();
    let read_len = offsets.tstate_read_len();
    for interp in interpreters {
        let mut tstate = match memory.read_u64(interp + u64::from(offsets.interp_threads_head)) {
            Ok(head) => head,
            Err(e) if e.is_process_gone() => return Err(e),
            Err(e) => {
                debug!(interp, error = %e, "python interpreter unreadable");
                continue;
            }
        };
        while tstate != 0 && threads.len() < MAX_THREADS && seen.insert(tstate) {
            let block = match memory.read_vec(tstate, read_len) {
                Ok(block) => block,
                Err(e) if e.is_process_gone() => return Err(e),
                Err(e) => {
                    debug!(tstate, error = %e, "python thread list cut short");
                    break;
                }
            };
            let owner = field_u64(&block, offsets.tstate_interp).unwrap_or(0);
            if owner != interp {
                debug!(
                    tstate,
                    owner, interp, "python thread state of another interpreter"
                );
                break;
            }
            threads.push(RawThread {
                tstate,
                interp,
                pthread: field_u64(&block, offsets.tstate_thread_id).unwrap_or(0),
                native_id: field_u64(&block, offsets.tstate_native_thread_id),
                active: field_u32(&block, offsets.tstate_status)
                    .map(|status| (status >> offsets.tstate_active_bit) & 1 == 1),
            });
            tstate = field_u64(&block, offsets.tstate_next).unwrap_or(0);
        }
    }
    Ok(threads)
}

/// The `tid` of a thread from its `pthread_t` (the address of the C
/// library's `struct pthread`), at a known offset.
pub fn pthread_tid(memory: &Memory, pthread: u64, offset: u32) -> Result<u32, PythonError> {
    if pthread == 0 {
        return Err(PythonError::BadObject {
            pid: memory.pid(),
            what: "pthread_t",
            addr: 0,
            reason: "null".into(),
        });
    }
    memory.read_u32(pthread.wrapping_add(u64::from(offset)))
}

/// Finds where the C library keeps the thread id in `struct pthread`:
/// the offset at which every given `pthread_t` holds a distinct live thread
/// id. glibc's offset is tried first; otherwise the first
/// [`PTHREAD_SCAN_BYTES`] of each are searched (4-byte aligned).
pub fn calibrate_pthread_tid(
    memory: &Memory,
    pthreads: &[u64],
    live: &HashMap<u32, u32>,
) -> Result<Option<u32>, PythonError> {
    let pthreads: Vec<u64> = pthreads.iter().copied().filter(|&p| p != 0).collect();
    if pthreads.is_empty() {
        return Ok(None);
    }
    let consistent = |values: &[u32]| {
        let distinct: HashSet<u32> = values.iter().copied().collect();
        distinct.len() == values.len() && values.iter().all(|v| live.contains_key(v))
    };
    let mut at_glibc = Vec::with_capacity(pthreads.len());
    for &p in &pthreads {
        match pthread_tid(memory, p, GLIBC_PTHREAD_TID_OFFSET) {
            Ok(tid) => at_glibc.push(tid),
            Err(e) if e.is_process_gone() => return Err(e),
            Err(_) => break,
        }
    }
    if at_glibc.len() == pthreads.len() && consistent(&at_glibc) {
        return Ok(Some(GLIBC_PTHREAD_TID_OFFSET));
    }
    let mut blocks = Vec::with_capacity(pthreads.len());
    for &p in &pthreads {
        match memory.read_vec(p, PTHREAD_SCAN_BYTES) {
            Ok(block) => blocks.push(block),
            Err(e) if e.is_process_gone() => return Err(e),
            Err(_) => return Ok(None),
        }
    }
    for offset in (0..PTHREAD_SCAN_BYTES as u32).step_by(4) {
        let values: Vec<u32> = blocks.iter().filter_map(|b| field_u32(b, offset)).collect();
        if values.len() == blocks.len() && consistent(&values) {
            return Ok(Some(offset));
        }
    }
    Ok(None)
}

/// The frames of one thread, innermost first, read as the kernel walker
/// (`profiler-ebpf/src/python.rs`) reads them, same offsets, same steps:
/// from the thread state to its current frame (through `_PyCFrame` on
/// 3.11–3.12), then up to `max_frames` iterations that each step over one
/// frame owned by the C stack (3.12+; such shims never come two in a row)
/// and record the code object pointer at `frame_code` and the instruction
/// at `frame_instr` (a 4-byte `int` for [`python_layout::FRAME_OBJECT`],
/// zero-extended; a pointer otherwise) as they are. `truncated` when the
/// chain went on. Unlike the kernel, which reads an unreadable field as 0
/// and goes on, a failed read is an error here.
pub fn walk_frames(
    memory: &Memory,
    offsets: &StructOffsets,
    tstate: u64,
    max_frames: usize,
) -> Result<(Vec<PythonFrame>, bool), PythonError> {
    let mut frame = memory.read_u64(tstate + u64::from(offsets.walk.tstate_frame))?;
    if offsets.walk.layout == python_layout::CFRAME && frame != 0 {
        frame = memory.read_u64(frame + u64::from(offsets.walk.cframe_current_frame))?;
    }
    let instr_len = if offsets.walk.layout == python_layout::FRAME_OBJECT {
        4
    } else {
        8
    };
    let read_len = [
        (offsets.walk.frame_previous, 8),
        (offsets.walk.frame_code, 8),
        (offsets.walk.frame_instr, instr_len),
        (offsets.walk.frame_owner, 1),
    ]
    .iter()
    .filter(|&&(offset, _)| offset != PY_NO_OFFSET)
    .map(|&(offset, len)| offset as usize + len)
    .max()
    .unwrap_or(8);
    let mut frames = Vec::new();
    for _ in 0..max_frames {
        if frame == 0 {
            break;
        }
        let mut block = memory.read_vec(frame, read_len)?;
        if offsets.walk.frame_owner != PY_NO_OFFSET
            && block
                .get(offsets.walk.frame_owner as usize)
                .map(|&owner| u32::from(owner))
                == Some(offsets.walk.owner_cstack)
        {
            frame = field_u64(&block, offsets.walk.frame_previous).unwrap_or(0);
            if frame == 0 {
                break;
            }
            block = memory.read_vec(frame, read_len)?;
        }
        let code = field_u64(&block, offsets.walk.frame_code).unwrap_or(0);
        let instr = if offsets.walk.layout == python_layout::FRAME_OBJECT {
            u64::from(field_u32(&block, offsets.walk.frame_instr).unwrap_or(0))
        } else {
            field_u64(&block, offsets.walk.frame_instr).unwrap_or(0)
        };
        frames.push(PythonFrame { code, instr });
        frame = field_u64(&block, offsets.walk.frame_previous).unwrap_or(0);
    }
    Ok((frames, frame != 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_give_versions() {
        let v = |minor| Some(FileNameVersion::Version(PythonVersion::new(3, minor)));
        assert_eq!(version_from_file_name("python3.8"), v(8));
        assert_eq!(version_from_file_name("python3.13"), v(13));
        assert_eq!(version_from_file_name("libpython3.11.so.1.0"), v(11));
        assert_eq!(version_from_file_name("libpython3.7m.so.1.0"), v(7));
        assert_eq!(
            version_from_file_name("python3.13t"),
            Some(FileNameVersion::Flavour(PythonVersion::new(3, 13), 't'))
        );
        assert_eq!(
            version_from_file_name("libpython3.12d.so"),
            Some(FileNameVersion::Flavour(PythonVersion::new(3, 12), 'd'))
        );
        assert_eq!(version_from_file_name("python3"), None);
        assert_eq!(version_from_file_name("python"), None);
        assert_eq!(version_from_file_name("python3.11-config"), None);
        assert_eq!(version_from_file_name("java"), None);
    }

    #[test]
    fn maps_lines_parse() {
        let text = "\
7f00-7f10 r--p 00000000 08:01 1234 /usr/lib/libpython3.11.so.1.0
7f10-7f20 r-xp 00010000 08:01 1234 /usr/lib/libpython3.11.so.1.0
7f30-7f40 rw-p 00000000 00:00 0 \n\
7f40-7f50 r--p 00000000 08:01 99 /tmp/a b (deleted)
7f50-7f60 r--p 00000000 00:00 0 [stack]";
        let maps = file_mappings(proc::parse_maps(text).unwrap());
        assert_eq!(maps.len(), 3);
        assert_eq!(maps[1].offset, 0x10000);
        assert_eq!(maps[1].inode, 1234);
        assert_eq!(maps[2].path, "/tmp/a b");
    }

    #[test]
    fn bias_from_segments() {
        let symbols = ModuleSymbols {
            // A PIE: first segment at 0, second with a non-page-aligned
            // offset.
            segments: vec![(0, 0, 0x5000), (0x6e10, 0x5e10, 0x100)],
            ..Default::default()
        };
        let m = FileMapping {
            start: 0x7f00_0000_5000,
            end: 0x7f00_0000_6000,
            offset: 0x5000,
            inode: 1,
            path: "/x".into(),
        };
        assert_eq!(
            symbols.bias(&[&m]),
            Some(0x7f00_0000_5000 - 0x5000 - 0x1000)
        );
        let exec = ModuleSymbols {
            segments: vec![(0x400000, 0, 0x1000)],
            ..Default::default()
        };
        let m = FileMapping {
            start: 0x400000,
            end: 0x401000,
            offset: 0,
            inode: 1,
            path: "/x".into(),
        };
        assert_eq!(exec.bias(&[&m]), Some(0));
    }

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

    /// A C library other than glibc: the tid is found by scanning.
    #[test]
    fn pthread_tid_offset_is_calibrated() {
        let pid = std::process::id();
        let live = live_threads(pid).unwrap();
        let memory = Memory::new(pid);
        // This thread's own pthread_t: glibc's offset.
        // SAFETY: plain libc call without arguments.
        let me = unsafe { libc::pthread_self() } as u64;
        assert_eq!(
            calibrate_pthread_tid(&memory, &[me], &live).unwrap(),
            Some(GLIBC_PTHREAD_TID_OFFSET)
        );
        // A fake struct pthread with the tid elsewhere (and none at
        // glibc's offset).
        // SAFETY: plain system call.
        let tid = unsafe { libc::gettid() } as u32;
        let mut fake = vec![0u8; PTHREAD_SCAN_BYTES];
        fake[0x1c0..0x1c4].copy_from_slice(&tid.to_le_bytes());
        let fake_addr = fake.as_ptr() as u64;
        assert_eq!(
            calibrate_pthread_tid(&memory, &[fake_addr], &live).unwrap(),
            Some(0x1c0)
        );
        assert_eq!(pthread_tid(&memory, fake_addr, 0x1c0).unwrap(), tid);
        // Two threads that claim the same tid: no consistent offset.
        assert_eq!(
            calibrate_pthread_tid(&memory, &[fake_addr, fake_addr], &live).unwrap(),
            None
        );
    }

    #[test]
    fn garbage_memory_reads_fail() {
        let memory = Memory::new(std::process::id());
        assert!(memory.read_u64(0).is_err());
        assert!(memory.read_u64(u64::MAX - 3).is_err());
        assert!(memory.read_u64(8).is_err());
        let value = 0x1122_3344_5566_7788u64;
        assert_eq!(memory.read_u64(&value as *const u64 as u64).unwrap(), value);
    }
}
