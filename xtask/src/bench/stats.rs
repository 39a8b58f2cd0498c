//! Statistics and tables: interleaved pairs, ratios, medians, spreads.

use std::time::Duration;

use anyhow::Result;

/// How far apart the slowest and the fastest of `values` are, in percent
/// of the fastest: the noise figure of every section with repeated runs.
pub(crate) fn spread_percent(values: &[f64]) -> f64 {
    let low = values.iter().copied().fold(f64::INFINITY, f64::min);
    let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    100.0 * (high / low - 1.0)
}

/// The order of a section's interleaved pairs: for each pair index, every
/// arm (a mode or a profiler) runs one pair, handed to `one` with the
/// index and whether the profiled run goes first. Even pairs run without
/// then with the profiler and odd ones with then without, and the arms
/// take turns going first, so that no kind of run always follows another
/// (a warm page cache or a CPU's frequency would otherwise favour one).
pub(crate) fn interleaved_pairs<Arm>(
    runs: usize,
    arms: &mut [Arm],
    mut one: impl FnMut(usize, bool, &mut Arm) -> Result<()>,
) -> Result<()> {
    for pair in 0..runs {
        let profiled_first = pair % 2 == 1;
        let mut order: Vec<&mut Arm> = arms.iter_mut().collect();
        if profiled_first {
            order.reverse();
        }
        for arm in order {
            one(pair, profiled_first, arm)?;
        }
    }
    Ok(())
}

/// One interleaved pair of workload runs, with what the profiled run's
/// recording said (`Extra`: a section's own counts).
pub(crate) struct TimedPair<Extra> {
    pub profiled_first: bool,
    /// The workload's seconds of work without and with the profiler.
    pub unprofiled: f64,
    pub profiled: f64,
    /// The profiler's utime + stime over the profiled run's work, and the
    /// wall time of that window.
    pub cpu: Duration,
    pub window: Duration,
    pub extra: Extra,
}

impl<Extra> TimedPair<Extra> {
    pub(crate) fn ratio(&self) -> f64 {
        self.profiled / self.unprofiled
    }

    /// A pair for the report tests: the profiler used 1 % of `window`.
    #[cfg(test)]
    pub(crate) fn fixture(
        profiled_first: bool,
        (unprofiled, profiled): (f64, f64),
        window: Duration,
        extra: Extra,
    ) -> Self {
        Self {
            profiled_first,
            unprofiled,
            profiled,
            cpu: window / 100,
            window,
            extra,
        }
    }
}

/// Every pair one arm (a mode or a profiler) of a section ran.
pub(crate) struct ArmPairs<Arm, Extra> {
    pub arm: Arm,
    pub pairs: Vec<TimedPair<Extra>>,
}

impl<Arm, Extra> ArmPairs<Arm, Extra> {
    pub(crate) fn new(arm: Arm) -> Self {
        Self {
            arm,
            pairs: Vec::new(),
        }
    }

    pub(crate) fn ratios(&self) -> Vec<f64> {
        self.pairs.iter().map(TimedPair::ratio).collect()
    }

    pub(crate) fn median_ratio(&self) -> f64 {
        median(&self.ratios())
    }

    /// (% of one core, CPU seconds, wall seconds) over all profiled runs.
    pub(crate) fn cpu_percent(&self) -> (f64, f64, f64) {
        let cpu: f64 = self.pairs.iter().map(|p| p.cpu.as_secs_f64()).sum();
        let wall: f64 = self.pairs.iter().map(|p| p.window.as_secs_f64()).sum();
        (100.0 * cpu / wall, cpu, wall)
    }

    /// The report's cell for this arm's slowdown: `+1.5 % (1.015; pairs
    /// 1.010 – 1.020)`, the median of the pairs' ratios and their range.
    pub(crate) fn slowdown_cell(&self) -> String {
        let ratios = self.ratios();
        let ratio = median(&ratios);
        let low = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        let high = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        format!(
            "{:+.1} % ({ratio:.3}; pairs {low:.3} – {high:.3})",
            100.0 * (ratio - 1.0)
        )
    }

    /// The report's cell for the profiler's CPU: `1.00 % of one core (0.06
    /// s in 6.0 s)`.
    pub(crate) fn cpu_cell(&self) -> String {
        let (percent, cpu, wall) = self.cpu_percent();
        format!("{percent:.2} % of one core ({cpu:.2} s in {wall:.1} s)")
    }
}

/// The rows of a section's table of pairs, pair by pair and arm by arm:
/// `| 1 (without first) | label | without | with | ratio |` and then the
/// cells `extra` gives for the pair (each ending in `|`).
pub(crate) fn pair_rows<Arm, Extra>(
    arms: &[ArmPairs<Arm, Extra>],
    label: impl Fn(&Arm) -> String,
    extra: impl Fn(&TimedPair<Extra>) -> String,
) -> String {
    let runs = arms.first().map_or(0, |arm| arm.pairs.len());
    let mut rows = String::new();
    for i in 0..runs {
        for arm in arms {
            let pair = &arm.pairs[i];
            let order = if pair.profiled_first {
                "with first"
            } else {
                "without first"
            };
            rows += &format!(
                "| {} ({order}) | {} | {:.3} | {:.3} | {:.3} |{}\n",
                i + 1,
                label(&arm.arm),
                pair.unprofiled,
                pair.profiled,
                pair.ratio(),
                extra(pair)
            );
        }
    }
    rows
}

/// The two runs of one pair in the order [`interleaved_pairs`] chose:
/// (unprofiled, profiled).
pub(crate) fn run_pair<Unprofiled, Profiled>(
    profiled_first: bool,
    unprofiled: impl FnOnce() -> Result<Unprofiled>,
    profiled: impl FnOnce() -> Result<Profiled>,
) -> Result<(Unprofiled, Profiled)> {
    if profiled_first {
        let profiled = profiled()?;
        Ok((unprofiled()?, profiled))
    } else {
        let unprofiled = unprofiled()?;
        Ok((unprofiled, profiled()?))
    }
}

/// The mean of `values` and their sample standard deviation (`None` for
/// fewer than two).
pub(crate) fn mean_and_sd(values: &[f64]) -> (f64, Option<f64>) {
    let n = values.len();
    let mean = values.iter().sum::<f64>() / n.max(1) as f64;
    let sd = (n >= 2)
        .then(|| (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt());
    (mean, sd)
}

pub(crate) fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    if sorted.len().is_multiple_of(2) {
        (sorted[middle - 1] + sorted[middle]) / 2.0
    } else {
        sorted[middle]
    }
}

pub(crate) fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

pub(crate) fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "**not met**" }
}

/// The verdict on a cost whose 95 % interval is `low` to `high` against a
/// target it must stay under: met or not only when the whole interval says
/// so; one that holds the target is not resolved, however narrow, and
/// `unresolved` says what would resolve it.
pub(crate) fn verdict_below(
    low: f64,
    high: f64,
    target: f64,
    unresolved: impl FnOnce() -> String,
) -> String {
    if high < target {
        met(true).to_owned()
    } else if low >= target {
        met(false).to_owned()
    } else {
        format!("not resolved here ({})", unresolved())
    }
}

/// The mean of a few measurements with the half-width of its 95 %
/// confidence interval from Student's t (the measurements' own spread:
/// with a dozen of them, two standard errors would claim too much).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Interval {
    pub mean: f64,
    /// Infinite for fewer than two measurements.
    pub half: f64,
    pub n: usize,
}

impl Interval {
    pub(crate) fn of(values: &[f64]) -> Self {
        let n = values.len();
        let (mean, sd) = mean_and_sd(values);
        let half = sd.map_or(f64::INFINITY, |sd| t95(n - 1) * sd / (n as f64).sqrt());
        Self { mean, half, n }
    }

    pub(crate) fn low(&self) -> f64 {
        self.mean - self.half
    }

    pub(crate) fn high(&self) -> f64 {
        self.mean + self.half
    }
}

/// The two-sided 95 % quantile of Student's t with `df` degrees of freedom
/// (a table; past 30, the value at the nearest tabled degree below, which
/// errs wide).
fn t95(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => TABLE[df - 1],
        31..=40 => 2.042,
        41..=60 => 2.021,
        61..=120 => 2.000,
        _ => 1.980,
    }
}
