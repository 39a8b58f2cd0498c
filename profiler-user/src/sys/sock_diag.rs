//! The TCP sockets listening in this process's network namespace, from
//! the kernel's socket diagnostics (`NETLINK_SOCK_DIAG`, as `ss -lt` asks).
//!
//! /proc/PID/net/tcp lists the same sockets, but the kernel makes each read
//! of it walk every bucket of the established-connections hash, sized from
//! the host's memory (262,144 buckets on a 2-CPU VM, ~5 ms per file; more
//! on a real worker), to print the listeners that sit in front of them. A
//! request for the `LISTEN` state alone walks only the listening hash.

use std::io;
use std::mem::size_of;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A TCP socket in the LISTEN state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ListeningSocket {
    /// The local address (unspecified for a wildcard bind).
    pub addr: IpAddr,
    /// The local port.
    pub port: u16,
    /// The socket's inode, as in `socket:[inode]` under /proc/PID/fd.
    pub inode: u64,
}

// From <linux/sock_diag.h>, <linux/inet_diag.h> and <net/tcp_states.h>.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const TCP_LISTEN: u32 = 10;

/// `struct inet_diag_sockid`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct SockId {
    sport: [u8; 2],
    dport: [u8; 2],
    src: [u8; 16],
    dst: [u8; 16],
    interface: u32,
    cookie: [u32; 2],
}

/// `struct nlmsghdr` followed by `struct inet_diag_req_v2`.
#[repr(C)]
struct Request {
    header: libc::nlmsghdr,
    family: u8,
    protocol: u8,
    ext: u8,
    pad: u8,
    states: u32,
    id: SockId,
}

/// `struct inet_diag_msg`, the head of each answer.
#[repr(C)]
#[derive(Clone, Copy)]
struct Message {
    family: u8,
    state: u8,
    timer: u8,
    retrans: u8,
    id: SockId,
    expires: u32,
    rqueue: u32,
    wqueue: u32,
    uid: u32,
    inode: u32,
}

/// Every TCP socket listening in this process's network namespace, IPv4
/// and IPv6. An error if the kernel has no TCP socket diagnostics (e.g.
/// `tcp_diag` not loaded and not loadable); IPv6 missing from the kernel
/// is not one.
pub fn tcp_listeners() -> io::Result<Vec<ListeningSocket>> {
    let mut sockets = family_listeners(libc::AF_INET as u8)?;
    match family_listeners(libc::AF_INET6 as u8) {
        Ok(v6) => sockets.extend(v6),
        Err(err) if err.raw_os_error() == Some(libc::EAFNOSUPPORT) => {}
        Err(err) => return Err(err),
    }
    Ok(sockets)
}

fn family_listeners(family: u8) -> io::Result<Vec<ListeningSocket>> {
    // SAFETY: a plain socket(2); the descriptor is owned from here on.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and nothing else owns it.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    let request = Request {
        header: libc::nlmsghdr {
            nlmsg_len: size_of::<Request>() as u32,
            nlmsg_type: SOCK_DIAG_BY_FAMILY,
            nlmsg_flags: (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16,
            nlmsg_seq: 1,
            nlmsg_pid: 0,
        },
        family,
        protocol: libc::IPPROTO_TCP as u8,
        ext: 0,
        pad: 0,
        states: 1 << TCP_LISTEN,
        id: SockId::default(),
    };
    // SAFETY: sends the bytes of a `repr(C)` value to the kernel (pid 0).
    let sent = unsafe {
        let mut kernel: libc::sockaddr_nl = std::mem::zeroed();
        kernel.nl_family = libc::AF_NETLINK as u16;
        libc::sendto(
            socket.as_raw_fd(),
            (&raw const request).cast(),
            size_of::<Request>(),
            0,
            (&raw const kernel).cast(),
            size_of::<libc::sockaddr_nl>() as u32,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut sockets = Vec::new();
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        // SAFETY: receives into a buffer of `buf.len()` bytes.
        let got = unsafe { libc::recv(socket.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if got < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        if got == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        if parse_answers(&buf[..got as usize], &mut sockets)? {
            return Ok(sockets);
        }
    }
}

/// Reads one datagram of answers into `sockets`: `true` once the dump is
/// done.
fn parse_answers(mut data: &[u8], sockets: &mut Vec<ListeningSocket>) -> io::Result<bool> {
    let header_len = size_of::<libc::nlmsghdr>();
    let malformed = || io::Error::new(io::ErrorKind::InvalidData, "malformed sock_diag answer");
    while data.len() >= header_len {
        // SAFETY: `header_len` bytes are there; read unaligned.
        let header: libc::nlmsghdr = unsafe { std::ptr::read_unaligned(data.as_ptr().cast()) };
        let len = header.nlmsg_len as usize;
        if len < header_len || len > data.len() {
            return Err(malformed());
        }
        let payload = &data[header_len..len];
        match i32::from(header.nlmsg_type) {
            libc::NLMSG_DONE => return Ok(true),
            libc::NLMSG_ERROR => {
                // `struct nlmsgerr`: a negative errno first.
                let errno = payload
                    .get(..4)
                    .map(|b| i32::from_ne_bytes(b.try_into().expect("4 bytes")))
                    .ok_or_else(malformed)?;
                return Err(io::Error::from_raw_os_error(-errno));
            }
            _ if payload.len() >= size_of::<Message>() => {
                // SAFETY: a whole `Message` is there; read unaligned.
                let message: Message = unsafe { std::ptr::read_unaligned(payload.as_ptr().cast()) };
                if let Some(socket) = listening(&message) {
                    sockets.push(socket);
                }
            }
            _ => return Err(malformed()),
        }
        // Messages are 4-byte aligned.
        let next = (len + 3) & !3;
        data = data.get(next..).unwrap_or_default();
    }
    Ok(false)
}

fn listening(message: &Message) -> Option<ListeningSocket> {
    if u32::from(message.state) != TCP_LISTEN {
        return None;
    }
    let addr = match i32::from(message.family) {
        libc::AF_INET => {
            let v4: [u8; 4] = message.id.src[..4].try_into().expect("4 bytes");
            IpAddr::V4(Ipv4Addr::from(v4))
        }
        libc::AF_INET6 => IpAddr::V6(Ipv6Addr::from(message.id.src)),
        _ => return None,
    };
    Some(ListeningSocket {
        addr,
        port: u16::from_be_bytes(message.id.sport),
        inode: u64::from(message.inode),
    })
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;

    use super::*;

    #[test]
    fn the_layouts_are_the_kernels() {
        assert_eq!(size_of::<SockId>(), 48);
        assert_eq!(size_of::<Request>(), 16 + 56);
        assert_eq!(size_of::<Message>(), 72);
    }

    #[test]
    fn our_listeners_are_found_with_their_inodes() {
        let mut ours = vec![
            TcpListener::bind("127.0.0.1:0").unwrap(),
            TcpListener::bind("0.0.0.0:0").unwrap(),
        ];
        // IPv6, where the host has it.
        ours.extend(TcpListener::bind("[::1]:0"));
        let listeners = tcp_listeners().unwrap();
        for listener in &ours {
            let local = listener.local_addr().unwrap();
            let wanted = ListeningSocket {
                addr: local.ip(),
                port: local.port(),
                inode: inode_of(listener),
            };
            assert!(listeners.contains(&wanted), "{wanted:?} in {listeners:?}");
        }
        // A connected socket is not listening.
        let client = std::net::TcpStream::connect(ours[0].local_addr().unwrap()).unwrap();
        let listeners = tcp_listeners().unwrap();
        assert!(!listeners.iter().any(|s| s.inode == inode_of(&client)));
    }

    /// The inode of a socket of this process, from /proc/self/fd.
    fn inode_of(socket: &impl AsRawFd) -> u64 {
        let target = std::fs::read_link(format!("/proc/self/fd/{}", socket.as_raw_fd())).unwrap();
        let target = target.to_str().unwrap();
        target
            .strip_prefix("socket:[")
            .and_then(|t| t.strip_suffix(']'))
            .unwrap()
            .parse()
            .unwrap()
    }
}
