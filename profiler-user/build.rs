//! Builds the eBPF object (profiler-ebpf) for the BPF target with the pinned
//! nightly toolchain and bpf-linker, and leaves it in OUT_DIR where
//! `collect::loader` embeds it with `include_bytes_aligned!`.
//!
//! `cargo xtask build` installs that toolchain and linker first.

/// The toolchain proven to build and load Rust eBPF on our kernels; keep in
/// step with `xtask/src/toolchain.rs`.
const EBPF_TOOLCHAIN: &str = "nightly-2026-07-15";

fn main() -> anyhow::Result<()> {
    println!("cargo:rerun-if-changed=../profiler-common/src");
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "profiler-ebpf",
            root_dir: "../profiler-ebpf",
            ..Default::default()
        }],
        aya_build::Toolchain::Custom(EBPF_TOOLCHAIN),
    )
}
