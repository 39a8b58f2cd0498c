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
//! Today: [`python`] (CPython's frames). The JVM's parts still live in the
//! stages (`collect::renames`, `enrich::thread_dumps`, `symbolize::jvm`).

pub mod python;

use crate::{collect::Collector, enrich::ProcessInfo};

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
