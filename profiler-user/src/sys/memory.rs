//! Reading another process's memory (`process_vm_readv`), for the runtimes
//! that name frames from the interpreter's or VM's own structures (CPython's
//! code objects, HotSpot's `Method`s). Everything read is treated as
//! hostile: a read of memory that is not there fails, nothing panics.

use std::io;

use thiserror::Error;

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

/// Reads another process's memory with `process_vm_readv` (one system call
/// per read, no stop of the target).
#[derive(Debug, Clone, Copy)]
pub struct Memory {
    pid: u32,
}

impl Memory {
    pub fn new(pid: u32) -> Self {
        Self { pid }
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
}

impl ReadMemory for Memory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        if buf.is_empty() {
            return Ok(());
        }
        let len = buf.len();
        // Address 0 is never mapped, and user space ends below 2^63 on
        // every 64-bit Linux: reject garbage without a system call.
        if addr == 0 || addr.checked_add(len as u64).is_none_or(|end| end > 1 << 63) {
            return Err(self.fault(addr, len, io::Error::from_raw_os_error(libc::EFAULT)));
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
            let error = io::Error::last_os_error();
            if error.raw_os_error() == Some(libc::ESRCH) {
                return Err(MemoryError::Gone { pid: self.pid });
            }
            return Err(self.fault(addr, len, error));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_memory_reads_fail() {
        let memory = Memory::new(std::process::id());
        assert!(memory.read_u64(0).is_err());
        assert!(memory.read_u64(u64::MAX - 3).is_err());
        assert!(memory.read_u64(8).is_err());
        let value = 0x1122_3344_5566_7788u64;
        assert_eq!(memory.read_u64(&value as *const u64 as u64).unwrap(), value);
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
}
