//! CPython processes followed through their lives: probed when first seen
//! (again for a few drains if the interpreter is not mapped yet), their
//! interpreter's offsets handed to the kernel, their threads' states kept
//! current every drain, their Python frames and `-X perf` trampolines
//! named, and everything dropped when they exit.

use std::{collections::HashMap, sync::Arc};

use perf_maps::PerfMapFile;
use tracing::{debug, info, warn};

use super::PythonProcess;
use crate::{
    collect::{Collector, RawPythonStack},
    enrich::{EnrichedSample, ProcessInfo},
    runtime::Runtime,
    symbolize::{Frame, FrameKind, RuntimeFrames, proc_maps::ProcMaps},
    sys::proc::Mapping,
};

/// Drains over which a Python process whose interpreter was not found is
/// probed again: right after exec a process may not have libpython mapped
/// yet.
const PROBES: u8 = 5;

/// Every CPython process sparkprof follows.
#[derive(Default)]
pub struct PythonRuntime {
    followed: HashMap<u32, PythonProcess>,
    /// Python processes not (yet) found to be CPython, with the probes left.
    retries: HashMap<u32, u8>,
    /// Their `-X perf` trampoline maps (3.12+), where they write one.
    trampolines: HashMap<u32, PerfMapFile>,
    /// This drain's addresses in those trampolines, named.
    trampoline_names: crate::FastMap<(u32, u64), Arc<str>>,
}

impl PythonRuntime {
    pub fn held(&self, held: &mut crate::sys::held::Held) {
        held.add("python.processes", self.followed.len());
        held.add("python.probing", self.retries.len());
        held.add("python.trampoline_maps", self.trampolines.len());
        held.add(
            "python.code_objects",
            self.followed
                .values()
                .map(PythonProcess::code_objects)
                .sum(),
        );
    }

    /// Has the sampler follow a CPython process's Python frames; `maps`:
    /// its memory maps if just read.
    fn follow(&mut self, pid: u32, maps: Option<&[Mapping]>, collector: &mut Collector) {
        match PythonProcess::probe_mapped(pid, maps) {
            Ok(Some(python)) => {
                let (major, minor) = python.version();
                match collector.watch_python(pid, &python.kernel_offsets()) {
                    Ok(()) => {
                        info!(pid, "Python {major}.{minor}: following its Python frames");
                        // Its threads now, not only from the next drain on.
                        match python.threads() {
                            Ok(threads) => collector.set_python_threads(pid, &threads),
                            Err(err) => debug!(pid, "Python threads not read yet: {err}"),
                        }
                        self.followed.insert(pid, python);
                    }
                    Err(err) => warn!(pid, "Python frames not recorded: {err}"),
                }
                self.retries.remove(&pid);
            }
            Ok(None) => {
                debug!(pid, "not (yet) a CPython this sparkprof can follow");
                self.retry_later(pid);
            }
            Err(err) => {
                debug!(pid, "Python interpreter not read: {err}");
                self.retry_later(pid);
            }
        }
    }

    fn retry_later(&mut self, pid: u32) {
        let left = self.retries.entry(pid).or_insert(PROBES);
        *left = left.saturating_sub(1);
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
        // The map first: without one (most processes) there is nothing to
        // name, and the process's memory map (long, read at every drain)
        // is not needed.
        if let Err(err) = map.refresh() {
            debug!(pid, "Python perf map not read: {err}");
        }
        if map.table().is_empty() {
            return addrs;
        }
        let Ok(maps) = ProcMaps::read(pid) else {
            return addrs;
        };
        let (anonymous, native): (Vec<u64>, Vec<u64>) = addrs
            .into_iter()
            .partition(|&addr| maps.find(addr).is_some_and(|m| m.is_anonymous()));
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

    /// The name [`Self::name_trampolines`] gave an address of a process.
    pub fn trampoline_name(&self, pid: u32, addr: u64) -> Option<&str> {
        self.trampoline_names.get(&(pid, addr)).map(|name| &**name)
    }
}

impl Runtime for PythonRuntime {
    fn discovered(
        &mut self,
        process: &ProcessInfo,
        maps: Option<&[Mapping]>,
        collector: &mut Collector,
    ) {
        if process.is_python() {
            self.follow(process.pid, maps, collector);
        }
    }

    fn synchronize(&mut self, collector: &mut Collector) {
        // Probes again the Python processes whose interpreter was not found.
        let due: Vec<u32> = self
            .retries
            .iter()
            .filter(|&(_, &left)| left > 0)
            .map(|(&pid, _)| pid)
            .collect();
        for pid in due {
            self.follow(pid, None, collector);
        }
        // Python threads come and go: their thread states are read afresh
        // every drain (a thread younger than that has no Python frames yet).
        for (&pid, python) in &self.followed {
            match python.threads() {
                Ok(threads) => collector.set_python_threads(pid, &threads),
                Err(err) => debug!(pid, "Python threads not read: {err}"),
            }
        }
    }

    fn exited(&mut self, process: &ProcessInfo) {
        self.followed.remove(&process.pid);
        self.retries.remove(&process.pid);
        self.trampolines.remove(&process.pid);
    }
}

impl RuntimeFrames for PythonRuntime {
    fn new_drain(&mut self, samples: &[EnrichedSample]) {
        self.trampoline_names.clear();
        for python in self.followed.values_mut() {
            python.new_drain();
        }
        // Each process's code objects checked together, not one by one.
        let mut codes: crate::FastMap<u32, Vec<u64>> = Default::default();
        for sample in samples {
            if let Some(stack) = &sample.raw.python {
                codes
                    .entry(sample.process.pid)
                    .or_default()
                    .extend(stack.frames.iter().map(|frame| frame.code));
            }
        }
        for (pid, codes) in codes {
            if let Some(python) = self.followed.get_mut(&pid) {
                python.prefetch_headers(codes);
            }
        }
    }

    fn claim(&mut self, process: &Arc<ProcessInfo>, addrs: Vec<u64>) -> Vec<u64> {
        if self.followed.contains_key(&process.pid) {
            self.name_trampolines(process.pid, addrs)
        } else {
            addrs
        }
    }

    /// Trampolines were named in [`Self::claim`].
    fn resolve(&mut self) {}

    fn claimed(
        &mut self,
        process: &ProcessInfo,
        addr: u64,
        _: u64,
        frames: &mut Vec<Frame>,
    ) -> bool {
        let Some(name) = self.trampoline_names.get(&(process.pid, addr)) else {
            return false;
        };
        frames.push(Frame {
            name: name.clone(),
            kind: FrameKind::Jit,
        });
        true
    }

    fn interpreter_frames(
        &mut self,
        pid: u32,
        stack: &RawPythonStack,
        native: Vec<Frame>,
    ) -> Vec<Frame> {
        merge_python(native, self.python_frames(pid, stack))
    }

    /// No Python frame is recorded in a kernel-walked JVM stack.
    fn recorded_frames(
        &mut self,
        _: &ProcessInfo,
        _: &profiler_common::HotspotFrame,
        _: bool,
        _: u64,
        _: &mut Vec<Frame>,
    ) -> bool {
        false
    }
}

impl PythonRuntime {
    /// A Python stack's frames, root first, named by the process's
    /// interpreter; a `[truncated]` marker first if the kernel cut it.
    fn python_frames(&mut self, pid: u32, stack: &RawPythonStack) -> Vec<Frame> {
        let mut frames = Vec::with_capacity(stack.frames.len() + 1);
        if stack.truncated {
            frames.push(Frame::marker("[truncated]"));
        }
        let Some(python) = self.followed.get_mut(&pid) else {
            return frames;
        };
        for frame in stack.frames.iter().rev() {
            let name: Arc<str> = match python.frame_named(frame) {
                Ok(name) => name,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn names(frames: &[Frame]) -> Vec<&str> {
        frames.iter().map(|f| &*f.name).collect()
    }

    #[test]
    fn python_frames_replace_the_evaluation_loop() {
        let native = vec![
            Frame::new("main", FrameKind::User),
            Frame::new("[unknown]", FrameKind::User),
            Frame::new("Py_RunMain", FrameKind::User),
            Frame::new("_PyEval_EvalFrameDefault", FrameKind::User),
            Frame::new("_PyFunction_Vectorcall", FrameKind::User),
            Frame::new("_PyEval_EvalFrameDefault", FrameKind::User),
            Frame::new("sock_recv", FrameKind::User),
            Frame::new("recv", FrameKind::User),
        ];
        let python = vec![
            Frame::new("<module> (job.py:9)", FrameKind::Python),
            Frame::new("fetch (job.py:3)", FrameKind::Python),
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
        let leaf = vec![Frame::new("clock_nanosleep", FrameKind::User)];
        assert_eq!(
            names(&merge_python(leaf, python.clone())),
            vec!["<module> (job.py:9)", "fetch (job.py:3)", "clock_nanosleep"]
        );
        // -X perf trampolines stand for the evaluation loop too.
        let trampolines = vec![
            Frame::new("main", FrameKind::User),
            Frame::new("py::<module>:job.py", FrameKind::Jit),
            Frame::new("py::fetch:job.py", FrameKind::Jit),
            Frame::new("recv", FrameKind::User),
        ];
        assert_eq!(
            names(&merge_python(trampolines, python)),
            vec!["main", "<module> (job.py:9)", "fetch (job.py:3)", "recv"]
        );
        let alone = vec![Frame::new("main", FrameKind::User)];
        assert_eq!(names(&merge_python(alone, Vec::new())), vec!["main"]);
    }
}
