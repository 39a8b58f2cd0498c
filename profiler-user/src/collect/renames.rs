//! The kernel's rename feed: threads' names as they get them.
//!
//! Two programs announce renames with the thread's new name epoch: a uprobe
//! on a function that names the calling thread (runtimes place it, e.g.
//! on HotSpot's `os::set_native_thread_name`, with the full name), and the
//! `task_rename` tracepoint for the processes in its watch list (the 15-byte
//! comm only; the runtime asks the process for the full name). Renames
//! arrive through a ring buffer, read after each buffer flip so that every
//! epoch a drained count carries has already been announced.

use std::{
    collections::{HashMap as StdHashMap, HashSet},
    fs,
    path::Path,
    time::{Duration, SystemTime},
};

use aya::{
    Btf, Ebpf,
    maps::{HashMap, MapData, RingBuf},
    programs::{UProbe, uprobe::UProbeScope},
};
use profiler_common::{RenameEvent, THREAD_NAME_LEN, names, rename_source};
use tracing::{debug, warn};

use super::{CollectError, attach_btf_tracepoint, program, take_map};

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

/// The rename programs, their attachments and the ring buffer.
pub struct RenameFeed {
    renames: RingBuf<MapData>,
    epochs: aya::maps::HashMap<MapData, u32, u32>,
    watch: HashMap<MapData, u32, u8>,
    watched: HashSet<u32>,
    tracepoint: Result<(), String>,
    clock: MonotonicClock,
}

impl RenameFeed {
    /// Loads the uprobe and the BTF tracepoint (attaching the latter, by the
    /// kernel's `btf`: no tracefs involved).
    pub fn load(ebpf: &mut Ebpf, btf: Result<&Btf, &String>) -> Result<Self, CollectError> {
        let uprobe: &mut UProbe = program(ebpf, names::PROGRAM_JVM_THREAD_NAME)?;
        uprobe.load().map_err(|source| CollectError::Program {
            name: names::PROGRAM_JVM_THREAD_NAME,
            source,
        })?;

        let tracepoint = match btf {
            Ok(btf) => attach_btf_tracepoint(ebpf, btf, names::PROGRAM_TASK_RENAME, "task_rename")?
                .map_err(|err| format!("task_rename BTF tracepoint not attached: {err}")),
            Err(reason) => Err(format!("task_rename tracepoint not attached: {reason}")),
        };
        if let Err(reason) = &tracepoint {
            warn!("{reason}");
        }
        Ok(Self {
            renames: take_map(ebpf, names::RENAMES)?,
            epochs: take_map(ebpf, names::THREAD_EPOCHS)?,
            watch: take_map(ebpf, names::RENAME_WATCH_TGIDS)?,
            watched: HashSet::new(),
            tracepoint,
            clock: MonotonicClock::now(),
        })
    }

    /// Puts the name-setter uprobe on the function at `offset` in the file
    /// at `path`: a function that names the calling thread, its name (a C
    /// string) the first argument. Uprobes live on the file's inode, so one
    /// attachment covers every process that maps it, in any container.
    pub fn attach_name_setter(
        &mut self,
        ebpf: &mut Ebpf,
        path: &Path,
        offset: u64,
    ) -> Result<(), CollectError> {
        let program_error = |source| CollectError::Program {
            name: names::PROGRAM_JVM_THREAD_NAME,
            source,
        };
        let program: &mut UProbe = ebpf
            .program_mut(names::PROGRAM_JVM_THREAD_NAME)
            .ok_or(CollectError::MissingProgram(names::PROGRAM_JVM_THREAD_NAME))?
            .try_into()
            .map_err(program_error)?;
        program
            .attach([offset], path, UProbeScope::AllProcesses)
            .map(drop)
            .map_err(program_error)
    }

    /// Has the `task_rename` tracepoint report the renames of process
    /// `pid`'s threads; says why not when it cannot.
    pub fn watch(&mut self, pid: u32) -> Result<(), String> {
        self.tracepoint.clone()?;
        if self.watched.insert(pid)
            && let Err(err) = self.watch.insert(&pid, &1u8, 0)
        {
            self.watched.remove(&pid);
            return Err(format!("rename watch list full ({err})"));
        }
        Ok(())
    }

    /// Whether the `task_rename` tracepoint is attached (it sees every
    /// rename on the host, watched or not).
    pub fn tracepoint_attached(&self) -> bool {
        self.tracepoint.is_ok()
    }

    pub fn held(&self, held: &mut crate::sys::held::Held) {
        held.add("collect.rename_watched", self.watched.len());
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
