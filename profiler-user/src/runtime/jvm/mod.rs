//! The HotSpot JVM runtime: JIT-compiled Java frames, named from the JVM's
//! perf map, and the JVM's full thread names ([`thread_names`]).
//! [`follow::JvmRuntime`] holds every JVM through its life (see
//! [`crate::runtime`]).
//!
//! [`types`] (options, statistics), [`resolver`] (one JVM's map and its
//! refresh policy), and this module's [`JitSymbolizer`]: per drain it takes each JVM's sampled
//! code-cache addresses, asks the JVMs that need it for a fresh map (in
//! parallel: each request blocks on the JVM for a fraction of a second),
//! and then names the addresses against the refreshed maps.
//!
//! With [`JitOptions::audit`] set, every JIT frame named is also written to
//! an audit file (see [`audit`]), so that a benchmark can check the names
//! against what the JVM had at those addresses at the time.

pub mod follow;
pub mod hotspot;
pub mod resolver;
pub mod thread_names;
pub mod types;

use std::{cell::Cell, collections::HashMap, sync::Arc};

pub use follow::{JavaWalk, JvmRuntime};
use resolver::{DumpReasons, JvmResolver};
pub use types::{JitOptions, JitStats, JvmOptions};

use crate::enrich::ProcessInfo;

type ProcessKey = (u32, u64);

/// The sampled code-cache addresses of one JVM in one drain.
pub struct JitBatch {
    pub process: Arc<ProcessInfo>,
    pub addrs: Vec<u64>,
    /// The JVM's compiler threads were sampled: its code cache is changing.
    pub compiling: bool,
}

/// JIT symbolization for every JVM on the host.
pub struct JitSymbolizer {
    options: JitOptions,
    jvms: HashMap<ProcessKey, JvmResolver>,
    /// Names of this drain's JIT addresses; replaced every drain.
    names: HashMap<(ProcessKey, u64), Arc<str>>,
    stats: JitStats,
    /// The audit trail, if asked for.
    audit: Option<audit::Audit>,
    /// The address of the last [`name`](Self::name) call, which the
    /// following [`count_frame`](Self::count_frame) counts (for the audit).
    last_named: Cell<Option<(ProcessKey, u64)>>,
}

impl JitSymbolizer {
    pub fn held(&self, held: &mut crate::sys::held::Held) {
        held.add("jvm.perf_map_jvms", self.jvms.len());
    }

    pub fn new(options: JitOptions) -> Self {
        let audit = options.audit.as_deref().and_then(audit::Audit::open);
        Self {
            options,
            jvms: HashMap::new(),
            names: HashMap::new(),
            stats: JitStats::default(),
            audit,
            last_named: Cell::new(None),
        }
    }

    fn key(process: &ProcessInfo) -> ProcessKey {
        (process.pid, process.start_ticks)
    }

    /// Refreshes the maps that need it and names this drain's JIT addresses.
    pub fn resolve(&mut self, batches: &[JitBatch], final_pass: bool) {
        if let Some(audit) = self.audit.as_mut() {
            audit.next_drain();
        }
        self.names.clear();
        let mut wanted = Vec::new();
        for batch in batches {
            let key = Self::key(&batch.process);
            let options = &self.options;
            let resolver = self
                .jvms
                .entry(key)
                .or_insert_with(|| JvmResolver::new(&batch.process, options));
            resolver.refresh();
            let unresolved = batch
                .addrs
                .iter()
                .filter(|&&a| resolver.lookup(a).is_none())
                .count();
            let reasons = DumpReasons {
                unresolved,
                compiling: batch.compiling,
                final_pass,
            };
            if resolver.wants_dump(reasons, &self.options) {
                wanted.push(key);
            }
        }

        // Ask every JVM that needs it at once, then re-read their maps.
        let mut dumped = Vec::new();
        std::thread::scope(|scope| {
            let handles: Vec<_> = self
                .jvms
                .iter_mut()
                .filter(|(key, _)| wanted.contains(key))
                .map(|(key, resolver)| (*key, scope.spawn(move || resolver.dump())))
                .collect();
            for (key, handle) in handles {
                dumped.push((key, handle.join().unwrap_or(false)));
            }
        });
        for (key, ok) in dumped {
            if ok {
                self.stats.perf_map_dumps += 1;
                if let Some(resolver) = self.jvms.get_mut(&key) {
                    resolver.refresh();
                }
            } else {
                self.stats.perf_map_dump_failures += 1;
            }
        }

        for batch in batches {
            let key = Self::key(&batch.process);
            let Some(resolver) = self.jvms.get(&key) else {
                continue;
            };
            for &addr in &batch.addrs {
                if let Some(name) = resolver.lookup(addr) {
                    self.names.insert((key, addr), name);
                }
            }
        }
        if let Some(audit) = self.audit.as_mut() {
            audit.resolved();
        }
    }

    /// The name of a JIT address of this drain, if its JVM's map has it.
    pub fn name(&self, process: &ProcessInfo, addr: u64) -> Option<Arc<str>> {
        if self.audit.is_some() {
            self.last_named.set(Some((Self::key(process), addr)));
        }
        self.names.get(&(Self::key(process), addr)).cloned()
    }

    /// Counts a Java frame of a walked JVM stack (weighted by its sample
    /// count), named from HotSpot's structures, for the statistics.
    pub fn count_walked_frame(&mut self, named: bool, samples: u64) {
        self.stats.jit_frames += samples;
        self.stats.java_frames_walked += samples;
        if named {
            self.stats.jit_frames_named += samples;
        }
    }

    /// Counts a JIT frame (weighted by its sample count) for the statistics;
    /// the frame is the one [`name`](Self::name) was last asked for.
    pub fn count_frame(&mut self, named: bool, samples: u64) {
        self.stats.jit_frames += samples;
        if named {
            self.stats.jit_frames_named += samples;
        }
        if let Some(audit) = self.audit.as_mut()
            && let Some((key, addr)) = self.last_named.take()
        {
            audit.count(key.0, addr, samples, self.names.get(&(key, addr)));
        }
    }

    pub fn stats(&self) -> JitStats {
        self.stats
    }

    /// The perf maps sparkprof caused JVMs to write and will remove (unless
    /// told to keep them).
    pub fn created_maps(&self) -> Vec<std::path::PathBuf> {
        if self.options.keep_maps {
            return Vec::new();
        }
        let mut maps: Vec<_> = self
            .jvms
            .values()
            .filter_map(JvmResolver::created_map)
            .collect();
        maps.sort();
        maps
    }

    /// Forgets an exited JVM, removing the map sparkprof caused it to write.
    pub fn evict(&mut self, process: &ProcessInfo) {
        if let Some(resolver) = self.jvms.remove(&Self::key(process))
            && !self.options.keep_maps
        {
            resolver.remove_created_map();
        }
    }

    /// End of the recording: removes the maps sparkprof caused to be written
    /// (unless told to keep them).
    pub fn finish(&mut self) {
        if let Some(audit) = self.audit.as_mut() {
            audit.next_drain();
        }
        if !self.options.keep_maps {
            for resolver in self.jvms.values() {
                resolver.remove_created_map();
            }
        }
    }
}

/// The audit trail of JIT names (hidden option `sparkprof record
/// --jit-audit FILE`), written for `cargo xtask bench --only jit`, which
/// compares each name with the method the JVM had compiled at that address
/// at the time (`jcmd Compiler.codelist` snapshots).
///
/// The file gets one tab-separated line per distinct (drain, pid, address)
/// of a JIT frame, after a `#` header line:
///
/// ```text
/// window_start_ns  window_end_ns  pid  address  samples  name
/// 1795000000000000000  1795000002100000000  4242  0x7f0450efd7a3  3  ZqGen0046.stageC
/// ```
///
/// - `window_start_ns`, `window_end_ns`: Unix time in ns; every sample of the
///   drain was taken inside this window. The JIT symbolizer does not see the
///   drain's own times, so the window is conservative: it starts when the
///   symbolizer finished the drain before the previous one (the previous
///   drain was collected after that; for the first two drains: when
///   sparkprof started) and ends when this drain's names were resolved.
///   It is therefore about two drain intervals long.
/// - `address`: as looked up (a caller's return address minus one).
/// - `samples`: samples of the drain with this frame, counted once per
///   occurrence in a stack (like `jit_frames` in index.json).
/// - `name`: the name given, or `[unknown]`.
///
/// The file is appended to; errors are logged once and end the audit, never
/// the recording.
pub mod audit {
    use std::{
        collections::BTreeMap,
        fs::File,
        io::{BufWriter, Write as _},
        path::Path,
        sync::Arc,
        time::{SystemTime, UNIX_EPOCH},
    };

    use tracing::warn;

    /// Samples and name of each (pid, address) of a drain.
    type Frames = BTreeMap<(u32, u64), (u64, Option<Arc<str>>)>;

    /// See the [module documentation](self).
    pub struct Audit {
        out: Option<BufWriter<File>>,
        /// Lower bound of the current drain's samples.
        window_start: u64,
        /// When the previous drain's names were resolved: the lower bound
        /// of the drain after the current one.
        previous_resolved: u64,
        resolved_at: u64,
        frames: Frames,
    }

    impl Audit {
        /// Opens `path` for appending; `None` (logged) if it cannot.
        pub fn open(path: &Path) -> Option<Self> {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path);
            match file {
                Ok(file) => {
                    let mut out = BufWriter::new(file);
                    let _ = writeln!(
                        out,
                        "# window_start_ns\twindow_end_ns\tpid\taddress\tsamples\tname"
                    );
                    let started = process_start_ns().unwrap_or(0);
                    Some(Self {
                        out: Some(out),
                        window_start: started,
                        previous_resolved: started,
                        resolved_at: started,
                        frames: BTreeMap::new(),
                    })
                }
                Err(err) => {
                    warn!("JIT audit file {} not written: {err}", path.display());
                    None
                }
            }
        }

        /// A drain's names are resolved: its window ends now.
        pub fn resolved(&mut self) {
            self.resolved_at = unix_ns(SystemTime::now());
        }

        /// Counts one frame of the current drain.
        pub fn count(&mut self, pid: u32, addr: u64, samples: u64, name: Option<&Arc<str>>) {
            let entry = self
                .frames
                .entry((pid, addr))
                .or_insert_with(|| (0, name.cloned()));
            entry.0 += samples;
        }

        /// Writes the current drain's frames and starts the next drain.
        pub fn next_drain(&mut self) {
            let frames = std::mem::take(&mut self.frames);
            if let Some(out) = self.out.as_mut() {
                let (start, end) = (self.window_start, self.resolved_at);
                let written: std::io::Result<()> = frames
                    .iter()
                    .try_for_each(|((pid, addr), (samples, name))| {
                        let name = name.as_deref().unwrap_or("[unknown]");
                        writeln!(out, "{start}\t{end}\t{pid}\t{addr:#x}\t{samples}\t{name}")
                    })
                    .and_then(|()| out.flush());
                if let Err(err) = written {
                    warn!("JIT audit stopped: {err}");
                    self.out = None;
                }
            }
            // The next drain was collected after this one's names were
            // resolved, so after the previous one's.
            self.window_start = self.previous_resolved;
            self.previous_resolved = self.resolved_at;
        }
    }

    fn unix_ns(time: SystemTime) -> u64 {
        time.duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    /// When this process started (a lower bound of every sample).
    fn process_start_ns() -> Option<u64> {
        let stat = crate::sys::proc::stat(std::process::id()).ok()?;
        crate::sys::proc::started_at(stat.start_ticks).map(unix_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::audit::Audit;
    use std::sync::Arc;

    fn lines(path: &std::path::Path) -> Vec<Vec<String>> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split('\t').map(str::to_owned).collect())
            .collect()
    }

    #[test]
    fn audit_lines_carry_a_window_that_contains_the_drain() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.tsv");
        let mut audit = Audit::open(&path).unwrap();
        let name: Arc<str> = Arc::from("ZqGen0001.run");
        // Drain 0.
        audit.next_drain();
        audit.resolved();
        audit.count(7, 0x1000, 2, Some(&name));
        audit.count(7, 0x1000, 1, Some(&name));
        audit.count(7, 0x2000, 1, None);
        // Drain 1: writes drain 0.
        audit.next_drain();
        audit.resolved();
        audit.count(7, 0x1000, 5, Some(&name));
        // Drain 2: writes drain 1.
        audit.next_drain();
        audit.resolved();
        audit.count(7, 0x3000, 1, None);
        // End: writes drain 2.
        audit.next_drain();
        let lines = lines(&path);
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0][2..], ["7", "0x1000", "3", "ZqGen0001.run"]);
        assert_eq!(lines[1][2..], ["7", "0x2000", "1", "[unknown]"]);
        assert_eq!(lines[2][2..], ["7", "0x1000", "5", "ZqGen0001.run"]);
        let window =
            |l: &Vec<String>| -> (u64, u64) { (l[0].parse().unwrap(), l[1].parse().unwrap()) };
        let (d0, d1, d2) = (window(&lines[0]), window(&lines[2]), window(&lines[3]));
        // Drains 0 and 1 start at the process start; drain 2 where drain 0
        // was resolved; every window ends where its drain was resolved.
        assert_eq!(d0.0, d1.0);
        assert_eq!(d2.0, d0.1);
        assert!(d0.0 <= d0.1 && d0.1 <= d1.1 && d1.1 <= d2.1);
        assert!(d2.0 < d2.1);
    }
}
