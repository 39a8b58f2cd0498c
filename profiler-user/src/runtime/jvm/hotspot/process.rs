//! One JVM whose Java frames the kernel walks: what the walker needs from
//! it ([`HotspotProcess::proc_info`]), and the names of the frames it
//! records, read from the JVM's memory and cached per method (or per
//! compiled pc) until the JVM exits.
//!
//! Compiled frames are named from the code blob at their pc (the kernel
//! records the pc and the blob's compile id; a blob freed and reused since
//! has another id, and its frame is `[unknown]` rather than another
//! method's name). Interpreted frames are named from their `Method*`.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    sync::PoisonError,
    time::Instant,
};

use profiler_common::{
    HOTSPOT_MAX_HEAPS, HotspotFrame, HotspotHeap, HotspotProcInfo, hotspot_frame,
};

use super::{
    HotspotError,
    archive::{ArchiveRegions, ArchivedNames, SharedArchivedNames},
    code_cache::{BlobKind, BlobMark, CodeBlob, CodeCache},
    inlining::{DebugInfo, InliningLayout},
    layout::{CodeBegin, HotspotLayout},
    libjvm,
    lines::LineLayout,
    names::{NamesRead, method_name},
    threads::{self, JavaThreads, ThreadLayout},
    vmstructs::SharedVmStructs,
};
use crate::{
    FastMap,
    sys::{
        memory::{CachedMemory, HeldOnly, Memory, ReadMemory},
        proc::{self, Mapping},
    },
};

/// A `JavaThread`'s fields lie within this many bytes of its start.
const MAX_JAVA_THREAD_OFFSET: u32 = 1 << 16;
/// Distinct methods and compiled pcs whose names are kept per JVM (a
/// Spark executor compiles a few thousand methods); past this the cache
/// starts over.
const MAX_CACHED: usize = 65_536;
/// Compiled methods whose blob and debug info are kept per JVM, and their
/// `PcDesc`s in all (8 bytes each); past either the cache starts over.
const MAX_COMPILED: usize = 8_192;
const MAX_PC_DESCS: usize = 1 << 20;

/// A compiled method seen in a sample, kept so that its other pcs are
/// named without reading the JVM again (a sample's leaf pc is almost
/// always one not seen before): its blob, where the blob's block ends,
/// its debug info, and the methods of each scope chain named so far.
/// A pc is the method's only while the kernel reports the same compile
/// id there: a blob freed and reused has another.
struct CompiledCode {
    blob: CodeBlob,
    end: u64,
    debug: Option<DebugInfo>,
    /// Scope decode offset → the methods there, root first.
    chains: FastMap<u64, Arc<[JavaMethod]>>,
}

/// The compiled methods of a JVM seen in samples, by their blob's
/// address, within bounds: at most [`MAX_COMPILED`] of them and
/// [`MAX_PC_DESCS`] `PcDesc`s in all, past which they start over.
#[derive(Default)]
struct CompiledMethods {
    by_address: BTreeMap<u64, CompiledCode>,
    /// `PcDesc`s of them all.
    descs: usize,
}

impl CompiledMethods {
    /// The one that holds `pc` with this compile id.
    fn at(&self, pc: u64, compile_id: u32) -> Option<&CompiledCode> {
        let (_, code) = self.by_address.range(..=pc).next_back()?;
        (pc < code.end && code.blob.compile_id == compile_id).then_some(code)
    }

    /// Keeps a compiled method's blob (in a heap block that ends at `end`)
    /// and debug info, in place of any it overlaps (freed since, its
    /// memory reused); returns its address.
    fn keep(&mut self, blob: CodeBlob, end: u64, debug: Option<DebugInfo>) -> u64 {
        let descs = debug.as_ref().map_or(0, DebugInfo::len);
        if self.by_address.len() >= MAX_COMPILED || self.descs + descs > MAX_PC_DESCS {
            self.by_address.clear();
            self.descs = 0;
        }
        let address = blob.address;
        let overlapping: Vec<u64> = self
            .by_address
            .range(..end)
            .rev()
            .take_while(|(_, code)| code.end > address)
            .map(|(&at, _)| at)
            .collect();
        for at in overlapping {
            if let Some(old) = self.by_address.remove(&at) {
                self.descs -= old.debug.as_ref().map_or(0, DebugInfo::len);
            }
        }
        self.descs += descs;
        self.by_address.insert(
            address,
            CompiledCode {
                blob,
                end,
                debug,
                chains: FastMap::default(),
            },
        );
        address
    }
}

/// What a recorded frame is called.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordedName {
    /// A native frame (or a code-cache pc in no blob): the native and JIT
    /// symbolizers name it.
    NotJava,
    /// Java methods (`pkg.Class.method`, root first: a compiled frame
    /// with the methods inlined into it after its own) or a VM stub
    /// (HotSpot's name).
    Java(Arc<[JavaMethod]>),
    /// A Java frame whose method can no longer be read (its class
    /// unloaded, its compiled code freed since the sample).
    Unknown,
}

/// One Java method of a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JavaMethod {
    pub name: Arc<str>,
    /// Inlined into its caller's compiled code.
    pub inlined: bool,
}

/// The methods at a compiled (or stub) pc, and the compile id of the blob
/// they were read from (0 for a stub).
type CodeAt = (u32, Arc<[JavaMethod]>);

/// What a JVM's code cache holds (for `doctor`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Census {
    /// Which shape its code blobs have.
    pub shape: &'static str,
    pub heaps: usize,
    /// Compiled Java methods, and how many of them were named.
    pub compiled: usize,
    pub named: usize,
    /// Why inlined methods cannot be shown, if they cannot.
    pub inlining: Option<String>,
}

/// A JVM whose structures were read.
pub struct HotspotProcess {
    /// The JVM's memory, read a block at a time and let go each drain
    /// ([`Self::new_drain`]).
    memory: CachedMemory,
    layout: HotspotLayout,
    cache: CodeCache,
    /// How to find the methods inlined at a compiled pc (or why not).
    inlining: Result<InliningLayout, String>,
    /// Where its threads and their last Java frames are (or why not).
    thread_layout: Result<ThreadLayout, String>,
    /// Its Java threads as last read.
    threads: JavaThreads,
    pid: u32,
    /// In a PID namespace of its own (its thread ids are not the host's):
    /// its thread ids → the host's, as last read from /proc, and when.
    host_ids: Option<(HashMap<u32, u32>, Option<Instant>)>,
    /// `Method*` → its name, as an interpreted frame's methods (one, not
    /// inlined: every interpreted frame of it shares them); `None`: not a
    /// readable method.
    methods: FastMap<u64, Option<Arc<[JavaMethod]>>>,
    /// Class and method names read, kept and let go with `methods`.
    names_read: NamesRead,
    /// Where it maps CDS archives, whose methods' names every JVM shares
    /// (`archived`).
    archive: ArchiveRegions,
    archived: SharedArchivedNames,
    /// (compiled or stub pc, leaf) → what the blob there is.
    code: FastMap<(u64, bool), CodeAt>,
    /// Compiled methods seen in samples.
    compiled: CompiledMethods,
    /// Frame-pointer code-cache addresses named (the same waits come back
    /// in many off-CPU stacks, drain after drain), with the blob that held
    /// each: see [`Self::name_address`].
    addresses: FastMap<u64, NamedAddress>,
    /// Drains begun, to tell an address named in this one.
    drains: u64,
}

/// Drains (about a minute) an address named by
/// [`HotspotProcess::name_address`] is kept after its last stack.
const ADDRESSES_KEPT_DRAINS: u64 = 64;

/// The readable name of the method at `method`: as a JVM already read it
/// from the same archive, or read from `memory` now (and then kept for
/// every JVM, if archived). `None` if it cannot be read.
fn read_method_name(
    memory: &impl ReadMemory,
    layout: &HotspotLayout,
    names_read: &mut NamesRead,
    archive: &ArchiveRegions,
    archived: &mut ArchivedNames,
    method: u64,
) -> Option<Arc<str>> {
    let at = archive.at(method);
    if let Some(name) = at.and_then(|at| archived.get(&at)) {
        return Some(name);
    }
    let name = method_name(memory, layout, names_read, method)
        .ok()?
        .shared();
    if let Some(at) = at {
        archived.insert(at, name.clone());
    }
    Some(name)
}

/// The methods of an interpreted frame of the method called `name`.
fn interpreted(name: Arc<str>) -> Arc<[JavaMethod]> {
    Arc::from([JavaMethod {
        name,
        inlined: false,
    }])
}

/// A code-cache address as [`HotspotProcess::name_address`] named it.
#[derive(Debug, Clone)]
struct NamedAddress {
    name: RecordedName,
    /// The blob that held it (`None`: none did).
    blob: Option<BlobMark>,
    /// The drain in which it was last named, or its blob found still there.
    drain: u64,
}

impl HotspotProcess {
    pub fn held(&self, held: &mut crate::sys::held::Held) {
        held.add("jvm.method_names", self.methods.len());
        held.add("jvm.names_read", self.names_read.len());
        held.add("jvm.code_names", self.code.len());
        held.add("jvm.compiled_methods", self.compiled.by_address.len());
        held.add("jvm.pc_descs", self.compiled.descs);
        held.add("jvm.memory_blocks", self.memory.len());
        held.add("jvm.named_addresses", self.addresses.len());
        held.add("jvm.java_threads", self.threads.len());
    }

    /// A new drain's frames are to be named: what was read of the JVM's
    /// memory for the last one may have changed since.
    pub fn new_drain(&mut self) {
        self.memory.clear();
        self.names_read.forget_sites();
        self.drains += 1;
        // Addresses no stack has held for a while (code freed, a wait
        // gone) are let go.
        if self.drains.is_multiple_of(ADDRESSES_KEPT_DRAINS) {
            let since = self.drains - ADDRESSES_KEPT_DRAINS;
            self.addresses.retain(|_, named| named.drain >= since);
        }
    }

    /// Reads process `pid`'s VMStructs, the layout sparkprof needs and its
    /// code cache (not ready until the JVM has initialised it).
    /// `maps`: its memory maps if just read (else read here); `archived`:
    /// the names of archived methods every JVM's reader shares; `tables`:
    /// the VMStructs of each libjvm.so read so far.
    pub fn read(
        pid: u32,
        maps: Option<&[Mapping]>,
        archived: SharedArchivedNames,
        tables: &SharedVmStructs,
    ) -> Result<Self, HotspotError> {
        // The tables' entries and the names they point to lie side by
        // side in libjvm: read a block at a time, not a field or a 64-byte
        // piece of a name at a time (some 5,600 reads a JVM otherwise).
        let mut memory = CachedMemory::new(Memory::new(pid));
        let maps =
            proc::maps_or_read(pid, maps).map_err(|source| HotspotError::Maps { pid, source })?;
        let tables = tables.read(
            &memory,
            &libjvm::table_symbols_mapped(pid, &maps)?,
            libjvm::libjvm_file(pid, &maps),
        )?;
        let archive = ArchiveRegions::of(pid, &maps);
        let layout = HotspotLayout::from_tables(&tables)?;
        let cache = CodeCache::read(&memory, &layout)?;
        let inlining = LineLayout::from_tables(&memory, &tables)
            .and_then(|lines| InliningLayout::from_tables(&tables, lines.unsigned5_excluded))
            .map_err(|err| err.to_string());
        let thread_layout = ThreadLayout::from_tables(&tables).map_err(|err| err.to_string());
        // What the frames' names are read from is read afresh.
        memory.clear();
        Ok(Self {
            memory,
            layout,
            cache,
            inlining,
            thread_layout,
            threads: JavaThreads::default(),
            pid,
            host_ids: proc::in_nested_pid_namespace(pid)
                .map_err(|source| HotspotError::Status { pid, source })?
                .then(|| (HashMap::new(), None)),
            methods: FastMap::default(),
            names_read: NamesRead::default(),
            archive,
            archived,
            code: FastMap::default(),
            compiled: CompiledMethods::default(),
            addresses: FastMap::default(),
            drains: 0,
        })
    }

    /// Every compiled method in the code cache, and whether each is named.
    pub fn census(&self) -> Census {
        let mut names_read = NamesRead::default();
        let compiled: Vec<_> = self
            .cache
            .blobs(&self.memory, &self.layout)
            .into_iter()
            .filter(|b| b.kind == BlobKind::Nmethod)
            .collect();
        let named = compiled
            .iter()
            .filter(|b| method_name(&self.memory, &self.layout, &mut names_read, b.method).is_ok())
            .count();
        Census {
            shape: match self.layout.code_blob_code_begin {
                CodeBegin::Pointer(_) => "JDK 9-22 code blobs",
                CodeBegin::Offset(_) => "JDK 23+ code blobs",
            },
            heaps: self.cache.heaps.len(),
            compiled: compiled.len(),
            named,
            inlining: self.inlining.as_ref().err().cloned(),
        }
    }

    /// The JVM's Java threads as (thread id on this host, `JavaThread*`)
    /// if they changed since the last call. `None` too where the JVM's
    /// tables do not say where its threads are (its samples are walked
    /// without anchors). In a PID namespace of its own, its ids are
    /// translated from /proc, read again for an id not known at most every
    /// [`threads::RECHECK_IDS`] (a thread newer than that is left out
    /// until then).
    pub fn threads_changed(&mut self) -> Result<Option<Vec<(u32, u64)>>, HotspotError> {
        let Ok(layout) = &self.thread_layout else {
            return Ok(None);
        };
        // Read afresh: the list changes between drains.
        let Some(threads) = self.threads.changed(self.memory.uncached(), layout)? else {
            return Ok(None);
        };
        let Some((host_ids, read)) = &mut self.host_ids else {
            return Ok(Some(threads));
        };
        let due = read.is_none_or(|read| read.elapsed() >= threads::RECHECK_IDS);
        if due && threads.iter().any(|(id, _)| !host_ids.contains_key(id)) {
            // `host_ids` is kept only for a JVM in a nested namespace.
            *host_ids = proc::namespace_threads_known(self.pid, true).unwrap_or_default();
            *read = Some(Instant::now());
        }
        let on_host: Vec<(u32, u64)> = threads
            .iter()
            .filter_map(|(id, thread)| Some((*host_ids.get(id)?, *thread)))
            .collect();
        if on_host.len() < threads.len() {
            // Those left out are tried again next time.
            self.threads.read_again();
        }
        Ok(Some(on_host))
    }

    /// Why the JVM's threads cannot be told to the walker, if they cannot.
    pub fn threads_unknown(&self) -> Option<&str> {
        self.thread_layout.as_ref().err().map(String::as_str)
    }

    /// What the kernel's walker needs, checked for what it relies on.
    pub fn proc_info(&self) -> Result<HotspotProcInfo, HotspotError> {
        let code_low = self.memory.read_u64(self.layout.code_cache_low)?;
        let code_high = self.memory.read_u64(self.layout.code_cache_high)?;
        if self.cache.heaps.len() > HOTSPOT_MAX_HEAPS {
            return Err(HotspotError::Garbage(format!(
                "{} code heaps",
                self.cache.heaps.len()
            )));
        }
        let mut info = HotspotProcInfo {
            code_low,
            code_high,
            heap_count: self.cache.heaps.len() as u32,
            log2_segment_size: self.cache.heaps[0].log2_segment_size,
            heap_block_size: small(self.layout.heap_block_size)?,
            blob_name: small(self.layout.code_blob_name)?,
            blob_frame_size: small(self.layout.code_blob_frame_size)?,
            nmethod_compile_id: small(self.layout.nmethod_compile_id)?,
            ..HotspotProcInfo::default()
        };
        if let Ok(threads) = &self.thread_layout {
            // Offsets into a `JavaThread`: its anchor's fields, its stack's.
            let in_thread = |offset: u64| below(offset, MAX_JAVA_THREAD_OFFSET);
            let anchor = |field: u64| in_thread(threads.anchor.saturating_add(field));
            info.last_java_sp = anchor(threads.last_java_sp)?;
            info.last_java_pc = anchor(threads.last_java_pc)?;
            info.last_java_fp = anchor(threads.last_java_fp)?;
            info.stack_base = in_thread(threads.stack_base)?;
            info.stack_size = in_thread(threads.stack_size)?;
        }
        if let Some((low, high)) = self.interpreter()? {
            if low < code_low || high > code_high || low >= high {
                return Err(HotspotError::Garbage(format!(
                    "the interpreter's code {low:#x}-{high:#x} is outside the code cache"
                )));
            }
            (info.interpreter_low, info.interpreter_high) = (low, high);
        }
        for (slot, heap) in info.heaps.iter_mut().zip(&self.cache.heaps) {
            if heap.log2_segment_size != info.log2_segment_size
                || heap.low < code_low
                || heap.high > code_high
            {
                return Err(HotspotError::Garbage(format!(
                    "code heap {heap:x?} outside the code cache {code_low:#x}-{code_high:#x} \
                     or with its own segment size"
                )));
            }
            *slot = HotspotHeap {
                low: heap.low,
                high: heap.high,
                segmap: heap.segmap,
            };
        }
        Ok(info)
    }

    /// The template interpreter's code range, where the tables say.
    fn interpreter(&self) -> Result<Option<(u64, u64)>, HotspotError> {
        let Some(code) = self.layout.interpreter else {
            return Ok(None);
        };
        let queue = self.memory.read_u64(code.code)?;
        if queue == 0 {
            return Err(HotspotError::NotReady("AbstractInterpreter::_code is NULL"));
        }
        let low = self.memory.read_u64(queue + code.stub_buffer)?;
        let size = self.memory.read_u32(queue + code.buffer_limit)?;
        Ok(Some((low, low + u64::from(size))))
    }

    /// The name of a frame the kernel recorded; `leaf`: the first of its
    /// stack (its pc is where the thread was, not a return address).
    pub fn name(&mut self, frame: &HotspotFrame, leaf: bool) -> RecordedName {
        let methods = match frame.kind {
            hotspot_frame::INTERPRETED => self.interpreted(frame.address),
            hotspot_frame::COMPILED | hotspot_frame::STUB => {
                self.code(frame.address, frame.kind, frame.data, leaf)
            }
            _ => return RecordedName::NotJava,
        };
        methods.map_or(RecordedName::Unknown, RecordedName::Java)
    }

    /// Whether `address` is in one of the JVM's code heaps.
    pub fn in_code_cache(&self, address: u64) -> bool {
        self.cache.heap_of(address).is_some()
    }

    /// The name of a code-cache address of a frame-pointer stack (off-CPU
    /// time's), for which the kernel recorded no frame kind or compile id:
    /// what the blob there holds now (the stack is at most a drain old).
    /// Named as a leaf: a return address less one, as frames are looked
    /// up, finds the `PcDesc` of the call it returns from, the first at
    /// or after it. An address named at an earlier drain keeps its name
    /// while its blob is still there ([`BlobMark::still_there`]): threads
    /// wait at the same places drain after drain, and finding each
    /// address's blob again by the segment map, a byte at a time, was a
    /// tenth of sparkprof's CPU under `--off-cpu` on a Spark host.
    pub fn name_address(&mut self, address: u64) -> RecordedName {
        if let Some(named) = self.addresses.get_mut(&address) {
            let now = named.drain == self.drains
                || named
                    .blob
                    .is_some_and(|blob| blob.still_there(&self.memory, &self.layout));
            if now {
                named.drain = self.drains;
                return named.name.clone();
            }
        }
        let (name, blob) = self.name_address_now(address);
        if self.addresses.len() >= MAX_CACHED {
            self.addresses.clear();
        }
        self.addresses.insert(
            address,
            NamedAddress {
                name: name.clone(),
                blob,
                drain: self.drains,
            },
        );
        name
    }

    /// Reads ahead, in one go, what [`Self::name_address`] reads to find
    /// that the blobs of these addresses named before are still there.
    pub fn prefetch_addresses(&self, addresses: &[u64]) {
        let spans: Vec<(u64, usize)> = addresses
            .iter()
            .filter_map(|address| self.addresses.get(address))
            .filter(|named| named.drain != self.drains)
            .filter_map(|named| Some(named.blob?.span(&self.layout)))
            .collect();
        self.memory.prefetch(spans);
    }

    /// [`Self::name_address`], read from the process, with the blob there.
    fn name_address_now(&mut self, address: u64) -> (RecordedName, Option<BlobMark>) {
        let Some(blob) = self.cache.blob_at(&self.memory, &self.layout, address) else {
            return (RecordedName::Unknown, None);
        };
        let mark = BlobMark::of(&self.memory, &self.layout, &blob);
        let (kind, data) = match blob.kind {
            BlobKind::Nmethod | BlobKind::NativeNmethod => {
                (hotspot_frame::COMPILED, blob.compile_id)
            }
            BlobKind::Stub(_) => (hotspot_frame::STUB, 0),
            BlobKind::Interpreter => {
                let name = RecordedName::Java(interpreted(Arc::from("Interpreter")));
                return (name, mark);
            }
        };
        let name = self.name(
            &HotspotFrame {
                address,
                data,
                kind,
            },
            true,
        );
        (name, mark)
    }

    /// Reads, a level at a time for all of them, what naming these frames
    /// (`leaf`: the first of its stack) will read that is not named yet:
    /// see [`CachedMemory::prefetch_rounds`]. A Spark executor's first
    /// minute brings thousands of new methods, and naming them one by one
    /// made a system call for every block of every dependent read.
    pub fn prefetch<'a>(&mut self, frames: impl IntoIterator<Item = (&'a HotspotFrame, bool)>) {
        let mut pending: Vec<(u64, u32, u32, bool)> = frames
            .into_iter()
            .filter(|&(frame, leaf)| !self.is_named(frame, leaf))
            .map(|(frame, leaf)| (frame.address, frame.kind, frame.data, leaf))
            .collect();
        pending.sort_unstable();
        pending.dedup();
        if pending.is_empty() {
            return;
        }
        let Self {
            memory,
            layout,
            cache,
            inlining,
            methods,
            names_read,
            compiled,
            archive,
            archived,
            ..
        } = self;
        let mut archived = archived.lock().unwrap_or_else(PoisonError::into_inner);
        let mut name = |memory: &HeldOnly<'_>, method: u64| {
            if methods.contains_key(&method) {
                return;
            }
            // A round that lacked none of its blocks read the name whole,
            // from the very blocks [`Self::method`] would read: kept, so
            // that neither a later round nor the naming walks it again
            // (walking each new method twice was a tenth of sparkprof's
            // CPU on a Spark host). A partial read is thrown away.
            if let Some(name) =
                read_method_name(memory, layout, names_read, archive, &mut archived, method)
                && methods.len() < MAX_CACHED
            {
                methods.insert(method, Some(interpreted(name)));
            }
        };
        memory.prefetch_rounds(pending, |memory, &(pc, kind, compile_id, leaf)| {
            if kind == hotspot_frame::INTERPRETED {
                return name(memory, pc);
            }
            if compiled.at(pc, compile_id).is_none() {
                let misses = memory.misses();
                let Some((blob, end)) = cache.blob_and_end_at(memory, layout, pc) else {
                    return;
                };
                let is_compiled = matches!(blob.kind, BlobKind::Nmethod | BlobKind::NativeNmethod);
                if !is_compiled || blob.compile_id != compile_id {
                    return;
                }
                let debug = inlining
                    .as_ref()
                    .ok()
                    .and_then(|inlining| inlining.debug_info(memory, blob.address));
                if memory.misses() != misses {
                    // Its debug info is not all held yet; its own method's
                    // name is read meanwhile.
                    return name(memory, blob.method);
                }
                // Read whole, from the very blocks the naming would read:
                // kept, so that neither a later round nor the naming reads
                // the blob and its debug info again.
                compiled.keep(blob, end, debug);
            }
            let Some(code) = compiled.at(pc, compile_id) else {
                return;
            };
            let (method, debug, code_begin, chains) = (
                code.blob.method,
                code.debug.as_ref(),
                code.blob.code_begin,
                &code.chains,
            );
            let decode = debug
                .and_then(|debug| debug.decode_offset(pc.wrapping_sub(code_begin) as i64, leaf));
            if decode.is_some_and(|decode| chains.contains_key(&decode)) {
                return;
            }
            name(memory, method);
            if let (Some(decode), Some(debug), Ok(inlining)) = (decode, debug, &*inlining) {
                for method in inlining
                    .scope_methods(memory, debug, decode)
                    .unwrap_or_default()
                {
                    name(memory, method);
                }
            }
        });
    }

    /// Whether this frame's name is known without reading the JVM (as
    /// [`Self::name`] looks it up).
    fn is_named(&self, frame: &HotspotFrame, leaf: bool) -> bool {
        match frame.kind {
            hotspot_frame::INTERPRETED => self.methods.contains_key(&frame.address),
            hotspot_frame::COMPILED | hotspot_frame::STUB => {
                let wanted = blob_id(frame.kind, frame.data);
                self.code
                    .get(&(frame.address, leaf))
                    .is_some_and(|(id, _)| *id == wanted)
            }
            _ => true,
        }
    }

    fn method(&mut self, method: u64) -> Option<Arc<str>> {
        Some(self.interpreted(method)?[0].name.clone())
    }

    /// The methods of an interpreted frame of `method`.
    fn interpreted(&mut self, method: u64) -> Option<Arc<[JavaMethod]>> {
        if let Some(methods) = self.methods.get(&method) {
            return methods.clone();
        }
        if self.methods.len() >= MAX_CACHED {
            self.methods.clear();
            self.names_read.clear();
        }
        let name = read_method_name(
            &self.memory,
            &self.layout,
            &mut self.names_read,
            &self.archive,
            &mut self.archived.lock().unwrap_or_else(PoisonError::into_inner),
            method,
        )
        .map(interpreted);
        self.methods.insert(method, name.clone());
        name
    }

    fn code(
        &mut self,
        pc: u64,
        kind: u32,
        compile_id: u32,
        leaf: bool,
    ) -> Option<Arc<[JavaMethod]>> {
        let wanted = blob_id(kind, compile_id);
        if let Some((id, methods)) = self.code.get(&(pc, leaf))
            && *id == wanted
        {
            return Some(methods.clone());
        }
        if self.code.len() >= MAX_CACHED {
            self.code.clear();
        }
        if kind == hotspot_frame::COMPILED
            && let Some(address) = self
                .compiled
                .at(pc, compile_id)
                .map(|code| code.blob.address)
        {
            let methods = self.name_compiled(address, pc, leaf)?;
            self.code.insert((pc, leaf), (compile_id, methods.clone()));
            return Some(methods);
        }
        let (blob, end) = self.cache.blob_and_end_at(&self.memory, &self.layout, pc)?;
        let methods: Arc<[JavaMethod]> = match blob.kind {
            BlobKind::Nmethod | BlobKind::NativeNmethod => {
                if blob.compile_id != compile_id {
                    // Freed and reused since it was sampled.
                    return None;
                }
                let address = self.keep_compiled(blob.clone(), end);
                self.name_compiled(address, pc, leaf)?
            }
            BlobKind::Stub(name) => Arc::from([JavaMethod {
                name: Arc::from(name),
                inlined: false,
            }]),
            BlobKind::Interpreter => return None,
        };
        self.code
            .insert((pc, leaf), (blob.compile_id, methods.clone()));
        (blob.compile_id == wanted).then_some(methods)
    }

    /// Keeps a compiled method's blob and debug info; returns its address.
    fn keep_compiled(&mut self, blob: CodeBlob, end: u64) -> u64 {
        let debug = self
            .inlining
            .as_ref()
            .ok()
            .and_then(|inlining| inlining.debug_info(&self.memory, blob.address));
        self.compiled.keep(blob, end, debug)
    }

    /// The methods of a compiled frame at `pc` of the kept method at
    /// `address`, root first: its own, then those inlined into it down to
    /// the one at `pc` (where the debug info says).
    fn name_compiled(&mut self, address: u64, pc: u64, leaf: bool) -> Option<Arc<[JavaMethod]>> {
        let code = self.compiled.by_address.get(&address)?;
        let method = code.blob.method;
        let decode = code.debug.as_ref().and_then(|debug| {
            debug.decode_offset(pc.wrapping_sub(code.blob.code_begin) as i64, leaf)
        });
        if let Some(decode) = decode
            && let Some(methods) = code.chains.get(&decode)
        {
            return Some(methods.clone());
        }
        let inlined = match (decode, &code.debug, &self.inlining) {
            (Some(decode), Some(debug), Ok(inlining)) => {
                inlining.scope_methods(&self.memory, debug, decode)
            }
            _ => None,
        };
        let own = self.method(method)?;
        let methods: Arc<[JavaMethod]> = match inlined.filter(|chain| chain.last() == Some(&method))
        {
            None => Arc::from([JavaMethod {
                name: own,
                inlined: false,
            }]),
            Some(mut chain) => {
                chain.reverse();
                let mut methods = Vec::with_capacity(chain.len());
                for (depth, method) in chain.into_iter().enumerate() {
                    methods.push(JavaMethod {
                        name: self
                            .method(method)
                            .unwrap_or_else(|| Arc::from("[unknown]")),
                        inlined: depth > 0,
                    });
                }
                methods.into()
            }
        };
        if let Some(decode) = decode
            && let Some(code) = self.compiled.by_address.get_mut(&address)
        {
            code.chains.insert(decode, methods.clone());
        }
        Some(methods)
    }
}

/// The compile id of the blob a frame's cached name was read from: the
/// kernel's for compiled code, 0 for a stub.
fn blob_id(kind: u32, compile_id: u32) -> u32 {
    if kind == hotspot_frame::COMPILED {
        compile_id
    } else {
        0
    }
}

/// An offset the kernel keeps in 32 bits, into a struct smaller than a page.
fn small(offset: u64) -> Result<u32, HotspotError> {
    below(offset, 4096)
}

/// An offset the kernel keeps in 32 bits, below `bound` (any real
/// HotSpot's are).
fn below(offset: u64, bound: u32) -> Result<u32, HotspotError> {
    u32::try_from(offset)
        .ok()
        .filter(|&o| o < bound)
        .ok_or_else(|| HotspotError::Garbage(format!("offset {offset}")))
}
