//! Best effort: which application a driver runs.
//!
//! A driver's application ID is generated at run time, so unlike an
//! executor's it is not on its command line. But every executor names its
//! driver's RPC endpoint (`--driver-url
//! spark://CoarseGrainedScheduler@HOST:PORT`) next to its `--app-id`: a
//! driver process on this host that listens on that port is that
//! application's driver. "Listens" is checked on the driver's own sockets
//! (its `socket:[inode]` file descriptors matched against the listening
//! TCP sockets of the driver's network namespace: the kernel's socket
//! diagnostics when that is sparkprof's own, /proc/PID/net/tcp and tcp6
//! otherwise), so another process listening on the same port elsewhere
//! does not count.
//!
//! This only works while an executor of the application runs on the same
//! host (local-mode drivers have none; their ID stays unknown).

use std::collections::HashSet;
use std::fs;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::classify::flag_value;

/// An executor's link to its driver: its application and where the
/// driver's scheduler endpoint listens.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DriverLink {
    /// The application ID (`--app-id`).
    pub app_id: String,
    /// The driver's host as the executor knows it (name or address).
    pub host: String,
    /// The driver's RPC port.
    pub port: u16,
}

impl DriverLink {
    /// From an executor's command line (`--driver-url` and `--app-id`, or
    /// the `SPARK_APPLICATION_ID` environment variable on Kubernetes).
    pub fn from_executor_command(argv: &[String], environ: &[(String, String)]) -> Option<Self> {
        let (host, port) = parse_driver_url(flag_value(argv, "--driver-url")?)?;
        let app_id = flag_value(argv, "--app-id")
            .or_else(|| {
                environ
                    .iter()
                    .find(|(k, _)| k == "SPARK_APPLICATION_ID")
                    .map(|(_, v)| v.as_str())
            })
            .filter(|id| !id.is_empty())?;
        Some(DriverLink {
            app_id: app_id.to_owned(),
            host: host.to_owned(),
            port,
        })
    }
}

/// `spark://CoarseGrainedScheduler@HOST:PORT` (HOST may be `[v6 address]`)
/// → (HOST without brackets, PORT).
pub fn parse_driver_url(url: &str) -> Option<(&str, u16)> {
    let rest = url.strip_prefix("spark://")?;
    let address = rest.rsplit_once('@').map_or(rest, |(_, address)| address);
    let (host, port) = address.rsplit_once(':')?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.is_empty() || port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((host, port.parse().ok()?))
}

pub use crate::sys::sock_diag::ListeningSocket;

/// `st` of a listening socket in /proc/net/tcp (`TCP_LISTEN`).
const TCP_LISTEN: &str = "0A";

/// Parses the text of /proc/PID/net/tcp or tcp6: the LISTEN entries.
/// The header and malformed lines are skipped.
pub fn parse_proc_net_tcp(text: &str) -> Vec<ListeningSocket> {
    text.lines().filter_map(parse_tcp_line).collect()
}

/// `sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...`
fn parse_tcp_line(line: &str) -> Option<ListeningSocket> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.len() < 10 || fields[3] != TCP_LISTEN {
        return None;
    }
    let (addr, port) = fields[1].split_once(':')?;
    Some(ListeningSocket {
        addr: parse_hex_addr(addr)?,
        port: u16::from_str_radix(port, 16).ok()?,
        inode: fields[9].parse().ok()?,
    })
}

/// The kernel prints each 32-bit word of the address as the hex of its
/// in-memory (network order) bytes read as a native integer, so the bytes
/// come back with `to_ne_bytes`.
fn parse_hex_addr(hex: &str) -> Option<IpAddr> {
    if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let word = |i: usize| -> Option<[u8; 4]> {
        Some(
            u32::from_str_radix(hex.get(i * 8..i * 8 + 8)?, 16)
                .ok()?
                .to_ne_bytes(),
        )
    };
    match hex.len() {
        8 => Some(IpAddr::V4(Ipv4Addr::from(word(0)?))),
        32 => {
            let mut bytes = [0u8; 16];
            for i in 0..4 {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            Some(IpAddr::V6(Ipv6Addr::from(bytes)))
        }
        _ => None,
    }
}

/// The inodes of the sockets process `pid` has open (`socket:[N]` links
/// under /proc/PID/fd). Descriptors closed while reading are skipped.
pub fn socket_inodes(pid: u32) -> io::Result<HashSet<u64>> {
    let mut inodes = HashSet::new();
    for entry in fs::read_dir(format!("/proc/{pid}/fd"))? {
        let Ok(target) = fs::read_link(entry?.path()) else {
            continue;
        };
        if let Some(inode) = target
            .to_str()
            .and_then(|t| t.strip_prefix("socket:["))
            .and_then(|t| t.strip_suffix(']'))
            .and_then(|t| t.parse().ok())
        {
            inodes.insert(inode);
        }
    }
    Ok(inodes)
}

/// The TCP sockets (IPv4 and IPv6) that process `pid` itself listens on.
pub fn listening_sockets(pid: u32) -> io::Result<Vec<ListeningSocket>> {
    let owned = socket_inodes(pid)?;
    // In sparkprof's own network namespace (a driver that is not in a
    // container), the kernel lists the listeners alone; /proc/PID/net/tcp
    // walks every established-connection bucket to print them.
    if crate::sys::proc::shares_namespace(pid, "net")
        && let Ok(listening) = crate::sys::sock_diag::tcp_listeners()
    {
        return Ok(listening
            .into_iter()
            .filter(|s| owned.contains(&s.inode))
            .collect());
    }
    let mut sockets = Vec::new();
    for table in ["tcp", "tcp6"] {
        // tcp6 is missing when IPv6 is disabled.
        let text = match fs::read_to_string(format!("/proc/{pid}/net/{table}")) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound && table == "tcp6" => continue,
            Err(e) => return Err(e),
        };
        sockets.extend(
            parse_proc_net_tcp(&text)
                .into_iter()
                .filter(|s| owned.contains(&s.inode)),
        );
    }
    Ok(sockets)
}

/// The application whose executors point at one of these listening
/// sockets: `Some` only if exactly one application matches. A link whose
/// host is an IP address must also match the socket's address unless the
/// socket listens on all addresses; a host name matches any address.
pub fn match_driver(listening: &[ListeningSocket], executors: &[DriverLink]) -> Option<String> {
    let apps: HashSet<&str> = executors
        .iter()
        .filter(|link| listening.iter().any(|s| link_points_at(link, s)))
        .map(|link| link.app_id.as_str())
        .collect();
    match apps.len() {
        1 => apps.into_iter().next().map(str::to_owned),
        _ => None,
    }
}

fn link_points_at(link: &DriverLink, socket: &ListeningSocket) -> bool {
    if link.port != socket.port {
        return false;
    }
    let Ok(host) = link.host.parse::<IpAddr>() else {
        return true;
    };
    socket.addr.is_unspecified() || canonical(host) == canonical(socket.addr)
}

/// IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) as IPv4.
fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        v4 => v4,
    }
}

/// The application ID of the driver `driver_pid`, found through the
/// executors on this host (see the module docs). `None` when no executor
/// points at a socket the driver listens on, when several applications do,
/// or when the driver's sockets cannot be read (it exited, no permission).
pub fn driver_app_id(driver_pid: u32, executors: &[DriverLink]) -> Option<String> {
    if executors.is_empty() {
        return None;
    }
    match listening_sockets(driver_pid) {
        Ok(listening) => match_driver(&listening, executors),
        Err(error) => {
            tracing::debug!(pid = driver_pid, %error, "cannot read the driver's sockets");
            None
        }
    }
}
