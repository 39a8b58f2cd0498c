//! HotSpot JVMs followed through their lives: when one is first seen, its
//! threads' renames are watched ([`super::thread_names`]); each drain, the
//! thread dumps due are taken, and the sampled addresses in a JVM's code
//! cache (anonymous executable memory) are claimed from the native
//! symbolizer and named from the JVM's perf map, asked for in parallel where
//! it is stale; a JVM's state goes when it exits.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use profiler_common::HotspotFrame;
use serde::Serialize;
use tracing::{debug, info};

use super::{
    JitBatch, JitStats, JitSymbolizer, JvmOptions,
    hotspot::{
        HotspotError,
        archive::SharedArchivedNames,
        process::{HotspotProcess, JavaMethod, RecordedName},
        vmstructs::SharedVmStructs,
    },
    thread_names::{JvmThreadNames, ThreadStats, dumps::DumpPolicy},
};
use crate::{
    FastMap, FastSet,
    collect::{Collector, Drain, RawPythonStack},
    enrich::{EnrichedSample, ProcessInfo, name_history::ThreadDump},
    runtime::Runtime,
    symbolize::{Frame, FrameKind, RuntimeFrames, proc_maps::ProcMaps},
    sys::proc::Mapping,
};

/// Thread-name prefixes (comm) of HotSpot's JIT compiler threads.
const COMPILER_THREADS: [&str; 2] = ["C2 CompilerThre", "C1 CompilerThre"];

/// How long a JVM may take to initialise its code cache before its Java
/// frames are left to frame pointers.
const HOTSPOT_READY_WITHIN: Duration = Duration::from_secs(60);

/// How the Java frames of one JVM are walked, as index.json reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JavaWalk {
    /// `true`: by sparkprof's kernel walker from HotSpot's own structures
    /// (every Java frame, no `-XX:+PreserveFramePointer` needed); `false`:
    /// by frame pointers only, compiled frames named from the perf map.
    pub walked: bool,
    /// Why not, when not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A JVM's Java frames: walked, not yet (its code cache is not ready),
/// or left to frame pointers, and why.
enum Walker {
    Pending { since: Instant, last: String },
    Walked(Box<HotspotProcess>),
    FramePointers(String),
}

/// Every JVM whose threads and compiled frames sparkprof names.
pub struct JvmRuntime {
    names: JvmThreadNames,
    jit: JitSymbolizer,
    /// Per JVM (pid), how its Java frames are walked.
    walkers: BTreeMap<u32, Walker>,
    /// Every JVM seen, how its Java frames were walked (for index.json);
    /// an exited JVM's entry stays until [`Self::forget_exited_walks`].
    walks: BTreeMap<u32, JavaWalk>,
    /// JVMs that exited since then.
    exited_walks: Vec<u32>,
    /// This drain's addresses in JVM code caches, named from perf maps.
    jit_addrs: FastSet<(u32, u64)>,
    /// This drain's addresses in walked JVMs' code caches, named from
    /// HotSpot's own structures.
    walked_addrs: FastSet<(u32, u64)>,
    /// This drain's batches, one per JVM, named in [`RuntimeFrames::resolve`].
    batches: Vec<JitBatch>,
    /// JVMs whose compiler threads were sampled in this drain.
    compiling: HashSet<u32>,
    /// Walk Java frames from HotSpot's structures (else `--no-java-walk`).
    walk: bool,
    final_pass: bool,
    /// Names of the methods of CDS archives, for every JVM (each names an
    /// archived method only if no JVM did).
    archived: SharedArchivedNames,
    /// The VMStructs of each libjvm.so, for every JVM of it.
    tables: SharedVmStructs,
}

impl JvmRuntime {
    pub fn held(&self, held: &mut crate::sys::held::Held) {
        held.add("jvm.walkers", self.walkers.len());
        held.add("jvm.vmstructs_files", self.tables.files());
        held.add("jvm.walks", self.walks.len());
        held.add(
            "jvm.archived_names",
            self.archived
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .len(),
        );
        for walker in self.walkers.values() {
            if let Walker::Walked(process) = walker {
                process.held(held);
            }
        }
        self.jit.held(held);
        self.names.held(held);
    }

    pub fn new(options: JvmOptions) -> Self {
        let dumps = DumpPolicy {
            attach: options.jit.attach,
            ..DumpPolicy::default()
        };
        Self {
            names: JvmThreadNames::new(options.rename_uprobe, dumps),
            jit: JitSymbolizer::new(options.jit),
            walkers: BTreeMap::new(),
            walk: options.walk,
            walks: BTreeMap::new(),
            exited_walks: Vec::new(),
            jit_addrs: FastSet::default(),
            walked_addrs: FastSet::default(),
            batches: Vec::new(),
            compiling: HashSet::new(),
            final_pass: false,
            archived: SharedArchivedNames::default(),
            tables: SharedVmStructs::default(),
        }
    }

    /// JIT statistics so far.
    pub fn jit_stats(&self) -> JitStats {
        self.jit.stats()
    }

    /// Thread-naming statistics so far.
    pub fn thread_stats(&self) -> ThreadStats {
        self.names.stats()
    }

    /// The perf maps sparkprof caused JVMs to write (see
    /// [`JitSymbolizer::created_maps`]).
    pub fn created_perf_maps(&self) -> Vec<std::path::PathBuf> {
        self.jit.created_maps()
    }

    /// How each JVM seen had its Java frames walked, by pid.
    pub fn java_walks(&self) -> BTreeMap<u32, JavaWalk> {
        self.walks.clone()
    }

    /// Drops the reports of JVMs that exited (a daemon's window has listed
    /// them): what is kept stays as large as the JVMs running.
    pub fn forget_exited_walks(&mut self) {
        for pid in self.exited_walks.drain(..) {
            self.walks.remove(&pid);
        }
    }

    /// Reads what the kernel's walker needs from JVM `pid` and hands it
    /// over; a JVM not initialised yet is tried again next drain.
    fn try_walk(&mut self, pid: u32, maps: Option<&[Mapping]>, collector: &mut Collector) {
        let walker = if self.walk {
            self.read_walker(pid, maps, collector)
        } else {
            Walker::FramePointers("--no-java-walk".into())
        };
        self.walks.insert(
            pid,
            match &walker {
                Walker::Walked(_) => JavaWalk {
                    walked: true,
                    reason: None,
                },
                Walker::Pending { last, .. } | Walker::FramePointers(last) => JavaWalk {
                    walked: false,
                    reason: Some(last.clone()),
                },
            },
        );
        self.walkers.insert(pid, walker);
    }

    /// How JVM `pid`'s frames can be walked now: its structures read and
    /// handed to the kernel, not ready yet (tried again until
    /// [`HOTSPOT_READY_WITHIN`]), or frame pointers only, and why.
    fn read_walker(&self, pid: u32, maps: Option<&[Mapping]>, collector: &mut Collector) -> Walker {
        let attempt = HotspotProcess::read(pid, maps, self.archived.clone(), &self.tables)
            .and_then(|process| Ok((process.proc_info()?, process)))
            .map_err(|err| (matches!(err, HotspotError::NotReady(_)), err.to_string()))
            .and_then(|(info, process)| {
                collector
                    .watch_hotspot(pid, &info)
                    .map(|()| process)
                    .map_err(|err| (false, err.to_string()))
            });
        let since = match self.walkers.get(&pid) {
            Some(Walker::Pending { since, .. }) => *since,
            _ => Instant::now(),
        };
        match attempt {
            Ok(mut process) => {
                info!(pid, "Java frames walked from HotSpot's own structures");
                if let Some(why) = process.threads_unknown() {
                    info!(
                        pid,
                        "Java frames walked without the threads' anchors: {why}"
                    );
                }
                sync_threads(pid, &mut process, collector);
                Walker::Walked(Box::new(process))
            }
            Err((true, last)) if since.elapsed() < HOTSPOT_READY_WITHIN => {
                debug!(pid, "HotSpot structures not ready: {last}");
                Walker::Pending { since, last }
            }
            Err((_, reason)) => {
                info!(pid, "Java frames by frame pointers only: {reason}");
                Walker::FramePointers(reason)
            }
        }
    }
}

/// Tells the kernel's walker JVM `pid`'s threads (host tid, `JavaThread*`)
/// if they changed since the last time.
fn sync_threads(pid: u32, process: &mut HotspotProcess, collector: &mut Collector) {
    match process.threads_changed() {
        Ok(Some(threads)) => collector.set_hotspot_threads(pid, &threads),
        Ok(None) => {}
        Err(err) => debug!(pid, "JVM threads not read: {err}"),
    }
}

impl Runtime for JvmRuntime {
    fn prepare(&mut self, collector: &mut Collector) {
        self.names.watch_installed_jdks(collector);
    }

    /// A JVM's renames are watched, and its Java frames walked by the
    /// kernel once its code cache is there.
    fn discovered(
        &mut self,
        process: &ProcessInfo,
        maps: Option<&[Mapping]>,
        collector: &mut Collector,
    ) {
        if let Some(libjvm) = process.runtime.libjvm() {
            self.names.watch(process.pid, libjvm, collector);
            self.try_walk(process.pid, maps, collector);
        }
    }

    /// JVMs still initialising are tried again.
    fn synchronize(&mut self, collector: &mut Collector) {
        let pending: Vec<u32> = self
            .walkers
            .iter()
            .filter(|(_, walker)| matches!(walker, Walker::Pending { .. }))
            .map(|(&pid, _)| pid)
            .collect();
        for pid in pending {
            self.try_walk(pid, None, collector);
        }
        // Java threads come and go: where a JVM published a new list of
        // them, the walker learns which `JavaThread` each thread is (a
        // thread younger than that is walked without its anchor).
        for (&pid, walker) in &mut self.walkers {
            if let Walker::Walked(process) = walker {
                sync_threads(pid, process, collector);
            }
        }
    }

    fn thread_names(&mut self, drain: Option<&Drain>, collector: &Collector) -> Vec<ThreadDump> {
        self.names.dumps(drain, collector)
    }

    /// JVM maps are refreshed once more for the last drains.
    fn stopping(&mut self) {
        self.final_pass = true;
    }

    /// Cleans up the perf maps sparkprof had JVMs write.
    fn stopped(&mut self) {
        self.jit.finish();
    }

    fn exited(&mut self, process: &ProcessInfo) {
        if self.walkers.remove(&process.pid).is_some() {
            self.exited_walks.push(process.pid);
        }
        self.names.forget(process.pid);
        self.jit.evict(process);
    }
}

impl RuntimeFrames for JvmRuntime {
    fn new_drain(&mut self, samples: &[EnrichedSample]) {
        for walker in self.walkers.values_mut() {
            if let Walker::Walked(process) = walker {
                process.new_drain();
            }
        }
        // Each walked JVM's new methods read together, not one by one.
        let mut frames: FastMap<u32, Vec<(&HotspotFrame, bool)>> = FastMap::default();
        for sample in samples {
            if let Some(stack) = &sample.raw.hotspot {
                frames
                    .entry(sample.process.pid)
                    .or_default()
                    .extend(stack.frames.iter().enumerate().map(|(at, f)| (f, at == 0)));
            }
        }
        for (pid, frames) in frames {
            if let Some(Walker::Walked(process)) = self.walkers.get_mut(&pid) {
                process.prefetch(frames);
            }
        }
        self.jit_addrs.clear();
        self.walked_addrs.clear();
        self.batches.clear();
        self.compiling = samples
            .iter()
            .filter(|s| {
                COMPILER_THREADS
                    .iter()
                    .any(|p| s.thread_name.starts_with(p))
            })
            .map(|s| s.process.pid)
            .collect();
    }

    /// A JVM's addresses in anonymous executable memory (its code cache)
    /// are its JIT code; the rest is native.
    fn claim(&mut self, process: &Arc<ProcessInfo>, addrs: Vec<u64>) -> Vec<u64> {
        if !process.runtime.is_jvm() {
            return addrs;
        }
        // A walked JVM names every address in its code cache itself (those
        // of frame-pointer stacks, off-CPU time's, included): no perf map,
        // and no read of its long /proc/PID/maps.
        if let Some(Walker::Walked(walked)) = self.walkers.get(&process.pid) {
            let (code, native): (Vec<u64>, Vec<u64>) = addrs
                .into_iter()
                .partition(|&addr| walked.in_code_cache(addr));
            walked.prefetch_addresses(&code);
            self.walked_addrs
                .extend(code.into_iter().map(|addr| (process.pid, addr)));
            return native;
        }
        let Ok(maps) = ProcMaps::read(process.pid) else {
            return addrs;
        };
        let (jit, native): (Vec<u64>, Vec<u64>) = addrs
            .into_iter()
            .partition(|&addr| maps.find(addr).is_some_and(|m| m.is_anonymous()));
        self.jit_addrs
            .extend(jit.iter().map(|&addr| (process.pid, addr)));
        self.batches.push(JitBatch {
            process: process.clone(),
            addrs: jit,
            compiling: self.compiling.contains(&process.pid),
        });
        native
    }

    fn resolve(&mut self) {
        self.jit.resolve(&self.batches, self.final_pass);
    }

    fn claimed(
        &mut self,
        process: &ProcessInfo,
        addr: u64,
        count: u64,
        frames: &mut Vec<Frame>,
    ) -> bool {
        if self.walked_addrs.contains(&(process.pid, addr)) {
            let Some(Walker::Walked(walked)) = self.walkers.get_mut(&process.pid) else {
                return false;
            };
            let methods = match walked.name_address(addr) {
                RecordedName::NotJava => None,
                RecordedName::Java(methods) => Some(methods),
                RecordedName::Unknown => None,
            };
            if count > 0 {
                self.jit.count_walked_frame(methods.is_some(), count);
            }
            java_frames(methods.as_deref(), frames);
            return true;
        }
        if !self.jit_addrs.contains(&(process.pid, addr)) {
            return false;
        }
        let name = self.jit.name(process, addr);
        if count > 0 {
            self.jit.count_frame(name.is_some(), count);
        }
        frames.push(Frame {
            name: name.unwrap_or_else(|| "[unknown]".into()),
            kind: FrameKind::Jit,
        });
        true
    }

    fn interpreter_frames(&mut self, _: u32, _: &RawPythonStack, native: Vec<Frame>) -> Vec<Frame> {
        native
    }

    /// A walked JVM's frame: the Java method and those inlined into it,
    /// root first, or the VM stub; `None` for a native frame.
    fn recorded_frames(
        &mut self,
        process: &ProcessInfo,
        frame: &HotspotFrame,
        leaf: bool,
        count: u64,
        frames: &mut Vec<Frame>,
    ) -> bool {
        let Some(Walker::Walked(walked)) = self.walkers.get_mut(&process.pid) else {
            return false;
        };
        let methods = match walked.name(frame, leaf) {
            RecordedName::NotJava => return false,
            RecordedName::Java(methods) => Some(methods),
            RecordedName::Unknown => None,
        };
        if count > 0 {
            self.jit.count_walked_frame(methods.is_some(), count);
        }
        java_frames(methods.as_deref(), frames);
        true
    }
}

/// Appends the frames of a Java frame's methods, root first; `[unknown]`
/// when they could not be read.
fn java_frames(methods: Option<&[JavaMethod]>, frames: &mut Vec<Frame>) {
    match methods {
        Some(methods) => frames.extend(methods.iter().map(|method| Frame {
            name: method.name.clone(),
            kind: if method.inlined {
                FrameKind::Inlined
            } else {
                FrameKind::Jit
            },
        })),
        None => frames.push(Frame::new("[unknown]", FrameKind::Jit)),
    }
}
