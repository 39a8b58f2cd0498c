//! With the `broken` feature, builds the deliberately broken eBPF object of
//! `broken-ebpf/` for the BPF target (aya-build, the pinned nightly and
//! bpf-linker, as profiler-user's build.rs does for the shipped object)
//! into OUT_DIR, where `src/broken.rs` embeds it. Without it, nothing.

/// Keep in step with `xtask/src/toolchain.rs` and profiler-user's build.rs.
const EBPF_TOOLCHAIN: &str = "nightly-2026-07-15";

fn main() -> anyhow::Result<()> {
    if std::env::var_os("CARGO_FEATURE_BROKEN").is_none() {
        return Ok(());
    }
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "sparkprof-vm-broken-ebpf",
            root_dir: "broken-ebpf",
            ..Default::default()
        }],
        aya_build::Toolchain::Custom(EBPF_TOOLCHAIN),
    )
}
