//! Where a JVM's libjvm.so is, and the run-time addresses of the
//! VMStructs variables it exports (`.dynsym`, version `SUNWprivate_1.1`).

use std::{collections::HashMap, fs, path::PathBuf};

use object::{
    Endianness,
    elf::{FileHeader64, SHT_DYNSYM},
    read::elf::{FileHeader as _, Sym as _},
};

use super::{HotspotError, vmstructs::TABLE_SYMBOLS};
use crate::sys::{
    elf::Segments,
    proc::{self, FileId, MapPath},
};

/// The run-time address of every [`TABLE_SYMBOLS`] variable in process
/// `pid`.
pub fn table_symbols(pid: u32) -> Result<HashMap<String, u64>, HotspotError> {
    let maps = proc::read_maps(pid).map_err(|source| HotspotError::Maps { pid, source })?;
    table_symbols_mapped(pid, &maps)
}

/// The identity of the libjvm.so process `pid` maps (its first mapping's
/// file, as the process has it open), if it can be looked at.
pub fn libjvm_file(pid: u32, maps: &[proc::Mapping]) -> Option<FileId> {
    let mapping = maps.iter().find(|m| match &m.path {
        MapPath::File {
            path,
            deleted: false,
        } => path.file_name().is_some_and(|n| n == "libjvm.so"),
        _ => false,
    })?;
    let meta = fs::metadata(proc::map_file(pid, mapping.start, mapping.end)).ok()?;
    Some(FileId::of(&meta))
}

/// [`table_symbols`] of process `pid`, whose mappings are `maps`.
pub fn table_symbols_mapped(
    pid: u32,
    maps: &[proc::Mapping],
) -> Result<HashMap<String, u64>, HotspotError> {
    let mapped: Vec<(&std::path::Path, u64, u64)> = maps
        .iter()
        .filter_map(|m| match &m.path {
            MapPath::File {
                path,
                deleted: false,
            } if path.file_name().is_some_and(|n| n == "libjvm.so") => {
                Some((path.as_path(), m.start, m.offset))
            }
            _ => None,
        })
        .collect();
    let Some(&(path, _, _)) = mapped.first() else {
        return Err(HotspotError::NoLibjvm(pid));
    };
    // Through the process's root: a containerized JVM's library is not at
    // that path in our mount namespace.
    let file_path = PathBuf::from(format!("/proc/{pid}/root{}", path.display()));
    let elf_error = |reason: String| HotspotError::Elf {
        path: file_path.clone(),
        reason,
    };
    let file = fs::File::open(&file_path).map_err(|e| elf_error(e.to_string()))?;
    // Only the headers and `.dynsym` are read: parsing the whole file
    // (`object::File::parse`) reads its `.symtab` and `.strtab` too, 4 MiB
    // for OpenJDK 17's libjvm, for every JVM a Spark host starts (this
    // function's CPU time fell from 4.4 to 0.8 ms for a first JVM, and
    // from about 0.8 to 0.3 ms for later ones, most of it now /proc maps).
    let cache = object::ReadCache::new(file);
    let parse_error = |e: object::read::Error| elf_error(e.to_string());
    let header = FileHeader64::<Endianness>::parse(&cache).map_err(parse_error)?;
    let endian = header.endian().map_err(parse_error)?;
    let bias = Segments::of_headers(header, endian, &cache)
        .map_err(parse_error)?
        .bias(
            mapped
                .iter()
                .filter(|(p, _, _)| *p == path)
                .map(|&(_, start, offset)| (start, offset)),
        )
        .ok_or_else(|| elf_error("no mapping matches its segments".into()))?;
    let dynamic = header
        .sections(endian, &cache)
        .and_then(|sections| sections.symbols(endian, &cache, SHT_DYNSYM))
        .map_err(parse_error)?;
    let strings = dynamic.strings();
    let symbols: HashMap<String, u64> = dynamic
        .iter()
        .filter(|s| s.is_definition(endian, strings))
        .filter_map(|s| {
            let name = std::str::from_utf8(s.name(endian, strings).ok()?).ok()?;
            TABLE_SYMBOLS
                .contains(&name)
                .then(|| (name.to_owned(), bias.wrapping_add(s.st_value(endian))))
        })
        .collect();
    if let Some(missing) = TABLE_SYMBOLS.iter().find(|n| !symbols.contains_key(**n)) {
        return Err(HotspotError::MissingSymbol((*missing).to_owned()));
    }
    Ok(symbols)
}
