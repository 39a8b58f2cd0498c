//! The interpreter module: which mapped file holds `_PyRuntime`, its
//! symbols and load bias (ELF, cached per file), and the CPython version its
//! file name says.

use std::{
    collections::HashMap,
    fs, io,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, OnceLock},
};

use object::{Object as _, ObjectSymbol as _};
use tracing::debug;

use super::process::{FileMapping, proc_error, process_exists};
use super::types::{PythonError, PythonVersion};
use crate::sys::{
    elf::Segments,
    proc::{self, FileId},
};

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
    /// Loadable segments.
    pub segments: Segments,
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
        symbols.segments = Segments::of(&elf);
        if symbols.py_version.is_none() {
            // With `_PyRuntime` (3.7+) and none of the markers: 3.7.
            symbols.marker_version = newest_marker.or(Some(PythonVersion::new(3, 7)));
        }
        Ok(symbols)
    }

    /// The load bias of the module in a process: what to add to a
    /// link-time address.
    pub fn bias(&self, mappings: &[&FileMapping]) -> Option<u64> {
        self.segments
            .bias(mappings.iter().map(|m| (m.start, m.offset)))
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

type SymbolCache = Mutex<HashMap<FileId, Arc<ModuleSymbols>>>;

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
    let map_file = proc::map_file(pid, mapping.start, mapping.end);
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
    let key = FileId::of(&meta);
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
    fn bias_from_segments() {
        let symbols = ModuleSymbols {
            // A PIE: first segment at 0, second with a non-page-aligned
            // offset.
            segments: Segments(vec![(0, 0, 0x5000), (0x6e10, 0x5e10, 0x100)]),
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
            segments: Segments(vec![(0x400000, 0, 0x1000)]),
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
}
