//! `sparkprof merge --output OUT DIR...`: recordings (or a daemon's
//! windows) of many hosts added up into one directory of the same layout.
//!
//! - Every file keeps its path: `spark/<app>/executor-<id>/stage-<S>`
//!   keeps its executor (executor IDs are unique within an application,
//!   so one host's), other paths of several hosts are summed.
//! - `spark/<app>/stage-<S>.<kind>.folded` (new) sums stage S over every
//!   executor of every host.
//! - Each file gets its flame graph and pprof twin, whose samples keep the
//!   labels of where they came from (host, executor, pid): a back end can
//!   still filter a summed stage by executor. `samples.parquet` has a row
//!   per line per source.
//! - `index.json` lists the sources merged (host, directory, time range)
//!   and each file's hosts.
//!
//! Everything is read and checked before anything is written: a bad input
//! is an error naming it, and `OUT` is left as it was.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    fs, io,
    path::{Component, Path, PathBuf},
};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::{
    daemon::windows,
    write::{
        atomic, folded,
        labels::{FileLabels, ReadEntry, folded_lines},
        output_dir::{INDEX, OutputDir, OutputDirError},
        pprof, table,
    },
};

#[derive(Debug, Error)]
pub enum MergeError {
    #[error("{}: not a sparkprof recording or daemon directory: {why}", path.display())]
    NotARecording { path: PathBuf, why: String },
    #[error("{}: {source}", path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("nothing to merge: give one or more recordings or daemon directories")]
    NoInput,
    #[error(transparent)]
    Output(#[from] OutputDirError),
    #[error("writing {}: {source}", path.display())]
    Write { path: PathBuf, source: io::Error },
}

/// A recording's `index.json`, as much as merging needs.
#[derive(Debug, Deserialize)]
struct ReadIndex {
    tool: String,
    #[serde(default)]
    host: String,
    #[serde(default)]
    frequency_hz: u64,
    start: Option<String>,
    end: Option<String>,
    files: Vec<ReadEntry>,
}

/// One recording read, every file with its text.
struct Source {
    dir: PathBuf,
    index: ReadIndex,
    texts: Vec<String>,
}

/// A source as the merged index lists it.
#[derive(Debug, Serialize)]
struct SourceEntry {
    host: String,
    dir: String,
    start: Option<String>,
    end: Option<String>,
}

/// A merged file as its index entry lists it.
#[derive(Debug, Serialize)]
struct MergedEntry {
    #[serde(flatten)]
    entry: ReadEntry,
    hosts: Vec<String>,
}

#[derive(Debug, Serialize)]
struct MergedIndex {
    version: u32,
    tool: String,
    sources: Vec<SourceEntry>,
    hosts: Vec<String>,
    start: Option<String>,
    end: Option<String>,
    samples_table: &'static str,
    files: Vec<MergedEntry>,
}

/// A file being summed: its lines per source (labels and stacks).
struct MergedFile {
    entry: ReadEntry,
    parts: Vec<(FileLabels, HashMap<String, u64>)>,
}

impl MergedFile {
    fn add(&mut self, labels: &FileLabels, text: &str) {
        let same = |part: &FileLabels| {
            let mut a = part.clone();
            (a.start, a.end) = (labels.start, labels.end);
            a == *labels
        };
        let index = match self.parts.iter().position(|(part, _)| same(part)) {
            Some(index) => index,
            None => {
                self.parts.push((labels.clone(), HashMap::new()));
                self.parts.len() - 1
            }
        };
        let (part, stacks) = &mut self.parts[index];
        part.start = match (part.start, labels.start) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        part.end = part.end.max(labels.end);
        for (stack, count) in folded_lines(text) {
            *stacks.entry(stack.to_owned()).or_default() += count;
        }
    }
}

/// What a merge did.
#[derive(Debug)]
pub struct MergeSummary {
    pub sources: usize,
    pub hosts: Vec<String>,
    pub files: usize,
}

/// The recordings under `dir`: itself, or a daemon's published windows.
fn recordings(dir: &Path) -> Result<Vec<PathBuf>, MergeError> {
    if dir.join(INDEX).is_file() {
        return Ok(vec![dir.to_path_buf()]);
    }
    if !dir.join(windows::WINDOWS).is_dir() {
        return Err(MergeError::NotARecording {
            path: dir.to_path_buf(),
            why: format!("it has neither {INDEX} nor {}/", windows::WINDOWS),
        });
    }
    Ok(windows::published(dir)
        .into_iter()
        .map(|(_, path)| path)
        .filter(|path| path.join(INDEX).is_file())
        .collect())
}

/// A path an index lists, if it stays inside its directory.
fn inside(path: &str) -> Option<&Path> {
    let path = Path::new(path);
    path.components()
        .all(|c| matches!(c, Component::Normal(_)))
        .then_some(path)
}

fn read_source(dir: &Path) -> Result<Source, MergeError> {
    let bad = |why: String| MergeError::NotARecording {
        path: dir.to_path_buf(),
        why,
    };
    let bytes = fs::read(dir.join(INDEX)).map_err(|source| MergeError::Read {
        path: dir.join(INDEX),
        source,
    })?;
    let index: ReadIndex =
        serde_json::from_slice(&bytes).map_err(|err| bad(format!("{INDEX}: {err}")))?;
    if !index.tool.starts_with("sparkprof") {
        return Err(bad(format!("{INDEX} was written by {:?}", index.tool)));
    }
    let mut texts = Vec::with_capacity(index.files.len());
    for entry in &index.files {
        let rel = inside(&entry.path)
            .ok_or_else(|| bad(format!("{INDEX} lists a path outside it: {}", entry.path)))?;
        let text = fs::read_to_string(dir.join(rel)).map_err(|source| MergeError::Read {
            path: dir.join(rel),
            source,
        })?;
        texts.push(text);
    }
    Ok(Source {
        dir: dir.to_path_buf(),
        index,
        texts,
    })
}

/// `spark/<app>/stage-<S>.<kind>.folded` for an executor's stage file.
fn stage_path(entry: &ReadEntry) -> Option<String> {
    let stage = entry.stage_id?;
    let mut parts = entry.path.split('/');
    let (Some("spark"), Some(app)) = (parts.next(), parts.next()) else {
        return None;
    };
    Some(format!("spark/{app}/stage-{stage}.{}.folded", entry.kind))
}

/// Merges `inputs` into `output`.
pub fn merge(output: &Path, inputs: &[PathBuf]) -> Result<MergeSummary, MergeError> {
    if inputs.is_empty() {
        return Err(MergeError::NoInput);
    }
    let mut sources = Vec::new();
    for input in inputs {
        for dir in recordings(input)? {
            sources.push(read_source(&dir)?);
        }
    }
    if sources.is_empty() {
        return Err(MergeError::NoInput);
    }
    let mut files: BTreeMap<String, MergedFile> = BTreeMap::new();
    for source in &sources {
        let period = 1_000_000_000 / source.index.frequency_hz.max(1);
        for (entry, text) in source.index.files.iter().zip(&source.texts) {
            let labels = FileLabels::of_read(&source.index.host, period, entry);
            let mut add = |path: String, whole_stage: bool| {
                let file = files.entry(path.clone()).or_insert_with(|| {
                    let mut template = entry.clone();
                    template.path = path.clone();
                    template.svg = Path::new(&path).with_extension("svg").display().to_string();
                    template.pprof = pprof::twin_path(Path::new(&path)).display().to_string();
                    if whole_stage {
                        (template.executor_id, template.pid, template.process) = (None, None, None);
                    }
                    MergedFile {
                        entry: template,
                        parts: Vec::new(),
                    }
                });
                file.add(&labels, text);
            };
            add(entry.path.clone(), false);
            if let Some(stage) = stage_path(entry) {
                add(stage, true);
            }
        }
    }

    // Everything is read: now the output.
    let out = OutputDir::claim(output)?;
    let write = |rel: &Path, bytes: &[u8]| {
        atomic::write_atomic(out.path(), rel, bytes).map_err(|source| MergeError::Write {
            path: out.path().join(rel),
            source,
        })
    };
    let mut table = table::SamplesTable::default();
    let mut entries = Vec::with_capacity(files.len());
    for (path, file) in &mut files {
        let mut summed: HashMap<&str, u64> = HashMap::new();
        for (_, stacks) in &file.parts {
            for (stack, count) in stacks {
                *summed.entry(stack).or_default() += count;
            }
        }
        let text = folded::render(summed.iter().map(|(s, &c)| (*s, c)));
        let rel = Path::new(path.as_str());
        write(rel, text.as_bytes())?;
        let title = format!("sparkprof merged {}: {path}", file.entry.kind);
        let svg = folded::flame_graph(&text, &title, &file.entry.unit).map_err(|source| {
            MergeError::Write {
                path: out.path().join(&file.entry.svg),
                source,
            }
        })?;
        write(Path::new(&file.entry.svg), &svg)?;
        let parts: Vec<pprof::Part<'_>> = file
            .parts
            .iter()
            .map(|(labels, stacks)| {
                (
                    labels,
                    stacks.iter().map(|(s, &c)| (s.as_str(), c)).collect(),
                )
            })
            .collect();
        let twin = pprof::encode(&parts).map_err(|source| MergeError::Write {
            path: out.path().join(&file.entry.pprof),
            source,
        })?;
        write(Path::new(&file.entry.pprof), &twin)?;
        for (labels, stacks) in &file.parts {
            table.add(labels, stacks.iter().map(|(s, &c)| (s.as_str(), c)));
        }
        let time = |t: Option<std::time::SystemTime>| {
            t.map(crate::write::index::timestamp).unwrap_or_default()
        };
        let mut entry = file.entry.clone();
        entry.samples = summed.values().sum();
        entry.start = time(file.parts.iter().filter_map(|(l, _)| l.start).min());
        entry.end = time(file.parts.iter().filter_map(|(l, _)| l.end).max());
        let hosts: BTreeSet<String> = file.parts.iter().map(|(l, _)| l.host.clone()).collect();
        entries.push(MergedEntry {
            entry,
            hosts: hosts.into_iter().collect(),
        });
    }
    let parquet = table.to_parquet().map_err(|err| MergeError::Write {
        path: out.path().join(table::SAMPLES_TABLE),
        source: io::Error::other(err),
    })?;
    write(Path::new(table::SAMPLES_TABLE), &parquet)?;
    let hosts: BTreeSet<String> = sources.iter().map(|s| s.index.host.clone()).collect();
    let index = MergedIndex {
        version: crate::write::index::INDEX_VERSION,
        tool: format!("sparkprof {} (merge)", env!("CARGO_PKG_VERSION")),
        sources: sources
            .iter()
            .map(|s| SourceEntry {
                host: s.index.host.clone(),
                dir: s.dir.display().to_string(),
                start: s.index.start.clone(),
                end: s.index.end.clone(),
            })
            .collect(),
        hosts: hosts.iter().cloned().collect(),
        start: sources.iter().filter_map(|s| s.index.start.clone()).min(),
        end: sources.iter().filter_map(|s| s.index.end.clone()).max(),
        samples_table: table::SAMPLES_TABLE,
        files: entries,
    };
    let mut json = serde_json::to_vec_pretty(&index)
        .map_err(io::Error::other)
        .map_err(|source| MergeError::Write {
            path: out.path().join(INDEX),
            source,
        })?;
    json.push(b'\n');
    write(Path::new(INDEX), &json)?;
    Ok(MergeSummary {
        sources: sources.len(),
        hosts: hosts.into_iter().collect(),
        files: index.files.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A recording of `host` with one executor's stage file and a
    /// process file, written as sparkprof writes them.
    fn recording(dir: &Path, host: &str, executor: &str, lines: &str) {
        let stage = format!("spark/app-1/executor-{executor}/stage-3.cpu.folded");
        let files = [
            (stage.as_str(), Some(3), Some(executor)),
            ("processes/cron-1.cpu.folded", None, None),
        ];
        let mut entries = Vec::new();
        for (path, stage_id, executor_id) in files {
            let full = dir.join(path);
            fs::create_dir_all(full.parent().unwrap()).unwrap();
            fs::write(&full, lines).unwrap();
            entries.push(serde_json::json!({
                "path": path, "kind": "cpu", "unit": "samples",
                "samples": folded_lines(lines).map(|(_, n)| n).sum::<u64>(),
                "start": "2026-11-24T10:00:00Z", "end": "2026-11-24T10:01:00Z",
                "pid": 7, "process": "java", "role": "executor",
                "app_id": executor_id.map(|_| "app-1"), "executor_id": executor_id,
                "stage_id": stage_id,
            }));
        }
        let index = serde_json::json!({
            "version": 1, "tool": "sparkprof 0.1.0", "host": host, "frequency_hz": 99,
            "start": "2026-11-24T10:00:00Z", "end": "2026-11-24T10:01:00Z", "files": entries,
        });
        fs::write(dir.join(INDEX), serde_json::to_vec(&index).unwrap()).unwrap();
    }

    fn merged_index(out: &Path) -> serde_json::Value {
        serde_json::from_slice(&fs::read(out.join(INDEX)).unwrap()).unwrap()
    }

    #[test]
    fn hosts_add_up_and_stages_sum_over_executors() {
        let work = tempfile::tempdir().unwrap();
        let (a, daemon, out) = (
            work.path().join("a"),
            work.path().join("daemon"),
            work.path().join("out"),
        );
        recording(&a, "host-a", "1", "java [7];t;f 2\njava [7];t;g 1\n");
        // A daemon directory: its published windows, not its partial one.
        for (window, lines) in [
            ("20261124T100000Z", "java [7];t;f 4\n"),
            (".partial-x", "x 100\n"),
        ] {
            let dir = daemon.join("windows").join(window);
            recording(&dir, "host-b", "2", lines);
        }
        let summary = merge(&out, &[a, daemon]).unwrap();
        assert_eq!(summary.hosts, ["host-a", "host-b"]);
        let index = merged_index(&out);
        let samples = |path: &str| {
            index["files"]
                .as_array()
                .unwrap()
                .iter()
                .find(|f| f["path"] == path)
                .unwrap_or_else(|| panic!("{path}: {index:#}"))["samples"]
                .as_u64()
        };
        assert_eq!(
            samples("spark/app-1/executor-1/stage-3.cpu.folded"),
            Some(3)
        );
        assert_eq!(
            samples("spark/app-1/executor-2/stage-3.cpu.folded"),
            Some(4)
        );
        assert_eq!(samples("spark/app-1/stage-3.cpu.folded"), Some(7));
        assert_eq!(samples("processes/cron-1.cpu.folded"), Some(7));
        assert_eq!(
            fs::read_to_string(out.join("spark/app-1/stage-3.cpu.folded")).unwrap(),
            "java [7];t;f 6\njava [7];t;g 1\n"
        );
        for file in index["files"].as_array().unwrap() {
            for key in ["svg", "pprof"] {
                assert!(out.join(file[key].as_str().unwrap()).is_file(), "{file}");
            }
        }
        assert!(out.join(table::SAMPLES_TABLE).is_file());
        assert_eq!(index["sources"].as_array().unwrap().len(), 2);
        // A second merge into the same directory replaces the first.
        merge(&out, &[work.path().join("a")]).unwrap();
        assert!(!out.join("spark/app-1/executor-2").exists());
    }

    #[test]
    fn bad_inputs_are_errors_and_write_nothing() {
        let work = tempfile::tempdir().unwrap();
        let out = work.path().join("out");
        let good = work.path().join("good");
        recording(&good, "h", "1", "a;b 1\n");
        let missing = work.path().join("missing-file");
        recording(&missing, "h", "1", "a;b 1\n");
        fs::remove_file(missing.join("processes/cron-1.cpu.folded")).unwrap();
        let escaping = work.path().join("escaping");
        recording(&escaping, "h", "1", "a;b 1\n");
        let text = fs::read_to_string(escaping.join(INDEX)).unwrap();
        fs::write(
            escaping.join(INDEX),
            text.replace("processes/cron-1.cpu.folded", "../good/index.json"),
        )
        .unwrap();
        let foreign = work.path().join("foreign");
        fs::create_dir_all(&foreign).unwrap();
        fs::write(foreign.join(INDEX), r#"{"tool":"other","files":[]}"#).unwrap();
        for (input, says) in [
            (
                work.path().join("nothing-here"),
                "neither index.json nor windows/",
            ),
            (missing, "cron-1.cpu.folded"),
            (escaping, "outside"),
            (foreign, "written by"),
        ] {
            let err = merge(&out, &[good.clone(), input.clone()])
                .unwrap_err()
                .to_string();
            assert!(err.contains(says), "{}: {err}", input.display());
            assert!(!out.exists(), "{}: wrote before failing", input.display());
        }
    }
}
