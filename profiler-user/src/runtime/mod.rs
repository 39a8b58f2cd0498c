//! Language runtimes, one folder each, owning a process's whole life in
//! that runtime: recognising it, telling the collector what the kernel
//! needs to walk its frames, keeping that current every drain, naming its
//! frames, and letting go of everything when it exits.
//!
//! `record` drives every runtime alike through [`Runtime`]; the symbolize
//! stage asks them to name frames through [`crate::symbolize::RuntimeFrames`].
//! A runtime may read and write the collector's per-process kernel state
//! and is read by the symbolizer; no pipeline stage depends on it.
//!
//! [`jvm`] (HotSpot: JIT frames, full thread names) and [`python`]
//! (CPython's frames).

pub mod jvm;
pub mod python;

use std::sync::Arc;

use profiler_common::HotspotFrame;
use serde::Serialize;

use crate::{
    collect::{Collector, Drain, RawPythonStack},
    enrich::{EnrichedSample, ProcessInfo, name_history::ThreadDump},
    symbolize::{Frame, RuntimeFrames},
    sys::proc::Mapping,
};

/// A runtime's hold on the processes that run it, driven by `record` in
/// this order: [`prepare`](Self::prepare) once, then per process
/// [`discovered`](Self::discovered) and, per drain,
/// [`synchronize`](Self::synchronize) and [`thread_names`](Self::thread_names)
/// before its samples are named, [`exited`](Self::exited) after; at the end
/// [`stopping`](Self::stopping) before the last drain and
/// [`stopped`](Self::stopped) after it.
pub trait Runtime {
    /// Before any process is discovered: what needs no process (e.g. a
    /// uprobe on an installed runtime's library, so that processes started
    /// later are seen from their first instruction).
    fn prepare(&mut self, _collector: &mut Collector) {}

    /// A process seen for the first time: take it on if it runs this
    /// runtime (and tell the collector what its kernel side needs).
    /// `maps`: its memory maps as read to identify it, if they were.
    fn discovered(
        &mut self,
        process: &ProcessInfo,
        maps: Option<&[Mapping]>,
        collector: &mut Collector,
    );

    /// Once per drain, before its samples are named: bring the kernel's
    /// per-process state up to date (threads come and go).
    fn synchronize(&mut self, collector: &mut Collector);

    /// Full thread names read from the processes themselves (the kernel
    /// keeps 15 bytes), due for this drain; `None`: before sampling starts,
    /// for every process held.
    fn thread_names(&mut self, _drain: Option<&Drain>, _collector: &Collector) -> Vec<ThreadDump> {
        Vec::new()
    }

    /// The drains that follow are the recording's last.
    fn stopping(&mut self) {}

    /// The recording ended: clean up what the runtime left on the host.
    fn stopped(&mut self) {}

    /// The process exited (its last samples are named): let go of it.
    fn exited(&mut self, process: &ProcessInfo);
}

/// What the runtimes report in index.json (its `jit`, `threads` and
/// `java_walks`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct RuntimeStats {
    pub jit: jvm::JitStats,
    pub threads: jvm::thread_names::ThreadStats,
    /// Per JVM (by pid): whether its Java frames were walked from HotSpot's
    /// own structures, and if not why.
    pub java_walks: std::collections::BTreeMap<u32, jvm::JavaWalk>,
}

/// Every runtime sparkprof knows, driven alike.
pub struct Runtimes {
    pub jvm: jvm::JvmRuntime,
    pub python: python::PythonRuntime,
}

impl Runtimes {
    /// What the runtimes keep between drains, counted.
    pub fn held(&self, held: &mut crate::sys::held::Held) {
        self.jvm.held(held);
        self.python.held(held);
    }

    pub fn new(jvm: jvm::JvmOptions) -> Self {
        Self {
            jvm: jvm::JvmRuntime::new(jvm),
            python: python::PythonRuntime::default(),
        }
    }

    fn all(&mut self) -> [&mut dyn Runtime; 2] {
        [&mut self.jvm, &mut self.python]
    }

    /// Statistics so far.
    pub fn stats(&self) -> RuntimeStats {
        RuntimeStats {
            jit: self.jvm.jit_stats(),
            threads: self.jvm.thread_stats(),
            java_walks: self.jvm.java_walks(),
        }
    }
}

impl Runtime for Runtimes {
    fn prepare(&mut self, collector: &mut Collector) {
        for runtime in self.all() {
            runtime.prepare(collector);
        }
    }

    fn discovered(
        &mut self,
        process: &ProcessInfo,
        maps: Option<&[Mapping]>,
        collector: &mut Collector,
    ) {
        for runtime in self.all() {
            runtime.discovered(process, maps, collector);
        }
    }

    fn synchronize(&mut self, collector: &mut Collector) {
        for runtime in self.all() {
            runtime.synchronize(collector);
        }
    }

    fn thread_names(&mut self, drain: Option<&Drain>, collector: &Collector) -> Vec<ThreadDump> {
        self.all()
            .into_iter()
            .flat_map(|runtime| runtime.thread_names(drain, collector))
            .collect()
    }

    fn stopping(&mut self) {
        for runtime in self.all() {
            runtime.stopping();
        }
    }

    fn stopped(&mut self) {
        for runtime in self.all() {
            runtime.stopped();
        }
    }

    fn exited(&mut self, process: &ProcessInfo) {
        for runtime in self.all() {
            runtime.exited(process);
        }
    }
}

impl RuntimeFrames for Runtimes {
    fn new_drain(&mut self, samples: &[EnrichedSample]) {
        self.jvm.new_drain(samples);
        self.python.new_drain(samples);
    }

    fn claim(&mut self, process: &Arc<ProcessInfo>, addrs: Vec<u64>) -> Vec<u64> {
        let rest = self.jvm.claim(process, addrs);
        self.python.claim(process, rest)
    }

    fn resolve(&mut self) {
        self.jvm.resolve();
        self.python.resolve();
    }

    fn claimed(
        &mut self,
        process: &ProcessInfo,
        addr: u64,
        count: u64,
        frames: &mut Vec<Frame>,
    ) -> bool {
        self.python.claimed(process, addr, count, frames)
            || self.jvm.claimed(process, addr, count, frames)
    }

    fn interpreter_frames(
        &mut self,
        pid: u32,
        stack: &RawPythonStack,
        native: Vec<Frame>,
    ) -> Vec<Frame> {
        self.python.interpreter_frames(pid, stack, native)
    }

    fn recorded_frames(
        &mut self,
        process: &ProcessInfo,
        frame: &HotspotFrame,
        leaf: bool,
        count: u64,
        frames: &mut Vec<Frame>,
    ) -> bool {
        self.jvm
            .recorded_frames(process, frame, leaf, count, frames)
    }
}
