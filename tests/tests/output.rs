//! The output contract: atomic files with 0640 permissions, never written
//! through a planted symlink, an index that describes every file.

use std::os::unix::fs::{PermissionsExt, symlink};

use std::{io::Write, process::Command, time::Duration};

use sparkprof_tests::{
    Recorder, Workload, build_workload, merge, parse_folded, pprof_raw, pprof_raw_total,
    require_root,
};

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
        for key in ["path", "svg", "pprof"] {
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

    // Busy for longer than sparkprof's start and its 1.5 s together: the
    // workload counts its own CPU time, and one of 2 s had used about 0.8 s
    // before a slow start began recording (118 samples, stop 76's CI).
    let workload = Workload::start(&chain, &["4", "1"]);
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

/// Every file under `dir`, relative to it.
fn relative_files(dir: &std::path::Path) -> std::collections::BTreeSet<String> {
    walk(dir)
        .into_iter()
        .filter(|path| path.is_file())
        .map(|path| {
            path.strip_prefix(dir)
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

/// The files a recording's index lists (itself and its samples table
/// included).
fn listed(recording: &sparkprof_tests::Recording) -> std::collections::BTreeSet<String> {
    let mut files: std::collections::BTreeSet<String> = recording
        .files()
        .iter()
        .flat_map(|entry| {
            ["path", "svg", "pprof"].map(|key| entry[key].as_str().unwrap().to_owned())
        })
        .collect();
    files.insert("index.json".into());
    files.insert(recording.index["samples_table"].as_str().unwrap().into());
    files
}

/// A directory holds one recording: a second recording replaces the first
/// whole; a directory with anyone else's files, a second concurrent
/// recording and an output path that is a file are refused before
/// recording, and leave what is there untouched.
#[test]
fn an_output_directory_holds_one_recording() {
    require_root();
    let work = tempfile::tempdir().unwrap();
    let chain = build_workload("chain", work.path());
    let out = work.path().join("out");
    let record = |workload: &Workload| {
        let pid = workload.pid().to_string();
        Recorder::start_in(out.clone(), None, &["--duration", "1", "--pid", &pid]).wait()
    };

    let first_workload = Workload::start(&chain, &["2", "1"]);
    let first = record(&first_workload);
    first.assert_ok();
    assert_eq!(relative_files(&out), listed(&first));
    drop(first_workload);

    // Again, for another process: only the new recording's files remain.
    let second_workload = Workload::start(&chain, &["2", "1"]);
    let second = record(&second_workload);
    second.assert_ok();
    assert!(
        second.log.contains("replacing the previous recording"),
        "{}",
        second.log
    );
    assert_eq!(relative_files(&out), listed(&second));
    assert!(!second.files_of(second_workload.pid()).is_empty());

    // Someone else's file beside it: refused before recording, nothing removed.
    std::fs::write(out.join("notes.txt"), "mine").unwrap();
    let before = relative_files(&out);
    let refused = |output: &std::path::Path, extra: &[&str]| {
        let started = std::time::Instant::now();
        let result = Command::new(sparkprof_tests::sparkprof_bin())
            .args(["record", "--duration", "1", "--output"])
            .arg(output)
            .args(extra)
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        assert!(!result.status.success());
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "refused only after {:?}",
            started.elapsed()
        );
        String::from_utf8_lossy(&result.stderr).into_owned()
    };
    let stderr = refused(&out, &[]);
    assert!(
        stderr.contains("holds files that are not a sparkprof recording")
            && stderr.contains("notes.txt"),
        "{stderr}"
    );
    assert_eq!(relative_files(&out), before);
    std::fs::remove_file(out.join("notes.txt")).unwrap();

    // A second recording while one runs: refused, the first unharmed.
    let running = Recorder::start_in(out.clone(), None, &[]);
    let stderr = refused(&out, &[]);
    assert!(
        stderr.contains(&format!(
            "another sparkprof is recording into {}",
            out.display()
        )),
        "{stderr}"
    );
    running.stop_with(libc::SIGINT).assert_ok();

    // An output path that is a regular file.
    let file = work.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let stderr = refused(&file, &["--write-retry-secs", "60"]);
    assert!(stderr.contains("exists and is not a directory"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");
}

/// A disk that fills up part-way through the final write, and stays full:
/// after the retries, nothing of the recording is left behind (no folded
/// file or flame graph without an index that lists it), so the space is
/// given back and no reader mistakes a fragment for a recording.
#[test]
fn a_disk_that_stays_full_keeps_no_partial_recording() {
    require_root();
    let work = tempfile::tempdir().unwrap();
    let chain = build_workload("chain", work.path());
    // Eight busy processes: eight folded files and flame graphs (~20 KB
    // each) to write.
    let workloads: Vec<Workload> = (0..8)
        .map(|_| Workload::start(&chain, &["3", "1"]))
        .collect();
    let disk = Tmpfs::mount("2m");
    let out = disk.0.path().join("out");
    // Leave ~80 KB free: room for a few of those files, not for all.
    let free = |path: &std::path::Path| {
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
        st.f_bavail * st.f_frsize
    };
    let filler_len = free(disk.0.path()).saturating_sub(80 * 1024);
    std::fs::write(disk.0.path().join("filler"), vec![0u8; filler_len as usize]).unwrap();

    let mut args = vec!["--duration", "1.5", "--write-retry-secs", "2"];
    let pids: Vec<String> = workloads.iter().map(|w| w.pid().to_string()).collect();
    for pid in &pids {
        args.extend(["--pid", pid.as_str()]);
    }
    let recording = Recorder::start_in(out.clone(), None, &args).wait();
    assert!(
        !recording.status.success(),
        "the write cannot succeed:\n{}",
        recording.log
    );
    assert!(
        recording.log.contains("No space left on device"),
        "{}",
        recording.log
    );
    assert!(
        recording.log.contains("that no index.json lists"),
        "some files were written, then removed:\n{}",
        recording.log
    );
    let left = relative_files(&out);
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// With periodic flushes the last one rewrites only what changed; the
/// closing line still counts every file and sample that index.json lists
/// (`Recording::assert_ok` compares them).
#[test]
fn the_closing_line_agrees_with_the_index_after_periodic_flushes() {
    require_root();
    let work = tempfile::tempdir().unwrap();
    let chain = build_workload("chain", work.path());
    let recorder = Recorder::start(&["--duration", "4", "--flush-interval", "1"]);
    // Busy in the first 2.5 s only (long enough for a file of its own:
    // a process that lives 2 s or more always has one): its file is not
    // rewritten at the end.
    let early = Workload::start(&chain, &["2.5", "1"]);
    let pid = early.pid();
    early.wait_cpu_seconds();
    let recording = recorder.wait();
    recording.assert_ok();
    assert!(recording.samples_of(pid) > 50, "{}", recording.log);
    // sparkprof's own CPU by stage, over a drain a second.
    let cpu = &recording.index["pipeline_cpu"];
    let us = |field: &str| cpu[field].as_u64().unwrap();
    assert!(us("drains") >= 3, "{cpu}");
    assert!(us("collect_us") > 0 && us("symbolize_us") > 0, "{cpu}");
    for field in ["follow_us", "enrich_us", "write_us"] {
        assert!(cpu[field].is_u64(), "{field} in {cpu}");
    }
}

/// A recording killed (no flush at its end) keeps what its last checkpoint
/// counted: folded files and index.json that agree. A file that never
/// stopped changing has a stand-in twin (no samples, as Go's pprof reads
/// it) and graph, and `sparkprof merge` makes them whole from the folded
/// files, as the README says.
#[test]
fn a_killed_recording_keeps_its_checkpoint_and_merge_makes_it_whole() {
    require_root();
    let work = tempfile::tempdir().unwrap();
    let chain = build_workload("chain", work.path());
    let busy = Workload::start(&chain, &["8", "1"]);
    let pid = busy.pid();
    let recorder = Recorder::start(&["--duration", "60", "--flush-interval", "1"]);
    std::thread::sleep(Duration::from_millis(4_500));
    let recording = recorder.stop_with(libc::SIGKILL);
    assert!(!recording.status.success(), "{}", recording.log);
    let entries = recording.files_of(pid);
    let entry = entries
        .iter()
        .find(|e| e["kind"] == "cpu")
        .unwrap_or_else(|| panic!("no file of {pid} in the checkpoint: {}", recording.index));
    let counted = entry["samples"].as_u64().unwrap();
    let folded: u64 = recording.stacks(entry).iter().map(|s| s.count).sum();
    assert!(counted > 100, "{}", recording.index);
    assert_eq!(folded, counted, "the folded file and its index entry");
    // Busy all along: its file changed at every checkpoint, so its twin
    // and graph are stand-ins.
    let dir = recording.dir();
    let twin = pprof_raw(&dir.join(entry["pprof"].as_str().unwrap()));
    assert_eq!(pprof_raw_total(&twin), 0, "{twin}");
    let svg = std::fs::read_to_string(dir.join(entry["svg"].as_str().unwrap())).unwrap();
    assert!(svg.contains("Still recording"), "{svg}");
    // merge makes the twin from what the folded file holds.
    let out = work.path().join("merged");
    merge(&out, &[dir]);
    let twin = pprof_raw(&out.join(entry["pprof"].as_str().unwrap()));
    assert_eq!(pprof_raw_total(&twin), counted, "{twin}");
    let svg = std::fs::read_to_string(out.join(entry["svg"].as_str().unwrap())).unwrap();
    assert!(!svg.contains("Still recording"), "merge drew the graph");
    drop(busy);
}

/// Hundreds of processes that live a blink: one file per program, every
/// sample kept, and the processes that stay keep files of their own.
#[test]
fn process_churn_writes_a_file_per_program() {
    require_root();
    let work = tempfile::tempdir().unwrap();
    let chain = build_workload("chain", work.path());
    let stayer = Workload::start(&chain, &["4", "1"]);
    // Long enough that even a slow moment of a 2-CPU host starts the
    // hundreds this is about (6 s started 460 to 552 on one such host).
    let recorder = Recorder::start(&["--duration", "9"]);
    let started = std::time::Instant::now();
    let mut pids = Vec::new();
    let mut rounds = 0;
    // `true` as fast as it goes, a 20 ms spinner of the chain workload, and
    // `python3 -c pass`, for as long as the recording lasts.
    while started.elapsed() < Duration::from_secs(9) {
        for _ in 0..8 {
            let child = Command::new("/bin/true").spawn().unwrap();
            pids.push(child.id());
            wait(child);
        }
        let spinner = Command::new(&chain)
            .args(["0.02", "1"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        pids.push(spinner.id());
        wait(spinner);
        rounds += 1;
        if rounds % 5 == 0 {
            let python = Command::new("python3")
                .args(["-c", "pass"])
                .spawn()
                .unwrap();
            pids.push(python.id());
            wait(python);
        }
    }
    let stayer_pid = stayer.pid();
    stayer.wait_cpu_seconds();
    let recording = recorder.wait();
    recording.assert_ok();
    eprintln!("{} processes started", pids.len());
    assert!(pids.len() > 500, "{} processes started", pids.len());

    let files = recording.files();
    let short: Vec<&serde_json::Value> = files
        .iter()
        .copied()
        .filter(|f| f["path"].as_str().unwrap().starts_with("short-lived/"))
        .collect();
    // The spinners are under `chain`, or `[exited] chainworker` when they
    // were gone before sparkprof read them and only their worker thread
    // was sampled.
    let summed: u64 = short
        .iter()
        .map(|f| {
            assert!(f["pid"].is_null(), "{f}");
            f["processes"].as_u64().unwrap()
        })
        .sum();
    assert!(
        summed > 100,
        "the short-lived files sum {summed} processes: {files:#?}"
    );
    assert!(
        short
            .iter()
            .any(|f| f["path"] == "short-lived/chain.cpu.folded"),
        "{files:#?}"
    );
    for entry in &short {
        for stack in recording.stacks(entry) {
            assert!(
                stack.frames[0].ends_with(" [short-lived]"),
                "{:?}",
                stack.frames
            );
        }
    }
    // None of the blinks has a file of its own; the process that stayed has.
    for entry in &files {
        if let Some(pid) = entry["pid"].as_u64() {
            assert!(
                !pids.contains(&(pid as u32)),
                "a process that lived a blink has its own file: {entry}"
            );
        }
    }
    assert!(recording.samples_of(stayer_pid) > 200, "{}", recording.log);
    assert!(
        files.len() < 60,
        "{} files for {} processes",
        files.len(),
        pids.len()
    );
    // Every sample the kernel counted is in a file.
    let stats = &recording.index["stats"];
    let counted = stats["samples"].as_u64().unwrap()
        - stats["idle"].as_u64().unwrap()
        - stats["filtered"].as_u64().unwrap();
    let written: u64 = files
        .iter()
        .filter(|f| f["kind"] == "cpu")
        .map(|f| f["samples"].as_u64().unwrap())
        .sum();
    assert_eq!(written, counted, "samples written and counted");
}

fn wait(mut child: std::process::Child) {
    assert!(child.wait().unwrap().success());
}
