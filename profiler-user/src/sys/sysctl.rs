//! Reading and temporarily raising sysctls under /proc/sys.

use std::{fs, io, path::PathBuf};

use tracing::{info, warn};

fn path(name: &str) -> PathBuf {
    PathBuf::from("/proc/sys").join(name)
}

/// Reads `/proc/sys/<name>` (e.g. `kernel/perf_event_max_stack`), trimmed.
pub fn read(name: &str) -> io::Result<String> {
    Ok(fs::read_to_string(path(name))?.trim().to_owned())
}

/// Reads a numeric sysctl.
pub fn read_u64(name: &str) -> io::Result<u64> {
    read(name)?
        .parse()
        .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, format!("{name}: {err}")))
}

/// Writes `/proc/sys/<name>`.
pub fn write(name: &str, value: &str) -> io::Result<()> {
    fs::write(path(name), value)
}

/// Writes a sysctl, retrying for up to two seconds while the kernel answers
/// EBUSY. `kernel.perf_event_max_stack` is busy while any stack map or
/// callchain perf event exists, and the kernel frees BPF maps asynchronously,
/// so right after our maps are closed the write can still be refused.
pub fn write_retrying_busy(name: &str, value: &str) -> io::Result<()> {
    let mut attempts = 0;
    loop {
        match write(name, value) {
            Err(err) if err.raw_os_error() == Some(libc::EBUSY) && attempts < 40 => {
                attempts += 1;
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            result => return result,
        }
    }
}

/// A sysctl raised for the lifetime of this value; the original is written
/// back on drop (normal exit, error, signal-driven shutdown or panic unwind).
#[derive(Debug)]
pub struct RaisedSysctl {
    name: &'static str,
    original: String,
    value: String,
}

impl RaisedSysctl {
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Its value before it was raised.
    pub fn original(&self) -> &str {
        &self.original
    }

    /// The value it was raised to.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// Raises `name` to `value` if it is currently lower. Returns `None` when
    /// it already was at least `value` (nothing to restore).
    pub fn raise_to(name: &'static str, value: u64) -> io::Result<Option<Self>> {
        let original = read(name)?;
        let current: u64 = original.parse().unwrap_or(0);
        if current >= value {
            return Ok(None);
        }
        let value = value.to_string();
        write_retrying_busy(name, &value)?;
        info!("{name}: raised from {current} to {value} for this recording");
        Ok(Some(Self {
            name,
            original,
            value,
        }))
    }
}

impl Drop for RaisedSysctl {
    fn drop(&mut self) {
        match write_retrying_busy(self.name, &self.original) {
            Ok(()) => info!("{}: restored to {}", self.name, self.original),
            Err(err) => warn!("{}: could not restore {}: {err}", self.name, self.original),
        }
    }
}
