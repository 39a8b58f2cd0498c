//! pprof twins: beside every `.folded` file the same profile as gzipped
//! pprof (`.pb.gz`, google/pprof's `profile.proto`), which Grafana
//! Pyroscope, Parca, `go tool pprof` and speedscope read.
//!
//! Made from the folded text itself, so the totals are the folded file's:
//! - sample types as the data is: on-CPU files `samples/count` and
//!   `cpu/nanoseconds` (a sample is one sampling period of CPU), off-CPU
//!   files `offcpu/nanoseconds`, wall-clock files `wall/nanoseconds`
//!   (their microseconds × 1,000);
//! - one location per distinct frame, its function named exactly as the
//!   folded frame (process and thread frames included, so the flame graph
//!   is the folded file's), leaf first as pprof wants;
//! - labels a back end can filter on, per sample: `host`, `app_id`,
//!   `executor_id`, `stage_id`, `task` (stage files split per task),
//!   `pid`, `process`, `role`, `thread`, `kind`.

use std::{io::Write as _, time::UNIX_EPOCH};

use flate2::{Compression, write::GzEncoder};
use prost::Message as _;

use super::labels::{self, FileLabels};
use crate::FastMap;

/// The twin's path for a folded file's.
pub fn twin_path(folded: &std::path::Path) -> std::path::PathBuf {
    folded.with_extension("pb.gz")
}

#[derive(Clone, PartialEq, prost::Message)]
struct Profile {
    #[prost(message, repeated, tag = "1")]
    sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    sample: Vec<Sample>,
    #[prost(message, repeated, tag = "4")]
    location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    string_table: Vec<String>,
    #[prost(int64, tag = "9")]
    time_nanos: i64,
    #[prost(int64, tag = "10")]
    duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    period: i64,
    #[prost(int64, repeated, tag = "13")]
    comment: Vec<i64>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ValueType {
    #[prost(int64, tag = "1")]
    r#type: i64,
    #[prost(int64, tag = "2")]
    unit: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Sample {
    #[prost(uint64, repeated, tag = "1")]
    location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    label: Vec<Label>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Label {
    #[prost(int64, tag = "1")]
    key: i64,
    #[prost(int64, tag = "2")]
    str: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Location {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(message, repeated, tag = "4")]
    line: Vec<Line>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Line {
    #[prost(uint64, tag = "1")]
    function_id: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Function {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(int64, tag = "2")]
    name: i64,
    #[prost(int64, tag = "3")]
    system_name: i64,
}

/// pprof's string table: index 0 is the empty string.
#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: FastMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        let mut strings = Self::default();
        strings.get("");
        strings
    }

    fn get(&mut self, text: &str) -> i64 {
        if let Some(&id) = self.index.get(text) {
            return id;
        }
        let id = self.table.len() as i64;
        self.table.push(text.to_owned());
        self.index.insert(text.to_owned(), id);
        id
    }
}

/// Lines of a folded file, with who they are about.
pub type Part<'a> = (&'a FileLabels, Vec<(&'a str, u64)>);

/// The profile of a folded file, gzipped: its (stack, count) lines in one
/// or more parts (a file summed from several hosts or executors by
/// `merge` keeps each one's labels on its samples). The parts are of one
/// kind.
pub fn encode(parts: &[Part<'_>]) -> std::io::Result<Vec<u8>> {
    encode_noted(parts, None)
}

/// What a file's twin is while its flame graph is a stand-in (a file new
/// at a checkpoint that still changes, see `Writer::checkpoint`): the
/// file's profile with no samples yet, and a comment that says so. Its
/// sample types and times are the file's: a reader takes it as an empty
/// profile of the right kind, not as a wrong one.
pub fn stand_in(file: &FileLabels) -> std::io::Result<Vec<u8>> {
    encode_noted(
        &[(file, Vec::new())],
        Some(
            "still recording: this profile is written when its file settles, \
             every 10 minutes, and when the recording ends",
        ),
    )
}

/// [`encode`], with `note` as a second comment.
fn encode_noted(parts: &[Part<'_>], note: Option<&str>) -> std::io::Result<Vec<u8>> {
    let mut strings = Strings::new();
    let Some((first, _)) = parts.first() else {
        return Err(std::io::Error::other("a profile of nothing"));
    };
    let kind = first.kind.as_str();
    let on_cpu = kind == "cpu";
    let mut value_type = |kind: &str, unit: &str| ValueType {
        r#type: strings.get(kind),
        unit: strings.get(unit),
    };
    let mut profile = Profile::default();
    if on_cpu {
        profile.sample_type = vec![
            value_type("samples", "count"),
            value_type("cpu", "nanoseconds"),
        ];
        profile.period_type = Some(value_type("cpu", "nanoseconds"));
        profile.period = first.sample_period_ns as i64;
    } else {
        profile.sample_type = vec![value_type(kind, "nanoseconds")];
        profile.period_type = Some(value_type(kind, "nanoseconds"));
        profile.period = 1_000;
    }
    let mut locations: FastMap<&str, u64> = FastMap::default();
    for (file, lines) in parts {
        let file_labels = file_labels(file, &mut strings);
        for &(stack, count) in lines {
            let frames = labels::frames(stack);
            let mut location_id = Vec::with_capacity(frames.len());
            for frame in frames.iter().rev() {
                let next = locations.len() as u64 + 1;
                let id = *locations.entry(frame).or_insert_with(|| {
                    let name = strings.get(frame);
                    profile.function.push(Function {
                        id: next,
                        name,
                        system_name: name,
                    });
                    profile.location.push(Location {
                        id: next,
                        line: vec![Line { function_id: next }],
                    });
                    next
                });
                location_id.push(id);
            }
            let mut label = file_labels.clone();
            if let Some(thread) = labels::thread(&frames) {
                label.push(Label {
                    key: strings.get("thread"),
                    str: strings.get(thread),
                });
                if let Some(task) = labels::task(thread) {
                    label.push(Label {
                        key: strings.get("task"),
                        str: strings.get(task),
                    });
                }
            }
            let value = if on_cpu {
                vec![count as i64, (count * file.sample_period_ns) as i64]
            } else {
                vec![count as i64 * 1_000]
            };
            profile.sample.push(Sample {
                location_id,
                value,
                label,
            });
        }
    }
    let nanos = |time: Option<std::time::SystemTime>| {
        time.and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map(|d| d.as_nanos() as i64)
    };
    let start = parts
        .iter()
        .filter_map(|(f, _)| nanos(f.start))
        .min()
        .unwrap_or(0);
    let end = parts
        .iter()
        .filter_map(|(f, _)| nanos(f.end))
        .max()
        .unwrap_or(start);
    profile.time_nanos = start;
    profile.duration_nanos = (end - start).max(0);
    let hosts: std::collections::BTreeSet<&str> =
        parts.iter().map(|(f, _)| f.host.as_str()).collect();
    profile.comment = vec![strings.get(&format!(
        "sparkprof {}: {kind} profile of {}",
        env!("CARGO_PKG_VERSION"),
        hosts.into_iter().collect::<Vec<_>>().join(", ")
    ))];
    profile.comment.extend(note.map(|note| strings.get(note)));
    profile.string_table = strings.table;
    // The fastest level: a twin is rewritten whenever its file's graph is
    // drawn, and level 6 was over 40 % of its cost (pprof readers take any
    // level).
    let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
    gz.write_all(&profile.encode_to_vec())?;
    gz.finish()
}

/// The labels every sample of a file carries.
fn file_labels(file: &FileLabels, strings: &mut Strings) -> Vec<Label> {
    [
        ("host", Some(file.host.clone())),
        ("kind", Some(file.kind.clone())),
        ("role", Some(file.role.clone())),
        ("app_id", file.app_id.clone()),
        ("executor_id", file.executor_id.clone()),
        ("stage_id", file.stage_id.map(|s| s.to_string())),
        ("pid", file.pid.map(|p| p.to_string())),
        ("process", file.process.clone()),
    ]
    .into_iter()
    .filter_map(|(key, value)| {
        Some(Label {
            key: strings.get(key),
            str: strings.get(&value?),
        })
    })
    .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn labels(kind: &str) -> FileLabels {
        FileLabels {
            host: "worker-1".into(),
            kind: kind.into(),
            unit: "samples".into(),
            start: Some(UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000)),
            end: Some(UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_010)),
            pid: Some(42),
            process: Some("java".into()),
            role: "executor".into(),
            app_id: Some("app-1".into()),
            executor_id: Some("3".into()),
            stage_id: Some(7),
            sample_period_ns: 10_101_010,
        }
    }

    /// A twin's samples, summed over its first value, and its comments.
    pub(crate) fn samples_and_comments(bytes: &[u8]) -> (i64, Vec<String>) {
        let profile = decode(bytes);
        let samples = profile.sample.iter().map(|s| s.value[0]).sum();
        let comments = profile
            .comment
            .iter()
            .map(|&i| profile.string_table[i as usize].clone())
            .collect();
        (samples, comments)
    }

    fn decode(bytes: &[u8]) -> Profile {
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(bytes), &mut raw).unwrap();
        Profile::decode(raw.as_slice()).unwrap()
    }

    #[test]
    fn samples_locations_and_labels_are_the_folded_files() {
        let folded = "java [42];task 3.0 TID 57;main;work 5\njava [42];GC;gc 2\n";
        let file = labels("cpu");
        let profile = decode(&encode(&[(&file, labels::folded_lines(folded).collect())]).unwrap());
        let s = |i: i64| profile.string_table[i as usize].as_str();
        assert_eq!(profile.sample.len(), 2);
        assert_eq!(profile.sample[0].value, [5, 5 * 10_101_010]);
        // Leaf first: work, main, thread, process.
        let names: Vec<&str> = profile.sample[0]
            .location_id
            .iter()
            .map(|&id| s(profile.function[id as usize - 1].name))
            .collect();
        assert_eq!(names, ["work", "main", "task 3.0 TID 57", "java [42]"]);
        let label = |sample: &Sample, key: &str| {
            sample
                .label
                .iter()
                .find(|l| s(l.key) == key)
                .map(|l| s(l.str).to_owned())
        };
        assert_eq!(label(&profile.sample[0], "stage_id").as_deref(), Some("7"));
        assert_eq!(
            label(&profile.sample[0], "task").as_deref(),
            Some("task 3.0 TID 57")
        );
        assert_eq!(label(&profile.sample[1], "task"), None);
        assert_eq!(label(&profile.sample[1], "thread").as_deref(), Some("GC"));
        assert_eq!(
            label(&profile.sample[1], "host").as_deref(),
            Some("worker-1")
        );
        assert_eq!(profile.duration_nanos, 10_000_000_000);
        // One location per distinct frame: the java frame is shared.
        assert_eq!(profile.location.len(), 6);
    }

    #[test]
    fn off_cpu_microseconds_are_nanoseconds() {
        let file = labels("offcpu");
        let profile = decode(&encode(&[(&file, vec![("p [1];t;wait", 250)])]).unwrap());
        assert_eq!(profile.sample[0].value, [250_000]);
        assert_eq!(profile.sample_type.len(), 1);
        assert_eq!(
            profile.string_table[profile.sample_type[0].r#type as usize],
            "offcpu"
        );
    }
}
