//! Stage 4 of the pipeline: **write**.
//!
//! Accumulates symbolized samples into one folded file per output group and
//! writes them, each with an SVG flame graph beside it, plus `index.json`.
//!
//! # Layout of the output directory
//! ```text
//! DIR/index.json                            what is here (see [`index`])
//! DIR/processes/<name>-<pid>.cpu.folded     one per sampled user process
//! DIR/processes/<name>-<pid>.cpu.svg
//! DIR/kernel/kernel-threads.cpu.folded      all kernel threads together
//! DIR/kernel/kernel-threads.cpu.svg
//! ```
//! # Folded lines
//! Brendan Gregg's format: frames root first, separated by `;`, a space, the
//! count. The first frame is the process (`name [pid]`), the second the thread
//! (its name), then the stack from the outermost frame to the leaf; kernel
//! frames carry a `_[k]` suffix; `[truncated]` at the root of the stack marks
//! a stack cut at the depth limit. Counts are samples.

pub mod atomic;
pub mod folded;
pub mod index;

use std::{
    collections::HashMap,
    io,
    path::{Path, PathBuf},
    time::SystemTime,
};

use tracing::debug;

use crate::symbolize::{SymbolizedDrain, SymbolizedSample};

/// The kind of profile a file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProfileKind {
    /// On-CPU samples.
    Cpu,
}

impl ProfileKind {
    fn suffix(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
        }
    }
}

/// Which file a sample belongs to. Every sample goes to exactly one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Group {
    /// A user process, identified across PID reuse by its start time.
    Process { pid: u32, start_ticks: u64 },
    /// All kernel threads.
    KernelThreads,
}

#[derive(Debug)]
struct OutputFile {
    rel_path: PathBuf,
    entry: index::FileEntry,
    stacks: HashMap<String, u64>,
    dirty: bool,
}

/// The write stage: folded aggregates per file, flushed on demand.
pub struct Writer {
    dir: PathBuf,
    files: HashMap<(ProfileKind, Group), OutputFile>,
    used_paths: HashMap<PathBuf, (ProfileKind, Group)>,
    start: Option<SystemTime>,
    end: Option<SystemTime>,
}

impl Writer {
    /// A writer into `dir` (created on first flush).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            files: HashMap::new(),
            used_paths: HashMap::new(),
            start: None,
            end: None,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Adds a drain's samples to their files.
    pub fn add(&mut self, drain: SymbolizedDrain) {
        self.start = Some(self.start.map_or(drain.start, |s| s.min(drain.start)));
        self.end = Some(self.end.map_or(drain.end, |e| e.max(drain.end)));
        for sample in drain.samples {
            self.add_sample(ProfileKind::Cpu, sample, drain.start, drain.end);
        }
    }

    fn add_sample(
        &mut self,
        kind: ProfileKind,
        sample: SymbolizedSample,
        start: SystemTime,
        end: SystemTime,
    ) {
        let group = if sample.process.kernel_thread {
            Group::KernelThreads
        } else {
            Group::Process {
                pid: sample.process.pid,
                start_ticks: sample.process.start_ticks,
            }
        };
        let key = (kind, group.clone());
        if !self.files.contains_key(&key) {
            let rel_path = self.unique_path(kind, &group, &sample);
            let entry =
                index::FileEntry::new(&rel_path, kind, &group_meta(&group, &sample), start, end);
            self.used_paths.insert(rel_path.clone(), key.clone());
            self.files.insert(
                key.clone(),
                OutputFile {
                    rel_path,
                    entry,
                    stacks: HashMap::new(),
                    dirty: true,
                },
            );
        }
        let file = self.files.get_mut(&key).expect("inserted above");
        let line = folded::stack_line(&sample);
        *file.stacks.entry(line).or_insert(0) += sample.count;
        file.entry.samples += sample.count;
        file.entry.extend_time(start, end);
        file.dirty = true;
    }

    fn unique_path(&self, kind: ProfileKind, group: &Group, sample: &SymbolizedSample) -> PathBuf {
        let base = match group {
            Group::KernelThreads => PathBuf::from("kernel/kernel-threads"),
            Group::Process { pid, .. } => PathBuf::from("processes")
                .join(format!("{}-{pid}", folded::file_stem(&sample.process.name))),
        };
        // A reused PID with the same name gets its own file.
        (1..)
            .map(|n| {
                let stem = if n == 1 {
                    base.clone()
                } else {
                    PathBuf::from(format!("{}-{n}", base.display()))
                };
                PathBuf::from(format!("{}.{}.folded", stem.display(), kind.suffix()))
            })
            .find(|path| !self.used_paths.contains_key(path))
            .expect("an unused path exists")
    }

    /// Total samples held.
    pub fn samples(&self) -> u64 {
        self.files.values().map(|f| f.entry.samples).sum()
    }

    /// Writes every file changed since the last flush (folded + SVG), then
    /// `index.json`. Nothing is forgotten on error: the aggregates stay in
    /// memory and the next flush tries again.
    pub fn flush(&mut self, header: &index::Header) -> io::Result<usize> {
        let mut written = 0;
        let mut first_error = None;
        for file in self.files.values_mut().filter(|f| f.dirty) {
            let text = folded::render(&file.stacks);
            let svg_rel = file.rel_path.with_extension("svg");
            let result =
                atomic::write_atomic(&self.dir, &file.rel_path, text.as_bytes()).and_then(|()| {
                    let svg = folded::flame_graph(&text, &file.entry.title())?;
                    atomic::write_atomic(&self.dir, &svg_rel, &svg)
                });
            match result {
                Ok(()) => {
                    file.dirty = false;
                    written += 1;
                }
                Err(err) => {
                    debug!("{}: {err}", file.rel_path.display());
                    first_error.get_or_insert(err);
                }
            }
        }
        let mut entries: Vec<index::FileEntry> =
            self.files.values().map(|f| f.entry.clone()).collect();
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        let index = index::Index::new(header, self.start, self.end, entries);
        atomic::write_atomic(&self.dir, Path::new("index.json"), &index.to_json())?;
        match first_error {
            Some(err) => Err(err),
            None => Ok(written),
        }
    }
}

/// What the index says about a group.
fn group_meta(group: &Group, sample: &SymbolizedSample) -> index::GroupMeta {
    match group {
        Group::KernelThreads => index::GroupMeta {
            pid: None,
            process: Some("[kernel threads]".into()),
            role: "kernel",
        },
        Group::Process { pid, .. } => index::GroupMeta {
            pid: Some(*pid),
            process: Some(sample.process.name.clone()),
            role: "other",
        },
    }
}
