//! JIT-compiled Java frames, named from the JVM's perf map.
//!
//! Shaped like the other symbol sources: [`types`] (options, statistics),
//! [`resolver`] (one JVM's map and its refresh policy), and this module,
//! which serves the symbolize stage: per drain it takes each JVM's sampled
//! code-cache addresses, asks the JVMs that need it for a fresh map (in
//! parallel: each request blocks on the JVM for a fraction of a second),
//! and then names the addresses against the refreshed maps.

pub mod resolver;
pub mod types;

use std::{collections::HashMap, sync::Arc};

use resolver::{DumpReasons, JvmResolver};
pub use types::{JitOptions, JitStats};

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
}

impl JitSymbolizer {
    pub fn new(options: JitOptions) -> Self {
        Self {
            options,
            jvms: HashMap::new(),
            names: HashMap::new(),
            stats: JitStats::default(),
        }
    }

    fn key(process: &ProcessInfo) -> ProcessKey {
        (process.pid, process.start_ticks)
    }

    /// Refreshes the maps that need it and names this drain's JIT addresses.
    pub fn resolve(&mut self, batches: &[JitBatch], final_pass: bool) {
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
    }

    /// The name of a JIT address of this drain, if its JVM's map has it.
    pub fn name(&self, process: &ProcessInfo, addr: u64) -> Option<Arc<str>> {
        self.names.get(&(Self::key(process), addr)).cloned()
    }

    /// Counts a JIT frame (weighted by its sample count) for the statistics.
    pub fn count_frame(&mut self, named: bool, samples: u64) {
        self.stats.jit_frames += samples;
        if named {
            self.stats.jit_frames_named += samples;
        }
    }

    pub fn stats(&self) -> JitStats {
        self.stats
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
        if !self.options.keep_maps {
            for resolver in self.jvms.values() {
                resolver.remove_created_map();
            }
        }
    }
}
