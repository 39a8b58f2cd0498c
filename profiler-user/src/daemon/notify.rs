//! systemd's notification protocol (`sd_notify`), for `Type=notify` with a
//! watchdog: one datagram per state to the socket in `$NOTIFY_SOCKET`.
//! Without the variable (not run by systemd) it does nothing.

use std::{os::unix::net::UnixDatagram, time::Duration};

use tracing::debug;

/// The service manager's socket, if there is one.
pub struct Notifier {
    socket: Option<(UnixDatagram, std::os::unix::net::SocketAddr)>,
}

impl Notifier {
    pub fn from_env() -> Self {
        let socket = std::env::var_os("NOTIFY_SOCKET").and_then(|path| {
            let path = path.into_string().ok()?;
            let address = match path.strip_prefix('@') {
                // An abstract socket.
                Some(name) => {
                    use std::os::linux::net::SocketAddrExt as _;
                    std::os::unix::net::SocketAddr::from_abstract_name(name).ok()?
                }
                None => std::os::unix::net::SocketAddr::from_pathname(&path).ok()?,
            };
            Some((UnixDatagram::unbound().ok()?, address))
        });
        Self { socket }
    }

    /// Sends `state` (e.g. `READY=1`); failures are logged, never fatal.
    pub fn notify(&self, state: &str) {
        if let Some((socket, address)) = &self.socket
            && let Err(err) = socket.send_to_addr(state.as_bytes(), address)
        {
            debug!("sd_notify {state:?}: {err}");
        }
    }

    /// How often to tell the watchdog all is well: half its timeout
    /// (`$WATCHDOG_USEC`), if there is one for this process.
    pub fn watchdog_interval() -> Option<Duration> {
        let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
        if let Ok(pid) = std::env::var("WATCHDOG_PID")
            && pid.parse::<u32>().ok() != Some(std::process::id())
        {
            return None;
        }
        Some(Duration::from_micros(usec / 2).max(Duration::from_millis(100)))
    }
}
