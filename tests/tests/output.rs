//! The output contract: atomic files with 0640 permissions, never written
//! through a planted symlink, an index that describes every file.

use std::os::unix::fs::{PermissionsExt, symlink};

use sparkprof_tests::{Recorder, Workload, build_workload, parse_folded};

#[test]
fn files_are_0640_regular_files_and_planted_symlinks_are_not_followed() {
    let work = tempfile::tempdir().unwrap();
    let chain = build_workload("chain", work.path());
    let victim = work.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();

    let workload = Workload::start(&chain, &["3", "1"]);
    let pid = workload.pid().to_string();
    let recorder = Recorder::start(&["--duration", "1.5", "--pid", &pid]);
    // Plant symlinks where sparkprof will write, while it records.
    let out = recorder_dir(&recorder);
    symlink(&victim, out.join("index.json")).unwrap();
    std::fs::create_dir_all(out.join("processes")).unwrap();
    symlink(
        &victim,
        out.join("processes")
            .join(format!("chain-{pid}.cpu.folded")),
    )
    .unwrap();
    let recording = recorder.wait();
    recording.assert_ok();

    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "precious",
        "the symlink target is untouched"
    );
    let files = recording.files();
    assert!(!files.is_empty());
    for entry in files {
        for key in ["path", "svg"] {
            let path = recording.dir.path().join(entry[key].as_str().unwrap());
            let meta = std::fs::symlink_metadata(&path).unwrap();
            assert!(
                meta.file_type().is_file(),
                "{} is a regular file",
                path.display()
            );
            assert_eq!(
                meta.permissions().mode() & 0o777,
                0o640,
                "{} has mode 0640",
                path.display()
            );
        }
        for key in [
            "kind",
            "samples",
            "start",
            "end",
            "pid",
            "process",
            "role",
            "app_id",
            "executor_id",
            "stage_id",
        ] {
            assert!(entry.get(key).is_some(), "index entry has {key}: {entry}");
        }
        let text =
            std::fs::read_to_string(recording.dir.path().join(entry["path"].as_str().unwrap()))
                .unwrap();
        let total: u64 = parse_folded(&text).iter().map(|s| s.count).sum();
        assert_eq!(Some(total), entry["samples"].as_u64());
    }
    let index_meta = std::fs::symlink_metadata(recording.dir.path().join("index.json")).unwrap();
    assert!(index_meta.file_type().is_file());
    // No temporary files left behind.
    let leftovers: Vec<_> = walk(recording.dir.path())
        .into_iter()
        .filter(|p| p.to_string_lossy().contains(".tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

fn recorder_dir(recorder: &Recorder) -> std::path::PathBuf {
    // The recorder's output directory is the `--output` argument it was given.
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", recorder.pid())).unwrap();
    let args: Vec<String> = cmdline
        .split(|&b| b == 0)
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect();
    let at = args.iter().position(|a| a == "--output").unwrap();
    std::path::PathBuf::from(&args[at + 1])
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(walk(&path));
        } else {
            found.push(path);
        }
    }
    found
}
