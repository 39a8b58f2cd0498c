//! Where sparkprof's own CPU goes: the time each pipeline stage takes, for
//! whoever asks what the profiler costs (index.json's `pipeline_cpu`, the
//! daemon's `status.json`).
//!
//! Read from the process's CPU clock around each stage of each drain: two
//! clock reads a stage, microseconds a drain. The process clock counts
//! every thread, so work a stage hands to a helper thread and waits for (a
//! JVM's perf map asked for in parallel) counts under that stage. What
//! happens between drains (the output rewritten every flush interval, the
//! event loop) is in no stage: the stages' sum is below the process's CPU
//! time, and the difference is that.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The stages of one drain, in the pipeline's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Reading the kernel's maps and rings (`collect`).
    Collect,
    /// New processes and threads: runtimes discovered, JVM and Python
    /// threads handed to the kernel, thread names read (`enrich`'s discovery
    /// and the runtimes').
    Follow,
    /// Tagging samples with process, thread, application and stage.
    Enrich,
    /// Naming frames: native, kernel, JIT, interpreted Java and Python.
    Symbolize,
    /// Adding the drain to the output's aggregates (not the file rewrites).
    Write,
}

/// CPU time by stage since the recording started, in microseconds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageCpu {
    /// Drains timed.
    pub drains: u64,
    pub collect_us: u64,
    pub follow_us: u64,
    pub enrich_us: u64,
    pub symbolize_us: u64,
    pub write_us: u64,
}

impl StageCpu {
    /// Adds the CPU time since `since` (a [`process_cpu`] reading) to
    /// `stage`.
    pub fn add_since(&mut self, stage: Stage, since: Duration) {
        let spent = process_cpu().saturating_sub(since).as_micros() as u64;
        let slot = match stage {
            Stage::Collect => &mut self.collect_us,
            Stage::Follow => &mut self.follow_us,
            Stage::Enrich => &mut self.enrich_us,
            Stage::Symbolize => &mut self.symbolize_us,
            Stage::Write => &mut self.write_us,
        };
        *slot = slot.saturating_add(spent);
    }

    /// A drain went through every stage.
    pub fn count_drain(&mut self) {
        self.drains += 1;
    }

    /// Each stage's name (as `seconds_by_stage` and index.json's
    /// `<stage>_us` call it) and microseconds, in the pipeline's order.
    pub fn by_stage(&self) -> [(&'static str, u64); 5] {
        [
            ("collect", self.collect_us),
            ("follow", self.follow_us),
            ("enrich", self.enrich_us),
            ("symbolize", self.symbolize_us),
            ("write", self.write_us),
        ]
    }

    /// Seconds by stage name, for a status file.
    pub fn seconds_by_stage(&self) -> std::collections::BTreeMap<String, f64> {
        self.by_stage()
            .into_iter()
            .map(|(stage, us)| (stage.to_string(), us as f64 / 1e6))
            .collect()
    }
}

/// This process's CPU time so far (user and system, every thread).
pub fn process_cpu() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec to write to; the clock always
    // exists on Linux.
    if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut now) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spins until the process has used `cpu` more CPU time.
    fn spin_for(cpu: Duration) {
        let start = process_cpu();
        let mut x = 1u64;
        while process_cpu() - start < cpu {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }

    #[test]
    fn a_stage_gets_the_cpu_spent_in_it_and_no_other_does() {
        let mut cpu = StageCpu::default();
        let before = process_cpu();
        let since = process_cpu();
        spin_for(Duration::from_millis(30));
        cpu.add_since(Stage::Symbolize, since);
        cpu.count_drain();
        let spent = (process_cpu() - before).as_micros() as u64;
        assert!(
            (30_000..=spent).contains(&cpu.symbolize_us),
            "symbolize {} us of {spent} us spent",
            cpu.symbolize_us
        );
        let staged: u64 = cpu.by_stage().iter().map(|(_, us)| us).sum();
        assert_eq!(staged, cpu.symbolize_us);
        assert_eq!(cpu.drains, 1);
        let by_stage = cpu.seconds_by_stage();
        assert_eq!(by_stage.len(), 5);
        assert_eq!(by_stage["symbolize"], cpu.symbolize_us as f64 / 1e6);
        assert_eq!(by_stage["collect"], 0.0);
    }
}
