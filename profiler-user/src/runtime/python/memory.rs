//! Reading another process's memory (`process_vm_readv`), and fields of
//! blocks read from it. Everything read is treated as hostile: a read of
//! memory that is not there fails, nothing panics.

use std::io;

use profiler_common::PY_NO_OFFSET;

use super::types::PythonError;

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

    fn fault(&self, addr: u64, len: usize, source: io::Error) -> PythonError {
        PythonError::Read {
            pid: self.pid,
            addr,
            len,
            source,
        }
    }

    /// Fills `buf` from `addr`, entirely or not at all.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), PythonError> {
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
                return Err(PythonError::ProcessGone { pid: self.pid });
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

    pub fn read_vec(&self, addr: u64, len: usize) -> Result<Vec<u8>, PythonError> {
        let mut buf = vec![0; len];
        self.read(addr, &mut buf)?;
        Ok(buf)
    }

    pub fn read_u64(&self, addr: u64) -> Result<u64, PythonError> {
        let mut buf = [0; 8];
        self.read(addr, &mut buf)?;
        Ok(u64::from_le_bytes(buf))
    }

    pub fn read_u32(&self, addr: u64) -> Result<u32, PythonError> {
        let mut buf = [0; 4];
        self.read(addr, &mut buf)?;
        Ok(u32::from_le_bytes(buf))
    }
}

/// The little-endian `u64` at `offset` of a block read from the target;
/// `None` for a field the version does not have (or outside the block).
pub fn field_u64(block: &[u8], offset: u32) -> Option<u64> {
    if offset == PY_NO_OFFSET {
        return None;
    }
    let start = offset as usize;
    let bytes = block.get(start..start.checked_add(8)?)?;
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

/// The little-endian `u32` at `offset` of a block.
pub fn field_u32(block: &[u8], offset: u32) -> Option<u32> {
    if offset == PY_NO_OFFSET {
        return None;
    }
    let start = offset as usize;
    let bytes = block.get(start..start.checked_add(4)?)?;
    Some(u32::from_le_bytes(bytes.try_into().ok()?))
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
}
