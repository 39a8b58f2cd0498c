//! Stacks filed in a hash map under a hash of their frames (FNV-1a), as
//! the off-CPU program and the Python walker keep them: equal stacks share
//! one entry, and the key is what the count maps carry.

use aya_ebpf::{bindings::BPF_NOEXIST, maps::HashMap};

use crate::stats::count_stat;

/// FNV-1a's starting value.
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// `hash` with one more 64-bit word folded in.
#[inline(always)]
pub fn fnv(hash: u64, word: u64) -> u64 {
    (hash ^ word).wrapping_mul(FNV_PRIME)
}

/// Files `value` under `hash` (never `0`: that means "no stack") unless a
/// stack is there already; returns the key, or `0` and counts `lost_stat`
/// if the map is full.
#[inline(always)]
pub fn store<V>(map: &HashMap<u64, V>, hash: u64, value: &V, lost_stat: u32) -> u64 {
    let hash = hash.max(1);
    if unsafe { map.get(&hash) }.is_some() {
        return hash;
    }
    if map.insert(&hash, value, BPF_NOEXIST as u64).is_err() {
        count_stat(lost_stat);
        return 0;
    }
    hash
}
