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
//! [`jvm`] (HotSpot's JIT frames) and [`python`] (CPython's frames). The
//! JVM's thread names still live in the stages (`collect::renames`,
//! `enrich::thread_dumps`).

pub mod jvm;
pub mod python;

use std::sync::Arc;

use crate::{
    collect::{Collector, RawPythonStack},
    enrich::{EnrichedSample, ProcessInfo},
    symbolize::{Frame, RuntimeFrames},
};

/// A runtime's hold on the processes that run it.
pub trait Runtime {
    /// A process seen for the first time: take it on if it runs this
    /// runtime (and tell the collector what its kernel side needs).
    fn discovered(&mut self, process: &ProcessInfo, collector: &mut Collector);

    /// Once per drain, before its samples are named: bring the kernel's
    /// per-process state up to date (threads come and go).
    fn synchronize(&mut self, collector: &mut Collector);

    /// The process exited (its last samples are named): let go of it.
    fn exited(&mut self, process: &ProcessInfo);
}

/// Every runtime sparkprof knows, driven alike.
pub struct Runtimes {
    pub jvm: jvm::JvmRuntime,
    pub python: python::PythonRuntime,
}

impl Runtimes {
    pub fn new(jit: jvm::JitOptions) -> Self {
        Self {
            jvm: jvm::JvmRuntime::new(jit),
            python: python::PythonRuntime::default(),
        }
    }

    fn all(&mut self) -> [&mut dyn Runtime; 2] {
        [&mut self.jvm, &mut self.python]
    }
}

impl Runtime for Runtimes {
    fn discovered(&mut self, process: &ProcessInfo, collector: &mut Collector) {
        for runtime in self.all() {
            runtime.discovered(process, collector);
        }
    }

    fn synchronize(&mut self, collector: &mut Collector) {
        for runtime in self.all() {
            runtime.synchronize(collector);
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

    fn claimed(&mut self, process: &ProcessInfo, addr: u64, count: u64) -> Option<Frame> {
        self.python
            .claimed(process, addr, count)
            .or_else(|| self.jvm.claimed(process, addr, count))
    }

    fn interpreter_frames(
        &mut self,
        pid: u32,
        stack: &RawPythonStack,
        native: Vec<Frame>,
    ) -> Vec<Frame> {
        self.python.interpreter_frames(pid, stack, native)
    }
}
