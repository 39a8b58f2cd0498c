//! Stacks filed in a map under a hash of their frames (FNV-1a), as the
//! off-CPU program and the Python walker keep them: equal stacks share one
//! entry, and the key is what the count maps carry.
//!
//! Two ways to file them ([`StackSink`]):
//! - [`Pooled`]: a hash map that userspace clears at every drain (the
//!   on-CPU Python stacks, one map per buffer). Full: the stack is lost and
//!   counted.
//! - [`Announced`]: the off-CPU stacks, which a thread may hold for as long
//!   as it waits, so no drain can clear them. Each new stack is sent to
//!   userspace through a ring buffer when it is first filed, and the map
//!   (least recently used evicted) only spares sending it again: a full
//!   map evicts an old entry instead of losing the new stack, and userspace
//!   has every stack a count can name. Only a full ring loses one, and then
//!   the key is [`STACK_LOST`], which userspace shows as lost.

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::generated::bpf_probe_read_kernel,
    maps::{HashMap, LruHashMap, RingBuf},
};
use profiler_common::{NewStack, STACK_LOST};

use crate::stats::count_stat;

/// FNV-1a's starting value.
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// `hash` with one more 64-bit word folded in.
#[inline(always)]
pub fn fnv(hash: u64, word: u64) -> u64 {
    (hash ^ word).wrapping_mul(FNV_PRIME)
}

/// Somewhere to file a stack under its hash.
pub trait StackSink<V> {
    /// Files `value` under `hash`; returns the key the counts carry (`0`
    /// is "no stack", [`STACK_LOST`] "lost").
    fn file(&self, hash: u64, value: &V) -> u64;
}

/// A key for `hash` that is neither "no stack" nor "lost".
#[inline(always)]
pub fn key(hash: u64) -> u64 {
    hash.clamp(1, STACK_LOST - 1)
}

/// A map cleared at every drain (see the module documentation).
pub struct Pooled<'a, V: 'static> {
    pub map: &'a HashMap<u64, V>,
    pub lost_stat: u32,
}

impl<V> StackSink<V> for Pooled<'_, V> {
    #[inline(always)]
    fn file(&self, hash: u64, value: &V) -> u64 {
        let hash = key(hash);
        if unsafe { self.map.get(&hash) }.is_some() {
            return hash;
        }
        if self.map.insert(&hash, value, BPF_NOEXIST as u64).is_err() {
            count_stat(self.lost_stat);
            return 0;
        }
        hash
    }
}

/// An LRU map that spares re-sending, and a ring every new stack goes
/// through (see the module documentation).
pub struct Announced<'a, V: 'static> {
    pub map: &'a LruHashMap<u64, V>,
    pub ring: &'a RingBuf,
    pub lost_stat: u32,
}

impl<V> StackSink<V> for Announced<'_, V> {
    #[inline(always)]
    fn file(&self, hash: u64, value: &V) -> u64 {
        let hash = key(hash);
        if unsafe { self.map.get(&hash) }.is_some() {
            return hash;
        }
        let Some(mut entry) = self.ring.reserve::<NewStack<V>>(0) else {
            count_stat(self.lost_stat);
            return STACK_LOST;
        };
        let record = entry.as_mut_ptr();
        let copied = unsafe {
            (*record).hash = hash;
            bpf_probe_read_kernel(
                core::ptr::addr_of_mut!((*record).stack).cast(),
                core::mem::size_of::<V>() as u32,
                (value as *const V).cast(),
            )
        };
        if copied != 0 {
            entry.discard(0);
            count_stat(self.lost_stat);
            return STACK_LOST;
        }
        entry.submit(0);
        // Least recently used entries make room: userspace has them.
        let _ = self.map.insert(&hash, value, 0);
        hash
    }
}
