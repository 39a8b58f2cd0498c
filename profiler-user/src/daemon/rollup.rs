//! Per-application roll-ups: `DIR/apps/<app_id>/` holds, for each Spark
//! application seen on this host, its files of every window summed (the
//! layout of a window's `spark/<app_id>/`), updated as windows close, with
//! an `index.json` that says which windows it sums and whether it is
//! complete: marked so once the application's processes on this host
//! have all exited.
//!
//! Nothing is kept in memory but which applications have processes alive:
//! a window's files are added to the roll-up's on disk (each rewritten
//! atomically, its flame graph with it), so a roll-up costs no memory
//! however long its application runs.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    fs, io,
    path::{Path, PathBuf},
    sync::Arc,
};

use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use crate::{
    enrich::ProcessInfo,
    write::{
        atomic, folded,
        labels::{FileLabels, ReadEntry, folded_lines},
        output_dir::INDEX,
        pprof,
    },
};

/// Where the roll-ups are, under the daemon's directory.
pub const APPS: &str = "apps";

/// A roll-up's `index.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RollupIndex {
    pub version: u32,
    pub tool: String,
    pub app_id: String,
    /// The application's processes on this host have all exited: no
    /// window will add to it again.
    pub complete: bool,
    /// The windows summed, by name, oldest first.
    pub windows: Vec<String>,
    pub start: Option<String>,
    pub end: Option<String>,
    /// Each summed file, its path relative to the roll-up's directory (as
    /// under `spark/<app_id>/`), its `samples`, `start` and `end` over
    /// every window.
    pub files: Vec<ReadEntry>,
}

/// A window's index, as much of it as a roll-up needs.
#[derive(Debug, Deserialize)]
struct WindowIndex {
    #[serde(default)]
    host: String,
    #[serde(default)]
    frequency_hz: u64,
    files: Vec<ReadEntry>,
}

/// Which applications have processes alive on this host.
#[derive(Debug, Default)]
pub struct Applications {
    alive: HashMap<String, HashSet<(u32, u64)>>,
    /// Seen with processes, not yet marked complete.
    open: HashSet<String>,
}

impl Applications {
    pub fn started(&mut self, process: &Arc<ProcessInfo>) {
        if let Some(app) = &process.spark.app_id {
            self.alive
                .entry(app.clone())
                .or_default()
                .insert((process.pid, process.start_ticks));
            self.open.insert(app.clone());
        }
    }

    pub fn exited(&mut self, process: &Arc<ProcessInfo>) {
        if let Some(app) = &process.spark.app_id
            && let Some(alive) = self.alive.get_mut(app)
        {
            alive.remove(&(process.pid, process.start_ticks));
            if alive.is_empty() {
                self.alive.remove(app);
            }
        }
    }

    /// Applications seen whose processes have all exited, not yet marked
    /// complete (each returned once).
    pub fn take_finished(&mut self) -> Vec<String> {
        let finished: Vec<String> = self
            .open
            .iter()
            .filter(|app| !self.alive.contains_key(*app))
            .cloned()
            .collect();
        for app in &finished {
            self.open.remove(app);
        }
        finished
    }
}

/// Adds the Spark files of the published window at `window` (named
/// `name`) to their applications' roll-ups under `dir/apps/`. Returns the
/// applications it added to.
pub fn add_window(dir: &Path, name: &str, window: &Path) -> io::Result<Vec<String>> {
    let index: WindowIndex = serde_json::from_slice(&fs::read(window.join(INDEX))?)
        .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))?;
    let mut by_app: BTreeMap<String, Vec<ReadEntry>> = BTreeMap::new();
    for entry in index.files {
        if let Some(app) = entry.app_id.clone()
            && entry.path.starts_with(&format!("spark/{app}/"))
        {
            by_app.entry(app).or_default().push(entry);
        }
    }
    let period = 1_000_000_000 / index.frequency_hz.max(1);
    let mut added = Vec::new();
    for (app, entries) in by_app {
        let root = dir.join(APPS).join(safe_name(&app));
        let mut rollup = read_index(&root).unwrap_or_else(|| RollupIndex {
            version: 1,
            tool: format!("sparkprof {}", env!("CARGO_PKG_VERSION")),
            app_id: app.clone(),
            ..RollupIndex::default()
        });
        if rollup.windows.iter().any(|w| w == name) {
            continue; // Already summed (a restart after a crash mid-way).
        }
        for entry in &entries {
            let rel = &entry.path[format!("spark/{app}/").len()..];
            let text = fs::read_to_string(window.join(&entry.path))?;
            let summed = sum_folded(
                &fs::read_to_string(root.join(rel)).unwrap_or_default(),
                &text,
            );
            atomic::write_atomic(&root, Path::new(rel), summed.text.as_bytes())?;
            let svg_rel = PathBuf::from(rel).with_extension("svg");
            let title = format!("{app}: {}", rel.trim_end_matches(".folded"));
            let svg = folded::flame_graph(&summed.text, &title, &entry.unit)?;
            atomic::write_atomic(&root, &svg_rel, &svg)?;
            let mut file = match rollup.files.iter().position(|f| f.path == rel) {
                Some(at) => rollup.files.swap_remove(at),
                None => ReadEntry {
                    path: rel.to_owned(),
                    svg: svg_rel.display().to_string(),
                    pprof: pprof::twin_path(Path::new(rel)).display().to_string(),
                    ..entry.clone()
                },
            };
            file.samples = summed.total;
            file.start = earliest(&file.start, &entry.start);
            file.end = latest(&file.end, &entry.end);
            // Its pprof twin, over the roll-up's whole time.
            let labels = FileLabels::of_read(&index.host, period, &file);
            let twin = pprof::encode(&[(&labels, folded_lines(&summed.text).collect())])?;
            atomic::write_atomic(&root, Path::new(&file.pprof), &twin)?;
            rollup.files.push(file);
            rollup.start = Some(earliest(
                rollup.start.as_deref().unwrap_or(""),
                &entry.start,
            ));
            rollup.end = Some(latest(rollup.end.as_deref().unwrap_or(""), &entry.end));
        }
        rollup.files.sort_by(|a, b| a.path.cmp(&b.path));
        rollup.windows.push(name.to_owned());
        write_index(&root, &rollup)?;
        added.push(app);
    }
    Ok(added)
}

/// Marks an application's roll-up complete (if it has one).
pub fn complete(dir: &Path, app: &str) {
    let root = dir.join(APPS).join(safe_name(app));
    let Some(mut rollup) = read_index(&root) else {
        return;
    };
    if rollup.complete {
        return;
    }
    rollup.complete = true;
    match write_index(&root, &rollup) {
        Ok(()) => {
            info!("application {app}: its processes on this host have exited; roll-up complete")
        }
        Err(err) => warn!("application {app}: cannot mark its roll-up complete: {err}"),
    }
}

/// A roll-up's index, if it has one sparkprof wrote.
pub fn read_index(root: &Path) -> Option<RollupIndex> {
    let index: RollupIndex = serde_json::from_slice(&fs::read(root.join(INDEX)).ok()?).ok()?;
    index.tool.starts_with("sparkprof").then_some(index)
}

fn write_index(root: &Path, index: &RollupIndex) -> io::Result<()> {
    let mut json = serde_json::to_vec_pretty(index).map_err(io::Error::other)?;
    json.push(b'\n');
    atomic::write_atomic(root, Path::new(INDEX), &json)
}

/// An application ID as a directory name (they are `[A-Za-z0-9_-]` in
/// practice; anything else becomes `_`, and never `..`).
fn safe_name(app: &str) -> String {
    app.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect::<String>()
        .replace("..", "__")
}

/// The earlier of two RFC 3339 UTC times (which sort as text); an empty
/// one is unknown.
fn earliest(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (false, false) => a.min(b).to_owned(),
        (true, _) => b.to_owned(),
        (_, true) => a.to_owned(),
    }
}

/// The later of two RFC 3339 UTC times; an empty one is unknown.
fn latest(a: &str, b: &str) -> String {
    a.max(b).to_owned()
}

/// Two folded texts summed line by line.
struct Summed {
    text: String,
    total: u64,
}

fn sum_folded(a: &str, b: &str) -> Summed {
    let mut counts: BTreeMap<&str, u64> = BTreeMap::new();
    for line in a.lines().chain(b.lines()) {
        if let Some((stack, count)) = line.rsplit_once(' ')
            && let Ok(count) = count.parse::<u64>()
        {
            *counts.entry(stack).or_default() += count;
        }
    }
    let mut text = String::new();
    let mut total = 0;
    for (stack, count) in counts {
        text.push_str(stack);
        text.push(' ');
        text.push_str(&count.to_string());
        text.push('\n');
        total += count;
    }
    Summed { text, total }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folded_texts_add_up() {
        let summed = sum_folded("a;b 2\na;c 1\n", "a;b 3\nd 4\n");
        assert_eq!(summed.text, "a;b 5\na;c 1\nd 4\n");
        assert_eq!(summed.total, 10);
    }

    #[test]
    fn application_ids_stay_inside_apps() {
        assert_eq!(
            safe_name("app-20261124100501-0000"),
            "app-20261124100501-0000"
        );
        assert_eq!(safe_name("../etc"), "__/etc".replace('/', "_"));
        assert!(!safe_name("a/../b").contains('/'));
    }
}
