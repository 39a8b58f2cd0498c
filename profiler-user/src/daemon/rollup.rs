//! Per-application roll-ups: `DIR/apps/<app_id>/` holds, for each Spark
//! application seen on this host, its files of every window summed (the
//! layout of a window's `spark/<app_id>/`), updated as windows close, with
//! an `index.json` that says which windows it sums and whether it is
//! complete: marked so once the application's processes on this host
//! have all exited.
//!
//! Nothing is kept in memory but which applications have processes alive:
//! a window's files are added to the roll-up's on disk (each rewritten
//! atomically), so a roll-up costs no memory however long its application
//! runs.
//!
//! A roll-up's flame graphs and pprof twins are not redrawn at every
//! window: drawing is most of what a window costs, and a roll-up only grows,
//! so redrawing it every minute made the daemon's CPU grow with the age of
//! its longest application. A file is redrawn once its samples have grown
//! by more than [`REDRAW_GROWTH_PERCENT`] since it was last drawn (so a
//! long application's are drawn a logarithmic number of times), and every
//! file not drawn at its last samples is redrawn when the application
//! completes and when the daemon stops. Its folded text is exact at every
//! window; the index says when its drawings lag (`drawn`). A file's first
//! window's files are its own until a later window adds to it: other names
//! of them (hard links; copies where there are none), so that the window's
//! retention does not take them.

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
    /// Each file's `samples` when its flame graph and pprof twin were last
    /// drawn, by path: below its `samples` while they lag (see the module).
    #[serde(default)]
    pub drawn: BTreeMap<String, u64>,
    /// The host and sampling frequency of the windows summed, which a twin
    /// drawn after its window was added still needs.
    #[serde(default)]
    pub host: String,
    #[serde(default)]
    pub frequency_hz: u64,
}

/// How much a roll-up file's samples grow before its flame graph and pprof
/// twin are redrawn (see the module).
pub const REDRAW_GROWTH_PERCENT: u64 = 10;

/// Whether a file drawn at `drawn` samples (`None`: never) is redrawn at
/// `samples`.
fn redraw(drawn: Option<u64>, samples: u64) -> bool {
    drawn.is_none_or(|drawn| samples.saturating_sub(drawn) * 100 > drawn * REDRAW_GROWTH_PERCENT)
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

    /// Applications seen and not yet marked complete.
    pub fn open(&self) -> impl Iterator<Item = &String> {
        self.open.iter()
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
        rollup.host.clone_from(&index.host);
        rollup.frequency_hz = index.frequency_hz;
        for entry in &entries {
            let rel = &entry.path[format!("spark/{app}/").len()..];
            let text = fs::read_to_string(window.join(&entry.path))?;
            let before = fs::read_to_string(root.join(rel)).unwrap_or_default();
            let summed = sum_folded(&before, &text);
            // A file new to the roll-up is the window's, byte for byte
            // (both list their lines sorted): taken, with its drawings.
            let window_file = Path::new(&entry.path);
            let whole = before.is_empty() && summed.text == text;
            if !(whole && take(window, window_file, &root, Path::new(rel))) {
                atomic::write_atomic(&root, Path::new(rel), summed.text.as_bytes())?;
            }
            let mut file = match rollup.files.iter().position(|f| f.path == rel) {
                Some(at) => rollup.files.swap_remove(at),
                None => ReadEntry {
                    path: rel.to_owned(),
                    svg: PathBuf::from(rel)
                        .with_extension("svg")
                        .display()
                        .to_string(),
                    pprof: pprof::twin_path(Path::new(rel)).display().to_string(),
                    ..entry.clone()
                },
            };
            file.samples = summed.total;
            file.start = earliest(&file.start, &entry.start);
            file.end = latest(&file.end, &entry.end);
            let taken = whole
                && take(
                    window,
                    &window_file.with_extension("svg"),
                    &root,
                    Path::new(&file.svg),
                )
                && take(
                    window,
                    &pprof::twin_path(window_file),
                    &root,
                    Path::new(&file.pprof),
                );
            if taken || redraw(rollup.drawn.get(rel).copied(), file.samples) {
                if !taken {
                    draw(&root, &rollup, &file, &summed.text)?;
                }
                rollup.drawn.insert(file.path.clone(), file.samples);
            }
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
    if let Err(err) = draw_lagging(&root, &mut rollup) {
        warn!("application {app}: its roll-up's flame graphs were not all redrawn: {err}");
    }
    rollup.complete = true;
    match write_index(&root, &rollup) {
        Ok(()) => {
            info!("application {app}: its processes on this host have exited; roll-up complete")
        }
        Err(err) => warn!("application {app}: cannot mark its roll-up complete: {err}"),
    }
}

/// Redraws the flame graphs and pprof twins of an application's roll-up
/// that lag its folded text (the daemon stops while it runs).
pub fn draw_lagging_of(dir: &Path, app: &str) -> io::Result<()> {
    let root = dir.join(APPS).join(safe_name(app));
    let Some(mut rollup) = read_index(&root) else {
        return Ok(());
    };
    if draw_lagging(&root, &mut rollup)? {
        write_index(&root, &rollup)?;
    }
    Ok(())
}

/// Redraws every file of `rollup` not drawn at its samples; returns
/// whether it drew any (and so changed `rollup.drawn`).
fn draw_lagging(root: &Path, rollup: &mut RollupIndex) -> io::Result<bool> {
    let mut drew = false;
    for file in &rollup.files {
        if rollup.drawn.get(&file.path) == Some(&file.samples) {
            continue;
        }
        let text = fs::read_to_string(root.join(&file.path))?;
        draw(root, rollup, file, &text)?;
        rollup.drawn.insert(file.path.clone(), file.samples);
        drew = true;
    }
    Ok(drew)
}

/// Draws a roll-up file's flame graph and its pprof twin, over the
/// roll-up's whole time, from its folded `text`. The graph's title is the
/// one a window gives the file (see [`take`]).
fn draw(root: &Path, rollup: &RollupIndex, file: &ReadEntry, text: &str) -> io::Result<()> {
    let svg = folded::flame_graph(text, &file.title(), &file.unit)?;
    atomic::write_atomic(root, Path::new(&file.svg), &svg)?;
    let period = 1_000_000_000 / rollup.frequency_hz.max(1);
    let labels = FileLabels::of_read(&rollup.host, period, file);
    let twin = pprof::encode(&[(&labels, folded_lines(text).collect())])?;
    atomic::write_atomic(root, Path::new(&file.pprof), &twin)
}

/// Makes the published window's file at `from` (relative to `window`) the
/// roll-up's `to`: another name of it, or a copy where the file system has
/// no hard links. A file the roll-up holds just that window's samples of
/// is what the window wrote, folded text, flame graph ([`draw`] titles it
/// the same) and pprof twin alike. Drawing was most of what a window's end
/// cost the daemon on a Spark host, and writing the files again the next
/// largest part; an application that lives a window or two had each of its
/// files drawn and written twice. Returns whether it was taken.
fn take(window: &Path, from: &Path, root: &Path, to: &Path) -> bool {
    let from = window.join(from);
    atomic::link_atomic(root, to, &from)
        .or_else(|_| fs::read(&from).and_then(|bytes| atomic::write_atomic(root, to, &bytes)))
        .is_ok()
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

    /// Writes a published window `name` under `dir` whose one file, a
    /// stage file of `app-1`, holds `folded`; returns its path.
    fn window(dir: &Path, name: &str, folded: &str) -> PathBuf {
        let window = dir.join("windows").join(name);
        let rel = "spark/app-1/executor-1/stage-2.cpu.folded";
        fs::create_dir_all(window.join(rel).parent().unwrap()).unwrap();
        fs::write(window.join(rel), folded).unwrap();
        let samples: u64 = folded
            .lines()
            .map(|line| line.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
            .sum();
        let index = serde_json::json!({
            "host": "worker-7",
            "frequency_hz": 99,
            "files": [{
                "path": rel, "kind": "cpu", "unit": "samples", "samples": samples,
                "pid": 42, "process": "java", "role": "executor",
                "app_id": "app-1", "executor_id": "1", "stage_id": 2,
            }],
        });
        fs::write(window.join(INDEX), index.to_string()).unwrap();
        window
    }

    #[test]
    fn roll_up_drawings_follow_growth_and_catch_up_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join(APPS).join("app-1");
        let rel = "executor-1/stage-2.cpu.folded";
        let svg = || fs::read_to_string(root.join("executor-1/stage-2.cpu.svg")).unwrap();
        let drawn = || read_index(&root).unwrap().drawn.get(rel).copied();
        let add = |name: &str, folded: &str| {
            let window = window(dir.path(), name, folded);
            add_window(dir.path(), name, &window).unwrap();
        };
        add("w1", "java;a;b 10\n");
        assert_eq!(drawn(), Some(10));
        assert!(root.join("executor-1/stage-2.cpu.pb.gz").exists());
        let first = svg();
        // 10 % more: the folded text has it, the drawings wait.
        add("w2", "java;a;b 1\n");
        let index = read_index(&root).unwrap();
        assert_eq!(index.files[0].samples, 11);
        assert_eq!(drawn(), Some(10));
        assert_eq!(svg(), first);
        // More than 10 % over what was drawn: redrawn, new frame and all.
        add("w3", "java;a;c 5\n");
        assert_eq!(drawn(), Some(16));
        assert!(svg().contains(">c ("), "{}", svg());
        // A lag the daemon's stop catches up with.
        add("w4", "java;a;d 1\n");
        assert_eq!(drawn(), Some(16));
        draw_lagging_of(dir.path(), "app-1").unwrap();
        assert_eq!(drawn(), Some(17));
        assert!(svg().contains(">d ("), "{}", svg());
        // And one its application's completion catches up with.
        add("w5", "java;a;e 1\n");
        assert_eq!(drawn(), Some(17));
        complete(dir.path(), "app-1");
        let index = read_index(&root).unwrap();
        assert!(index.complete);
        assert_eq!(index.drawn.get(rel), Some(&18));
        assert!(svg().contains(">e ("), "{}", svg());
    }

    #[test]
    fn a_file_new_in_a_window_takes_the_windows_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join(APPS).join("app-1");
        let (svg, twin) = ("executor-1/stage-2.cpu.svg", "executor-1/stage-2.cpu.pb.gz");
        let add = |name: &str, folded: &str| {
            let window = window(dir.path(), name, folded);
            fs::write(
                window.join("spark/app-1").join(svg),
                format!("{name}'s graph"),
            )
            .unwrap();
            fs::write(
                window.join("spark/app-1").join(twin),
                format!("{name}'s twin"),
            )
            .unwrap();
            add_window(dir.path(), name, &window).unwrap();
        };
        add("w1", "java;a;b 10\n");
        assert_eq!(fs::read_to_string(root.join(svg)).unwrap(), "w1's graph");
        assert_eq!(fs::read_to_string(root.join(twin)).unwrap(), "w1's twin");
        let drawn = || {
            read_index(&root)
                .unwrap()
                .drawn
                .get("executor-1/stage-2.cpu.folded")
                .copied()
        };
        assert_eq!(drawn(), Some(10));
        let folded = "executor-1/stage-2.cpu.folded";
        assert_eq!(
            fs::read_to_string(root.join(folded)).unwrap(),
            "java;a;b 10\n"
        );
        // The second window's samples are not all the roll-up's: drawn
        // here, under the title the window's writer gives the file.
        add("w2", "java;a;c 5\n");
        assert_eq!(drawn(), Some(15));
        assert_eq!(
            fs::read_to_string(root.join(folded)).unwrap(),
            "java;a;b 10\njava;a;c 5\n"
        );
        // The first window's files are as it wrote them: the roll-up's new
        // ones took the place of its names for them, not their bytes.
        let w1 = dir.path().join("windows/w1/spark/app-1");
        assert_eq!(fs::read_to_string(w1.join(svg)).unwrap(), "w1's graph");
        assert_eq!(
            fs::read_to_string(w1.join(folded)).unwrap(),
            "java;a;b 10\n"
        );
        let graph = fs::read_to_string(root.join(svg)).unwrap();
        assert!(graph.contains(">c ("), "{graph}");
        assert!(
            graph.contains("sparkprof on-CPU: app-1 java [42], executor 1, stage 2"),
            "{graph}"
        );
        assert_ne!(
            fs::read_to_string(root.join(twin)).ok().as_deref(),
            Some("w2's twin")
        );
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
