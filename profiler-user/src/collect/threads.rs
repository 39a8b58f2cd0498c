//! The threads of followed runtime processes, as the kernel's programs look
//! them up by thread id: a walked JVM's `JavaThread`s (`HOTSPOT_THREADS`)
//! and a CPython process's `PyThreadState`s (`PY_THREADS`).
//!
//! Thread ids are the host's and get reused: a thread of one followed
//! process can exit and its id go to a thread of another before a drain
//! tells us. Each entry therefore names its process ([`RuntimeThread`]):
//! the kernel takes an entry only for a sample of that process, and a
//! process's threads are removed here only while the entry is still its
//! own (the other process may have registered the id since).

use std::collections::HashMap as StdHashMap;

use aya::{
    Ebpf,
    maps::{HashMap, MapData},
};
use profiler_common::RuntimeThread;
use tracing::debug;

use super::{CollectError, take_map};

/// One of the kernel's thread maps, and what each process registered in it.
pub struct FollowedThreads {
    name: &'static str,
    map: HashMap<MapData, u32, RuntimeThread>,
    /// Each process's entries in `map`: host tid → state address.
    registered: StdHashMap<u32, StdHashMap<u32, u64>>,
}

impl FollowedThreads {
    /// Takes map `name` (a `HashMap<u32, RuntimeThread>`).
    pub fn take(ebpf: &mut Ebpf, name: &'static str) -> Result<Self, CollectError> {
        Ok(Self {
            name,
            map: take_map(ebpf, name)?,
            registered: StdHashMap::new(),
        })
    }

    /// Replaces process `pid`'s threads by `threads` (host tid, state
    /// address), writing only what changed (most drains nothing). A full
    /// map leaves the rest out (logged).
    pub fn set(&mut self, pid: u32, threads: impl IntoIterator<Item = (u32, u64)>) {
        let before = self.registered.remove(&pid).unwrap_or_default();
        let now: StdHashMap<u32, u64> = threads.into_iter().collect();
        for &tid in before.keys().filter(|tid| !now.contains_key(tid)) {
            self.remove(pid, tid);
        }
        let mut registered = StdHashMap::with_capacity(now.len());
        for (tid, state) in now {
            if before.get(&tid) != Some(&state) {
                let value = RuntimeThread {
                    tgid: pid,
                    state,
                    ..RuntimeThread::default()
                };
                if let Err(err) = self.map.insert(&tid, &value, 0) {
                    debug!(pid, tid, map = self.name, "thread not registered: {err}");
                    continue;
                }
            }
            registered.insert(tid, state);
        }
        self.registered.insert(pid, registered);
    }

    /// The kernel's entry for thread `tid`: its process and state address.
    pub fn entry(&self, tid: u32) -> Option<(u32, u64)> {
        let thread = self.map.get(&tid, 0).ok()?;
        Some((thread.tgid, thread.state))
    }

    /// Removes every thread of process `pid` (it exited).
    pub fn forget(&mut self, pid: u32) {
        for tid in self.registered.remove(&pid).unwrap_or_default().into_keys() {
            self.remove(pid, tid);
        }
    }

    /// Processes with threads registered, and their threads in all.
    pub fn counts(&self) -> (usize, usize) {
        (
            self.registered.len(),
            self.registered.values().map(StdHashMap::len).sum(),
        )
    }

    /// Removes thread `tid` of process `pid`, unless its id went to a
    /// thread of another process meanwhile (which registered it as its own).
    fn remove(&mut self, pid: u32, tid: u32) {
        if self.map.get(&tid, 0).is_ok_and(|thread| thread.tgid == pid) {
            let _ = self.map.remove(&tid);
        }
    }
}
