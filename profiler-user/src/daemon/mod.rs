//! `sparkprof daemon`: the recording pipeline run for as long as the host
//! runs, in fixed windows, in bounded disk and memory.
//!
//! - [`windows`]: every `--window` seconds the window closes and is written
//!   as `DIR/windows/<UTC start>/` (the layout and `index.json` of a
//!   `record` output), under a partial name renamed into place when whole.
//!   The drain that closes a window is its last: every sample is counted
//!   in exactly one window.
//! - [`rollup`]: each window's Spark files are added to
//!   `DIR/apps/<app_id>/`, marked complete once the application's processes
//!   on this host have exited.
//! - [`retention`]: the oldest windows, then the oldest complete roll-ups,
//!   go to stay under `--max-disk` and `--retain`; with the disk nearly
//!   full, windows are not written (and counted as such) until it is not.
//! - [`state`]: what it changed on the host, so that the next daemon
//!   undoes it after a SIGKILL; SIGTERM and SIGINT write the open window.
//! - [`status`]: `DIR/status.json` per window; [`notify`]: systemd's
//!   readiness and watchdog.
//!
//! Memory: the write stage holds one window at a time; everything kept per
//! process goes when the process exits (see the README's bounds).

pub mod notify;
pub mod retention;
pub mod rollup;
pub mod state;
pub mod status;
pub mod windows;

use std::{
    fs,
    os::unix::fs::OpenOptionsExt as _,
    path::{Path, PathBuf},
    time::{Duration, SystemTime},
};

use thiserror::Error;
use tracing::{error, info, warn};

use crate::{
    record::{
        ProcessEvents, RecordError, RecordOptions, Session, check_options, detach_in_background,
        drain_ticks, join_detach, until, write_options,
    },
    write::Writer,
};
use notify::Notifier;
use rollup::Applications;
use state::{HostChanges, RaisedValue, StateError, StateFile};
use status::Status;
use windows::Window;

/// Below this much free space on its file system (`--min-free`), the
/// daemon writes no window (it keeps sampling, and says so once).
pub const DEFAULT_MIN_FREE: u64 = 256 << 20;

/// Options of `sparkprof daemon`.
#[derive(Debug, Clone)]
pub struct DaemonOptions {
    /// The recording's options; `output` is the daemon's directory, and
    /// `duration` (if any) ends the daemon.
    pub record: RecordOptions,
    pub window: Duration,
    pub max_disk_bytes: u64,
    pub retain: Duration,
    /// Free space to leave on the directory's file system.
    pub min_free_bytes: u64,
    /// Where the state file that lets a restart undo a crash is kept.
    pub state_dir: PathBuf,
}

#[derive(Debug, Error)]
pub enum DaemonError {
    #[error("{}: {why}", path.display())]
    BadDirectory { path: PathBuf, why: String },
    #[error("{}: another sparkprof daemon writes here", .0.display())]
    Locked(PathBuf),
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Record(#[from] RecordError),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What a daemon did, when it stops.
#[derive(Debug, Clone)]
pub struct DaemonSummary {
    pub windows_written: u64,
    pub windows_skipped: u64,
    pub samples: u64,
}

/// The daemon's directory, locked for this daemon.
struct DaemonDir {
    path: PathBuf,
    /// Held open: the lock goes with it.
    _lock: fs::File,
}

impl DaemonDir {
    /// Takes `path` (created if missing): a real directory (not a symlink,
    /// not a file) this daemon can write, that no other daemon writes to.
    /// Windows a killed daemon left half-written are removed.
    fn claim(path: &Path) -> Result<Self, DaemonError> {
        let bad = |why: &str| DaemonError::BadDirectory {
            path: path.to_path_buf(),
            why: why.to_owned(),
        };
        match fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(bad("is a symbolic link; give the real directory"));
            }
            Ok(meta) if !meta.is_dir() => return Err(bad("exists and is not a directory")),
            Ok(_) => {}
            Err(_) => {
                fs::create_dir_all(path).map_err(|err| bad(&format!("cannot be created: {err}")))?
            }
        }
        let lock_path = path.join(".sparkprof-daemon.lock");
        let lock = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&lock_path)
            .map_err(|err| bad(&format!("is not writable: {err}")))?;
        use std::os::fd::AsRawFd as _;
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(DaemonError::Locked(path.to_path_buf()));
        }
        let removed = windows::remove_partial(path);
        if removed > 0 {
            info!("removed {removed} half-written windows a previous daemon left");
        }
        Ok(Self {
            path: path.to_path_buf(),
            _lock: lock,
        })
    }
}

/// The daemon's running state between windows.
struct Daemon {
    dir: DaemonDir,
    options: DaemonOptions,
    window: Window,
    applications: Applications,
    status: Status,
    notifier: Notifier,
    /// Kernel samples when the open window began.
    window_samples_before: u64,
    /// Windows are not being written (said once, see `disk_trouble`).
    disk_trouble: bool,
    status_unwritable: bool,
}

impl Daemon {
    /// Closes the open window: writes it (unless the disk is nearly full),
    /// adds it to its applications' roll-ups, applies retention, and opens
    /// the next one (unless `last`).
    fn close_window(&mut self, session: &mut Session, last: bool) {
        session.pipeline.writer.settle();
        let header = session.header();
        let next = if last {
            None
        } else {
            match Window::open(&self.dir.path, SystemTime::now()) {
                Ok(window) => Some(window),
                Err(err) => {
                    error!("cannot open the next window: {err}");
                    None
                }
            }
        };
        let next_dir = next
            .as_ref()
            .map_or_else(|| self.window.partial.clone(), |w| w.partial.clone());
        let mut writer = std::mem::replace(
            &mut session.pipeline.writer,
            Writer::new(next_dir, write_options(&self.options.record)),
        );
        // The window's index lists the JVMs that exited in it: now they go.
        session.pipeline.runtimes.jvm.forget_exited_walks();
        let samples = header.stats.samples;
        let in_window = samples.saturating_sub(self.window_samples_before);
        self.window_samples_before = samples;
        let free = retention::free_bytes(&self.dir.path).unwrap_or(u64::MAX);
        let name = if free < self.options.min_free_bytes {
            self.disk_trouble(&format!(
                "{} MiB free on its disk, less than --min-free {} MiB",
                free >> 20,
                self.options.min_free_bytes >> 20
            ));
            self.skip_window(in_window);
            None
        } else {
            self.write_window(&mut writer, &header, in_window)
        };
        for app in self.applications.take_finished() {
            rollup::complete(&self.dir.path, &app);
            self.status.applications_complete += 1;
        }
        if last {
            // No later window brings the running applications' roll-ups'
            // drawings up to their folded text.
            for app in self.applications.open() {
                if let Err(err) = rollup::draw_lagging_of(&self.dir.path, app) {
                    warn!(
                        "application {app}: its roll-up's flame graphs were not all redrawn: {err}"
                    );
                }
            }
        }
        let removed = retention::enforce(
            &self.dir.path,
            self.options.max_disk_bytes,
            self.options.retain,
            name.as_deref(),
        );
        self.status.windows_removed += removed.windows as u64;
        self.status.rollups_removed += removed.rollups as u64;
        self.status.samples = samples;
        self.status.samples_dropped = header.stats.dropped_count_map_full;
        self.status.disk_used_bytes = removed.used_bytes;
        // The closed window's aggregates are gone: their pages too.
        drop(writer);
        crate::sys::held::release_free_heap();
        self.status
            .measure_self(session.pipeline.held(), &session.pipeline.cpu);
        match self.status.write(&self.dir.path) {
            Ok(()) => self.status_unwritable = false,
            Err(err) if !self.status_unwritable => {
                warn!("cannot write status.json (said once until it is written again): {err}");
                self.status_unwritable = true;
            }
            Err(_) => {}
        }
        self.notifier.notify(&format!(
            "STATUS={} windows written, last {}",
            self.status.windows_written,
            self.status.last_window.as_deref().unwrap_or("none")
        ));
        if let Some(next) = next {
            self.window = next;
        }
    }

    /// Writes and publishes the window; returns its name.
    fn write_window(
        &mut self,
        writer: &mut Writer,
        header: &crate::write::index::Header,
        in_window: u64,
    ) -> Option<String> {
        let published = writer.flush(header).and_then(|_| self.window.publish());
        match published {
            Ok(path) => {
                let name = path.file_name()?.to_string_lossy().into_owned();
                if let Err(err) = rollup::add_window(&self.dir.path, &name, &path) {
                    warn!("window {name}: its applications' roll-ups were not updated: {err}");
                }
                self.status.windows_written += 1;
                self.status.last_window = Some(name.clone());
                if std::mem::take(&mut self.disk_trouble) {
                    info!("window {name} written: windows are written again");
                }
                Some(name)
            }
            Err(err) => {
                self.disk_trouble(&format!(
                    "window {} not written: {err}",
                    windows::window_name(self.window.start)
                ));
                self.skip_window(in_window);
                None
            }
        }
    }

    /// Says once, until a window is written again, why windows are not
    /// written (a full disk would otherwise fill the journal too).
    fn disk_trouble(&mut self, why: &str) {
        if !self.disk_trouble {
            error!(
                "{}: {why}; windows are not written (their samples are counted in \
                 status.json) until there is room",
                self.dir.path.display()
            );
            self.disk_trouble = true;
        }
    }

    /// Drops the open window unwritten; its samples are counted as such.
    fn skip_window(&mut self, in_window: u64) {
        self.window.discard();
        self.status.windows_skipped += 1;
        self.status.samples_not_written += in_window;
    }
}

/// What the daemon changed on the host now.
fn host_changes(session: &Session) -> HostChanges {
    HostChanges {
        pid: std::process::id(),
        sysctl: session.raised.as_ref().map(|raised| RaisedValue {
            name: raised.name().to_owned(),
            original: raised.original().to_owned(),
            raised: raised.value().to_owned(),
        }),
        perf_maps: session.pipeline.runtimes.jvm.created_perf_maps(),
    }
}

/// Runs the daemon until SIGTERM, SIGINT or SIGHUP (or `duration`).
pub async fn run(options: DaemonOptions) -> Result<DaemonSummary, DaemonError> {
    // Before anything on disk or on the host changes.
    check_options(&options.record)?;
    let dir = DaemonDir::claim(&options.record.output)?;
    let mut state = StateFile::recover_and_claim(&options.state_dir)?;
    let window = Window::open(&dir.path, SystemTime::now()).map_err(|source| DaemonError::Io {
        path: dir.path.clone(),
        source,
    })?;
    let mut session = Session::start(&options.record, &window.partial)?;
    session.pipeline.events = Some(ProcessEvents::default());
    if let Err(err) = state.update(host_changes(&session)) {
        warn!("cannot update the daemon's state file: {err}");
    }
    let mut daemon = Daemon {
        status: Status::new(
            SystemTime::now(),
            options.window.as_secs(),
            options.max_disk_bytes,
        ),
        dir,
        window,
        applications: Applications::default(),
        notifier: Notifier::from_env(),
        window_samples_before: 0,
        disk_trouble: false,
        status_unwritable: false,
        options,
    };
    let options = daemon.options.clone();
    info!(
        window_secs = options.window.as_secs(),
        max_disk_mib = options.max_disk_bytes >> 20,
        retain_hours = options.retain.as_secs() / 3600,
        "daemon writing windows into {}",
        daemon.dir.path.display()
    );
    daemon.notifier.notify("READY=1");

    let deadline = options
        .record
        .duration
        .map(|d| tokio::time::Instant::now() + d);
    let mut drain_tick = drain_ticks(options.record.drain_interval).await;
    let watchdog_every = Notifier::watchdog_interval().unwrap_or(Duration::from_secs(3600));
    let mut watchdog_tick = tokio::time::interval(watchdog_every);
    let mut window_end = tokio::time::Instant::now() + options.window;
    loop {
        tokio::select! {
            _ = drain_tick.tick() => {
                session.pipeline.step();
                let closes = tokio::time::Instant::now() >= window_end;
                if closes {
                    // The window's last drain brings everything counted in
                    // it: off-CPU counts held for later drains too.
                    session.pipeline.step_if_held();
                }
                if let Some(events) = session.pipeline.events.as_mut() {
                    let ProcessEvents { started, exited } = std::mem::take(events);
                    for process in &started {
                        daemon.applications.started(process);
                    }
                    for process in &exited {
                        daemon.applications.exited(process);
                    }
                }
                if let Err(err) = state.update(host_changes(&session)) {
                    warn!("cannot update the daemon's state file: {err}");
                }
                if closes {
                    window_end += options.window;
                    daemon.close_window(&mut session, false);
                }
            }
            _ = watchdog_tick.tick() => daemon.notifier.notify("WATCHDOG=1"),
            name = session.signals.recv() => {
                info!("{name}: closing the open window and stopping");
                break;
            }
            _ = until(deadline) => break,
        }
    }
    daemon.notifier.notify("STOPPING=1");
    session.pipeline.finish();
    daemon.close_window(&mut session, true);
    let Session {
        pipeline, raised, ..
    } = session;
    join_detach(detach_in_background(pipeline.collector));
    // The perf maps the runtimes caused are removed as the pipeline ends
    // (`Runtime::stopped`), and the sysctl now: nothing is left to undo.
    drop(raised);
    state.remove();
    Ok(DaemonSummary {
        windows_written: daemon.status.windows_written,
        windows_skipped: daemon.status.windows_skipped,
        samples: daemon.status.samples,
    })
}
