//! A CPython process's interpreters and thread states, the native thread id
//! behind each (from its `pthread_t`, calibrated for C libraries other than
//! glibc), and a userspace copy of the kernel's frame walk (for tests and
//! checks).

use std::collections::{HashMap, HashSet};

use profiler_common::{PY_NO_OFFSET, PythonFrame, python_layout};
use tracing::debug;

use super::memory::{Memory, ReadMemory as _, field_u32, field_u64};
use super::types::{PythonError, StructOffsets};

/// Interpreters walked at most.
pub const MAX_INTERPRETERS: usize = 256;
/// Thread states walked at most, over all interpreters.
pub const MAX_THREADS: usize = 4096;
/// Where glibc (x86-64, 2.26 and later) keeps `tid` in `struct pthread`,
/// which a `pthread_t` points at. Tried first; other C libraries are
/// calibrated (see [`calibrate_pthread_tid`]).
pub const GLIBC_PTHREAD_TID_OFFSET: u32 = 0x2d0;
/// Bytes of a `struct pthread` searched when calibrating.
const PTHREAD_SCAN_BYTES: usize = 0x1000;

/// A `PyThreadState` as found in an interpreter's list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawThread {
    pub tstate: u64,
    pub interp: u64,
    /// `thread_id`: the `pthread_t`.
    pub pthread: u64,
    /// `native_thread_id` (3.11+), in the process's PID namespace.
    pub native_id: Option<u64>,
    /// `_status.active` (3.12+): its thread runs this thread state now.
    pub active: Option<bool>,
}

/// Every thread state of every interpreter, the main interpreter's first,
/// each list in its own order (newest thread first). Bounded by
/// [`MAX_INTERPRETERS`] and [`MAX_THREADS`]; a cycle, or a thread state
/// that says it belongs to another interpreter (torn or freed memory),
/// ends that list.
pub fn list_thread_states(
    memory: &Memory,
    offsets: &StructOffsets,
    runtime: u64,
) -> Result<Vec<RawThread>, PythonError> {
    let main = memory.read_u64(runtime + u64::from(offsets.runtime_interpreters_main))?;
    let head = memory.read_u64(runtime + u64::from(offsets.runtime_interpreters_head))?;
    let mut interpreters = Vec::new();
    if main != 0 {
        interpreters.push(main);
    }
    let mut next = head;
    let mut seen_interp = HashSet::new();
    while next != 0 && seen_interp.len() < MAX_INTERPRETERS && seen_interp.insert(next) {
        if next != main {
            interpreters.push(next);
        }
        next = match memory.read_u64(next + u64::from(offsets.interp_next)) {
            Ok(next) => next,
            Err(e) if e.is_process_gone() => return Err(e.into()),
            Err(e) => {
                debug!(error = %e, "python interpreter list cut short");
                break;
            }
        };
    }

    let mut threads = Vec::new();
    let mut seen = HashSet::new();
    let read_len = offsets.tstate_read_len();
    for interp in interpreters {
        let mut tstate = match memory.read_u64(interp + u64::from(offsets.interp_threads_head)) {
            Ok(head) => head,
            Err(e) if e.is_process_gone() => return Err(e.into()),
            Err(e) => {
                debug!(interp, error = %e, "python interpreter unreadable");
                continue;
            }
        };
        while tstate != 0 && threads.len() < MAX_THREADS && seen.insert(tstate) {
            let block = match memory.read_vec(tstate, read_len) {
                Ok(block) => block,
                Err(e) if e.is_process_gone() => return Err(e.into()),
                Err(e) => {
                    debug!(tstate, error = %e, "python thread list cut short");
                    break;
                }
            };
            let owner = field_u64(&block, offsets.tstate_interp).unwrap_or(0);
            if owner != interp {
                debug!(
                    tstate,
                    owner, interp, "python thread state of another interpreter"
                );
                break;
            }
            threads.push(RawThread {
                tstate,
                interp,
                pthread: field_u64(&block, offsets.tstate_thread_id).unwrap_or(0),
                native_id: field_u64(&block, offsets.tstate_native_thread_id),
                active: field_u32(&block, offsets.tstate_status)
                    .map(|status| (status >> offsets.tstate_active_bit) & 1 == 1),
            });
            tstate = field_u64(&block, offsets.tstate_next).unwrap_or(0);
        }
    }
    Ok(threads)
}

/// The `tid` of a thread from its `pthread_t` (the address of the C
/// library's `struct pthread`), at a known offset.
pub fn pthread_tid(memory: &Memory, pthread: u64, offset: u32) -> Result<u32, PythonError> {
    if pthread == 0 {
        return Err(PythonError::BadObject {
            pid: memory.pid(),
            what: "pthread_t",
            addr: 0,
            reason: "null".into(),
        });
    }
    Ok(memory.read_u32(pthread.wrapping_add(u64::from(offset)))?)
}

/// Finds where the C library keeps the thread id in `struct pthread`:
/// the offset at which every given `pthread_t` holds a distinct live thread
/// id. glibc's offset is tried first; otherwise the first
/// [`PTHREAD_SCAN_BYTES`] of each are searched (4-byte aligned).
pub fn calibrate_pthread_tid(
    memory: &Memory,
    pthreads: &[u64],
    live: &HashMap<u32, u32>,
) -> Result<Option<u32>, PythonError> {
    let pthreads: Vec<u64> = pthreads.iter().copied().filter(|&p| p != 0).collect();
    if pthreads.is_empty() {
        return Ok(None);
    }
    let consistent = |values: &[u32]| {
        let distinct: HashSet<u32> = values.iter().copied().collect();
        distinct.len() == values.len() && values.iter().all(|v| live.contains_key(v))
    };
    let mut at_glibc = Vec::with_capacity(pthreads.len());
    for &p in &pthreads {
        match pthread_tid(memory, p, GLIBC_PTHREAD_TID_OFFSET) {
            Ok(tid) => at_glibc.push(tid),
            Err(e) if e.is_process_gone() => return Err(e),
            Err(_) => break,
        }
    }
    if at_glibc.len() == pthreads.len() && consistent(&at_glibc) {
        return Ok(Some(GLIBC_PTHREAD_TID_OFFSET));
    }
    let mut blocks = Vec::with_capacity(pthreads.len());
    for &p in &pthreads {
        match memory.read_vec(p, PTHREAD_SCAN_BYTES) {
            Ok(block) => blocks.push(block),
            Err(e) if e.is_process_gone() => return Err(e.into()),
            Err(_) => return Ok(None),
        }
    }
    for offset in (0..PTHREAD_SCAN_BYTES as u32).step_by(4) {
        let values: Vec<u32> = blocks.iter().filter_map(|b| field_u32(b, offset)).collect();
        if values.len() == blocks.len() && consistent(&values) {
            return Ok(Some(offset));
        }
    }
    Ok(None)
}

/// The frames of one thread, innermost first, read as the kernel walker
/// (`profiler-ebpf/src/python.rs`) reads them, same offsets, same steps:
/// from the thread state to its current frame (through `_PyCFrame` on
/// 3.11–3.12), then up to `max_frames` iterations that each step over one
/// frame owned by the C stack (3.12+; such shims never come two in a row)
/// and record the code object pointer at `frame_code` and the instruction
/// at `frame_instr` (a 4-byte `int` for [`python_layout::FRAME_OBJECT`],
/// zero-extended; a pointer otherwise) as they are. `truncated` when the
/// chain went on. Unlike the kernel, which reads an unreadable field as 0
/// and goes on, a failed read is an error here.
pub fn walk_frames(
    memory: &Memory,
    offsets: &StructOffsets,
    tstate: u64,
    max_frames: usize,
) -> Result<(Vec<PythonFrame>, bool), PythonError> {
    let mut frame = memory.read_u64(tstate + u64::from(offsets.walk.tstate_frame))?;
    if offsets.walk.layout == python_layout::CFRAME && frame != 0 {
        frame = memory.read_u64(frame + u64::from(offsets.walk.cframe_current_frame))?;
    }
    let instr_len = if offsets.walk.layout == python_layout::FRAME_OBJECT {
        4
    } else {
        8
    };
    let read_len = [
        (offsets.walk.frame_previous, 8),
        (offsets.walk.frame_code, 8),
        (offsets.walk.frame_instr, instr_len),
        (offsets.walk.frame_owner, 1),
    ]
    .iter()
    .filter(|&&(offset, _)| offset != PY_NO_OFFSET)
    .map(|&(offset, len)| offset as usize + len)
    .max()
    .unwrap_or(8);
    let mut frames = Vec::new();
    for _ in 0..max_frames {
        if frame == 0 {
            break;
        }
        let mut block = memory.read_vec(frame, read_len)?;
        if offsets.walk.frame_owner != PY_NO_OFFSET
            && block
                .get(offsets.walk.frame_owner as usize)
                .map(|&owner| u32::from(owner))
                == Some(offsets.walk.owner_cstack)
        {
            frame = field_u64(&block, offsets.walk.frame_previous).unwrap_or(0);
            if frame == 0 {
                break;
            }
            block = memory.read_vec(frame, read_len)?;
        }
        let code = field_u64(&block, offsets.walk.frame_code).unwrap_or(0);
        let instr = if offsets.walk.layout == python_layout::FRAME_OBJECT {
            u64::from(field_u32(&block, offsets.walk.frame_instr).unwrap_or(0))
        } else {
            field_u64(&block, offsets.walk.frame_instr).unwrap_or(0)
        };
        frames.push(PythonFrame { code, instr });
        frame = field_u64(&block, offsets.walk.frame_previous).unwrap_or(0);
    }
    Ok((frames, frame != 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::python::process::{live_threads, nested_pid_namespace};

    /// A C library other than glibc: the tid is found by scanning.
    #[test]
    fn pthread_tid_offset_is_calibrated() {
        let pid = std::process::id();
        let live = live_threads(pid, nested_pid_namespace(pid).unwrap()).unwrap();
        let memory = Memory::new(pid);
        // This thread's own pthread_t: glibc's offset.
        // SAFETY: plain libc call without arguments.
        let me = unsafe { libc::pthread_self() } as u64;
        assert_eq!(
            calibrate_pthread_tid(&memory, &[me], &live).unwrap(),
            Some(GLIBC_PTHREAD_TID_OFFSET)
        );
        // A fake struct pthread with the tid elsewhere (and none at
        // glibc's offset).
        // SAFETY: plain system call.
        let tid = unsafe { libc::gettid() } as u32;
        let mut fake = vec![0u8; PTHREAD_SCAN_BYTES];
        fake[0x1c0..0x1c4].copy_from_slice(&tid.to_le_bytes());
        let fake_addr = fake.as_ptr() as u64;
        assert_eq!(
            calibrate_pthread_tid(&memory, &[fake_addr], &live).unwrap(),
            Some(0x1c0)
        );
        assert_eq!(pthread_tid(&memory, fake_addr, 0x1c0).unwrap(), tid);
        // Two threads that claim the same tid: no consistent offset.
        assert_eq!(
            calibrate_pthread_tid(&memory, &[fake_addr, fake_addr], &live).unwrap(),
            None
        );
    }
}
