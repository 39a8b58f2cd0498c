//! `cargo xtask vm-test [--local] [--kernel 6.1|6.12]... [--broken] [--timeout SECS]`:
//! the kernel programs' suite (`vm-tests/`), run in an [`Environment`]:
//! on this host's kernel (`--local`, part of `cargo xtask test` before the
//! integration tests), or as the kernel matrix under qemu (the default).
//!
//! Every eBPF program sparkprof ships must load and work on the kernels
//! Spark workers run, not only on this host's. For each pinned Debian cloud
//! kernel (bookworm's 6.1, bookworm-backports' 6.12) this:
//!
//! 1. fetches the kernel package once into a cache (`/var/tmp/sparkprof-vm`,
//!    or `$SPARKPROF_VM_CACHE`) through a private apt configuration (its own
//!    sources list, lists and archive cache; the system's sources are not
//!    touched), `apt-get download`, `dpkg-deb -x`, keeping only `vmlinuz`;
//! 2. builds `vm-tests/` (sparkprof-vm-tests) statically
//!    (`+crt-static`, no `target-cpu=native`: the guest CPU is `qemu64`
//!    less CMPXCHG16B, see [`GUEST_CPU`]);
//! 3. packs it with busybox-static into an initramfs whose `/init` mounts
//!    proc, sysfs and devtmpfs only (a bare host: no tracefs, debugfs or
//!    bpffs, which sparkprof does not need), runs it, prints a result
//!    marker and powers off;
//! 4. boots the kernel under qemu with TCG (never KVM: `/dev/kvm` here is a
//!    nested hypervisor that hangs stock kernels), streams the serial
//!    console, and fails on a `FAIL` line, a guest panic, a missing result
//!    marker or the timeout.
//!
//! `--broken` also loads `vm-tests/broken-ebpf`'s deliberately broken
//! program, which the 6.1 verifier rejects: the run then fails with the
//! verifier's message. It is not part of the default run.

use std::{
    fs,
    io::{BufRead as _, BufReader, Read},
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use crate::{pinned_cargo, run_cmd, toolchain, workspace_root};

/// One kernel of the matrix: an exact Debian package version.
struct Kernel {
    /// What `--kernel` selects.
    name: &'static str,
    /// The suite that has it (for the error when it is gone).
    suite: &'static str,
    package: &'static str,
    version: &'static str,
    /// `uname -r` of the booted kernel.
    release: &'static str,
}

/// The pinned kernels. bookworm's is its last point release's; the
/// backports one was bookworm-backports' `linux-image-cloud-amd64` when
/// pinned. When the mirror drops a version, `vm-test` says so and lists
/// what it has: pin one of those here.
const KERNELS: &[Kernel] = &[
    Kernel {
        name: "6.1",
        suite: "bookworm",
        package: "linux-image-6.1.0-50-cloud-amd64",
        version: "6.1.176-1",
        release: "6.1.0-50-cloud-amd64",
    },
    Kernel {
        name: "6.12",
        suite: "bookworm-backports",
        package: "linux-image-6.12.95+deb12-cloud-amd64",
        version: "6.12.95-1~bpo12+1",
        release: "6.12.95+deb12-cloud-amd64",
    },
];

/// Debian's mirror (`$SPARKPROF_VM_MIRROR` overrides it).
const MIRROR: &str = "http://deb.debian.org/debian";
/// The suites of the private sources list.
const SUITES: &[&str] = &["bookworm", "bookworm-backports"];
/// Debian's archive signing keys (package debian-archive-keyring).
const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";
/// The guest binary's target: the host's, linked statically.
const GUEST_TARGET: &str = "x86_64-unknown-linux-gnu";
const GUEST_BINARY: &str = "sparkprof-vm-tests";
/// The guest CPU: `qemu64` (`max` double-faults under QEMU 7.2's
/// multi-threaded TCG) without CMPXCHG16B: with it, 6.12 guests crashed in
/// a third of the boots on a busy host (double faults in SLUB's
/// `this_cpu_cmpxchg16b`, QEMU 7.2 emulating it in its exclusive mode);
/// without it, none in 24. Linux does not need it (SLUB falls back).
const GUEST_CPU: &str = "qemu64,-cx16";
/// TCG with both vCPUs on one host thread, taking turns. With a thread per
/// vCPU (`thread=multi`), QEMU 7.2 let a 6.12 guest's vCPU run an `int3`
/// that the kernel's live code patching (static keys, `text_poke_bp`) had
/// already replaced on the other vCPU: "Oops: int3" in `sched_clock_cpu`
/// during boot (once in CI) or in `__schedule` when the tracepoints were
/// attached (1 of 15 boots here). One thread has no such race: 0 of 31
/// boots, idle and with the host's two CPUs busy, at 14-19 s a boot.
const GUEST_ACCEL: &str = "tcg,thread=single";
/// Boot, tests and power-off take about 15 s per kernel on this machine.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(150);
/// What the guest's /init prints.
const BOOTED: &str = "SPARKPROF-VM-BOOTED ";
const RESULT: &str = "SPARKPROF-VM-RESULT exit=";
/// The problems [`Run::died_before_init`] tells apart.
const NEVER_RAN_INIT: &str = "the guest never ran /init";
const TIMED_OUT: &str = "timed out after";

const INIT: &str = "#!/bin/busybox sh
# sparkprof vm-test guest: mount what a bare host has (no tracefs, debugfs
# or bpffs: sparkprof needs none), run the checks, report, power off (an
# init that exits panics the kernel).
bb=/bin/busybox
$bb mount -t proc proc /proc
$bb mount -t sysfs sysfs /sys
$bb mount -t devtmpfs devtmpfs /dev
echo \"SPARKPROF-VM-BOOTED $($bb cat /proc/sys/kernel/osrelease)\"
/sparkprof-vm-tests
echo \"SPARKPROF-VM-RESULT exit=$?\"
$bb poweroff -f
";

/// Where the suite runs (aya's `xtask` has the same two).
enum Environment {
    /// The running kernel, as root, directly.
    Local,
    /// Each pinned kernel, booted under qemu.
    Vm,
}

struct Options {
    environment: Environment,
    kernels: Vec<&'static Kernel>,
    broken: bool,
    timeout: Duration,
}

fn parse(args: &[String]) -> Result<Options> {
    let mut environment = Environment::Vm;
    let mut kernels = Vec::new();
    let mut broken = false;
    let mut timeout = DEFAULT_TIMEOUT;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--local" => environment = Environment::Local,
            "--kernel" => {
                let name = args
                    .next()
                    .context("--kernel needs a value (6.1 or 6.12)")?;
                let kernel = KERNELS
                    .iter()
                    .find(|k| k.name == name)
                    .with_context(|| format!("unknown kernel {name:?} (6.1 or 6.12)"))?;
                kernels.push(kernel);
            }
            "--broken" => broken = true,
            "--timeout" => {
                let secs = args.next().context("--timeout needs seconds")?;
                timeout = Duration::from_secs(secs.parse().context("--timeout SECS")?);
            }
            other => bail!(
                "unknown vm-test argument {other:?} \
                 (vm-test [--local] [--kernel 6.1|6.12]... [--broken] [--timeout SECS])"
            ),
        }
    }
    if matches!(environment, Environment::Local) && !kernels.is_empty() {
        bail!("--local runs the suite on this host's kernel: no --kernel with it");
    }
    if kernels.is_empty() {
        kernels = KERNELS.iter().collect();
    }
    Ok(Options {
        environment,
        kernels,
        broken,
        timeout,
    })
}

pub fn run(args: &[String]) -> Result<()> {
    let options = parse(args)?;
    // SAFETY: no arguments, cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        bail!(
            "vm-test loads eBPF programs, installs packages and fetches kernels with apt-get: \
             run it as root"
        );
    }
    match options.environment {
        Environment::Local => run_local(options.broken),
        Environment::Vm => run_vms(&options),
    }
}

/// The suite on this host's kernel: the same binary the guests boot, run
/// directly; its checks print as they pass or fail.
fn run_local(broken: bool) -> Result<()> {
    toolchain::setup()?;
    let binary = build_guest(broken)?;
    let started = Instant::now();
    let status = Command::new(&binary)
        .status()
        .with_context(|| format!("running {}", binary.display()))?;
    eprintln!(
        "xtask: the kernel suite on this host's kernel: {status} in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    if !status.success() {
        bail!("the kernel suite failed on this host's kernel ({status})");
    }
    Ok(())
}

/// The suite under qemu, one pinned kernel after another.
fn run_vms(options: &Options) -> Result<()> {
    let started = Instant::now();
    toolchain::setup()?;
    toolchain::apt_install(&[
        "qemu-system-x86",
        "busybox-static",
        "debian-archive-keyring",
    ])?;
    let busybox = busybox()?;
    let cache = cache_dir();
    fs::create_dir_all(&cache).with_context(|| format!("creating {}", cache.display()))?;
    let mut apt = PrivateApt::new(&cache)?;
    let mut vmlinuzes = Vec::new();
    for kernel in &options.kernels {
        vmlinuzes.push(fetch_kernel(&cache, &mut apt, kernel)?);
    }
    let binary = build_guest(options.broken)?;
    let initramfs = Initramfs::pack(&cache, &busybox, &binary)?;
    eprintln!(
        "xtask: vm-test: {}; set up in {:.0} s",
        qemu_version(),
        started.elapsed().as_secs_f64()
    );

    let mut runs = Vec::new();
    for (kernel, vmlinuz) in options.kernels.iter().zip(&vmlinuzes) {
        let mut run = boot(kernel, vmlinuz, &initramfs.path, options.timeout)?;
        if run.died_before_init() {
            // Nothing of sparkprof's had run: the fault is the emulator's or
            // the boot's, not a result. One more boot must pass everything.
            let first = run.problems.join("; ");
            eprintln!(
                "xtask: vm-test: the {} guest died before /init ({first}); no check had run, \
                 so this says nothing about sparkprof: booting it once more",
                kernel.name
            );
            run = boot(kernel, vmlinuz, &initramfs.path, options.timeout)?;
            run.first_boot = Some(first);
        }
        runs.push(run);
    }
    drop(initramfs);

    println!();
    let (mut passed, mut failed) = (0, 0);
    for run in &runs {
        println!(
            "vm-test {} ({} {}): {} passed, {} failed, {:.1} s{}{}",
            run.kernel.name,
            run.kernel.package,
            run.kernel.version,
            run.passed,
            run.failures.len(),
            run.elapsed.as_secs_f64(),
            if run.problems.is_empty() {
                String::new()
            } else {
                format!("; {}", run.problems.join("; "))
            },
            run.first_boot
                .as_ref()
                .map(|first| format!(" (second boot: the first died before /init: {first})"))
                .unwrap_or_default()
        );
        for failure in &run.failures {
            println!("  {failure}");
        }
        passed += run.passed;
        failed += run.failures.len() + usize::from(!run.problems.is_empty());
    }
    println!(
        "vm-test: matrix of {} kernels in {:.0} s",
        runs.len(),
        started.elapsed().as_secs_f64()
    );
    println!("vm-test: {passed} passed, {failed} failed");
    let bad: Vec<&str> = runs
        .iter()
        .filter(|run| !run.ok())
        .map(|run| run.kernel.name)
        .collect();
    if !bad.is_empty() {
        bail!("vm-test failed on {}", bad.join(", "));
    }
    Ok(())
}

fn cache_dir() -> PathBuf {
    std::env::var_os("SPARKPROF_VM_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/sparkprof-vm"))
}

fn busybox() -> Result<PathBuf> {
    let path = ["/bin/busybox", "/usr/bin/busybox"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .context("busybox is not installed (package busybox-static)")?;
    if !is_static(&path)? {
        bail!(
            "{} is dynamically linked: install busybox-static (it replaces busybox)",
            path.display()
        );
    }
    Ok(path)
}

fn qemu_version() -> String {
    Command::new("qemu-system-x86_64")
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .next()
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "qemu version unknown".into())
}

/// apt-get with its own sources list, lists and archive cache under the
/// vm-test cache: the system's configuration and state are only read.
struct PrivateApt {
    dir: PathBuf,
    updated: bool,
}

impl PrivateApt {
    fn new(cache: &Path) -> Result<Self> {
        let dir = cache.join("apt");
        for sub in ["sources.list.d", "lists/partial", "cache/archives/partial"] {
            fs::create_dir_all(dir.join(sub))
                .with_context(|| format!("creating {}", dir.join(sub).display()))?;
        }
        Ok(Self {
            dir,
            updated: false,
        })
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        let path = |sub: &str| self.dir.join(sub).display().to_string();
        for (key, value) in [
            ("Dir::Etc::SourceList", path("sources.list")),
            ("Dir::Etc::SourceParts", path("sources.list.d")),
            ("Dir::State::Lists", path("lists")),
            ("Dir::Cache", path("cache")),
            ("APT::Sandbox::User", "root".into()),
            ("Acquire::Languages", "none".into()),
        ] {
            cmd.arg("-o").arg(format!("{key}={value}"));
        }
        cmd.env("DEBIAN_FRONTEND", "noninteractive");
        cmd
    }

    /// Writes the sources list and updates the private lists, once.
    fn update(&mut self) -> Result<()> {
        if self.updated {
            return Ok(());
        }
        if !Path::new(KEYRING).exists() {
            bail!(
                "{KEYRING} is missing: install debian-archive-keyring (Debian's archive signing \
                 keys), which apt needs to check the kernel packages"
            );
        }
        let mirror = std::env::var("SPARKPROF_VM_MIRROR").unwrap_or_else(|_| MIRROR.into());
        let sources: String = SUITES
            .iter()
            .map(|suite| format!("deb [signed-by={KEYRING}] {mirror} {suite} main\n"))
            .collect();
        fs::write(self.dir.join("sources.list"), sources)?;
        eprintln!(
            "xtask: vm-test: apt-get update (private lists in {})",
            self.dir.display()
        );
        run_cmd(self.command("apt-get").args(["update", "-qq"]))
            .context("updating the private apt lists for the kernel packages")?;
        self.updated = true;
        Ok(())
    }

    /// `apt-get download package=version` into `dir`.
    fn download(&mut self, package: &str, version: &str, dir: &Path) -> Result<bool> {
        self.update()?;
        let status = self
            .command("apt-get")
            .args(["download", "-qq", &format!("{package}={version}")])
            .current_dir(dir)
            .status()
            .context("running apt-get download")?;
        Ok(status.success())
    }

    /// The versions the mirror has of packages named like `pattern`.
    fn available(&self, pattern: &str) -> String {
        let names = self
            .command("apt-cache")
            .args(["pkgnames", pattern])
            .output()
            .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
            .unwrap_or_default();
        let mut names: Vec<&str> = names
            .lines()
            .filter(|name| name.ends_with("-cloud-amd64"))
            .collect();
        names.sort();
        let mut lines = Vec::new();
        for name in names {
            if let Ok(out) = self.command("apt-cache").args(["madison", name]).output() {
                lines.extend(
                    String::from_utf8_lossy(&out.stdout)
                        .lines()
                        .map(|line| format!("  {}", line.trim())),
                );
            }
        }
        lines.join("\n")
    }
}

/// The kernel's `vmlinuz` in the cache, fetched and unpacked if missing.
fn fetch_kernel(cache: &Path, apt: &mut PrivateApt, kernel: &Kernel) -> Result<PathBuf> {
    let dir = cache
        .join("kernels")
        .join(format!("{}_{}", kernel.package, kernel.version));
    let vmlinuz = dir.join("vmlinuz");
    if vmlinuz.exists() {
        return Ok(vmlinuz);
    }
    eprintln!(
        "xtask: vm-test: fetching {} {} ({})",
        kernel.package, kernel.version, kernel.suite
    );
    let debs = cache.join("debs");
    fs::create_dir_all(&debs)?;
    if !apt.download(kernel.package, kernel.version, &debs)? {
        let prefix = kernel.package.split('.').next().unwrap_or(kernel.package);
        bail!(
            "the mirror no longer has {} {} ({}). Kernels it has:\n{}\n\
             Pin one of these in KERNELS (xtask/src/vm_test.rs).",
            kernel.package,
            kernel.version,
            kernel.suite,
            apt.available(prefix)
        );
    }
    let deb = debs.join(format!("{}_{}_amd64.deb", kernel.package, kernel.version));
    if !deb.exists() {
        bail!(
            "apt-get download succeeded but {} is missing",
            deb.display()
        );
    }
    let unpacked = cache.join(format!("unpack-{}", std::process::id()));
    let _ = fs::remove_dir_all(&unpacked);
    run_cmd(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&unpacked))?;
    let boot = unpacked.join("boot");
    let image = boot.join(format!("vmlinuz-{}", kernel.release));
    if !image.exists() {
        bail!(
            "{} has no boot/vmlinuz-{} (is `release` right in KERNELS?)",
            deb.display(),
            kernel.release
        );
    }
    fs::create_dir_all(&dir)?;
    fs::copy(
        boot.join(format!("config-{}", kernel.release)),
        dir.join("config"),
    )
    .ok();
    let partial = dir.join("vmlinuz.partial");
    fs::copy(&image, &partial)?;
    fs::rename(&partial, &vmlinuz)?;
    fs::remove_dir_all(&unpacked)?;
    fs::remove_file(&deb).ok();
    Ok(vmlinuz)
}

/// Builds the guest binary, statically linked.
fn build_guest(broken: bool) -> Result<PathBuf> {
    let mut build = pinned_cargo();
    build
        .args([
            "build",
            "--release",
            "--locked",
            "-p",
            "sparkprof-vm-tests",
            "--target",
            GUEST_TARGET,
        ])
        // With --target these flags reach the guest binary only, not build
        // scripts (nor aya-build's eBPF builds, which set their own).
        .env(
            "RUSTFLAGS",
            "-C target-feature=+crt-static -C force-frame-pointers=yes",
        )
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    if broken {
        build.args(["--features", "broken"]);
    }
    run_cmd(&mut build).context("building the guest binary")?;
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    let binary = target_dir
        .join(GUEST_TARGET)
        .join("release")
        .join(GUEST_BINARY);
    if !is_static(&binary)? {
        bail!("{} is not statically linked", binary.display());
    }
    Ok(binary)
}

/// An ELF file without a program interpreter (PT_INTERP) is static.
fn is_static(path: &Path) -> Result<bool> {
    let mut data = Vec::new();
    fs::File::open(path)
        .and_then(|f| f.take(64 * 1024).read_to_end(&mut data))
        .with_context(|| format!("reading {}", path.display()))?;
    let u16_at = |at: usize| {
        data.get(at..at + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u64_at = |at: usize| {
        data.get(at..at + 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    };
    if data.get(..5) != Some(b"\x7fELF\x02") {
        bail!("{} is not a 64-bit ELF file", path.display());
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    else {
        bail!("{}: truncated ELF header", path.display());
    };
    const PT_INTERP: u32 = 3;
    for index in 0..usize::from(phnum) {
        let at = phoff as usize + index * usize::from(phentsize);
        let Some(kind) = data.get(at..at + 4) else {
            bail!(
                "{}: program headers beyond the first 64 KiB",
                path.display()
            );
        };
        if u32::from_le_bytes(kind.try_into().expect("4 bytes")) == PT_INTERP {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The guest's initramfs, in a directory of this run (removed on drop).
struct Initramfs {
    dir: PathBuf,
    path: PathBuf,
}

impl Initramfs {
    fn pack(cache: &Path, busybox: &Path, binary: &Path) -> Result<Self> {
        let dir = cache.join(format!("initramfs-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let root = dir.join("root");
        for sub in ["bin", "dev", "proc", "sys", "tmp"] {
            fs::create_dir_all(root.join(sub))?;
        }
        let this = Self {
            path: dir.join("initrd.gz"),
            dir,
        };
        fs::copy(busybox, root.join("bin/busybox"))?;
        fs::copy(binary, root.join(GUEST_BINARY))?;
        fs::write(root.join("init"), INIT)?;
        fs::set_permissions(root.join("init"), fs::Permissions::from_mode(0o755))?;
        // The kernel opens /dev/console for init before devtmpfs is mounted.
        let console = std::ffi::CString::new(
            root.join("dev/console")
                .into_os_string()
                .into_encoded_bytes(),
        )?;
        // SAFETY: a NUL-terminated path; creating a device node as root.
        if unsafe { libc::mknod(console.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(5, 1)) } != 0
        {
            bail!("mknod dev/console: {}", std::io::Error::last_os_error());
        }
        run_cmd(
            Command::new("sh")
                .arg("-c")
                .arg(r#""$0" find . | "$0" cpio -o -H newc 2>/dev/null | gzip -1 > ../initrd.gz"#)
                .arg(busybox)
                .current_dir(&root),
        )
        .context("packing the initramfs")?;
        Ok(this)
    }
}

impl Drop for Initramfs {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// What one kernel's boot showed.
struct Run {
    kernel: &'static Kernel,
    passed: usize,
    /// `FAIL` lines (with their indented continuation lines).
    failures: Vec<String>,
    /// Boot-level problems: panic, timeout, no result, wrong kernel.
    problems: Vec<String>,
    elapsed: Duration,
    /// Why the first boot of this kernel was not counted, when it died
    /// before /init and this is the second.
    first_boot: Option<String>,
}

impl Run {
    fn ok(&self) -> bool {
        self.failures.is_empty() && self.problems.is_empty()
    }

    /// The guest died (a panic, qemu ending) before its /init printed the
    /// boot marker, so before any check ran; a timeout is not that.
    fn died_before_init(&self) -> bool {
        self.passed == 0
            && self.failures.is_empty()
            && self.problems.iter().any(|p| p == NEVER_RAN_INIT)
            && !self.problems.iter().any(|p| p.starts_with(TIMED_OUT))
    }
}

enum Line {
    Out(String),
    Err(String),
}

fn boot(kernel: &'static Kernel, vmlinuz: &Path, initrd: &Path, timeout: Duration) -> Result<Run> {
    eprintln!(
        "xtask: vm-test: booting {} {} under qemu (TCG), timeout {} s",
        kernel.package,
        kernel.version,
        timeout.as_secs()
    );
    let started = Instant::now();
    let mut child = Command::new("qemu-system-x86_64")
        .args([
            "-accel",
            GUEST_ACCEL,
            "-cpu",
            GUEST_CPU,
            "-smp",
            "2",
            "-m",
            "1024",
            "-nographic",
            "-nodefaults",
            "-serial",
            "stdio",
            "-no-reboot",
            "-kernel",
        ])
        .arg(vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        .args([
            "-append",
            "console=ttyS0 panic=-1 quiet loglevel=4 oops=panic",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting qemu-system-x86_64")?;
    let (tx, rx) = mpsc::channel();
    let readers = [
        forward(child.stdout.take().expect("piped"), tx.clone(), Line::Out),
        forward(child.stderr.take().expect("piped"), tx, Line::Err),
    ];
    let deadline = started + timeout;
    let mut output = Vec::new();
    let mut timed_out = false;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(Line::Out(line)) => {
                println!("[{}] {line}", kernel.name);
                output.push(line);
            }
            Ok(Line::Err(line)) => eprintln!("[{} qemu] {line}", kernel.name),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                timed_out = true;
                let _ = child.kill();
                break;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let status = child.wait().context("waiting for qemu")?;
    for reader in readers {
        let _ = reader.join();
    }
    let mut run = assess(
        kernel,
        &output,
        timed_out.then_some(timeout),
        &status.to_string(),
    );
    run.elapsed = started.elapsed();
    Ok(run)
}

/// What the console output of a boot says (`timed_out`: the boot was cut
/// after that long; `status`: how qemu ended).
fn assess(
    kernel: &'static Kernel,
    output: &[String],
    timed_out: Option<Duration>,
    status: &str,
) -> Run {
    let mut run = Run {
        kernel,
        passed: 0,
        failures: Vec::new(),
        problems: Vec::new(),
        elapsed: Duration::ZERO,
        first_boot: None,
    };
    let mut booted = None;
    let mut result = None;
    let mut in_failure = false;
    for line in output {
        if let Some(release) = line.split(BOOTED).nth(1) {
            booted = Some(release.trim().to_owned());
        }
        if let Some(code) = line.split(RESULT).nth(1) {
            result = code.trim().parse::<i32>().ok();
        }
        if line.contains("Kernel panic") && run.problems.iter().all(|p| p != "kernel panic") {
            run.problems.push("kernel panic".into());
        }
        if line.starts_with("PASS ") {
            run.passed += 1;
        }
        if line.starts_with("FAIL ") {
            run.failures.push(line.clone());
            in_failure = true;
        } else if in_failure && line.starts_with("    ") {
            let last = run.failures.last_mut().expect("a failure");
            last.push_str("\n    ");
            last.push_str(line);
        } else {
            in_failure = false;
        }
    }
    if let Some(timeout) = timed_out {
        run.problems
            .push(format!("{TIMED_OUT} {} s", timeout.as_secs()));
    }
    match booted {
        None => run.problems.push(NEVER_RAN_INIT.into()),
        Some(release) if release != kernel.release => run.problems.push(format!(
            "booted kernel {release}, expected {}",
            kernel.release
        )),
        Some(_) => {}
    }
    match result {
        Some(0) => {}
        Some(_) if !run.failures.is_empty() => {}
        Some(code) => run
            .problems
            .push(format!("{GUEST_BINARY} exited with status {code}")),
        None if timed_out.is_none() => run
            .problems
            .push(format!("no result marker from the guest (qemu {status})")),
        None => {}
    }
    if run.passed == 0 && run.failures.is_empty() && run.problems.is_empty() {
        run.problems.push("no check ran".into());
    }
    run
}

/// Forwards `stream`'s lines (cleaned of terminal control sequences) to
/// `tx` until it ends.
fn forward(
    stream: impl Read + Send + 'static,
    tx: mpsc::Sender<Line>,
    wrap: fn(String) -> Line,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let mut reader = BufReader::new(stream);
        let mut bytes = Vec::new();
        loop {
            bytes.clear();
            match reader.read_until(b'\n', &mut bytes) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    if tx.send(wrap(clean(&bytes))).is_err() {
                        return;
                    }
                }
            }
        }
    })
}

/// A console line without escape sequences (the firmware clears the
/// screen) or other control characters.
fn clean(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => {
                if chars.peek() == Some(&'[') {
                    chars.next();
                    // Parameters, then one final letter.
                    for c in chars.by_ref() {
                        if c.is_ascii_alphabetic() {
                            break;
                        }
                    }
                } else {
                    chars.next();
                }
            }
            '\t' => out.push(c),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out.trim_end().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleans_console_lines() {
        assert_eq!(
            clean(b"\x1bc\x1b[?7l\x1b[2JSPARKPROF-VM-BOOTED 6.1.0\r\n"),
            "SPARKPROF-VM-BOOTED 6.1.0"
        );
        assert_eq!(clean(b"PASS load: ok\r\n"), "PASS load: ok");
    }

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_owned).collect()
    }

    #[test]
    fn a_clean_run_passes() {
        let run = assess(
            &KERNELS[0],
            &lines(
                "SPARKPROF-VM-BOOTED 6.1.0-50-cloud-amd64\nPASS load: ok\nPASS on_cpu: ok\n\
                 SPARKPROF-VM-RESULT exit=0",
            ),
            None,
            "exit status: 0",
        );
        assert!(run.ok());
        assert_eq!(run.passed, 2);
    }

    #[test]
    fn failures_panics_and_silence_fail() {
        let boot = "SPARKPROF-VM-BOOTED 6.1.0-50-cloud-amd64\n";
        let failed = assess(
            &KERNELS[0],
            &lines(&format!(
                "{boot}FAIL load: rejected\n    Verifier output:\n    BPF_MOV uses reserved fields\n\
                 PASS other: ok\nSPARKPROF-VM-RESULT exit=1"
            )),
            None,
            "exit status: 0",
        );
        assert!(!failed.ok());
        assert_eq!(failed.failures.len(), 1);
        assert!(failed.failures[0].ends_with("BPF_MOV uses reserved fields"));
        assert!(failed.problems.is_empty(), "{:?}", failed.problems);

        let panicked = assess(
            &KERNELS[0],
            &lines(&format!(
                "{boot}PASS load: ok\n[ 3.1] Kernel panic - not syncing: Attempted to kill init!"
            )),
            None,
            "exit status: 0",
        );
        assert!(!panicked.ok());
        assert!(panicked.problems.iter().any(|p| p == "kernel panic"));
        assert!(
            panicked
                .problems
                .iter()
                .any(|p| p.starts_with("no result marker"))
        );
        // It had booted and a check had run: a result, not booted again.
        assert!(!panicked.died_before_init());
        let early = assess(
            &KERNELS[1],
            &lines(
                "[ 1.05] Oops: int3: 0000 [#1]
[ 1.06] Kernel panic - not syncing: Fatal exception",
            ),
            None,
            "exit status: 0",
        );
        assert!(!early.ok());
        assert!(early.died_before_init(), "{:?}", early.problems);

        let timed_out = assess(
            &KERNELS[0],
            &lines(boot),
            Some(Duration::from_secs(5)),
            "signal: 9",
        );
        assert_eq!(timed_out.problems, ["timed out after 5 s"]);
        let silent = assess(&KERNELS[0], &[], Some(Duration::from_secs(5)), "signal: 9");
        assert!(!silent.died_before_init(), "{:?}", silent.problems);

        let wrong = assess(
            &KERNELS[1],
            &lines(&format!("{boot}PASS load: ok\nSPARKPROF-VM-RESULT exit=0")),
            None,
            "exit status: 0",
        );
        assert!(!wrong.ok());
        assert!(wrong.problems[0].starts_with("booted kernel 6.1.0-50-cloud-amd64"));

        let nothing = assess(&KERNELS[0], &[], None, "exit status: 1");
        assert!(!nothing.ok());
    }

    #[test]
    fn parses_options() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let all = parse(&[]).unwrap();
        assert_eq!(all.kernels.len(), KERNELS.len());
        assert!(!all.broken);
        let one = parse(&args(&["--kernel", "6.1", "--broken"])).unwrap();
        assert_eq!(one.kernels.len(), 1);
        assert_eq!(one.kernels[0].release, "6.1.0-50-cloud-amd64");
        assert!(one.broken);
        assert!(parse(&args(&["--kernel", "5.4"])).is_err());
        assert!(matches!(all.environment, Environment::Vm));
        let local = parse(&args(&["--local"])).unwrap();
        assert!(matches!(local.environment, Environment::Local));
        assert!(parse(&args(&["--local", "--kernel", "6.1"])).is_err());
    }
}
