//! sparkprof's userspace: a pipeline that reads in one direction.
//!
//! ```text
//! collect     BPF maps → raw aggregates (tgid, tid, comm, user stack, kernel stack) → count
//! enrich      /proc → which process (name, start time, kernel thread) and thread
//! symbolize   addresses → frames (native via blazesym, kernel via kallsyms)
//! write       frames → folded files, SVG flame graphs, index.json
//! ```
//! Each stage is a module with a narrow input and output type; no stage
//! reaches back into an earlier one. [`record`] wires them together;
//! [`host`] holds the privilege checks and `doctor`.

pub mod collect;
pub mod enrich;
pub mod host;
pub mod record;
pub mod symbolize;
pub mod write;
