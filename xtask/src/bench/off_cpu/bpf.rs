//! The BPF programs section 6 handles itself: the empty program on
//! `sched_switch` (the floor), sparkprof's own programs found by name
//! (their statistics, and a second link of its `sched_switch` program),
//! through the `bpf` system call (the bench depends on no BPF library).

use std::{
    ffi::CStr,
    fs,
    os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd},
};

use anyhow::{Context as _, Result, bail};

use crate::bench::{bpf_prog_fdinfos, fdinfo_field, fdinfo_run_stats};

/// The kernel keeps a program's name to this many bytes.
const PROGRAM_NAME_LEN: usize = 15;

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_RAW_TRACEPOINT_OPEN: libc::c_long = 17;
const BPF_PROG_TYPE_RAW_TRACEPOINT: u32 = 17;

/// `bpf(cmd, attr, size_of::<A>())`, which returns a new descriptor.
fn bpf_fd<A>(cmd: libc::c_long, attr: &A, what: &str) -> Result<OwnedFd> {
    // SAFETY: `attr` is a `bpf_attr` prefix of its size whose pointers stay
    // valid for the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *const A,
            size_of::<A>() as libc::c_uint,
        )
    };
    if fd < 0 {
        bail!("{what}: {}", std::io::Error::last_os_error());
    }
    // SAFETY: a new file descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// `(run_time_ns, run_cnt)` of the BPF program called `program` (one of
/// sparkprof's tracing programs) that process `pid` holds.
pub(super) fn program_stats(pid: i32, program: &str) -> Result<(u64, u64)> {
    let (_, path, info) = find_program(pid, program)?;
    fdinfo_run_stats(&path, &info)
}

/// The BPF program called `program` that process `pid` holds, opened by
/// its id (which takes CAP_SYS_ADMIN): a descriptor of the very program,
/// its maps as that process filled them.
pub(super) fn open_program(pid: i32, program: &str) -> Result<OwnedFd> {
    find_program(pid, program).map(|(fd, _, _)| fd)
}

/// Process `pid`'s program called `program`: a descriptor of it opened by
/// its id, and its fdinfo path and text.
fn find_program(pid: i32, program: &str) -> Result<(OwnedFd, String, String)> {
    let kept = &program[..program.len().min(PROGRAM_NAME_LEN)];
    for (path, info) in bpf_prog_fdinfos(pid)? {
        let Some(id) = fdinfo_field(&info, "prog_id") else {
            continue;
        };
        let fd = program_by_id(id as u32)?;
        if program_name(fd.as_fd(), id as u32)? == kept {
            return Ok((fd, path, info));
        }
    }
    bail!("process {pid} holds no {program} program")
}

fn program_by_id(id: u32) -> Result<OwnedFd> {
    #[repr(C)]
    struct GetFdById {
        prog_id: u32,
        next_id: u32,
        open_flags: u32,
    }
    let attr = GetFdById {
        prog_id: id,
        next_id: 0,
        open_flags: 0,
    };
    bpf_fd(
        BPF_PROG_GET_FD_BY_ID,
        &attr,
        &format!("BPF_PROG_GET_FD_BY_ID {id}"),
    )
}

/// A loaded BPF program's name (at most 15 bytes), from a descriptor of it
/// (`id` for messages): fdinfo has none, so `BPF_OBJ_GET_INFO_BY_FD`.
fn program_name(fd: BorrowedFd<'_>, id: u32) -> Result<String> {
    /// `struct bpf_prog_info` up to its `name` (bytes 64 to 80).
    const INFO_LEN: usize = 80;
    #[repr(C)]
    struct GetInfoByFd {
        bpf_fd: u32,
        info_len: u32,
        info: u64,
    }
    let mut info = [0u64; INFO_LEN / 8];
    let attr = GetInfoByFd {
        bpf_fd: fd.as_raw_fd() as u32,
        info_len: INFO_LEN as u32,
        info: info.as_mut_ptr() as u64,
    };
    // SAFETY: `info` is INFO_LEN writable bytes; the kernel writes at most
    // `info_len` of them.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET_INFO_BY_FD,
            &attr as *const GetInfoByFd,
            size_of::<GetInfoByFd>() as libc::c_uint,
        )
    };
    if rc != 0 {
        bail!(
            "BPF_OBJ_GET_INFO_BY_FD of program {id}: {}",
            std::io::Error::last_os_error()
        );
    }
    let bytes: Vec<u8> = info.iter().flat_map(|word| word.to_ne_bytes()).collect();
    let name = &bytes[64..INFO_LEN];
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Ok(String::from_utf8_lossy(&name[..end]).into_owned())
}

/// A program that returns at once (`r0 = 0; exit`), of the raw tracepoint
/// type, loaded and not attached.
pub(super) fn load_empty_program() -> Result<OwnedFd> {
    /// `mov64 r0, 0` and `exit`.
    const INSNS: [u64; 2] = [0xb7, 0x95];
    #[repr(C)]
    struct ProgLoad {
        prog_type: u32,
        insn_cnt: u32,
        insns: u64,
        license: u64,
        rest: [u64; 12],
    }
    let license = c"GPL";
    let attr = ProgLoad {
        prog_type: BPF_PROG_TYPE_RAW_TRACEPOINT,
        insn_cnt: INSNS.len() as u32,
        insns: INSNS.as_ptr() as u64,
        license: license.as_ptr() as u64,
        rest: [0; 12],
    };
    bpf_fd(
        BPF_PROG_LOAD,
        &attr,
        "loading an empty raw tracepoint program",
    )
}

/// A program's link to the `sched_switch` tracepoint: the program runs at
/// every context switch of the host until this is dropped. The kernel
/// takes one program more than once, each link its own run per switch.
pub(super) struct SchedSwitchLink(#[allow(dead_code)] OwnedFd);

impl SchedSwitchLink {
    /// A raw tracepoint program is told the tracepoint's name; a BTF one
    /// (`tp_btf`, sparkprof's) was told at its load and must be given none.
    pub(super) fn attach(program: BorrowedFd<'_>, btf: bool) -> Result<Self> {
        #[repr(C)]
        struct RawTracepointOpen {
            name: u64,
            prog_fd: u32,
            pad: u32,
        }
        let name: &CStr = c"sched_switch";
        let open = RawTracepointOpen {
            name: if btf { 0 } else { name.as_ptr() as u64 },
            prog_fd: program.as_raw_fd() as u32,
            pad: 0,
        };
        bpf_fd(
            BPF_RAW_TRACEPOINT_OPEN,
            &open,
            "attaching a program to sched_switch",
        )
        .map(Self)
    }
}

/// The empty program, attached to the `sched_switch` raw tracepoint for as
/// long as this value lives: the floor under any profiler built on it.
pub(super) struct EmptySchedSwitchProgram {
    program: OwnedFd,
    _link: SchedSwitchLink,
}

impl EmptySchedSwitchProgram {
    pub(super) fn attach() -> Result<Self> {
        let program = load_empty_program()?;
        let link = SchedSwitchLink::attach(program.as_fd(), false)?;
        Ok(Self {
            program,
            _link: link,
        })
    }

    /// `(run_time_ns, run_cnt)` of the program, from its fdinfo (counted
    /// while `kernel.bpf_stats_enabled` is 1).
    pub(super) fn stats(&self) -> Result<(u64, u64)> {
        let path = format!("/proc/self/fdinfo/{}", self.program.as_raw_fd());
        let info = fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        fdinfo_run_stats(&path, &info)
    }
}
