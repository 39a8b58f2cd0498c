//! HotSpot's own structures, read from a live JVM: the layout it describes
//! in its exported VMStructs tables ([`vmstructs`], found through
//! [`libjvm`]), the offsets sparkprof needs from them ([`layout`]), its
//! code cache ([`code_cache`]: which code blob holds an address), the
//! names of its methods ([`names`]: `Method*` to `pkg.Class.method`), and
//! its threads ([`threads`]: thread id to `JavaThread`, and where each
//! keeps its last Java frame), and their Java frames walked without frame
//! pointers ([`walk`]).
//!
//! This is what lets Java frames be named whether interpreted or compiled,
//! and walked without `-XX:+PreserveFramePointer` (issue 16); the kernel's
//! walker is built on these offsets. Everything read from the JVM is
//! treated as hostile: a layout that does not add up is an error that says
//! why (and the JVM keeps today's perf-map naming), never a wrong frame.

pub mod archive;
pub mod code_cache;
pub mod inlining;
pub mod layout;
pub mod libjvm;
pub mod lines;
pub mod names;
pub mod process;
pub mod threads;
pub mod vmstructs;
pub mod walk;

use std::{io, path::PathBuf};

use thiserror::Error;

use crate::sys::memory::MemoryError;

/// Why a JVM's structures cannot be read.
#[derive(Debug, Error)]
pub enum HotspotError {
    #[error("no libjvm.so is mapped in process {0}")]
    NoLibjvm(u32),
    #[error("cannot read /proc/{pid}/maps: {source}")]
    Maps {
        pid: u32,
        #[source]
        source: io::Error,
    },
    #[error("cannot read /proc/{pid}/status: {source}")]
    Status {
        pid: u32,
        #[source]
        source: io::Error,
    },
    #[error("{}: {reason}", path.display())]
    Elf { path: PathBuf, reason: String },
    #[error("libjvm.so does not export {0} (not a HotSpot build sparkprof can read)")]
    MissingSymbol(String),
    #[error("this JVM's VMStructs lack {0}")]
    MissingField(String),
    #[error("this JVM's VMStructs make no sense: {0}")]
    Garbage(String),
    #[error("the JVM is not initialised yet: {0}")]
    NotReady(&'static str),
    #[error(transparent)]
    Read(#[from] MemoryError),
}
