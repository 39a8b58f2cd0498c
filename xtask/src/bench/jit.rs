//! Section 4 of `cargo xtask bench`: JIT frames.
//!
//! - The perf-map code sparkprof uses (the `perf-maps` crate), on a
//!   generated 10,000-entry map in the JDK's `0x` format: load time and
//!   lookup rate.
//! - A busy JVM whose code cache churns (`xtask/bench/jit/JitChurn.java`),
//!   recorded by `sparkprof record --pid` for 60 s at 99 Hz: the share of
//!   JIT frames named (index.json's `jit` statistics), and the share
//!   misnamed. For the latter sparkprof writes every JIT frame it named,
//!   with its address and the time window of its drain, to an audit file
//!   (hidden `--jit-audit`), while the bench asks the JVM every 0.5 s for
//!   `Compiler.codelist` (what is compiled where, without touching the perf
//!   map). A frame is checked against the two snapshots that bracket its
//!   window: if both have the same compiled method at the address, that is
//!   the method the sample was in.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context as _, Result, bail};
use perf_maps::{Jvm, NameStyle, SymbolTable, TrustPolicy, map::load_file};

use super::{SPARKPROF_OUTPUT, interrupt, median, met, pause, progress};
use crate::{run_cmd, workspace_root};

/// Entries of the generated map.
pub const MAP_ENTRIES: usize = 10_000;
/// Loads of the map; the figure is the median.
pub const MAP_LOADS: usize = 21;
/// Rounds of random lookups; the figure is the median rate.
pub const LOOKUP_ROUNDS: usize = 5;
pub const LOOKUPS_PER_ROUND: usize = 2_000_000;
/// The JVM recording.
pub const RECORD_SECS: u64 = 60;
pub const RECORD_HZ: u32 = 99;
/// The JVM runs this long before sparkprof starts (first classes compiled).
const JVM_WARM_UP: Duration = Duration::from_secs(5);
/// How often the JVM is asked for `Compiler.codelist`.
pub const SNAPSHOT_INTERVAL: Duration = Duration::from_millis(500);
/// Longest wait for sparkprof to finish after its recording time.
const FINISH_TIMEOUT: Duration = Duration::from_secs(120);
/// Targets (see BENCHMARKS.md).
pub const TARGET_NAMED_PERCENT: f64 = 98.0;

/// The hidden `cargo xtask bench` argument that measures only the map
/// figures and prints them (see [`map_figures_optimized`]).
pub const MAP_FIGURES_FLAG: &str = "--internal-map-figures";

/// [`map_figures`] in an optimized build: xtask itself is built without
/// optimizations (`cargo xtask` is `cargo run`), which would make the
/// perf-maps code several times slower than in sparkprof's release build.
/// So a debug xtask runs itself again with `--release` for these figures.
pub fn map_figures_optimized(dir: &Path) -> Result<MapFigures> {
    if !cfg!(debug_assertions) {
        return map_figures(dir);
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args(["run", "--release", "--quiet", "-p", "xtask", "--", "bench"])
        .arg(MAP_FIGURES_FLAG)
        .arg(dir)
        .current_dir(workspace_root())
        .stderr(Stdio::inherit())
        .output()
        .context("running the map figures in an optimized xtask")?;
    if !output.status.success() {
        bail!("the optimized map measurement failed: {}", output.status);
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let values = |key: &str| -> Result<Vec<f64>> {
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .with_context(|| format!("no {key} in the map measurement's output {text:?}"))?;
        line.split_whitespace()
            .map(|v| v.parse::<f64>().context("malformed map measurement"))
            .collect()
    };
    Ok(MapFigures {
        load_ms: values("load_ms ")?,
        lookups_per_sec: values("lookups_per_sec ")?,
        file_kib: values("file_kib ")?.first().copied().unwrap_or(0.0) as u64,
    })
}

/// The other side of [`map_figures_optimized`].
pub fn print_map_figures(dir: &Path) -> Result<()> {
    let figures = map_figures(dir)?;
    let join = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!("load_ms {}", join(&figures.load_ms));
    println!("lookups_per_sec {}", join(&figures.lookups_per_sec));
    println!("file_kib {}", figures.file_kib);
    Ok(())
}

/// Perf-map load and lookup figures.
pub struct MapFigures {
    pub load_ms: Vec<f64>,
    pub lookups_per_sec: Vec<f64>,
    pub file_kib: u64,
}

/// Generates a 10,000-entry map like the JDK's and times the perf-maps
/// crate on it.
pub fn map_figures(dir: &Path) -> Result<MapFigures> {
    let path = dir.join("perf-10000.map");
    let (text, lo, hi) = generated_map(MAP_ENTRIES);
    fs::write(&path, &text).with_context(|| format!("writing {}", path.display()))?;
    let policy = TrustPolicy::for_uid(unsafe { libc::geteuid() });
    let mut load_ms = Vec::new();
    let mut table = SymbolTable::new();
    for _ in 0..MAP_LOADS {
        let started = Instant::now();
        let (loaded, stats) = load_file(&path, &policy, NameStyle::Readable)
            .with_context(|| format!("loading {}", path.display()))?;
        load_ms.push(started.elapsed().as_secs_f64() * 1e3);
        if stats.entries != MAP_ENTRIES || stats.malformed != 0 {
            bail!(
                "the generated map parsed into {} entries ({} malformed lines), expected {MAP_ENTRIES}",
                stats.entries,
                stats.malformed
            );
        }
        table = loaded;
    }
    let mut lookups_per_sec = Vec::new();
    let mut rng = Lcg(0x5eed);
    let mut hits = 0u64;
    for _ in 0..LOOKUP_ROUNDS {
        let addrs: Vec<u64> = (0..LOOKUPS_PER_ROUND)
            .map(|_| lo + rng.next() % (hi - lo))
            .collect();
        let started = Instant::now();
        for &addr in &addrs {
            if std::hint::black_box(table.lookup(std::hint::black_box(addr))).is_some() {
                hits += 1;
            }
        }
        lookups_per_sec.push(LOOKUPS_PER_ROUND as f64 / started.elapsed().as_secs_f64());
    }
    if hits == 0 {
        bail!("no random address hit a symbol of the generated map");
    }
    Ok(MapFigures {
        load_ms,
        lookups_per_sec,
        file_kib: text.len() as u64 / 1024,
    })
}

/// A map as `jcmd Compiler.perfmap` writes it: `0x`-prefixed, zero-padded
/// start and size, Java signatures, a few stubs, small gaps between blobs.
/// Returns the text and the address range it covers.
fn generated_map(entries: usize) -> (String, u64, u64) {
    const PACKAGES: [&str; 4] = [
        "org.apache.spark.sql.catalyst.expressions",
        "org.apache.spark.sql.execution",
        "scala.collection.immutable",
        "java.util.concurrent",
    ];
    let mut rng = Lcg(42);
    let lo = 0x7f04_50e0_0000u64;
    let mut addr = lo;
    let mut text = String::with_capacity(entries * 96);
    for i in 0..entries {
        let size = (0x40 + rng.next() % 0x1000) & !0xf;
        let name = match i % 50 {
            0 => format!("StubRoutines ({})", i % 7),
            1 => "Interpreter".to_owned(),
            _ => format!(
                "long {}.Generated{}.method{}(long, int, java.lang.Object)",
                PACKAGES[i % PACKAGES.len()],
                i / 8,
                i % 8
            ),
        };
        text += &format!("{addr:#018x} {size:#018x} {name}\n");
        addr += size + (rng.next() % 4) * 0x10;
    }
    (text, lo, addr)
}

/// A small deterministic generator (no dependency for random addresses).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 17
    }
}

/// What the JVM recording measured.
pub struct JvmFigures {
    pub java: String,
    pub jit_frames: u64,
    pub jit_frames_named: u64,
    pub perf_map_dumps: u64,
    pub perf_map_dump_failures: u64,
    pub snapshots: usize,
    pub snapshot_failures: usize,
    pub check: Check,
}

/// Compiles the workload, runs it, records it and checks every JIT name.
pub fn jvm_figures(sparkprof: &Path, dir: &Path) -> Result<JvmFigures> {
    let classes = dir.join("classes");
    fs::create_dir_all(&classes)?;
    let sources: Vec<PathBuf> = fs::read_dir(workspace_root().join("xtask/bench/jit"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "java"))
        .collect();
    run_cmd(Command::new("javac").arg("-d").arg(&classes).args(&sources))
        .context("compiling the JVM workload (needs a JDK 17+: javac)")?;
    let java = java_version()?;

    // Long enough for the warm-up, the recording and sparkprof's final pass;
    // stopped as soon as sparkprof is done.
    let jvm_secs = JVM_WARM_UP.as_secs() + RECORD_SECS + 60;
    let log = fs::File::create(dir.join("java.log"))?;
    let jvm = Killed(
        Command::new("java")
            .args(["-XX:+PreserveFramePointer", "-cp"])
            .arg(&classes)
            .args(["JitChurn", &jvm_secs.to_string()])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting the JVM workload")?,
    );
    let pid = jvm.0.id();
    wait_attachable(pid)?;
    pause(JVM_WARM_UP)?;

    let audit = dir.join("jit-audit.tsv");
    let output = dir.join(SPARKPROF_OUTPUT);
    let snapshots = Mutex::new(Vec::new());
    let failures = Mutex::new(0usize);
    let done = AtomicBool::new(false);
    let jvm_handle = Jvm::new(pid).context("looking up the JVM for attaching")?;
    let recorded: Result<()> = thread::scope(|scope| {
        scope.spawn(|| {
            loop {
                let last = done.load(Ordering::SeqCst);
                let started = Instant::now();
                match snapshot(&jvm_handle) {
                    Ok(s) => snapshots.lock().unwrap().push(s),
                    Err(_) => *failures.lock().unwrap() += 1,
                }
                if last {
                    break;
                }
                thread::sleep(SNAPSHOT_INTERVAL.saturating_sub(started.elapsed()));
            }
        });
        // Snapshots from before sparkprof starts (two, so that one was
        // answered before its first drain's window opens).
        while snapshots.lock().unwrap().len() < 2 && *failures.lock().unwrap() < 10 {
            thread::sleep(Duration::from_millis(20));
        }
        progress(&format!(
            "[jit] recording the JVM workload (pid {pid}) for {RECORD_SECS} s at {RECORD_HZ} Hz"
        ));
        let result = record(sparkprof, pid, &output, &audit, dir);
        // One more snapshot after the last drain, then stop.
        done.store(true, Ordering::SeqCst);
        result
    });
    drop(jvm);
    recorded?;

    let index = fs::read_to_string(output.join("index.json")).context("reading index.json")?;
    let field =
        |key: &str| json_u64(&index, key).with_context(|| format!("index.json has no jit.{key}"));
    let snapshots = snapshots.into_inner().unwrap();
    let audit_text = fs::read_to_string(&audit).context("reading the JIT audit")?;
    Ok(JvmFigures {
        java,
        jit_frames: field("jit_frames")?,
        jit_frames_named: field("jit_frames_named")?,
        perf_map_dumps: field("perf_map_dumps")?,
        perf_map_dump_failures: field("perf_map_dump_failures")?,
        snapshot_failures: failures.into_inner().unwrap(),
        check: check(&audit_text, pid, &snapshots)?,
        snapshots: snapshots.len(),
    })
}

/// A child process killed and reaped when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) fn java_version() -> Result<String> {
    let output = Command::new("java")
        .arg("-version")
        .output()
        .context("running java -version")?;
    let text = String::from_utf8_lossy(&output.stderr);
    Ok(text.lines().next().unwrap_or("java").trim().to_owned())
}

/// Waits until the JVM can be attached to without being killed by SIGQUIT.
fn wait_attachable(pid: u32) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match perf_maps::check_attachable(pid) {
            Ok(()) => return Ok(()),
            Err(err) if Instant::now() > deadline => {
                bail!("the JVM workload cannot be attached to: {err}")
            }
            Err(_) => pause(Duration::from_millis(50))?,
        }
    }
}

/// Runs `sparkprof record --pid --no-java-walk` with the audit, waiting
/// for its end: the section measures naming from perf maps, the fallback
/// for JVMs whose own structures sparkprof cannot read (a walked JVM's
/// frames are named from those structures, which the audit does not see).
fn record(sparkprof: &Path, pid: u32, output: &Path, audit: &Path, dir: &Path) -> Result<()> {
    let log_path = dir.join("sparkprof.log");
    let log = fs::File::create(&log_path)?;
    let mut child = Killed(
        Command::new(sparkprof)
            .args(["record", "--no-java-walk", "--pid", &pid.to_string(), "-F"])
            .arg(RECORD_HZ.to_string())
            .args(["--duration", &RECORD_SECS.to_string(), "--output"])
            .arg(output)
            .arg("--jit-audit")
            .arg(audit)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting sparkprof")?,
    );
    let deadline = Instant::now() + Duration::from_secs(RECORD_SECS) + FINISH_TIMEOUT;
    let status = loop {
        if let Some(status) = child.0.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            bail!("sparkprof did not finish within {FINISH_TIMEOUT:?} of its recording time");
        }
        interrupt::check()?;
        thread::sleep(Duration::from_millis(100));
    };
    if !status.success() {
        let log = fs::read_to_string(&log_path).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        bail!(
            "sparkprof record failed ({status}):\n{}",
            lines[lines.len().saturating_sub(20)..].join("\n")
        );
    }
    Ok(())
}

/// `Compiler.codelist` at one time: which compiled method is where.
pub struct Snapshot {
    /// Unix ns before the request and after the reply: the code cache was
    /// in this state at some moment in between.
    requested: u64,
    answered: u64,
    /// Sorted by start.
    methods: Vec<Compiled>,
}

struct Compiled {
    id: u64,
    start: u64,
    end: u64,
    /// `pkg.Class.method`.
    name: String,
}

impl Snapshot {
    fn method_at(&self, addr: u64) -> Option<&Compiled> {
        let i = self.methods.partition_point(|m| m.start <= addr);
        let m = self.methods.get(i.checked_sub(1)?)?;
        (addr < m.end).then_some(m)
    }
}

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn snapshot(jvm: &Jvm) -> Result<Snapshot> {
    let requested = unix_ns();
    let reply = jvm.jcmd("Compiler.codelist")?;
    let answered = unix_ns();
    if reply.status != 0 {
        bail!("Compiler.codelist failed: {}", reply.output.trim());
    }
    let mut methods: Vec<Compiled> = reply.output.lines().filter_map(codelist_line).collect();
    methods.sort_by_key(|m| m.start);
    Ok(Snapshot {
        requested,
        answered,
        methods,
    })
}

/// One line of HotSpot's `CodeCache::print_codelist`:
/// `compile_id comp_level state method [header_begin, code_begin - code_end]`,
/// e.g. `619 4 0 ZqGen0046.stageC(J)J [0x00007f04..590, 0x00007f04..700 - 0x00007f04..7d8]`.
fn codelist_line(line: &str) -> Option<Compiled> {
    let (head, range) = line.rsplit_once(" [")?;
    let mut fields = head.splitn(4, ' ');
    let id = fields.next()?.parse().ok()?;
    let _level = fields.next()?;
    let _state = fields.next()?;
    let method = fields.next()?;
    let (_header, code) = range.strip_suffix(']')?.split_once(", ")?;
    let (start, end) = code.split_once(" - ")?;
    let hex = |s: &str| u64::from_str_radix(s.trim().strip_prefix("0x")?, 16).ok();
    Some(Compiled {
        id,
        start: hex(start)?,
        end: hex(end)?,
        name: normalized(method),
    })
}

/// `pkg.Class.method` from a codelist name (`pkg.Class.method(J)J`) or a
/// sparkprof name (readable already, or with the JDK's signature).
fn normalized(name: &str) -> String {
    let readable = perf_maps::map::readable_name(name);
    match readable.split_once('(') {
        Some((head, _)) => head.rsplit(' ').next().unwrap_or(head).to_owned(),
        None => readable.into_owned(),
    }
}

/// The audit checked against the snapshots; counts are samples (frames
/// weighted by their count), `*_frames` distinct (drain, address) lines.
#[derive(Default)]
pub struct Check {
    pub total: u64,
    /// No snapshot before or after the drain's window.
    pub unbracketed: u64,
    /// Outside compiled methods in both snapshots (interpreter, stubs, adapters).
    pub outside: u64,
    /// Outside compiled methods: samples by name given, most first.
    pub outside_names: Vec<(String, u64)>,
    /// The snapshots disagree: the code at the address changed in the window.
    pub ambiguous: u64,
    pub ambiguous_frames: u64,
    /// Of those, samples whose name is neither snapshot's method there
    /// (nor `[unknown]`): likely misnamed, unless a third method came and
    /// went inside the window.
    pub ambiguous_neither: u64,
    pub checked: u64,
    pub checked_frames: u64,
    pub correct: u64,
    pub unnamed: u64,
    pub misnamed: u64,
    pub misnamed_frames: u64,
    /// A few misnamed frames: (given, expected).
    pub examples: Vec<(String, String)>,
}

fn check(audit: &str, pid: u32, snapshots: &[Snapshot]) -> Result<Check> {
    let mut check = Check::default();
    let mut outside: Vec<(String, u64)> = Vec::new();
    for line in audit.lines().filter(|l| !l.starts_with('#')) {
        let fields: Vec<&str> = line.splitn(6, '\t').collect();
        let [start, end, line_pid, addr, samples, name] = fields[..] else {
            bail!("malformed audit line {line:?}");
        };
        let parse = |s: &str| s.parse::<u64>().with_context(|| format!("in {line:?}"));
        let (start, end, samples) = (parse(start)?, parse(end)?, parse(samples)?);
        if parse(line_pid)? != u64::from(pid) {
            continue;
        }
        let addr = u64::from_str_radix(addr.trim_start_matches("0x"), 16)
            .with_context(|| format!("in {line:?}"))?;
        check.total += samples;
        let before = snapshots.iter().rev().find(|s| s.answered <= start);
        let after = snapshots.iter().find(|s| s.requested >= end);
        let (Some(before), Some(after)) = (before, after) else {
            check.unbracketed += samples;
            continue;
        };
        match (before.method_at(addr), after.method_at(addr)) {
            (None, None) => {
                check.outside += samples;
                match outside.iter_mut().find(|(n, _)| n == name) {
                    Some((_, count)) => *count += samples,
                    None => outside.push((name.to_owned(), samples)),
                }
            }
            (Some(b), Some(a)) if b.id == a.id && b.start == a.start => {
                check.checked += samples;
                check.checked_frames += 1;
                if name == "[unknown]" {
                    check.unnamed += samples;
                } else if normalized(name) == b.name {
                    check.correct += samples;
                } else {
                    check.misnamed += samples;
                    check.misnamed_frames += 1;
                    if check.examples.len() < 5 {
                        check.examples.push((name.to_owned(), b.name.clone()));
                    }
                }
            }
            (b, a) => {
                check.ambiguous += samples;
                check.ambiguous_frames += 1;
                let given = normalized(name);
                let matches = |m: Option<&Compiled>| m.is_some_and(|m| m.name == given);
                if name != "[unknown]" && !matches(b) && !matches(a) {
                    check.ambiguous_neither += samples;
                }
            }
        }
    }
    outside.sort_by_key(|x| std::cmp::Reverse(x.1));
    check.outside_names = outside;
    if check.total == 0 {
        bail!("the JIT audit has no frame of the JVM workload");
    }
    Ok(check)
}

/// A number in index.json's `jit` object (keys there are unique).
fn json_u64(text: &str, key: &str) -> Option<u64> {
    let at = text.find(&format!("\"{key}\""))? + key.len() + 2;
    let rest = text[at..].trim_start().strip_prefix(':')?.trim_start();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Section 4's figures, for the report.
pub struct JitReport {
    pub map: MapFigures,
    pub jvm: JvmFigures,
    /// Other processes' CPU use (% of one core) when the map figures were
    /// taken, if the host was not idle.
    pub busy: Option<f64>,
}

/// The three names most samples outside compiled methods got.
fn outside_names(names: &[(String, u64)]) -> String {
    let top: Vec<String> = names
        .iter()
        .take(3)
        .map(|(name, samples)| format!("`{name}` {samples}"))
        .collect();
    if names.len() > 3 {
        format!("{}, ...", top.join(", "))
    } else {
        top.join(", ")
    }
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        f64::NAN
    } else {
        100.0 * part as f64 / whole as f64
    }
}

impl JitReport {
    pub fn markdown(&self) -> String {
        let MapFigures {
            load_ms,
            lookups_per_sec,
            file_kib,
        } = &self.map;
        let j = &self.jvm;
        let c = &j.check;
        let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = |v: &[f64]| v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let named = pct(j.jit_frames_named, j.jit_frames);
        let misnamed = pct(c.misnamed, c.checked);
        let mut text = format!(
            "### 4. JIT frames ({MAP_ENTRIES}-entry perf map; a JVM whose code cache churns, {RECORD_SECS} s at {RECORD_HZ} Hz)\n\n\
             Naming from perf maps, the fallback for JVMs whose own structures sparkprof cannot \
             read (`record --no-java-walk` here; other JVMs' frames are named from HotSpot's \
             structures, which the audit does not see).\n\n\
             | figure | value | target |\n\
             |---|--:|---|\n\
             | perf-map load, {MAP_ENTRIES} entries ({file_kib} KiB, JDK `0x` format), median of {MAP_LOADS} | {:.2} ms ({:.2} – {:.2}) |  |\n\
             | lookups of random addresses, median of {LOOKUP_ROUNDS} rounds of {LOOKUPS_PER_ROUND} | {:.1} M/s ({:.1} – {:.1}) |  |\n\
             | JIT frames named (index.json `jit`, samples) | {named:.2} % ({} of {}) | ≥ {TARGET_NAMED_PERCENT} %: {} |\n\
             | misnamed, of the frames checked against `Compiler.codelist` (samples) | {misnamed:.2} % ({} of {}; {} distinct frames) | 0: {} |\n\
             | checked frames that sparkprof left `[unknown]` (samples) | {:.2} % ({} of {}) |  |\n\
             | not checked: the code at the address changed within the drain's window (samples) | {} of {} ({} distinct frames; named as neither snapshot's method there: {}) |  |\n\
             | not checked: outside compiled methods in both snapshots (samples) | {} ({}) |  |\n\
             | not checked: no snapshot before or after the window | {} |  |\n\
             | perf maps dumped by sparkprof (failed) | {} ({}) |  |\n\
             | `Compiler.codelist` snapshots by the bench (failed) | {} ({}) |  |\n",
            median(load_ms),
            min(load_ms),
            max(load_ms),
            median(lookups_per_sec) / 1e6,
            min(lookups_per_sec) / 1e6,
            max(lookups_per_sec) / 1e6,
            j.jit_frames_named,
            j.jit_frames,
            met(named >= TARGET_NAMED_PERCENT),
            c.misnamed,
            c.checked,
            c.misnamed_frames,
            met(c.misnamed == 0),
            pct(c.unnamed, c.checked),
            c.unnamed,
            c.checked,
            c.ambiguous,
            c.total,
            c.ambiguous_frames,
            c.ambiguous_neither,
            c.outside,
            outside_names(&c.outside_names),
            c.unbracketed,
            j.perf_map_dumps,
            j.perf_map_dump_failures,
            j.snapshots,
            j.snapshot_failures,
        );
        text += &format!("\nJVM: {}.\n", j.java);
        if !c.examples.is_empty() {
            text += "\nMisnamed, for example (name given → method compiled there):\n\n";
            for (given, expected) in &c.examples {
                text += &format!("- `{given}` → `{expected}`\n");
            }
        }
        if let Some(busy) = self.busy {
            text += &format!(
                "\nThe host was not idle ({busy:.0} % of one core used by other processes) \
                 when the load and lookup figures were taken: they are noisier than usual. \
                 The JIT name shares do not depend on idleness.\n"
            );
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(requested: u64, answered: u64, line: &str) -> Snapshot {
        Snapshot {
            requested,
            answered,
            methods: codelist_line(line).into_iter().collect(),
        }
    }

    #[test]
    fn codelist_lines_parse() {
        let m = codelist_line(
            "619 4 0 ZqGen0046.stageC(J)J [0x00007f0450efd590, 0x00007f0450efd700 - 0x00007f0450efd7d8]",
        )
        .unwrap();
        assert_eq!(
            (m.id, m.start, m.end, m.name.as_str()),
            (619, 0x7f0450efd700, 0x7f0450efd7d8, "ZqGen0046.stageC")
        );
        assert!(codelist_line("8547:").is_none());
        assert_eq!(
            normalized("long ZqGen0083.stageC(long)"),
            "ZqGen0083.stageC"
        );
        assert_eq!(normalized("ZqGen0083.stageC"), "ZqGen0083.stageC");
    }

    #[test]
    fn frames_are_checked_against_the_bracketing_snapshots() {
        let a = "1 4 0 A.run(J)J [0x100, 0x1000 - 0x1100]";
        let b = "2 4 0 B.run(J)J [0x100, 0x1000 - 0x1100]";
        let snapshots = [
            snapshot(0, 10, a),
            snapshot(100, 110, a),
            snapshot(200, 210, b),
        ];
        let audit = "# header\n\
                     20\t90\t7\t0x1010\t3\tA.run\n\
                     20\t90\t7\t0x1020\t2\tB.run\n\
                     20\t90\t7\t0x1030\t1\t[unknown]\n\
                     120\t190\t7\t0x1010\t4\tB.run\n\
                     20\t90\t7\t0x2000\t5\tInterpreter\n\
                     20\t90\t8\t0x1010\t9\tA.run\n\
                     300\t390\t7\t0x1010\t6\tB.run\n";
        let c = check(audit, 7, &snapshots).unwrap();
        assert_eq!((c.checked, c.correct, c.misnamed, c.unnamed), (6, 3, 2, 1));
        assert_eq!((c.ambiguous, c.ambiguous_neither), (4, 0));
        assert_eq!((c.outside, c.unbracketed, c.total), (5, 6, 21));
        assert_eq!(c.examples, [("B.run".to_owned(), "A.run".to_owned())]);
    }

    #[test]
    fn the_generated_map_loads_whole() {
        let dir = std::env::temp_dir().join(format!("xtask-jit-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let figures = map_figures(&dir);
        let _ = fs::remove_dir_all(&dir);
        let figures = figures.unwrap();
        assert_eq!(figures.load_ms.len(), MAP_LOADS);
        assert!(figures.lookups_per_sec.iter().all(|&r| r > 0.0));
    }
}
