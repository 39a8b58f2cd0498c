//! Reads of the current process's memory for the walkers: `0` where it
//! cannot be read (a torn chain ends a walk there, never the program).

use aya_ebpf::helpers::bpf_probe_read_user;

#[inline(always)]
pub fn read_u64(address: u64) -> u64 {
    unsafe { bpf_probe_read_user(address as *const u64) }.unwrap_or(0)
}

#[inline(always)]
pub fn read_u32(address: u64) -> u32 {
    unsafe { bpf_probe_read_user(address as *const u32) }.unwrap_or(0)
}
