//! A deliberately broken eBPF program, to show that `cargo xtask vm-test
//! --broken` fails with the verifier's message.
//!
//! `broken_sign_extend` is an ordinary perf_event program but for one
//! instruction of BPF ISA v4 (Linux 6.6+): a sign-extending move
//! (`r = (s8)r`), as LLVM emits for `-C target-cpu=v4`. Linux 6.6 and newer
//! accept it; the 6.1 verifier sees a `BPF_MOV` with a non-zero offset and
//! rejects the program ("BPF_MOV uses reserved fields"). Nothing here is
//! part of sparkprof's shipped object (profiler-ebpf).
#![no_std]
#![no_main]
#![feature(asm_experimental_arch)]

use aya_ebpf::{EbpfContext as _, macros::perf_event, programs::PerfEventContext};

#[perf_event]
pub fn broken_sign_extend(ctx: PerfEventContext) -> u32 {
    let tid = u64::from(ctx.pid());
    let extended: u64;
    // SAFETY: a register-to-register move, no memory access.
    unsafe { core::arch::asm!("{0} = (s8){1}", out(reg) extended, in(reg) tid) };
    (extended & 1) as u32
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
