//! A JVM's Java threads: which `JavaThread` each thread id is, from the
//! VM's own list (`ThreadsSMRSupport::_java_thread_list`), and where a
//! `JavaThread` keeps its last Java frame (`JavaFrameAnchor`).
//!
//! The kernel's walker needs the latter for a sample taken in native code
//! (libjvm, libc, a JNI library): native frames do not always keep a frame
//! pointer, and the anchor says where the Java frames resume. The list is
//! read again only when the VM published a new one (it replaces the list,
//! never edits it, whenever a thread starts or exits), and then only the
//! threads not in the last one are read. A `JavaThread` freed and its
//! memory given to a new thread keeps the old thread's id until every
//! thread's id is read again, through the `OSThread` it had, at most every
//! [`RECHECK_IDS`] (a JVM of thousands of threads that start and stop all
//! the time costs one read per thread then, not every drain). A stale id
//! costs that thread its anchor meanwhile, never a wrong frame: the kernel
//! takes an anchor only where the sample lies on the `JavaThread`'s own
//! stack.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use super::{HotspotError, vmstructs::VmStructs};
use crate::sys::memory::{Memory, ReadMemory};

/// A JVM lists at most this many Java threads (more is a list read torn
/// or garbage).
const MAX_JAVA_THREADS: u32 = 1 << 20;
/// How often the ids of threads already known are read again.
pub const RECHECK_IDS: Duration = Duration::from_secs(10);

/// Where a thread's threads list and anchors are (optional parts of the
/// layout: a JVM without them is walked without anchors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadLayout {
    /// Address of `ThreadsSMRSupport::_java_thread_list`.
    pub java_thread_list: u64,
    pub threads_list_length: u64,
    pub threads_list_threads: u64,
    pub osthread: u64,
    pub osthread_thread_id: u64,
    pub anchor: u64,
    pub last_java_sp: u64,
    pub last_java_pc: u64,
    pub last_java_fp: u64,
    /// `JavaThread::_stack_base` (the top) and `_stack_size`.
    pub stack_base: u64,
    pub stack_size: u64,
}

impl ThreadLayout {
    pub fn from_tables(tables: &VmStructs) -> Result<Self, HotspotError> {
        let offset = |ty: &str, field: &str| tables.required_offset(ty, field);
        // A field of `Thread` in older JDKs, of `JavaThread` in newer ones.
        let thread_field =
            |field: &str| tables.first_offset(&[("JavaThread", field), ("Thread", field)]);
        Ok(Self {
            java_thread_list: tables.required_address("ThreadsSMRSupport", "_java_thread_list")?,
            threads_list_length: offset("ThreadsList", "_length")?,
            threads_list_threads: offset("ThreadsList", "_threads")?,
            osthread: thread_field("_osthread")?,
            osthread_thread_id: offset("OSThread", "_thread_id")?,
            anchor: offset("JavaThread", "_anchor")?,
            last_java_sp: offset("JavaFrameAnchor", "_last_Java_sp")?,
            last_java_pc: offset("JavaFrameAnchor", "_last_Java_pc")?,
            last_java_fp: offset("JavaFrameAnchor", "_last_Java_fp")?,
            stack_base: thread_field("_stack_base")?,
            stack_size: thread_field("_stack_size")?,
        })
    }

    /// The list of Java threads now (its address: a new one each change).
    fn list(&self, memory: &impl ReadMemory) -> Result<u64, HotspotError> {
        match memory.read_u64(self.java_thread_list)? {
            0 => Err(HotspotError::NotReady("no Java threads list")),
            list => Ok(list),
        }
    }

    /// The `JavaThread*`s in `list`.
    fn threads_in(&self, memory: &impl ReadMemory, list: u64) -> Result<Vec<u64>, HotspotError> {
        let length = memory.read_u32(list + self.threads_list_length)?;
        if length > MAX_JAVA_THREADS {
            return Err(HotspotError::Garbage(format!("{length} Java threads")));
        }
        let array = memory.read_u64(list + self.threads_list_threads)?;
        let bytes = memory.read_vec(array, 8 * length as usize)?;
        Ok(bytes
            .as_chunks::<8>()
            .0
            .iter()
            .map(|&word| u64::from_le_bytes(word))
            .collect())
    }

    /// The thread id an `OSThread` holds (in the JVM's PID namespace),
    /// `None` before it is set.
    fn os_thread_id(&self, memory: &impl ReadMemory, os: u64) -> Result<Option<u32>, HotspotError> {
        Ok(Some(memory.read_u32(os + self.osthread_thread_id)?).filter(|&tid| tid != 0))
    }

    /// The `OSThread` of `thread` and its thread id, `None` for a thread
    /// not started yet.
    fn thread_id(
        &self,
        memory: &impl ReadMemory,
        thread: u64,
    ) -> Result<Option<(u64, u32)>, HotspotError> {
        match memory.read_u64(thread + self.osthread)? {
            0 => Ok(None),
            os => Ok(self.os_thread_id(memory, os)?.map(|id| (os, id))),
        }
    }
}

/// The `JavaThread*` of the thread whose id (in the JVM's PID namespace)
/// is `tid`, from the VM's list of Java threads.
pub fn java_thread(
    memory: &impl ReadMemory,
    threads: &ThreadLayout,
    tid: u32,
) -> Result<Option<u64>, HotspotError> {
    let list = threads.list(memory)?;
    for thread in threads.threads_in(memory, list)? {
        if threads
            .thread_id(memory, thread)?
            .is_some_and(|(_, id)| id == tid)
        {
            return Ok(Some(thread));
        }
    }
    Ok(None)
}

/// A JVM's Java threads as last read: (thread id in the JVM's PID
/// namespace, `JavaThread*`), read again when the VM publishes a new list.
#[derive(Debug, Default)]
pub struct JavaThreads {
    list: u64,
    /// `JavaThread*` → its `OSThread*` and thread id, for the threads of
    /// `list`.
    ids: HashMap<u64, (u64, u32)>,
    /// When every thread's id was last read.
    checked: Option<Instant>,
}

impl JavaThreads {
    /// Threads held.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The next call reads the list even if it has not changed.
    pub fn read_again(&mut self) {
        self.list = 0;
    }

    /// The JVM's threads as (thread id, `JavaThread*`) if its list changed
    /// since the last call, `None` if not.
    pub fn changed(
        &mut self,
        memory: &Memory,
        layout: &ThreadLayout,
    ) -> Result<Option<Vec<(u32, u64)>>, HotspotError> {
        let list = layout.list(memory)?;
        if list == self.list {
            return Ok(None);
        }
        let recheck = self
            .checked
            .is_none_or(|checked| checked.elapsed() >= RECHECK_IDS);
        let threads = layout.threads_in(memory, list)?;
        // Each thread's `OSThread*` if new, then the id of each new or
        // rechecked, in a system call or two for them all: the list of a
        // Spark executor changes at nearly every drain, and reading them
        // one by one was a fortieth of sparkprof's CPU on a Spark host.
        let new: Vec<u64> = threads
            .iter()
            .filter(|thread| !self.ids.contains_key(thread))
            .map(|thread| thread + layout.osthread)
            .collect();
        let mut new_os = memory.read_each(&new, 8).into_iter().map(|bytes| {
            bytes.map(|bytes| u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")))
        });
        let os_threads: Vec<Option<u64>> = threads
            .iter()
            .map(|thread| match self.ids.get(thread) {
                Some(&(os, _)) => Some(os),
                None => new_os.next().flatten(),
            })
            .collect();
        let wanted: Vec<u64> = threads
            .iter()
            .zip(&os_threads)
            .filter_map(|(thread, os)| {
                let wanted = recheck || !self.ids.contains_key(thread);
                os.filter(|&os| os != 0 && wanted)
            })
            .map(|os| os + layout.osthread_thread_id)
            .collect();
        let mut read_ids = memory.read_each(&wanted, 4).into_iter().map(|bytes| {
            bytes.map(|bytes| u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes")))
        });
        let mut ids = HashMap::new();
        let mut started = true;
        for (&thread, os) in threads.iter().zip(os_threads) {
            let known = self.ids.get(&thread).filter(|_| !recheck);
            let id = match (known, os) {
                (Some(&known), _) => Some(known),
                // Not yet running, or an `OSThread` without its id yet.
                (None, None | Some(0)) => None,
                (None, Some(os)) => match read_ids.next().flatten() {
                    Some(0) => None,
                    Some(id) => Some((os, id)),
                    None => return Err(HotspotError::Garbage(format!("thread {thread:#x}"))),
                },
            };
            match id {
                Some(id) => {
                    ids.insert(thread, id);
                }
                None => started = false,
            }
        }
        // A list freed and replaced while it was read is read again next
        // time (what it gave may mix two lists' threads).
        if layout.list(memory)? != list {
            return Ok(None);
        }
        // A thread without its id yet: the same list is read again.
        self.list = if started { list } else { 0 };
        self.ids = ids;
        if recheck {
            self.checked = Some(Instant::now());
        }
        Ok(Some(
            self.ids
                .iter()
                .map(|(&thread, &(_, id))| (id, thread))
                .collect(),
        ))
    }
}
