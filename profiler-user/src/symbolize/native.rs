//! Native user frames (executables and shared libraries), named through
//! blazesym.
//!
//! blazesym reads binaries through /proc/PID/map_files, so binaries inside
//! containers and files deleted since they were mapped still resolve.
//! Addresses no ELF symbol covers fall back to `module+0xoffset` from the
//! process's mappings ([`super::proc_maps`]).

use std::{collections::HashMap, sync::Arc};

use blazesym::{
    Pid,
    symbolize::{
        Input, Symbolized, Symbolizer,
        source::{Process, Source},
    },
};
use tracing::debug;

use super::proc_maps::ProcMaps;
use crate::enrich::ProcessInfo;

type ProcessKey = (u32, u64);

/// Names user addresses per process, with a per-process cache.
pub struct NativeSymbolizer {
    symbolizer: Symbolizer,
    names: HashMap<ProcessKey, HashMap<u64, Arc<str>>>,
}

impl Default for NativeSymbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl NativeSymbolizer {
    pub fn new() -> Self {
        Self {
            symbolizer: Symbolizer::new(),
            names: HashMap::new(),
        }
    }

    fn key(process: &ProcessInfo) -> ProcessKey {
        (process.pid, process.start_ticks)
    }

    /// Resolves the addresses of `process` not seen before.
    pub fn resolve(&mut self, process: &ProcessInfo, addrs: &[u64]) {
        let cache = self.names.entry(Self::key(process)).or_default();
        let mut todo: Vec<u64> = addrs
            .iter()
            .copied()
            .filter(|a| !cache.contains_key(a))
            .collect();
        todo.sort_unstable();
        todo.dedup();
        if todo.is_empty() {
            return;
        }
        let mut source = Process::new(Pid::from(process.pid));
        // ELF symbols only: DWARF parsing of large binaries costs seconds and
        // hundreds of MiB; perf maps are read by our own JIT resolver.
        source.debug_syms = false;
        source.perf_map = false;
        source.map_files = true;
        let source = Source::Process(source);
        let results = match self.symbolizer.symbolize(&source, Input::AbsAddr(&todo)) {
            Ok(results) => results.into_iter().map(|r| sym_name(&r)).collect(),
            Err(err) => {
                debug!(pid = process.pid, "symbolization failed: {err}");
                vec![None; todo.len()]
            }
        };
        let mut maps: Option<ProcMaps> = None;
        for (addr, name) in todo.into_iter().zip(results) {
            let name = name.unwrap_or_else(|| {
                let maps =
                    maps.get_or_insert_with(|| ProcMaps::read(process.pid).unwrap_or_default());
                maps.describe(addr).into()
            });
            cache.insert(addr, name);
        }
    }

    /// The name of a resolved address.
    pub fn name(&self, process: &ProcessInfo, addr: u64) -> Arc<str> {
        self.names
            .get(&Self::key(process))
            .and_then(|names| names.get(&addr))
            .cloned()
            .unwrap_or_else(|| "[unknown]".into())
    }

    /// Drops everything cached for an exited process.
    pub fn evict(&mut self, process: &ProcessInfo) {
        self.names.remove(&Self::key(process));
        let evict = blazesym::symbolize::evict::Evict::Process(
            blazesym::symbolize::evict::Process::new(Pid::from(process.pid)),
        );
        if let Err(err) = self.symbolizer.evict(&evict) {
            debug!(pid = process.pid, "evict failed: {err}");
        }
    }
}

fn sym_name(result: &Symbolized<'_>) -> Option<Arc<str>> {
    match result {
        Symbolized::Sym(sym) => Some(sym.name.as_ref().into()),
        Symbolized::Unknown(_) => None,
    }
}
