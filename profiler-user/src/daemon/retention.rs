//! The daemon's disk bound: after each window, the oldest windows go
//! until the directory is under `--max-disk` and no window is older than
//! `--retain`; then, if it is still over, the oldest completed roll-ups.
//! Only what the daemon wrote is ever deleted: windows by their names
//! (with an index sparkprof wrote), roll-ups by their index.

use std::{
    fs,
    os::unix::fs::MetadataExt,
    path::Path,
    time::{Duration, SystemTime},
};

use tracing::{info, warn};

use super::{rollup, windows};

/// What a retention pass removed, and the bytes `dir` holds after it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Removed {
    pub windows: usize,
    pub rollups: usize,
    pub used_bytes: u64,
}

/// Bytes under `path` (files' sizes; symlinks are not followed). A file
/// with more than one name (a roll-up's file that is its window's, see
/// [`rollup`]) counts its share under each, so that the directory's total
/// counts it once.
pub fn disk_usage(path: &Path) -> u64 {
    let Ok(meta) = fs::symlink_metadata(path) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len().div_ceil(meta.nlink().max(1));
    }
    fs::read_dir(path)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|entry| disk_usage(&entry.path()))
                .sum()
        })
        .unwrap_or(0)
}

/// Whether a window directory is one sparkprof wrote (its index says so).
fn ours(window: &Path) -> bool {
    fs::read(window.join(crate::write::output_dir::INDEX))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
        .and_then(|index| index["tool"].as_str().map(|t| t.starts_with("sparkprof")))
        .unwrap_or(false)
}

/// Removes the oldest windows, then the oldest completed roll-ups, until
/// `dir` holds at most `max_bytes` and no window is older than `retain`.
/// `keep` names a window never removed (the one just written).
pub fn enforce(dir: &Path, max_bytes: u64, retain: Duration, keep: Option<&str>) -> Removed {
    let mut removed = Removed::default();
    let mut used = disk_usage(dir);
    let now = SystemTime::now();
    for (name, path) in windows::published(dir) {
        if Some(name.as_str()) == keep || !ours(&path) {
            continue;
        }
        let too_old = windows::started_at(&name)
            .and_then(|start| now.duration_since(start).ok())
            .is_some_and(|age| age > retain);
        if !too_old && used <= max_bytes {
            // Oldest first: the rest are younger.
            break;
        }
        let size = disk_usage(&path);
        match fs::remove_dir_all(&path) {
            Ok(()) => {
                used = used.saturating_sub(size);
                removed.windows += 1;
            }
            Err(err) => warn!("cannot remove window {}: {err}", path.display()),
        }
    }
    if used > max_bytes {
        let mut complete: Vec<(String, std::path::PathBuf)> = fs::read_dir(dir.join(rollup::APPS))
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .filter_map(|entry| {
                        let index = rollup::read_index(&entry.path())?;
                        index
                            .complete
                            .then(|| (index.end.unwrap_or_default(), entry.path()))
                    })
                    .collect()
            })
            .unwrap_or_default();
        complete.sort();
        for (_, path) in complete {
            if used <= max_bytes {
                break;
            }
            let size = disk_usage(&path);
            if fs::remove_dir_all(&path).is_ok() {
                used = used.saturating_sub(size);
                removed.rollups += 1;
            }
        }
    }
    removed.used_bytes = used;
    if removed.windows + removed.rollups > 0 {
        info!(
            windows = removed.windows,
            rollups = removed.rollups,
            "retention: removed the oldest ({} MiB in use, at most {} MiB)",
            used >> 20,
            max_bytes >> 20
        );
    }
    removed
}

/// Bytes free for an unprivileged writer on the file system of `path`.
pub fn free_bytes(path: &Path) -> Option<u64> {
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c_path.as_ptr(), &mut stat) } != 0 {
        return None;
    }
    Some(stat.f_bavail as u64 * stat.f_frsize as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(dir: &Path, name: &str, bytes: usize) {
        let path = dir.join(windows::WINDOWS).join(name);
        fs::create_dir_all(&path).unwrap();
        fs::write(path.join("index.json"), r#"{"tool":"sparkprof 0.1.0"}"#).unwrap();
        fs::write(path.join("data.folded"), vec![b'x'; bytes]).unwrap();
    }

    #[test]
    fn oldest_windows_go_first_and_only_ours() {
        let dir = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let name = |ago: u64| windows::window_name(now - Duration::from_secs(ago));
        let (old, mid, new) = (name(3 * 3600), name(1800), name(60));
        window(dir.path(), &old, 4000);
        window(dir.path(), &mid, 4000);
        window(dir.path(), &new, 4000);
        // Something the daemon did not write, with a window's name.
        let foreign = dir.path().join(windows::WINDOWS).join(name(4 * 3600));
        fs::create_dir_all(&foreign).unwrap();
        fs::write(foreign.join("notes.txt"), "mine").unwrap();
        // By age: only the 3-hour-old window (2 h retention).
        let removed = enforce(dir.path(), u64::MAX, Duration::from_secs(7200), Some(&new));
        assert_eq!(removed.windows, 1);
        assert!(!dir.path().join("windows").join(&old).exists());
        assert!(foreign.exists(), "never deletes what it did not write");
        // By size: the oldest of ours, not the one just written.
        let removed = enforce(dir.path(), 5000, Duration::from_secs(7200), Some(&new));
        assert_eq!(removed.windows, 1);
        assert!(!dir.path().join("windows").join(&mid).exists());
        assert!(dir.path().join("windows").join(&new).exists());
        assert!(foreign.exists());
    }

    #[test]
    fn a_file_with_two_names_counts_once() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a"), vec![b'x'; 4000]).unwrap();
        fs::write(dir.path().join("b"), vec![b'x'; 1000]).unwrap();
        assert_eq!(disk_usage(dir.path()), 5000);
        fs::create_dir(dir.path().join("apps")).unwrap();
        fs::hard_link(dir.path().join("a"), dir.path().join("apps/a")).unwrap();
        assert_eq!(disk_usage(dir.path()), 5000);
        assert_eq!(disk_usage(&dir.path().join("apps")), 2000);
    }
}
