//! Stacks the kernel files under a hash of their frames in one map per
//! buffer (the eBPF side's `hashed_stacks::Pooled`: the Python and HotSpot
//! stacks of on-CPU samples), read at a drain and then cleared.

use aya::{
    Ebpf, Pod,
    maps::{HashMap, MapData},
};
use tracing::debug;

use super::{CollectError, take_map};

/// The two maps of one kind of pooled stack.
pub struct PooledStacks<V: Pod> {
    maps: [HashMap<MapData, u64, V>; 2],
}

impl<V: Pod> PooledStacks<V> {
    /// Takes the maps named `names` (buffer 0, buffer 1).
    pub fn take(ebpf: &mut Ebpf, names: [&'static str; 2]) -> Result<Self, CollectError> {
        Ok(Self {
            maps: [take_map(ebpf, names[0])?, take_map(ebpf, names[1])?],
        })
    }

    /// The stack filed under `hash` in the `idle` buffer (`0`: none).
    pub fn get(&self, idle: usize, hash: u64) -> Option<V> {
        if hash == 0 {
            return None;
        }
        self.maps[idle]
            .get(&hash, 0)
            .map_err(|err| debug!(hash, "stack lookup failed: {err}"))
            .ok()
    }

    /// Empties the `idle` buffer's map after a drain.
    pub fn clear(&mut self, idle: usize) {
        let keys: Vec<u64> = self.maps[idle].keys().filter_map(Result::ok).collect();
        for key in keys {
            let _ = self.maps[idle].remove(&key);
        }
    }
}
