//! `index.json`: the table of contents of an output directory.
//!
//! ```json
//! {
//!   "version": 1,
//!   "tool": "sparkprof 0.1.0",
//!   "host": "worker-17",
//!   "start": "2026-11-22T05:00:00.000Z", "end": "...",
//!   "frequency_hz": 99,
//!   "stack_depth": 127,
//!   "stats": { "samples": 1234, "idle": 10, "filtered": 0, "dropped_count_map_full": 0,
//!              "user_stacks_lost": 0, "kernel_stacks_lost": 0 },
//!   "jit": { "jit_frames": 900, "jit_frames_named": 897, "perf_map_dumps": 4,
//!            "perf_map_dump_failures": 0 },
//!   "pipeline_cpu": { "drains": 60, "collect_us": 61000, "follow_us": 30000, "enrich_us": 17000,
//!                     "symbolize_us": 410000, "write_us": 50000 },
//!   "files": [
//!     { "path": "processes/java-4242.cpu.folded", "svg": "processes/java-4242.cpu.svg",
//!       "kind": "cpu", "samples": 900, "start": "...", "end": "...",
//!       "pid": 4242, "process": "java", "role": "other",
//!       "app_id": null, "executor_id": null, "stage_id": null, "processes": null }
//!   ]
//! }
//! ```
//! Paths are relative to the directory. Fields that do not apply are `null`.
//! New fields may be added; none is renamed or removed.

use std::{path::Path, time::SystemTime};

use serde::Serialize;

use super::ProfileKind;
use crate::{collect::KernelStats, runtime::RuntimeStats, sys::cpu::StageCpu};

/// Schema version of index.json.
pub const INDEX_VERSION: u32 = 1;

/// Facts about the whole recording.
#[derive(Debug, Clone, Serialize)]
pub struct Header {
    pub tool: String,
    pub host: String,
    pub frequency_hz: u64,
    pub stack_depth: u32,
    pub stats: KernelStats,
    /// `jit` and `threads`.
    #[serde(flatten)]
    pub runtimes: RuntimeStats,
    /// sparkprof's own CPU time by pipeline stage (see [`crate::sys::cpu`]).
    pub pipeline_cpu: StageCpu,
}

impl Header {
    /// What one on-CPU sample stands for.
    pub fn sample_period_ns(&self) -> u64 {
        1_000_000_000 / self.frequency_hz.max(1)
    }
}

/// Who a file is about.
pub struct GroupMeta {
    pub pid: Option<u32>,
    pub process: Option<String>,
    pub role: &'static str,
    pub app_id: Option<String>,
    pub executor_id: Option<String>,
    pub stage_id: Option<u64>,
    /// A `short-lived/` file: it counts the processes it sums.
    pub short_lived: bool,
}

/// One folded file.
#[derive(Debug, Clone, Serialize)]
pub struct FileEntry {
    pub path: String,
    pub svg: String,
    /// The same profile as gzipped pprof (see [`super::pprof`]).
    pub pprof: String,
    pub kind: ProfileKind,
    /// `samples` (on-CPU) or `microseconds` (off-CPU, wall-clock): what
    /// `samples` counts.
    pub unit: &'static str,
    pub samples: u64,
    pub start: String,
    pub end: String,
    pub pid: Option<u32>,
    pub process: Option<String>,
    pub role: &'static str,
    pub app_id: Option<String>,
    pub executor_id: Option<String>,
    pub stage_id: Option<u64>,
    /// In a `short-lived/` file: how many processes it sums (`null` in
    /// every other file, which holds one process or one group of threads).
    pub processes: Option<u64>,
    #[serde(skip)]
    start_time: Option<SystemTime>,
    #[serde(skip)]
    end_time: Option<SystemTime>,
}

impl FileEntry {
    pub(super) fn new(
        rel_path: &Path,
        kind: ProfileKind,
        meta: &GroupMeta,
        start: SystemTime,
        end: SystemTime,
    ) -> Self {
        Self {
            path: rel_path.display().to_string(),
            svg: rel_path.with_extension("svg").display().to_string(),
            pprof: super::pprof::twin_path(rel_path).display().to_string(),
            kind,
            unit: kind.unit(),
            samples: 0,
            start: timestamp(start),
            end: timestamp(end),
            pid: meta.pid,
            process: meta.process.clone(),
            role: meta.role,
            app_id: meta.app_id.clone(),
            executor_id: meta.executor_id.clone(),
            stage_id: meta.stage_id,
            processes: meta.short_lived.then_some(0),
            start_time: Some(start),
            end_time: Some(end),
        }
    }

    pub(super) fn extend_time(&mut self, start: SystemTime, end: SystemTime) {
        // Every sample of a drain brings the same times: formatted only
        // when they move the span.
        let start = self.start_time.map_or(start, |s| s.min(start));
        let end = self.end_time.map_or(end, |e| e.max(end));
        if self.start_time != Some(start) {
            self.start_time = Some(start);
            self.start = timestamp(start);
        }
        if self.end_time != Some(end) {
            self.end_time = Some(end);
            self.end = timestamp(end);
        }
    }

    /// When its first samples were counted.
    pub(super) fn start_time(&self) -> Option<SystemTime> {
        self.start_time
    }

    /// Takes in another file's samples and times, one more process.
    pub(super) fn absorb(&mut self, other: &FileEntry) {
        self.samples += other.samples;
        if let (Some(start), Some(end)) = (other.start_time, other.end_time) {
            self.extend_time(start, end);
        }
        if let Some(processes) = self.processes.as_mut() {
            *processes += 1;
        }
    }

    /// Title of the file's flame graph.
    pub fn title(&self) -> String {
        super::labels::FileLabels::of_entry("", 0, self).title(&self.path, self.processes)
    }
}

/// The whole index.
#[derive(Debug, Serialize)]
pub struct Index {
    pub version: u32,
    #[serde(flatten)]
    pub header: Header,
    pub start: Option<String>,
    pub end: Option<String>,
    /// Every line of every file listed, as one Parquet table (see
    /// [`super::table`]).
    pub samples_table: &'static str,
    pub files: Vec<FileEntry>,
}

impl Index {
    pub fn new(
        header: &Header,
        start: Option<SystemTime>,
        end: Option<SystemTime>,
        files: Vec<FileEntry>,
    ) -> Self {
        Self {
            version: INDEX_VERSION,
            header: header.clone(),
            start: start.map(timestamp),
            end: end.map(timestamp),
            samples_table: super::table::SAMPLES_TABLE,
            files,
        }
    }

    pub fn to_json(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec_pretty(self).expect("index serializes");
        bytes.push(b'\n');
        bytes
    }
}

/// RFC 3339 UTC with milliseconds.
pub fn timestamp(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}
