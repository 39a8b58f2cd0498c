//! One application across the cluster (issue 18): two recordings of a
//! stand-in Spark application, each "on its own host" (a UTS namespace
//! with its own hostname) with its own executor, then
//! - every pprof twin read by Go's own `go tool pprof`, its totals those of
//!   its folded file, its samples labelled;
//! - every `samples.parquet` read by Spark, its weights those of the index;
//! - `sparkprof merge` of the two: hosts, executors kept, stages summed;
//! - the fleet job (`fleet/stage_profiles.py`) on the two tables, its
//!   per-stage totals equal to merge's.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
};

use serde_json::Value;
use sparkprof_tests::{
    Recorder, Recording,
    fake_executor::{APP_ID, FakeExecutor},
    merge, parse_folded, pprof_raw, pprof_raw_total,
    spark::{SparkInstall, fleet_job},
};

const OTHER_HOST: &str = "sparkprof-worker-b";

/// A recording of a fake executor `executor_id` running tasks for
/// `seconds`, on `host` (`None`: this one).
fn record(classes: &Path, executor_id: &str, seconds: u32, host: Option<&str>) -> Recording {
    let args = ["--duration", "9", "--off-cpu"];
    let recorder = match host {
        Some(host) => Recorder::start_as_host(host, &args),
        None => Recorder::start(&args),
    };
    let executor = FakeExecutor::start_as(executor_id, classes, seconds, &[]).unwrap();
    executor.wait().unwrap();
    let recording = recorder.wait();
    recording.assert_ok();
    recording
}

fn folded_total(path: &Path) -> u64 {
    parse_folded(&std::fs::read_to_string(path).unwrap())
        .iter()
        .map(|s| s.count)
        .sum()
}

fn check_twins(recording: &Recording) {
    let files = recording.files();
    assert!(!files.is_empty());
    let mut stage_files = 0;
    for entry in files {
        let folded = recording.dir().join(entry["path"].as_str().unwrap());
        let twin = recording.dir().join(entry["pprof"].as_str().unwrap());
        let raw = pprof_raw(&twin);
        let per_unit = if entry["kind"] == "cpu" { 1 } else { 1_000 };
        assert_eq!(
            pprof_raw_total(&raw),
            folded_total(&folded) * per_unit,
            "{}: pprof's total is not the folded file's:\n{raw}",
            twin.display()
        );
        let types = if entry["kind"] == "cpu" {
            "samples/count cpu/nanoseconds"
        } else {
            &format!("{}/nanoseconds", entry["kind"].as_str().unwrap())
        };
        assert!(raw.contains(types), "{}: {raw}", twin.display());
        if entry["stage_id"].is_u64() {
            stage_files += 1;
            for label in [
                format!("stage_id:[{}]", entry["stage_id"]),
                format!("app_id:[{APP_ID}]"),
                format!("executor_id:[{}]", entry["executor_id"].as_str().unwrap()),
                "thread:[".to_owned(),
                "host:[".to_owned(),
            ] {
                assert!(
                    raw.contains(&label),
                    "{}: no {label}:\n{raw}",
                    twin.display()
                );
            }
        }
    }
    assert!(stage_files >= 2, "stage files with twins: {stage_files}");
}

/// A small PySpark program, with the venv's python; its stdout.
fn pyspark(install: &SparkInstall, program: &str, args: &[&Path]) -> String {
    let out = Command::new(&install.python)
        .arg("-c")
        .arg(program)
        .args(args)
        .env("SPARK_HOME", &install.spark_home)
        .env("PYSPARK_PYTHON", &install.python)
        .output()
        .expect("run the venv's python");
    assert!(
        out.status.success(),
        "pyspark failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Spark's sums of each table's weights per (kind, executor, stage),
/// against the index's per-file totals.
fn check_tables(install: &SparkInstall, recordings: &[&Recording]) {
    let program = r#"
import json, sys
from pyspark.sql import SparkSession, functions as F
spark = SparkSession.builder.master("local[1]").getOrCreate()
for path in sys.argv[1:]:
    rows = (spark.read.parquet(path)
            .groupBy("kind", F.coalesce("executor_id", F.lit("-")).alias("e"),
                     F.coalesce(F.col("stage_id").cast("string"), F.lit("-")).alias("s"))
            .agg(F.sum("weight").alias("w")).collect())
    print(json.dumps({f"{r['kind']}/{r['e']}/{r['s']}": r["w"] for r in rows}))
"#;
    let tables: Vec<PathBuf> = recordings
        .iter()
        .map(|r| r.dir().join(r.index["samples_table"].as_str().unwrap()))
        .collect();
    let paths: Vec<&Path> = tables.iter().map(PathBuf::as_path).collect();
    let out = pyspark(install, program, &paths);
    let read: Vec<BTreeMap<String, u64>> = out
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(read.len(), recordings.len(), "{out}");
    for (recording, table) in recordings.iter().zip(read) {
        let mut expected: BTreeMap<String, u64> = BTreeMap::new();
        for entry in recording.files() {
            let key = format!(
                "{}/{}/{}",
                entry["kind"].as_str().unwrap(),
                entry["executor_id"].as_str().unwrap_or("-"),
                entry["stage_id"]
                    .as_u64()
                    .map_or("-".to_owned(), |s| s.to_string())
            );
            *expected.entry(key).or_default() += entry["samples"].as_u64().unwrap();
        }
        assert_eq!(
            table,
            expected,
            "Spark's read of {}",
            recording.dir().display()
        );
    }
}

fn index(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("index.json")).unwrap()).unwrap()
}

/// Merge's stage totals: (stage, kind) -> total over every executor.
fn check_merge(out: &Path, a: &Recording, b: &Recording) -> BTreeMap<(u64, String), u64> {
    merge(out, &[a.dir(), b.dir()]);
    let index = index(out);
    let hosts: Vec<&str> = index["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap())
        .collect();
    assert!(hosts.contains(&OTHER_HOST), "{hosts:?}");
    assert!(
        hosts.contains(&a.index["host"].as_str().unwrap()),
        "{hosts:?}"
    );
    assert_eq!(index["sources"].as_array().unwrap().len(), 2);
    let files = index["files"].as_array().unwrap();
    // Each source file is there, summed over the sources that have it.
    let mut by_path: BTreeMap<String, u64> = BTreeMap::new();
    for recording in [a, b] {
        for entry in recording.files() {
            *by_path
                .entry(entry["path"].as_str().unwrap().to_owned())
                .or_default() += entry["samples"].as_u64().unwrap();
        }
    }
    for (path, samples) in &by_path {
        let entry = files
            .iter()
            .find(|f| f["path"] == path.as_str())
            .unwrap_or_else(|| panic!("{path} is not in the merge"));
        assert_eq!(entry["samples"].as_u64(), Some(*samples), "{path}");
        assert_eq!(folded_total(&out.join(path)), *samples, "{path}");
        assert!(out.join(entry["svg"].as_str().unwrap()).exists());
        let twin = pprof_raw(&out.join(entry["pprof"].as_str().unwrap()));
        let per_unit = if entry["kind"] == "cpu" { 1 } else { 1_000 };
        assert_eq!(pprof_raw_total(&twin), samples * per_unit, "{path}");
    }
    // Both executors are kept; their stages are summed in new files.
    for executor in ["1", "2"] {
        assert!(
            by_path
                .keys()
                .any(|p| p.contains(&format!("executor-{executor}/stage-"))),
            "executor {executor}: {by_path:#?}"
        );
    }
    let mut stages: BTreeMap<(u64, String), u64> = BTreeMap::new();
    for entry in files {
        let path = entry["path"].as_str().unwrap();
        if let Some(stage) = entry["stage_id"].as_u64()
            && path.starts_with(&format!("spark/{APP_ID}/stage-"))
        {
            assert!(entry["executor_id"].is_null(), "{entry}");
            let summed: u64 = by_path
                .iter()
                .filter(|(p, _)| {
                    p.contains("/executor-")
                        && p.ends_with(&format!(
                            "/stage-{stage}.{}.folded",
                            entry["kind"].as_str().unwrap()
                        ))
                })
                .map(|(_, n)| n)
                .sum();
            assert_eq!(entry["samples"].as_u64(), Some(summed), "{path}");
            stages.insert((stage, entry["kind"].as_str().unwrap().to_owned()), summed);
        }
    }
    assert!(stages.len() >= 2, "merged stage files: {stages:?}");
    stages
}

fn check_fleet_job(
    install: &SparkInstall,
    out: &Path,
    a: &Recording,
    b: &Recording,
    merged: &BTreeMap<(u64, String), u64>,
) {
    let (table_a, table_b) = (
        a.dir().join("samples.parquet"),
        b.dir().join("samples.parquet"),
    );
    install.submit_local(
        &fleet_job(),
        &[
            "--output".as_ref(),
            out.as_os_str(),
            table_a.as_os_str(),
            table_b.as_os_str(),
        ],
    );
    let summary: Vec<Value> =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let fleet: BTreeMap<(u64, String), u64> = summary
        .iter()
        .filter(|row| row["app_id"] == APP_ID)
        .map(|row| {
            (
                (
                    row["stage_id"].as_u64().unwrap(),
                    row["kind"].as_str().unwrap().to_owned(),
                ),
                row["total"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        &fleet, merged,
        "the fleet job's stage totals against merge's"
    );
    // Stages that ran on both executors show both; the folded output adds
    // up too.
    assert!(
        summary
            .iter()
            .any(|row| row["executors"].as_array().unwrap().len() == 2),
        "no stage on both executors: {summary:#?}"
    );
    // Skew: executor 2 (three times executor 1's CPU time) is flagged in
    // the on-CPU rows of stages both ran, executor 1 never (off-CPU time,
    // a wait's length, is not what the two runs differ in).
    let on_both: Vec<&Value> = summary
        .iter()
        .filter(|r| r["kind"] == "cpu" && r["executors"].as_array().unwrap().len() == 2)
        .collect();
    assert!(
        on_both
            .iter()
            .any(|r| r["skewed_executors"] == serde_json::json!(["2"])),
        "no stage flags executor 2: {on_both:#?}"
    );
    assert!(
        on_both.iter().all(|r| !r["skewed_executors"]
            .as_array()
            .unwrap()
            .contains(&"1".into())),
        "executor 1 flagged: {on_both:#?}"
    );
    for row in &summary {
        let executors = row["executors"].as_array().unwrap();
        let shares: f64 = executors.iter().map(|e| e["share"].as_f64().unwrap()).sum();
        assert!((shares - 1.0).abs() < 1e-9, "{row}");
        assert!(!row["top_frames"].as_array().unwrap().is_empty(), "{row}");
        let dir = out.join(format!(
            "folded/app_id={APP_ID}/stage_id={}/kind={}",
            row["stage_id"],
            row["kind"].as_str().unwrap()
        ));
        let total: u64 = std::fs::read_dir(&dir)
            .unwrap_or_else(|err| panic!("{}: {err}", dir.display()))
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with("part-"))
            .map(|e| folded_total(&e.path()))
            .sum();
        assert_eq!(Some(total), row["total"].as_u64(), "{}", dir.display());
    }
}

#[test]
fn one_application_across_two_hosts() {
    let install = SparkInstall::locate();
    let classes_dir = sparkprof_tests::classes_dir("cluster");
    let classes = FakeExecutor::compile(classes_dir.path()).unwrap();
    // Executor 2 runs three times as long: its stages are skewed.
    let a = record(&classes, "1", 2, None);
    let b = record(&classes, "2", 6, Some(OTHER_HOST));
    drop(classes_dir);
    assert_eq!(b.index["host"], OTHER_HOST);
    for recording in [&a, &b] {
        check_twins(recording);
    }
    check_tables(&install, &[&a, &b]);
    let work = tempfile::tempdir().unwrap();
    let merged = check_merge(&work.path().join("merged"), &a, &b);
    check_fleet_job(&install, &work.path().join("fleet"), &a, &b, &merged);
}
