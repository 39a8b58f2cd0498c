//! A cache of bounded size for what userspace keeps of the kernel's
//! stacks: two generations of at most `limit` entries each. A lookup that
//! hits the older generation moves the entry to the newer one; when the
//! newer one is full, or older than `max_age`, the older one goes and the
//! newer one becomes older. So what was used within the last `limit`
//! insertions and the last `max_age` stays, memory never exceeds two
//! generations however long the daemon runs, and stacks no one uses any
//! more (those of exited processes) go within twice `max_age`, long before
//! a busy host would fill the generations.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

#[derive(Debug)]
pub struct TwoGenerations<V> {
    current: HashMap<u64, V>,
    previous: HashMap<u64, V>,
    limit: usize,
    max_age: Duration,
    /// When `current` started.
    started: Instant,
}

impl<V> TwoGenerations<V> {
    pub fn new(limit: usize, max_age: Duration) -> Self {
        Self {
            current: HashMap::new(),
            previous: HashMap::new(),
            limit: limit.max(1),
            max_age,
            started: Instant::now(),
        }
    }

    /// Starts a new generation if the current one is older than `max_age`.
    pub fn expire(&mut self, now: Instant) {
        if now.saturating_duration_since(self.started) >= self.max_age {
            self.rotate(now);
        }
    }

    fn rotate(&mut self, now: Instant) {
        self.previous = std::mem::take(&mut self.current);
        self.started = now;
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
            self.rotate(Instant::now());
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
        let mut cache = TwoGenerations::new(100, Duration::from_secs(3600));
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

    #[test]
    fn unused_entries_go_after_two_ages() {
        let age = Duration::from_secs(60);
        let mut cache = TwoGenerations::new(1_000, age);
        let start = Instant::now();
        cache.insert(1, "used");
        cache.insert(2, "unused");
        cache.expire(start + age);
        assert_eq!(cache.len(), 2, "one age: still there");
        assert_eq!(cache.get(1), Some(&"used"));
        cache.expire(start + 2 * age);
        assert_eq!(cache.get(2), None, "unused for two ages: gone");
        assert_eq!(
            cache.get(1),
            Some(&"used"),
            "used within the last age: kept"
        );
        cache.expire(start + 4 * age);
        cache.expire(start + 6 * age);
        assert!(cache.is_empty());
    }
}
