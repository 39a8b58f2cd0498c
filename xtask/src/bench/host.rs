//! The host: what it is, when it is quiet enough to measure, and how the
//! bench waits (progress, pauses that Ctrl-C ends).

use std::{
    fs,
    process::Command,
    sync::atomic::{AtomicBool, Ordering},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use super::*;

/// The host the figures belong to.
pub(crate) struct Host {
    pub(crate) date: String,
    pub(crate) kernel: String,
    pub(crate) cpus: usize,
    pub(crate) cpu_model: String,
}

impl Host {
    pub(crate) fn detect() -> Result<Self> {
        let date = Command::new("date")
            .args(["-u", "+%Y-%m-%d %H:%M UTC"])
            .output()
            .context("running date")?;
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        Ok(Self {
            date: String::from_utf8_lossy(&date.stdout).trim().to_owned(),
            kernel: fs::read_to_string("/proc/sys/kernel/osrelease")?
                .trim()
                .to_owned(),
            cpus: thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model: cpuinfo
                .lines()
                .find_map(|line| line.strip_prefix("model name"))
                .and_then(|rest| rest.split_once(':'))
                .map(|(_, model)| model.trim().to_owned())
                .unwrap_or_else(|| "unknown CPU".to_owned()),
        })
    }
}

/// Like [`wait_for_quiet_host`], but gives up after `patience` without
/// failing: `Err(busy)` says how busy the host still was (% of one core).
pub(crate) fn wait_for_quiet_host_within(
    patience: Duration,
) -> Result<std::result::Result<(), f64>> {
    let deadline = Instant::now() + patience;
    loop {
        let busy = busy_cpu_percent(QUIET_WINDOW)?;
        if busy < QUIET_BUSY_PERCENT {
            return Ok(Ok(()));
        }
        if Instant::now() > deadline {
            return Ok(Err(busy));
        }
    }
}

/// Waits until nothing else uses the CPUs: the figures compare profilers
/// on an otherwise idle host, and a busy one (a build, a forgotten
/// workload) silently inflates every time in them.
pub(crate) fn wait_for_quiet_host() -> Result<()> {
    let deadline = Instant::now() + QUIET_PATIENCE;
    loop {
        let busy = busy_cpu_percent(QUIET_WINDOW)?;
        if busy < QUIET_BUSY_PERCENT {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "the host stays busy ({busy:.0} % of one core used by other processes, \
                 more than {QUIET_BUSY_PERCENT} %): the figures would measure that, not the \
                 profilers; stop what runs (see `top`) and retry"
            );
        }
        progress(&format!(
            "the host is busy ({busy:.0} % of one core used by other processes): waiting"
        ));
    }
}

/// Non-idle CPU time of the whole host over `window`, in % of one core,
/// from the `cpu` line of /proc/stat (user, nice, system, irq, softirq and
/// steal: time the hypervisor gave to others is lost to us too).
pub(crate) fn busy_cpu_percent(window: Duration) -> Result<f64> {
    let before = host_busy_time()?;
    pause(window)?;
    let after = host_busy_time()?;
    Ok(100.0 * after.saturating_sub(before).as_secs_f64() / window.as_secs_f64())
}

/// The host's non-idle CPU time since boot, from the `cpu` line of
/// /proc/stat (user, nice, system, irq, softirq and steal).
pub(crate) fn host_busy_time() -> Result<Duration> {
    let stat = fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .and_then(|line| line.strip_prefix("cpu "))
        .map(|rest| {
            rest.split_whitespace()
                .filter_map(|f| f.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let [user, nice, system, _idle, _iowait, irq, softirq, steal, ..] = fields[..] else {
        bail!("malformed /proc/stat");
    };
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Ok(Duration::from_secs_f64(
        (user + nice + system + irq + softirq + steal) as f64 / per_second,
    ))
}

pub(crate) fn progress(message: &str) {
    eprintln!("xtask: bench: {message}");
}

/// Sleeps, but returns early with an error on Ctrl-C.
pub(crate) fn pause(duration: Duration) -> Result<()> {
    let deadline = Instant::now() + duration;
    loop {
        interrupt::check()?;
        let now = Instant::now();
        if now >= deadline {
            return Ok(());
        }
        thread::sleep((deadline - now).min(Duration::from_millis(50)));
    }
}

/// Ctrl-C turns into an error, so that the guards above run (restoring
/// `kernel.bpf_stats_enabled`, stopping profilers and the workload) instead
/// of xtask dying on the spot. The profilers get the terminal's SIGINT too
/// and exit by themselves.
pub(crate) mod interrupt {
    use super::{AtomicBool, Ordering, Result, bail};

    static INTERRUPTED: AtomicBool = AtomicBool::new(false);

    extern "C" fn on_sigint(_: libc::c_int) {
        INTERRUPTED.store(true, Ordering::SeqCst);
    }

    pub fn install() {
        let handler: extern "C" fn(libc::c_int) = on_sigint;
        // SAFETY: the handler only stores to an atomic.
        unsafe { libc::signal(libc::SIGINT, handler as libc::sighandler_t) };
    }

    pub fn check() -> Result<()> {
        if INTERRUPTED.load(Ordering::SeqCst) {
            bail!("interrupted");
        }
        Ok(())
    }
}
