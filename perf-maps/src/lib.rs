//! Perf-map files (`/tmp/perf-<pid>.map`) for a system-wide profiler, and a
//! client for the HotSpot dynamic attach protocol that makes a JVM write one.
//!
//! JIT-compiled code (HotSpot, CPython's perf trampolines, ...) has no ELF
//! symbols, so the only way to name those frames is the text map that the
//! runtime writes for `perf`. This crate exists separately from the BPF side
//! because everything here is plain userspace file and process handling that
//! is easier to test on its own.
//!
//! Why not blazesym's perf-map support: it does not look inside containers
//! (the map lives in the *process's* `/tmp`, named after its namespace PID)
//! and rejects the `0x`-prefixed lines that the JDK's `Compiler.perfmap`
//! writes. We keep blazesym for ELF and kernel symbols only.
//!
//! Concerns, one module each:
//! - [`map`]: parse maps ([`map::parser`]), a later-wins symbol table with
//!   binary-search lookup ([`map::SymbolTable`]), incremental reload of a
//!   file that grows or gets rewritten ([`map::PerfMapFile`]), and readable
//!   Java names ([`map::names`]).
//! - [`discovery`]: where a process's map is (container-aware) and who owns
//!   the process.
//! - [`trust`]: open a map only if it cannot have been planted by another
//!   user (`/tmp` is world-writable).
//! - [`attach`]: the HotSpot attach protocol (what `jcmd` does), run from a
//!   child process with the JVM's credentials, so we can ask a running JVM for
//!   `Compiler.perfmap` without any JDK tool installed on the host.
#![warn(missing_docs)]

pub mod attach;
pub mod discovery;
pub mod map;
pub mod trust;

pub use attach::{AttachError, AttachOptions, AttachResponse, Jvm, check_attachable};
pub use discovery::{DiscoveryError, Owner, ProcStatus};
pub use map::{
    MapError, NameStyle, ParseStats, PerfMapEntry, PerfMapFile, Refresh, Symbol, SymbolTable,
};
pub use trust::{Refused, TrustPolicy, TrustedFile};
