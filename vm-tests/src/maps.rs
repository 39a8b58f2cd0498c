//! The executable mappings native frames are named from
//! (`sparkprof::sys::proc::read_executable_maps`): asked of the kernel with
//! `PROCMAP_QUERY` from Linux 6.11, read from the maps file's text before.
//! Either way they must be the maps file's executable lines (but for
//! `[vsyscall]`, which the query leaves out: no user address lies in it),
//! and the way taken must be the kernel's: the query where it exists.

use aya::util::KernelVersion;
use sparkprof::sys::{proc, vma_query};

/// The first kernel with `PROCMAP_QUERY`.
const QUERY_SINCE: KernelVersion = KernelVersion::new(6, 11, 0);

pub fn check_executable_maps(pid: u32) -> Result<String, String> {
    let version = KernelVersion::current().map_err(|e| e.to_string())?;
    let asked = match vma_query::executable_mappings(pid) {
        Ok(_) => true,
        Err(vma_query::QueryError::Unsupported) => false,
        Err(vma_query::QueryError::Failed(err)) => {
            return Err(format!("PROCMAP_QUERY failed: {err}"));
        }
    };
    if asked != (version >= QUERY_SINCE) {
        return Err(format!(
            "kernel {version:?}: PROCMAP_QUERY {}",
            if asked { "answered" } else { "did not answer" }
        ));
    }
    // The process may map or unmap code between two reads: equal in one
    // of three tries.
    let mut last = String::new();
    for _ in 0..3 {
        let got = proc::read_executable_maps(pid).map_err(|e| e.to_string())?;
        let text = proc::read_text_executable_maps(pid).map_err(|e| e.to_string())?;
        if got == text && got.iter().any(|m| m.file().is_some()) {
            let way = if asked {
                "asked with PROCMAP_QUERY"
            } else {
                "read as text"
            };
            return Ok(format!("{} executable mappings, {way}", got.len()));
        }
        last = format!("got {got:?}\nthe maps file's {text:?}");
    }
    Err(format!(
        "the executable mappings differ from the maps file's\n{last}"
    ))
}
