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

pub mod jvm;
pub mod kernel;
pub mod native;
pub mod proc_maps;
pub mod python;

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
};

use jvm::{JitBatch, JitOptions, JitStats, JitSymbolizer};
use perf_maps::PerfMapFile;
use python::PythonProcess;
use tracing::debug;

use crate::{
    collect::{RawPythonStack, RawSample, RawStack, SampleKind},
    enrich::{EnrichedDrain, ProcessInfo, spark::TaskThread},
};

/// Where a frame came from; decides its decoration in the folded output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameKind {
    /// Native user-space code.
    User,
    /// Kernel code (rendered with a `_[k]` suffix).
    Kernel,
    /// JIT-compiled code of a runtime, e.g. a Java method (rendered `_[j]`).
    Jit,
    /// A Python function, `function (file.py:line)` (rendered as is).
    Python,
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
    /// The Spark task the thread ran, if any.
    pub task: Option<TaskThread>,
    /// On-CPU samples, or off-CPU microseconds (then the leaf frame says how
    /// the thread waited).
    pub kind: SampleKind,
    pub frames: Vec<Frame>,
    pub count: u64,
}

/// One drain, symbolized.
#[derive(Debug)]
pub struct SymbolizedDrain {
    pub start: std::time::SystemTime,
    pub end: std::time::SystemTime,
    pub samples: Vec<SymbolizedSample>,
    /// Processes that exited since the last drain (see
    /// [`EnrichedDrain::exited`]).
    pub exited: Vec<Arc<ProcessInfo>>,
}

/// The symbolize stage and its caches.
pub struct Symbolizer {
    native: native::NativeSymbolizer,
    kernel: kernel::KernelSymbolizer,
    jit: JitSymbolizer,
    /// This drain's addresses in JVM code caches.
    jit_addrs: HashSet<(u32, u64)>,
    /// CPython processes whose Python frames the sampler follows.
    pythons: HashMap<u32, PythonProcess>,
    /// Their `-X perf` trampoline maps (3.12+), where they write one.
    trampolines: HashMap<u32, PerfMapFile>,
    /// This drain's addresses in those processes' trampolines, named.
    trampoline_names: HashMap<(u32, u64), Arc<str>>,
    final_pass: bool,
}

impl Default for Symbolizer {
    fn default() -> Self {
        Self::new(JitOptions::default())
    }
}

/// Thread-name prefixes (comm) of HotSpot's JIT compiler threads.
const COMPILER_THREADS: [&str; 2] = ["C2 CompilerThre", "C1 CompilerThre"];

impl Symbolizer {
    pub fn new(jit: JitOptions) -> Self {
        Self {
            native: native::NativeSymbolizer::new(),
            kernel: kernel::KernelSymbolizer::new(),
            jit: JitSymbolizer::new(jit),
            jit_addrs: HashSet::new(),
            pythons: HashMap::new(),
            trampolines: HashMap::new(),
            trampoline_names: HashMap::new(),
            final_pass: false,
        }
    }

    /// Marks the drains that follow as the recording's last: JVM maps are
    /// refreshed once more for them.
    pub fn finishing(&mut self) {
        self.final_pass = true;
    }

    /// End of the recording: cleans up what symbolization left on the host.
    pub fn finish(&mut self) {
        self.jit.finish();
    }

    /// JIT statistics so far.
    pub fn jit_stats(&self) -> JitStats {
        self.jit.stats()
    }

    /// Names the Python frames of this CPython process from now on.
    pub fn add_python(&mut self, process: PythonProcess) {
        self.pythons.insert(process.pid(), process);
    }

    /// The threads of every CPython process named here: (pid, [(tid,
    /// `PyThreadState` address)]), read now; processes that could not be
    /// read are left out (logged).
    pub fn python_threads(&self) -> Vec<(u32, Vec<(u32, u64)>)> {
        self.pythons
            .iter()
            .filter_map(|(&pid, python)| match python.threads() {
                Ok(threads) => Some((pid, threads)),
                Err(err) => {
                    debug!(pid, "Python threads not read: {err}");
                    None
                }
            })
            .collect()
    }

    /// Names every frame of a drain.
    pub fn symbolize(&mut self, drain: EnrichedDrain) -> SymbolizedDrain {
        // Resolve each process's user addresses in one batch, and all kernel
        // addresses in another, before building stacks.
        let mut user_batches: HashMap<u32, (Arc<ProcessInfo>, Vec<u64>)> = HashMap::new();
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
        // JVMs: addresses in anonymous executable memory (the code cache) are
        // named from perf maps, the rest as native code.
        let compiling: HashSet<u32> = drain
            .samples
            .iter()
            .filter(|s| {
                COMPILER_THREADS
                    .iter()
                    .any(|p| s.thread_name.starts_with(p))
            })
            .map(|s| s.process.pid)
            .collect();
        self.jit_addrs.clear();
        self.trampoline_names.clear();
        let mut jit_batches = Vec::new();
        for (process, addrs) in user_batches.values() {
            let mut native_addrs = addrs.clone();
            if process.runtime.is_jvm()
                && let Ok(maps) = proc_maps::ProcMaps::read(process.pid)
            {
                let (jit, native): (Vec<u64>, Vec<u64>) = addrs
                    .iter()
                    .partition(|&&addr| maps.find(addr).is_some_and(|m| m.is_anonymous()));
                native_addrs = native;
                self.jit_addrs
                    .extend(jit.iter().map(|&addr| (process.pid, addr)));
                jit_batches.push(JitBatch {
                    process: process.clone(),
                    addrs: jit,
                    compiling: compiling.contains(&process.pid),
                });
            }
            if self.pythons.contains_key(&process.pid) {
                native_addrs = self.name_trampolines(process.pid, native_addrs);
            }
            self.native.resolve(process, &native_addrs);
        }
        self.jit.resolve(&jit_batches, self.final_pass);
        self.kernel.resolve(&kernel_addrs);

        let samples = drain
            .samples
            .into_iter()
            .map(|sample| {
                let frames = self.frames(&sample.process, &sample.raw);
                SymbolizedSample {
                    process: sample.process,
                    tid: sample.raw.tid,
                    thread_name: sample.thread_name,
                    task: sample.task,
                    kind: sample.raw.kind,
                    frames,
                    count: sample.raw.count,
                }
            })
            .collect();
        // Exited processes' last samples are named; now their caches can go.
        for process in &drain.exited {
            self.native.evict(process);
            self.jit.evict(process);
            self.pythons.remove(&process.pid);
            self.trampolines.remove(&process.pid);
        }
        SymbolizedDrain {
            start: drain.start,
            end: drain.end,
            samples,
            exited: drain.exited,
        }
    }

    /// The frames of one sample, root first: a truncation marker if the user
    /// stack was cut, user frames outermost to leaf, then kernel frames, and
    /// for off-CPU time a last frame that says how the thread waited.
    fn frames(&mut self, process: &ProcessInfo, raw: &RawSample) -> Vec<Frame> {
        let (user, kernel) = (&raw.user, &raw.kernel);
        // JIT statistics count on-CPU samples only (off-CPU counts are time).
        let count = match raw.kind {
            SampleKind::OnCpu => raw.count,
            SampleKind::OffCpu(_) => 0,
        };
        let mut frames = Vec::new();
        match user {
            RawStack::Frames { ips, truncated } => {
                // Leaf first. An address outside code is a garbage return
                // address (read where no frame pointer was kept): never a
                // frame. Where the walk ends outside code, it is cut after
                // its outermost code frame, and marked. (A lone garbage
                // frame in the middle, which the frame-record scan of
                // off-CPU walks can step over, just goes.)
                let addrs: Vec<u64> = lookup_addresses(ips).collect();
                let is_code: Vec<bool> = addrs
                    .iter()
                    .map(|&addr| self.native.is_code(process, addr))
                    .collect();
                let end = is_code
                    .iter()
                    .rposition(|&code| code)
                    .map_or(0, |last| last + 1);
                if end < addrs.len() {
                    frames.push(Frame::marker(NOT_CODE_MARKER));
                } else if *truncated {
                    frames.push(Frame::marker("[truncated]"));
                }
                for index in (0..end).rev() {
                    if is_code[index] {
                        frames.push(self.user_frame(process, addrs[index], count));
                    }
                }
            }
            RawStack::Lost(errno) => frames.push(Frame::marker(&lost_marker("user", *errno))),
            RawStack::Absent => {}
        }
        if let Some(python) = &raw.python {
            let python = self.python_frames(process.pid, python);
            frames = merge_python(frames, python);
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
        if let SampleKind::OffCpu(state) = raw.kind {
            frames.push(Frame::marker(state.marker()));
        }
        frames
    }
}

impl Symbolizer {
    /// A Python stack's frames, root first, named by the process's
    /// interpreter; a `[truncated]` marker first if the kernel cut it.
    fn python_frames(&mut self, pid: u32, stack: &RawPythonStack) -> Vec<Frame> {
        let mut frames = Vec::with_capacity(stack.frames.len() + 1);
        if stack.truncated {
            frames.push(Frame::marker("[truncated]"));
        }
        let python = self.pythons.get_mut(&pid);
        let Some(python) = python else {
            return frames;
        };
        for frame in stack.frames.iter().rev() {
            let name: Arc<str> = match python.frame_name(frame) {
                Ok(name) => name.into(),
                Err(err) => {
                    debug!(pid, code = frame.code, "Python frame not named: {err}");
                    "[unknown python frame]".into()
                }
            };
            frames.push(Frame {
                name,
                kind: FrameKind::Python,
            });
        }
        frames
    }

    /// The name [`Self::name_trampolines`] gave an address of a process.
    pub fn trampoline_name(&self, pid: u32, addr: u64) -> Option<&str> {
        self.trampoline_names.get(&(pid, addr)).map(|name| &**name)
    }

    /// Names the addresses of a CPython process that lie in its `-X perf`
    /// trampolines (anonymous executable memory listed in its perf map,
    /// trusted as the JVMs' maps are) and returns the others. Most Python
    /// processes write no perf map: for them only the map's absence is
    /// checked, not their memory map.
    pub fn name_trampolines(&mut self, pid: u32, addrs: Vec<u64>) -> Vec<u64> {
        let map = match self.trampolines.entry(pid) {
            std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
            std::collections::hash_map::Entry::Vacant(entry) => match PerfMapFile::for_pid(pid) {
                Ok(map) => entry.insert(map),
                Err(err) => {
                    debug!(pid, "no perf map for this Python: {err}");
                    return addrs;
                }
            },
        };
        let Ok(maps) = proc_maps::ProcMaps::read(pid) else {
            return addrs;
        };
        let (anonymous, native): (Vec<u64>, Vec<u64>) = addrs
            .into_iter()
            .partition(|&addr| maps.find(addr).is_some_and(|m| m.is_anonymous()));
        if anonymous.is_empty() {
            return native;
        }
        if let Err(err) = map.refresh() {
            debug!(pid, "Python perf map not read: {err}");
        }
        let mut rest = native;
        for addr in anonymous {
            match map.lookup(addr) {
                Some(symbol) => {
                    self.trampoline_names
                        .insert((pid, addr), symbol.name.to_string().into());
                }
                None => rest.push(addr),
            }
        }
        rest
    }

    fn user_frame(&mut self, process: &ProcessInfo, addr: u64, count: u64) -> Frame {
        if let Some(name) = self.trampoline_names.get(&(process.pid, addr)) {
            return Frame {
                name: name.clone(),
                kind: FrameKind::Jit,
            };
        }
        if !self.jit_addrs.contains(&(process.pid, addr)) {
            return Frame {
                name: self.native.name(process, addr),
                kind: FrameKind::User,
            };
        }
        let name = self.jit.name(process, addr);
        if count > 0 {
            self.jit.count_frame(name.is_some(), count);
        }
        Frame {
            name: name.unwrap_or_else(|| "[unknown]".into()),
            kind: FrameKind::Jit,
        }
    }
}

/// Puts a sample's Python frames (root first) where they belong among its
/// native user frames (root first): in place of the evaluation loop's
/// frames (`_PyEval_EvalFrame*` and `-X perf` trampolines `py::...`, from
/// the first to the last), so native callers stay above and C code the
/// Python code called (an extension, a socket read) stays below. Without an evaluation-loop frame (these
/// interpreters keep no frame pointers, so the native walk often ends at
/// the leaf) the Python frames go above all native ones: the native frames
/// are then what the innermost Python frame was running.
///
/// Native frames that could not be named are dropped from such a sample:
/// with no frame pointers in the interpreter, the native walk past the
/// leaf follows whatever the frame register held, and what it finds is
/// mostly not code.
fn merge_python(native: Vec<Frame>, python: Vec<Frame>) -> Vec<Frame> {
    if python.is_empty() {
        return native;
    }
    let native: Vec<Frame> = native
        .into_iter()
        .filter(|frame| !(frame.kind == FrameKind::User && &*frame.name == "[unknown]"))
        .collect();
    let is_eval = |frame: &Frame| {
        (frame.kind == FrameKind::User && frame.name.starts_with("_PyEval_EvalFrame"))
            || (frame.kind == FrameKind::Jit && frame.name.starts_with("py::"))
    };
    let (first, last) = match (
        native.iter().position(is_eval),
        native.iter().rposition(is_eval),
    ) {
        (Some(first), Some(last)) => (first, last + 1),
        _ => (0, 0),
    };
    let mut merged = Vec::with_capacity(native.len() + python.len());
    merged.extend_from_slice(&native[..first]);
    merged.extend(python);
    merged.extend_from_slice(&native[last..]);
    merged
}

/// At the root of a user stack whose walk ended outside code (cut after
/// its outermost code frame).
pub const NOT_CODE_MARKER: &str = "[walk left code]";

fn lost_marker(which: &str, errno: i32) -> String {
    match -errno {
        libc::EEXIST => format!("[{which} stack lost: stack map collision]"),
        libc::ENOSPC => format!("[{which} stack lost: ring full]"),
        libc::ENOENT => format!("[{which} stack lost: evicted]"),
        _ => format!("[{which} stack lost: error {errno}]"),
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

    fn frame(name: &str, kind: FrameKind) -> Frame {
        Frame {
            name: name.into(),
            kind,
        }
    }

    fn names(frames: &[Frame]) -> Vec<&str> {
        frames.iter().map(|f| &*f.name).collect()
    }

    #[test]
    fn python_frames_replace_the_evaluation_loop() {
        let native = vec![
            frame("main", FrameKind::User),
            frame("[unknown]", FrameKind::User),
            frame("Py_RunMain", FrameKind::User),
            frame("_PyEval_EvalFrameDefault", FrameKind::User),
            frame("_PyFunction_Vectorcall", FrameKind::User),
            frame("_PyEval_EvalFrameDefault", FrameKind::User),
            frame("sock_recv", FrameKind::User),
            frame("recv", FrameKind::User),
        ];
        let python = vec![
            frame("<module> (job.py:9)", FrameKind::Python),
            frame("fetch (job.py:3)", FrameKind::Python),
        ];
        assert_eq!(
            names(&merge_python(native, python.clone())),
            vec![
                "main",
                "Py_RunMain",
                "<module> (job.py:9)",
                "fetch (job.py:3)",
                "sock_recv",
                "recv"
            ]
        );
        // No evaluation loop in sight: Python above the native leaf.
        let leaf = vec![frame("clock_nanosleep", FrameKind::User)];
        assert_eq!(
            names(&merge_python(leaf, python.clone())),
            vec!["<module> (job.py:9)", "fetch (job.py:3)", "clock_nanosleep"]
        );
        // -X perf trampolines stand for the evaluation loop too.
        let trampolines = vec![
            frame("main", FrameKind::User),
            frame("py::<module>:job.py", FrameKind::Jit),
            frame("py::fetch:job.py", FrameKind::Jit),
            frame("recv", FrameKind::User),
        ];
        assert_eq!(
            names(&merge_python(trampolines, python)),
            vec!["main", "<module> (job.py:9)", "fetch (job.py:3)", "recv"]
        );
        let alone = vec![frame("main", FrameKind::User)];
        assert_eq!(names(&merge_python(alone, Vec::new())), vec!["main"]);
    }

    #[test]
    fn callers_are_looked_up_inside_the_call() {
        let ips = [0x1000, 0x2005, 0x3000];
        assert_eq!(
            lookup_addresses(&ips).collect::<Vec<_>>(),
            vec![0x1000, 0x2004, 0x2fff]
        );
    }
}
