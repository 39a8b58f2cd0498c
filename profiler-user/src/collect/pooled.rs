//! Stacks the kernel files under a hash of their frames in one map per
//! buffer (the eBPF side's `hashed_stacks::Pooled`: the Python and HotSpot
//! stacks of on-CPU samples), taken out whole at a drain.

use std::collections::HashMap as StdHashMap;

use aya::{
    Ebpf, Pod,
    maps::{HashMap, MapData},
};
use tracing::debug;

use super::{CollectError, batch, take_map};

/// The two maps of one kind of pooled stack.
pub struct PooledStacks<V: Pod> {
    maps: [HashMap<MapData, u64, V>; 2],
    buffers: batch::BatchBuffers,
}

impl<V: Pod> PooledStacks<V> {
    /// Takes the maps named `names` (buffer 0, buffer 1).
    pub fn take(ebpf: &mut Ebpf, names: [&'static str; 2]) -> Result<Self, CollectError> {
        Ok(Self {
            maps: [take_map(ebpf, names[0])?, take_map(ebpf, names[1])?],
            buffers: batch::BatchBuffers::default(),
        })
    }

    /// Every stack of the `idle` buffer, by hash, made a `T`, each deleted
    /// from the map (a few batch calls: a lookup and a delete per stack
    /// were a third of sparkprof's `bpf` time on a Spark host). Not `used`
    /// (no program filed a stack in it): none, and the map is not walked.
    pub fn take_buffer<T>(
        &mut self,
        idle: usize,
        used: bool,
        convert: impl Fn(&V) -> T,
    ) -> Taken<T> {
        let mut stacks = StdHashMap::new();
        if used
            && let Err(err) =
                batch::take_each(&mut self.maps[idle], &mut self.buffers, |hash, stack| {
                    stacks.insert(hash, convert(&stack));
                })
        {
            debug!("taking pooled stacks failed: {err}");
        }
        Taken { stacks }
    }
}

/// One buffer's stacks, as a drain took them.
pub struct Taken<T> {
    stacks: StdHashMap<u64, T>,
}

impl<T> Taken<T> {
    /// Adds a stack filed elsewhere (a log) under `hash`.
    pub fn insert(&mut self, hash: u64, stack: T) {
        self.stacks.insert(hash, stack);
    }
}

impl<T: Clone> Taken<T> {
    /// The stack filed under `hash` (`0`: none).
    pub fn get(&self, hash: u64) -> Option<T> {
        if hash == 0 {
            return None;
        }
        self.stacks.get(&hash).cloned()
    }
}
