//! Known workloads in threads of this process, and where their code is.

use std::{
    ffi::{CStr, c_char},
    fs::File,
    io::Read as _,
    ops::Range,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    thread::{self, JoinHandle},
    time::Duration,
};

use object::{Object as _, ObjectSymbol as _};

/// A thread of this process running a workload until told to stop.
pub struct Worker {
    pub tid: u32,
    stop: Arc<AtomicBool>,
    handle: JoinHandle<()>,
}

impl Worker {
    /// Starts `body` in a new (unnamed: no rename) thread; returns once the
    /// thread runs and its tid is known.
    pub fn spawn(body: impl FnOnce(&AtomicBool) + Send + 'static) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (tid_tx, tid_rx) = mpsc::channel();
        let flag = Arc::clone(&stop);
        let handle = thread::spawn(move || {
            let _ = tid_tx.send(gettid());
            body(&flag);
        });
        let tid = tid_rx.recv().expect("the worker thread starts");
        Self { tid, stop, handle }
    }

    /// Tells the workload to stop and waits for the thread to end.
    pub fn finish(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.handle.join();
    }
}

pub fn gettid() -> u32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::gettid() as u32 }
}

/// Spins in user mode until `stop`: every on-CPU sample of its thread has
/// its leaf instruction inside this function.
#[unsafe(no_mangle)]
#[inline(never)]
pub fn sparkprof_vm_spin(stop: &AtomicBool) -> u64 {
    let mut x = 1u64;
    while !stop.load(Ordering::Relaxed) {
        x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
    }
    x
}

/// The spin function's name in the symbol table, and its address now.
pub const SPIN_SYMBOL: &str = "sparkprof_vm_spin";

pub fn spin_address() -> u64 {
    sparkprof_vm_spin as *const () as u64
}

/// Reads /dev/zero in 1 MiB blocks until `stop`: most of its samples are
/// taken in the kernel (clearing the user buffer).
pub fn read_zeroes(stop: &AtomicBool) {
    let Ok(mut zero) = File::open("/dev/zero") else {
        return;
    };
    let mut buffer = vec![1u8; 1 << 20];
    while !stop.load(Ordering::Relaxed) {
        if zero.read(&mut buffer).is_err() {
            return;
        }
    }
}

/// Sleeps `times` x `each` in nanosleep.
pub fn sleep_in_nanosleep(times: u32, each: Duration) {
    for _ in 0..times {
        thread::sleep(each);
    }
}

/// Sleeps `each` at recursion depth `depth`: each depth is its own user
/// stack (frame pointers make every level a frame of the walk).
#[unsafe(no_mangle)]
#[inline(never)]
pub fn sparkprof_vm_deep_sleep(depth: u32, each: Duration) {
    if depth <= 1 {
        thread::sleep(each);
    } else {
        sparkprof_vm_deep_sleep(std::hint::black_box(depth - 1), each);
    }
    // Not a tail call: the frame stays on the stack.
    std::hint::black_box(depth);
}

/// The same under a frame of 8 KiB: the same depths make other stacks, at
/// stack pointers that no plain depth shares (the off-CPU program reuses a
/// walk while a thread leaves with the same registers, so stacks told apart
/// only by a caller further out would look alike to it).
#[unsafe(no_mangle)]
#[inline(never)]
pub fn sparkprof_vm_padded_deep_sleep(depth: u32, each: Duration) {
    let pad = std::hint::black_box([0u8; 8192]);
    sparkprof_vm_deep_sleep(depth, each);
    std::hint::black_box(&pad);
}

/// Two ways into the same sleep, alike in everything but their address:
/// a thread that sleeps through one leaves the CPU with the same registers
/// as one that sleeps through the other on the same stack.
#[unsafe(no_mangle)]
#[inline(never)]
pub fn sparkprof_vm_sleep_via_a(each: Duration) {
    sparkprof_vm_deep_sleep(std::hint::black_box(3), each);
    std::hint::black_box(1);
}

#[unsafe(no_mangle)]
#[inline(never)]
pub fn sparkprof_vm_sleep_via_b(each: Duration) {
    sparkprof_vm_deep_sleep(std::hint::black_box(3), each);
    std::hint::black_box(2);
}

/// Renames the calling thread (`task:task_rename`).
pub fn set_comm(name: &CStr) -> Result<(), String> {
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    let rc = unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr(), 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(format!(
            "prctl(PR_SET_NAME): {}",
            std::io::Error::last_os_error()
        ))
    }
}

/// Stands in for HotSpot's `os::set_native_thread_name(const char*)`: the
/// rename uprobe finds this symbol in this binary as it would in a
/// libjvm.so, and reads the name from its first argument. It renames
/// nothing itself.
#[allow(non_snake_case)]
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn _ZN2os22set_native_thread_nameEPKc(name: *const c_char) {
    std::hint::black_box(name);
}

/// Calls the stand-in through an opaque pointer, so the call is made.
pub fn call_set_native_thread_name(name: &CStr) {
    let function: extern "C" fn(*const c_char) =
        std::hint::black_box(_ZN2os22set_native_thread_nameEPKc);
    function(name.as_ptr());
}

/// Where a function of this binary is now: its address (`runtime`) and its
/// size from the binary's own symbol table.
pub fn function_range(symbol: &str, runtime: u64) -> Result<Range<u64>, String> {
    let data =
        std::fs::read("/proc/self/exe").map_err(|err| format!("reading /proc/self/exe: {err}"))?;
    let elf =
        object::File::parse(&*data).map_err(|err| format!("parsing /proc/self/exe: {err}"))?;
    let found = elf
        .symbols()
        .find(|candidate| candidate.name() == Ok(symbol))
        .ok_or_else(|| format!("{symbol} is not in this binary's symbol table (stripped?)"))?;
    if found.size() == 0 {
        return Err(format!("{symbol} has no size in the symbol table"));
    }
    Ok(runtime..runtime + found.size())
}

/// What a data pointer on the stack points to: 8 zero bytes before it, so
/// it never looks like the end of a call instruction.
static DECOY_DATA: [u64; 2] = [0, 0];

/// Where a wait among decoys should be seen to come from: the address after
/// the leaf that the off-CPU walk must find.
pub struct DecoyWait {
    pub expected_caller: u64,
}

/// One nanosleep entered as glibc's waits enter theirs, with no frame
/// pointer in rbp, over 32 words of stack laid out to mislead the off-CPU
/// program's search for a frame record:
/// - at the stack pointer, a decoy: a pointer further up this stack at a
///   "record" `[0, data]`, followed by a data pointer; every range check
///   passes (as a heap pointer next to a saved register did in a JVM whose
///   malloc arena lay within 8 MiB of the thread's stack), but no return
///   address vouches for it;
/// - 16 words up, this function's real frame pointer, followed by (`saved`
///   false) an address that follows a call instruction: a frame record
///   vouched for by its own return address; or (`saved` true) by a data
///   pointer, as glibc's `pthread_cond_wait` saves rbp among other
///   registers: the record it points to (this function's own) vouches.
#[unsafe(no_mangle)]
#[inline(never)]
pub fn sparkprof_vm_sleep_among_decoys(each: Duration, saved: bool) -> DecoyWait {
    let ts = libc::timespec {
        tv_sec: each.as_secs() as libc::time_t,
        tv_nsec: each.subsec_nanos() as libc::c_long,
    };
    let data = DECOY_DATA.as_ptr().wrapping_add(1) as u64;
    let (frame, after_call): (u64, u64);
    // SAFETY: the block restores rsp and rbp, writes only below the stack
    // pointer it was given (the compiler keeps no red zone under a block
    // without `nostack`), and nanosleep reads `ts` only.
    unsafe {
        std::arch::asm!(
            "push rbp",
            "mov {frame}, rbp",
            "call 3f",
            "3: pop {after_call}",
            "sub rsp, 0x100",
            "mov ecx, 32",
            "4: mov qword ptr [rsp + rcx * 8 - 8], 0",
            "dec ecx",
            "jnz 4b",
            "lea rcx, [rsp + 0x40]",
            "mov [rsp], rcx",
            "mov [rsp + 0x8], {data}",
            "mov [rsp + 0x48], {data}",
            "mov [rsp + 0x80], {frame}",
            "mov [rsp + 0x88], {after_call}",
            "test {saved:e}, {saved:e}",
            "jz 5f",
            "mov [rsp + 0x88], {data}",
            "5: xor ebp, ebp",
            "mov eax, 35",
            "syscall",
            "add rsp, 0x100",
            "pop rbp",
            frame = out(reg) frame,
            after_call = out(reg) after_call,
            data = in(reg) data,
            saved = in(reg) u32::from(saved),
            in("rdi") &ts,
            in("rsi") 0u64,
            out("rax") _,
            out("rcx") _,
            out("r11") _,
        );
    }
    let expected_caller = if saved {
        // SAFETY: `frame` is this function's frame record (frame pointers
        // are forced in this build): its second word is our return address.
        unsafe { std::ptr::read_volatile((frame + 8) as *const u64) }
    } else {
        after_call
    };
    std::hint::black_box(&ts);
    DecoyWait { expected_caller }
}

/// Blocks in `read` on `fd` (a pipe or a socket) until a byte comes.
#[unsafe(no_mangle)]
#[inline(never)]
pub fn sparkprof_vm_wait_in_read(fd: i32) {
    let mut byte = 0u8;
    // SAFETY: one byte into a local.
    unsafe { libc::read(fd, (&raw mut byte).cast(), 1) };
    std::hint::black_box(byte);
}

/// [`sparkprof_vm_wait_in_read`] on a pipe, from a function of its own
/// (the frame-pointer walk names the caller of a function that calls
/// `read`, not that function: glibc's `read` keeps no frame record).
#[unsafe(no_mangle)]
#[inline(never)]
pub fn sparkprof_vm_wait_in_pipe_read(fd: i32) {
    sparkprof_vm_wait_in_read(fd);
    std::hint::black_box(fd);
}

/// The same on a socket, under a padded frame: at the pipe's stack
/// pointer the program would take it for the pipe's site, and show the
/// pipe's user stack (see `OffCpuSite`).
#[unsafe(no_mangle)]
#[inline(never)]
pub fn sparkprof_vm_wait_in_socket_read(fd: i32) {
    let pad = std::hint::black_box([0u8; 256]);
    sparkprof_vm_wait_in_read(fd);
    std::hint::black_box(&pad);
}

/// Sleeps `each` in nanosleep, from a function of its own.
#[unsafe(no_mangle)]
#[inline(never)]
pub fn sparkprof_vm_wait_in_nanosleep(each: Duration) {
    thread::sleep(each);
    std::hint::black_box(each);
}

/// Anonymous pages whose first touch waits for this process's
/// userfaultfd handler, which serves each fault a given time after it
/// comes: a wait in a page fault, outside any system call, that needs no
/// disk.
pub struct UserFaults {
    region: *mut u8,
    pages: usize,
    handler: Option<JoinHandle<Result<u32, String>>>,
    /// Written to stop the handler (its `poll` watches the read end).
    stop: Option<std::io::PipeWriter>,
}

// SAFETY: the region is only touched through `touch`, whose reads any
// thread may make; the mapping lives until `UserFaults` is dropped.
unsafe impl Send for UserFaults {}
unsafe impl Sync for UserFaults {}

/// `<linux/userfaultfd.h>`, which the libc crate does not carry.
mod uffd {
    pub const API: u64 = 0xaa;
    /// `_IOWR(0xaa, 0x3f, struct uffdio_api)`.
    pub const IOCTL_API: u64 = 0xc018_aa3f;
    /// `_IOWR(0xaa, 0x00, struct uffdio_register)`.
    pub const IOCTL_REGISTER: u64 = 0xc020_aa00;
    /// `_IOWR(0xaa, 0x04, struct uffdio_zeropage)`.
    pub const IOCTL_ZEROPAGE: u64 = 0xc020_aa04;
    pub const REGISTER_MODE_MISSING: u64 = 1;
    pub const EVENT_PAGEFAULT: u8 = 0x12;
    /// `struct uffd_msg`: the event in its first byte, a page fault's
    /// address at byte 16.
    pub const MSG_LEN: usize = 32;
}

impl UserFaults {
    pub const PAGE: usize = 4096;

    /// `pages` pages, each served `delay` after its fault.
    pub fn new(pages: usize, delay: Duration) -> Result<Self, String> {
        let err = |what: &str| format!("{what}: {}", std::io::Error::last_os_error());
        // SAFETY: plain system calls on values owned here.
        let fd =
            unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | libc::O_NONBLOCK) };
        if fd < 0 {
            return Err(err("userfaultfd"));
        }
        // SAFETY: a new descriptor that nothing else owns.
        let fd: std::os::fd::OwnedFd = unsafe { std::os::fd::FromRawFd::from_raw_fd(fd as i32) };
        let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
        let mut api = [uffd::API, 0, 0];
        // SAFETY: `struct uffdio_api` is three u64s.
        if unsafe { libc::ioctl(raw, uffd::IOCTL_API, api.as_mut_ptr()) } != 0 {
            return Err(err("UFFDIO_API"));
        }
        // Before the mapping, which a failure after it would leak.
        let (stop_read, stop) = std::io::pipe().map_err(|e| format!("a pipe: {e}"))?;
        let len = pages * Self::PAGE;
        // SAFETY: a new private anonymous mapping.
        let region = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if region == libc::MAP_FAILED {
            return Err(err("mmap"));
        }
        let mut register = [region as u64, len as u64, uffd::REGISTER_MODE_MISSING, 0];
        // SAFETY: `struct uffdio_register` is four u64s.
        if unsafe { libc::ioctl(raw, uffd::IOCTL_REGISTER, register.as_mut_ptr()) } != 0 {
            let error = err("UFFDIO_REGISTER");
            // SAFETY: the mapping made above, used by nothing.
            unsafe { libc::munmap(region, len) };
            return Err(error);
        }
        let handler = thread::spawn(move || Self::serve(&fd, &stop_read, delay));
        Ok(Self {
            region: region.cast(),
            pages,
            handler: Some(handler),
            stop: Some(stop),
        })
    }

    /// The handler: each page fault served `delay` after it came, with a
    /// page of zeroes (which wakes the faulting thread); returns how many.
    fn serve(
        fd: &std::os::fd::OwnedFd,
        stop: &std::io::PipeReader,
        delay: Duration,
    ) -> Result<u32, String> {
        use std::os::fd::AsRawFd as _;
        let mut served = 0;
        loop {
            let mut fds = [
                libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: stop.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: two pollfds owned here.
            if unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) } < 0 {
                return Err(format!("poll: {}", std::io::Error::last_os_error()));
            }
            if fds[1].revents != 0 {
                return Ok(served);
            }
            let mut msg = [0u8; uffd::MSG_LEN];
            // SAFETY: one message into a buffer of its size. Non-blocking:
            // `poll` may say readable for a fault already read.
            let read = unsafe { libc::read(fd.as_raw_fd(), msg.as_mut_ptr().cast(), msg.len()) };
            if read != msg.len() as isize || msg[0] != uffd::EVENT_PAGEFAULT {
                continue;
            }
            let address = u64::from_ne_bytes(msg[16..24].try_into().expect("8 bytes"));
            thread::sleep(delay);
            let page = address & !(Self::PAGE as u64 - 1);
            let mut zeropage = [page, Self::PAGE as u64, 0, 0];
            // SAFETY: `struct uffdio_zeropage` is four u64s.
            if unsafe { libc::ioctl(fd.as_raw_fd(), uffd::IOCTL_ZEROPAGE, zeropage.as_mut_ptr()) }
                != 0
            {
                return Err(format!(
                    "UFFDIO_ZEROPAGE: {}",
                    std::io::Error::last_os_error()
                ));
            }
            served += 1;
        }
    }

    /// The address of page `index`.
    pub fn page(&self, index: usize) -> u64 {
        assert!(index < self.pages, "page {index} of {}", self.pages);
        self.region as u64 + (index * Self::PAGE) as u64
    }

    /// Stops the handler; how many faults it served.
    pub fn finish(mut self) -> Result<u32, String> {
        drop(self.stop.take());
        self.handler
            .take()
            .expect("joined once")
            .join()
            .map_err(|_| "the userfaultfd handler panicked".to_owned())?
    }
}

impl Drop for UserFaults {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(handler) = self.handler.take() {
            let _ = handler.join();
        }
        // SAFETY: the mapping made in `new`, no longer touched.
        unsafe { libc::munmap(self.region.cast(), self.pages * Self::PAGE) };
    }
}

/// Touches `address` (a page of [`UserFaults`]), from a function of its
/// own: the first touch waits in the page fault until it is served.
#[unsafe(no_mangle)]
#[inline(never)]
pub fn sparkprof_vm_wait_in_page_fault(address: u64) {
    // SAFETY: a readable page of a live `UserFaults`.
    let byte = unsafe { std::ptr::read_volatile(address as *const u8) };
    std::hint::black_box(byte);
}
