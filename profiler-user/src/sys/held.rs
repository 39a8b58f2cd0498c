//! What the daemon holds, counted: the entries of every table a stage
//! keeps between drains, and the C heap they live in. `status.json`
//! carries them each window, so that memory that grows can be traced to
//! the table that grows (the soak benchmark prints them over time).

use std::collections::BTreeMap;

/// Entries per table, by a stable name (`stage.table`).
#[derive(Debug, Default, Clone)]
pub struct Held(BTreeMap<&'static str, u64>);

impl Held {
    pub fn add(&mut self, table: &'static str, entries: usize) {
        *self.0.entry(table).or_default() += entries as u64;
    }

    pub fn into_map(self) -> BTreeMap<String, u64> {
        self.0
            .into_iter()
            .map(|(table, n)| (table.to_owned(), n))
            .collect()
    }
}

/// Bytes of the C heap in use by this process (allocated and not freed:
/// glibc's `mallinfo2`, arenas and mmapped blocks). Beside the resident
/// anonymous memory it tells a leak (this grows) from fragmentation (it
/// does not).
pub fn heap_in_use() -> u64 {
    // SAFETY: mallinfo2 only reads the allocator's statistics.
    let info = unsafe { libc::mallinfo2() };
    (info.uordblks + info.hblkhd) as u64
}

/// How much free memory the C heap keeps at its top before it gives any
/// back by itself (see [`keep_freed_heap`]).
const HEAP_KEPT: libc::c_int = 256 << 20;
/// The size from which a block is mapped on its own, outside the heap
/// (glibc's largest; see [`keep_freed_heap`]).
const HEAP_MMAP_FROM: libc::c_int = 32 << 20;

/// Lets the C heap keep what is freed for the next drain, instead of giving
/// it back to the kernel at once (glibc trims the heap's top past 128 KiB
/// free, and maps and unmaps every block from 128 KiB up): each drain
/// allocates and frees the same large tables and buffers again, and the
/// kernel zeroed the pages anew at every first write. perf of a fresh
/// `record` over the section-5 testbed job: page faults went from about
/// 1.1 % to 0.1 % of sparkprof's CPU (3.8 % to 0.8 % in a frame-pointer
/// build). What is freed still goes back, once a window
/// ([`release_free_heap`]).
/// Called once, first thing, by the binary.
pub fn keep_freed_heap() {
    // SAFETY: mallopt only sets the allocator's parameters; both values
    // are within glibc's bounds (the mmap threshold's is 32 MiB).
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, HEAP_KEPT);
        libc::mallopt(libc::M_MMAP_THRESHOLD, HEAP_MMAP_FROM);
    }
}

/// Gives the C heap's free memory back to the kernel (glibc's
/// `malloc_trim`, which also releases free pages inside its arenas). Called
/// once a window (and by `record` at each checkpoint): a window's
/// aggregates are freed when it is written, and without this the allocator
/// keeps their pages, so resident memory creeps up while the heap in use
/// stays flat.
pub fn release_free_heap() {
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe { libc::malloc_trim(0) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heap_in_use_sees_an_allocation() {
        // Other tests allocate and free beside it: a block far larger than
        // theirs.
        let before = heap_in_use();
        let block = std::hint::black_box(vec![1u8; 256 << 20]);
        let after = heap_in_use();
        assert!(after >= before + (200 << 20), "{before} -> {after}");
        drop(block);
    }

    #[test]
    fn tables_add_up() {
        let mut held = Held::default();
        held.add("a.x", 2);
        held.add("a.x", 3);
        held.add("b.y", 0);
        let map = held.into_map();
        assert_eq!(map["a.x"], 5);
        assert_eq!(map["b.y"], 0);
    }
}
