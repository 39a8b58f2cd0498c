//! The daemon's effective capabilities, and what recording needs of them.

use std::fs;

/// Capability numbers from `linux/capability.h`.
pub mod cap {
    pub const SYS_PTRACE: u32 = 19;
    pub const SYS_ADMIN: u32 = 21;
    pub const PERFMON: u32 = 38;
    pub const BPF: u32 = 39;
    pub const CHECKPOINT_RESTORE: u32 = 40;
}

/// A set of effective capabilities (`CapEff` of /proc/self/status).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities(pub u64);

impl Capabilities {
    /// The calling process's effective set.
    pub fn current() -> Self {
        let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
        Self(parse_cap_eff(&status).unwrap_or(0))
    }

    pub fn has(self, cap: u32) -> bool {
        self.0 & (1u64 << cap) != 0
    }

    /// What `record` needs and this set lacks, as `setcap` names; empty when
    /// recording can go ahead.
    ///
    /// - loading programs and reading maps: CAP_BPF (or CAP_SYS_ADMIN);
    /// - system-wide perf events: CAP_PERFMON (or CAP_SYS_ADMIN), whatever
    ///   `kernel.perf_event_paranoid` says;
    /// - reading every process's /proc/PID/maps: CAP_SYS_PTRACE;
    /// - opening binaries through /proc/PID/map_files (containers, deleted
    ///   files): CAP_CHECKPOINT_RESTORE (or CAP_SYS_ADMIN).
    pub fn missing_for_record(self) -> Vec<&'static str> {
        let admin = self.has(cap::SYS_ADMIN);
        let mut missing = Vec::new();
        if !(self.has(cap::BPF) || admin) {
            missing.push("cap_bpf");
        }
        if !(self.has(cap::PERFMON) || admin) {
            missing.push("cap_perfmon");
        }
        if !self.has(cap::SYS_PTRACE) {
            missing.push("cap_sys_ptrace");
        }
        if !(self.has(cap::CHECKPOINT_RESTORE) || admin) {
            missing.push("cap_checkpoint_restore");
        }
        missing
    }

    /// Human-readable names of the capabilities of interest that are held.
    pub fn describe(self) -> Vec<&'static str> {
        [
            (cap::BPF, "CAP_BPF"),
            (cap::PERFMON, "CAP_PERFMON"),
            (cap::SYS_ADMIN, "CAP_SYS_ADMIN"),
            (cap::SYS_PTRACE, "CAP_SYS_PTRACE"),
            (cap::CHECKPOINT_RESTORE, "CAP_CHECKPOINT_RESTORE"),
        ]
        .into_iter()
        .filter(|(cap, _)| self.has(*cap))
        .map(|(_, name)| name)
        .collect()
    }
}

fn parse_cap_eff(status: &str) -> Option<u64> {
    let line = status.lines().find(|line| line.starts_with("CapEff:"))?;
    u64::from_str_radix(line["CapEff:".len()..].trim(), 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_has_everything_and_nobody_lacks_everything() {
        assert!(
            Capabilities(0x000001ffffffffff)
                .missing_for_record()
                .is_empty()
        );
        assert_eq!(
            Capabilities(0).missing_for_record(),
            [
                "cap_bpf",
                "cap_perfmon",
                "cap_sys_ptrace",
                "cap_checkpoint_restore"
            ]
        );
        // CAP_SYS_ADMIN stands in for BPF, PERFMON and CHECKPOINT_RESTORE, not for PTRACE.
        let admin = Capabilities(1 << cap::SYS_ADMIN);
        assert_eq!(admin.missing_for_record(), ["cap_sys_ptrace"]);
    }

    #[test]
    fn parses_cap_eff() {
        let status = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        assert_eq!(parse_cap_eff(status), Some(0x1ffffffffff));
    }
}
