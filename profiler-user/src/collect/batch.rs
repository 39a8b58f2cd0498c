//! Taking every entry out of a BPF hash map in a few system calls.
//!
//! A drain used to list a count map's keys, look each up and delete it:
//! three `bpf` calls per entry, which on a Spark host with off-CPU time
//! (hundreds of waiting threads per drain) were most of sparkprof's system
//! calls. `BPF_MAP_LOOKUP_AND_DELETE_BATCH` (Linux 5.6) takes a whole
//! chunk of buckets per call. A kernel without it gets the old way.

use std::{io, mem::size_of};

use aya::{
    Pod,
    maps::{HashMap, IterableMap, MapData},
};
use std::os::fd::{AsFd, AsRawFd};

const BPF_MAP_LOOKUP_AND_DELETE_BATCH: libc::c_long = 25;
/// Entries asked for per call (a bucket with more than this many would
/// need a larger buffer: ENOSPC, retried with twice as many).
const CHUNK: usize = 1024;
/// ... fewer when the values are large (a HotSpot stack is 16 KiB): the
/// buffer for one call's values stays within this.
const CHUNK_BYTES: usize = 4 << 20;
/// The kernel's own "not supported" (524), which the `bpf` call returns
/// as it is for a map type without batch operations.
const ENOTSUPP: i32 = 524;

/// `union bpf_attr`'s `batch` member.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// Every entry of `map`, each deleted from it. No program may write to the
/// map meanwhile (the collector's idle buffer): an entry added behind the
/// batch's position would be left for the next drain.
pub(crate) fn take_all<K: Pod, V: Pod>(
    map: &mut HashMap<MapData, K, V>,
) -> io::Result<Vec<(K, V)>> {
    match lookup_and_delete_batch(map) {
        Err(err)
            if matches!(
                err.raw_os_error(),
                Some(libc::EINVAL | libc::EOPNOTSUPP | ENOTSUPP)
            ) =>
        {
            one_by_one(map)
        }
        taken => taken,
    }
}

fn lookup_and_delete_batch<K: Pod, V: Pod>(
    map: &HashMap<MapData, K, V>,
) -> io::Result<Vec<(K, V)>> {
    let fd = map.map().fd().as_fd().as_raw_fd();
    let mut taken = Vec::new();
    let mut chunk = (CHUNK_BYTES / size_of::<V>().max(1)).clamp(8, CHUNK);
    let mut position: u32 = 0;
    let mut first = true;
    loop {
        // Not zeroed (megabytes for large values, at every drain): only
        // what the kernel wrote is read.
        let mut keys: Vec<u8> = Vec::with_capacity(chunk * size_of::<K>());
        let mut values: Vec<u8> = Vec::with_capacity(chunk * size_of::<V>());
        let mut next: u32 = 0;
        let mut attr = BatchAttr {
            in_batch: if first {
                0
            } else {
                &position as *const u32 as u64
            },
            out_batch: &mut next as *mut u32 as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: chunk as u32,
            map_fd: fd as u32,
            ..BatchAttr::default()
        };
        // SAFETY: `attr` is a valid `bpf_attr` prefix of its own size; the
        // kernel writes at most `count` keys and values into the buffers
        // sized for them, and the next position into `next`.
        let result = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_MAP_LOOKUP_AND_DELETE_BATCH,
                &mut attr as *mut BatchAttr,
                size_of::<BatchAttr>() as u32,
            )
        };
        let error = (result < 0).then(io::Error::last_os_error);
        if error.as_ref().and_then(io::Error::raw_os_error) == Some(libc::ENOSPC) {
            // A bucket larger than the buffer: nothing was taken.
            chunk *= 2;
            continue;
        }
        for index in 0..attr.count as usize {
            // SAFETY: the kernel filled `attr.count` keys and values, each
            // a `K` or `V` (plain data), possibly unaligned in the buffer.
            let (key, value) = unsafe {
                (
                    keys.as_ptr()
                        .add(index * size_of::<K>())
                        .cast::<K>()
                        .read_unaligned(),
                    values
                        .as_ptr()
                        .add(index * size_of::<V>())
                        .cast::<V>()
                        .read_unaligned(),
                )
            };
            taken.push((key, value));
        }
        match error {
            None => {}
            // The end of the map.
            Some(err) if err.raw_os_error() == Some(libc::ENOENT) => return Ok(taken),
            Some(err) if first => return Err(err),
            // Entries taken so far are deleted: hand them on, and the rest
            // stays for the next drain.
            Some(_) => return Ok(taken),
        }
        position = next;
        first = false;
    }
}

/// The old way: list, look up and delete each.
fn one_by_one<K: Pod, V: Pod>(map: &mut HashMap<MapData, K, V>) -> io::Result<Vec<(K, V)>> {
    let entries: Vec<(K, V)> = map.iter().filter_map(Result::ok).collect();
    for (key, _) in &entries {
        let _ = map.remove(key);
    }
    Ok(entries)
}
