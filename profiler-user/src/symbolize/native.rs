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
//! again (a third of sparkprof's CPU while a job ran). blazesym is asked by
//! file too (an ELF source, at the offsets in the file our own read of the
//! process's mappings found), through one path per file: it never reads a
//! process's mappings itself, but for code in no file (the vDSO), and keeps
//! nothing per process.

use std::{
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use blazesym::{
    Pid,
    symbolize::{
        Input, Symbolized, Symbolizer,
        source::{Elf, Process, Source},
    },
};
use tracing::debug;

use super::proc_maps::ProcMaps;
use crate::{
    FastMap, FastSet,
    enrich::ProcessInfo,
    sys::proc::{self, FileId, Mapping},
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
    /// The path blazesym knows each file by: the first process's
    /// `/proc/PID/map_files/` entry for it. blazesym keeps a file it opened
    /// (and its parsed symbols) by that path for as long as we do, after
    /// that process has gone: every process that maps the file is named
    /// from it, with neither blazesym's own read of their mappings nor a
    /// path kept for each of them.
    elf_paths: FastMap<FileId, PathBuf>,
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
/// A read again that found none of the addresses that called for it (they
/// were garbage, not a library loaded since) doubles the wait for the
/// next, up to this: a JVM's frame-pointer stacks bring such addresses
/// all the time, and reading its maps every five seconds was most of the
/// reads of maps on a Spark host.
const MAPS_REREAD_MAX: Duration = Duration::from_secs(40);

/// A process's executable mappings and the addresses found outside them.
struct KnownMaps {
    /// `None`: unreadable (it exited, say); then no address is judged.
    maps: Option<ProcMaps>,
    read_at: Instant,
    /// How long after `read_at` the maps may be read again.
    reread_after: Duration,
    /// Addresses outside every mapping at the last read: not resolved
    /// again until the mappings are read again.
    not_code: FastSet<u64>,
    /// The file of each file-backed mapping looked at, by its start
    /// (`None`: anonymous, or its file could not be looked at).
    files: FastMap<u64, Option<FileId>>,
    /// blazesym holds these mappings (it is given them for code in no
    /// file, the vDSO, at most once per read).
    given_to_blazesym: bool,
}

/// Where an address of a process lies in a file: the file, the offset,
/// and the start and end of its mapping (what names its
/// `/proc/PID/map_files/` entry).
struct InFile {
    file: FileId,
    offset: u64,
    mapping: (u64, u64),
}

impl KnownMaps {
    /// Process `pid`'s maps: `read` if given (read in this drain), else
    /// read now.
    fn read(pid: u32, read: Option<&[Mapping]>) -> Self {
        Self {
            maps: match read {
                Some(maps) => Some(ProcMaps::executable(maps)),
                None => ProcMaps::read(pid).ok(),
            },
            read_at: Instant::now(),
            reread_after: MAPS_REREAD,
            not_code: FastSet::default(),
            files: FastMap::default(),
            given_to_blazesym: false,
        }
    }

    /// The file holding `addr` and where `addr` is in it.
    fn in_file(&mut self, pid: u32, addr: u64) -> Option<InFile> {
        let mapping = self.maps.as_ref()?.find(addr)?;
        if mapping.inode == 0 {
            return None;
        }
        let (start, end) = (mapping.start, mapping.end);
        let offset = addr - start + mapping.offset;
        let file = *self
            .files
            .entry(start)
            .or_insert_with(|| mapping.file_id(pid));
        Some(InFile {
            file: file?,
            offset,
            mapping: (start, end),
        })
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
            // A file is known by the path it was first opened by (see
            // `elf_paths`), which outlives its process: never looked up
            // again by that path. A file changed on disk has another
            // `FileId`, and so another path.
            symbolizer: Symbolizer::builder().enable_auto_reload(false).build(),
            names: FastMap::default(),
            maps: FastMap::default(),
            files: FastMap::default(),
            functions: FastMap::default(),
            elf_paths: FastMap::default(),
        }
    }

    fn key(process: &ProcessInfo) -> ProcessKey {
        (process.pid, process.start_ticks)
    }

    /// Resolves the addresses of `process` not seen before; `maps`: its
    /// memory maps if read in this drain already.
    pub fn resolve(&mut self, process: &ProcessInfo, addrs: &[u64], maps: Option<&[Mapping]>) {
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
        // ones known (a library loaded since; at most every MAPS_REREAD,
        // less often while those reads find nothing new), then leave out,
        // and remember, what is not code.
        let stale = match self.maps.get(&key) {
            None => true,
            Some(known) => {
                known.read_at.elapsed() >= known.reread_after
                    && todo.iter().any(|&addr| !known.covers(addr))
            }
        };
        if stale {
            let mut fresh = KnownMaps::read(process.pid, maps);
            if let Some(before) = self.maps.get(&key) {
                let found = todo
                    .iter()
                    .any(|&addr| !before.covers(addr) && fresh.covers(addr));
                fresh.reread_after = if found {
                    MAPS_REREAD
                } else {
                    (2 * before.reread_after).min(MAPS_REREAD_MAX)
                };
            }
            self.maps.insert(key, fresh);
        }
        let known = self.maps.get_mut(&key).expect("just read");
        let (code, outside): (Vec<u64>, Vec<u64>) =
            todo.into_iter().partition(|&addr| known.covers(addr));
        known.not_code.extend(outside);
        // Names another process's mapping of the same file already found.
        let mut found: Vec<(u64, Option<Arc<str>>)> = Vec::with_capacity(code.len());
        let mut in_files: Vec<(u64, InFile)> = Vec::new();
        let mut in_no_file: Vec<u64> = Vec::new();
        for addr in code {
            let Some(in_file) = known.in_file(process.pid, addr) else {
                in_no_file.push(addr);
                continue;
            };
            let at = (in_file.file, in_file.offset);
            match self.files.get(&at) {
                Some(name) => found.push((addr, name.clone())),
                None => match function_at(&self.functions, at) {
                    Some(name) => found.push((addr, Some(name))),
                    None => in_files.push((addr, in_file)),
                },
            }
        }
        if self.files.len() + in_files.len() > MAX_FILE_NAMES {
            self.forget_files();
        }
        found.extend(self.resolve_in_files(process.pid, in_files));
        if !in_no_file.is_empty() {
            let known = self.maps.get_mut(&key).expect("just read");
            if !std::mem::replace(&mut known.given_to_blazesym, true) {
                // blazesym reads /proc/PID/maps again at every symbolize
                // call unless it holds the process's mappings.
                let mut vmas = blazesym::symbolize::cache::Process::new(Pid::from(process.pid));
                vmas.cache_perf_map = false;
                if let Err(err) = self
                    .symbolizer
                    .cache(&blazesym::symbolize::cache::Cache::Process(vmas))
                {
                    debug!(pid = process.pid, "caching mappings failed: {err}");
                }
            }
            let mut source = Process::new(Pid::from(process.pid));
            // ELF symbols only: DWARF parsing of large binaries costs seconds and
            // hundreds of MiB; perf maps are read by our own JIT resolver.
            source.debug_syms = false;
            source.perf_map = false;
            source.map_files = true;
            let names: Vec<Option<Arc<str>>> = match self
                .symbolizer
                .symbolize(&Source::Process(source), Input::AbsAddr(&in_no_file))
            {
                Ok(results) => results.iter().map(|result| sym_name(result).0).collect(),
                Err(err) => {
                    debug!(pid = process.pid, "symbolization failed: {err}");
                    vec![None; in_no_file.len()]
                }
            };
            found.extend(in_no_file.into_iter().zip(names));
        }
        let maps = self.maps.get(&key).and_then(|known| known.maps.as_ref());
        let cache = self.names.entry(key).or_default();
        for (addr, name) in found {
            let name = name.unwrap_or_else(|| match maps {
                Some(maps) => maps.describe(addr).into(),
                None => "[unknown]".into(),
            });
            cache.insert(addr, name);
        }
    }

    /// Names addresses in files: each file's in one call of blazesym, by
    /// their offsets in it. Keeps each name for the file, and the extent of
    /// each function found.
    fn resolve_in_files(
        &mut self,
        pid: u32,
        in_files: Vec<(u64, InFile)>,
    ) -> Vec<(u64, Option<Arc<str>>)> {
        let mut by_file: FastMap<FileId, Vec<(u64, InFile)>> = FastMap::default();
        for (addr, in_file) in in_files {
            by_file
                .entry(in_file.file)
                .or_default()
                .push((addr, in_file));
        }
        let mut found = Vec::new();
        for (file, wanted) in by_file {
            let offsets: Vec<u64> = wanted.iter().map(|(_, in_file)| in_file.offset).collect();
            let (start, end) = wanted[0].1.mapping;
            let own = proc::map_file(pid, start, end);
            let first = self
                .elf_paths
                .entry(file)
                .or_insert_with(|| own.clone())
                .clone();
            // The path kept first; if blazesym cannot open the file by it
            // (its process went before blazesym opened it), this process's
            // own path, kept from then on.
            let mut results = None;
            for path in [Some(first.clone()), (first != own).then_some(own)]
                .into_iter()
                .flatten()
            {
                let mut elf = Elf::new(&path);
                // ELF symbols only: DWARF parsing of large binaries costs
                // seconds and hundreds of MiB.
                elf.debug_syms = false;
                match self
                    .symbolizer
                    .symbolize(&Source::Elf(elf), Input::FileOffset(&offsets))
                {
                    Ok(named) => {
                        results = Some(named.iter().map(sym_name).collect::<Vec<_>>());
                        self.elf_paths.insert(file, path);
                        break;
                    }
                    Err(err) => debug!(path = %path.display(), "symbolization failed: {err}"),
                }
            }
            let Some(results) = results else {
                // Nothing is kept for the file: tried again next time.
                self.elf_paths.remove(&file);
                found.extend(wanted.into_iter().map(|(addr, _)| (addr, None)));
                continue;
            };
            for ((addr, in_file), (name, extent)) in wanted.into_iter().zip(results) {
                self.files.insert((file, in_file.offset), name.clone());
                if let (Some(name), Some((offset, size))) = (&name, extent) {
                    let start = in_file.offset.saturating_sub(offset as u64);
                    self.functions
                        .entry(file)
                        .or_default()
                        .insert(start, (start + size as u64, name.clone()));
                }
                found.push((addr, name));
            }
        }
        found
    }

    /// Lets go of every name kept by file, and of the files blazesym holds
    /// for them.
    fn forget_files(&mut self) {
        self.files.clear();
        self.functions.clear();
        for (_, path) in self.elf_paths.drain() {
            let evict =
                blazesym::symbolize::evict::Evict::Elf(blazesym::symbolize::evict::Elf::new(path));
            if let Err(err) = self.symbolizer.evict(&evict) {
                debug!("evict failed: {err}");
            }
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
        held.add("symbolize.native_elf_files", self.elf_paths.len());
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
            symbolizer.resolve(&process, batch, None);
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

    /// Where `addr` of this process lies in its file: the mapping's path
    /// and the offset.
    fn file_offset_here(addr: u64) -> (PathBuf, u64) {
        let maps = ProcMaps::read(std::process::id()).unwrap();
        let mapping = maps.find(addr).expect("in code");
        let crate::sys::proc::MapPath::File { path, .. } = &mapping.path else {
            panic!("{addr:#x} is in no file");
        };
        (path.clone(), addr - mapping.start + mapping.offset)
    }

    /// Every process mapping a file has it named by the one path blazesym
    /// opened it by, still after that path's process has gone: a child's
    /// libc is named first, and once the child has exited another function
    /// of this process's libc (the same file) is named from what blazesym
    /// holds.
    #[test]
    fn a_file_is_named_by_one_path_after_its_process_has_gone() {
        let getpid = libc::getpid as *const () as u64;
        let getppid = libc::getppid as *const () as u64;
        let (libc_path, getpid_offset) = file_offset_here(getpid);
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep runs");
        let pid = child.id();
        // The child's getpid: where its mapping of the same libc holds the
        // same offset (once its loader has mapped libc).
        let in_child = (0..200)
            .find_map(|_| {
                let maps = crate::sys::proc::read_maps(pid).ok()?;
                let found = maps.iter().find(|m| {
                    m.executable
                        && matches!(&m.path, crate::sys::proc::MapPath::File { path, .. } if *path == libc_path)
                        && (m.offset..m.offset + (m.end - m.start)).contains(&getpid_offset)
                });
                if found.is_none() {
                    std::thread::sleep(Duration::from_millis(10));
                }
                found.map(|m| m.start + getpid_offset - m.offset)
            })
            .expect("the child maps this process's libc");
        let child_info = ProcessInfo {
            pid,
            start_ticks: crate::sys::proc::stat(pid).unwrap().start_ticks,
            ..this_process()
        };
        let mut symbolizer = NativeSymbolizer::new();
        symbolizer.resolve(&child_info, &[in_child], None);
        let named = symbolizer.process(&child_info).name(in_child);
        assert!(named.contains("getpid"), "{named}");
        assert_eq!(symbolizer.elf_paths.len(), 1);
        let opened_by = symbolizer.elf_paths.values().next().unwrap().clone();
        assert!(
            opened_by.starts_with(format!("/proc/{pid}/map_files")),
            "{}",
            opened_by.display()
        );
        child.kill().unwrap();
        child.wait().unwrap();
        symbolizer.evict(&child_info);
        assert!(!opened_by.exists(), "the child's path is gone");

        let process = this_process();
        symbolizer.resolve(&process, &[getppid], None);
        let named = symbolizer.process(&process).name(getppid);
        assert!(named.contains("getppid"), "{named}");
        assert_eq!(symbolizer.elf_paths.values().next(), Some(&opened_by));

        // A path blazesym never opened the file by, whose process has gone,
        // gives way to the naming process's own.
        let file = *symbolizer.elf_paths.keys().next().unwrap();
        let mut fresh = NativeSymbolizer::new();
        fresh.elf_paths.insert(file, opened_by);
        fresh.resolve(&process, &[getpid], None);
        let named = fresh.process(&process).name(getpid);
        assert!(named.contains("getpid"), "{named}");
        let own = format!("/proc/{}/map_files", process.pid);
        assert!(
            fresh.elf_paths[&file].starts_with(&own),
            "{:?}",
            fresh.elf_paths
        );
    }

    /// Addresses outside every mapping known call for the maps to be read
    /// again; a read that finds none of them waits twice as long before the
    /// next, one that finds code waits as little as ever, and maps given
    /// (read this drain by the enrich stage) are taken as read.
    #[test]
    fn maps_read_again_for_garbage_wait_longer() {
        let process = this_process();
        let key = NativeSymbolizer::key(&process);
        let function = sparkprof_native_test_function as *const () as u64 + 1;
        let mut symbolizer = NativeSymbolizer::new();
        let waited = |symbolizer: &mut NativeSymbolizer, addr: u64, maps| {
            let known = symbolizer.maps.get_mut(&key).unwrap();
            known.read_at -= known.reread_after;
            symbolizer.resolve(&process, &[addr], maps);
            symbolizer.maps[&key].reread_after
        };
        // Given maps without this binary's code: nothing is code.
        symbolizer.resolve(&process, &[8], Some(&[]));
        assert_eq!(symbolizer.maps[&key].reread_after, MAPS_REREAD);
        assert_eq!(waited(&mut symbolizer, 16, Some(&[])), 2 * MAPS_REREAD);
        assert_eq!(waited(&mut symbolizer, 24, Some(&[])), 4 * MAPS_REREAD);
        // Read from /proc: the function is found, and named.
        assert_eq!(waited(&mut symbolizer, function, None), MAPS_REREAD);
        assert_eq!(
            &*symbolizer.process(&process).name(function),
            "sparkprof_native_test_function"
        );
        // Each a new garbage address: one known not to be code asks nothing.
        for garbage in (32..).step_by(8).take(8) {
            waited(&mut symbolizer, garbage, None);
        }
        assert_eq!(symbolizer.maps[&key].reread_after, MAPS_REREAD_MAX);
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
        symbolizer.resolve(&process, &[function, data], None);
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
        let InFile { file, offset, .. } = symbolizer
            .maps
            .get_mut(&NativeSymbolizer::key(&process))
            .unwrap()
            .in_file(process.pid, function)
            .expect("this test binary is a file");
        symbolizer
            .files
            .insert((file, offset), Some("kept for the file".into()));
        let other = ProcessInfo {
            start_ticks: 2,
            ..process
        };
        symbolizer.resolve(&other, &[function], None);
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
        symbolizer.resolve(&third, &[function + 8], None);
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
