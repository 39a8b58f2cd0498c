//! A daemon's windows: `DIR/windows/<UTC start>/`, each the layout and
//! `index.json` of a `record` output, written under a partial name and
//! renamed into place when whole, so that a reader never sees a window
//! without its index.

use std::{
    fs, io,
    path::{Path, PathBuf},
    time::SystemTime,
};

/// Where the windows are, under the daemon's directory.
pub const WINDOWS: &str = "windows";
/// The prefix of a window still being written (or left half-written by a
/// daemon that was killed): never a window, removed at start.
pub const PARTIAL_PREFIX: &str = ".partial-";

/// A window's name: its UTC start, sortable (`20261124T100501Z`: RFC 3339
/// without its separators).
pub fn window_name(start: SystemTime) -> String {
    humantime::format_rfc3339_seconds(start)
        .to_string()
        .replace(['-', ':'], "")
}

/// One window being written.
#[derive(Debug)]
pub struct Window {
    pub start: SystemTime,
    /// Where it is written until it is whole.
    pub partial: PathBuf,
    windows: PathBuf,
}

impl Window {
    /// A window that starts now, under `dir/windows/`.
    pub fn open(dir: &Path, start: SystemTime) -> io::Result<Self> {
        let windows = dir.join(WINDOWS);
        fs::create_dir_all(&windows)?;
        let partial = windows.join(format!("{PARTIAL_PREFIX}{}", window_name(start)));
        Ok(Self {
            start,
            partial,
            windows,
        })
    }

    /// Renames the whole window into place; returns where. A second window
    /// that starts in the same second (a quick restart) gets a suffix.
    pub fn publish(&self) -> io::Result<PathBuf> {
        let name = window_name(self.start);
        let target = (1..)
            .map(|n| {
                self.windows.join(if n == 1 {
                    name.clone()
                } else {
                    format!("{name}-{n}")
                })
            })
            .find(|path| !path.exists())
            .expect("an unused name exists");
        fs::rename(&self.partial, &target)?;
        Ok(target)
    }

    /// Drops a window that will not be written (its directory, if any).
    pub fn discard(&self) {
        let _ = fs::remove_dir_all(&self.partial);
    }
}

/// Removes the windows a daemon was writing when it died. Returns how
/// many.
pub fn remove_partial(dir: &Path) -> usize {
    let Ok(entries) = fs::read_dir(dir.join(WINDOWS)) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter(|entry| {
            entry
                .file_name()
                .to_string_lossy()
                .starts_with(PARTIAL_PREFIX)
                && entry.file_type().is_ok_and(|t| t.is_dir())
        })
        .filter(|entry| fs::remove_dir_all(entry.path()).is_ok())
        .count()
}

/// The published windows, oldest first: (name, path).
pub fn published(dir: &Path) -> Vec<(String, PathBuf)> {
    let Ok(entries) = fs::read_dir(dir.join(WINDOWS)) else {
        return Vec::new();
    };
    let mut windows: Vec<(String, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_ok_and(|t| t.is_dir()))
        .map(|entry| {
            (
                entry.file_name().to_string_lossy().into_owned(),
                entry.path(),
            )
        })
        .filter(|(name, _)| is_window_name(name))
        .collect();
    windows.sort();
    windows
}

/// `20261124T100501Z` or `20261124T100501Z-2`: a name this daemon gives.
pub fn is_window_name(name: &str) -> bool {
    let stamp = name.split('-').next().unwrap_or("");
    stamp.len() == 16
        && stamp.as_bytes()[8] == b'T'
        && stamp.ends_with('Z')
        && stamp[..8].bytes().all(|b| b.is_ascii_digit())
        && stamp[9..15].bytes().all(|b| b.is_ascii_digit())
}

/// When a window name says it started.
pub fn started_at(name: &str) -> Option<SystemTime> {
    if !is_window_name(name) {
        return None;
    }
    let rfc3339 = format!(
        "{}-{}-{}T{}:{}:{}Z",
        &name[0..4],
        &name[4..6],
        &name[6..8],
        &name[9..11],
        &name[11..13],
        &name[13..15]
    );
    humantime::parse_rfc3339(&rfc3339).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn names_are_utc_sortable_and_read_back() {
        // 2026-11-24 10:05:01 UTC.
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_514_701);
        let name = window_name(start);
        assert_eq!(name, "20261124T100501Z");
        assert!(is_window_name(&name));
        assert!(is_window_name("20261124T100501Z-2"));
        assert!(!is_window_name(".partial-20261124T100501Z"));
        assert!(!is_window_name("apps"));
        assert_eq!(started_at(&name), Some(start));
        let leap = SystemTime::UNIX_EPOCH + Duration::from_secs(1_709_164_800); // 2024-02-29
        assert_eq!(window_name(leap), "20240229T000000Z");
        assert_eq!(started_at("20240229T000000Z"), Some(leap));
        let later = window_name(start + Duration::from_secs(60));
        assert!(later > name);
    }

    #[test]
    fn a_window_is_seen_whole_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let start = SystemTime::now();
        let window = Window::open(dir.path(), start).unwrap();
        fs::create_dir_all(&window.partial).unwrap();
        fs::write(window.partial.join("index.json"), "{}").unwrap();
        assert!(
            published(dir.path()).is_empty(),
            "a partial window is no window"
        );
        let path = window.publish().unwrap();
        assert!(path.join("index.json").exists());
        assert_eq!(published(dir.path()).len(), 1);
        // One left half-written by a killed daemon goes at start.
        let killed = Window::open(dir.path(), start).unwrap();
        fs::create_dir_all(&killed.partial).unwrap();
        assert_eq!(remove_partial(dir.path()), 1);
        assert!(!killed.partial.exists());
        assert_eq!(published(dir.path()).len(), 1);
    }
}
