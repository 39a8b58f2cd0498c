//! The rename programs: the `task_rename` tracepoint (renames by the thread
//! itself and by another one) and the name-setter uprobe, placed by the
//! JVM runtime's own symbol lookup on this binary's stand-in for HotSpot's
//! `os::set_native_thread_name`.

use std::{collections::HashSet, ffi::CString, thread, time::Duration};

use sparkprof::{
    collect::{
        Collector, Drain,
        renames::{RenameSource, ThreadRename},
    },
    runtime::jvm::thread_names::native_name::set_native_thread_name_offset,
};

use crate::{
    drain, on_cpu_samples, sum,
    workload::{self, Worker},
};

/// Renames a worker with `rename` for each of `names`, then spins; returns
/// what the drain after it announced and counted.
fn renamed_worker(
    collector: &mut Collector,
    names: &'static [&'static str],
    rename: fn(&CString),
) -> Result<(u32, Drain), String> {
    drain(collector)?;
    let worker = Worker::spawn(move |stop| {
        for name in names {
            rename(&CString::new(*name).expect("no NUL"));
            thread::sleep(Duration::from_millis(20));
        }
        workload::sparkprof_vm_spin(stop);
    });
    thread::sleep(Duration::from_millis(20 * names.len() as u64 + 800));
    let drained = drain(collector)?;
    let tid = worker.tid;
    worker.finish();
    Ok((tid, drained))
}

/// The renames of `tid` from `source` carry `names` in order with rising
/// epochs, and the thread's later samples the last epoch.
fn check_renames(
    drained: &Drain,
    tid: u32,
    source: RenameSource,
    names: &[&str],
) -> Result<String, String> {
    let renames: Vec<&ThreadRename> = drained
        .renames
        .iter()
        .filter(|r| r.tid == tid && r.source == source)
        .collect();
    let got: Vec<&str> = renames.iter().map(|r| r.name.as_str()).collect();
    if got != names {
        return Err(format!(
            "renames announced for the thread: {got:?}, expected {names:?}"
        ));
    }
    if renames.iter().any(|r| r.truncated) {
        return Err(format!("a name was cut: {renames:?}"));
    }
    let epochs: Vec<u32> = renames.iter().map(|r| r.epoch).collect();
    if !epochs.windows(2).all(|w| w[0] < w[1]) || epochs.first() == Some(&0) {
        return Err(format!("epochs do not rise: {epochs:?}"));
    }
    let announced: HashSet<u32> = drained
        .renames
        .iter()
        .filter(|r| r.tid == tid)
        .map(|r| r.epoch)
        .collect();
    let last = *epochs.last().expect("names is not empty");
    let total = sum(on_cpu_samples(drained, tid).map(|s| s.count));
    let at_last = sum(on_cpu_samples(drained, tid)
        .filter(|s| s.name_epoch == last)
        .map(|s| s.count));
    if let Some(stray) = on_cpu_samples(drained, tid)
        .find(|s| s.name_epoch != 0 && !announced.contains(&s.name_epoch))
    {
        return Err(format!(
            "a sample at epoch {} that no rename announced (announced: {announced:?})",
            stray.name_epoch
        ));
    }
    if total == 0 || (at_last as f64) < 0.9 * total as f64 {
        return Err(format!(
            "{at_last} of {total} samples of the renamed thread carry its last epoch {last}"
        ));
    }
    Ok(format!(
        "{} renames with epochs {epochs:?}; {at_last} of {total} samples after them at epoch {last}",
        names.len()
    ))
}

const COMM_NAMES: &[&str] = &["vmt-rename-1", "vmt-rename-2", "vmt-rename-3"];

/// Puts this process in the task_rename tracepoint's watch list.
fn watch_through_task_rename(collector: &mut Collector, pid: u32) -> Result<(), String> {
    collector
        .watch_renames(pid)
        .map_err(|reason| format!("the tracepoint does not watch this process: {reason}"))
}

pub fn check_task_rename(collector: &mut Collector, pid: u32) -> Result<String, String> {
    watch_through_task_rename(collector, pid)?;
    let (tid, drained) = renamed_worker(collector, COMM_NAMES, |name| {
        if let Err(err) = workload::set_comm(name) {
            eprintln!("{err}");
        }
    })?;
    check_renames(&drained, tid, RenameSource::TaskRename, COMM_NAMES)
}

const OTHER_NAMES: &[&str] = &["vmt-other-1", "vmt-other-2"];

/// A spinning thread renamed by this one through
/// `/proc/self/task/TID/comm`: the tracepoint runs in the writer's context,
/// so only `task_struct.pid` tells which thread was renamed.
pub fn check_task_rename_by_another(collector: &mut Collector, pid: u32) -> Result<String, String> {
    watch_through_task_rename(collector, pid)?;
    drain(collector)?;
    let spinner = Worker::spawn(|stop| {
        workload::sparkprof_vm_spin(stop);
    });
    let tid = spinner.tid;
    for name in OTHER_NAMES {
        let path = format!("/proc/self/task/{tid}/comm");
        if let Err(err) = std::fs::write(&path, name) {
            spinner.finish();
            return Err(format!("writing {path}: {err}"));
        }
        thread::sleep(Duration::from_millis(20));
    }
    thread::sleep(Duration::from_millis(800));
    let drained = drain(collector)?;
    spinner.finish();
    check_renames(&drained, tid, RenameSource::TaskRename, OTHER_NAMES)
}

const JVM_NAMES: &[&str] = &[
    "Executor task launch worker for task 1.0 in stage 2.0 (TID 3)",
    "Executor task launch worker for task 4.0 in stage 5.0 (TID 6)",
];

pub fn check_uprobe(collector: &mut Collector, _pid: u32) -> Result<String, String> {
    let exe =
        std::fs::read_link("/proc/self/exe").map_err(|err| format!("/proc/self/exe: {err}"))?;
    let offset = set_native_thread_name_offset(&exe)
        .map_err(|err| format!("the JVM runtime's symbol lookup: {err}"))?;
    collector
        .attach_name_setter(&exe, offset)
        .map_err(|err| format!("the uprobe on {}+{offset:#x}: {err}", exe.display()))?;
    let (tid, drained) = renamed_worker(collector, JVM_NAMES, |name| {
        workload::call_set_native_thread_name(name);
    })?;
    check_renames(&drained, tid, RenameSource::JvmNativeName, JVM_NAMES)
}
