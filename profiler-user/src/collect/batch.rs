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
/// ... fewer when the values are large (a HotSpot stack is 2 or 16 KiB):
/// the buffer for one call's values stays within this.
const CHUNK_BYTES: usize = 256 << 10;
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

/// The buffers one map's batches are read into, kept from drain to drain:
/// fresh ones were page faults and cleared pages at every drain.
#[derive(Debug, Default)]
pub(crate) struct BatchBuffers {
    keys: Vec<u8>,
    values: Vec<u8>,
}

impl BatchBuffers {
    /// Room for `len` bytes in `buffer` (its contents are not kept).
    fn room(buffer: &mut Vec<u8>, len: usize) -> *mut u8 {
        if buffer.capacity() < len {
            *buffer = Vec::with_capacity(len);
        }
        buffer.as_mut_ptr()
    }
}

/// Every entry of `map`, each deleted from it and handed to `each` as it
/// is read. No program may write to the map meanwhile (the collector's
/// idle buffer): an entry added behind the batch's position would be left
/// for the next drain.
pub(crate) fn take_each<K: Pod, V: Pod>(
    map: &mut HashMap<MapData, K, V>,
    buffers: &mut BatchBuffers,
    mut each: impl FnMut(K, V),
) -> io::Result<()> {
    match lookup_and_delete_batch(map, buffers, &mut each) {
        Err(err)
            if matches!(
                err.raw_os_error(),
                Some(libc::EINVAL | libc::EOPNOTSUPP | ENOTSUPP)
            ) =>
        {
            one_by_one(map, &mut each)
        }
        taken => taken,
    }
}

fn lookup_and_delete_batch<K: Pod, V: Pod>(
    map: &HashMap<MapData, K, V>,
    buffers: &mut BatchBuffers,
    each: &mut impl FnMut(K, V),
) -> io::Result<()> {
    let fd = map.map().fd().as_fd().as_raw_fd();
    let mut chunk = (CHUNK_BYTES / size_of::<V>().max(1)).clamp(8, CHUNK);
    let mut position: u32 = 0;
    let mut first = true;
    loop {
        // Not zeroed: only what the kernel wrote is read.
        let keys = BatchBuffers::room(&mut buffers.keys, chunk * size_of::<K>());
        let values = BatchBuffers::room(&mut buffers.values, chunk * size_of::<V>());
        let mut next: u32 = 0;
        let mut attr = BatchAttr {
            in_batch: if first {
                0
            } else {
                &position as *const u32 as u64
            },
            out_batch: &mut next as *mut u32 as u64,
            keys: keys as u64,
            values: values as u64,
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
                    keys.add(index * size_of::<K>())
                        .cast::<K>()
                        .read_unaligned(),
                    values
                        .add(index * size_of::<V>())
                        .cast::<V>()
                        .read_unaligned(),
                )
            };
            each(key, value);
        }
        match error {
            None => {}
            // The end of the map.
            Some(err) if err.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
            Some(err) if first => return Err(err),
            // Entries taken so far are deleted and handed on; the rest
            // stays for the next drain.
            Some(_) => return Ok(()),
        }
        position = next;
        first = false;
    }
}

/// The old way: list, look up and delete each.
fn one_by_one<K: Pod, V: Pod>(
    map: &mut HashMap<MapData, K, V>,
    each: &mut impl FnMut(K, V),
) -> io::Result<()> {
    let entries: Vec<(K, V)> = map.iter().filter_map(Result::ok).collect();
    for (key, value) in entries {
        let _ = map.remove(&key);
        each(key, value);
    }
    Ok(())
}
