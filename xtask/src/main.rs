//! `cargo xtask`: set-up, build, record, test (and later bench, vm-test).
//!
//! xtask itself builds with whatever stable toolchain the machine has (it
//! needs nothing but std, anyhow and libc); everything else is built with the
//! pinned toolchain that xtask installs first (see [`toolchain`]).

mod bench;
mod jdks;
mod spark;
mod test;
mod toolchain;
mod vm_test;

use std::{
    env,
    path::{Path, PathBuf},
    process::{Command, ExitCode},
};

use anyhow::{Context as _, Result, bail};

const USAGE: &str = "\
usage: cargo xtask <command> [args]

commands:
  setup            install the pinned toolchain, rust-src and bpf-linker (idempotent)
  build            setup, then build target/release/sparkprof
  record [-- ARGS] build, then `sparkprof record` (default: -d 10 -o profiles)
  test             build, then every test: lints, unit, real-kernel integration,
                   then the kernel matrix (vm-test)
  lint             cargo fmt --check and cargo clippy -D warnings
  bench [--runs N] [--only SECTION[,SECTION]]
                   build, then sparkprof vs perf and bpftrace, and JIT naming;
                   writes BENCHMARKS.md (sections: kernel, overhead, cost, jit)
  vm-test [--kernel 6.1|6.12]... [--broken] [--timeout SECS]
                   boot Debian's 6.1 and 6.12 cloud kernels under qemu (TCG) and
                   check every eBPF program loads and samples there (vm-tests/);
                   --broken adds a program the 6.1 verifier rejects
";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let mut args = env::args().skip(1);
    let command = args.next().unwrap_or_default();
    let rest: Vec<String> = args.collect();
    match command.as_str() {
        "setup" => toolchain::setup(),
        "build" => build().map(|_| ()),
        "record" => record(&rest),
        "test" => test::run(&rest),
        "bench" => bench::run(&rest),
        "vm-test" => vm_test::run(&rest),
        "lint" => {
            toolchain::setup()?;
            test::lint()
        }
        "" | "help" | "-h" | "--help" => {
            print!("{USAGE}");
            Ok(())
        }
        other => bail!("unknown command {other:?}\n{USAGE}"),
    }
}

/// The workspace root (xtask lives one level below it).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask is in the workspace")
        .to_path_buf()
}

/// `cargo` of the pinned toolchain, run from the workspace root, with the
/// variables of the outer (stable) cargo removed so they cannot leak in.
pub fn pinned_cargo() -> Command {
    let mut cmd = Command::new("rustup");
    cmd.args(["run", toolchain::PINNED, "cargo"]);
    for var in [
        "RUSTUP_TOOLCHAIN",
        "RUSTC",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO",
        "RUSTDOC",
    ] {
        cmd.env_remove(var);
    }
    cmd.current_dir(workspace_root());
    cmd
}

/// Runs a command, failing with its description if it fails.
pub fn run_cmd(cmd: &mut Command) -> Result<()> {
    let description = format!("{cmd:?}");
    let status = cmd
        .status()
        .with_context(|| format!("cannot run {description}"))?;
    if !status.success() {
        bail!("{description} failed: {status}");
    }
    Ok(())
}

/// Installs what is missing and builds the release binary; returns its path.
pub fn build() -> Result<PathBuf> {
    toolchain::setup()?;
    run_cmd(pinned_cargo().args(["build", "--release", "--locked", "-p", "profiler-user"]))?;
    let binary = workspace_root().join("target/release/sparkprof");
    if !binary.exists() {
        bail!("build finished but {} is missing", binary.display());
    }
    Ok(binary)
}

fn record(args: &[String]) -> Result<()> {
    let binary = build()?;
    let args: Vec<String> = match args.first().map(String::as_str) {
        Some("--") => args[1..].to_vec(),
        _ => args.to_vec(),
    };
    let mut cmd = Command::new(&binary);
    cmd.arg("record");
    if args.is_empty() {
        cmd.args(["--duration", "10", "--output", "profiles"]);
    } else {
        cmd.args(&args);
    }
    run_cmd(&mut cmd)
}
