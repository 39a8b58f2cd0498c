//! Where a JVM's libjvm.so is, and the run-time addresses of the
//! VMStructs variables it exports (`.dynsym`, version `SUNWprivate_1.1`).

use std::{collections::HashMap, fs, path::PathBuf};

use object::{Object as _, ObjectSymbol as _};

use super::{HotspotError, vmstructs::TABLE_SYMBOLS};
use crate::sys::{
    elf::Segments,
    proc::{self, MapPath},
};

/// The run-time address of every [`TABLE_SYMBOLS`] variable in process
/// `pid`.
pub fn table_symbols(pid: u32) -> Result<HashMap<String, u64>, HotspotError> {
    let maps = proc::read_maps(pid).map_err(|source| HotspotError::Maps { pid, source })?;
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
    let cache = object::ReadCache::new(file);
    let elf = object::File::parse(&cache).map_err(|e| elf_error(e.to_string()))?;
    let bias = Segments::of(&elf)
        .bias(
            mapped
                .iter()
                .filter(|(p, _, _)| *p == path)
                .map(|&(_, start, offset)| (start, offset)),
        )
        .ok_or_else(|| elf_error("no mapping matches its segments".into()))?;
    let symbols: HashMap<String, u64> = elf
        .dynamic_symbols()
        .filter(|s| s.is_definition())
        .filter_map(|s| {
            let name = s.name().ok()?;
            TABLE_SYMBOLS
                .contains(&name)
                .then(|| (name.to_owned(), bias.wrapping_add(s.address())))
        })
        .collect();
    if let Some(missing) = TABLE_SYMBOLS.iter().find(|n| !symbols.contains_key(**n)) {
        return Err(HotspotError::MissingSymbol((*missing).to_owned()));
    }
    Ok(symbols)
}
