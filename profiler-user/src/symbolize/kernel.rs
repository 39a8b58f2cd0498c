//! Kernel frames, named from /proc/kallsyms through blazesym.

use std::{collections::HashMap, sync::Arc};

use blazesym::{
    MaybeDefault,
    symbolize::{
        Input, Symbolized, Symbolizer,
        source::{Kernel, Source},
    },
};
use tracing::debug;

/// Names kernel addresses; caches every answer (kernel text does not move).
pub struct KernelSymbolizer {
    symbolizer: Symbolizer,
    names: HashMap<u64, Arc<str>>,
}

impl KernelSymbolizer {
    pub fn new() -> Self {
        Self {
            symbolizer: Symbolizer::new(),
            names: HashMap::new(),
        }
    }

    /// Resolves the addresses not seen before.
    pub fn resolve(&mut self, addrs: &[u64]) {
        let mut todo: Vec<u64> = addrs
            .iter()
            .copied()
            .filter(|a| !self.names.contains_key(a))
            .collect();
        todo.sort_unstable();
        todo.dedup();
        if todo.is_empty() {
            return;
        }
        // kallsyms only: a vmlinux search of the file system would cost more
        // than it adds for function-level names.
        let source = Source::Kernel(Kernel {
            kallsyms: MaybeDefault::Default,
            vmlinux: MaybeDefault::None,
            kaslr_offset: Some(0),
            debug_syms: false,
            ..Default::default()
        });
        match self.symbolizer.symbolize(&source, Input::AbsAddr(&todo)) {
            Ok(results) => {
                for (addr, result) in todo.iter().zip(results) {
                    let name: Arc<str> = match result {
                        Symbolized::Sym(sym) => sym.name.as_ref().into(),
                        Symbolized::Unknown(_) => format!("[unknown kernel 0x{addr:x}]").into(),
                    };
                    self.names.insert(*addr, name);
                }
            }
            Err(err) => {
                debug!("kernel symbolization failed: {err}");
                for addr in todo {
                    self.names
                        .insert(addr, format!("[unknown kernel 0x{addr:x}]").into());
                }
            }
        }
    }

    /// The name of a resolved address.
    pub fn name(&self, addr: u64) -> Arc<str> {
        self.names
            .get(&addr)
            .cloned()
            .unwrap_or_else(|| "[unknown]".into())
    }
}

impl Default for KernelSymbolizer {
    fn default() -> Self {
        Self::new()
    }
}
