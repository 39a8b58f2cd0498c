//! Reading another process's memory (`process_vm_readv`, or its
//! `/proc/PID/mem`), for the runtimes that name frames from the
//! interpreter's or VM's own structures (CPython's code objects, HotSpot's
//! `Method`s). Everything read is treated as hostile: a read of memory that
//! is not there fails, nothing panics.

mod pool;

use std::{
    fs::File,
    io,
    mem::MaybeUninit,
    os::{fd::AsRawFd, unix::fs::FileExt},
    sync::Arc,
};

use thiserror::Error;

use pool::{CHUNK, Chunk, Pool};

/// Why a read failed.
#[derive(Debug, Error)]
pub enum MemoryError {
    /// The process exited.
    #[error("process {pid} exited")]
    Gone { pid: u32 },
    /// An address that is not mapped, or a permission problem.
    #[error("process {pid}: cannot read {len} bytes at {addr:#x}: {source}")]
    Read {
        pid: u32,
        addr: u64,
        len: usize,
        #[source]
        source: io::Error,
    },
}

impl MemoryError {
    /// The process exited: nothing more can be read from it.
    pub fn is_process_gone(&self) -> bool {
        matches!(self, Self::Gone { .. })
    }
}

/// Memory of a process, read in whole blocks.
pub trait ReadMemory {
    /// Fills `buf` from `addr`, entirely or not at all.
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError>;

    fn read_vec(&self, addr: u64, len: usize) -> Result<Vec<u8>, MemoryError> {
        let mut buf = vec![0; len];
        self.read(addr, &mut buf)?;
        Ok(buf)
    }

    fn read_u64(&self, addr: u64) -> Result<u64, MemoryError> {
        let mut buf = [0; 8];
        self.read(addr, &mut buf)?;
        Ok(u64::from_le_bytes(buf))
    }

    fn read_u16(&self, addr: u64) -> Result<u16, MemoryError> {
        let mut buf = [0; 2];
        self.read(addr, &mut buf)?;
        Ok(u16::from_le_bytes(buf))
    }

    fn read_u32(&self, addr: u64) -> Result<u32, MemoryError> {
        let mut buf = [0; 4];
        self.read(addr, &mut buf)?;
        Ok(u32::from_le_bytes(buf))
    }

    /// A NUL-terminated string of at most `max` bytes (lossy UTF-8), read
    /// in small blocks so that a string near the end of a mapping is read.
    fn read_c_string(&self, addr: u64, max: usize) -> Result<String, MemoryError> {
        const BLOCK: usize = 64;
        let mut bytes = Vec::new();
        while bytes.len() < max {
            let mut block = [0u8; BLOCK];
            let at = addr + bytes.len() as u64;
            // The last block of a page: read up to the page's end only.
            let to_page_end = (0x1000 - (at & 0xfff)) as usize;
            let len = BLOCK.min(to_page_end).min(max - bytes.len());
            self.read(at, &mut block[..len])?;
            match block[..len].iter().position(|&b| b == 0) {
                // Most strings end in their first block: no buffer.
                Some(end) if bytes.is_empty() => {
                    return Ok(String::from_utf8_lossy(&block[..end]).into_owned());
                }
                Some(end) => {
                    bytes.extend_from_slice(&block[..end]);
                    return Ok(String::from_utf8_lossy(&bytes).into_owned());
                }
                None => bytes.extend_from_slice(&block[..len]),
            }
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// Whether `len` bytes at `addr` can be memory of a process at all:
/// address 0 is never mapped, and user space ends below 2^63 on every
/// 64-bit Linux.
fn in_user_space(addr: u64, len: usize) -> bool {
    addr != 0
        && addr
            .checked_add(len as u64)
            .is_some_and(|end| end <= 1 << 63)
}

/// Reads another process's memory without stopping it: with
/// `process_vm_readv` (one system call for many ranges), or for a process
/// that may share its memory copy-on-write, through its `/proc/PID/mem`
/// (see [`Memory::unpinned`]).
#[derive(Debug, Clone)]
pub struct Memory {
    pid: u32,
    /// The process's `/proc/PID/mem`, if read through it.
    mem: Option<Arc<File>>,
}

impl Memory {
    /// Reads with `process_vm_readv`.
    pub fn new(pid: u32) -> Self {
        Self { pid, mem: None }
    }

    /// Reads through `/proc/PID/mem`, which takes a reference to each page
    /// it copies, where `process_vm_readv` pins it: and the kernel copies a
    /// page of anonymous memory that may be shared copy-on-write before it
    /// lets it be pinned (`FAULT_FLAG_UNSHARE`). A process that forked, or
    /// was forked and did not exec (PySpark's daemon and each of its
    /// workers), shares most of its memory so: every page read with
    /// `process_vm_readv` was copied in the profiled process, its memory
    /// grew by it, and the copying was 5.4 % of sparkprof's CPU over a
    /// testbed job with `--off-cpu`. A read here costs a system call per
    /// range, so this is for processes read in few ranges (CPython's are:
    /// mostly one block each). The file holds the process's memory as it
    /// was opened: after an exec, or once the process is gone, reads find
    /// it [`MemoryError::Gone`], never another process's with its pid.
    /// `process_vm_readv` if the file cannot be opened.
    pub fn unpinned(pid: u32) -> Self {
        match File::open(format!("/proc/{pid}/mem")) {
            Ok(file) => Self {
                pid,
                mem: Some(Arc::new(file)),
            },
            Err(err) => {
                tracing::debug!(pid, "/proc/PID/mem not opened ({err}): process_vm_readv");
                Self::new(pid)
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    fn fault(&self, addr: u64, len: usize, source: io::Error) -> MemoryError {
        MemoryError::Read {
            pid: self.pid,
            addr,
            len,
            source,
        }
    }

    /// The error of a `process_vm_readv` that returned -1, from `errno`:
    /// the process is gone, or the read at `addr` failed.
    fn failed(&self, addr: u64, len: usize) -> MemoryError {
        let error = io::Error::last_os_error();
        if error.raw_os_error() == Some(libc::ESRCH) {
            return MemoryError::Gone { pid: self.pid };
        }
        self.fault(addr, len, error)
    }

    /// Reads whole blocks of `len` bytes, one at each of `blocks` (at most
    /// [`MAX_BLOCKS_PER_CALL`]), into consecutive `len`-byte pieces of
    /// `room`, in one system call: `room` is one buffer or several, filled
    /// in order, each a whole number of blocks long, together at least as
    /// long as the blocks. Returns how many blocks, from the first, were
    /// read whole: the kernel stops at the first it cannot read. The room
    /// need not be initialised (zeroing what the kernel overwrites was a
    /// twentieth of sparkprof's CPU on a Spark host): the bytes of the
    /// blocks read are.
    fn read_blocks(
        &self,
        blocks: &[u64],
        len: usize,
        room: &mut [&mut [MaybeUninit<u8>]],
    ) -> Result<usize, MemoryError> {
        debug_assert!(blocks.len() <= MAX_BLOCKS_PER_CALL);
        debug_assert!(room.iter().all(|piece| piece.len() % len == 0));
        let mut wanted = blocks.len() * len;
        let mut local: Vec<libc::iovec> = Vec::with_capacity(room.len());
        for piece in room.iter_mut() {
            if wanted == 0 {
                break;
            }
            let take = piece.len().min(wanted);
            local.push(libc::iovec {
                iov_base: piece.as_mut_ptr().cast(),
                iov_len: take,
            });
            wanted -= take;
        }
        assert_eq!(wanted, 0, "room for {} blocks", blocks.len());
        // Blocks that follow one another in the process are one range: the
        // kernel pins a range's pages in one go, where it took a page-table
        // walk for each block (a drain's blocks of one method's metadata
        // often lie side by side). The bytes land in `room` as before, and
        // a short read still ends at the first block it could not read.
        let mut remote: Vec<libc::iovec> = Vec::with_capacity(blocks.len());
        for &block in blocks {
            match remote.last_mut() {
                Some(last) if last.iov_base as u64 + last.iov_len as u64 == block => {
                    last.iov_len += len;
                }
                _ => remote.push(libc::iovec {
                    iov_base: block as *mut libc::c_void,
                    iov_len: len,
                }),
            }
        }
        if let Some(mem) = &self.mem {
            return self.read_ranges(mem, &local, &remote, blocks[0], len);
        }
        // SAFETY: `local` describes pieces of `room`, valid and writable
        // (if not initialised) for their lengths for the duration of the
        // call, which sum to the remote lengths' sum; `remote` is only
        // dereferenced by the kernel, in the target's address space.
        let read = unsafe {
            libc::process_vm_readv(
                self.pid as libc::pid_t,
                local.as_ptr(),
                local.len() as libc::c_ulong,
                remote.as_ptr(),
                remote.len() as libc::c_ulong,
                0,
            )
        };
        if read < 0 {
            return Err(self.failed(blocks[0], len));
        }
        Ok(read as usize / len)
    }

    /// [`Self::read_blocks`] through `/proc/PID/mem`: the remote ranges one
    /// `preadv` each, into the local pieces in order, until one is short.
    fn read_ranges(
        &self,
        mem: &File,
        local: &[libc::iovec],
        remote: &[libc::iovec],
        first: u64,
        len: usize,
    ) -> Result<usize, MemoryError> {
        let (mut piece, mut into_piece) = (0, 0);
        let mut read = 0;
        let mut iovs: Vec<libc::iovec> = Vec::new();
        for range in remote {
            // The local room for this range: what is left of the current
            // piece, and the pieces after it, up to the range's length.
            iovs.clear();
            let mut wanted = range.iov_len;
            while wanted > 0 {
                let at = &local[piece];
                let take = (at.iov_len - into_piece).min(wanted);
                iovs.push(libc::iovec {
                    // SAFETY: within the piece `at` describes.
                    iov_base: unsafe { at.iov_base.cast::<u8>().add(into_piece) }.cast(),
                    iov_len: take,
                });
                wanted -= take;
                into_piece += take;
                if into_piece == at.iov_len {
                    (piece, into_piece) = (piece + 1, 0);
                }
            }
            // SAFETY: `iovs` describe parts of `local`'s pieces (see
            // `read_blocks`), as long as the range; the offset is an address
            // in user space, which `/proc/PID/mem` takes as it is.
            let got = unsafe {
                libc::preadv(
                    mem.as_raw_fd(),
                    iovs.as_ptr(),
                    iovs.len() as libc::c_int,
                    range.iov_base as libc::off_t,
                )
            };
            match got {
                // The process's memory is gone (it exited, or exec'd).
                0 => return Err(MemoryError::Gone { pid: self.pid }),
                got if got < 0 && read == 0 => return Err(self.failed(first, len)),
                got if got < 0 => break,
                got => {
                    read += got as usize;
                    if (got as usize) < range.iov_len {
                        break;
                    }
                }
            }
        }
        Ok(read / len)
    }

    /// `len` bytes at each of `addrs`, in as few system calls as it takes
    /// (a drain checks every Python code object it names: one read each
    /// made a system call each). `None` for one that could not be read
    /// whole; the others are read all the same.
    pub fn read_each(&self, addrs: &[u64], len: usize) -> Vec<Option<Vec<u8>>> {
        let mut out: Vec<Option<Vec<u8>>> = vec![None; addrs.len()];
        if len == 0 {
            return out;
        }
        let (at, wanted): (Vec<usize>, Vec<u64>) = addrs
            .iter()
            .enumerate()
            .filter(|&(_, &addr)| in_user_space(addr, len))
            .map(|(index, &addr)| (index, addr))
            .unzip();
        let mut buf: Vec<u8> = Vec::new();
        in_batches(&wanted, |offset, batch| {
            buf.clear();
            buf.reserve(batch.len() * len);
            let room = &mut buf.spare_capacity_mut()[..batch.len() * len];
            let read = self.read_blocks(batch, len, &mut [room])?;
            // SAFETY: the kernel wrote the first `read` blocks whole.
            unsafe { buf.set_len(read * len) };
            for (index, bytes) in buf.chunks_exact(len).enumerate() {
                out[at[offset + index]] = Some(bytes.to_vec());
            }
            Ok(read)
        });
        out
    }
}

/// Runs `read_batch` over `addrs` in batches of at most
/// [`MAX_BLOCKS_PER_CALL`], each given with where it starts in `addrs`; it
/// returns how many of its batch, from the first, it read whole. Goes on
/// past one that could not be read (the kernel stops a batch there), and
/// stops when the process is gone.
///
/// After a batch that stopped short the next is one address, and each
/// batch read whole doubles the next: where many cannot be read (a JVM's
/// thread list as threads exit, say), starting a full batch again after
/// each made the work grow with the square of the addresses: seen once
/// over a testbed job, reads of one JVM's thread list took a quarter of
/// sparkprof's CPU, most of it building and passing the same iovecs again.
fn in_batches(
    addrs: &[u64],
    mut read_batch: impl FnMut(usize, &[u64]) -> Result<usize, MemoryError>,
) {
    let (mut at, mut size) = (0, MAX_BLOCKS_PER_CALL);
    while at < addrs.len() {
        let batch = &addrs[at..addrs.len().min(at + size)];
        let read = match read_batch(at, batch) {
            Ok(read) => read,
            Err(err) if err.is_process_gone() => return,
            Err(_) => 0,
        };
        // A batch read short stopped at one that could not be read: skip it.
        at += read + usize::from(read < batch.len());
        size = if read < batch.len() {
            1
        } else {
            (2 * size).min(MAX_BLOCKS_PER_CALL)
        };
    }
}

impl ReadMemory for Memory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        if buf.is_empty() {
            return Ok(());
        }
        let len = buf.len();
        // Reject garbage without a system call.
        if !in_user_space(addr, len) {
            return Err(self.fault(addr, len, io::Error::from_raw_os_error(libc::EFAULT)));
        }
        if let Some(mem) = &self.mem {
            return match mem.read_at(buf, addr) {
                Ok(0) => Err(MemoryError::Gone { pid: self.pid }),
                Ok(read) if read == len => Ok(()),
                Ok(read) => Err(self.fault(
                    addr,
                    len,
                    io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("short read of {read} bytes"),
                    ),
                )),
                Err(err) => Err(self.fault(addr, len, err)),
            };
        }
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: len,
        };
        let remote = libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: len,
        };
        // SAFETY: `local` describes `buf`, valid and writable for `len`
        // bytes for the duration of the call; `remote` is only dereferenced
        // by the kernel, in the target's address space.
        let read =
            unsafe { libc::process_vm_readv(self.pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        if read < 0 {
            return Err(self.failed(addr, len));
        }
        if read as usize != len {
            return Err(self.fault(
                addr,
                len,
                io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("short read of {read} bytes"),
                ),
            ));
        }
        Ok(())
    }
}

/// Bytes per block of a [`CachedMemory`], aligned: a fraction of the
/// kernel's 4 KiB page, so a block is readable whole or not at all. Small
/// enough that copying it costs less than the system calls it saves
/// (measured: 4 KiB blocks halved the calls and added as much user time).
const BLOCK: u64 = 1024;
/// Blocks a [`CachedMemory`] keeps before it starts over (4 MiB). A young
/// Spark executor's drain names so many new methods (each reads about five
/// blocks) that a 1 MiB cache filled and started over, and then read them
/// one block per system call again: measured over a testbed job, 24,652
/// reads with 1 MiB, 9,879 with 4 MiB and 9,529 with 8 MiB. It is let go at
/// every drain, its room given back to the pool (see [`pool`]).
const MAX_CACHED_BLOCKS: usize = 4096;
/// The most a [`CachedMemory`]'s blocks take.
const MAX_CACHED_BYTES: usize = MAX_CACHED_BLOCKS * BLOCK as usize;
/// Reads longer than this go straight to the process, unless a prefetch
/// brought every block of them (see [`MAX_HELD_READ`]).
const MAX_CACHED_READ: usize = 2 * BLOCK as usize;
/// The longest read a prefetch holds the blocks of: a compiled method's
/// `PcDesc`s are read whole (a large C2 method has a few thousand, tens
/// of KiB), and left out of the prefetch they were a system call each.
const MAX_HELD_READ: usize = 64 * BLOCK as usize;
/// Blocks one system call of [`CachedMemory::prefetch`] reads (the
/// kernel's `UIO_MAXIOV`).
const MAX_BLOCKS_PER_CALL: usize = 1024;

/// A process's memory read a block at a time and kept until [`clear`](Self::clear):
/// naming one drain's frames reads many small fields that lie close
/// together (a method's `ConstMethod` and its `Symbol`s, a compiled
/// method's `PcDesc`s and scope data read a byte at a time, the code
/// heap's segment map), one system call per block instead of one per
/// field. Its owner clears it once per
/// drain, so nothing read is older than the drain it names: memory the
/// process frees and reuses is read again, as the compile-id checks
/// need.
#[derive(Debug)]
pub struct CachedMemory {
    memory: Memory,
    pages: std::cell::RefCell<Blocks>,
}

/// The blocks a [`CachedMemory`] holds, side by side in chunks lent by a
/// [`Pool`] (see [`pool`] for why) and given back when cleared or dropped.
#[derive(Debug)]
struct Blocks {
    /// Block address → where its bytes start in the chunks (a chunk's
    /// index times [`CHUNK`], plus the offset in it), or `None`: not
    /// readable.
    at: crate::FastMap<u64, Option<usize>>,
    chunks: Vec<Chunk>,
    /// Bytes of the chunks holding blocks, from the first: every block
    /// before this was written whole by the kernel.
    used: usize,
    pool: &'static Pool,
}

/// What [`Blocks::copy`] found.
enum Held {
    Copied,
    /// A block of the read is known to be unreadable.
    Unreadable,
    /// This block of the read is not held.
    Lacking(u64),
}

impl Blocks {
    fn new(pool: &'static Pool) -> Self {
        Self {
            at: Default::default(),
            chunks: Vec::new(),
            used: 0,
            pool,
        }
    }

    fn clear(&mut self) {
        self.at.clear();
        self.used = 0;
        self.pool.give_back(&mut self.chunks);
    }

    /// Copies `buf.len()` bytes at `addr` from the blocks held, as far as
    /// they go.
    fn copy(&self, addr: u64, buf: &mut [u8]) -> Held {
        let mut done = 0;
        while done < buf.len() {
            let at = addr + done as u64;
            let block = at & !(BLOCK - 1);
            let len = (buf.len() - done).min((block + BLOCK - at) as usize);
            match self.at.get(&block) {
                Some(Some(start)) => {
                    // A block lies within one chunk (a chunk is whole blocks).
                    let from = start + (at - block) as usize;
                    let (chunk, offset) = (from / CHUNK, from % CHUNK);
                    // SAFETY: the block starting at `start` is before
                    // `used`: the kernel wrote it whole (`read`), and
                    // nothing unwrites it until `clear` forgets it.
                    let held =
                        unsafe { self.chunks[chunk][offset..offset + len].assume_init_ref() };
                    buf[done..done + len].copy_from_slice(held);
                }
                Some(None) => return Held::Unreadable,
                None => return Held::Lacking(block),
            }
            done += len;
        }
        Held::Copied
    }

    /// Reads `blocks` (at most [`MAX_BLOCKS_PER_CALL`], none held) from
    /// `memory` in one system call, after the blocks held, taking the
    /// chunks that takes from the pool, and holds those read: how many,
    /// from the first (the kernel stops at the first it cannot read).
    fn read(&mut self, memory: &Memory, blocks: &[u64]) -> Result<usize, MemoryError> {
        let start = self.used;
        let end = start + blocks.len() * BLOCK as usize;
        while self.chunks.len() * CHUNK < end {
            self.chunks.push(self.pool.take());
        }
        let mut room: Vec<&mut [MaybeUninit<u8>]> = Vec::new();
        for (index, chunk) in self.chunks.iter_mut().enumerate() {
            let (low, high) = (index * CHUNK, (index + 1) * CHUNK);
            if high <= start || low >= end {
                continue;
            }
            room.push(&mut chunk[start.max(low) - low..end.min(high) - low]);
        }
        let read = memory.read_blocks(blocks, BLOCK as usize, &mut room);
        let kept = *read.as_ref().unwrap_or(&0);
        self.used = start + kept * BLOCK as usize;
        for (index, &block) in blocks.iter().enumerate().take(kept) {
            self.at.insert(block, Some(start + index * BLOCK as usize));
        }
        read
    }
}

impl Drop for Blocks {
    /// The process is gone (or no longer named): its room goes to the next.
    fn drop(&mut self) {
        self.pool.give_back(&mut self.chunks);
    }
}

impl CachedMemory {
    pub fn new(memory: Memory) -> Self {
        Self::with_pool(memory, &pool::SHARED)
    }

    /// A cache whose room comes from `pool` (tests: their own).
    fn with_pool(memory: Memory, pool: &'static Pool) -> Self {
        Self {
            memory,
            pages: std::cell::RefCell::new(Blocks::new(pool)),
        }
    }

    /// The process's memory, read afresh (what changes between drains).
    pub fn uncached(&self) -> &Memory {
        &self.memory
    }

    /// Forgets every block read (the process may have changed them since).
    pub fn clear(&mut self) {
        self.pages.get_mut().clear();
    }

    /// Blocks held now.
    pub fn len(&self) -> usize {
        self.pages.borrow().at.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads, in as few system calls as it takes, the blocks that hold
    /// these `(address, length)` ranges and are not held yet, so that the
    /// reads of them that follow are copies. Naming a drain's new methods
    /// otherwise makes four or more dependent reads per method, each a
    /// system call that checks its right to read the process again (a
    /// Spark executor's first minute brings thousands of new methods).
    /// Only blocks read whole are kept; one that cannot be read is left to
    /// the read that wants it, which reports why. Ranges of garbage, or
    /// longer than [`MAX_HELD_READ`], are left out.
    pub fn prefetch(&self, ranges: impl IntoIterator<Item = (u64, usize)>) {
        let mut wanted: Vec<u64> = Vec::new();
        for (addr, len) in ranges {
            if len == 0 || len > MAX_HELD_READ || !in_user_space(addr, len) {
                continue;
            }
            let last = (addr + len as u64 - 1) & !(BLOCK - 1);
            let mut block = addr & !(BLOCK - 1);
            while block <= last {
                wanted.push(block);
                block += BLOCK;
            }
        }
        wanted.sort_unstable();
        wanted.dedup();
        let pages = &mut *self.pages.borrow_mut();
        wanted.retain(|block| !pages.at.contains_key(block));
        // Never more than the cache holds: it would start over.
        wanted.truncate(MAX_CACHED_BLOCKS.saturating_sub(pages.at.len()));
        in_batches(&wanted, |_, batch| pages.read(&self.memory, batch));
    }

    /// Reads the block at `block` into the cache, or notes it unreadable;
    /// a full cache starts over first.
    fn read_block(&self, block: u64) -> Result<(), MemoryError> {
        let pages = &mut *self.pages.borrow_mut();
        if pages.at.len() >= MAX_CACHED_BLOCKS {
            pages.clear();
        }
        match pages.read(&self.memory, &[block]) {
            Ok(1) => {}
            Err(err) if err.is_process_gone() => return Err(err),
            _ => {
                pages.at.insert(block, None);
            }
        }
        Ok(())
    }
}

/// Dependent reads a round of [`CachedMemory::prefetch_rounds`] may take
/// (a compiled frame's blob, debug info, scopes and method names are about
/// a dozen levels deep); a round that reads nothing new ends it sooner.
const MAX_PREFETCH_ROUNDS: usize = 16;

impl CachedMemory {
    /// Reads what `probe` will read of each item, a level at a time: each
    /// round runs `probe` on the items not done against the blocks held
    /// ([`HeldOnly`], which makes no system call and notes the blocks it
    /// lacks), then reads all those blocks in one [`prefetch`](Self::prefetch).
    /// An item is done when a round of it lacks nothing. Naming a drain's
    /// frames one by one makes a system call per block of every dependent
    /// read (a dozen for a compiled frame of a method not named yet); this
    /// makes one per level for all of them. `probe` must only read, and
    /// must not keep what it computes from a round whose reads were not all
    /// held; what a round that read everything computes is what a read of
    /// this cache gives, and may be kept.
    pub fn prefetch_rounds<T>(&self, mut items: Vec<T>, mut probe: impl FnMut(&HeldOnly<'_>, &T)) {
        for _ in 0..MAX_PREFETCH_ROUNDS {
            let held = HeldOnly {
                memory: self,
                lacking: Default::default(),
                refused: Default::default(),
            };
            items.retain(|item| {
                let before = held.lacking.borrow().len();
                probe(&held, item);
                held.lacking.borrow().len() > before
            });
            let lacking = held.lacking.into_inner();
            if lacking.is_empty() {
                return;
            }
            let before = self.len();
            self.prefetch(lacking);
            // None could be read (unreadable, or the cache is full).
            if self.len() == before {
                return;
            }
        }
    }
}

/// A [`CachedMemory`]'s blocks as held, for a round of
/// [`CachedMemory::prefetch_rounds`]: a read of a block not held fails and
/// notes it; one known to be unreadable, or garbage, fails as it would
/// from the process; one too long to hold fails and is counted (the read
/// from the process might not).
pub struct HeldOnly<'a> {
    memory: &'a CachedMemory,
    lacking: std::cell::RefCell<Vec<(u64, usize)>>,
    refused: std::cell::Cell<usize>,
}

impl HeldOnly<'_> {
    /// Reads so far that failed here but might not from the process (not
    /// held yet, or too long to hold): what a probe computed between two
    /// equal counts is what a read of the cache gives, and may be kept.
    pub fn misses(&self) -> usize {
        self.lacking.borrow().len() + self.refused.get()
    }
}

impl ReadMemory for HeldOnly<'_> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        let (memory, len) = (self.memory, buf.len());
        let refuse = || {
            memory
                .memory
                .fault(addr, len, io::Error::from_raw_os_error(libc::EAGAIN))
        };
        if len == 0 {
            return Ok(());
        }
        if !in_user_space(addr, len) {
            return Err(refuse());
        }
        if len > MAX_HELD_READ {
            self.refused.set(self.refused.get() + 1);
            return Err(refuse());
        }
        match memory.pages.borrow().copy(addr, buf) {
            Held::Copied => Ok(()),
            Held::Unreadable => Err(refuse()),
            Held::Lacking(_) => {
                self.lacking.borrow_mut().push((addr, len));
                Err(refuse())
            }
        }
    }
}

/// A reader lent: what reads through a [`CachedMemory`] or a round's
/// [`HeldOnly`] blocks also reads through a reference to them.
impl<T: ReadMemory + ?Sized> ReadMemory for &T {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        (**self).read(addr, buf)
    }
}

impl ReadMemory for CachedMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        if !in_user_space(addr, buf.len()) {
            return self.memory.read(addr, buf);
        }
        if buf.len() > MAX_CACHED_READ {
            // Held if a prefetch brought it; never read into the cache.
            if buf.len() <= MAX_HELD_READ
                && let Held::Copied = self.pages.borrow().copy(addr, buf)
            {
                return Ok(());
            }
            return self.memory.read(addr, buf);
        }
        // Most reads of a drain are of blocks its prefetch brought; each
        // block lacking is read, and the copy tried again (a read spans
        // three blocks at most, and a full cache starts over once).
        loop {
            let lacking = match self.pages.borrow().copy(addr, buf) {
                Held::Copied => return Ok(()),
                Held::Unreadable => {
                    return Err(self.memory.fault(
                        addr,
                        buf.len(),
                        io::Error::from_raw_os_error(libc::EFAULT),
                    ));
                }
                Held::Lacking(block) => block,
            };
            self.read_block(lacking)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 4096;

    /// Three pages of our own memory holding 11, 22 and 33 at their
    /// starts, page `unreadable` made so: their address. Unreadable for
    /// both ways of reading: a page of an empty file (`PROT_NONE` would
    /// not do: `/proc/PID/mem` reads such a page).
    fn three_pages(unreadable: usize) -> u64 {
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                3 * PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED);
        let base = map as u64;
        for (i, value) in [11u64, 22, 33].into_iter().enumerate() {
            unsafe { *((base + (i * PAGE) as u64) as *mut u64) = value };
        }
        let empty = unsafe { libc::memfd_create(c"empty".as_ptr(), 0) };
        assert!(empty >= 0);
        let at = (base + (unreadable * PAGE) as u64) as *mut libc::c_void;
        let past_the_end = unsafe {
            libc::mmap(
                at,
                PAGE,
                libc::PROT_READ,
                libc::MAP_SHARED | libc::MAP_FIXED,
                empty,
                0,
            )
        };
        assert_eq!(past_the_end, at);
        unsafe { libc::close(empty) };
        base
    }

    /// Our own memory, read each way.
    fn both_ways() -> [Memory; 2] {
        let me = std::process::id();
        let unpinned = Memory::unpinned(me);
        assert!(unpinned.mem.is_some(), "/proc/self/mem opens");
        [Memory::new(me), unpinned]
    }

    #[test]
    fn garbage_memory_reads_fail() {
        for memory in both_ways() {
            assert!(memory.read_u64(0).is_err());
            assert!(memory.read_u64(u64::MAX - 3).is_err());
            assert!(memory.read_u64(8).is_err());
            let value = 0x1122_3344_5566_7788u64;
            assert_eq!(memory.read_u64(&value as *const u64 as u64).unwrap(), value);
        }
    }

    #[test]
    fn c_strings_end_at_their_nul_or_the_limit() {
        let memory = Memory::new(std::process::id());
        let text = b"CodeBlob\0rest";
        let addr = text.as_ptr() as u64;
        assert_eq!(memory.read_c_string(addr, 100).unwrap(), "CodeBlob");
        assert_eq!(memory.read_c_string(addr, 4).unwrap(), "Code");
        assert!(memory.read_c_string(8, 10).is_err());
    }

    #[test]
    fn cached_blocks_read_as_the_process_does_until_cleared() {
        // Two blocks of our own memory, a value across their boundary.
        let mut bytes = vec![0u8; 3 * BLOCK as usize];
        let base = bytes.as_ptr() as u64;
        let boundary = (base + BLOCK) & !(BLOCK - 1);
        let at = boundary - 3;
        let offset = (at - base) as usize;
        bytes[offset..offset + 8].copy_from_slice(&0x1122_3344_5566_7788u64.to_le_bytes());
        let mut cache = CachedMemory::new(Memory::new(std::process::id()));
        assert_eq!(cache.read_u64(at).unwrap(), 0x1122_3344_5566_7788);
        assert_eq!(cache.len(), 2);
        // Held: a change is not seen until the cache is cleared.
        bytes[offset] = 0;
        assert_eq!(cache.read_u64(at).unwrap(), 0x1122_3344_5566_7788);
        cache.clear();
        assert_eq!(cache.read_u64(at).unwrap(), 0x1122_3344_5566_7700);
        // Garbage fails as it does uncached, and a long read goes straight through.
        assert!(cache.read_u64(0).is_err());
        assert!(cache.read_u64(8).is_err());
        assert!(cache.read_u64(u64::MAX - 3).is_err());
        assert_eq!(cache.read_vec(base, bytes.len()).unwrap(), bytes);
        std::hint::black_box(&bytes);
    }

    #[test]
    fn the_room_of_blocks_is_lent_by_the_pool_and_taken_again_by_the_next_cache() {
        let pool: &'static Pool = Box::leak(Box::new(Pool::new(1024)));
        let bytes = vec![7u8; 1024 * BLOCK as usize];
        let base = bytes.as_ptr() as u64;
        let every_block = |base: u64, len: usize| {
            (0..len as u64)
                .step_by(BLOCK as usize)
                .map(move |offset| (base + offset, 8))
        };
        let chunks_of = |cache: &CachedMemory| {
            let pages = cache.pages.borrow();
            pages.chunks.iter().map(|c| c.as_ptr()).collect::<Vec<_>>()
        };
        let mut cache = CachedMemory::with_pool(Memory::new(std::process::id()), pool);
        cache.prefetch(every_block(base, bytes.len()));
        let held = cache.len();
        assert!(held >= 1023, "{held} blocks held");
        let room = chunks_of(&cache);
        assert_eq!(room.len(), held.div_ceil(CHUNK / BLOCK as usize));
        // Cleared at the next drain: the room goes back, and the reads of
        // that drain (this cache's or another process's) take it again.
        cache.clear();
        assert!(cache.is_empty());
        assert_eq!(pool.kept(), room.len());
        let other = CachedMemory::with_pool(Memory::new(std::process::id()), pool);
        other.prefetch(every_block(base, bytes.len()));
        assert!(chunks_of(&other).iter().all(|chunk| room.contains(chunk)));
        assert_eq!(other.read_u64(base + 8).unwrap(), 0x0707_0707_0707_0707);
        // A process gone gives its room back.
        drop(other);
        assert_eq!(pool.kept(), room.len());
        // However many blocks are wanted, a cache holds no more than its
        // bound, and reads what is past it again.
        let more = vec![9u8; (MAX_CACHED_BLOCKS + 200) * BLOCK as usize];
        let more_base = more.as_ptr() as u64;
        for _ in 0..2 {
            cache.prefetch(every_block(more_base, more.len()));
            assert_eq!(cache.len(), MAX_CACHED_BLOCKS);
            assert!(chunks_of(&cache).len() * CHUNK <= MAX_CACHED_BYTES);
            let last = more_base + more.len() as u64 - 8;
            assert_eq!(cache.read_u64(last).unwrap(), 0x0909_0909_0909_0909);
            assert_eq!(
                cache.read_u64(more_base + 8).unwrap(),
                0x0909_0909_0909_0909
            );
            cache.clear();
        }
        std::hint::black_box((&bytes, &more));
    }

    #[test]
    fn prefetched_blocks_are_held_and_unreadable_ones_left_to_the_read() {
        // Three pages of our own memory, the middle one made unreadable.
        for memory in both_ways() {
            prefetched_blocks_are_held(memory);
        }
    }

    fn prefetched_blocks_are_held(memory: Memory) {
        let (page, base) = (PAGE, three_pages(1));
        let cache = CachedMemory::new(memory.clone());
        // A read of the middle page comes between the two others: the
        // first and the last are still held, with one system call each at
        // most; garbage is left out.
        cache.prefetch([
            (base, 8),
            (base + page as u64, 8),
            (base + 2 * page as u64, 8),
            (0, 8),
            (u64::MAX - 3, 8),
        ]);
        assert_eq!(cache.len(), 2);
        // What was held reads as the process has it, without a read of it:
        // a change made now is not seen.
        unsafe { *(base as *mut u64) = 44 };
        assert_eq!(cache.read_u64(base).unwrap(), 11);
        assert_eq!(cache.read_u64(base + 2 * page as u64).unwrap(), 33);
        // The unreadable block fails when read, as without the prefetch.
        assert!(cache.read_u64(base + page as u64).is_err());
        // A range across two blocks brings both.
        let mut across = CachedMemory::new(memory);
        across.prefetch([(base + BLOCK - 4, 8)]);
        assert_eq!(across.len(), 2);
        across.clear();
        // Every block of the three pages: side by side, read as one range
        // that the kernel stops at the middle page. The last page's blocks
        // are still held, each where it belongs.
        across.prefetch(
            (0..3 * page as u64)
                .step_by(BLOCK as usize)
                .map(|at| (base + at, 8)),
        );
        let per_page = page / BLOCK as usize;
        assert_eq!(across.len(), 2 * per_page);
        assert_eq!(across.read_u64(base + 2 * page as u64).unwrap(), 33);
        assert_eq!(across.read_u64(base).unwrap(), 44);
        unsafe { libc::munmap(base as *mut _, 3 * page) };
    }

    #[test]
    fn prefetch_rounds_hold_every_level_of_a_chain_of_reads() {
        // Two chains of pointers, each node in a block of its own, the
        // second ending in a page that cannot be read.
        let (page, base) = (PAGE, three_pages(2));
        let node = |i: u64| base + i * BLOCK;
        let set = |at: u64, value: u64| unsafe { *(at as *mut u64) = value };
        // 0 → 1 → 2 → 3 → end; 4 → 5 → the unreadable page.
        let unreadable = base + 2 * page as u64;
        for (from, to) in [(0, node(1)), (1, node(2)), (2, node(3)), (3, 0)] {
            set(node(from), to);
        }
        set(node(4), node(5));
        set(node(5), unreadable);
        let cache = CachedMemory::new(Memory::new(std::process::id()));
        let walk = |memory: &dyn ReadMemory, head: u64| {
            let mut seen = vec![head];
            let mut at = head;
            while let Ok(next) = memory.read_u64(at) {
                if next == 0 {
                    break;
                }
                seen.push(next);
                at = next;
            }
            seen
        };
        let mut rounds = 0;
        cache.prefetch_rounds(vec![node(0), node(4)], |held, &head| {
            if head == node(0) {
                rounds += 1;
            }
            walk(held, head);
        });
        // A level a round: the first chain's four nodes took four rounds
        // with something lacking, and a fifth that lacked nothing.
        assert_eq!(rounds, 5);
        assert_eq!(cache.len(), 6);
        // Every node is held: changed now, the chains read as they were.
        for i in 0..6 {
            set(node(i), 0);
        }
        assert_eq!(walk(&cache, node(0)), [node(0), node(1), node(2), node(3)]);
        assert_eq!(walk(&cache, node(4)), [node(4), node(5), unreadable]);
        unsafe { libc::munmap(base as *mut _, 3 * page) };
    }

    #[test]
    fn long_reads_are_held_when_prefetched_and_counted_past_the_limit() {
        let mut bytes = vec![5u8; 8 * BLOCK as usize];
        let base = bytes.as_ptr() as u64;
        let cache = CachedMemory::new(Memory::new(std::process::id()));
        // A read four times what a read through the cache holds: lacking in
        // the first round, held in the second.
        let mut rounds = Vec::new();
        cache.prefetch_rounds(vec![()], |held, _| {
            let before = held.misses();
            let read = held.read_vec(base, bytes.len());
            rounds.push((read.is_ok(), held.misses() - before));
        });
        assert_eq!(rounds, [(false, 1), (true, 0)]);
        // Held: changed now, it reads as it was.
        bytes.fill(6);
        assert_eq!(
            cache.read_vec(base, bytes.len()).unwrap(),
            [5; 8 * BLOCK as usize]
        );
        // Past the limit: refused and counted, never lacking; the cache
        // reads it from the process.
        let long = vec![1u8; MAX_HELD_READ + 1];
        let mut refused = Vec::new();
        cache.prefetch_rounds(vec![()], |held, _| {
            let before = held.misses();
            let read = held.read_vec(long.as_ptr() as u64, long.len());
            refused.push((read.is_err(), held.misses() - before));
        });
        assert_eq!(refused, [(true, 1)]);
        assert_eq!(
            cache.read_vec(long.as_ptr() as u64, long.len()).unwrap(),
            long
        );
        std::hint::black_box(&bytes);
    }

    #[test]
    fn read_each_reads_what_it_can_around_what_it_cannot() {
        for memory in both_ways() {
            reads_each(&memory);
        }
    }

    fn reads_each(memory: &Memory) {
        let (page, base) = (PAGE, three_pages(1));
        let value = |bytes: &Option<Vec<u8>>| {
            bytes
                .as_ref()
                .map(|b| u64::from_le_bytes(b[..].try_into().unwrap()))
        };
        // Garbage and an unreadable page between readable ones.
        let read = memory.read_each(
            &[base, 0, base + page as u64, base + 2 * page as u64, base],
            8,
        );
        let values: Vec<Option<u64>> = read.iter().map(value).collect();
        assert_eq!(values, [Some(11), None, None, Some(33), Some(11)]);
        // More than one system call holds.
        let many: Vec<u64> = (0..2500)
            .map(|i| base + 2 * page as u64 + (i % 8) * 8)
            .collect();
        let read = memory.read_each(&many, 8);
        assert!(read.iter().all(|bytes| bytes.is_some()));
        assert_eq!(value(&read[2048]), Some(33));
        unsafe { libc::munmap(base as *mut _, 3 * page) };
    }

    /// Whether page `addr` of process `pid` is mapped by it alone (bit 56 of
    /// its `/proc/PID/pagemap` entry): not while it is shared copy-on-write.
    fn mapped_alone(pid: u32, addr: u64) -> bool {
        let pagemap = std::fs::File::open(format!("/proc/{pid}/pagemap")).unwrap();
        let mut entry = [0u8; 8];
        pagemap
            .read_exact_at(&mut entry, addr / PAGE as u64 * 8)
            .unwrap();
        u64::from_le_bytes(entry) & (1 << 56) != 0
    }

    #[test]
    fn unpinned_reads_leave_a_forks_pages_shared_where_pinned_ones_copy_them() {
        const PAGES: usize = 8;
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PAGES * PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED);
        let page = |i: usize| map as u64 + (i * PAGE) as u64;
        for i in 0..PAGES {
            unsafe { *(page(i) as *mut u64) = 100 + i as u64 };
        }
        // A child that shares them copy-on-write, as a PySpark worker
        // shares its daemon's memory, and waits (it may only make calls
        // that are safe after a fork).
        let child = unsafe { libc::fork() };
        if child == 0 {
            loop {
                unsafe { libc::pause() };
            }
        }
        assert!(child > 0);
        let child = child as u32;
        let shared_at_first = (0..PAGES).all(|i| !mapped_alone(child, page(i)));
        let unpinned = Memory::unpinned(child);
        let read_unpinned: Vec<u64> = (0..PAGES / 2)
            .map(|i| unpinned.read_u64(page(i)).unwrap())
            .collect();
        let pinned = Memory::new(child);
        let read_pinned: Vec<u64> = (PAGES / 2..PAGES)
            .map(|i| pinned.read_u64(page(i)).unwrap())
            .collect();
        let alone: Vec<bool> = (0..PAGES).map(|i| mapped_alone(child, page(i))).collect();
        unsafe {
            libc::kill(child as i32, libc::SIGKILL);
            libc::waitpid(child as i32, std::ptr::null_mut(), 0);
            libc::munmap(map, PAGES * PAGE);
        }
        assert!(shared_at_first);
        assert_eq!(read_unpinned, [100, 101, 102, 103]);
        assert_eq!(read_pinned, [104, 105, 106, 107]);
        // The pages read through /proc/PID/mem are still shared; those read
        // with process_vm_readv were copied in the child to be pinned.
        assert_eq!(alone, [false, false, false, false, true, true, true, true]);
        // And once the child is gone, its file reads it gone, even though
        // its pid may be another process's by now.
        assert!(unpinned.read_u64(page(0)).unwrap_err().is_process_gone());
    }

    #[test]
    fn batches_shrink_after_a_failure_and_grow_back() {
        // Every other address unreadable, then a long readable stretch.
        let readable = |addr: u64| addr >= 4_000 || addr.is_multiple_of(2);
        let addrs: Vec<u64> = (0..12_000).collect();
        let (mut calls, mut passed, mut read) = (0, 0, Vec::new());
        in_batches(&addrs, |offset, batch| {
            calls += 1;
            passed += batch.len();
            let whole = batch.iter().take_while(|&&addr| readable(addr)).count();
            read.extend(offset..offset + whole);
            Ok(whole)
        });
        // Every readable address is read once, none that is not.
        let expected: Vec<usize> = (0..12_000).filter(|&i| readable(i as u64)).collect();
        assert_eq!(read, expected);
        // The alternating part takes a call per address or two, not a full
        // batch per failure (2,000 failures would have passed two million
        // addresses); the readable stretch goes back to full batches.
        assert!(passed < 16_000, "{passed} addresses passed");
        assert!(calls < 4_000 + 20, "{calls} calls");
    }
}
