//! The pinned toolchain: installed on demand, quick when present.
//!
//! Proven on our kernels (see shared notes): aya 0.16 needs rustc >= 1.98 on
//! both sides; the eBPF side needs a nightly with rust-src for
//! `-Z build-std=core`; bpf-linker 0.10.3 dlopens that nightly's own libLLVM
//! (newer bpf-linkers dropped that, and Debian's LLVM cannot read the
//! nightly's bitcode). Userspace builds with the same toolchain, so one
//! download serves both.

use std::{path::PathBuf, process::Command};

use anyhow::{Context as _, Result, bail};

use crate::run_cmd;

/// The one toolchain everything but xtask builds with.
pub const PINNED: &str = "nightly-2026-07-15";
/// The bpf-linker release built against [`PINNED`]'s LLVM.
pub const BPF_LINKER: &str = "0.10.3";

fn rustup_home() -> PathBuf {
    std::env::var_os("RUSTUP_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| home().join(".rustup"))
}

fn cargo_home() -> PathBuf {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| home().join(".cargo"))
}

fn home() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root"))
}

fn toolchain_dir() -> PathBuf {
    rustup_home()
        .join("toolchains")
        .join(format!("{PINNED}-x86_64-unknown-linux-gnu"))
}

fn toolchain_ready() -> bool {
    let dir = toolchain_dir();
    dir.join("bin/cargo").exists()
        && dir.join("bin/clippy-driver").exists()
        && dir.join("bin/rustfmt").exists()
        && dir
            .join("lib/rustlib/src/rust/library/core/Cargo.toml")
            .exists()
}

fn bpf_linker_version() -> Option<String> {
    let output = Command::new(cargo_home().join("bin/bpf-linker"))
        .arg("--version")
        .output()
        .ok()?;
    Some(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// Installs the pinned toolchain (with rust-src, clippy, rustfmt) and
/// bpf-linker if they are missing. Idempotent; about a second when present.
pub fn setup() -> Result<()> {
    if !toolchain_ready() {
        eprintln!("xtask: installing toolchain {PINNED} (rust-src, clippy, rustfmt)");
        run_cmd(Command::new("rustup").args([
            "toolchain",
            "install",
            PINNED,
            "--profile",
            "minimal",
            "-c",
            "rust-src",
            "-c",
            "clippy",
            "-c",
            "rustfmt",
            "--no-self-update",
        ]))
        .context("installing the pinned Rust toolchain")?;
    }
    let wanted = format!("bpf-linker {BPF_LINKER}");
    if bpf_linker_version().as_deref() != Some(wanted.as_str()) {
        eprintln!("xtask: installing bpf-linker {BPF_LINKER} (about a minute)");
        let mut install = Command::new("rustup");
        install
            .args([
                "run",
                PINNED,
                "cargo",
                "install",
                &format!("bpf-linker@{BPF_LINKER}"),
                "--locked",
                "--force",
            ])
            .env_remove("RUSTUP_TOOLCHAIN")
            .env_remove("CARGO");
        run_cmd(&mut install).context("installing bpf-linker")?;
        match bpf_linker_version() {
            Some(version) if version == wanted => {}
            other => bail!("bpf-linker installed but reports {other:?}, expected {wanted}"),
        }
    }
    // bpf-linker must be on PATH for the BPF target's link step.
    let bin = cargo_home().join("bin");
    let path = std::env::var_os("PATH").unwrap_or_default();
    if !std::env::split_paths(&path).any(|p| p == bin) {
        let mut paths: Vec<PathBuf> = std::env::split_paths(&path).collect();
        paths.insert(0, bin);
        // SAFETY: xtask is single-threaded here.
        unsafe { std::env::set_var("PATH", std::env::join_paths(paths)?) };
    }
    Ok(())
}

/// Installs Debian packages that are missing (`apt-get`), for tests and benchmarks.
pub fn apt_install(packages: &[&str]) -> Result<()> {
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|p| {
            !Command::new("dpkg-query")
                .args(["-W", "-f=${Status}", p])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
                .unwrap_or(false)
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("xtask: apt-get install {}", missing.join(" "));
    run_cmd(Command::new("apt-get").args(["update", "-qq"]))?;
    run_cmd(
        Command::new("apt-get")
            .args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
}
