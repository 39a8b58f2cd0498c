//! System calls for the attach child, made with the `syscall` instruction
//! itself: they return `-errno` and touch nothing else of the caller.
//!
//! Why not libc's wrappers: the child shares the profiler's memory (see
//! [`super::exchange`]), and also its thread pointer, so libc's `errno` in
//! the child is the errno of the parent thread that made it, which runs
//! meanwhile. A wrapper that failed in the child would write there.

use std::ffi::c_long;

/// What a system call returned: the value, or the errno.
pub(super) type SysResult = Result<usize, i32>;

/// Linux returns `-4095..=-1` for an error.
fn result(ret: isize) -> SysResult {
    if (-4095..0).contains(&ret) {
        Err(-ret as i32)
    } else {
        Ok(ret as usize)
    }
}

/// System call `nr` with six arguments (the unused ones zero).
///
/// # Safety
/// As the system call itself: the arguments must be what it expects.
pub(super) unsafe fn syscall(nr: c_long, args: [usize; 6]) -> SysResult {
    let ret: isize;
    // SAFETY: the caller passes arguments valid for `nr`; the instruction
    // clobbers only what is declared.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") nr as isize => ret,
            in("rdi") args[0],
            in("rsi") args[1],
            in("rdx") args[2],
            in("r10") args[3],
            in("r8") args[4],
            in("r9") args[5],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    // SAFETY: as above.
    #[cfg(target_arch = "aarch64")]
    unsafe {
        std::arch::asm!(
            "svc 0",
            in("x8") nr as usize,
            inlateout("x0") args[0] => ret,
            in("x1") args[1],
            in("x2") args[2],
            in("x3") args[3],
            in("x4") args[4],
            in("x5") args[5],
            options(nostack),
        );
    }
    result(ret)
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("the attach child's system calls are written for x86_64 and aarch64");

/// Leaves the child with `code`; never returns.
pub(super) fn exit(code: i32) -> ! {
    loop {
        // SAFETY: exit_group takes a status and does not return.
        let _ = unsafe { syscall(libc::SYS_exit_group, [code as usize, 0, 0, 0, 0, 0]) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_and_errors_come_back_and_errno_is_untouched() {
        // SAFETY: getpid takes nothing.
        let pid = unsafe { syscall(libc::SYS_getpid, [0; 6]) };
        assert_eq!(pid, Ok(std::process::id() as usize));
        // SAFETY: errno is this thread's.
        unsafe { *libc::__errno_location() = libc::EDOM };
        // SAFETY: closing a descriptor that cannot be open.
        let closed = unsafe { syscall(libc::SYS_close, [usize::MAX >> 33, 0, 0, 0, 0, 0]) };
        assert_eq!(closed, Err(libc::EBADF));
        // SAFETY: as above.
        assert_eq!(unsafe { *libc::__errno_location() }, libc::EDOM);
    }
}
