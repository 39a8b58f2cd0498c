//! The executable mappings native frames are named from
//! (`sparkprof::sys::proc::read_executable_maps`): asked of the kernel with
//! `PROCMAP_QUERY` from Linux 6.11, read from the maps file's text before.
//! Either way they must be the maps file's executable lines (but for
//! `[vsyscall]`, which the query leaves out: no user address lies in it),
//! and the way taken must be the kernel's: the query where it exists.

use sparkprof::sys::{proc, vma_query};

/// The first kernel with `PROCMAP_QUERY`.
const QUERY_SINCE: (u32, u32) = (6, 11);

pub fn check_executable_maps(pid: u32) -> Result<String, String> {
    let release =
        std::fs::read_to_string("/proc/sys/kernel/osrelease").map_err(|e| e.to_string())?;
    let mut numbers = release.trim().split(|c: char| !c.is_ascii_digit());
    let version = (
        numbers
            .next()
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap_or(0),
        numbers
            .next()
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap_or(0),
    );
    let asked = match vma_query::executable_mappings(pid) {
        Ok(_) => true,
        Err(vma_query::QueryError::Unsupported) => false,
        Err(vma_query::QueryError::Failed(err)) => {
            return Err(format!("PROCMAP_QUERY failed: {err}"));
        }
    };
    if asked != (version >= QUERY_SINCE) {
        return Err(format!(
            "kernel {}: PROCMAP_QUERY {}",
            release.trim(),
            if asked { "answered" } else { "did not answer" }
        ));
    }
    // The process may map or unmap code between two reads: equal in one
    // of three tries.
    let mut last = String::new();
    for _ in 0..3 {
        let got = proc::read_executable_maps(pid).map_err(|e| e.to_string())?;
        let mut text = proc::read_maps(pid).map_err(|e| e.to_string())?;
        // `[vsyscall]` is no mapping of the process: the query leaves it out.
        text.retain(|m| m.executable && m.path != proc::MapPath::Special("[vsyscall]".into()));
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
