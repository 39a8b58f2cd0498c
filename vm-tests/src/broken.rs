//! `--broken`: loads the deliberately broken program of `broken-ebpf/`
//! exactly as the shipped ones are loaded, so a kernel whose verifier
//! rejects it fails the run with the verifier's message.

use aya::{EbpfLoader, programs::PerfEvent};

/// The object built by build.rs (aya-build) from `broken-ebpf/`.
static BROKEN_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/broken"));

const PROGRAM: &str = "broken_sign_extend";

pub fn check() -> Result<String, String> {
    let mut ebpf = EbpfLoader::new()
        .load(BROKEN_OBJECT)
        .map_err(|err| format!("loading the object: {err}"))?;
    let program: &mut PerfEvent = ebpf
        .program_mut(PROGRAM)
        .ok_or_else(|| format!("{PROGRAM} is missing from the object"))?
        .try_into()
        .map_err(|err| format!("{PROGRAM}: {err}"))?;
    program.load().map_err(|err| {
        format!("{PROGRAM} was rejected: {err}")
            .replace(". Verifier output: ", ".\nVerifier output:\n")
    })?;
    Ok(format!(
        "{PROGRAM} (a BPF ISA v4 sign-extending move) loaded: this kernel accepts v4 instructions"
    ))
}
