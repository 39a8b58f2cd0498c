//! `DIR/status.json`, rewritten at each window: what the daemon has done
//! and what it costs, for a person (`sparkprof status DIR`) or a monitor.

use std::{fs, io, path::Path, time::SystemTime};

use serde::{Deserialize, Serialize};

use procfs::WithCurrentSystemInfo as _;

use crate::{
    sys::{
        cpu::StageCpu,
        held::{Held, heap_in_use},
    },
    write::{atomic, index::timestamp},
};

/// The file's name in the daemon's directory.
pub const STATUS: &str = "status.json";

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Status {
    pub tool: String,
    pub pid: u32,
    /// RFC 3339 UTC.
    pub started: String,
    pub updated: String,
    pub window_seconds: u64,
    pub windows_written: u64,
    /// Windows not written because the disk was nearly full (their
    /// samples are counted in `samples_not_written`).
    pub windows_skipped: u64,
    pub last_window: Option<String>,
    /// On-CPU samples taken since the start (the kernel's count), those
    /// dropped (count map full), and those in windows not written.
    pub samples: u64,
    pub samples_dropped: u64,
    pub samples_not_written: u64,
    pub disk_used_bytes: u64,
    pub disk_limit_bytes: u64,
    pub rss_bytes: u64,
    /// Of the RSS: anonymous memory (heap, stacks), and of that the C
    /// heap in use (the rest is the allocator's free space).
    #[serde(default)]
    pub anon_bytes: u64,
    #[serde(default)]
    pub heap_in_use_bytes: u64,
    /// Entries of each table the pipeline keeps between drains (see
    /// `sys::held`): which one grows, if memory does.
    #[serde(default)]
    pub held: std::collections::BTreeMap<String, u64>,
    /// CPU time (user + system) since the start.
    pub cpu_seconds: f64,
    /// Of it, what each stage of the pipeline took (see `sys::cpu`): which
    /// one costs, if CPU does. The rest is between drains (file rewrites).
    #[serde(default)]
    pub cpu_by_stage: std::collections::BTreeMap<String, f64>,
    /// Windows and roll-ups removed by retention since the start.
    pub windows_removed: u64,
    pub rollups_removed: u64,
    pub applications_complete: u64,
}

impl Status {
    pub fn new(started: SystemTime, window_seconds: u64, disk_limit_bytes: u64) -> Self {
        Self {
            tool: format!("sparkprof {}", env!("CARGO_PKG_VERSION")),
            pid: std::process::id(),
            started: timestamp(started),
            updated: timestamp(started),
            window_seconds,
            disk_limit_bytes,
            ..Self::default()
        }
    }

    /// Fills in this process's own costs now (`cpu`: by pipeline stage),
    /// and what it holds.
    pub fn measure_self(&mut self, held: Held, cpu: &StageCpu) {
        self.updated = timestamp(SystemTime::now());
        self.held = held.into_map();
        self.cpu_by_stage = cpu.seconds_by_stage();
        self.heap_in_use_bytes = heap_in_use();
        if let Ok(me) = procfs::process::Process::myself()
            && let Ok(status) = me.status()
        {
            self.anon_bytes = status.rssanon.unwrap_or(0) << 10;
        }
        if let Ok(me) = procfs::process::Process::myself()
            && let Ok(stat) = me.stat()
        {
            self.rss_bytes = stat.rss_bytes().get();
            let ticks = procfs::ticks_per_second() as f64;
            self.cpu_seconds = (stat.utime + stat.stime) as f64 / ticks;
        }
    }

    pub fn write(&self, dir: &Path) -> io::Result<()> {
        let mut json = serde_json::to_vec_pretty(self).map_err(io::Error::other)?;
        json.push(b'\n');
        atomic::write_atomic(dir, Path::new(STATUS), &json)
    }

    pub fn read(dir: &Path) -> io::Result<Self> {
        serde_json::from_slice(&fs::read(dir.join(STATUS))?)
            .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))
    }

    /// For a person.
    pub fn render(&self) -> String {
        let mib = |bytes: u64| bytes as f64 / (1 << 20) as f64;
        format!(
            "{tool}, pid {pid}, running since {started} (updated {updated})\n\
             windows: {written} written every {window} s, {skipped} skipped (disk nearly full), \
             last {last}\n\
             samples: {samples} taken, {dropped} dropped, {unwritten} not written\n\
             disk: {used:.1} MiB of {limit:.1} MiB; retention removed {wr} windows and {rr} roll-ups\n\
             applications complete: {apps}\n\
             own cost: {rss:.1} MiB resident ({anon:.1} MiB anonymous, {heap:.1} MiB of heap in \
             use), {cpu:.1} s of CPU{stages}\n",
            tool = self.tool,
            pid = self.pid,
            started = self.started,
            updated = self.updated,
            written = self.windows_written,
            window = self.window_seconds,
            skipped = self.windows_skipped,
            last = self.last_window.as_deref().unwrap_or("none yet"),
            samples = self.samples,
            dropped = self.samples_dropped,
            unwritten = self.samples_not_written,
            used = mib(self.disk_used_bytes),
            limit = mib(self.disk_limit_bytes),
            wr = self.windows_removed,
            rr = self.rollups_removed,
            apps = self.applications_complete,
            rss = mib(self.rss_bytes),
            anon = mib(self.anon_bytes),
            heap = mib(self.heap_in_use_bytes),
            cpu = self.cpu_seconds,
            stages = self.stages(),
        )
    }

    /// The pipeline stages' CPU time, most first: ` (symbolize 3.1 s,
    /// collect 0.4 s, ...)`, or nothing before the first window.
    fn stages(&self) -> String {
        let mut stages: Vec<(&String, &f64)> = self.cpu_by_stage.iter().collect();
        if stages.is_empty() {
            return String::new();
        }
        stages.sort_by(|a, b| b.1.total_cmp(a.1));
        let stages: Vec<String> = stages
            .into_iter()
            .map(|(stage, seconds)| format!("{stage} {seconds:.1} s"))
            .collect();
        format!(" ({})", stages.join(", "))
    }
}
