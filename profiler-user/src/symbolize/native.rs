//! Native user frames (executables and shared libraries), named through
//! blazesym.
//!
//! blazesym reads binaries through /proc/PID/map_files, so binaries inside
//! containers and files deleted since they were mapped still resolve.
//! Addresses no ELF symbol covers fall back to `module+0xoffset` from the
//! process's mappings ([`super::proc_maps`]).
//!
//! Only addresses in executable mappings are code. A frame-pointer walk
//! through code built without frame pointers (CPython's interpreter, most
//! distribution libraries) reads garbage "return addresses", often into
//! data: named after the nearest symbol they would read as, say,
//! `PyBytesIter_Type` (a type object), dozens of times per stack. Such an
//! address is never named, and [`NativeSymbolizer::is_code`] lets the
//! stack be cut there.
//!
//! A name found in a file is kept for the file, not only the process: on a
//! Spark host every application starts new JVMs and Python workers, and
//! each would otherwise have blazesym name the same libjvm and CPython code
//! again (a third of sparkprof's CPU while a job ran).

use std::{
    os::unix::fs::MetadataExt,
    sync::Arc,
    time::{Duration, Instant},
};

use blazesym::{
    Pid,
    symbolize::{
        Input, Symbolized, Symbolizer,
        source::{Process, Source},
    },
};
use tracing::debug;

use super::proc_maps::ProcMaps;
use crate::{
    FastMap, FastSet,
    enrich::ProcessInfo,
    sys::proc::{self, FileId},
};

type ProcessKey = (u32, u64);

/// Names user addresses per process, with a per-process cache.
pub struct NativeSymbolizer {
    symbolizer: Symbolizer,
    names: FastMap<ProcessKey, FastMap<u64, Arc<str>>>,
    /// Each process's executable mappings, as last read.
    maps: FastMap<ProcessKey, KnownMaps>,
    /// ELF symbol names by file and offset in it (`None`: no symbol
    /// there), for every process that maps the file.
    files: FastMap<(FileId, u64), Option<Arc<str>>>,
    /// The functions found in each file, by their offsets in it: every
    /// other address inside one is named without blazesym. Off-CPU time
    /// of preempted threads and JVM code sampled while it warms up bring
    /// new addresses at every drain, mostly inside the same functions.
    functions: FastMap<FileId, FunctionRanges>,
}

/// Functions of one file: start offset -> (end offset, name).
type FunctionRanges = std::collections::BTreeMap<u64, (u64, Arc<str>)>;

/// The function of a file that holds `offset`, if one was found there.
fn function_at(
    functions: &FastMap<FileId, FunctionRanges>,
    (file, offset): (FileId, u64),
) -> Option<Arc<str>> {
    let (_, (end, name)) = functions.get(&file)?.range(..=offset).next_back()?;
    (offset < *end).then(|| name.clone())
}

/// Names kept by file, then started over.
const MAX_FILE_NAMES: usize = 65_536;

/// Reads of a process's mappings, at most one per this (garbage addresses
/// outside code come at every drain, and a JVM's maps are long).
const MAPS_REREAD: Duration = Duration::from_secs(5);

/// A process's executable mappings and the addresses found outside them.
struct KnownMaps {
    /// `None`: unreadable (it exited, say); then no address is judged.
    maps: Option<ProcMaps>,
    read_at: Instant,
    /// Addresses outside every mapping at the last read: not resolved
    /// again until the mappings are read again.
    not_code: FastSet<u64>,
    /// The file of each file-backed mapping looked at, by its start
    /// (`None`: anonymous, or its file could not be looked at).
    files: FastMap<u64, Option<FileId>>,
}

impl KnownMaps {
    fn read(pid: u32) -> Self {
        Self {
            maps: ProcMaps::read(pid).ok(),
            read_at: Instant::now(),
            not_code: FastSet::default(),
            files: FastMap::default(),
        }
    }

    /// The file holding `addr` and the offset of `addr` in it.
    fn file_offset(&mut self, pid: u32, addr: u64) -> Option<(FileId, u64)> {
        let mapping = self.maps.as_ref()?.find(addr)?;
        if mapping.inode == 0 {
            return None;
        }
        let (start, end) = (mapping.start, mapping.end);
        let offset = addr - start + mapping.offset;
        let file = *self.files.entry(start).or_insert_with(|| {
            let meta = std::fs::metadata(proc::map_file(pid, start, end)).ok()?;
            (meta.ino() == mapping.inode).then(|| FileId::of(&meta))
        });
        Some((file?, offset))
    }

    fn covers(&self, addr: u64) -> bool {
        self.maps
            .as_ref()
            .is_none_or(|maps| maps.find(addr).is_some())
    }
}

impl Default for NativeSymbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl NativeSymbolizer {
    pub fn new() -> Self {
        Self {
            symbolizer: Symbolizer::new(),
            names: FastMap::default(),
            maps: FastMap::default(),
            files: FastMap::default(),
            functions: FastMap::default(),
        }
    }

    fn key(process: &ProcessInfo) -> ProcessKey {
        (process.pid, process.start_ticks)
    }

    /// Resolves the addresses of `process` not seen before.
    pub fn resolve(&mut self, process: &ProcessInfo, addrs: &[u64]) {
        let key = Self::key(process);
        let cache = self.names.entry(key).or_default();
        let not_code = self.maps.get(&key).map(|known| &known.not_code);
        let mut todo: Vec<u64> = addrs
            .iter()
            .copied()
            .filter(|a| !cache.contains_key(a) && !not_code.is_some_and(|n| n.contains(a)))
            .collect();
        todo.sort_unstable();
        todo.dedup();
        if todo.is_empty() {
            return;
        }
        // Code only: read the mappings again if an address is outside the
        // ones known (a library loaded since; at most every MAPS_REREAD),
        // then leave out, and remember, what is not code.
        let stale = match self.maps.get(&key) {
            None => true,
            Some(known) => {
                known.read_at.elapsed() >= MAPS_REREAD
                    && todo.iter().any(|&addr| !known.covers(addr))
            }
        };
        if stale {
            self.maps.insert(key, KnownMaps::read(process.pid));
            // blazesym reads /proc/PID/maps again at every symbolize call
            // unless it holds the process's mappings: it gets them when we
            // read ours, and keeps them until the next read (or the exit).
            let mut vmas = blazesym::symbolize::cache::Process::new(Pid::from(process.pid));
            vmas.cache_perf_map = false;
            if let Err(err) = self
                .symbolizer
                .cache(&blazesym::symbolize::cache::Cache::Process(vmas))
            {
                debug!(pid = process.pid, "caching mappings failed: {err}");
            }
        }
        let known = self.maps.get_mut(&key).expect("just read");
        let (code, outside): (Vec<u64>, Vec<u64>) =
            todo.into_iter().partition(|&addr| known.covers(addr));
        known.not_code.extend(outside);
        // Names another process's mapping of the same file already found.
        let mut found: Vec<(u64, Option<Arc<str>>)> = Vec::with_capacity(code.len());
        let mut todo: Vec<(u64, Option<(FileId, u64)>)> = Vec::new();
        for addr in code {
            let in_file = known.file_offset(process.pid, addr);
            match in_file.and_then(|in_file| self.files.get(&in_file)) {
                Some(name) => found.push((addr, name.clone())),
                None => match in_file.and_then(|in_file| function_at(&self.functions, in_file)) {
                    Some(name) => found.push((addr, Some(name))),
                    None => todo.push((addr, in_file)),
                },
            }
        }
        if !todo.is_empty() {
            let addrs: Vec<u64> = todo.iter().map(|(addr, _)| *addr).collect();
            let mut source = Process::new(Pid::from(process.pid));
            // ELF symbols only: DWARF parsing of large binaries costs seconds and
            // hundreds of MiB; perf maps are read by our own JIT resolver.
            source.debug_syms = false;
            source.perf_map = false;
            source.map_files = true;
            let source = Source::Process(source);
            let results: Vec<SymName> =
                match self.symbolizer.symbolize(&source, Input::AbsAddr(&addrs)) {
                    Ok(results) => results.iter().map(sym_name).collect(),
                    Err(err) => {
                        debug!(pid = process.pid, "symbolization failed: {err}");
                        vec![(None, None); addrs.len()]
                    }
                };
            if self.files.len() + results.len() > MAX_FILE_NAMES {
                self.files.clear();
                self.functions.clear();
            }
            for ((addr, in_file), (name, extent)) in todo.into_iter().zip(results) {
                if let Some(in_file) = in_file {
                    self.files.insert(in_file, name.clone());
                    if let (Some(name), Some((offset, size))) = (&name, extent) {
                        let start = in_file.1.saturating_sub(offset as u64);
                        self.functions
                            .entry(in_file.0)
                            .or_default()
                            .insert(start, (start + size as u64, name.clone()));
                    }
                }
                found.push((addr, name));
            }
        }
        let maps = self.maps.get(&key).and_then(|known| known.maps.as_ref());
        for (addr, name) in found {
            let name = name.unwrap_or_else(|| match maps {
                Some(maps) => maps.describe(addr).into(),
                None => "[unknown]".into(),
            });
            cache.insert(addr, name);
        }
    }

    /// What is known of `process`'s addresses, looked up once for all the
    /// frames of a stack.
    pub fn process(&self, process: &ProcessInfo) -> ProcessNames<'_> {
        let key = Self::key(process);
        ProcessNames {
            maps: self.maps.get(&key),
            names: self.names.get(&key),
        }
    }

    pub fn held(&self, held: &mut crate::sys::held::Held) {
        held.add("symbolize.native_processes", self.names.len());
        held.add(
            "symbolize.native_names",
            self.names.values().map(FastMap::len).sum(),
        );
        held.add("symbolize.native_maps", self.maps.len());
        held.add("symbolize.native_file_names", self.files.len());
        held.add(
            "symbolize.native_functions",
            self.functions.values().map(|ranges| ranges.len()).sum(),
        );
        held.add(
            "symbolize.native_not_code",
            self.maps.values().map(|known| known.not_code.len()).sum(),
        );
    }

    /// Drops everything cached for an exited process.
    pub fn evict(&mut self, process: &ProcessInfo) {
        self.names.remove(&Self::key(process));
        self.maps.remove(&Self::key(process));
        let evict = blazesym::symbolize::evict::Evict::Process(
            blazesym::symbolize::evict::Process::new(Pid::from(process.pid)),
        );
        if let Err(err) = self.symbolizer.evict(&evict) {
            debug!(pid = process.pid, "evict failed: {err}");
        }
    }
}

/// One process's resolved addresses.
pub struct ProcessNames<'a> {
    maps: Option<&'a KnownMaps>,
    names: Option<&'a FastMap<u64, Arc<str>>>,
}

impl ProcessNames<'_> {
    /// Whether `addr` is in an executable mapping of the process (as last
    /// read by [`NativeSymbolizer::resolve`]); `true` when its mappings are
    /// unknown.
    pub fn is_code(&self, addr: u64) -> bool {
        self.maps.is_none_or(|known| known.covers(addr))
    }

    /// The name of a resolved address.
    pub fn name(&self, addr: u64) -> Arc<str> {
        self.names
            .and_then(|names| names.get(&addr))
            .cloned()
            .unwrap_or_else(|| "[unknown]".into())
    }
}

/// A symbol's name and, when its size is known, where the address lies in
/// it and how long it is.
type SymName = (Option<Arc<str>>, Option<(usize, usize)>);

fn sym_name(result: &Symbolized<'_>) -> SymName {
    match result {
        Symbolized::Sym(sym) => (
            Some(sym.name.as_ref().into()),
            sym.size
                .filter(|&size| sym.offset < size)
                .map(|size| (sym.offset, size)),
        ),
        Symbolized::Unknown(_) => (None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::enrich::{Runtime, spark::SparkProcess};

    /// A function of this test binary, with a name to find.
    #[inline(never)]
    #[unsafe(no_mangle)]
    pub extern "C" fn sparkprof_native_test_function() -> u64 {
        std::hint::black_box(7)
    }

    /// A data object of this test binary, with a symbol of its own.
    #[unsafe(no_mangle)]
    pub static SPARKPROF_NATIVE_TEST_DATA: [u64; 64] = [1; 64];

    /// This test process, as enrich would describe it.
    fn this_process() -> ProcessInfo {
        ProcessInfo {
            pid: std::process::id(),
            start_ticks: 1,
            name: "test".into(),
            kernel_thread: false,
            runtime: Runtime::Native,
            spark: SparkProcess::other(),
        }
    }

    /// Every fourth address of 256 KiB of this test binary's code, named
    /// in batches as drains bring them (later ones mostly from the
    /// functions earlier ones found), is named as blazesym alone names it.
    #[test]
    fn names_from_function_ranges_are_blazesyms() {
        let process = this_process();
        let around = sparkprof_native_test_function as *const () as u64;
        let addrs: Vec<u64> = (0..65_536u64)
            .map(|i| (around & !0xffff) - 0x10000 + i * 4)
            .collect();
        // Drains bring addresses from all over the code: the batches take
        // them in a scattered order (a stride prime to their number).
        let scattered: Vec<u64> = (0..addrs.len())
            .map(|i| addrs[i * 7_919 % addrs.len()])
            .collect();
        let mut symbolizer = NativeSymbolizer::new();
        for batch in scattered.chunks(256) {
            symbolizer.resolve(&process, batch);
        }
        let code: Vec<u64> = addrs
            .iter()
            .copied()
            .filter(|&addr| symbolizer.process(&process).is_code(addr))
            .collect();
        assert!(code.len() > 60_000, "{} addresses in code", code.len());
        // Most were named from a function found before, not by blazesym.
        assert!(
            symbolizer.files.len() * 4 < code.len(),
            "{} of {} addresses went to blazesym",
            symbolizer.files.len(),
            code.len()
        );

        let mut source = Process::new(Pid::from(process.pid));
        source.debug_syms = false;
        source.perf_map = false;
        let blazesym = Symbolizer::new();
        let alone = blazesym
            .symbolize(&Source::Process(source), Input::AbsAddr(&code))
            .unwrap();
        let maps = ProcMaps::read(process.pid).unwrap();
        let mut named = 0;
        for (&addr, result) in code.iter().zip(&alone) {
            let expected: Arc<str> = match sym_name(result).0 {
                Some(name) => {
                    named += 1;
                    name
                }
                None => maps.describe(addr).into(),
            };
            assert_eq!(
                symbolizer.process(&process).name(addr),
                expected,
                "at {addr:#x}"
            );
        }
        eprintln!(
            "{} addresses in code, {} named by blazesym, {named} in a symbol",
            code.len(),
            symbolizer.files.len()
        );
        assert!(named > code.len() / 2, "only {named} named");
    }

    /// This process's own code is named; an address in its data (what a
    /// walk through code without frame pointers reads) is not code and is
    /// never named after the data symbol there.
    #[test]
    fn names_code_and_never_data() {
        let process = this_process();
        let function = sparkprof_native_test_function as *const () as u64 + 1;
        let data = std::hint::black_box(&SPARKPROF_NATIVE_TEST_DATA) as *const _ as u64 + 8;
        let mut symbolizer = NativeSymbolizer::new();
        symbolizer.resolve(&process, &[function, data]);
        assert!(symbolizer.process(&process).is_code(function));
        assert_eq!(
            &*symbolizer.process(&process).name(function),
            "sparkprof_native_test_function"
        );
        assert!(!symbolizer.process(&process).is_code(data));
        let named = symbolizer.process(&process).name(data);
        assert!(!named.contains("SPARKPROF_NATIVE_TEST_DATA"), "{named}");
        assert_eq!(&*named, "[unknown]");

        // Another process mapping the same file gets the name kept for the
        // file, without blazesym: shown by a name only that cache holds.
        let (file, offset) = symbolizer
            .maps
            .get_mut(&NativeSymbolizer::key(&process))
            .unwrap()
            .file_offset(process.pid, function)
            .expect("this test binary is a file");
        symbolizer
            .files
            .insert((file, offset), Some("kept for the file".into()));
        let other = ProcessInfo {
            start_ticks: 2,
            ..process
        };
        symbolizer.resolve(&other, &[function]);
        assert_eq!(
            &*symbolizer.process(&other).name(function),
            "kept for the file"
        );

        // The function found is kept with its extent: another address in
        // it is named from there, without blazesym (shown again by a name
        // only that cache holds, over the next 16 bytes).
        assert_eq!(
            function_at(&symbolizer.functions, (file, offset)).as_deref(),
            Some("sparkprof_native_test_function")
        );
        symbolizer
            .functions
            .get_mut(&file)
            .unwrap()
            .insert(offset + 1, (offset + 17, "a known function".into()));
        let third = ProcessInfo {
            start_ticks: 3,
            ..other
        };
        symbolizer.resolve(&third, &[function + 8]);
        assert_eq!(
            &*symbolizer.process(&third).name(function + 8),
            "a known function"
        );
        // Past its end, the file's symbols are read.
        assert_eq!(
            function_at(&symbolizer.functions, (file, offset + 17)),
            None
        );
    }
}
