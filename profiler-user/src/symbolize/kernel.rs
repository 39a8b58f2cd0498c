//! Kernel frames, named from /proc/kallsyms through blazesym.

use std::{collections::HashSet, sync::Arc};

use blazesym::{
    MaybeDefault,
    symbolize::{
        Input, Symbolized, Symbolizer,
        source::{Kernel, Source},
    },
};
use tracing::debug;

use crate::FastMap;

/// Kernel addresses whose names are kept; beyond, the cache starts over.
/// A host's kernel has some tens of thousands of call sites that show up
/// in stacks, so a daemon settles well below it.
const MAX_ADDRESSES: usize = 65_536;

/// Names kernel addresses; caches every answer (kernel text does not move),
/// one copy of each function's name shared by its addresses.
pub struct KernelSymbolizer {
    symbolizer: Symbolizer,
    names: FastMap<u64, Arc<str>>,
    functions: HashSet<Arc<str>>,
}

impl KernelSymbolizer {
    pub fn held(&self, held: &mut crate::sys::held::Held) {
        held.add("symbolize.kernel_addresses", self.names.len());
        held.add("symbolize.kernel_functions", self.functions.len());
    }

    pub fn new() -> Self {
        Self {
            symbolizer: Symbolizer::new(),
            names: FastMap::default(),
            functions: HashSet::new(),
        }
    }

    /// Reads the kernel's symbols now: a recording does it before it
    /// samples, not in its first drain (parsing `/proc/kallsyms` is tens of
    /// milliseconds of CPU, once per run).
    pub fn load(&mut self) {
        // No address is named 0; the lookup loads the symbols all the same.
        if let Err(err) = self.symbolizer.symbolize(&source(), Input::AbsAddr(&[0])) {
            debug!("loading kernel symbols failed: {err}");
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
        if self.names.len() + todo.len() > MAX_ADDRESSES {
            self.names.clear();
            self.functions.clear();
        }
        match self.symbolizer.symbolize(&source(), Input::AbsAddr(&todo)) {
            Ok(results) => {
                for (addr, result) in todo.iter().zip(results) {
                    let name: Arc<str> = match result {
                        Symbolized::Sym(sym) => crate::intern(&mut self.functions, &sym.name),
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

/// kallsyms only: a vmlinux search of the file system would cost more
/// than it adds for function-level names.
fn source() -> Source<'static> {
    Source::Kernel(Kernel {
        kallsyms: MaybeDefault::Default,
        vmlinux: MaybeDefault::None,
        kaslr_offset: Some(0),
        debug_syms: false,
        ..Default::default()
    })
}

impl Default for KernelSymbolizer {
    fn default() -> Self {
        Self::new()
    }
}
