//! The room every process's [`CachedMemory`](super::CachedMemory) reads its
//! blocks into, in fixed chunks lent from one pool and given back when a
//! cache is cleared (once per drain) or dropped (the process exited).
//!
//! Why a pool: the first touch of a page the allocator had not used yet
//! costs a page fault and the kernel's zeroing of it (on this project's
//! virtual machine 1.3 µs for memory the guest used lately, 17 to 47 µs
//! for memory it had not touched lately). A buffer per process, grown by
//! doubling (each growth a copy into fresh pages) and freed when its JVM
//! exited, made a fresh sparkprof touch about 9 MiB of new pages per
//! testbed job for the blocks of its three new JVMs, where the heaviest
//! drain of that job needs about 3 MiB for all of them together. Lent
//! from one pool, that room is touched once and used again by every drain
//! and every JVM after: over a testbed job sparkprof's own page faults
//! fell from 7,250-8,560 to 6,260-6,600 and its CPU by about 4 %.

use std::{
    mem::MaybeUninit,
    sync::{Mutex, PoisonError},
};

/// Bytes of a chunk: a whole number of blocks, so a block never straddles
/// two, and small enough that a process reading a few blocks takes little.
pub(super) const CHUNK: usize = 64 * super::BLOCK as usize;

/// Chunks a pool keeps when they are given back (8 MiB): twice what one
/// process's cache holds at most, for two young executors naming their
/// first methods in the same drain. Past it, chunks given back are freed.
const KEPT_CHUNKS: usize = 2 * super::MAX_CACHED_BYTES / CHUNK;

/// A chunk of room. Not initialised when made: what is read from it is
/// only what the kernel wrote there first (see `Blocks`).
pub(super) type Chunk = Box<[MaybeUninit<u8>]>;

/// Chunks that no cache holds now.
#[derive(Debug)]
pub(super) struct Pool {
    free: Mutex<Vec<Chunk>>,
    keep: usize,
}

/// The pool every cache takes from (see the module's documentation).
pub(super) static SHARED: Pool = Pool::new(KEPT_CHUNKS);

impl Pool {
    pub(super) const fn new(keep: usize) -> Self {
        Self {
            free: Mutex::new(Vec::new()),
            keep,
        }
    }

    /// A chunk given back earlier, or a new one.
    pub(super) fn take(&self) -> Chunk {
        let given_back = self.lock().pop();
        given_back.unwrap_or_else(|| Box::new_uninit_slice(CHUNK))
    }

    /// Takes `chunks` back (leaving it empty), keeping as many as the pool
    /// keeps and freeing the rest.
    pub(super) fn give_back(&self, chunks: &mut Vec<Chunk>) {
        if chunks.is_empty() {
            return;
        }
        let mut free = self.lock();
        let room = self.keep.saturating_sub(free.len());
        free.extend(chunks.drain(..).take(room));
        // `drain` frees the chunks past `room` here.
    }

    /// Chunks kept now.
    #[cfg(test)]
    pub(super) fn kept(&self) -> usize {
        self.lock().len()
    }

    /// A cache's thread that panicked left nothing half-done here: a push
    /// or a pop of whole chunks.
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Chunk>> {
        self.free.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_given_back_are_taken_again_up_to_what_the_pool_keeps() {
        let pool = Pool::new(2);
        let mut held: Vec<Chunk> = (0..3).map(|_| pool.take()).collect();
        assert!(held.iter().all(|chunk| chunk.len() == CHUNK));
        let first = held[0].as_ptr();
        pool.give_back(&mut held);
        assert!(held.is_empty());
        // Two kept, the third freed.
        assert_eq!(pool.kept(), 2);
        let again = [pool.take(), pool.take()];
        assert!(again.iter().any(|chunk| chunk.as_ptr() == first));
        assert_eq!(pool.kept(), 0);
        // An empty pool makes new chunks.
        assert_eq!(pool.take().len(), CHUNK);
    }
}
