//! Off-CPU counts held in userspace for a few drains before they go down
//! the pipeline.
//!
//! Why: a thread that waits waits in the same place drain after drain (a
//! pool's idle threads, an executor's heartbeat, a task thread blocked on
//! a shuffle read). Over a testbed Spark job 83 % of the off-CPU entries of
//! a drain repeated an earlier drain's, and each was tagged, named and
//! filed again every drain: that was most of what `--off-cpu` added to
//! sparkprof's CPU on a Spark host. Held for [`HOLD`], a wait that repeats
//! is one entry, its time summed, tagged, named and filed once.
//!
//! What is held must not outlive what names it. The caller releases it
//! ([`super::Collector::release_off_cpu`]) for a drain that may report a
//! process exited (whose caches go with the report), in one more drain
//! when a daemon window closes (every sample counted in it is in it), and
//! at the end; and the thread-name history keeps every name from the
//! start of what is held ([`super::Drain::held_since`]).

use std::time::{Duration, SystemTime};

use profiler_common::OffCpuKey;

/// How long off-CPU counts are held at most: four drains at the default
/// interval of one second. (Longer holds little more: most of what
/// repeats repeats within a few seconds; and a JIT frame is named by the
/// code at its address when it is named, which churns on a busy JVM.)
pub const HOLD: Duration = Duration::from_secs(4);

/// Off-CPU counts taken from the kernel and not yet handed on.
#[derive(Debug)]
pub struct OffCpuHold {
    counts: crate::FastMap<OffCpuKey, u64>,
    /// Where the span of what is held begins: the start of the first
    /// buffer taken into it.
    since: Option<SystemTime>,
    hold: Duration,
    /// Entries held at most (the memory a host with very many waiting
    /// threads could make it take): at this many, it is handed on.
    max_entries: usize,
}

impl OffCpuHold {
    pub fn new(hold: Duration, max_entries: usize) -> Self {
        Self {
            counts: Default::default(),
            since: None,
            hold,
            max_entries: max_entries.max(1),
        }
    }

    /// Adds a buffer's counts (nanoseconds by key); the buffer began at
    /// `start`.
    pub fn add(&mut self, start: SystemTime, entries: impl IntoIterator<Item = (OffCpuKey, u64)>) {
        let mut any = false;
        for (key, nanos) in entries {
            *self.counts.entry(key).or_insert(0) += nanos;
            any = true;
        }
        if any && self.since.is_none() {
            self.since = Some(start);
        }
    }

    /// Whether what is held is to be handed on at a drain that ends at
    /// `end`: held for [`HOLD`], or as many entries as it may hold.
    pub fn due(&self, end: SystemTime) -> bool {
        self.counts.len() >= self.max_entries
            || self.since.is_some_and(|since| {
                end.duration_since(since)
                    .is_ok_and(|held| held >= self.hold)
            })
    }

    /// Everything held, with the start of its span (`None`: nothing held).
    pub fn take(&mut self) -> Option<(SystemTime, Vec<(OffCpuKey, u64)>)> {
        let since = self.since.take()?;
        Some((since, self.counts.drain().collect()))
    }

    /// The start of what is held, if anything is.
    pub fn since(&self) -> Option<SystemTime> {
        self.since
    }

    pub fn len(&self) -> usize {
        self.counts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(tid: u32, user_stack: u64) -> OffCpuKey {
        OffCpuKey {
            tgid: 7,
            tid,
            kernel_stack: 1,
            user_stack,
            python_stack: 0,
            name_epoch: 0,
            state: 1,
            comm: [0; profiler_common::COMM_LEN],
        }
    }

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000 + secs)
    }

    #[test]
    fn a_repeated_wait_is_one_entry_with_its_time_summed_over_the_hold() {
        let mut hold = OffCpuHold::new(HOLD, 100);
        assert!(!hold.due(at(10)), "nothing held is never due");
        hold.add(at(0), [(key(1, 10), 900), (key(2, 20), 50)]);
        assert_eq!(hold.since(), Some(at(0)));
        for second in 1..4 {
            assert!(!hold.due(at(second)), "due after {second} s");
            hold.add(at(second), [(key(1, 10), 1_000)]);
        }
        assert_eq!(hold.len(), 2);
        assert!(hold.due(at(4)));
        let (since, mut taken) = hold.take().expect("counts held");
        taken.sort_by_key(|(key, _)| key.tid);
        assert_eq!(since, at(0));
        assert_eq!(taken, vec![(key(1, 10), 3_900), (key(2, 20), 50)]);
        assert!(hold.is_empty() && hold.since().is_none() && hold.take().is_none());
        // What comes next is held from its own start.
        hold.add(at(4), [(key(1, 10), 1)]);
        assert_eq!(hold.since(), Some(at(4)));
    }

    #[test]
    fn an_empty_buffer_starts_no_span_and_a_full_hold_is_due_at_once() {
        let mut hold = OffCpuHold::new(HOLD, 3);
        hold.add(at(0), []);
        assert_eq!(hold.since(), None);
        hold.add(at(1), [(key(1, 1), 5), (key(2, 1), 5)]);
        assert!(!hold.due(at(2)));
        hold.add(at(2), [(key(3, 1), 5)]);
        assert!(hold.due(at(3)), "as many entries as it may hold");
        assert_eq!(
            hold.take().map(|(since, taken)| (since, taken.len())),
            Some((at(1), 3))
        );
    }
}
