//! The output contract: atomic files with 0640 permissions, never written
//! through a planted symlink, an index that describes every file.

use std::os::unix::fs::{PermissionsExt, symlink};

use std::{io::Write, process::Command, time::Duration};

use sparkprof_tests::{Recorder, Workload, build_workload, parse_folded, require_root};

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
    let out = recorder.dir().to_path_buf();
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
            let path = recording.dir().join(entry[key].as_str().unwrap());
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
            std::fs::read_to_string(recording.dir().join(entry["path"].as_str().unwrap())).unwrap();
        let total: u64 = parse_folded(&text).iter().map(|s| s.count).sum();
        assert_eq!(Some(total), entry["samples"].as_u64());
    }
    let index_meta = std::fs::symlink_metadata(recording.dir().join("index.json")).unwrap();
    assert!(index_meta.file_type().is_file());
    // No temporary files left behind.
    let leftovers: Vec<_> = walk(recording.dir())
        .into_iter()
        .filter(|p| p.to_string_lossy().contains(".tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
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

/// A tmpfs mounted for the guard's lifetime.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(size: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
            ])
            .arg(dir.path())
            .status()
            .expect("mount(8) is required");
        assert!(status.success(), "mounting a tmpfs failed");
        Self(dir)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

#[test]
fn a_full_disk_is_reported_and_retried_and_nothing_is_lost() {
    require_root();
    let work = tempfile::tempdir().unwrap();
    let chain = build_workload("chain", work.path());
    let disk = Tmpfs::mount("2m");
    let out = disk.0.path().join("out");
    std::fs::create_dir(&out).unwrap();
    // Fill the file system.
    let filler_path = disk.0.path().join("filler");
    let mut filler = std::fs::File::create(&filler_path).unwrap();
    let chunk = vec![0u8; 64 * 1024];
    while filler.write_all(&chunk).is_ok() {}
    drop(filler);

    let workload = Workload::start(&chain, &["2", "1"]);
    let pid = workload.pid();
    let pid_arg = pid.to_string();
    let mut recorder = Recorder::start_in(
        out.clone(),
        None,
        &[
            "--duration",
            "1.5",
            "--pid",
            &pid_arg,
            "--write-retry-secs",
            "60",
        ],
    );
    recorder.wait_for_log("cannot write", Duration::from_secs(30));
    // The operator frees space; the held profile is then written in full.
    std::fs::remove_file(&filler_path).unwrap();
    workload.wait_cpu_seconds();
    let recording = recorder.wait();
    recording.assert_ok();
    assert!(
        recording.log.contains("No space left on device"),
        "the error says why:\n{}",
        recording.log
    );
    let samples: u64 = recording.samples_of(pid);
    assert!(
        samples >= 120,
        "the ~148 samples of 1.5 s were kept and written, got {samples}:\n{}",
        recording.log
    );
}
