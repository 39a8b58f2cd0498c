//! sparkprof's kernel side.
//!
//! Programs here stay small and obvious: read what they must, count into a
//! map, return. Every policy decision (which processes, which rate, how deep)
//! is made in userspace and arrives through globals and maps.
//!
//! Counting is double-buffered: `ACTIVE_BUFFER` says which (count map, stack
//! map) pair is written. Userspace flips it, waits for in-flight programs to
//! finish, then drains and clears the idle pair, so periodic draining never
//! races with counting and no stack id is freed while a count still names it.
#![no_std]
#![no_main]

mod hashed_stacks;
mod hotspot;
mod logs;
mod off_cpu;
mod on_cpu;
mod python;
mod stats;
mod task;
mod thread_names;
mod user_memory;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // The verifier proves there are no panics; this is never reached.
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
