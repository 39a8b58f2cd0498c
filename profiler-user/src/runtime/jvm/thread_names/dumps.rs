//! Full Java thread names from thread dumps (`jcmd Thread.print`), and when
//! to take one.
//!
//! The rename uprobe gives exact names from the moment it is attached; a
//! dump fills in what it cannot see: names threads had before (once, when a
//! JVM is first seen), and every name of a JVM whose libjvm.so has no
//! `os::set_native_thread_name` symbol (after the `task_rename` tracepoint
//! reports a rename, debounced to one dump per interval, plus a slow
//! periodic dump as a safety net). A dump costs the JVM a safepoint (a few
//! milliseconds for hundreds of threads), so it is rate-limited per JVM and
//! never retried fast against a JVM that refuses.

use std::{
    collections::HashMap,
    time::{Duration, Instant, SystemTime},
};

use perf_maps::{
    AttachError, Jvm,
    attach::{AttachBackoff, Retry},
};
use tracing::{debug, info};

use super::NameFeed;
use crate::{
    collect::Collector,
    enrich::name_history::{DumpedThread, RENAME_LAG, ThreadDump},
};

/// When thread dumps are taken.
#[derive(Debug, Clone)]
pub struct DumpPolicy {
    /// Take dumps at all (`--no-jvm-attach` turns them off).
    pub attach: bool,
    /// At most one dump per JVM within this interval.
    pub min_interval: Duration,
    /// Without the uprobe, dump at least this often while the JVM is sampled.
    pub safety_interval: Duration,
}

impl Default for DumpPolicy {
    fn default() -> Self {
        Self {
            attach: true,
            min_interval: Duration::from_secs(1),
            safety_interval: Duration::from_secs(30),
        }
    }
}

/// One JVM's dump state.
#[derive(Debug)]
struct JvmDumps {
    feed: NameFeed,
    last: Option<Instant>,
    /// Renames reported by the tracepoint since the last dump.
    renamed: bool,
    backoff: AttachBackoff,
    given_up: bool,
}

/// Thread dumps of every JVM sparkprof names threads for.
#[derive(Debug, Default)]
pub struct ThreadDumper {
    policy: DumpPolicy,
    jvms: HashMap<u32, JvmDumps>,
    /// Dumps taken and failed, for the statistics.
    pub dumps: u64,
    pub failures: u64,
}

impl ThreadDumper {
    pub fn jvms(&self) -> usize {
        self.jvms.len()
    }

    pub fn new(policy: DumpPolicy) -> Self {
        Self {
            policy,
            ..Self::default()
        }
    }

    /// A JVM whose renames now reach sparkprof through `feed`.
    pub fn watch(&mut self, pid: u32, feed: NameFeed) {
        self.jvms.entry(pid).or_insert(JvmDumps {
            feed,
            last: None,
            renamed: false,
            backoff: AttachBackoff::default(),
            given_up: false,
        });
    }

    /// Every JVM watched.
    pub fn watched(&self) -> Vec<u32> {
        self.jvms.keys().copied().collect()
    }

    /// The tracepoint reported a rename in this JVM.
    pub fn renamed(&mut self, pid: u32) {
        if let Some(jvm) = self.jvms.get_mut(&pid) {
            jvm.renamed = true;
        }
    }

    pub fn forget(&mut self, pid: u32) {
        self.jvms.remove(&pid);
    }

    /// JVMs (among `sampled`) that should be dumped now.
    fn due(&self, sampled: &[u32]) -> Vec<u32> {
        if !self.policy.attach {
            return Vec::new();
        }
        sampled
            .iter()
            .copied()
            .filter(|pid| {
                let Some(jvm) = self.jvms.get(pid) else {
                    return false;
                };
                if jvm.given_up {
                    return false;
                }
                let Some(last) = jvm.last else {
                    return true;
                };
                let since = last.elapsed();
                if since < self.policy.min_interval.max(jvm.backoff.wait()) {
                    return false;
                }
                match jvm.feed {
                    NameFeed::Uprobe => false,
                    NameFeed::Tracepoint { .. } | NameFeed::None { .. } => {
                        jvm.renamed || since >= self.policy.safety_interval
                    }
                }
            })
            .collect()
    }

    /// Dumps the JVMs that are due, in parallel (each blocks on its JVM for a
    /// fraction of a second), and returns what they said. The threads' name
    /// epochs are read before and [`RENAME_LAG`] after, so that a name is
    /// tied to the epoch it belongs to whenever no rename came in between.
    pub fn run(&mut self, sampled: &[u32], collector: &Collector) -> Vec<ThreadDump> {
        let due = self.due(sampled);
        if due.is_empty() {
            return Vec::new();
        }
        let before: HashMap<u32, HashMap<u32, u32>> = due
            .iter()
            .map(|&pid| (pid, collector.current_epochs(pid)))
            .collect();
        let results: Vec<(u32, Result<ThreadDump, AttachError>)> = std::thread::scope(|scope| {
            let handles: Vec<_> = due
                .iter()
                .map(|&pid| (pid, scope.spawn(move || dump(pid))))
                .collect();
            handles
                .into_iter()
                .map(|(pid, handle)| {
                    let result = handle
                        .join()
                        .unwrap_or(Err(AttachError::ProcessExited { pid }));
                    (pid, result)
                })
                .collect()
        });
        // A thread renaming itself stores its new Java name (what a dump
        // reads) before the native rename that starts its new epoch, and
        // that rename waits for the dump's safepoint to end: on a busy host
        // it can land after the dump has answered and after epochs read at
        // once. The next task's name would then be tied, as exact, to the
        // epoch of the task before it, whose samples still to be named go
        // to the next task's stage (how the bench's stage attribution could
        // find 1 of 7,296 there). The epochs are read again no sooner than
        // a rename that late could land, as untied names are judged
        // (`RENAME_LAG`).
        let answered = results
            .iter()
            .filter_map(|(_, result)| Some(result.as_ref().ok()?.done))
            .max();
        if let Some(answered) = answered {
            std::thread::sleep(wait_for_late_renames(answered, SystemTime::now()));
        }
        let mut dumps = Vec::new();
        for (pid, result) in results {
            let Some(jvm) = self.jvms.get_mut(&pid) else {
                continue;
            };
            jvm.last = Some(Instant::now());
            jvm.renamed = false;
            match result {
                Ok(mut dump) => {
                    self.dumps += 1;
                    jvm.backoff.succeeded();
                    let after = collector.current_epochs(pid);
                    for thread in &mut dump.threads {
                        let was = before.get(&pid).and_then(|b| b.get(&thread.tid));
                        thread.epoch = was
                            .filter(|&was| after.get(&thread.tid) == Some(was))
                            .copied();
                    }
                    dumps.push(dump);
                }
                Err(err) => {
                    self.failures += 1;
                    match jvm.backoff.failed(&err) {
                        Retry::Later => debug!(pid, "thread dump failed, will retry: {err}"),
                        Retry::Gone | Retry::Never => {
                            jvm.given_up = true;
                            info!(
                                pid,
                                "JVM thread names from comm only (no thread dumps): {err}"
                            );
                        }
                    }
                }
            }
        }
        dumps
    }
}

/// How long after `now` a rename that started before a dump `answered`
/// may still land (see [`RENAME_LAG`]); never longer than that, however
/// the wall clock was set back meanwhile (the drains wait on it).
fn wait_for_late_renames(answered: SystemTime, now: SystemTime) -> Duration {
    (answered + RENAME_LAG)
        .duration_since(now)
        .unwrap_or_default()
        .min(RENAME_LAG)
}

/// One thread dump, with thread ids translated to the host's.
fn dump(pid: u32) -> Result<ThreadDump, AttachError> {
    let jvm = Jvm::new(pid)?;
    let time = SystemTime::now();
    let threads = jvm.thread_names()?;
    let done = SystemTime::now();
    let host_tids = if jvm.nspid() == pid {
        None
    } else {
        // A process that is gone by now leaves no thread to name.
        Some(crate::sys::proc::namespace_threads(pid).unwrap_or_default())
    };
    let threads = threads
        .into_iter()
        .filter_map(|thread| {
            let tid = match &host_tids {
                None => thread.nid,
                Some(map) => *map.get(&thread.nid)?,
            };
            Some(DumpedThread {
                tid,
                name: thread.name,
                epoch: None,
            })
        })
        .collect();
    Ok(ThreadDump {
        pid,
        time,
        done,
        threads,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dumper() -> ThreadDumper {
        let mut dumper = ThreadDumper::new(DumpPolicy::default());
        dumper.watch(10, NameFeed::Uprobe);
        dumper.watch(
            20,
            NameFeed::Tracepoint {
                reason: "stripped".into(),
            },
        );
        dumper
    }

    #[test]
    fn every_jvm_is_dumped_once_when_first_seen() {
        let dumper = dumper();
        assert_eq!(dumper.due(&[10, 20, 30]), vec![10, 20]);
    }

    #[test]
    fn only_tracepoint_jvms_are_dumped_again_after_a_rename() {
        let mut dumper = dumper();
        let long_ago = Instant::now() - Duration::from_secs(5);
        for jvm in dumper.jvms.values_mut() {
            jvm.last = Some(long_ago);
        }
        assert!(dumper.due(&[10, 20]).is_empty());
        dumper.renamed(10);
        dumper.renamed(20);
        assert_eq!(dumper.due(&[10, 20]), vec![20]);
        // Not twice within the minimum interval.
        dumper.jvms.get_mut(&20).unwrap().last = Some(Instant::now());
        assert!(dumper.due(&[20]).is_empty());
    }

    #[test]
    fn epochs_are_read_again_once_a_late_rename_would_have_landed() {
        let answered = SystemTime::UNIX_EPOCH + Duration::from_secs(100);
        let ms = Duration::from_millis;
        assert_eq!(wait_for_late_renames(answered, answered), RENAME_LAG);
        assert_eq!(
            wait_for_late_renames(answered, answered + ms(30)),
            RENAME_LAG - ms(30)
        );
        assert_eq!(
            wait_for_late_renames(answered, answered + RENAME_LAG + ms(1)),
            Duration::ZERO
        );
        // The clock set back an hour since the answer: the wait stays bounded.
        let set_back = answered - Duration::from_secs(3600);
        assert_eq!(wait_for_late_renames(answered, set_back), RENAME_LAG);
    }

    #[test]
    fn no_dumps_without_attach() {
        let mut dumper = ThreadDumper::new(DumpPolicy {
            attach: false,
            ..DumpPolicy::default()
        });
        dumper.watch(10, NameFeed::Uprobe);
        assert!(dumper.due(&[10]).is_empty());
    }
}
