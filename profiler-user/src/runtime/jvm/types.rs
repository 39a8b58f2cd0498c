//! Options of the JVM runtime, and statistics of JIT symbolization.

use std::{path::PathBuf, time::Duration};

use perf_maps::NameStyle;
use serde::Serialize;

/// What sparkprof does with JVMs.
#[derive(Debug, Clone)]
pub struct JvmOptions {
    /// How their JIT frames are named.
    pub jit: JitOptions,
    /// Full thread names from the rename uprobe where possible (else only
    /// from the tracepoint and thread dumps).
    pub rename_uprobe: bool,
    /// Walk Java frames in the kernel from HotSpot's own structures where
    /// they can be read (else frame pointers and perf maps only).
    pub walk: bool,
}

impl Default for JvmOptions {
    fn default() -> Self {
        Self {
            jit: JitOptions::default(),
            rename_uprobe: true,
            walk: true,
        }
    }
}

/// How sparkprof keeps JVMs' perf maps current.
#[derive(Debug, Clone)]
pub struct JitOptions {
    /// Ask JVMs (17+) to write their perf map through the attach mechanism.
    /// Off: only maps that are already there are read.
    pub attach: bool,
    /// Keep the maps that sparkprof caused to be written after the recording.
    pub keep_maps: bool,
    /// Readable `pkg.Class.method` names, or the JDK's full signatures.
    pub name_style: NameStyle,
    /// Never ask one JVM twice within this interval (less 0.1 s for the
    /// jitter of the drain tick: with the default 1 s drains, a JVM whose
    /// code keeps changing can be asked once per drain).
    pub min_dump_interval: Duration,
    /// While a JVM's compiler threads are busy (code cache churn), refresh
    /// its map at least this often.
    pub churn_dump_interval: Duration,
    /// Refresh a JVM's map at least this often while its JIT code is sampled.
    pub max_map_age: Duration,
    /// Share of wall time one JVM may spend writing perf maps for sparkprof:
    /// after a dump that took `d`, the next waits at least `d / dump_budget`
    /// (the final dump of a recording aside). `Compiler.perfmap` rewrites the
    /// whole code cache map, a fraction of a second of CPU for a Spark
    /// executor, which refreshing every second made a Spark job measurably
    /// slower.
    pub dump_budget: f64,
    /// Append one line per distinct (drain, pid, address) of JIT code to
    /// this file: the name given and the drain's time window (hidden
    /// `--jit-audit`; see [`super::audit`]). For the benchmark.
    pub audit: Option<PathBuf>,
}

impl Default for JitOptions {
    fn default() -> Self {
        Self {
            attach: true,
            keep_maps: false,
            name_style: NameStyle::Readable,
            min_dump_interval: Duration::from_secs(1),
            churn_dump_interval: Duration::from_secs(3),
            max_map_age: Duration::from_secs(20),
            dump_budget: 0.01,
            audit: None,
        }
    }
}

/// JIT symbolization statistics over a recording (frames weighted by
/// sample count), reported in index.json.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct JitStats {
    /// Frames in a JVM's anonymous executable memory (its code cache).
    pub jit_frames: u64,
    /// Of those, frames named (from HotSpot's structures or a perf map).
    pub jit_frames_named: u64,
    /// Of `jit_frames`, Java frames (interpreted, compiled or VM stubs) of
    /// stacks the kernel walked through HotSpot's structures.
    pub java_frames_walked: u64,
    /// `Compiler.perfmap` requests that succeeded.
    pub perf_map_dumps: u64,
    /// Requests that failed (the JVM refused, exited, or timed out).
    pub perf_map_dump_failures: u64,
}
