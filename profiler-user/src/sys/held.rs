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

/// Free memory the C heap keeps at its top before it gives it back to
/// the kernel, and the size from which an allocation gets pages of its own
/// (glibc's `M_TRIM_THRESHOLD` and `M_MMAP_THRESHOLD`).
const KEPT_FREE_HEAP: i32 = 16 << 20;
const OWN_PAGES_FROM: i32 = 8 << 20;

/// Keeps the C heap's free memory between drains, up to
/// [`KEPT_FREE_HEAP`]: each drain allocates what it names and writes and
/// frees it at its end, and glibc, left to itself, gave those pages back
/// (its top trimmed, its larger blocks unmapped) for the next drain to
/// fault in again: 4,160 page faults per testbed job (section 5's job,
/// `--off-cpu`), each a few µs on this kind of host; about 700 with this.
/// The daemon still gives every free page back once a window
/// ([`release_free_heap`]). Called once, at the start of the binary (a
/// setting of the whole process, not a library's to make). Whether the
/// allocator took both settings (it keeps its defaults for one it refuses).
pub fn keep_free_heap_between_drains() -> bool {
    // SAFETY: mallopt only sets the allocator's parameters; it returns 0
    // for a value it refuses, and leaves that one as it was.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, KEPT_FREE_HEAP) == 1
            && libc::mallopt(libc::M_MMAP_THRESHOLD, OWN_PAGES_FROM) == 1
    }
}

/// Gives the C heap's free memory back to the kernel (glibc's
/// `malloc_trim`, which also releases free pages inside its arenas). Called
/// once a window: a window's aggregates are freed when it is written, and
/// without this the allocator keeps their pages, so resident memory creeps
/// up while the heap in use stays flat.
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
    fn the_allocator_takes_the_heap_settings() {
        assert!(keep_free_heap_between_drains());
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
