//! sparkprof's userspace: a pipeline that reads in one direction.
//!
//! ```text
//! collect     BPF maps → raw aggregates (tgid, tid, comm, user stack, kernel stack) → count
//! enrich      /proc → which process (name, start time, kernel thread) and thread
//! symbolize   addresses → frames (native via blazesym, kernel via kallsyms)
//! write       frames → folded files, SVG flame graphs, index.json
//! ```
//! Each stage is a module with a narrow input and output type; no stage
//! reaches back into an earlier one. Two commands drive them: [`record`]
//! wires the stages together, [`doctor`] reports what a recording would
//! get on this host. [`sys`] (sysctls, capabilities) sits below all of
//! them. Language runtimes ([`runtime`]) each own what a process in that
//! runtime needs, driven by `record` beside the stages.

pub mod collect;
pub mod daemon;
pub mod doctor;
pub mod enrich;
pub mod merge;
pub mod record;
pub mod runtime;
pub mod symbolize;
pub mod sys;
pub mod write;

/// A hash map for the tables every frame of every sample is looked up in
/// (addresses, folded lines): std's SipHash, built against hash flooding,
/// was a tenth of the symbolize and write stages' time; foldhash is seeded
/// per process all the same.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
/// The set of [`FastMap`].
pub(crate) type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// The one copy of `text` in `set`, made and added if it has none: names
/// many frames or samples share are held once and handed out by reference
/// count.
pub(crate) fn intern<S: std::hash::BuildHasher>(
    set: &mut std::collections::HashSet<std::sync::Arc<str>, S>,
    text: &str,
) -> std::sync::Arc<str> {
    if let Some(held) = set.get(text) {
        return held.clone();
    }
    let held: std::sync::Arc<str> = text.into();
    set.insert(held.clone());
    held
}
