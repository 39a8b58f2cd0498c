//! The CPU time of every thread that exits while a job runs, from the
//! kernel's taskstats exit records (generic netlink `TASKSTATS`, a listener
//! registered for every CPU): each thread's name and `sum_exec_runtime`,
//! the very time a cgroup's `usage_usec` adds up. A Spark job's executors,
//! Python workers and driver all exit at its end, so their threads' records
//! say where the job's CPU went: JIT compilers, garbage collection, task
//! threads, Python workers. (The cgroup total says how much, not where.)

use std::{
    io,
    mem::size_of,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use anyhow::{Context as _, Result, bail};

const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const TASKSTATS_CMD_GET: u8 = 1;
const TASKSTATS_CMD_ATTR_REGISTER_CPUMASK: u16 = 3;
const TASKSTATS_TYPE_PID: u16 = 1;
const TASKSTATS_TYPE_STATS: u16 = 3;
const TASKSTATS_TYPE_AGGR_PID: u16 = 4;
/// `struct taskstats` (linux/taskstats.h, stable since version 1):
/// `cpu_run_virtual_total` (the task's `se.sum_exec_runtime`, ns) and
/// `ac_comm`.
const STATS_RUN_NS: usize = 72;
const STATS_COMM: usize = 80;
const STATS_COMM_LEN: usize = 32;
const NLMSG_HDR: usize = 16;
const GENL_HDR: usize = 4;

/// One thread that exited: its name (comm) and CPU time.
#[derive(Debug, Clone)]
pub struct Exit {
    pub comm: String,
    pub cpu: Duration,
}

/// Exit records gathered in the background until [`Listener::stop`].
pub struct Listener {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<Vec<Exit>>>,
}

impl Listener {
    /// Registers for every CPU's exit records and gathers them from now.
    pub fn start() -> Result<Self> {
        let socket = open().context("taskstats: opening a generic netlink socket")?;
        let family = family_id(&socket).context("taskstats: finding its netlink family")?;
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        // Every online CPU (the kernel's cpulist syntax).
        let mask = format!("0-{}\0", cpus.max(1) - 1);
        send(
            &socket,
            family,
            TASKSTATS_CMD_GET,
            &attribute(TASKSTATS_CMD_ATTR_REGISTER_CPUMASK, mask.as_bytes()),
        )
        .context("taskstats: registering for exit records")?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || gather(&socket, family, &stopping));
        Ok(Self { stop, thread })
    }

    /// Stops and returns every exit recorded since [`Listener::start`].
    pub fn stop(self) -> Result<Vec<Exit>> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.join() {
            Ok(exits) => exits,
            Err(_) => bail!("taskstats: the listener panicked"),
        }
    }
}

fn open() -> io::Result<OwnedFd> {
    // SAFETY: plain system calls; the descriptor is owned from here on.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_GENERIC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: a zeroed sockaddr_nl is valid (nl_pid 0: the kernel picks).
    let mut address: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    address.nl_family = libc::AF_NETLINK as u16;
    let bound = unsafe {
        libc::bind(
            fd,
            (&raw const address).cast(),
            size_of::<libc::sockaddr_nl>() as u32,
        )
    };
    if bound != 0 {
        return Err(io::Error::last_os_error());
    }
    // Room for a burst of exits (a Spark application's end ends hundreds
    // of threads at once); FORCE as root, past rmem_max. If it is refused,
    // an overflow is still reported (`gather`), never silent.
    let room: libc::c_int = 16 << 20;
    let timeout = libc::timeval {
        tv_sec: 0,
        tv_usec: 200_000,
    };
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&raw const room).cast(),
            size_of::<libc::c_int>() as u32,
        );
        if libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&raw const timeout).cast(),
            size_of::<libc::timeval>() as u32,
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(socket)
}

/// A netlink attribute: length, type, payload, padded to 4 bytes.
fn attribute(kind: u16, payload: &[u8]) -> Vec<u8> {
    let len = 4 + payload.len();
    let mut bytes = Vec::with_capacity(len.next_multiple_of(4));
    bytes.extend_from_slice(&(len as u16).to_ne_bytes());
    bytes.extend_from_slice(&kind.to_ne_bytes());
    bytes.extend_from_slice(payload);
    bytes.resize(len.next_multiple_of(4), 0);
    bytes
}

/// The attributes in `bytes`, by type (several of a type kept in order).
fn attributes(mut bytes: &[u8]) -> Vec<(u16, &[u8])> {
    let mut found = Vec::new();
    while bytes.len() >= 4 {
        let len = usize::from(u16::from_ne_bytes([bytes[0], bytes[1]]));
        let kind = u16::from_ne_bytes([bytes[2], bytes[3]]) & 0x3fff;
        if len < 4 || len > bytes.len() {
            break;
        }
        found.push((kind, &bytes[4..len]));
        bytes = &bytes[len.next_multiple_of(4).min(bytes.len())..];
    }
    found
}

fn send(socket: &OwnedFd, family: u16, command: u8, attributes: &[u8]) -> io::Result<()> {
    let len = NLMSG_HDR + GENL_HDR + attributes.len();
    let mut message = Vec::with_capacity(len);
    message.extend_from_slice(&(len as u32).to_ne_bytes());
    message.extend_from_slice(&family.to_ne_bytes());
    message.extend_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    message.extend_from_slice(&1u32.to_ne_bytes());
    message.extend_from_slice(&0u32.to_ne_bytes());
    message.extend_from_slice(&[command, 1, 0, 0]);
    message.extend_from_slice(attributes);
    // SAFETY: sends `message`'s bytes.
    let sent = unsafe { libc::send(socket.as_raw_fd(), message.as_ptr().cast(), len, 0) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Receives what is there (an empty vector when the timeout passes).
fn receive(socket: &OwnedFd, buffer: &mut [u8]) -> io::Result<usize> {
    // SAFETY: receives into `buffer`.
    let got = unsafe {
        libc::recv(
            socket.as_raw_fd(),
            buffer.as_mut_ptr().cast(),
            buffer.len(),
            0,
        )
    };
    if got < 0 {
        let err = io::Error::last_os_error();
        return match err.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted => {
                Ok(0)
            }
            _ => Err(err),
        };
    }
    Ok(got as usize)
}

/// The netlink messages in `bytes`: (type, payload after the header).
fn messages(mut bytes: &[u8]) -> Vec<(u16, &[u8])> {
    let mut found = Vec::new();
    while bytes.len() >= NLMSG_HDR {
        let len = u32::from_ne_bytes(bytes[0..4].try_into().expect("4 bytes")) as usize;
        let kind = u16::from_ne_bytes([bytes[4], bytes[5]]);
        if len < NLMSG_HDR || len > bytes.len() {
            break;
        }
        found.push((kind, &bytes[NLMSG_HDR..len]));
        bytes = &bytes[len.next_multiple_of(4).min(bytes.len())..];
    }
    found
}

fn family_id(socket: &OwnedFd) -> Result<u16> {
    send(
        socket,
        GENL_ID_CTRL,
        CTRL_CMD_GETFAMILY,
        &attribute(CTRL_ATTR_FAMILY_NAME, b"TASKSTATS\0"),
    )?;
    let mut buffer = vec![0u8; 64 << 10];
    for _ in 0..10 {
        let got = receive(socket, &mut buffer)?;
        for (kind, payload) in messages(&buffer[..got]) {
            if kind == libc::NLMSG_ERROR as u16 {
                let code = payload
                    .get(..4)
                    .map_or(0, |b| i32::from_ne_bytes(b.try_into().expect("4 bytes")));
                bail!(
                    "the kernel answered {}",
                    io::Error::from_raw_os_error(-code)
                );
            }
            if kind != GENL_ID_CTRL || payload.len() < GENL_HDR {
                continue;
            }
            for (attr, value) in attributes(&payload[GENL_HDR..]) {
                if attr == CTRL_ATTR_FAMILY_ID && value.len() >= 2 {
                    return Ok(u16::from_ne_bytes([value[0], value[1]]));
                }
            }
        }
    }
    bail!("no answer (is the kernel built with CONFIG_TASKSTATS?)")
}

fn gather(socket: &OwnedFd, family: u16, stop: &AtomicBool) -> Result<Vec<Exit>> {
    let mut buffer = vec![0u8; 1 << 20];
    let mut exits = Vec::new();
    loop {
        let got = match receive(socket, &mut buffer) {
            Ok(got) => got,
            Err(err) if err.raw_os_error() == Some(libc::ENOBUFS) => {
                bail!("taskstats: exit records were lost (the socket's buffer overflowed)")
            }
            Err(err) => return Err(err).context("taskstats: receiving"),
        };
        // Told to stop, it still reads what is queued: it ends at the first
        // wait that brings nothing.
        if got == 0 && stop.load(Ordering::Relaxed) {
            break;
        }
        for (kind, payload) in messages(&buffer[..got]) {
            if kind != family || payload.len() < GENL_HDR {
                continue;
            }
            for (attr, nested) in attributes(&payload[GENL_HDR..]) {
                if attr != TASKSTATS_TYPE_AGGR_PID {
                    continue;
                }
                let inner = attributes(nested);
                let has_pid = inner.iter().any(|(kind, _)| *kind == TASKSTATS_TYPE_PID);
                let stats = inner
                    .iter()
                    .find(|(kind, _)| *kind == TASKSTATS_TYPE_STATS)
                    .map(|(_, stats)| *stats);
                if let (true, Some(stats)) = (has_pid, stats)
                    && let Some(exit) = parse_stats(stats)
                {
                    exits.push(exit);
                }
            }
        }
    }
    Ok(exits)
}

fn parse_stats(stats: &[u8]) -> Option<Exit> {
    let run = stats.get(STATS_RUN_NS..STATS_RUN_NS + 8)?;
    let comm = stats.get(STATS_COMM..STATS_COMM + STATS_COMM_LEN)?;
    let comm = &comm[..comm.iter().position(|&b| b == 0).unwrap_or(comm.len())];
    Some(Exit {
        comm: String::from_utf8_lossy(comm).into_owned(),
        cpu: Duration::from_nanos(u64::from_ne_bytes(run.try_into().ok()?)),
    })
}

/// What a Spark job's threads do, by their names (comm, 15 characters).
pub const CLASSES: [&str; 5] = [
    "JIT compilers",
    "GC and VM threads",
    "task threads",
    "Python",
    "other threads",
];

/// The class of a thread named `comm` (see [`CLASSES`]).
pub fn class_of(comm: &str) -> usize {
    if comm.starts_with("C1 CompilerThre") || comm.starts_with("C2 CompilerThre") {
        0
    } else if comm.starts_with("GC Thread")
        || comm.starts_with("G1 ")
        || comm.starts_with("VM Thread")
    {
        1
    } else if comm.starts_with("Executor task") {
        2
    } else if comm.starts_with("python") {
        3
    } else {
        4
    }
}

/// CPU seconds by class.
pub fn by_class(exits: &[Exit]) -> [f64; CLASSES.len()] {
    let mut seconds = [0.0; CLASSES.len()];
    for exit in exits {
        seconds[class_of(&exit.comm)] += exit.cpu.as_secs_f64();
    }
    seconds
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPU time the calling thread has used so far (its own clock).
    fn own_cpu() -> Duration {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: writes the calling thread's CPU clock into `now`.
        assert_eq!(
            unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) },
            0
        );
        Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
    }

    /// A real thread's exit comes back with its name and the CPU it spent
    /// (the kernel's own record, through a registered listener), whatever
    /// else the host runs meanwhile: the thread spins until its own CPU
    /// clock says 300 ms.
    #[test]
    fn a_threads_exit_is_recorded_with_its_cpu() {
        let listener = Listener::start().expect("taskstats listener (needs root)");
        let spun = std::thread::Builder::new()
            .name("exits-spinner".into())
            .spawn(|| {
                let mut x = 0u64;
                while own_cpu() < Duration::from_millis(300) {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                }
                std::hint::black_box(x);
                own_cpu()
            })
            .expect("spawn")
            .join()
            .expect("join");
        // The record is sent as the thread exits; give the listener time.
        std::thread::sleep(Duration::from_millis(500));
        let exits = listener.stop().expect("gathered");
        let ours: Vec<&Exit> = exits.iter().filter(|e| e.comm == "exits-spinner").collect();
        assert_eq!(ours.len(), 1, "{exits:?}");
        let recorded = ours[0].cpu;
        assert!(
            recorded >= spun && recorded <= spun + Duration::from_millis(50),
            "recorded {recorded:?}, the thread's own clock {spun:?}"
        );
    }

    #[test]
    fn threads_are_classed_by_name() {
        assert_eq!(CLASSES[class_of("C2 CompilerThre")], "JIT compilers");
        assert_eq!(CLASSES[class_of("G1 Conc#0")], "GC and VM threads");
        assert_eq!(CLASSES[class_of("Executor task l")], "task threads");
        assert_eq!(CLASSES[class_of("python3")], "Python");
        assert_eq!(CLASSES[class_of("dispatcher-Exec")], "other threads");
    }
}
