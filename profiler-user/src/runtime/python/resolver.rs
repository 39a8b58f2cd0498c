//! One CPython process: finding its interpreter ([`PythonProcess::probe`]),
//! listing its threads for the kernel walker, and naming the frames the
//! walker recorded, with a per-process cache of code objects.

use std::{
    collections::{HashMap, HashSet},
    fmt,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU32, Ordering},
    },
};

use profiler_common::{PY_NO_OFFSET, PythonFrame, PythonOffsets};
use tracing::{debug, warn};

use crate::{
    collect::PythonThread,
    sys::{
        memory::CachedMemory,
        proc::{self, Mapping},
    },
};

use super::{
    memory::{self, Memory, ReadMemory as _},
    module::{self, FileNameVersion},
    objects::{CodeHeader, CodeInfo, ObjectReader, TypeAddresses, object_address},
    process::{self, FileMapping},
    threads,
    types::{
        DEBUG_COOKIE, DEBUG_OFFSETS_313, DEBUG_OFFSETS_FREE_THREADED, DEBUG_OFFSETS_READ_LEN,
        DEBUG_OFFSETS_VERSION, PythonError, PythonVersion, StructOffsets,
    },
};

/// Code objects cached per process at most; past this the cache starts
/// over (a process rarely has this many distinct sampled functions).
pub const MAX_CACHED_CODES: usize = 65_536;

/// A frame's location, the parts of its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameLocation {
    /// `co_qualname` (3.11+) or `co_name`.
    pub function: Arc<str>,
    /// `co_filename` as stored (usually the full path).
    pub file: Arc<str>,
    /// The line of the instruction, when it could be computed.
    pub line: Option<u32>,
}

impl fmt::Display for FrameLocation {
    /// `function (file.py:line)`, or `function (file.py)` without a line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{} ({}:{line})", self.function, self.file),
            None => write!(f, "{} ({})", self.function, self.file),
        }
    }
}

/// A CPython interpreter found in a process.
pub struct PythonProcess {
    pid: u32,
    version: PythonVersion,
    /// The module that holds `_PyRuntime`, as the process maps it.
    module: PathBuf,
    /// `_PyRuntime` in the process.
    runtime: u64,
    offsets: &'static StructOffsets,
    reader: ObjectReader,
    /// The process's memory as this drain read it ahead for its new code
    /// objects ([`Self::prefetch_headers`]), let go at every drain.
    cached: CachedMemory,
    /// Where the C library keeps the thread id in `struct pthread`, once
    /// found ([`PY_NO_OFFSET`] until then).
    pthread_tid_offset: AtomicU32,
    /// The thread states last listed and the threads they gave: while the
    /// list is the same, so are the threads, and the process's thread
    /// list (a directory of /proc, read at every drain) is not read again.
    last_threads: Mutex<Option<(Vec<threads::RawThread>, Vec<PythonThread>)>>,
    /// Code objects read, by address, with the identity they had.
    codes: HashMap<u64, CachedCode>,
    /// This drain's code-object headers, read together at its start
    /// ([`Self::prefetch_headers`]) and taken as its frames are named.
    headers: crate::FastMap<u64, CodeHeader>,
    /// Drains whose frames were named ([`Self::new_drain`]).
    drain: u64,
    /// In a PID namespace of its own (its thread ids are not the host's).
    nested: bool,
}

/// A code object read, and the drain in which its identity was last
/// checked (see [`PythonProcess::frame_location`]).
struct CachedCode {
    info: CodeInfo,
    checked_in: u64,
    /// Frame names by instruction ([`PythonProcess::frame_named`]).
    named: crate::FastMap<u64, Arc<str>>,
}

impl CachedCode {
    /// Where `frame`, of this code object, is.
    fn location(&self, offsets: &StructOffsets, frame: &PythonFrame) -> FrameLocation {
        FrameLocation {
            function: self.info.function.clone(),
            file: self.info.file.clone(),
            line: self.info.line(offsets, frame.code, frame.instr),
        }
    }
}

/// Instructions whose frame names a code object keeps; past this it starts
/// over (a long function samples at many places).
const MAX_NAMED_INSTRUCTIONS: usize = 256;

impl fmt::Debug for PythonProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PythonProcess")
            .field("pid", &self.pid)
            .field("version", &self.version)
            .field("module", &self.module)
            .field("runtime", &format_args!("{:#x}", self.runtime))
            .field("cached_codes", &self.codes.len())
            .finish()
    }
}

impl PythonProcess {
    /// Code objects cached.
    pub fn code_objects(&self) -> usize {
        self.codes.len()
    }

    /// Finds CPython in process `pid`: the module (the executable or
    /// libpython3.X.so, also in containers, through /proc/PID/map_files or
    /// /proc/PID/root) whose ELF symbols have `_PyRuntime`, its load
    /// address from /proc/PID/maps, and the version (the `Py_Version`
    /// symbol on 3.11+, else the module's file name `python3.X` /
    /// `libpython3.X.so*`, else, on 3.8–3.10, which API functions it
    /// exports; the `PY_VERSION` string is not in these builds' data).
    /// `Ok(None)` when the process is not CPython or its version or build
    /// is unsupported (said in a debug log); `Err` only for real errors
    /// (process gone, files unreadable).
    pub fn probe(pid: u32) -> Result<Option<PythonProcess>, PythonError> {
        Self::probe_mapped(pid, None)
    }

    /// [`Self::probe`], with the process's memory maps if just read.
    pub fn probe_mapped(
        pid: u32,
        maps: Option<&[Mapping]>,
    ) -> Result<Option<PythonProcess>, PythonError> {
        let maps = proc::maps_or_read(pid, maps)
            .map_err(|e| process::proc_error(pid, PathBuf::from(format!("/proc/{pid}/maps")), e))?;
        let mappings = process::file_mappings(&maps);
        if mappings.is_empty() {
            debug!(
                pid,
                "no file mappings (kernel thread or zombie): not python"
            );
            return Ok(None);
        }
        let mut first_error = None;
        for path in module::candidate_modules(pid, &mappings)? {
            let module_maps: Vec<&FileMapping> =
                mappings.iter().filter(|m| m.path == path).collect();
            let Some(&first) = module_maps.first() else {
                continue;
            };
            let symbols = match module::module_symbols(pid, first) {
                Ok(symbols) => symbols,
                Err(e) if e.is_process_gone() => return Err(e),
                Err(e) => {
                    debug!(pid, module = %path, error = %e, "module unreadable");
                    first_error.get_or_insert(e);
                    continue;
                }
            };
            let Some(runtime) = symbols.runtime else {
                continue;
            };
            let Some(bias) = symbols.bias(&module_maps) else {
                debug!(pid, module = %path, "no mapping of the module matches its segments");
                continue;
            };
            // Not pinned: CPython processes fork (PySpark's daemon, its
            // workers), and a pinned read copies each shared page read.
            let memory = Memory::unpinned(pid);
            let runtime = runtime.wrapping_add(bias);
            let name = module::file_name(&path);
            let from_name = module::version_from_file_name(name);
            let from_symbol = match symbols
                .py_version
                .map(|address| memory.read_u64(address.wrapping_add(bias)))
            {
                Some(Ok(hex)) => Some(PythonVersion::from_hex(hex)),
                Some(Err(e)) if e.is_process_gone() => return Err(e.into()),
                Some(Err(e)) => {
                    debug!(pid, module = %path, error = %e, "Py_Version unreadable");
                    None
                }
                None => None,
            };
            let version = match (from_symbol, from_name) {
                (_, Some(FileNameVersion::Flavour(version, flavour))) => {
                    debug!(pid, module = %path, %version, %flavour,
                        "python build with a different object layout (debug or free-threaded): unsupported");
                    return Ok(None);
                }
                (Some(version), Some(FileNameVersion::Version(named))) if named != version => {
                    debug!(pid, module = %path, %version, %named,
                        "Py_Version and the file name disagree: Py_Version wins");
                    version
                }
                (Some(version), _) => version,
                (None, Some(FileNameVersion::Version(version))) => version,
                (None, None) => match symbols.marker_version {
                    Some(version) => version,
                    None => {
                        debug!(pid, module = %path, "python of unknown version: unsupported");
                        return Ok(None);
                    }
                },
            };
            let Some(offsets) = version.offsets() else {
                debug!(pid, module = %path, %version, "python version unsupported");
                return Ok(None);
            };
            if version == PythonVersion::new(3, 13)
                && !check_debug_offsets(&memory, runtime, offsets)?
            {
                return Ok(None);
            }
            let types = TypeAddresses {
                code: symbols.code_type.map(|a| a.wrapping_add(bias)),
                unicode: symbols.unicode_type.map(|a| a.wrapping_add(bias)),
                bytes: symbols.bytes_type.map(|a| a.wrapping_add(bias)),
            };
            debug!(pid, module = %path, %version, runtime, "found python");
            return Ok(Some(PythonProcess {
                pid,
                version,
                module: PathBuf::from(path),
                runtime,
                offsets,
                cached: CachedMemory::new(memory.clone()),
                reader: ObjectReader {
                    pid,
                    memory,
                    offsets,
                    types,
                },
                pthread_tid_offset: AtomicU32::new(PY_NO_OFFSET),
                last_threads: Mutex::new(None),
                codes: HashMap::new(),
                headers: Default::default(),
                drain: 0,
                nested: process::nested_pid_namespace(pid)?,
            }));
        }
        match first_error {
            Some(e) => Err(e),
            None => {
                debug!(pid, "no module with _PyRuntime: not python");
                Ok(None)
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// `(major, minor)`.
    pub fn version(&self) -> (u8, u8) {
        (self.version.major, self.version.minor)
    }

    /// The module that holds `_PyRuntime` (the executable or libpython),
    /// as the process maps it.
    pub fn module(&self) -> &Path {
        &self.module
    }

    /// The address of `_PyRuntime` in the process.
    pub fn runtime_address(&self) -> u64 {
        self.runtime
    }

    /// This version's full offset table.
    pub fn struct_offsets(&self) -> &'static StructOffsets {
        self.offsets
    }

    /// The offsets the kernel walker needs for this version.
    pub fn kernel_offsets(&self) -> PythonOffsets {
        self.offsets.walk
    }

    /// Every thread of every interpreter (the main one first) as (Linux
    /// thread id on this host, `PyThreadState` address): what the kernel
    /// walker starts from.
    ///
    /// The interpreters' lists are walked from `_PyRuntime.interpreters`
    /// (bounded to a few thousand threads, stopping on a cycle or a thread
    /// state of another interpreter). The thread id is `native_thread_id`
    /// on 3.11+; 3.8–3.10 do not record it, so it is read from the C
    /// library's `struct pthread` that `thread_id` (the `pthread_t`) points
    /// at (the offset calibrated once per process). Either must name a live
    /// thread of the process, so stale thread states (a thread that
    /// exited, one not started yet) are left out. Ids are translated from
    /// the process's PID namespace to this host's. A thread with thread
    /// states in several interpreters is listed once, with the first found
    /// (the main interpreter's).
    pub fn threads(&self) -> Result<Vec<PythonThread>, PythonError> {
        let memory = &self.reader.memory;
        let mut raw = threads::list_thread_states(memory, self.offsets, self.runtime)?;
        // A thread that runs code in a sub-interpreter has a thread state in
        // each interpreter, and the first listed for a thread is the one
        // kept: on 3.13+ the active one goes first, the others keep the
        // list's order (the main interpreter's first). 3.12 runs a
        // sub-interpreter's code on that interpreter's first thread state,
        // which names the thread that created the interpreter (CPython
        // gh-109860): there the active bit would hand that thread code
        // another thread runs, so the list's order stands, and the running
        // thread shows its main-interpreter frames.
        if self.offsets.version >= PythonVersion::new(3, 13) {
            raw.sort_by_key(|thread| thread.active != Some(true));
        }
        let mut last = self
            .last_threads
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((listed, threads)) = &*last
            && *listed == raw
        {
            return Ok(threads.clone());
        }
        let threads = self.live_thread_states(&raw)?;
        *last = Some((raw, threads.clone()));
        Ok(threads)
    }

    /// The live threads of these thread states (see [`Self::threads`]).
    fn live_thread_states(
        &self,
        raw: &[threads::RawThread],
    ) -> Result<Vec<PythonThread>, PythonError> {
        let memory = &self.reader.memory;
        let live = process::live_threads(self.pid, self.nested)?;
        let mut result = Vec::with_capacity(raw.len());
        let mut listed = HashSet::new();
        let mut via_pthread = Vec::new();
        for thread in raw {
            match thread.native_id.and_then(|id| u32::try_from(id).ok()) {
                Some(id) if live.contains_key(&id) => {
                    let host = live[&id];
                    if listed.insert(host) {
                        result.push(PythonThread {
                            tid: host,
                            tstate: thread.tstate,
                        });
                    }
                }
                _ => via_pthread.push(*thread),
            }
        }
        if via_pthread.iter().any(|t| t.pthread != 0) {
            let offset = match self.pthread_tid_offset.load(Ordering::Relaxed) {
                PY_NO_OFFSET => {
                    let pthreads: Vec<u64> = via_pthread.iter().map(|t| t.pthread).collect();
                    let found = threads::calibrate_pthread_tid(memory, &pthreads, &live)?;
                    match found {
                        Some(offset) => {
                            debug!(pid = self.pid, offset, "tid offset in struct pthread");
                            self.pthread_tid_offset.store(offset, Ordering::Relaxed);
                        }
                        None => debug!(pid = self.pid, "tid offset in struct pthread not found"),
                    }
                    found
                }
                offset => Some(offset),
            };
            for thread in via_pthread {
                let tid = match offset {
                    Some(offset) if thread.pthread != 0 => {
                        match threads::pthread_tid(memory, thread.pthread, offset) {
                            Ok(tid) => Some(tid),
                            Err(e) if e.is_process_gone() => return Err(e),
                            Err(_) => None,
                        }
                    }
                    _ => None,
                };
                match tid.and_then(|tid| live.get(&tid)) {
                    Some(&host) => {
                        if listed.insert(host) {
                            result.push(PythonThread {
                                tid: host,
                                tstate: thread.tstate,
                            });
                        }
                    }
                    None => debug!(
                        pid = self.pid,
                        tstate = thread.tstate,
                        ?tid,
                        "python thread state of no live thread: left out"
                    ),
                }
            }
        }
        Ok(result)
    }

    /// The Python frames of one thread, innermost first, read in userspace
    /// exactly as the kernel walker reads them (see
    /// [`threads::walk_frames`]): at most `max_frames`, and whether the chain
    /// went on. For tests, and for checking what the kernel records.
    pub fn read_stack(
        &self,
        tstate: u64,
        max_frames: usize,
    ) -> Result<(Vec<PythonFrame>, bool), PythonError> {
        threads::walk_frames(&self.reader.memory, self.offsets, tstate, max_frames)
    }

    /// Names a frame: `function (file.py:line)`, or `function (file.py)`
    /// when the line cannot be computed. See [`frame_location`](Self::frame_location).
    pub fn frame_name(&mut self, frame: &PythonFrame) -> Result<String, PythonError> {
        Ok(self.frame_location(frame)?.to_string())
    }

    /// [`Self::frame_name`], shared: a code object keeps the names of its
    /// instructions named so far (a busy thread's samples repeat the same
    /// few frames, and formatting each anew was a tenth of the allocations
    /// sparkprof made on a Spark host). They go with the code object when
    /// its identity changes.
    pub fn frame_named(&mut self, frame: &PythonFrame) -> Result<Arc<str>, PythonError> {
        let offsets = self.offsets;
        let cached = self.checked_code(frame.code)?;
        if let Some(name) = cached.named.get(&frame.instr) {
            return Ok(name.clone());
        }
        let name: Arc<str> = cached.location(offsets, frame).to_string().into();
        if cached.named.len() >= MAX_NAMED_INSTRUCTIONS {
            cached.named.clear();
        }
        cached.named.insert(frame.instr, name.clone());
        Ok(name)
    }

    /// Where a frame is: its code object's `co_qualname` (3.11+) or
    /// `co_name`, `co_filename`, and the line of the recorded instruction
    /// from the version's line table.
    ///
    /// Code objects are cached by address. CPython frees code objects (a
    /// module reloaded, a function defined by `exec`) and may place
    /// another at the same address, so every call re-reads the code
    /// object's fixed part (one small read) and uses the cache only if
    /// its identity is unchanged: the type, first line, and the addresses
    /// of its name, file name and line table objects. A new code object
    /// at the same address with all of these equal is named as the old
    /// one; it then has the same name and file, and the risk left is a
    /// line computed from a stale table. When the process has exited, a
    /// cached code object is used as is (its memory can no longer be
    /// reused), so the last samples of a process that just exited are
    /// still named.
    ///
    /// The identity is checked once per code object and drain (its header
    /// read with all the drain's others, [`Self::prefetch_headers`]): every frame
    /// of a drain is named at the same moment, so a second read of the
    /// same header would only tell the same (a busy Python thread's drain
    /// has the same few code objects in hundreds of frames).
    pub fn frame_location(&mut self, frame: &PythonFrame) -> Result<FrameLocation, PythonError> {
        let offsets = self.offsets;
        Ok(self.checked_code(frame.code)?.location(offsets, frame))
    }

    /// The code object at `code`, its identity checked once in this drain
    /// (see [`Self::frame_location`]).
    fn checked_code(&mut self, code: u64) -> Result<&mut CachedCode, PythonError> {
        let checked = self
            .codes
            .get(&code)
            .is_some_and(|cached| cached.checked_in == self.drain);
        let header = if checked {
            None
        } else if let Some(header) = self.headers.remove(&code) {
            Some(header)
        } else {
            match self.reader.read_code_header(code) {
                Ok(header) => Some(header),
                Err(e) if e.is_process_gone() && self.codes.contains_key(&code) => None,
                Err(e) => {
                    self.codes.remove(&code);
                    return Err(e);
                }
            }
        };
        let drain = self.drain;
        let cached = self.code(code, header)?;
        cached.checked_in = drain;
        Ok(cached)
    }

    /// The code object at `addr`, from the cache if its identity still
    /// matches `header` (`None`: trust the cache).
    fn code(
        &mut self,
        addr: u64,
        header: Option<CodeHeader>,
    ) -> Result<&mut CachedCode, PythonError> {
        let fresh = match (header, self.codes.get(&addr)) {
            (None, Some(_)) => false,
            (Some(header), Some(cached)) => cached.info.header != header,
            (_, None) => true,
        };
        if fresh {
            let Some(header) = header else {
                return Err(PythonError::ProcessGone { pid: self.pid });
            };
            let info = self.cached_reader().read_code(addr, &header)?;
            if self.codes.len() >= MAX_CACHED_CODES {
                debug!(pid = self.pid, "python code cache full: starting over");
                self.codes.clear();
            }
            // Checked in no drain yet: the caller marks it.
            self.codes.insert(
                addr,
                CachedCode {
                    info,
                    checked_in: u64::MAX,
                    named: Default::default(),
                },
            );
        }
        self.codes
            .get_mut(&addr)
            .ok_or(PythonError::ProcessGone { pid: self.pid })
    }

    /// A new drain's frames are to be named: code objects may have been
    /// freed and their addresses reused since the last.
    pub fn new_drain(&mut self) {
        self.drain += 1;
        self.headers.clear();
        self.cached.clear();
    }

    /// Reads objects through the blocks this drain read ahead.
    fn cached_reader(&self) -> ObjectReader<&CachedMemory> {
        self.reader.through(&self.cached)
    }

    /// Reads at once the headers of these code objects (a drain's) that
    /// [`Self::frame_location`] will check: one system call for all, where
    /// checking them one by one made one each. One that cannot be read,
    /// or is not a code object, is left to that check, which says why.
    pub fn prefetch_headers(&mut self, codes: impl IntoIterator<Item = u64>) {
        let drain = self.drain;
        let mut wanted: Vec<u64> = codes
            .into_iter()
            .filter(|&code| object_address(code))
            .filter(|code| {
                self.codes
                    .get(code)
                    .is_none_or(|cached| cached.checked_in != drain)
            })
            .collect();
        wanted.sort_unstable();
        wanted.dedup();
        if wanted.is_empty() {
            return;
        }
        let len = self.offsets.code_read_len();
        let blocks = self.reader.memory.read_each(&wanted, len);
        for (code, block) in wanted.into_iter().zip(blocks) {
            if let Some(header) = block.and_then(|b| self.reader.code_header(code, &b).ok()) {
                self.headers.insert(code, header);
            }
        }
        // The code objects not read yet (or changed): their names and line
        // tables, a level at a time for all of them. Read one by one, each
        // took six system calls (a string's header, then its characters,
        // twice, and the table's), a quarter of what naming Python frames
        // cost on a Spark host, whose applications each bring new workers.
        let fresh: Vec<(u64, CodeHeader)> = self
            .headers
            .iter()
            .filter(|&(code, header)| {
                self.codes
                    .get(code)
                    .is_none_or(|cached| cached.info.header != *header)
            })
            .map(|(&code, &header)| (code, header))
            .collect();
        let reader = &self.reader;
        self.cached.prefetch_rounds(fresh, |held, (code, header)| {
            // What it reads is all that matters here.
            let _ = reader.through(held).read_code(*code, header);
        });
    }

    /// Code objects in the cache.
    pub fn cached_code_objects(&self) -> usize {
        self.codes.len()
    }
}

/// 3.13 publishes its own offsets in `_Py_DebugOffsets` at the start of
/// `_PyRuntime`: refuses a build whose offsets differ from the table (a
/// custom or free-threaded build) rather than misreading it.
fn check_debug_offsets(
    memory: &Memory,
    runtime: u64,
    offsets: &StructOffsets,
) -> Result<bool, PythonError> {
    let block = match memory.read_vec(runtime, DEBUG_OFFSETS_READ_LEN) {
        Ok(block) => block,
        Err(e) if e.is_process_gone() => return Err(e.into()),
        Err(e) => {
            debug!(pid = memory.pid(), error = %e, "python 3.13 _PyRuntime unreadable");
            return Ok(false);
        }
    };
    if block.get(..8) != Some(&DEBUG_COOKIE[..]) {
        warn!(
            pid = memory.pid(),
            "python 3.13 without _Py_DebugOffsets: unsupported build"
        );
        return Ok(false);
    }
    let value = |position: u32| memory::field_u64(&block, position).unwrap_or(u64::MAX);
    let version = PythonVersion::from_hex(value(DEBUG_OFFSETS_VERSION));
    if version != offsets.version {
        warn!(pid = memory.pid(), %version, "python 3.13 whose _Py_DebugOffsets say another version");
        return Ok(false);
    }
    if value(DEBUG_OFFSETS_FREE_THREADED) != 0 {
        debug!(pid = memory.pid(), "free-threaded python 3.13: unsupported");
        return Ok(false);
    }
    for entry in DEBUG_OFFSETS_313 {
        let ours = offsets.field(entry.field).map(u64::from);
        let theirs = value(entry.position);
        if ours != Some(theirs) {
            warn!(
                pid = memory.pid(),
                field = entry.field,
                ?ours,
                theirs,
                "python 3.13 build whose layout differs from sparkprof's table: unsupported"
            );
            return Ok(false);
        }
    }
    Ok(true)
}
