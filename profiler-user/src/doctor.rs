//! `sparkprof doctor`: what this host offers and lacks for profiling, in
//! plain text an operator can act on.

use std::{collections::HashMap, fmt::Write as _, fs, os::unix::fs::MetadataExt as _, path::Path};

use crate::sys::{caps::Capabilities, proc::Mapping, sysctl};
use crate::{collect::btf::KernelTypes, enrich::Runtime};

/// A JVM found on the host, and whether its stacks can be walked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JvmReport {
    pub pid: u32,
    pub main: String,
    pub preserve_frame_pointer: bool,
    /// How its JIT frames get named.
    pub jit_names: String,
    /// Where its threads' full names (Spark stage and task) come from.
    pub thread_names: String,
    /// Whether its own structures (VMStructs, code cache, methods) can be
    /// read, and what they hold; else why not. Readable: `record` walks
    /// its Java frames from them.
    pub hotspot: Result<String, String>,
    /// Its Spark role and IDs.
    pub spark: String,
}

/// What `record` attaches its tracepoint programs by (BTF, never tracefs),
/// and whether this kernel has each one.
fn tracepoints() -> String {
    let tracefs = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .into_iter()
        .find(|root| Path::new(root).join("events").is_dir())
        .map_or("tracefs not mounted, not needed".to_owned(), |root| {
            format!("tracefs at {root}, not used")
        });
    let kernel = match KernelTypes::read() {
        Ok(kernel) => kernel,
        Err(err) => return format!("NONE: {err}; {tracefs}"),
    };
    let uses = [
        ("sched_switch", "--off-cpu"),
        ("sched_process_exit", "--off-cpu"),
        (
            "task_rename",
            "thread names of JVMs without the rename symbol",
        ),
        (
            "sched_process_fork",
            "Python frames of forked children from their fork",
        ),
        (
            "sched_process_exec",
            "Python frames of forked children from their fork",
        ),
    ];
    let missing: Vec<String> = uses
        .iter()
        .filter(|(event, _)| !kernel.has_tracepoint(event))
        .map(|(event, needed_by)| format!("{event} MISSING ({needed_by} unavailable)"))
        .collect();
    let pid = match kernel.member_offset("task_struct", "pid") {
        Ok(offset) => format!("task_struct.pid at {offset}"),
        Err(err) => format!("{err}: renames of a thread by another one are lost"),
    };
    if missing.is_empty() {
        format!(
            "by BTF (sched_switch, sched_process_exit, task_rename, sched_process_fork, \
             sched_process_exec; {pid}); {tracefs}"
        )
    } else {
        format!("by BTF: {}; {pid}; {tracefs}", missing.join(", "))
    }
}

/// Builds the doctor report.
pub fn report() -> String {
    let mut out = String::new();
    let line = |out: &mut String, key: &str, value: String| {
        let _ = writeln!(out, "{key:<24} {value}");
    };

    line(
        &mut out,
        "kernel",
        sysctl::read("kernel/osrelease").unwrap_or_else(|e| format!("unknown ({e})")),
    );
    line(
        &mut out,
        "btf",
        if Path::new("/sys/kernel/btf/vmlinux").exists() {
            "yes (/sys/kernel/btf/vmlinux)".into()
        } else {
            "no: kernel built without CONFIG_DEBUG_INFO_BTF".into()
        },
    );
    let paranoid =
        sysctl::read("kernel/perf_event_paranoid").unwrap_or_else(|e| format!("unknown ({e})"));
    line(
        &mut out,
        "perf_event_paranoid",
        format!(
            "{paranoid} (does not matter with CAP_PERFMON or CAP_SYS_ADMIN, which sparkprof requires)"
        ),
    );
    let kptr = sysctl::read("kernel/kptr_restrict").unwrap_or_else(|e| format!("unknown ({e})"));
    let kallsyms = if kallsyms_readable() {
        "kernel symbols readable"
    } else {
        "kernel symbols UNREADABLE: kernel frames will show as addresses; run as root or set kernel.kptr_restrict=0"
    };
    line(&mut out, "kptr_restrict", format!("{kptr} ({kallsyms})"));
    let max_stack =
        sysctl::read("kernel/perf_event_max_stack").unwrap_or_else(|e| format!("unknown ({e})"));
    line(
        &mut out,
        "perf_event_max_stack",
        format!(
            "{max_stack} frames (deeper stacks are cut and marked [truncated]; `record --max-stack-depth N` raises it for a recording)"
        ),
    );
    line(&mut out, "tracepoints", tracepoints());
    line(
        &mut out,
        "hardware PMU",
        if Path::new("/sys/bus/event_source/devices/cpu").exists() {
            "present (sparkprof samples the software cpu-clock event either way)".into()
        } else {
            "absent (fine: sparkprof samples the software cpu-clock event)".into()
        },
    );
    let caps = Capabilities::current();
    line(&mut out, "capabilities", caps.describe().join(", "));
    let missing = caps.missing_for_record();
    line(
        &mut out,
        "can record",
        if missing.is_empty() {
            "yes".into()
        } else {
            format!("no: missing {} (run as root)", missing.join(", "))
        },
    );

    let jvms = jvms();
    line(&mut out, "JVMs", jvms.len().to_string());
    for jvm in jvms {
        let fp = match (&jvm.hotspot, jvm.preserve_frame_pointer) {
            (Ok(_), true) => {
                "Java stacks walked by sparkprof; -XX:+PreserveFramePointer is set and not needed"
            }
            (Ok(_), false) => {
                "Java stacks walked by sparkprof: whole without -XX:+PreserveFramePointer"
            }
            (Err(_), true) => {
                "-XX:+PreserveFramePointer: full Java stacks (by frame pointers only, see below)"
            }
            (Err(_), false) => {
                "no -XX:+PreserveFramePointer and HotSpot structures unreadable: Java stacks \
                 will be cut short; add the flag"
            }
        };
        let _ = writeln!(out, "  pid {:<8} {:<40} {fp}", jvm.pid, jvm.main);
        let _ = writeln!(out, "  {:<12} Spark: {}", "", jvm.spark);
        let _ = writeln!(out, "  {:<12} JIT names: {}", "", jvm.jit_names);
        let _ = writeln!(out, "  {:<12} thread names: {}", "", jvm.thread_names);
        let hotspot = match &jvm.hotspot {
            Ok(readable) => readable.clone(),
            Err(why) => format!("not readable: {why}"),
        };
        let _ = writeln!(out, "  {:<12} HotSpot structures: {hotspot}", "");
    }
    out
}

fn kallsyms_readable() -> bool {
    fs::read_to_string("/proc/kallsyms")
        .ok()
        .and_then(|text| {
            text.lines()
                .take(64)
                .map(|l| l.split(' ').next().unwrap_or("0").to_owned())
                .find(|addr| addr.chars().any(|c| c != '0'))
        })
        .is_some()
}

/// Running JVMs: processes that map libjvm.so.
pub fn jvms() -> Vec<JvmReport> {
    let mut found = Vec::new();
    let mut rename_symbols = HashMap::new();
    for pid in crate::sys::proc::pids() {
        let Ok(maps) = crate::sys::proc::read_maps(pid) else {
            continue;
        };
        let runtime = Runtime::from_maps(&maps);
        let Some(libjvm) = runtime.libjvm() else {
            continue;
        };
        let args = crate::sys::proc::cmdline(pid).unwrap_or_default();
        // As the JVM takes it: the last of -XX:+/-PreserveFramePointer in
        // JAVA_TOOL_OPTIONS, JDK_JAVA_OPTIONS and the command line; off if none.
        let preserve_frame_pointer = perf_maps::attach::jvm_flags(pid)
            .ok()
            .and_then(|flags| flags.preserve_frame_pointer)
            .unwrap_or(false);
        found.push(JvmReport {
            pid,
            main: java_main(&args),
            preserve_frame_pointer,
            jit_names: jit_names(pid),
            thread_names: thread_names(pid, libjvm, &mut rename_symbols),
            hotspot: hotspot(pid, &maps),
            spark: spark_identity(pid),
        });
    }
    found.sort_by_key(|j| j.pid);
    found
}

/// Whether the JVM's own structures can be read as `record` reads them
/// (its exported VMStructs, the layout sparkprof needs from them, its code
/// cache, what the kernel's walker gets, and the names of its compiled
/// methods), and if not why.
fn hotspot(pid: u32, maps: &[Mapping]) -> Result<String, String> {
    use crate::runtime::jvm::hotspot::process::HotspotProcess;
    let process = HotspotProcess::read(pid, Some(maps), Default::default(), &Default::default())
        .map_err(|err| err.to_string())?;
    process.proc_info().map_err(|err| err.to_string())?;
    let census = process.census();
    Ok(format!(
        "readable ({}; {} code heaps, {} compiled methods, {} named from the JVM's memory)",
        census.shape, census.heaps, census.compiled, census.named
    ))
}

/// Whether sparkprof can keep this JVM's perf map current, and if not why.
fn jit_names(pid: u32) -> String {
    let existing = match perf_maps::discovery::perf_map_path(pid) {
        Ok(path) if path.exists() => "an existing perf map is used",
        _ => "no perf map on disk",
    };
    match perf_maps::attach::jvm_major_version(pid) {
        Ok(major) if major < 17 => {
            format!("JDK {major}: cannot be refreshed (Compiler.perfmap needs JDK 17+); {existing}")
        }
        Ok(major) => match perf_maps::check_attachable(pid) {
            Ok(()) => match perf_maps::Jvm::new(pid)
                .ok()
                .and_then(|jvm| jvm.perf_map_hazard())
            {
                None => format!(
                    "JDK {major}: perf map refreshed by sparkprof through the attach mechanism"
                ),
                Some(hazard) => {
                    format!("JDK {major}: NOT asked to write its perf map: {hazard}")
                }
            },
            Err(err) => format!("JDK {major}: not refreshed ({err}); {existing}"),
        },
        Err(err) => format!("unknown JDK version ({err}); {existing}"),
    }
}

/// Where a JVM's full thread names would come from in a recording: the
/// rename uprobe when its libjvm.so has the symbol (looked up once per file),
/// else the task_rename tracepoint and thread dumps.
fn thread_names(
    pid: u32,
    libjvm: &str,
    symbols: &mut HashMap<(u64, u64), Result<u64, String>>,
) -> String {
    let path = format!("/proc/{pid}/root{libjvm}");
    let offset = match fs::metadata(&path) {
        Ok(meta) => symbols
            .entry((meta.dev(), meta.ino()))
            .or_insert_with(|| {
                crate::runtime::jvm::thread_names::native_name::set_native_thread_name_offset(
                    Path::new(&path),
                )
                .map_err(|err| err.to_string())
            })
            .clone(),
        Err(err) => Err(format!("cannot open {path}: {err}")),
    };
    let dumps = match perf_maps::check_attachable(pid) {
        Ok(()) => "thread dumps (jcmd Thread.print) fill in names given before".to_owned(),
        Err(err) => format!(
            "no thread dumps ({err}): names given before sparkprof starts stay cut to 15 bytes"
        ),
    };
    match offset {
        Ok(offset) => format!("exact, from a uprobe on {libjvm}+{offset:#x}; {dumps}"),
        Err(reason) => format!(
            "from thread dumps after each rename (task_rename tracepoint), not exact for tasks shorter than a second: {reason}"
        ),
    }
}

/// The JVM's Spark role and IDs, e.g. `executor 1 of app-...`.
fn spark_identity(pid: u32) -> String {
    let spark = crate::enrich::spark::classify_pid(pid);
    let mut text = spark.role.as_str().to_owned();
    if let Some(executor) = &spark.executor_id {
        let _ = write!(text, " {executor}");
    }
    if let Some(app) = &spark.app_id {
        let _ = write!(text, " of {app}");
    }
    text
}

/// The main class or `-jar` file of a java command line.
fn java_main(args: &[String]) -> String {
    let mut iter = args.iter().skip(1);
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "-cp" | "-classpath" | "--class-path" | "-p" | "--module-path" | "--add-opens"
            | "--add-exports" => {
                iter.next();
            }
            "-jar" => return iter.next().cloned().unwrap_or_default(),
            a if a.starts_with('-') => {}
            a => return a.to_owned(),
        }
    }
    String::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_main_class() {
        let args: Vec<String> = [
            "java",
            "-cp",
            "/x:/y",
            "-Xmx1g",
            "org.apache.spark.executor.CoarseGrainedExecutorBackend",
            "--executor-id",
            "1",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            java_main(&args),
            "org.apache.spark.executor.CoarseGrainedExecutorBackend"
        );
        let args: Vec<String> = ["java", "-jar", "app.jar"].map(String::from).to_vec();
        assert_eq!(java_main(&args), "app.jar");
    }
}
