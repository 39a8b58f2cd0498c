//! Stage 2 of the pipeline: **enrich**.
//!
//! Turns the collector's thread ids into *who*: the process (name, start time
//! to tell a reused PID from the original, kernel thread or not) and the
//! thread's name. Process facts are read from /proc once per process and
//! cached; a process whose PID disappears, or comes back with another start
//! time, is reported as exited so that later stages can drop what they cached
//! for it.

pub mod spark;

use std::{collections::HashMap, fs, sync::Arc};

use crate::collect::{Drain, RawSample, RawStack};

/// `PF_KTHREAD` in the flags field of /proc/PID/stat.
const PF_KTHREAD: u64 = 0x0020_0000;

/// What the pipeline knows about one process.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProcessInfo {
    pub pid: u32,
    /// Start time in clock ticks since boot (field 22 of /proc/PID/stat);
    /// with the PID it identifies the process across PID reuse. 0 when the
    /// process was gone before it could be read.
    pub start_ticks: u64,
    /// The process's comm.
    pub name: String,
    /// A kernel thread (no user address space).
    pub kernel_thread: bool,
    /// The language runtime in the process, if one we know.
    pub runtime: Runtime,
}

/// Language runtimes whose code needs more than ELF symbols to be named.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Runtime {
    /// Plain native code.
    Native,
    /// A HotSpot JVM: `libjvm.so` is mapped (at this path, as the process sees it).
    Jvm { libjvm: String },
}

impl Runtime {
    /// Recognizes the runtime from the text of /proc/PID/maps.
    pub fn from_maps(maps: &str) -> Self {
        maps.lines()
            .filter_map(|line| line.split_whitespace().nth(5))
            .find(|path| path.ends_with("/libjvm.so"))
            .map_or(Self::Native, |libjvm| Self::Jvm {
                libjvm: libjvm.to_owned(),
            })
    }

    pub fn is_jvm(&self) -> bool {
        matches!(self, Self::Jvm { .. })
    }
}

/// A sample with its process and thread identified.
#[derive(Debug, Clone)]
pub struct EnrichedSample {
    pub raw: RawSample,
    pub process: Arc<ProcessInfo>,
    pub thread_name: String,
}

/// One drain, enriched.
#[derive(Debug)]
pub struct EnrichedDrain {
    pub start: std::time::SystemTime,
    pub end: std::time::SystemTime,
    pub samples: Vec<EnrichedSample>,
    /// Processes that exited (or whose PID was reused) since the last drain.
    pub exited: Vec<Arc<ProcessInfo>>,
}

/// The enrich stage and its process cache.
#[derive(Default)]
pub struct Enricher {
    processes: HashMap<u32, Arc<ProcessInfo>>,
}

impl Enricher {
    pub fn new() -> Self {
        Self::default()
    }

    /// Identifies the processes and threads of a drain.
    ///
    /// Samples are matched against the cache first: a process that exited
    /// after being counted keeps the identity it had while it ran. Only then
    /// are exits detected, and reported so later stages evict after using
    /// what they cached for this drain.
    pub fn enrich(&mut self, drain: Drain) -> EnrichedDrain {
        // Processes first seen in this drain and already gone: name them after
        // their main thread's comm if it was sampled.
        let mut leader_comms: HashMap<u32, String> = HashMap::new();
        for raw in &drain.samples {
            if raw.tid == raw.tgid {
                leader_comms
                    .entry(raw.tgid)
                    .or_insert_with(|| raw.comm.clone());
            }
        }
        let mut gone: HashMap<u32, Arc<ProcessInfo>> = HashMap::new();
        let mut samples = Vec::with_capacity(drain.samples.len());
        for raw in drain.samples {
            let process = match self
                .processes
                .get(&raw.tgid)
                .or_else(|| gone.get(&raw.tgid))
            {
                Some(info) => info.clone(),
                None => match read_process(raw.tgid) {
                    Some(info) => {
                        let info = Arc::new(info);
                        self.processes.insert(raw.tgid, info.clone());
                        info
                    }
                    None => {
                        let info = Arc::new(exited_process(&raw, leader_comms.get(&raw.tgid)));
                        gone.insert(raw.tgid, info.clone());
                        info
                    }
                },
            };
            let thread_name = raw.comm.clone();
            samples.push(EnrichedSample {
                raw,
                process,
                thread_name,
            });
        }

        // Forget processes that are gone or whose PID now names another process.
        let mut exited: Vec<Arc<ProcessInfo>> = gone.into_values().collect();
        self.processes.retain(|pid, info| {
            let alive = read_stat(*pid).is_some_and(|stat| stat.start_ticks == info.start_ticks);
            if !alive {
                exited.push(info.clone());
            }
            alive
        });
        EnrichedDrain {
            start: drain.start,
            end: drain.end,
            samples,
            exited,
        }
    }
}

struct Stat {
    start_ticks: u64,
    flags: u64,
}

/// Parses the fields we need from /proc/PID/stat. The comm (field 2) may hold
/// spaces and parentheses, so fields are counted from the last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let after_comm = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    // after_comm starts at field 3 (state): flags is field 9, starttime field 22.
    Some(Stat {
        flags: fields.get(6)?.parse().ok()?,
        start_ticks: fields.get(19)?.parse().ok()?,
    })
}

fn read_stat(pid: u32) -> Option<Stat> {
    parse_stat(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

fn read_process(pid: u32) -> Option<ProcessInfo> {
    let stat = read_stat(pid)?;
    let name = fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    let kernel_thread = stat.flags & PF_KTHREAD != 0;
    let runtime = if kernel_thread {
        Runtime::Native
    } else {
        fs::read_to_string(format!("/proc/{pid}/maps"))
            .map_or(Runtime::Native, |maps| Runtime::from_maps(&maps))
    };
    Some(ProcessInfo {
        pid,
        start_ticks: stat.start_ticks,
        name: name.trim_end_matches('\n').to_owned(),
        kernel_thread,
        runtime,
    })
}

/// A process that exited before it could be read from /proc: named after its
/// main thread's comm when that thread was sampled, else marked as exited.
fn exited_process(sample: &RawSample, leader_comm: Option<&String>) -> ProcessInfo {
    ProcessInfo {
        pid: sample.tgid,
        start_ticks: 0,
        name: match leader_comm {
            Some(comm) => comm.clone(),
            None => format!("[exited] {}", sample.comm),
        },
        kernel_thread: matches!(sample.user, RawStack::Absent)
            && !matches!(sample.kernel, RawStack::Absent),
        runtime: Runtime::Native,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_hostile_comm() {
        let text =
            "1234 (a) b) (c) S 1 1234 1234 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 3 0 987654 1000 200";
        let stat = parse_stat(text).unwrap();
        assert_eq!(stat.flags, 4194560);
        assert_eq!(stat.start_ticks, 987654);
    }

    #[test]
    fn recognizes_a_jvm_from_its_mappings() {
        let maps = "7f00-7f10 r-xp 00000000 fd:00 1 /usr/lib/jvm/java-17/lib/server/libjvm.so\n";
        assert_eq!(
            Runtime::from_maps(maps),
            Runtime::Jvm {
                libjvm: "/usr/lib/jvm/java-17/lib/server/libjvm.so".into()
            }
        );
        assert_eq!(
            Runtime::from_maps("7f00-7f10 r-xp 0 fd:00 1 /usr/lib/libc.so.6\n"),
            Runtime::Native
        );
    }

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        let stat = read_stat(me).unwrap();
        assert!(stat.start_ticks > 0);
        assert_eq!(stat.flags & PF_KTHREAD, 0);
    }
}
