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

use std::{collections::HashMap, sync::Arc};

use profiler_common::{HotspotFrame, hotspot_frame};

use crate::{
    collect::{
        RawHotspotStack, RawPythonStack, RawSample, RawStack, SampleKind, off_cpu::OffCpuState,
    },
    enrich::{Discovered, EnrichedDrain, EnrichedSample, ProcessInfo, spark::TaskThread},
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
    /// A Java method inlined into its caller's compiled code (rendered `_[i]`).
    Inlined,
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
    pub fn new(name: &str, kind: FrameKind) -> Self {
        Self {
            name: name.into(),
            kind,
        }
    }

    /// A frame that marks something about the stack (`[truncated]`, ...).
    pub fn marker(name: &str) -> Self {
        Self::new(name, FrameKind::Marker)
    }
}

/// A sample with its stack named, root first.
#[derive(Debug, Clone)]
pub struct SymbolizedSample {
    pub process: Arc<ProcessInfo>,
    pub tid: u32,
    pub thread_name: Arc<str>,
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
    /// Where the span of its off-CPU samples begins (see
    /// [`crate::collect::Drain::off_cpu_start`]).
    pub off_cpu_start: std::time::SystemTime,
    pub samples: Vec<SymbolizedSample>,
    /// Processes that exited since the last drain (see
    /// [`EnrichedDrain::exited`]).
    pub exited: Vec<Arc<ProcessInfo>>,
}

/// What a language runtime names in a drain (see `crate::runtime`): the
/// symbolizer asks, the runtime answers from the processes it follows.
pub trait RuntimeFrames {
    /// A new drain begins (these are its samples): the last one's names go.
    fn new_drain(&mut self, samples: &[EnrichedSample]);
    /// Of a process's user addresses, names those in the runtime's own
    /// generated code (CPython's `-X perf` trampolines) and returns the
    /// others, for the native and JIT symbolizers.
    fn claim(&mut self, process: &Arc<ProcessInfo>, addrs: Vec<u64>) -> Vec<u64>;
    /// Every process's addresses are claimed: name them (a runtime may
    /// name all processes' at once, e.g. asking every JVM for its perf map
    /// in parallel).
    fn resolve(&mut self);
    /// Appends to `frames` the frames of an address claimed in this drain
    /// (root first: a compiled Java method and those inlined into it at
    /// that address), in a sample of `count` (0 for off-CPU time:
    /// statistics count on-CPU samples); `false` if it was not claimed.
    /// (Appended, not returned: this runs for every frame of every sample.)
    fn claimed(
        &mut self,
        process: &ProcessInfo,
        addr: u64,
        count: u64,
        frames: &mut Vec<Frame>,
    ) -> bool;
    /// A sample's user frames (root first) with the interpreter frames the
    /// kernel recorded for it (`stack`) named and put in their place.
    fn interpreter_frames(
        &mut self,
        pid: u32,
        stack: &RawPythonStack,
        native: Vec<Frame>,
    ) -> Vec<Frame>;
    /// Appends to `frames` the frames a runtime's own record in a
    /// kernel-walked stack stands for, root first (a Java frame of a JVM
    /// stack, with the methods inlined into it); `false` for a native
    /// frame, which is named like any other user address. `leaf`: the
    /// stack's first frame.
    fn recorded_frames(
        &mut self,
        process: &ProcessInfo,
        frame: &HotspotFrame,
        leaf: bool,
        count: u64,
        frames: &mut Vec<Frame>,
    ) -> bool;
}

/// The symbolize stage and its caches.
pub struct Symbolizer {
    native: native::NativeSymbolizer,
    kernel: kernel::KernelSymbolizer,
    /// Room for a stack's lookups, kept from sample to sample.
    room: StackRoom,
}

/// What naming one stack needs for a moment. Made afresh for every
/// sample, with a stack's frames gathered in one vector, then another, and
/// grown as they came, the symbolizer's allocations were 131,000 of the
/// 817,000 sparkprof made over a testbed job (28 per sample; glibc's
/// allocator was a tenth of its CPU); now one vector per sample holds its
/// frames.
#[derive(Default)]
struct StackRoom {
    /// For each frame, leaf first, the address to name it by
    /// ([`Symbolizer::user_frames`]).
    lookups: Vec<Option<u64>>,
    /// For each frame, whether it lies in code.
    is_code: Vec<bool>,
}

impl Default for Symbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl Symbolizer {
    /// What the symbolize stage keeps between drains, counted.
    pub fn held(&self, held: &mut crate::sys::held::Held) {
        self.native.held(held);
        self.kernel.held(held);
    }

    pub fn new() -> Self {
        Self {
            native: native::NativeSymbolizer::new(),
            kernel: kernel::KernelSymbolizer::new(),
            room: StackRoom::default(),
        }
    }

    /// Loads what every recording needs before its first drain (the
    /// kernel's symbols).
    pub fn load(&mut self) {
        self.kernel.load();
    }

    /// Names every frame of a drain; `discovered`: the processes first seen
    /// in it, whose maps were read then.
    pub fn symbolize(
        &mut self,
        drain: EnrichedDrain,
        discovered: &Discovered,
        runtime: &mut dyn RuntimeFrames,
    ) -> SymbolizedDrain {
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
            if let Some(stack) = &sample.raw.hotspot {
                let batch = user_batches
                    .entry(sample.process.pid)
                    .or_insert_with(|| (sample.process.clone(), Vec::new()));
                batch.1.extend(native_addresses(stack));
            }
            if let RawStack::Frames { ips, .. } = &sample.raw.kernel {
                kernel_addrs.extend(lookup_addresses(ips));
            }
        }
        // Runtimes name what lies in their own generated code (JIT code
        // caches, interpreter trampolines); the rest is native code.
        // Each address once (a drain's stacks share most of theirs).
        runtime.new_drain(&drain.samples);
        for (process, mut addrs) in user_batches.into_values() {
            addrs.sort_unstable();
            addrs.dedup();
            let native_addrs = runtime.claim(&process, addrs);
            let maps = discovered.maps(process.pid);
            self.native.resolve(&process, &native_addrs, maps);
        }
        runtime.resolve();
        kernel_addrs.sort_unstable();
        kernel_addrs.dedup();
        self.kernel.resolve(&kernel_addrs);

        // Off-CPU time of one process often has the same stacks in many
        // threads (a pool's threads wait in one place): named once a drain.
        // Their frames count nothing (statistics count on-CPU samples), so
        // naming them again would give the same frames. Over a testbed job
        // a fifth of the off-CPU user frames repeated within their drain.
        let mut off_cpu: crate::FastMap<OffCpuStacks<'_>, usize> = Default::default();
        let mut frames: Vec<Vec<Frame>> = Vec::with_capacity(drain.samples.len());
        for sample in &drain.samples {
            let raw = &sample.raw;
            let SampleKind::OffCpu(state) = raw.kind else {
                frames.push(self.frames(&sample.process, raw, runtime));
                continue;
            };
            let key = OffCpuStacks {
                pid: sample.process.pid,
                state,
                user: &raw.user,
                kernel: &raw.kernel,
                python: raw.python.as_ref(),
                hotspot: raw.hotspot.as_ref(),
            };
            if let Some(&first) = off_cpu.get(&key) {
                frames.push(frames[first].clone());
                continue;
            }
            off_cpu.insert(key, frames.len());
            frames.push(self.frames(&sample.process, raw, runtime));
        }
        drop(off_cpu);
        let samples = drain
            .samples
            .into_iter()
            .zip(frames)
            .map(|(sample, frames)| SymbolizedSample {
                process: sample.process,
                tid: sample.raw.tid,
                thread_name: sample.thread_name,
                task: sample.task,
                kind: sample.raw.kind,
                frames,
                count: sample.raw.count,
            })
            .collect();
        // Exited processes' last samples are named; now their caches can go.
        for process in &drain.exited {
            self.native.evict(process);
        }
        SymbolizedDrain {
            start: drain.start,
            end: drain.end,
            off_cpu_start: drain.off_cpu_start,
            samples,
            exited: drain.exited,
        }
    }

    /// The frames of one sample, root first: a truncation marker if the user
    /// stack was cut, user frames outermost to leaf, then kernel frames, and
    /// for off-CPU time a last frame that says how the thread waited.
    fn frames(
        &mut self,
        process: &ProcessInfo,
        raw: &RawSample,
        runtime: &mut dyn RuntimeFrames,
    ) -> Vec<Frame> {
        let (user, kernel) = (&raw.user, &raw.kernel);
        // JIT statistics count on-CPU samples only (off-CPU counts are time).
        let count = match raw.kind {
            SampleKind::OnCpu => raw.count,
            SampleKind::OffCpu(_) => 0,
        };
        // Room for every frame but the methods inlined into compiled Java
        // frames, and a marker at each end: one allocation for most stacks.
        let stack_len = |stack: &RawStack| match stack {
            RawStack::Frames { ips, .. } => ips.len(),
            RawStack::Lost(_) | RawStack::Absent => 1,
        };
        let mut frames = Vec::with_capacity(
            stack_len(user)
                + raw.hotspot.as_ref().map_or(0, |stack| stack.frames.len())
                + stack_len(kernel)
                + 2,
        );
        match user {
            RawStack::Frames { ips, truncated } => self.user_frames(
                process,
                lookup_addresses(ips).map(Some),
                *truncated,
                count,
                runtime,
                &mut frames,
                |_, _, _| {},
            ),
            RawStack::Lost(errno) => frames.push(Frame::marker(&lost_marker("user", *errno))),
            RawStack::Absent => {}
        }
        if let Some(stack) = &raw.hotspot {
            self.hotspot_frames(process, stack, count, runtime, &mut frames);
        }
        if let Some(python) = &raw.python {
            frames = runtime.interpreter_frames(process.pid, python, frames);
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
    /// Appends to `frames` the user frames of a JVM stack the kernel walked
    /// (native and Java frames, leaf first), root first: native frames as
    /// in any user stack, Java frames as the runtime names them.
    fn hotspot_frames(
        &mut self,
        process: &ProcessInfo,
        stack: &RawHotspotStack,
        count: u64,
        runtime: &mut dyn RuntimeFrames,
        frames: &mut Vec<Frame>,
    ) {
        self.user_frames(
            process,
            stack.frames.iter().enumerate().map(|(index, frame)| {
                is_native(frame).then(|| lookup_address(index, frame.address))
            }),
            stack.truncated,
            count,
            runtime,
            frames,
            |runtime, index, frames| {
                let frame = &stack.frames[index];
                if !runtime.recorded_frames(process, frame, index == 0, count, frames) {
                    frames.push(Frame::new("[unknown]", FrameKind::Jit));
                }
            },
        );
    }

    /// Appends to `frames` the frames of a user stack, root first, from its
    /// frames leaf first: for each (`lookups`), the address to name a
    /// native frame by (see [`lookup_addresses`]), or `None` for a frame
    /// `recorded` names (a runtime's record, by its index). They are
    /// gathered in the symbolizer's room ([`StackRoom`]).
    ///
    /// An address outside code is a garbage return address (read where no
    /// frame pointer was kept): never a frame. Where the walk ends outside
    /// code, it is cut after its outermost code frame, and marked. (A lone
    /// garbage frame in the middle, which the frame-record scan of off-CPU
    /// walks can step over, just goes.)
    #[allow(clippy::too_many_arguments)] // the stack, its process, and where its frames go
    fn user_frames(
        &mut self,
        process: &ProcessInfo,
        lookups: impl Iterator<Item = Option<u64>>,
        truncated: bool,
        count: u64,
        runtime: &mut dyn RuntimeFrames,
        frames: &mut Vec<Frame>,
        mut recorded: impl FnMut(&mut dyn RuntimeFrames, usize, &mut Vec<Frame>),
    ) {
        let StackRoom {
            lookups: room_lookups,
            is_code,
        } = &mut self.room;
        room_lookups.clear();
        room_lookups.extend(lookups);
        let lookups = &*room_lookups;
        let native = self.native.process(process);
        is_code.clear();
        is_code.extend(
            lookups
                .iter()
                .map(|lookup| lookup.is_none_or(|addr| native.is_code(addr))),
        );
        let end = is_code
            .iter()
            .rposition(|&code| code)
            .map_or(0, |last| last + 1);
        if end < lookups.len() {
            frames.push(Frame::marker(NOT_CODE_MARKER));
        } else if truncated {
            frames.push(Frame::marker("[truncated]"));
        }
        for index in (0..end).rev() {
            match lookups[index] {
                Some(addr) if is_code[index] => {
                    if !runtime.claimed(process, addr, count, frames) {
                        frames.push(Frame {
                            name: native.name(addr),
                            kind: FrameKind::User,
                        });
                    }
                }
                Some(_) => {}
                None => recorded(runtime, index, frames),
            }
        }
    }
}

/// What an off-CPU sample's frames are made of, within one drain: its
/// process (by pid: a drain's samples of one pid are one process), how
/// it waited and its stacks.
#[derive(PartialEq, Eq, Hash)]
struct OffCpuStacks<'a> {
    pid: u32,
    state: OffCpuState,
    user: &'a RawStack,
    kernel: &'a RawStack,
    python: Option<&'a RawPythonStack>,
    hotspot: Option<&'a RawHotspotStack>,
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

/// Whether a frame of a kernel-walked JVM stack is named as a native
/// address (native code, or a code-cache pc the walker found no blob for,
/// which the JIT symbolizer may know from a perf map).
fn is_native(frame: &HotspotFrame) -> bool {
    matches!(frame.kind, hotspot_frame::NATIVE | hotspot_frame::CODE)
}

/// The addresses to look up for the native frames of a kernel-walked JVM
/// stack.
fn native_addresses(stack: &RawHotspotStack) -> impl Iterator<Item = u64> + '_ {
    stack
        .frames
        .iter()
        .enumerate()
        .filter(|(_, frame)| is_native(frame))
        .map(|(index, frame)| lookup_address(index, frame.address))
}

/// The address to look up for the frame at `index` of a leaf-first stack
/// (see [`lookup_addresses`]).
fn lookup_address(index: usize, ip: u64) -> u64 {
    if index == 0 { ip } else { ip.saturating_sub(1) }
}

/// The addresses to look up for a leaf-first stack: the leaf's own address,
/// and for every caller its return address minus one, which lies inside the
/// call instruction and so inside the calling function even when the call is
/// the function's last instruction.
pub fn lookup_addresses(ips: &[u64]) -> impl DoubleEndedIterator<Item = u64> + '_ {
    ips.iter().enumerate().map(|(i, &ip)| lookup_address(i, ip))
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::enrich::{Runtime, spark::SparkProcess};

    /// A runtime that claims every user address and names it by its
    /// value, counting what it names and with which count.
    #[derive(Default)]
    struct Claiming {
        named: Vec<(u64, u64)>,
    }

    impl RuntimeFrames for Claiming {
        fn new_drain(&mut self, _: &[EnrichedSample]) {}
        fn claim(&mut self, _: &Arc<ProcessInfo>, _: Vec<u64>) -> Vec<u64> {
            Vec::new()
        }
        fn resolve(&mut self) {}
        fn claimed(
            &mut self,
            _: &ProcessInfo,
            addr: u64,
            count: u64,
            frames: &mut Vec<Frame>,
        ) -> bool {
            self.named.push((addr, count));
            frames.push(Frame::new(&format!("f{addr:x}"), FrameKind::Jit));
            true
        }
        fn interpreter_frames(
            &mut self,
            _: u32,
            _: &RawPythonStack,
            native: Vec<Frame>,
        ) -> Vec<Frame> {
            native
        }
        /// Names a JVM stack's interpreted frame by its `Method*`.
        fn recorded_frames(
            &mut self,
            _: &ProcessInfo,
            frame: &HotspotFrame,
            _: bool,
            _: u64,
            frames: &mut Vec<Frame>,
        ) -> bool {
            if frame.kind != hotspot_frame::INTERPRETED {
                return false;
            }
            frames.push(Frame::new(&format!("m{:x}", frame.address), FrameKind::Jit));
            true
        }
    }

    fn sample(
        process: &Arc<ProcessInfo>,
        tid: u32,
        kind: SampleKind,
        ips: &[u64],
    ) -> EnrichedSample {
        EnrichedSample {
            raw: RawSample {
                tgid: process.pid,
                tid,
                name_epoch: 0,
                comm: "pool".into(),
                user: RawStack::Frames {
                    ips: ips.to_vec(),
                    truncated: false,
                },
                kernel: RawStack::Absent,
                python: None,
                hotspot: None,
                kind,
                count: 5,
            },
            process: process.clone(),
            thread_name: format!("pool-{tid}").into(),
            task: None,
        }
    }

    #[test]
    fn off_cpu_stacks_a_drain_repeats_are_named_once_and_on_cpu_ones_each_time() {
        let process = Arc::new(ProcessInfo {
            pid: 4242,
            start_ticks: 7,
            name: "java".into(),
            kernel_thread: false,
            runtime: Runtime::Native,
            spark: SparkProcess::other(),
        });
        let sleep = SampleKind::OffCpu(OffCpuState::Sleep);
        let (wait, other) = ([0x1000, 0x2001], [0x1000, 0x3001]);
        let now = std::time::SystemTime::now();
        let drain = EnrichedDrain {
            start: now,
            off_cpu_start: now,
            end: now,
            samples: vec![
                sample(&process, 1, sleep, &wait),
                sample(&process, 2, sleep, &wait),
                sample(&process, 3, SampleKind::OffCpu(OffCpuState::Io), &wait),
                sample(&process, 4, sleep, &other),
                sample(&process, 5, SampleKind::OnCpu, &wait),
                sample(&process, 6, SampleKind::OnCpu, &wait),
            ],
            exited: Vec::new(),
        };
        let mut runtime = Claiming::default();
        let named = Symbolizer::new().symbolize(drain, &Discovered::default(), &mut runtime);
        let names = |index: usize| -> Vec<String> {
            named.samples[index]
                .frames
                .iter()
                .map(|frame| frame.name.to_string())
                .collect()
        };
        // Two threads waiting in one place: one stack, named once.
        assert_eq!(names(0), ["f2000", "f1000", "[off-cpu: sleep]"]);
        assert_eq!(names(1), names(0));
        assert_eq!(named.samples[1].tid, 2);
        // Another way of waiting, or another place: named for themselves.
        assert_eq!(names(2), ["f2000", "f1000", "[off-cpu: io]"]);
        assert_eq!(names(3), ["f3000", "f1000", "[off-cpu: sleep]"]);
        // On-CPU samples are named each, with their counts (the JIT
        // statistics count them).
        assert_eq!(names(4), ["f2000", "f1000"]);
        assert_eq!(names(5), names(4));
        let off_cpu = runtime
            .named
            .iter()
            .filter(|(_, count)| *count == 0)
            .count();
        let on_cpu: Vec<&(u64, u64)> = runtime
            .named
            .iter()
            .filter(|(_, count)| *count > 0)
            .collect();
        assert_eq!(off_cpu, 6, "three distinct off-CPU stacks of two frames");
        assert_eq!(on_cpu.len(), 4);
        assert!(on_cpu.iter().all(|(_, count)| *count == 5));
    }

    /// The room a stack is named in is kept from sample to sample: a
    /// stack named after a longer one, or a JVM stack after a native one,
    /// has its own frames and no other's.
    #[test]
    fn each_stack_of_a_drain_has_its_own_frames_whatever_came_before() {
        let process = Arc::new(ProcessInfo {
            pid: 4243,
            start_ticks: 7,
            name: "java".into(),
            kernel_thread: false,
            runtime: Runtime::Native,
            spark: SparkProcess::other(),
        });
        let on_cpu = SampleKind::OnCpu;
        let mut jvm = sample(&process, 3, on_cpu, &[]);
        jvm.raw.user = RawStack::Absent;
        let frame = |kind, address| HotspotFrame {
            address,
            data: 0,
            kind,
        };
        jvm.raw.hotspot = Some(RawHotspotStack {
            frames: vec![
                frame(hotspot_frame::NATIVE, 0x5000),
                frame(hotspot_frame::INTERPRETED, 0x77),
                frame(hotspot_frame::NATIVE, 0x6001),
            ],
            truncated: true,
        });
        let now = std::time::SystemTime::now();
        let drain = EnrichedDrain {
            start: now,
            off_cpu_start: now,
            end: now,
            samples: vec![
                sample(&process, 1, on_cpu, &[0x1000, 0x2001, 0x3001]),
                sample(&process, 2, on_cpu, &[0x4000]),
                jvm,
                sample(&process, 4, on_cpu, &[0x8000, 0x9001]),
            ],
            exited: Vec::new(),
        };
        let named =
            Symbolizer::new().symbolize(drain, &Discovered::default(), &mut Claiming::default());
        let names: Vec<Vec<String>> = named
            .samples
            .iter()
            .map(|sample| {
                sample
                    .frames
                    .iter()
                    .map(|frame| frame.name.to_string())
                    .collect()
            })
            .collect();
        assert_eq!(
            names,
            [
                vec!["f3000", "f2000", "f1000"],
                vec!["f4000"],
                vec!["[truncated]", "f6000", "m77", "f5000"],
                vec!["f9000", "f8000"],
            ]
        );
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
