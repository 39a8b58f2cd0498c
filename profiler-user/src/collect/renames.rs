//! The kernel's rename feed: full Java thread names as threads get them.
//!
//! A uprobe on HotSpot's `os::set_native_thread_name` is attached once per
//! distinct libjvm.so (uprobes live on the file's inode, so one attachment
//! covers every JVM that maps it, in any container). JVMs whose libjvm.so
//! lacks the symbol are put in the `task_rename` tracepoint's watch list
//! instead: that feed only says *that* a thread was renamed (and its comm),
//! and userspace asks the JVM for the full name. Renames arrive through a
//! ring buffer, read after each buffer flip so that every epoch a drained
//! count carries has already been announced.

use std::{
    collections::{HashMap as StdHashMap, HashSet},
    fs,
    os::unix::fs::MetadataExt as _,
    path::PathBuf,
    time::{Duration, SystemTime},
};

use aya::{
    Btf, Ebpf,
    maps::{HashMap, MapData, RingBuf},
    programs::{BtfTracePoint, UProbe, uprobe::UProbeScope},
};
use profiler_common::{RenameEvent, THREAD_NAME_LEN, names, rename_source};
use tracing::{debug, info, warn};

use super::{CollectError, jvm_symbol, take_map};

/// Where a thread's new name came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RenameSource {
    /// HotSpot's native-name call: the full Java thread name.
    JvmNativeName,
    /// The task_rename tracepoint: only the 15-byte comm.
    TaskRename,
}

/// One rename, as the kernel saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadRename {
    pub tgid: u32,
    pub tid: u32,
    /// The thread's name epoch from this rename on.
    pub epoch: u32,
    pub time: SystemTime,
    pub name: String,
    /// The name filled the kernel's buffer and may have been cut.
    pub truncated: bool,
    pub source: RenameSource,
}

impl ThreadRename {
    /// Decodes one ring-buffer record.
    pub fn decode(bytes: &[u8], boot: &MonotonicClock) -> Option<Self> {
        if bytes.len() < size_of::<RenameEvent>() {
            return None;
        }
        // SAFETY: the length is checked; RenameEvent is plain data and every
        // bit pattern is valid; the record may be unaligned.
        let event: RenameEvent = unsafe { bytes.as_ptr().cast::<RenameEvent>().read_unaligned() };
        let end = event.name.iter().position(|&b| b == 0);
        let name = String::from_utf8_lossy(&event.name[..end.unwrap_or(THREAD_NAME_LEN)]);
        Some(Self {
            tgid: event.tgid,
            tid: event.tid,
            epoch: event.epoch,
            time: boot.to_system_time(event.ktime_ns),
            name: name.into_owned(),
            truncated: end.is_none_or(|end| end + 1 >= THREAD_NAME_LEN),
            source: if event.source == rename_source::TASK_RENAME {
                RenameSource::TaskRename
            } else {
                RenameSource::JvmNativeName
            },
        })
    }
}

/// Converts `bpf_ktime_get_ns` (CLOCK_MONOTONIC) to wall-clock time.
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    /// Wall-clock time at monotonic zero.
    origin: SystemTime,
}

impl MonotonicClock {
    pub fn now() -> Self {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid pointer to a timespec.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        let mono = Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
        Self {
            origin: SystemTime::now() - mono,
        }
    }

    pub fn to_system_time(&self, ktime_ns: u64) -> SystemTime {
        self.origin + Duration::from_nanos(ktime_ns)
    }
}

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

/// The rename programs, their attachments and the ring buffer.
pub struct RenameFeed {
    renames: RingBuf<MapData>,
    epochs: aya::maps::HashMap<MapData, u32, u32>,
    watch: HashMap<MapData, u32, u8>,
    /// libjvm.so files (device, inode) the uprobe is on, or why it is not.
    libjvms: StdHashMap<(u64, u64), Result<(), String>>,
    watched: HashSet<u32>,
    tracepoint: Result<(), String>,
    /// Why the uprobe is not used at all, if it is not.
    uprobe_off: Option<String>,
    clock: MonotonicClock,
}

impl RenameFeed {
    /// Loads the uprobe and the BTF tracepoint (attaching the latter, by the
    /// kernel's `btf`: no tracefs involved).
    pub fn load(
        ebpf: &mut Ebpf,
        btf: Result<&Btf, &String>,
        use_uprobe: bool,
    ) -> Result<Self, CollectError> {
        let program_error = |name| move |source| CollectError::Program { name, source };
        let uprobe: &mut UProbe = ebpf
            .program_mut(names::PROGRAM_JVM_THREAD_NAME)
            .ok_or(CollectError::MissingProgram(names::PROGRAM_JVM_THREAD_NAME))?
            .try_into()
            .map_err(program_error(names::PROGRAM_JVM_THREAD_NAME))?;
        uprobe
            .load()
            .map_err(program_error(names::PROGRAM_JVM_THREAD_NAME))?;

        let tracepoint = match btf {
            Ok(btf) => {
                let program: &mut BtfTracePoint = ebpf
                    .program_mut(names::PROGRAM_TASK_RENAME)
                    .ok_or(CollectError::MissingProgram(names::PROGRAM_TASK_RENAME))?
                    .try_into()
                    .map_err(program_error(names::PROGRAM_TASK_RENAME))?;
                program
                    .load("task_rename", btf)
                    .and_then(|()| program.attach().map(drop))
                    .map_err(|err| format!("task_rename BTF tracepoint not attached: {err}"))
            }
            Err(reason) => Err(format!("task_rename tracepoint not attached: {reason}")),
        };
        if let Err(reason) = &tracepoint {
            warn!("{reason}");
        }
        Ok(Self {
            renames: take_map(ebpf, names::RENAMES)?,
            epochs: take_map(ebpf, names::THREAD_EPOCHS)?,
            watch: take_map(ebpf, names::RENAME_WATCH_TGIDS)?,
            libjvms: StdHashMap::new(),
            watched: HashSet::new(),
            tracepoint,
            uprobe_off: (!use_uprobe)
                .then(|| "rename uprobe off (--thread-names dumps)".to_owned()),
            clock: MonotonicClock::now(),
        })
    }

    /// Makes sure a JVM's renames are seen: the uprobe on its libjvm.so
    /// (`libjvm` as the process sees the path), else the tracepoint.
    pub fn watch_jvm(&mut self, ebpf: &mut Ebpf, pid: u32, libjvm: &str) -> NameFeed {
        // Through the process's root: a containerized JVM's library is not
        // at that path in our mount namespace.
        let path = PathBuf::from(format!("/proc/{pid}/root{libjvm}"));
        let attached = match &self.uprobe_off {
            Some(off) => Err(off.clone()),
            None => self.uprobe_on(ebpf, &path, libjvm),
        };
        match attached {
            Ok(()) => NameFeed::Uprobe,
            Err(reason) => match &self.tracepoint {
                Ok(()) => {
                    if self.watched.insert(pid)
                        && let Err(err) = self.watch.insert(&pid, &1u8, 0)
                    {
                        self.watched.remove(&pid);
                        return NameFeed::None {
                            reason: format!("{reason}; rename watch list full ({err})"),
                        };
                    }
                    NameFeed::Tracepoint { reason }
                }
                Err(tracepoint) => NameFeed::None {
                    reason: format!("{reason}; {tracepoint}"),
                },
            },
        }
    }

    /// Puts the uprobe on the JDKs installed on the host
    /// (`/usr/lib/jvm/*/lib/server/libjvm.so` and JDK 8's
    /// `jre/lib/amd64/server`), before any of their JVMs starts: uprobes sit
    /// on the file, so a JVM started later has every rename seen from its
    /// first thread on, names given at thread start included.
    pub fn watch_installed_jvms(&mut self, ebpf: &mut Ebpf) {
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
                if let Err(reason) = self.uprobe_on(ebpf, &path, &shown) {
                    debug!("installed JDK {shown}: {reason}");
                }
            }
        }
    }

    /// The uprobe on the libjvm.so at `path` (`shown` in messages), placed
    /// once per file (device, inode): a symlinked JDK directory, or the same
    /// library seen through several processes' roots, is one file.
    fn uprobe_on(
        &mut self,
        ebpf: &mut Ebpf,
        path: &std::path::Path,
        shown: &str,
    ) -> Result<(), String> {
        let meta =
            fs::metadata(path).map_err(|err| format!("cannot open {}: {err}", path.display()))?;
        self.libjvms
            .entry((meta.dev(), meta.ino()))
            .or_insert_with(|| attach_uprobe(ebpf, path, shown))
            .clone()
    }

    /// Stops watching an exited process.
    pub fn forget(&mut self, pid: u32) {
        if self.watched.remove(&pid) {
            let _ = self.watch.remove(&pid);
        }
    }

    /// The current name epoch of each thread of process `pid` (0 for threads
    /// never renamed while watched).
    pub fn current_epochs(&self, pid: u32) -> StdHashMap<u32, u32> {
        let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
            return StdHashMap::new();
        };
        tasks
            .filter_map(Result::ok)
            .filter_map(|task| task.file_name().to_str()?.parse::<u32>().ok())
            .map(|tid| (tid, self.epochs.get(&tid, 0).unwrap_or(0)))
            .collect()
    }

    /// Every rename announced so far.
    pub fn read(&mut self) -> Vec<ThreadRename> {
        let mut renames = Vec::new();
        while let Some(item) = self.renames.next() {
            match ThreadRename::decode(&item, &self.clock) {
                Some(rename) => renames.push(rename),
                None => debug!(len = item.len(), "short rename record ignored"),
            }
        }
        renames
    }
}

fn attach_uprobe(ebpf: &mut Ebpf, path: &std::path::Path, libjvm: &str) -> Result<(), String> {
    let offset = jvm_symbol::set_native_thread_name_offset(path).map_err(|err| err.to_string())?;
    let program: &mut UProbe = ebpf
        .program_mut(names::PROGRAM_JVM_THREAD_NAME)
        .ok_or("the rename uprobe is missing from the object")?
        .try_into()
        .map_err(|err| format!("{err}"))?;
    program
        .attach([offset], path, UProbeScope::AllProcesses)
        .map_err(|err| format!("uprobe on {libjvm}+{offset:#x} failed: {err}"))?;
    info!("full thread names from {libjvm} (uprobe at {offset:#x})");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_a_rename_record() {
        let mut event = RenameEvent {
            tgid: 10,
            tid: 11,
            epoch: 3,
            source: rename_source::JVM_NATIVE_NAME,
            ktime_ns: 5_000_000_000,
            name: [0; THREAD_NAME_LEN],
        };
        let name = b"Executor task launch worker for task 1.0 in stage 2.0 (TID 3)";
        event.name[..name.len()].copy_from_slice(name);
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (&event as *const RenameEvent).cast::<u8>(),
                size_of::<RenameEvent>(),
            )
        };
        let clock = MonotonicClock {
            origin: SystemTime::UNIX_EPOCH,
        };
        let rename = ThreadRename::decode(bytes, &clock).unwrap();
        assert_eq!(rename.name.as_bytes(), name);
        assert_eq!(rename.epoch, 3);
        assert!(!rename.truncated);
        assert_eq!(rename.time, SystemTime::UNIX_EPOCH + Duration::from_secs(5));
        assert!(ThreadRename::decode(&bytes[..10], &clock).is_none());

        event.name = [b'x'; THREAD_NAME_LEN];
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (&event as *const RenameEvent).cast::<u8>(),
                size_of::<RenameEvent>(),
            )
        };
        let cut = ThreadRename::decode(bytes, &clock).unwrap();
        assert!(cut.truncated);
        assert_eq!(cut.name.len(), THREAD_NAME_LEN);
    }
}
