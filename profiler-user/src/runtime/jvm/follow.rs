//! HotSpot JVMs followed through their lives: when one is first seen, its
//! threads' renames are watched ([`super::thread_names`]); each drain, the
//! thread dumps due are taken, and the sampled addresses in a JVM's code
//! cache (anonymous executable memory) are claimed from the native
//! symbolizer and named from the JVM's perf map, asked for in parallel where
//! it is stale; a JVM's state goes when it exits.

use std::collections::HashSet;
use std::sync::Arc;

use super::{
    JitBatch, JitStats, JitSymbolizer, JvmOptions,
    thread_names::{JvmThreadNames, ThreadStats, dumps::DumpPolicy},
};
use crate::{
    collect::{Collector, Drain, RawPythonStack},
    enrich::{EnrichedSample, ProcessInfo, name_history::ThreadDump},
    runtime::Runtime,
    symbolize::{Frame, FrameKind, RuntimeFrames, proc_maps::ProcMaps},
};

/// Thread-name prefixes (comm) of HotSpot's JIT compiler threads.
const COMPILER_THREADS: [&str; 2] = ["C2 CompilerThre", "C1 CompilerThre"];

/// Every JVM whose threads and compiled frames sparkprof names.
pub struct JvmRuntime {
    names: JvmThreadNames,
    jit: JitSymbolizer,
    /// This drain's addresses in JVM code caches.
    jit_addrs: HashSet<(u32, u64)>,
    /// This drain's batches, one per JVM, named in [`RuntimeFrames::resolve`].
    batches: Vec<JitBatch>,
    /// JVMs whose compiler threads were sampled in this drain.
    compiling: HashSet<u32>,
    final_pass: bool,
}

impl JvmRuntime {
    pub fn new(options: JvmOptions) -> Self {
        let dumps = DumpPolicy {
            attach: options.jit.attach,
            ..DumpPolicy::default()
        };
        Self {
            names: JvmThreadNames::new(options.rename_uprobe, dumps),
            jit: JitSymbolizer::new(options.jit),
            jit_addrs: HashSet::new(),
            batches: Vec::new(),
            compiling: HashSet::new(),
            final_pass: false,
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
}

impl Runtime for JvmRuntime {
    fn prepare(&mut self, collector: &mut Collector) {
        self.names.watch_installed_jdks(collector);
    }

    /// A JVM's renames are watched; its frames need nothing of the kernel.
    fn discovered(&mut self, process: &ProcessInfo, collector: &mut Collector) {
        if let Some(libjvm) = process.runtime.libjvm() {
            self.names.watch(process.pid, libjvm, collector);
        }
    }

    fn synchronize(&mut self, _: &mut Collector) {}

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
        self.names.forget(process.pid);
        self.jit.evict(process);
    }
}

impl RuntimeFrames for JvmRuntime {
    fn new_drain(&mut self, samples: &[EnrichedSample]) {
        self.jit_addrs.clear();
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

    fn claimed(&mut self, process: &ProcessInfo, addr: u64, count: u64) -> Option<Frame> {
        if !self.jit_addrs.contains(&(process.pid, addr)) {
            return None;
        }
        let name = self.jit.name(process, addr);
        if count > 0 {
            self.jit.count_frame(name.is_some(), count);
        }
        Some(Frame {
            name: name.unwrap_or_else(|| "[unknown]".into()),
            kind: FrameKind::Jit,
        })
    }

    fn interpreter_frames(&mut self, _: u32, _: &RawPythonStack, native: Vec<Frame>) -> Vec<Frame> {
        native
    }
}
