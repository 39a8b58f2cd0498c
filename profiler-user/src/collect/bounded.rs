//! A cache of bounded size for what userspace keeps of the kernel's
//! stacks: two generations of at most `limit` entries each. A lookup that
//! hits the older generation moves the entry to the newer one; when the
//! newer one is full, the older one goes and the newer one becomes older.
//! So what was used within the last `limit` insertions stays, and memory
//! never exceeds two generations, however long the daemon runs.

use std::collections::HashMap;

#[derive(Debug)]
pub struct TwoGenerations<V> {
    current: HashMap<u64, V>,
    previous: HashMap<u64, V>,
    limit: usize,
}

impl<V> TwoGenerations<V> {
    pub fn new(limit: usize) -> Self {
        Self {
            current: HashMap::new(),
            previous: HashMap::new(),
            limit: limit.max(1),
        }
    }

    pub fn get(&mut self, key: u64) -> Option<&V> {
        if !self.current.contains_key(&key) {
            let value = self.previous.remove(&key)?;
            self.insert(key, value);
        }
        self.current.get(&key)
    }

    pub fn insert(&mut self, key: u64, value: V) {
        if self.current.len() >= self.limit && !self.current.contains_key(&key) {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(key, value);
    }

    /// Entries held (at most twice the limit).
    pub fn len(&self) -> usize {
        self.current.len() + self.previous.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_stays_within_two_generations_and_used_entries_stay() {
        let mut cache = TwoGenerations::new(100);
        cache.insert(0, "hot");
        for key in 1..10_000u64 {
            cache.insert(key, "cold");
            // A stack in use is looked up now and then: it stays.
            if key % 50 == 0 {
                assert_eq!(cache.get(0), Some(&"hot"), "at {key}");
            }
            assert!(cache.len() <= 200);
        }
        assert_eq!(cache.get(1), None, "long unused: gone");
        assert_eq!(cache.get(9_999), Some(&"cold"));
    }
}
