//! Stage 3 of the pipeline: **symbolize**.
//!
//! Turns raw instruction pointers into named frames, root first:
//! native user frames through blazesym ([`native`]), kernel frames through
//! kallsyms ([`kernel`]), and address ranges no symbol source covers into
//! `module+0xoffset` or `[unknown]` ([`proc_maps`]), so no frame is ever
//! dropped and counts stay true.
//!
//! Symbolization happens at every drain, while the sampled processes are most
//! likely still alive (their mappings are needed). Names are cached per
//! (process, address) and dropped when enrich reports the process exited.

pub mod kernel;
pub mod native;
pub mod proc_maps;

use std::sync::Arc;

use crate::{
    collect::RawStack,
    enrich::{EnrichedDrain, ProcessInfo},
};

/// Where a frame came from; decides its decoration in the folded output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameKind {
    /// Native user-space code.
    User,
    /// Kernel code (rendered with a `_[k]` suffix).
    Kernel,
    /// Not code: a marker such as `[truncated]` or `[user stack lost]`.
    Marker,
}

/// One named frame.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frame {
    pub name: Arc<str>,
    pub kind: FrameKind,
}

impl Frame {
    fn marker(name: &str) -> Self {
        Self {
            name: name.into(),
            kind: FrameKind::Marker,
        }
    }
}

/// A sample with its stack named, root first.
#[derive(Debug, Clone)]
pub struct SymbolizedSample {
    pub process: Arc<ProcessInfo>,
    pub tid: u32,
    pub thread_name: String,
    pub frames: Vec<Frame>,
    pub count: u64,
}

/// One drain, symbolized.
#[derive(Debug)]
pub struct SymbolizedDrain {
    pub start: std::time::SystemTime,
    pub end: std::time::SystemTime,
    pub samples: Vec<SymbolizedSample>,
}

/// The symbolize stage and its caches.
pub struct Symbolizer {
    native: native::NativeSymbolizer,
    kernel: kernel::KernelSymbolizer,
}

impl Default for Symbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl Symbolizer {
    pub fn new() -> Self {
        Self {
            native: native::NativeSymbolizer::new(),
            kernel: kernel::KernelSymbolizer::new(),
        }
    }

    /// Names every frame of a drain.
    pub fn symbolize(&mut self, drain: EnrichedDrain) -> SymbolizedDrain {
        // Resolve each process's user addresses in one batch, and all kernel
        // addresses in another, before building stacks.
        let mut user_batches: std::collections::HashMap<u32, (Arc<ProcessInfo>, Vec<u64>)> =
            std::collections::HashMap::new();
        let mut kernel_addrs = Vec::new();
        for sample in &drain.samples {
            if let RawStack::Frames { ips, .. } = &sample.raw.user {
                let batch = user_batches
                    .entry(sample.process.pid)
                    .or_insert_with(|| (sample.process.clone(), Vec::new()));
                batch.1.extend(lookup_addresses(ips));
            }
            if let RawStack::Frames { ips, .. } = &sample.raw.kernel {
                kernel_addrs.extend(lookup_addresses(ips));
            }
        }
        for (process, addrs) in user_batches.values() {
            self.native.resolve(process, addrs);
        }
        self.kernel.resolve(&kernel_addrs);

        let samples = drain
            .samples
            .into_iter()
            .map(|sample| {
                let frames = self.frames(&sample.process, &sample.raw.user, &sample.raw.kernel);
                SymbolizedSample {
                    process: sample.process,
                    tid: sample.raw.tid,
                    thread_name: sample.thread_name,
                    frames,
                    count: sample.raw.count,
                }
            })
            .collect();
        // Exited processes' last samples are named; now their caches can go.
        for process in &drain.exited {
            self.native.evict(process);
        }
        SymbolizedDrain {
            start: drain.start,
            end: drain.end,
            samples,
        }
    }

    /// The frames of one sample, root first: a truncation marker if the user
    /// stack was cut, user frames outermost to leaf, then kernel frames.
    fn frames(&self, process: &ProcessInfo, user: &RawStack, kernel: &RawStack) -> Vec<Frame> {
        let mut frames = Vec::new();
        match user {
            RawStack::Frames { ips, truncated } => {
                if *truncated {
                    frames.push(Frame::marker("[truncated]"));
                }
                frames.extend(lookup_addresses(ips).rev().map(|addr| Frame {
                    name: self.native.name(process, addr),
                    kind: FrameKind::User,
                }));
            }
            RawStack::Lost(errno) => frames.push(Frame::marker(&lost_marker("user", *errno))),
            RawStack::Absent => {}
        }
        match kernel {
            RawStack::Frames { ips, truncated } => {
                if *truncated && frames.is_empty() {
                    frames.push(Frame::marker("[truncated]"));
                }
                frames.extend(lookup_addresses(ips).rev().map(|addr| Frame {
                    name: self.kernel.name(addr),
                    kind: FrameKind::Kernel,
                }));
            }
            RawStack::Lost(errno) => frames.push(Frame::marker(&lost_marker("kernel", *errno))),
            RawStack::Absent => {}
        }
        if frames.is_empty() {
            frames.push(Frame::marker("[no stack]"));
        }
        frames
    }
}

fn lost_marker(which: &str, errno: i32) -> String {
    if errno == profiler_common::stack_error::EEXIST {
        format!("[{which} stack lost: stack map collision]")
    } else {
        format!("[{which} stack lost: error {errno}]")
    }
}

/// The addresses to look up for a leaf-first stack: the leaf's own address,
/// and for every caller its return address minus one, which lies inside the
/// call instruction and so inside the calling function even when the call is
/// the function's last instruction.
pub fn lookup_addresses(ips: &[u64]) -> impl DoubleEndedIterator<Item = u64> + '_ {
    ips.iter()
        .enumerate()
        .map(|(i, &ip)| if i == 0 { ip } else { ip.saturating_sub(1) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callers_are_looked_up_inside_the_call() {
        let ips = [0x1000, 0x2005, 0x3000];
        assert_eq!(
            lookup_addresses(&ips).collect::<Vec<_>>(),
            vec![0x1000, 0x2004, 0x2fff]
        );
    }
}
