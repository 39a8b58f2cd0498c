//! The `sparkprof` binary: a thin command line over the library.

use std::{path::PathBuf, process::ExitCode, time::Duration};

use clap::{Parser, Subcommand};
use perf_maps::NameStyle;
use sparkprof::{
    doctor,
    record::{RecordError, RecordOptions, record},
    runtime::jvm::{JitOptions, JvmOptions},
    sys::cgroup::CgroupScope,
    write::WriteOptions,
};

#[derive(Parser)]
#[command(
    name = "sparkprof",
    version,
    about = "System-wide eBPF profiler for Spark worker hosts"
)]
struct Cli {
    /// Log filter (also RUST_LOG), e.g. `info`, `sparkprof=debug`.
    #[arg(long, global = true, default_value = "info")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Profile the host and write folded stacks, flame graphs and index.json.
    Record(RecordArgs),
    /// Profile the host for as long as it runs, in windows, in bounded memory and disk.
    Daemon(DaemonArgs),
    /// Print a daemon's status (its DIR/status.json) for a person.
    Status {
        /// The daemon's directory.
        dir: PathBuf,
    },
    /// Add up recordings (or daemon directories) of many hosts into one
    /// directory of the same layout, with stage files summed over executors.
    Merge {
        /// Output directory (new, empty, or a previous merge's).
        #[arg(long, short)]
        output: PathBuf,
        /// Recordings, daemon windows or daemon directories.
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
    },
    /// Print what this host offers and lacks for profiling.
    Doctor,
}

#[derive(clap::Args)]
struct RecordArgs {
    /// Seconds to record; without it, record until SIGINT, SIGTERM or SIGHUP.
    #[arg(long, short, value_parser = positive_seconds)]
    duration: Option<Duration>,
    /// Output directory.
    #[arg(long, short, default_value = "profiles")]
    output: PathBuf,
    /// Seconds between rewrites of the output files during a long recording
    /// (a flame graph is drawn once its file settles, else at most every 10
    /// minutes, until it ends).
    #[arg(long, default_value_t = 60)]
    flush_interval: u64,
    /// Seconds to keep retrying the final write when it fails (e.g. a full disk).
    #[arg(long, default_value_t = 60)]
    write_retry_secs: u64,
    #[command(flatten)]
    sampling: SamplingArgs,
}

#[derive(clap::Args)]
struct DaemonArgs {
    /// The daemon's directory: `windows/`, `apps/` and `status.json` go here.
    #[arg(long, short)]
    output: PathBuf,
    /// Seconds per window (each written as `DIR/windows/<UTC start>/`).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    window: u64,
    /// Most MiB the directory may hold: the oldest windows go first, then
    /// the oldest completed roll-ups.
    #[arg(long, default_value_t = 2048, value_parser = clap::value_parser!(u64).range(1..))]
    max_disk: u64,
    /// Hours a window is kept.
    #[arg(long, default_value_t = 72.0)]
    retain: f64,
    /// MiB to leave free on the directory's file system: below it, windows
    /// are not written (their samples are counted in status.json) until
    /// there is room again.
    #[arg(long, default_value_t = sparkprof::daemon::DEFAULT_MIN_FREE >> 20)]
    min_free: u64,
    /// Where the state that lets a restart undo a crash is kept.
    #[arg(long, default_value = sparkprof::daemon::state::DEFAULT_STATE_DIR)]
    state_dir: PathBuf,
    /// Stop after this many seconds (for tests and benchmarks; a service runs
    /// until SIGTERM).
    #[arg(long, value_parser = positive_seconds, hide = true)]
    duration: Option<Duration>,
    #[command(flatten)]
    sampling: SamplingArgs,
}

/// What `record` and `daemon` share: what is sampled and how it is named.
#[derive(clap::Args)]
struct SamplingArgs {
    /// Samples per second on each CPU.
    #[arg(long, short = 'F', default_value_t = 99)]
    frequency: u64,
    /// Only these processes (repeatable).
    #[arg(long = "pid", short)]
    pids: Vec<u32>,
    /// Only what runs in this cgroup (v2) or below it, e.g. a YARN NodeManager's
    /// `/sys/fs/cgroup/hadoop-yarn`: processes that start in it later are recorded too.
    #[arg(long, value_name = "DIR", conflicts_with = "pids")]
    cgroup: Option<PathBuf>,
    /// Raise kernel.perf_event_max_stack to N frames for this recording (restored afterwards).
    #[arg(long)]
    max_stack_depth: Option<u32>,
    /// Milliseconds between drains of the kernel maps.
    #[arg(long, default_value_t = sparkprof::record::DEFAULT_DRAIN_INTERVAL.as_millis() as u64)]
    drain_interval_ms: u64,
    /// Entries of each stack map (default: sized from CPUs, frequency and depth).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=MAX_STACK_MAP_ENTRIES))]
    stack_map_entries: Option<u32>,
    /// Never attach to JVMs; name JIT frames only from perf maps already there.
    #[arg(long)]
    no_jvm_attach: bool,
    /// Do not walk Java frames from HotSpot's own structures: walk JVM stacks by
    /// frame pointers and name JIT frames from perf maps, as for a JVM whose
    /// structures cannot be read (Java stacks are then cut short without
    /// -XX:+PreserveFramePointer).
    #[arg(long)]
    no_java_walk: bool,
    /// Keep the perf maps sparkprof caused JVMs to write (default: removed at the end).
    #[arg(long)]
    keep_perf_maps: bool,
    /// Also record off-CPU time (where JVM and Python threads wait, from sched_switch):
    /// `.offcpu.folded` files beside the on-CPU ones, counts in microseconds.
    #[arg(long)]
    off_cpu: bool,
    /// With --off-cpu: shorter blocked periods are not counted (microseconds).
    #[arg(long, default_value_t = 100, requires = "off_cpu")]
    min_block_us: u64,
    /// Where full Java thread names (Spark stage and task) come from: `auto` uses a
    /// uprobe on libjvm.so's rename function (exact) and falls back to thread dumps;
    /// `dumps` never places the uprobe (task_rename tracepoint + jcmd Thread.print).
    #[arg(long, value_enum, default_value_t = ThreadNames::Auto)]
    thread_names: ThreadNames,
    /// In Spark stage files, name each task in the thread frame (`task 3.0 TID 57`) so a
    /// flame graph splits per task (default: all tasks of a stage merge).
    #[arg(long)]
    task_frames: bool,
    /// Per cent of a JVM's time that refreshing its perf map may take: after a
    /// refresh that took d, the next waits d / (PCT/100). Higher names more
    /// freshly compiled code, lower costs the JVM less.
    #[arg(long, default_value_t = 1.0, value_name = "PCT", value_parser = budget_percent)]
    jit_dump_budget: f64,
    /// Java frames with the JDK's full signatures instead of `pkg.Class.method`.
    #[arg(long)]
    java_signatures: bool,
    /// Append the name given to every JIT frame, with its address and drain
    /// window, to FILE (for `cargo xtask bench --only jit`).
    #[arg(long, value_name = "FILE", hide = true)]
    jit_audit: Option<PathBuf>,
}

/// Most entries `--stack-map-entries` takes (16 Mi: gigabytes of kernel
/// memory at the default depth already).
const MAX_STACK_MAP_ENTRIES: i64 = 1 << 24;

/// Most seconds `--duration` takes: ten years.
const MAX_DURATION_SECS: f64 = 10.0 * 365.0 * 86_400.0;

/// `--duration`: a positive, finite number of seconds, at most ten years.
fn positive_seconds(text: &str) -> Result<Duration, String> {
    let seconds: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !seconds.is_finite() || seconds <= 0.0 || seconds > MAX_DURATION_SECS {
        return Err(format!(
            "{text:?}: the duration must be more than 0 and at most {MAX_DURATION_SECS} seconds (ten years); \
             leave it out to record until a signal"
        ));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// `--jit-dump-budget`: a per cent above 0 and at most 100.
fn budget_percent(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(pct) if pct.is_finite() && pct > 0.0 && pct <= 100.0 => Ok(pct),
        _ => Err(format!("{text:?}: a per cent above 0 and at most 100")),
    }
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ThreadNames {
    Auto,
    Dumps,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&cli.log));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();

    match cli.command {
        Command::Doctor => {
            print!("{}", doctor::report());
            ExitCode::SUCCESS
        }
        Command::Record(args) => run_record(args),
        Command::Daemon(args) => run_daemon(args),
        Command::Merge { output, dirs } => match sparkprof::merge::merge(&output, &dirs) {
            Ok(summary) => {
                eprintln!(
                    "sparkprof: merged {} recordings of {} ({}) into {}: {} files",
                    summary.sources,
                    if summary.hosts.len() == 1 {
                        "1 host".to_owned()
                    } else {
                        format!("{} hosts", summary.hosts.len())
                    },
                    summary.hosts.join(", "),
                    output.display(),
                    summary.files
                );
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("sparkprof: merge: {err}");
                ExitCode::FAILURE
            }
        },
        Command::Status { dir } => match sparkprof::daemon::status::Status::read(&dir) {
            Ok(status) => {
                print!("{}", status.render());
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!(
                    "sparkprof: no daemon status in {}: {err}",
                    dir.join(sparkprof::daemon::status::STATUS).display()
                );
                ExitCode::FAILURE
            }
        },
    }
}

/// The recording options `args` make, writing into `output`.
fn record_options(
    args: SamplingArgs,
    output: PathBuf,
    duration: Option<Duration>,
) -> Result<RecordOptions, ExitCode> {
    if args.frequency == 0 || args.frequency > 100_000 {
        eprintln!("sparkprof: --frequency must be between 1 and 100000 Hz");
        return Err(ExitCode::from(2));
    }
    let cgroup = match args.cgroup.as_deref().map(CgroupScope::open).transpose() {
        Ok(cgroup) => cgroup,
        Err(err) => {
            eprintln!("sparkprof: {err}");
            return Err(ExitCode::from(2));
        }
    };
    Ok(RecordOptions {
        duration,
        frequency_hz: args.frequency,
        output,
        pids: args.pids,
        cgroup,
        max_stack_depth: args.max_stack_depth,
        drain_interval: Duration::from_millis(args.drain_interval_ms.max(10)),
        flush_interval: Duration::from_secs(60),
        stack_map_entries: args.stack_map_entries,
        write_retry: Duration::from_secs(60),
        jvm: JvmOptions {
            jit: JitOptions {
                attach: !args.no_jvm_attach,
                keep_maps: args.keep_perf_maps,
                name_style: if args.java_signatures {
                    NameStyle::Full
                } else {
                    NameStyle::Readable
                },
                audit: args.jit_audit,
                dump_budget: args.jit_dump_budget / 100.0,
                ..JitOptions::default()
            },
            rename_uprobe: args.thread_names == ThreadNames::Auto,
            walk: !args.no_java_walk,
        },
        write: WriteOptions {
            task_frames: args.task_frames,
            ..WriteOptions::default()
        },
        off_cpu_min_block: args
            .off_cpu
            .then(|| Duration::from_micros(args.min_block_us)),
    })
}

fn tokio_runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|err| {
            eprintln!("sparkprof: cannot start the runtime: {err}");
            ExitCode::FAILURE
        })
}

/// An error chain on one line.
fn chain(err: impl Into<anyhow::Error>) -> String {
    err.into()
        .chain()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join(": ")
}

fn run_daemon(args: DaemonArgs) -> ExitCode {
    if !(args.retain.is_finite() && args.retain > 0.0) {
        eprintln!("sparkprof: --retain must be a positive number of hours");
        return ExitCode::from(2);
    }
    let record = match record_options(args.sampling, args.output, args.duration) {
        Ok(options) => options,
        Err(code) => return code,
    };
    let options = sparkprof::daemon::DaemonOptions {
        record,
        window: Duration::from_secs(args.window),
        max_disk_bytes: args.max_disk << 20,
        retain: Duration::from_secs_f64(args.retain * 3600.0),
        min_free_bytes: args.min_free << 20,
        state_dir: args.state_dir,
    };
    let runtime = match tokio_runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    match runtime.block_on(sparkprof::daemon::run(options)) {
        Ok(summary) => {
            eprintln!(
                "sparkprof: daemon stopped: {} windows written, {} skipped, {} samples",
                summary.windows_written, summary.windows_skipped, summary.samples
            );
            ExitCode::SUCCESS
        }
        Err(sparkprof::daemon::DaemonError::Record(err @ RecordError::MissingCapabilities(_))) => {
            eprintln!("sparkprof: {err}");
            ExitCode::from(77)
        }
        Err(err) => {
            eprintln!("sparkprof: {}", chain(err));
            ExitCode::FAILURE
        }
    }
}

fn run_record(args: RecordArgs) -> ExitCode {
    let mut options = match record_options(args.sampling, args.output, args.duration) {
        Ok(options) => options,
        Err(code) => return code,
    };
    options.flush_interval = Duration::from_secs(args.flush_interval.max(1));
    options.write_retry = Duration::from_secs(args.write_retry_secs);
    let runtime = match tokio_runtime() {
        Ok(runtime) => runtime,
        Err(code) => return code,
    };
    match runtime.block_on(record(options)) {
        Ok(summary) => {
            eprintln!(
                "sparkprof: {} samples in {} files written to {} ({:.1}s{}; kernel: {} samples, {} dropped, {} stacks lost)",
                summary.samples,
                summary.files,
                summary.output.display(),
                summary.elapsed.as_secs_f64(),
                if summary.interrupted {
                    ", interrupted"
                } else {
                    ""
                },
                summary.stats.samples,
                summary.stats.dropped_count_map_full,
                summary.stats.user_stacks_lost + summary.stats.kernel_stacks_lost,
            );
            ExitCode::SUCCESS
        }
        Err(err @ RecordError::MissingCapabilities(_)) => {
            eprintln!("sparkprof: {err}");
            ExitCode::from(77)
        }
        Err(err) => {
            eprintln!("sparkprof: {}", chain(err));
            ExitCode::FAILURE
        }
    }
}
