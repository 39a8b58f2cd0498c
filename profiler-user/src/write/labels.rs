//! Who a folded file and each of its lines are about, as the pprof twins
//! label their samples and the samples table has its columns: taken from
//! the file's index entry (the recording's own, or one read back by
//! `merge`) and from the line's first two frames (process and thread).

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::index::FileEntry;

/// What a whole file is about.
#[derive(Debug, Clone, PartialEq)]
pub struct FileLabels {
    pub host: String,
    /// `cpu`, `offcpu` or `wall`.
    pub kind: String,
    /// What its counts are: `samples` or `microseconds`.
    pub unit: String,
    pub start: Option<SystemTime>,
    pub end: Option<SystemTime>,
    pub pid: Option<u32>,
    pub process: Option<String>,
    pub role: String,
    pub app_id: Option<String>,
    pub executor_id: Option<String>,
    pub stage_id: Option<u64>,
    /// What one on-CPU sample stands for on that host.
    pub sample_period_ns: u64,
}

/// An index entry as read back from `index.json` (by `merge`, by the
/// roll-ups): the fields a file's labels need, and its paths and total.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct ReadEntry {
    pub path: String,
    #[serde(default)]
    pub svg: String,
    #[serde(default)]
    pub pprof: String,
    pub kind: String,
    pub unit: String,
    pub samples: u64,
    #[serde(default)]
    pub start: String,
    #[serde(default)]
    pub end: String,
    pub pid: Option<u32>,
    pub process: Option<String>,
    pub role: String,
    pub app_id: Option<String>,
    pub executor_id: Option<String>,
    pub stage_id: Option<u64>,
    /// In a `short-lived/` file: how many processes it sums.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<u64>,
}

impl ReadEntry {
    /// Its flame graph's title: the one its recording gave it.
    pub fn title(&self) -> String {
        FileLabels::of_read("", 0, self).title(&self.path, self.processes)
    }
}

fn parse_time(text: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339(text).ok()
}

impl FileLabels {
    pub fn of_entry(host: &str, sample_period_ns: u64, entry: &FileEntry) -> Self {
        Self {
            sample_period_ns,
            host: host.to_owned(),
            kind: entry.kind.suffix().to_owned(),
            unit: entry.unit.to_owned(),
            start: parse_time(&entry.start),
            end: parse_time(&entry.end),
            pid: entry.pid,
            process: entry.process.clone(),
            role: entry.role.to_owned(),
            app_id: entry.app_id.clone(),
            executor_id: entry.executor_id.clone(),
            stage_id: entry.stage_id,
        }
    }

    pub fn of_read(host: &str, sample_period_ns: u64, entry: &ReadEntry) -> Self {
        Self {
            sample_period_ns,
            host: host.to_owned(),
            kind: entry.kind.clone(),
            unit: entry.unit.clone(),
            start: parse_time(&entry.start),
            end: parse_time(&entry.end),
            pid: entry.pid,
            process: entry.process.clone(),
            role: entry.role.clone(),
            app_id: entry.app_id.clone(),
            executor_id: entry.executor_id.clone(),
            stage_id: entry.stage_id,
        }
    }
}

impl FileLabels {
    /// The title of the flame graph of the file at `path` (summing
    /// `processes`, in a `short-lived/` file) these label: the same words
    /// for a recording's file and for a daemon's roll-up of it, whose
    /// first drawing is the window's.
    pub fn title(&self, path: &str, processes: Option<u64>) -> String {
        let mut who = match (&self.process, self.pid) {
            (Some(name), Some(pid)) => format!("{name} [{pid}]"),
            (Some(name), None) if processes.is_some() => format!(
                "{name}, {} processes that lived under {} s",
                processes.unwrap_or(0),
                super::LONG_LIVED.as_secs()
            ),
            (Some(name), None) => name.clone(),
            _ => path.to_owned(),
        };
        if let Some(app) = &self.app_id {
            who = format!("{app} {who}");
        }
        if let Some(executor) = &self.executor_id {
            who = format!("{who}, executor {executor}");
        }
        if let Some(stage) = self.stage_id {
            who = format!("{who}, stage {stage}");
        }
        // A kind this sparkprof does not know (from an index a later one
        // wrote) is shown as it is.
        let kind = match super::ProfileKind::from_suffix(&self.kind) {
            Some(kind) => kind.in_words(),
            None => &self.kind,
        };
        format!("sparkprof {kind}: {who}")
    }
}

/// The (stack, count) pairs of folded text; lines that are not
/// `stack count` are left out.
pub fn folded_lines(text: &str) -> impl Iterator<Item = (&str, u64)> {
    text.lines().filter_map(|line| {
        let (stack, count) = line.rsplit_once(' ')?;
        Some((stack, count.parse().ok()?))
    })
}

/// A folded stack's frames, root first: process, thread, then the stack.
pub fn frames(stack: &str) -> Vec<&str> {
    stack.split(';').collect()
}

/// The thread of a line (its second frame).
pub fn thread<'a>(frames: &[&'a str]) -> Option<&'a str> {
    frames.get(1).copied()
}

/// The Spark task a thread frame names, when stage files are split per
/// task (`task 3.0 TID 57`, or `TID 57` before Spark 3.1).
pub fn task(thread: &str) -> Option<&str> {
    let rest = thread
        .strip_prefix("task ")
        .or_else(|| thread.starts_with("TID ").then_some(thread))?;
    rest.contains("TID ").then_some(thread)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_read_back_has_the_title_it_was_written_with() {
        use super::super::{ProfileKind, index::GroupMeta};
        let now = SystemTime::now();
        let meta = |short_lived: bool, stage_id| GroupMeta {
            pid: (!short_lived).then_some(42),
            process: Some("java".into()),
            role: "executor",
            app_id: Some("app-1".into()),
            executor_id: Some("3".into()),
            stage_id,
            short_lived,
        };
        for kind in [ProfileKind::Cpu, ProfileKind::Offcpu, ProfileKind::Wall] {
            for meta in [meta(false, Some(7)), meta(false, None), meta(true, None)] {
                let path = std::path::Path::new("spark/app-1/executor-3/stage-7.cpu.folded");
                let written = FileEntry::new(path, kind, &meta, now, now);
                let read: ReadEntry =
                    serde_json::from_value(serde_json::to_value(&written).unwrap()).unwrap();
                assert_eq!(read.title(), written.title());
                // Each kind in words, not as its file suffix.
                let raw = format!("sparkprof {}:", kind.suffix());
                assert!(!written.title().starts_with(&raw), "{}", written.title());
            }
        }
    }

    #[test]
    fn lines_split_into_frames_and_count() {
        let lines: Vec<_> =
            folded_lines("java [42];task 3.0 TID 57;a;b c 12\nno count\n").collect();
        assert_eq!(lines, [("java [42];task 3.0 TID 57;a;b c", 12)]);
        let frames = frames(lines[0].0);
        assert_eq!(frames, ["java [42]", "task 3.0 TID 57", "a", "b c"]);
        assert_eq!(thread(&frames), Some("task 3.0 TID 57"));
        assert_eq!(task("task 3.0 TID 57"), Some("task 3.0 TID 57"));
        assert_eq!(task("TID 9"), Some("TID 9"));
        assert_eq!(task("Executor task launch worker"), None);
        assert_eq!(task("task-runner"), None);
    }
}
