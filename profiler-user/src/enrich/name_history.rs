//! Thread-name histories: which full name a thread had at a given name epoch.
//!
//! The kernel counts samples per (thread, name epoch) and announces every
//! rename with the new epoch ([`ThreadRename`]), so a count is matched to the
//! name its thread had when it was taken, however briefly (Spark renames a
//! pooled thread at every task start and end). Three sources, by trust:
//! 1. the JVM rename uprobe: the full name of exactly that epoch;
//! 2. a thread dump ([`ThreadDump`], e.g. the JVM's `Thread.print`, taken by
//!    its runtime): the full name the thread had when the
//!    dump ran, filed under the latest epoch known for it (names given before
//!    sparkprof started, and JVMs without the uprobe);
//! 3. the comm the kernel stored with the sample (15 bytes).
//!
//! A name from a dump is used only if the sample's comm is its 15-byte
//! prefix, so a dump that raced with a rename never mislabels a sample.

use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::{Duration, SystemTime},
};

use crate::collect::renames::{RenameSource, ThreadRename};

/// The full names of a process's threads, read from the process itself at
/// one moment (a runtime's thread dump, e.g. the JVM's `Thread.print`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadDump {
    pub pid: u32,
    /// When the dump was asked for, and when it had answered: its names
    /// are from some moment in between.
    pub time: SystemTime,
    pub done: SystemTime,
    pub threads: Vec<DumpedThread>,
}

impl ThreadDump {
    /// When it was asked for and when it had answered.
    pub fn window(&self) -> (SystemTime, SystemTime) {
        (self.time, self.done)
    }
}

/// One thread of a dump.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpedThread {
    /// Its id as the host sees it.
    pub tid: u32,
    /// Its full name.
    pub name: String,
    /// Its name epoch, if that was the same just before and just after the
    /// dump: then the name is exactly that epoch's.
    pub epoch: Option<u32>,
}

/// Bytes of a Linux comm without its NUL: what a long name is cut to.
const COMM_BYTES: usize = 15;

/// How long after a dump has answered a rename may still be the one its
/// name came from. Java's `Thread.setName` stores the name a dump reads,
/// then renames the thread natively (what starts a new epoch); a thread in
/// native code runs on through the dump's safepoint, and on a busy host
/// its rename can land after the dump has answered. A dump's name that is
/// not tied to one epoch holds for the epoch it is filed under only if no
/// later epoch began before its answer and this long after it. Without
/// this, a dump asked for just before a task thread's rename could give
/// the next task's name to the epoch of the task before it: the samples
/// of that epoch still to be drained went to the next task's stage (the
/// bench's stage attribution once found 1 of 7,367 samples there). A name
/// tied to one epoch is tied only if the epoch is the same this long after
/// the dump answered (the dumper waits for it).
pub(crate) const RENAME_LAG: Duration = Duration::from_millis(100);

/// Epochs kept per thread at most, whatever [`ThreadNames::prune`] keeps:
/// a bound against a thread that renames itself in a tight loop.
const MAX_EPOCHS_PER_THREAD: usize = 4_096;

/// One name of one thread.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NameRecord {
    /// Shared with every sample named by it (a copy per sample was about
    /// one allocation in thirty of sparkprof's on a Spark host).
    name: Arc<str>,
    since: SystemTime,
    /// A later epoch that began before this voids a name that is not
    /// exact: it may be that epoch's name.
    until: SystemTime,
    /// From the uprobe: valid for exactly this epoch, no comm check needed.
    exact: bool,
}

/// The names one thread had, by epoch.
#[derive(Debug, Default)]
struct ThreadHistory {
    epochs: BTreeMap<u32, NameRecord>,
}

/// Name histories of every thread of interest on the host.
#[derive(Debug, Default)]
pub struct ThreadNames {
    threads: HashMap<(u32, u32), ThreadHistory>,
}

impl ThreadNames {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records the renames the kernel announced.
    pub fn apply(&mut self, renames: &[ThreadRename]) {
        for rename in renames {
            let history = self.threads.entry((rename.tgid, rename.tid)).or_default();
            history.epochs.insert(
                rename.epoch,
                NameRecord {
                    name: rename.name.as_str().into(),
                    since: rename.time,
                    until: rename.time,
                    exact: rename.source == RenameSource::JvmNativeName && !rename.name.is_empty(),
                },
            );
            while history.epochs.len() > MAX_EPOCHS_PER_THREAD {
                history.epochs.pop_first();
            }
        }
    }

    /// Files the names of a thread dump (tid, full name) of process `tgid`
    /// asked for at `time` and answered at `done`: each under the latest
    /// epoch its thread had entered by `time` (0 if none), unless that
    /// epoch already has an exact name.
    ///
    /// Renames just before the dump, during it or just after it may not be
    /// announced yet (they come with the next drain); [`Self::name_at`] then
    /// rejects the name for the epoch it was filed under, because a later
    /// epoch began before `done` and [`RENAME_LAG`] after it.
    ///
    /// A name whose epoch is known (`Some`: the thread had that epoch just
    /// before and just after the dump) is filed under it as exact.
    pub fn apply_dump(
        &mut self,
        tgid: u32,
        names: &[DumpedThread],
        (time, done): (SystemTime, SystemTime),
    ) {
        for DumpedThread {
            tid,
            name,
            epoch: known_epoch,
        } in names
        {
            let history = self.threads.entry((tgid, *tid)).or_default();
            if let Some(epoch) = known_epoch {
                let exact = history.epochs.get(epoch).is_some_and(|record| record.exact);
                if !exact {
                    history.epochs.insert(
                        *epoch,
                        NameRecord {
                            name: name.as_str().into(),
                            since: time,
                            until: time,
                            exact: true,
                        },
                    );
                }
                continue;
            }
            let epoch = history
                .epochs
                .iter()
                .rev()
                .find(|(_, record)| record.since <= time)
                .map_or(0, |(epoch, _)| *epoch);
            match history.epochs.get(&epoch) {
                Some(record) if record.exact => {}
                _ => {
                    history.epochs.insert(
                        epoch,
                        NameRecord {
                            name: name.as_str().into(),
                            since: time,
                            until: done + RENAME_LAG,
                            exact: false,
                        },
                    );
                }
            }
        }
    }

    /// The thread's name at `epoch`, or its comm (what the kernel stored
    /// with the sample) when no better name is known.
    pub fn name_at(&self, tgid: u32, tid: u32, epoch: u32, comm: &str) -> Arc<str> {
        let Some(history) = self.threads.get(&(tgid, tid)) else {
            return comm.into();
        };
        match history.epochs.get(&epoch) {
            Some(record) if record.exact => record.name.clone(),
            Some(record)
                if comm_of(&record.name) == comm.as_bytes()
                    && !history
                        .epochs
                        .range(epoch + 1..)
                        .any(|(_, later)| later.since <= record.until) =>
            {
                record.name.clone()
            }
            _ => comm.into(),
        }
    }

    /// When the thread got its name at `epoch`, if known.
    pub fn named_since(&self, tgid: u32, tid: u32, epoch: u32) -> Option<SystemTime> {
        self.threads
            .get(&(tgid, tid))?
            .epochs
            .get(&epoch)
            .map(|record| record.since)
    }

    /// Drops names no future sample can carry: samples still to come were
    /// taken after `drained_until`, so each thread keeps the name it had then
    /// (its latest record from before) and every later one.
    pub fn prune(&mut self, drained_until: SystemTime) {
        for history in self.threads.values_mut() {
            let current = history
                .epochs
                .iter()
                .rev()
                .find(|(_, record)| record.since <= drained_until)
                .map(|(epoch, _)| *epoch);
            // Nothing to drop when the current name is the oldest kept (most
            // threads have had one name all along): `split_off` at the first
            // key would rebuild the whole map, every thread, every drain.
            let first = history.epochs.keys().next().copied();
            if let Some(current) = current.filter(|&current| Some(current) != first) {
                history.epochs = history.epochs.split_off(&current);
            }
        }
    }

    pub fn held(&self, held: &mut crate::sys::held::Held) {
        held.add("enrich.named_threads", self.threads.len());
        held.add(
            "enrich.thread_names",
            self.threads.values().map(|t| t.epochs.len()).sum(),
        );
    }

    /// Forgets the threads of an exited process.
    pub fn forget_process(&mut self, tgid: u32) {
        self.threads.retain(|(pid, _), _| *pid != tgid);
    }
}

/// The comm the kernel keeps for a name: its first 15 bytes.
fn comm_of(name: &str) -> &[u8] {
    let bytes = name.as_bytes();
    &bytes[..bytes.len().min(COMM_BYTES)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dumped(tid: u32, name: &str, epoch: Option<u32>) -> DumpedThread {
        DumpedThread {
            tid,
            name: name.into(),
            epoch,
        }
    }

    fn rename(tid: u32, epoch: u32, name: &str, source: RenameSource) -> ThreadRename {
        ThreadRename {
            tgid: 1,
            tid,
            epoch,
            time: SystemTime::UNIX_EPOCH,
            name: name.into(),
            truncated: false,
            source,
        }
    }

    const TASK_A: &str = "Executor task launch worker for task 0.0 in stage 1.0 (TID 5)";
    const TASK_B: &str = "Executor task launch worker for task 3.0 in stage 2.0 (TID 9)";
    const IDLE: &str = "Executor task idle worker#0";

    #[test]
    fn each_epoch_keeps_its_own_name() {
        let mut names = ThreadNames::new();
        names.apply(&[
            rename(7, 1, TASK_A, RenameSource::JvmNativeName),
            rename(7, 2, IDLE, RenameSource::JvmNativeName),
            rename(7, 3, TASK_B, RenameSource::JvmNativeName),
        ]);
        assert_eq!(&*names.name_at(1, 7, 1, "Executor task l"), TASK_A);
        assert_eq!(&*names.name_at(1, 7, 2, "Executor task i"), IDLE);
        assert_eq!(&*names.name_at(1, 7, 3, "Executor task l"), TASK_B);
        // Unknown epoch, other thread, other process: the comm.
        assert_eq!(
            &*names.name_at(1, 7, 9, "Executor task l"),
            "Executor task l"
        );
        assert_eq!(&*names.name_at(1, 8, 1, "x"), "x");
        assert_eq!(&*names.name_at(2, 7, 1, "y"), "y");
    }

    #[test]
    fn a_dump_names_the_latest_epoch_only_if_the_comm_agrees() {
        let mut names = ThreadNames::new();
        // Named before sparkprof started: epoch 0, from the dump.
        names.apply_dump(
            1,
            &[dumped(7, TASK_A, None)],
            (SystemTime::UNIX_EPOCH, SystemTime::UNIX_EPOCH),
        );
        assert_eq!(&*names.name_at(1, 7, 0, "Executor task l"), TASK_A);
        // A sample whose comm says the thread had another name then.
        assert_eq!(
            &*names.name_at(1, 7, 0, "Executor task i"),
            "Executor task i"
        );

        // Tracepoint-only JVM: the rename carries the comm; a later dump
        // fills in the full name of that epoch.
        names.apply(&[rename(8, 4, "Executor task l", RenameSource::TaskRename)]);
        assert_eq!(
            &*names.name_at(1, 8, 4, "Executor task l"),
            "Executor task l"
        );
        names.apply_dump(
            1,
            &[dumped(8, TASK_B, None)],
            (SystemTime::UNIX_EPOCH, SystemTime::UNIX_EPOCH),
        );
        assert_eq!(&*names.name_at(1, 8, 4, "Executor task l"), TASK_B);
    }

    #[test]
    fn a_dump_that_raced_with_a_rename_is_not_used() {
        let at = |secs| SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs);
        let mut names = ThreadNames::new();
        // Dump at t=10 says TASK_B; filed under epoch 0 (no rename known yet).
        names.apply_dump(1, &[dumped(7, TASK_B, None)], (at(10), at(10)));
        assert_eq!(&*names.name_at(1, 7, 0, "Executor task l"), TASK_B);
        // The next drain announces a rename at t=9 to TASK_B: the dump saw
        // epoch 1's name, so epoch 0 falls back to its comm.
        let mut late = rename(7, 1, TASK_B, RenameSource::JvmNativeName);
        late.time = at(9);
        names.apply(&[late]);
        assert_eq!(
            &*names.name_at(1, 7, 0, "Executor task l"),
            "Executor task l"
        );
        assert_eq!(&*names.name_at(1, 7, 1, "Executor task l"), TASK_B);
        // A later dump files under the epoch that began before it.
        names.apply_dump(1, &[dumped(7, TASK_A, None)], (at(11), at(11)));
        assert_eq!(&*names.name_at(1, 7, 1, "Executor task l"), TASK_B);
    }

    #[test]
    fn a_rename_during_a_dump_or_just_after_it_voids_its_name() {
        let ms = |ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms);
        // A dump asked for at 10.000 s and answered at 10.020 s says
        // TASK_B, filed under epoch 0; the rename to TASK_B (epoch 1) comes
        // during it, just after it, or well after it.
        for (renamed, kept) in [(10_010, false), (10_100, false), (10_200, true)] {
            let mut names = ThreadNames::new();
            names.apply_dump(1, &[dumped(7, TASK_B, None)], (ms(10_000), ms(10_020)));
            let mut rename = rename(7, 1, TASK_B, RenameSource::JvmNativeName);
            rename.time = ms(renamed);
            names.apply(&[rename]);
            // Epoch 0 may have been TASK_A's last moments: its comm then,
            // never another task's name.
            let want = if kept { TASK_B } else { "Executor task l" };
            assert_eq!(
                &*names.name_at(1, 7, 0, "Executor task l"),
                want,
                "{renamed}"
            );
            assert_eq!(&*names.name_at(1, 7, 1, "Executor task l"), TASK_B);
        }
    }

    #[test]
    fn a_dump_bracketed_by_one_epoch_names_exactly_that_epoch() {
        let mut names = ThreadNames::new();
        names.apply_dump(
            1,
            &[dumped(7, TASK_A, Some(3))],
            (SystemTime::UNIX_EPOCH, SystemTime::UNIX_EPOCH),
        );
        // Exact: used whatever the comm, and a later rename does not undo it.
        assert_eq!(&*names.name_at(1, 7, 3, "Executor task l"), TASK_A);
        names.apply(&[rename(7, 4, TASK_B, RenameSource::JvmNativeName)]);
        assert_eq!(&*names.name_at(1, 7, 3, "Executor task l"), TASK_A);
        assert_eq!(&*names.name_at(1, 7, 4, "Executor task l"), TASK_B);
    }

    #[test]
    fn a_dump_never_overrides_an_exact_name() {
        let mut names = ThreadNames::new();
        names.apply(&[rename(7, 1, TASK_A, RenameSource::JvmNativeName)]);
        names.apply_dump(
            1,
            &[dumped(7, TASK_B, None)],
            (SystemTime::UNIX_EPOCH, SystemTime::UNIX_EPOCH),
        );
        assert_eq!(&*names.name_at(1, 7, 1, "Executor task l"), TASK_A);
    }

    #[test]
    fn pruning_keeps_the_current_name_and_later_ones() {
        let mut names = ThreadNames::new();
        let at = |secs| SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs);
        let mut renames = vec![
            rename(7, 1, TASK_A, RenameSource::JvmNativeName),
            rename(7, 2, IDLE, RenameSource::JvmNativeName),
            rename(7, 3, TASK_B, RenameSource::JvmNativeName),
        ];
        for (secs, rename) in [10, 20, 30].into_iter().zip(&mut renames) {
            rename.time = at(secs);
        }
        names.apply(&renames);
        names.prune(at(25));
        let epochs: Vec<u32> = names.threads[&(1, 7)].epochs.keys().copied().collect();
        assert_eq!(epochs, vec![2, 3]);
        assert_eq!(&*names.name_at(1, 7, 2, "Executor task i"), IDLE);
    }

    #[test]
    fn histories_are_bounded_and_forgotten() {
        let mut names = ThreadNames::new();
        let last = MAX_EPOCHS_PER_THREAD as u32 + 100;
        let renames: Vec<_> = (1..=last)
            .map(|epoch| rename(7, epoch, IDLE, RenameSource::JvmNativeName))
            .collect();
        names.apply(&renames);
        assert_eq!(names.threads[&(1, 7)].epochs.len(), MAX_EPOCHS_PER_THREAD);
        assert_eq!(&*names.name_at(1, 7, last, "c"), IDLE);
        names.forget_process(1);
        assert!(names.threads.is_empty());
    }

    #[test]
    fn comm_is_the_first_fifteen_bytes() {
        assert_eq!(comm_of(TASK_A), b"Executor task l");
        assert_eq!(comm_of("short"), b"short");
    }
}
