//! Where to put the thread-rename uprobe in a libjvm.so.
//!
//! HotSpot passes every `Thread.setName` of the current thread, with the full
//! UTF-8 name, to `os::set_native_thread_name(const char*)` before it cuts the
//! name to the kernel's 15 bytes. The function is local (`.symtab` only) in
//! most builds, so the loader looks in `.symtab`, then `.dynsym`, then in a
//! separate debug file named by `.gnu_debuglink` or the build id, and turns
//! the symbol's virtual address into the file offset a uprobe is attached by.

use std::{
    fs,
    path::{Path, PathBuf},
};

use object::{Object as _, ObjectSection as _, ObjectSegment as _, ObjectSymbol as _};
use thiserror::Error;

/// HotSpot's `os::set_native_thread_name(char const*)`, mangled.
pub const SET_NATIVE_THREAD_NAME: &str = "_ZN2os22set_native_thread_nameEPKc";

/// Why a libjvm.so cannot get the uprobe.
#[derive(Debug, Error)]
pub enum JvmSymbolError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not an ELF file: {source}")]
    Elf {
        path: PathBuf,
        source: object::Error,
    },
    #[error(
        "{path} has no symbol {SET_NATIVE_THREAD_NAME} (stripped, and no debug file found): \
         full thread names come from Thread.print instead"
    )]
    NoSymbol { path: PathBuf },
    #[error("{path}: symbol address {address:#x} is in no loadable segment")]
    NotLoaded { path: PathBuf, address: u64 },
}

/// The file offset of `os::set_native_thread_name` in the libjvm.so at `path`.
pub fn set_native_thread_name_offset(path: &Path) -> Result<u64, JvmSymbolError> {
    let data = fs::read(path).map_err(|source| JvmSymbolError::Read {
        path: path.to_owned(),
        source,
    })?;
    let elf = object::File::parse(&*data).map_err(|source| JvmSymbolError::Elf {
        path: path.to_owned(),
        source,
    })?;
    let address = match symbol_address(&elf) {
        Some(address) => address,
        None => debug_file_candidates(path, &elf)
            .into_iter()
            .find_map(|debug| {
                let data = fs::read(&debug).ok()?;
                symbol_address(&object::File::parse(&*data).ok()?)
            })
            .ok_or_else(|| JvmSymbolError::NoSymbol {
                path: path.to_owned(),
            })?,
    };
    // The debug file's addresses are the binary's; its segments are not, so
    // the offset always comes from the binary's own program headers.
    file_offset(&elf, address).ok_or_else(|| JvmSymbolError::NotLoaded {
        path: path.to_owned(),
        address,
    })
}

/// The symbol's address from `.symtab`, else `.dynsym`.
fn symbol_address(elf: &object::File<'_>) -> Option<u64> {
    let wanted = |symbol: &object::Symbol<'_, '_>| {
        symbol.name_bytes().ok() == Some(SET_NATIVE_THREAD_NAME.as_bytes()) && symbol.address() != 0
    };
    elf.symbols()
        .find(wanted)
        .or_else(|| elf.dynamic_symbols().find(wanted))
        .map(|symbol| symbol.address())
}

/// Virtual address to file offset through the loadable segment holding it.
fn file_offset(elf: &object::File<'_>, address: u64) -> Option<u64> {
    elf.segments().find_map(|segment| {
        let (offset, size) = segment.file_range();
        let start = segment.address();
        (address >= start && address < start + size).then(|| address - start + offset)
    })
}

/// Where distributions keep a stripped library's debug file.
fn debug_file_candidates(path: &Path, elf: &object::File<'_>) -> Vec<PathBuf> {
    let mut candidates = Vec::new();
    if let Ok(Some(build_id)) = elf.build_id()
        && build_id.len() > 1
    {
        let hex: String = build_id.iter().map(|b| format!("{b:02x}")).collect();
        candidates.push(PathBuf::from(format!(
            "/usr/lib/debug/.build-id/{}/{}.debug",
            &hex[..2],
            &hex[2..]
        )));
    }
    if let Some(section) = elf.section_by_name(".gnu_debuglink")
        && let Ok(data) = section.data()
    {
        let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
        if let Ok(name) = std::str::from_utf8(&data[..end])
            && !name.is_empty()
            && !name.contains('/')
        {
            let dir = path.parent().unwrap_or(Path::new("/"));
            candidates.push(dir.join(name));
            candidates.push(dir.join(".debug").join(name));
            candidates.push(
                Path::new("/usr/lib/debug")
                    .join(dir.strip_prefix("/").unwrap_or(dir))
                    .join(name),
            );
        }
    }
    candidates
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The machine's JDK (the tests install openjdk-17) has the symbol.
    #[test]
    fn finds_the_symbol_in_the_installed_libjvm() {
        let libjvm = std::fs::read_dir("/usr/lib/jvm")
            .expect("a JDK under /usr/lib/jvm (cargo xtask test installs one)")
            .filter_map(Result::ok)
            .map(|entry| entry.path().join("lib/server/libjvm.so"))
            .find(|path| path.exists())
            .expect("a libjvm.so under /usr/lib/jvm/*/lib/server");
        let offset = set_native_thread_name_offset(&libjvm).unwrap();
        assert!(offset > 0);
        // The offset points at code: the file is at least that long.
        assert!(std::fs::metadata(&libjvm).unwrap().len() > offset);
    }

    #[test]
    fn a_library_without_the_symbol_says_so() {
        let err = set_native_thread_name_offset(Path::new("/proc/self/exe")).unwrap_err();
        assert!(matches!(err, JvmSymbolError::NoSymbol { .. }), "{err}");
    }
}
