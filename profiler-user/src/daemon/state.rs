//! What the daemon changed on the host, kept in a small file (by default
//! `/run/sparkprof/state.json`) so that a daemon killed without a chance
//! to clean up (SIGKILL, an OOM kill, a crash) is cleaned up after by the
//! next one: a raised `kernel.perf_event_max_stack` is put back, and the
//! perf maps sparkprof caused JVMs to write are removed.

use std::{
    fs, io,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::{sys::sysctl, write::atomic};

/// The default directory of the state file (systemd's `RuntimeDirectory`).
pub const DEFAULT_STATE_DIR: &str = "/run/sparkprof";
const STATE: &str = "state.json";

/// A sysctl the daemon raised: its original value, and what it set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaisedValue {
    pub name: String,
    pub original: String,
    pub raised: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostChanges {
    /// The daemon that made them.
    pub pid: u32,
    pub sysctl: Option<RaisedValue>,
    /// Perf maps sparkprof caused JVMs to write (as sparkprof reaches them).
    pub perf_maps: Vec<PathBuf>,
}

/// The state file of this daemon.
pub struct StateFile {
    dir: PathBuf,
    written: HostChanges,
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("another sparkprof daemon (pid {0}) keeps its state in {1}")]
    Running(u32, PathBuf),
    #[error("cannot keep the daemon's state in {0}: {1}")]
    Io(PathBuf, io::Error),
}

impl StateFile {
    /// Undoes what a daemon that died left (if its state file is there),
    /// then starts this one's.
    pub fn recover_and_claim(dir: &Path) -> Result<Self, StateError> {
        let path = dir.join(STATE);
        if let Some(left) = fs::read(&path)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<HostChanges>(&bytes).ok())
        {
            if left.pid != std::process::id() && is_sparkprof(left.pid) {
                return Err(StateError::Running(left.pid, dir.to_path_buf()));
            }
            undo(&left);
        }
        let mut state = Self {
            dir: dir.to_path_buf(),
            written: HostChanges::default(),
        };
        state
            .update(HostChanges {
                pid: std::process::id(),
                ..HostChanges::default()
            })
            .map_err(|err| StateError::Io(dir.to_path_buf(), err))?;
        Ok(state)
    }

    /// Records the changes now in effect (written only when they change).
    pub fn update(&mut self, changes: HostChanges) -> io::Result<()> {
        if changes == self.written && self.dir.join(STATE).exists() {
            return Ok(());
        }
        let mut json = serde_json::to_vec_pretty(&changes).map_err(io::Error::other)?;
        json.push(b'\n');
        atomic::write_atomic(&self.dir, Path::new(STATE), &json)?;
        self.written = changes;
        Ok(())
    }

    /// Everything was undone on a clean stop: the file goes.
    pub fn remove(self) {
        let _ = fs::remove_file(self.dir.join(STATE));
    }
}

/// Whether `pid` is a running sparkprof.
fn is_sparkprof(pid: u32) -> bool {
    crate::sys::proc::stat(pid).is_ok_and(|stat| stat.comm == "sparkprof")
}

/// Puts back what a dead daemon changed.
fn undo(left: &HostChanges) {
    if let Some(raised) = &left.sysctl {
        // Only if no one changed it since.
        match sysctl::read(&raised.name) {
            Ok(now) if now == raised.raised => {
                match sysctl::write(&raised.name, &raised.original) {
                    Ok(()) => info!(
                        "{}: restored to {} (raised by sparkprof pid {}, which did not stop cleanly)",
                        raised.name, raised.original, left.pid
                    ),
                    Err(err) => warn!("{}: cannot restore {}: {err}", raised.name, raised.original),
                }
            }
            _ => {}
        }
    }
    for map in &left.perf_maps {
        // A regular file, never through a link, named as perf maps are.
        let is_map = map
            .file_name()
            .and_then(|name| name.to_str())
            .is_some_and(|name| name.starts_with("perf-") && name.ends_with(".map"));
        let regular = fs::symlink_metadata(map).is_ok_and(|meta| meta.file_type().is_file());
        if is_map && regular && fs::remove_file(map).is_ok() {
            info!(
                "removed {} (written for sparkprof pid {}, which did not stop cleanly)",
                map.display(),
                left.pid
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_daemons_perf_maps_are_removed_and_only_those() {
        let dir = tempfile::tempdir().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let map = tmp.path().join("perf-4242.map");
        fs::write(&map, "1000 10 Foo.bar\n").unwrap();
        let other = tmp.path().join("notes.txt");
        fs::write(&other, "keep").unwrap();
        let link = tmp.path().join("perf-4343.map");
        std::os::unix::fs::symlink(&other, &link).unwrap();
        // A daemon that is gone (no such pid).
        let left = HostChanges {
            pid: u32::MAX - 1,
            sysctl: None,
            perf_maps: vec![map.clone(), other.clone(), link.clone()],
        };
        fs::write(dir.path().join(STATE), serde_json::to_vec(&left).unwrap()).unwrap();
        let state = StateFile::recover_and_claim(dir.path()).unwrap();
        assert!(!map.exists());
        assert!(other.exists(), "not a perf map");
        assert!(
            fs::symlink_metadata(&link).is_ok(),
            "a link is never followed or removed"
        );
        let now: HostChanges =
            serde_json::from_slice(&fs::read(dir.path().join(STATE)).unwrap()).unwrap();
        assert_eq!(now.pid, std::process::id());
        state.remove();
        assert!(!dir.path().join(STATE).exists());
    }
}
