//! `sparkprof record`: runs the pipeline collect → enrich → symbolize → write
//! until the duration ends or SIGINT/SIGTERM/SIGHUP arrives, draining the kernel
//! maps periodically and flushing output files along the way and at the end.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use thiserror::Error;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tracing::{error, info, warn};

use crate::{
    collect::{CollectError, Collector, CollectorConfig, KernelStats, off_cpu::OffCpuConfig},
    enrich::{Discovered, Enricher, ProcessInfo},
    runtime::{Runtime, Runtimes, jvm::JvmOptions},
    symbolize::Symbolizer,
    sys::{
        caps::Capabilities,
        cgroup::CgroupScope,
        cpu::{Stage, StageCpu, process_cpu},
        proc::{self, Mapping},
        sysctl,
    },
    write::{
        WriteOptions, Writer,
        index::Header,
        output_dir::{OutputDir, OutputDirError},
    },
};

/// The sysctl that caps stack depth for `bpf_get_stackid`.
pub const MAX_STACK_SYSCTL: &str = "kernel/perf_event_max_stack";
/// The deepest stack sparkprof asks for.
pub const MAX_STACK_DEPTH_LIMIT: u32 = 4_096;
/// Pause between attempts to write the final output.
const WRITE_RETRY_PERIOD: Duration = Duration::from_secs(2);
/// Memory budget of one stack map (there are two, double-buffered).
const STACK_MAP_BUDGET_BYTES: u64 = 64 << 20;

/// Options of one recording.
#[derive(Debug, Clone)]
pub struct RecordOptions {
    /// Stop after this long; `None` records until SIGINT/SIGTERM/SIGHUP.
    pub duration: Option<Duration>,
    pub frequency_hz: u64,
    pub output: PathBuf,
    /// Only these processes (empty: the whole host).
    pub pids: Vec<u32>,
    /// Only what runs in this cgroup or below it (`--cgroup`).
    pub cgroup: Option<CgroupScope>,
    /// Raise `kernel.perf_event_max_stack` to this for the recording.
    pub max_stack_depth: Option<u32>,
    /// How often the kernel maps are drained.
    pub drain_interval: Duration,
    /// How often output files are rewritten during a long recording.
    pub flush_interval: Duration,
    /// Override the stack map size.
    pub stack_map_entries: Option<u32>,
    /// How long to keep retrying the final write when it fails.
    pub write_retry: Duration,
    /// How JVMs' JIT frames and thread names are found.
    pub jvm: JvmOptions,
    /// How output is drawn.
    pub write: WriteOptions,
    /// Record off-CPU time too, counting blocked periods at least this long.
    pub off_cpu_min_block: Option<Duration>,
}

/// Why a recording could not run or finish.
#[derive(Debug, Error)]
pub enum RecordError {
    #[error(
        "missing capabilities: {missing}. Run as root, or grant them: sudo setcap {missing}+ep {exe}",
        missing = .0.join(","),
        exe = std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_else(|_| "sparkprof".into())
    )]
    MissingCapabilities(Vec<&'static str>),
    #[error("--max-stack-depth must be between 1 and {MAX_STACK_DEPTH_LIMIT}, not {0}")]
    BadStackDepth(u32),
    #[error("--pid {0}: no such process")]
    NoSuchProcess(u32),
    #[error(
        "--pid {0}: a kernel thread ({1}); sparkprof profiles user processes (their kernel stacks included)"
    )]
    KernelThread(u32, String),
    #[error("cannot read or raise kernel.perf_event_max_stack: {0}")]
    StackSysctl(std::io::Error),
    #[error(transparent)]
    Collect(#[from] CollectError),
    #[error(transparent)]
    Output(#[from] OutputDirError),
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
    #[error(
        "writing the output failed (the profile is still in memory and was not lost until now): {0}"
    )]
    Write(std::io::Error),
}

/// What a finished recording produced.
#[derive(Debug, Clone)]
pub struct Summary {
    pub output: PathBuf,
    /// Folded files `index.json` lists.
    pub files: usize,
    /// On-CPU samples in them.
    pub samples: u64,
    pub stats: KernelStats,
    pub elapsed: Duration,
    pub interrupted: bool,
}

/// Stack map entries for a recording: room for several times the samples one
/// drain interval can bring (so hash collisions stay rare), within a memory
/// budget. The kernel rounds up to a power of two.
pub fn stack_map_entries(
    cpus: u32,
    frequency_hz: u64,
    drain_interval: Duration,
    depth: u32,
) -> u32 {
    let wanted =
        (samples_per_interval(cpus, frequency_hz, drain_interval) * 8).clamp(8_192, 262_144);
    let affordable = STACK_MAP_BUDGET_BYTES / (u64::from(depth) * 8 + 16);
    wanted.min(affordable).max(1_024).next_power_of_two() as u32
}

/// Count map entries for a recording: room for four times the samples one
/// drain interval can bring (each sample is at most one new key), from
/// 4,096 to the ABI's default. A drain's batch read walks every bucket of
/// the map, so a map far larger than what it holds costs at every drain
/// (65,536 buckets were a tenth of sparkprof's CPU on an idle host).
pub fn count_map_entries(cpus: u32, frequency_hz: u64, drain_interval: Duration) -> u32 {
    (samples_per_interval(cpus, frequency_hz, drain_interval) * 4)
        .clamp(4_096, u64::from(profiler_common::DEFAULT_COUNT_MAP_ENTRIES))
        .next_power_of_two() as u32
}

/// How often the kernel maps are drained unless told (`--drain-interval-ms`).
///
/// Why not longer, though part of each drain is paid whatever it brings
/// (the maps' system calls, JVM thread lists, JVM memory read again because
/// each drain's block cache starts empty): a new Python process is followed
/// from the first drain that sees it, and until then its samples have no
/// Python frames. Over the Spark testbed's job (section 5's job, whole-host
/// `record` at 99 Hz, three interleaved pairs), 2 s drains took about a tenth
/// less of sparkprof's CPU (0.507 / 0.543 / 0.526 % of a core against
/// 0.591 / 0.677 / 0.546 %; with `--off-cpu`, `cargo xtask bench --only
/// offcpu` measured 0.64 % with 2 s drains, 0.75 % in its run before with
/// 1 s), but only 65.5 / 68.5 / 66.6 % of the Python processes' on-CPU
/// samples carried a Python frame, against 74.1 / 78.0 / 80.4 % with 1 s
/// drains: the workers PySpark's daemon forks for the job's first tasks
/// went unfollowed for longer. (JIT frames named: 99.60-99.76 % against
/// 99.79-99.98 %.) Since a followed CPython's forked children are followed
/// from their fork (the eBPF crate's `python_fork`), 2 s drains keep the
/// Python frames (80.6 / 82.8 % against 75.4 / 81.0 % with 1 s drains
/// before it, and 83.2 / 84.7 % with 1 s drains and it; 0.46 / 0.54 % of a
/// core against 0.60 / 0.66 %), but still name fewer JIT frames (99.59 /
/// 99.64 % against 99.91 / 99.98 %): code the JIT replaced between a
/// sample and its drain is left unnamed, and the window is twice as long.
///
/// What longer drains save is mostly the naming they skip, not a cost
/// per drain. Measured on 2026-12-07 with `sparkprof record --off-cpu`
/// (and `--drain-interval-ms 3000`) over one section-5 job each on the
/// Spark testbed, three interleaved rounds, the pipeline's CPU being
/// index.json's `pipeline_cpu` summed. With 3 s drains a PySpark daemon is
/// followed later, and so are the workers it forked meanwhile: 52-77 % of
/// the Python processes' samples had a Python frame, against 75-80 % with
/// 1 s drains, and the pipeline took 176-210 ms against 202-210 ms. A
/// prototype (not kept) that also drained 150 ms after each exec of a
/// Python program kept the Python frames (82-84 %) and took 198-221 ms: no
/// less than 1 s drains. (Its JIT frames still lost names: 147-403 unnamed
/// against 105-134, the code freed before the drain.)
pub const DEFAULT_DRAIN_INTERVAL: Duration = Duration::from_secs(1);

/// The most on-CPU samples one drain interval can bring.
fn samples_per_interval(cpus: u32, frequency_hz: u64, drain_interval: Duration) -> u64 {
    u64::from(cpus) * frequency_hz * drain_interval.as_millis().max(1) as u64 / 1000
}

/// The pipeline, one direction.
pub(crate) struct Pipeline {
    /// `--pid`: only these processes (empty: the whole host).
    pids: Vec<u32>,
    /// `--cgroup`: only the processes in it.
    cgroup: Option<CgroupScope>,
    pub(crate) collector: Collector,
    enricher: Enricher,
    symbolizer: Symbolizer,
    pub(crate) writer: Writer,
    /// What each language runtime needs of a process.
    pub(crate) runtimes: Runtimes,
    /// Processes seen starting and exiting since the caller last took
    /// them (kept only when asked for: the daemon follows applications).
    pub(crate) events: Option<ProcessEvents>,
    /// The CPU time each stage took so far.
    pub(crate) cpu: StageCpu,
}

/// Processes the pipeline saw start (first seen) and exit.
#[derive(Debug, Default)]
pub(crate) struct ProcessEvents {
    pub(crate) started: Vec<Arc<ProcessInfo>>,
    pub(crate) exited: Vec<Arc<ProcessInfo>>,
}

impl Pipeline {
    /// What every stage keeps between drains, counted.
    pub(crate) fn held(&self) -> crate::sys::held::Held {
        let mut held = crate::sys::held::Held::default();
        self.collector.held(&mut held);
        self.enricher.held(&mut held);
        self.symbolizer.held(&mut held);
        self.runtimes.held(&mut held);
        self.writer.held(&mut held);
        held
    }

    /// One drain through every stage.
    pub(crate) fn step(&mut self) {
        let since = process_cpu();
        // Off-CPU counts are held for a few drains (`collect::hold`); a
        // process must not be reported exited, and its caches freed, while
        // some of its counts are still held.
        self.enricher.poll_exits();
        if self
            .collector
            .off_cpu_watched()
            .any(|pid| self.enricher.may_report_exited(pid))
        {
            self.collector.release_off_cpu();
        }
        let drain = self.collector.drain();
        self.cpu.add_since(Stage::Collect, since);
        match drain {
            Ok(drain) => self.process(drain),
            Err(err) => warn!("drain failed, retrying next interval: {err}"),
        }
    }

    /// Has the collector watch what a newly seen process needs (its
    /// off-CPU time if it is of interest), and the runtimes take it on.
    fn watch(&mut self, process: &Arc<ProcessInfo>, maps: Option<&[Mapping]>) {
        if let Some(events) = self.events.as_mut() {
            events.started.push(process.clone());
        }
        // A process outside `--pid` or `--cgroup` is never sampled: no
        // runtime takes it on either (its JVM is not asked for thread
        // names, its memory not read), so that it does not pay for a
        // recording of others.
        let (in_scope, off_cpu) = match (&self.cgroup, self.pids.is_empty()) {
            (Some(cgroup), _) => {
                let held = cgroup.holds(process.pid);
                (held, held && process.in_a_runtime())
            }
            (None, true) => (true, process.in_a_runtime()),
            (None, false) => {
                let listed = self.pids.contains(&process.pid);
                (listed, listed)
            }
        };
        if !in_scope {
            return;
        }
        if off_cpu && let Err(err) = self.collector.watch_off_cpu(process.pid) {
            warn!(pid = process.pid, "off-CPU time not recorded: {err}");
        }
        self.runtimes.discovered(process, maps, &mut self.collector);
    }

    /// [`Self::watch`]es each of `processes`, then has the threads they
    /// already have marked for off-CPU time in one pass.
    fn watch_all(&mut self, discovered: &Discovered) {
        for process in &discovered.processes {
            self.watch(process, discovered.maps(process.pid));
        }
        if let Err(err) = self.collector.mark_watched_threads() {
            warn!("off-CPU time of the threads watched processes already have is lost: {err}");
        }
    }

    fn process(&mut self, drain: crate::collect::Drain) {
        let since = process_cpu();
        let discovered = self.enricher.discover(&drain);
        self.watch_all(&discovered);
        self.runtimes.synchronize(&mut self.collector);
        let dumps = self.runtimes.thread_names(Some(&drain), &self.collector);
        self.cpu.add_since(Stage::Follow, since);
        let since = process_cpu();
        let drain = self.enricher.enrich(drain, dumps);
        self.cpu.add_since(Stage::Enrich, since);
        let since = process_cpu();
        let drain = self
            .symbolizer
            .symbolize(drain, &discovered, &mut self.runtimes);
        self.cpu.add_since(Stage::Symbolize, since);
        let since = process_cpu();
        // Exited processes' last samples are named: now they can go.
        for process in &drain.exited {
            self.collector.forget(process.pid);
            self.runtimes.exited(process);
        }
        if let Some(events) = self.events.as_mut() {
            events.exited.extend(drain.exited.iter().cloned());
        }
        self.writer.add(drain);
        self.cpu.add_since(Stage::Write, since);
        self.cpu.count_drain();
    }

    /// If off-CPU counts are held for later drains (`collect::hold`), one
    /// more drain through every stage that takes them in: after it,
    /// everything counted so far has been handed on (a daemon window's
    /// last drain).
    pub(crate) fn step_if_held(&mut self) {
        if self.collector.off_cpu_held() {
            self.collector.release_off_cpu();
            self.step();
        }
    }

    /// Stops sampling and takes in everything still in the kernel.
    pub(crate) fn finish(&mut self) {
        self.runtimes.stopping();
        let since = process_cpu();
        let last = self.collector.finish();
        self.cpu.add_since(Stage::Collect, since);
        match last {
            Ok(drain) => self.process(drain),
            Err(err) => {
                warn!("stopping the sampler failed ({err}); draining what is there");
                self.collector.release_off_cpu();
                self.step();
                self.collector.release_off_cpu();
                self.step();
            }
        }
        self.runtimes.stopped();
    }
}

/// A `--pid` must be a user process that exists now (a kernel thread has
/// no user stacks, and a process that is gone would record nothing).
fn check_target(pid: u32) -> Result<(), RecordError> {
    let stat = proc::stat(pid).map_err(|_| RecordError::NoSuchProcess(pid))?;
    if stat.kernel_thread {
        return Err(RecordError::KernelThread(pid, stat.comm));
    }
    Ok(())
}

/// The signals that stop a recording: SIGINT (a terminal), SIGTERM (a
/// service manager's stop) and SIGHUP (a closed terminal, a reload). Each
/// drains, writes what was counted and restores the host; none kills it.
pub(crate) struct StopSignals {
    int: Signal,
    term: Signal,
    hup: Signal,
}

impl StopSignals {
    fn install() -> Result<Self, RecordError> {
        let install = |kind| signal(kind).map_err(RecordError::Signals);
        Ok(Self {
            int: install(SignalKind::interrupt())?,
            term: install(SignalKind::terminate())?,
            hup: install(SignalKind::hangup())?,
        })
    }

    /// The name of the next stop signal.
    pub(crate) async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.int.recv() => "SIGINT",
            _ = self.term.recv() => "SIGTERM",
            _ = self.hup.recv() => "SIGHUP",
        }
    }
}

/// Writes the output, retrying while it fails (a full disk, a read-only
/// mount) for up to `retry_for`: the profile is only in memory, and losing it
/// to a transient condition is worse than waiting. A signal gives up.
async fn final_flush(
    writer: &mut Writer,
    header: &Header,
    retry_for: Duration,
    signals: &mut StopSignals,
) -> Result<(), RecordError> {
    let deadline = Instant::now() + retry_for;
    loop {
        let err = match writer.flush(header) {
            Ok(_) => return Ok(()),
            Err(err) => err,
        };
        if Instant::now() >= deadline {
            return Err(RecordError::Write(err));
        }
        error!(
            "cannot write {}: {err}; retrying every {}s for up to {}s (the profile is held in memory; \
             free space or send SIGINT/SIGTERM/SIGHUP again to give up)",
            writer.dir().display(),
            WRITE_RETRY_PERIOD.as_secs(),
            retry_for.as_secs()
        );
        tokio::select! {
            _ = tokio::time::sleep(WRITE_RETRY_PERIOD) => {}
            _ = signals.recv() => return Err(RecordError::Write(err)),
        }
    }
}

/// A running recording: the pipeline sampling the host, the signals that
/// stop it, and what it changed on the host (restored when dropped, after
/// the collector).
pub(crate) struct Session {
    pub(crate) pipeline: Pipeline,
    pub(crate) signals: StopSignals,
    /// `kernel.perf_event_max_stack` as it was, if raised: restored when
    /// this is dropped, which must be after the collector's perf events
    /// are closed.
    pub(crate) raised: Option<sysctl::RaisedSysctl>,
    stack_depth: u32,
    frequency_hz: u64,
}

impl Session {
    /// Loads the programs, takes on the processes already running and
    /// starts sampling, with the write stage writing into `writer_dir`.
    /// The options are checked first ([`check_options`]), before the
    /// caller claims its output.
    pub(crate) fn start(options: &RecordOptions, writer_dir: &Path) -> Result<Self, RecordError> {
        let signals = StopSignals::install()?;
        // A pidfd per process on the host tells the enrich stage of exits.
        crate::sys::exits::raise_open_files_limit();
        // Declared before the collector so it is dropped (restored) after the
        // perf events are closed.
        let raised = match options.max_stack_depth {
            Some(depth) => sysctl::RaisedSysctl::raise_to(MAX_STACK_SYSCTL, u64::from(depth))
                .map_err(RecordError::StackSysctl)?,
            None => None,
        };
        let sysctl_depth = sysctl::read_u64(MAX_STACK_SYSCTL).map_err(RecordError::StackSysctl)?;
        let stack_depth = match options.max_stack_depth {
            Some(depth) => depth,
            None => (sysctl_depth as u32).clamp(1, MAX_STACK_DEPTH_LIMIT),
        };
        let cpus = aya::util::nr_cpus().map(|n| n.get()).unwrap_or(1);
        let stack_map_entries = options.stack_map_entries.unwrap_or_else(|| {
            stack_map_entries(
                cpus,
                options.frequency_hz,
                options.drain_interval,
                stack_depth,
            )
        });
        let config = CollectorConfig {
            frequency_hz: options.frequency_hz,
            stack_depth,
            stack_map_entries,
            count_map_entries: count_map_entries(
                cpus,
                options.frequency_hz,
                options.drain_interval,
            ),
            sample_log_per_cpu: crate::collect::logs::slots_per_cpu(
                options.frequency_hz,
                options.drain_interval,
                cpus,
            ),
            target_pids: options.pids.clone(),
            target_cgroup: options
                .cgroup
                .as_ref()
                .map(|cgroup| (cgroup.id, cgroup.level)),
            off_cpu: options.off_cpu_min_block.map(|min_block| OffCpuConfig {
                min_block,
                stack_map_entries: profiler_common::DEFAULT_OFFCPU_STACK_ENTRIES,
                count_map_entries: profiler_common::DEFAULT_OFFCPU_COUNT_ENTRIES,
                log_per_cpu: crate::collect::logs::offcpu_slots_per_cpu(
                    options.drain_interval,
                    cpus,
                ),
            }),
        };
        let mut collector = Collector::load(&config)?;
        let mut runtimes = Runtimes::new(options.jvm.clone());
        runtimes.prepare(&mut collector);
        let mut pipeline = Pipeline {
            pids: options.pids.clone(),
            cgroup: options.cgroup.clone(),
            collector,
            enricher: Enricher::new(),
            symbolizer: Symbolizer::new(),
            runtimes,
            writer: Writer::new(writer_dir, write_options(options)),
            events: None,
            cpu: StageCpu::default(),
        };
        // Processes already running: their renames (and off-CPU time) are
        // watched from now on, and the names their threads have now are asked
        // for right away.
        let running = pipeline.enricher.running_processes();
        pipeline.watch_all(&running);
        let dumps = pipeline.runtimes.thread_names(None, &pipeline.collector);
        pipeline.enricher.named(&dumps);
        pipeline.symbolizer.load();
        // Only now the sampler: every sample of a running process is taken
        // once its runtime follows it (a Python sample carries its frames, a
        // JVM's renames are watched).
        pipeline.collector.start_sampling()?;
        info!(
            frequency_hz = options.frequency_hz,
            stack_depth,
            stack_map_entries,
            pids = ?options.pids,
            cgroup = ?options.cgroup.as_ref().map(|cgroup| &cgroup.path),
            "recording on {cpus} CPUs into {}",
            options.output.display()
        );
        Ok(Self {
            pipeline,
            signals,
            raised,
            stack_depth,
            frequency_hz: options.frequency_hz,
        })
    }

    /// The facts every index.json of this recording starts with.
    pub(crate) fn header(&self) -> Header {
        Header {
            tool: format!("sparkprof {}", env!("CARGO_PKG_VERSION")),
            host: sysctl::read("kernel/hostname").unwrap_or_default(),
            frequency_hz: self.frequency_hz,
            stack_depth: self.stack_depth,
            stats: self.pipeline.collector.stats(),
            runtimes: self.pipeline.runtimes.stats(),
            pipeline_cpu: self.pipeline.cpu.clone(),
        }
    }
}

/// What the write stage of a recording with these options does.
pub(crate) fn write_options(options: &RecordOptions) -> WriteOptions {
    WriteOptions {
        // Off-CPU time comes with wall-clock files, in which a
        // sample stands for one sampling period.
        wall_us_per_sample: options
            .off_cpu_min_block
            .map(|_| 1e6 / options.frequency_hz as f64),
        ..options.write
    }
}

/// Refuses options no recording can run with, before anything changes.
pub(crate) fn check_options(options: &RecordOptions) -> Result<(), RecordError> {
    let missing = Capabilities::current().missing_for_record();
    if !missing.is_empty() {
        return Err(RecordError::MissingCapabilities(missing));
    }
    if let Some(depth) = options.max_stack_depth
        && !(1..=MAX_STACK_DEPTH_LIMIT).contains(&depth)
    {
        return Err(RecordError::BadStackDepth(depth));
    }
    for &pid in &options.pids {
        check_target(pid)?;
    }
    Ok(())
}

/// Runs a recording to its end.
pub async fn record(options: RecordOptions) -> Result<Summary, RecordError> {
    check_options(&options)?;
    // Before anything else changes: the recording must have somewhere to go.
    let output = OutputDir::claim(&options.output)?;
    if output.replaced() > 0 {
        info!(
            "replacing the previous recording in {} ({} files removed)",
            output.path().display(),
            output.replaced()
        );
    }
    let mut session = Session::start(&options, &options.output)?;

    let started = Instant::now();
    let deadline = options.duration.map(|d| tokio::time::Instant::now() + d);
    let mut drain_tick = drain_ticks(options.drain_interval).await;
    let mut last_flush = Instant::now();
    let mut interrupted = false;
    loop {
        tokio::select! {
            _ = drain_tick.tick() => {
                session.pipeline.step();
                if last_flush.elapsed() >= options.flush_interval {
                    last_flush = Instant::now();
                    let header = session.header();
                    if let Err(err) = session.pipeline.writer.checkpoint(&header) {
                        warn!("periodic flush failed, will retry: {err}");
                    }
                }
            }
            name = session.signals.recv() => {
                info!("{name}: draining and writing what was counted");
                interrupted = true;
                break;
            }
            _ = until(deadline) => break,
        }
    }
    session.pipeline.finish();
    let header = session.header();
    let stats = header.stats;
    let Session {
        pipeline: Pipeline {
            collector,
            mut writer,
            ..
        },
        mut signals,
        raised: _raised,
        ..
    } = session;
    // Counting has stopped. Detaching the programs waits for an RCU grace
    // period per link (seconds on a host with thousands of threads): it
    // happens beside the final write, which must not wait for it, and it
    // frees the kernel maps before a possibly long wait for disk space.
    // (If no thread can be started, the collector is dropped right here.)
    writer.settle();
    let detach = detach_in_background(collector);
    let written = final_flush(&mut writer, &header, options.write_retry, &mut signals)
        .await
        .inspect_err(|_| {
            let removed = writer.discard_unindexed();
            if removed > 0 {
                error!(
                    "removed the {removed} files of this recording that no index.json lists, \
                     so that {} holds no partial recording",
                    options.output.display()
                );
            }
        });
    join_detach(detach);
    written?;
    drop(output);
    // What index.json lists, so the closing line agrees with it.
    let (files, samples) = writer.index_totals();
    Ok(Summary {
        output: options.output,
        files,
        samples,
        stats,
        elapsed: started.elapsed(),
        interrupted,
    })
}

/// A tick every `interval` to drain at, the immediate first one taken; a
/// late tick delays the next ones (drains never bunch up).
pub(crate) async fn drain_ticks(interval: Duration) -> tokio::time::Interval {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    ticks
}

/// Sleeps until `deadline`; forever without one.
pub(crate) async fn until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Drops the collector (detaching its programs) on a thread of its own;
/// if no thread can be started, right here.
pub(crate) fn detach_in_background(collector: Collector) -> Option<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("detach".into())
        .spawn(move || drop(collector))
        .ok()
}

/// Waits for [`detach_in_background`].
pub(crate) fn join_detach(detach: Option<std::thread::JoinHandle<()>>) {
    if detach.is_some_and(|thread| thread.join().is_err()) {
        warn!("detaching the programs panicked; the kernel detaches them when sparkprof exits");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_maps_stay_within_budget() {
        let small = stack_map_entries(2, 99, Duration::from_secs(1), 127);
        assert_eq!(small, 8_192);
        let big_host = stack_map_entries(128, 999, Duration::from_secs(1), 127);
        assert!(u64::from(big_host) * (127 * 8 + 16) <= 2 * STACK_MAP_BUDGET_BYTES);
        let deep = stack_map_entries(2, 99, Duration::from_secs(1), 4096);
        assert!(u64::from(deep) * (4096 * 8) <= 2 * STACK_MAP_BUDGET_BYTES);
    }

    #[test]
    fn count_maps_hold_four_intervals_of_samples() {
        let second = Duration::from_secs(1);
        assert_eq!(count_map_entries(2, 99, second), 4_096);
        assert_eq!(count_map_entries(16, 999, second), 65_536);
        assert_eq!(count_map_entries(4, 999, second), 16_384);
        assert_eq!(count_map_entries(512, 999, Duration::from_secs(10)), 65_536);
    }
}
