//! A JVM's full thread names (Spark's task threads carry their stage and
//! task in them; the kernel keeps only 15 bytes).
//!
//! Two feeds, chosen per JVM when it is first seen:
//! - exact: the collector's name-setter uprobe on HotSpot's
//!   `os::set_native_thread_name` ([`native_name`] finds it in libjvm.so),
//!   placed once per distinct libjvm.so file (and on every JDK installed on
//!   the host before any of its JVMs starts), announces every rename with
//!   its full name;
//! - else the `task_rename` tracepoint says *that* a thread was renamed, and
//!   a thread dump ([`dumps`]) reads the full names.
//!
//! Either way a JVM is dumped once when first seen, for the names its
//! threads got before sparkprof watched them.

pub mod dumps;
pub mod native_name;

use std::{collections::HashMap, fs, os::unix::fs::MetadataExt as _, path::Path};

use dumps::{DumpPolicy, ThreadDumper};
use serde::Serialize;
use tracing::{debug, info};

use crate::{
    collect::{Collector, Drain, renames::RenameSource},
    enrich::name_history::ThreadDump,
};

/// How a JVM's full thread names reach sparkprof.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameFeed {
    /// Exact: the uprobe sees every rename with its full name.
    Uprobe,
    /// The tracepoint reports renames; names come from Thread.print.
    Tracepoint { reason: String },
    /// Neither (the reason says why): names come from periodic Thread.print
    /// and comm.
    None { reason: String },
}

/// Thread-naming statistics over a recording, reported in index.json.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct ThreadStats {
    /// JVMs whose renames the uprobe reports with full names.
    pub jvms_exact_names: u64,
    /// JVMs named through the tracepoint and thread dumps.
    pub jvms_dump_names: u64,
    /// Thread dumps taken, and failed.
    pub thread_dumps: u64,
    pub thread_dump_failures: u64,
}

/// Where every JVM's full thread names come from.
pub struct JvmThreadNames {
    /// Why the uprobe is not used at all, if it is not.
    uprobe_off: Option<String>,
    /// libjvm.so files (device, inode) the uprobe is on, or why it is not.
    libjvms: HashMap<(u64, u64), Result<(), String>>,
    dumper: ThreadDumper,
    stats: ThreadStats,
}

impl JvmThreadNames {
    pub fn held(&self, held: &mut crate::sys::held::Held) {
        held.add("jvm.libjvms", self.libjvms.len());
        held.add("jvm.thread_dump_jvms", self.dumper.jvms());
    }

    /// `rename_uprobe` off: every JVM's names come from the tracepoint and
    /// thread dumps.
    pub fn new(rename_uprobe: bool, policy: DumpPolicy) -> Self {
        Self {
            uprobe_off: (!rename_uprobe)
                .then(|| "rename uprobe off (--thread-names dumps)".to_owned()),
            libjvms: HashMap::new(),
            dumper: ThreadDumper::new(policy),
            stats: ThreadStats::default(),
        }
    }

    /// Puts the uprobe on the JDKs installed on the host
    /// (`/usr/lib/jvm/*/lib/server/libjvm.so` and JDK 8's
    /// `jre/lib/amd64/server`), before any of their JVMs starts: uprobes sit
    /// on the file, so a JVM started later has every rename seen from its
    /// first thread on, names given at thread start included.
    pub fn watch_installed_jdks(&mut self, collector: &mut Collector) {
        if self.uprobe_off.is_some() {
            return;
        }
        let Ok(jdks) = fs::read_dir("/usr/lib/jvm") else {
            return;
        };
        for jdk in jdks.filter_map(Result::ok) {
            for relative in ["lib/server/libjvm.so", "jre/lib/amd64/server/libjvm.so"] {
                let path = jdk.path().join(relative);
                if !path.exists() {
                    continue;
                }
                let shown = path.display().to_string();
                if let Err(reason) = self.uprobe_on(collector, &path, &shown) {
                    debug!("installed JDK {shown}: {reason}");
                }
            }
        }
    }

    /// Makes sure JVM `pid`'s renames are seen: the uprobe on its libjvm.so
    /// (`libjvm` as the process sees the path), else the tracepoint.
    pub fn watch(&mut self, pid: u32, libjvm: &str, collector: &mut Collector) -> NameFeed {
        // Through the process's root: a containerized JVM's library is not
        // at that path in our mount namespace.
        let path = format!("/proc/{pid}/root{libjvm}");
        let attached = match &self.uprobe_off {
            Some(off) => Err(off.clone()),
            None => self.uprobe_on(collector, Path::new(&path), libjvm),
        };
        let feed = match attached {
            Ok(()) => NameFeed::Uprobe,
            Err(reason) => match collector.watch_renames(pid) {
                Ok(()) => NameFeed::Tracepoint { reason },
                Err(tracepoint) => NameFeed::None {
                    reason: format!("{reason}; {tracepoint}"),
                },
            },
        };
        match &feed {
            NameFeed::Uprobe => self.stats.jvms_exact_names += 1,
            NameFeed::Tracepoint { reason } | NameFeed::None { reason } => {
                self.stats.jvms_dump_names += 1;
                info!(
                    pid,
                    "JVM {pid}: full thread names from thread dumps: {reason}"
                );
            }
        }
        self.dumper.watch(pid, feed.clone());
        feed
    }

    /// The uprobe on the libjvm.so at `path` (`shown` in messages), placed
    /// once per file (device, inode): a symlinked JDK directory, or the same
    /// library seen through several processes' roots, is one file.
    fn uprobe_on(
        &mut self,
        collector: &mut Collector,
        path: &Path,
        shown: &str,
    ) -> Result<(), String> {
        let meta =
            fs::metadata(path).map_err(|err| format!("cannot open {}: {err}", path.display()))?;
        self.libjvms
            .entry((meta.dev(), meta.ino()))
            .or_insert_with(|| {
                let offset = native_name::set_native_thread_name_offset(path)
                    .map_err(|err| err.to_string())?;
                collector
                    .attach_name_setter(path, offset)
                    .map_err(|err| format!("uprobe on {shown}+{offset:#x} failed: {err}"))?;
                info!("full thread names from {shown} (uprobe at {offset:#x})");
                Ok(())
            })
            .clone()
    }

    /// The thread dumps due now: of every JVM watched (`drain` is `None`:
    /// before sampling starts), or of the JVMs a drain sampled (first seen,
    /// or renamed through the tracepoint).
    pub fn dumps(&mut self, drain: Option<&Drain>, collector: &Collector) -> Vec<ThreadDump> {
        let Some(drain) = drain else {
            let watched = self.dumper.watched();
            return self.dumper.run(&watched, collector);
        };
        for rename in &drain.renames {
            if rename.source == RenameSource::TaskRename {
                self.dumper.renamed(rename.tgid);
            }
        }
        let mut sampled: Vec<u32> = drain.samples.iter().map(|s| s.tgid).collect();
        sampled.sort_unstable();
        sampled.dedup();
        self.dumper.run(&sampled, collector)
    }

    /// The JVM exited.
    pub fn forget(&mut self, pid: u32) {
        self.dumper.forget(pid);
    }

    /// Statistics so far.
    pub fn stats(&self) -> ThreadStats {
        ThreadStats {
            thread_dumps: self.dumper.dumps,
            thread_dump_failures: self.dumper.failures,
            ..self.stats
        }
    }
}
