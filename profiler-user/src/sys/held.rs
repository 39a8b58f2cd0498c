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
