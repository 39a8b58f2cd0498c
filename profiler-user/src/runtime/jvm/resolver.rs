//! One JVM's perf map, and when to ask the JVM for a fresh one.
//!
//! HotSpot reuses code-cache addresses as it compiles, deoptimizes and
//! flushes methods, so a map is a snapshot that goes stale: measured on a
//! Spark job, one early dump named only a quarter of compiled frames and
//! even a late dump misnamed some. The resolver therefore asks for a new
//! dump (`Compiler.perfmap`, JDK 17+) when it first sees the JVM, whenever
//! sampled JIT addresses are not covered by the current map, periodically
//! while the JVM's compiler threads are busy, and once more at the end,
//! always rate-limited. Addresses are looked up afresh after every refresh:
//! JIT names are never cached across drains.

use std::{
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use perf_maps::{
    Jvm, MapError, PerfMapFile, Refused, TrustPolicy, attach,
    attach::{AttachBackoff, Retry},
};
use tracing::{debug, info, warn};

use super::types::JitOptions;
use crate::enrich::ProcessInfo;

/// Timer jitter allowed when comparing the time since the last dump with an
/// interval. Dumps are asked for at most once per drain, and drains come
/// every drain interval give or take a few ms (tick jitter, how long
/// enriching took; more on a loaded host): without slack, a dump wanted
/// 0.99 s after the previous one is refused by the 1 s minimum and slips
/// to the next drain, and the new code sampled in between stays
/// `[unknown]`. (`cargo xtask bench --only jit` on a loaded host named
/// 96.9 % of JIT frames without this slack, with unnamed frames in methods
/// that had been compiled for seconds, and 100 % with it; one run each.)
const INTERVAL_SLACK: Duration = Duration::from_millis(100);

/// Whether (and why not) this JVM can be asked for a map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DumpAbility {
    Yes,
    /// Never: the reason is logged once.
    No(String),
}

/// The perf map of one JVM process.
pub struct JvmResolver {
    pid: u32,
    map: Option<PerfMapFile>,
    jvm: Option<Jvm>,
    ability: DumpAbility,
    /// Whether a map existed before our first dump (then we never delete it).
    map_preexisted: Option<bool>,
    last_dump: Option<Instant>,
    /// How long the latest dump took (not the first: it also starts the
    /// JVM's attach listener), for the dump budget.
    last_dump_cost: Option<Duration>,
    dumps: u32,
    backoff: AttachBackoff,
    refusal_logged: bool,
    alive: bool,
    /// Where the map is seen from our mount namespace once the process is
    /// gone (`/proc/PID/root` then vanishes), if the JVM shares it.
    host_path: Option<PathBuf>,
    /// Trust policy for the map, fixed while the process was alive.
    policy: TrustPolicy,
}

/// Why a dump is wanted now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DumpReasons {
    pub unresolved: usize,
    pub compiling: bool,
    pub final_pass: bool,
}

impl JvmResolver {
    pub fn new(process: &ProcessInfo, options: &JitOptions) -> Self {
        let pid = process.pid;
        let map = match PerfMapFile::for_pid(pid) {
            Ok(map) => Some(map.with_name_style(options.name_style)),
            Err(err) => {
                debug!(pid, "no perf map location: {err}");
                None
            }
        };
        let ability = if !options.attach {
            DumpAbility::No("attaching disabled (--no-jvm-attach)".into())
        } else {
            match attach::jvm_major_version(pid) {
                Ok(major) if major >= 17 => DumpAbility::Yes,
                Ok(major) => DumpAbility::No(format!(
                    "JDK {major} has no Compiler.perfmap (17+); only an existing perf map is used"
                )),
                Err(err) => DumpAbility::No(format!("cannot tell the JDK version ({err})")),
            }
        };
        if let DumpAbility::No(reason) = &ability {
            info!(
                pid,
                "JVM {} [{pid}]: perf map not refreshed: {reason}", process.name
            );
        }
        let jvm = match ability {
            DumpAbility::Yes => Jvm::new(pid).ok(),
            DumpAbility::No(_) => None,
        };
        let same_mount_ns = crate::sys::proc::shares_namespace(pid, "mnt");
        let host_path = perf_maps::discovery::ns_pid(pid)
            .ok()
            .filter(|_| same_mount_ns)
            .map(|nspid| PathBuf::from(format!("/tmp/perf-{nspid}.map")));
        let policy = TrustPolicy::for_pid(pid).unwrap_or_else(|_| TrustPolicy::for_uid(0));
        Self {
            pid,
            map,
            jvm,
            host_path,
            policy,
            ability,
            map_preexisted: None,
            last_dump: None,
            last_dump_cost: None,
            dumps: 0,
            backoff: AttachBackoff::default(),
            refusal_logged: false,
            alive: true,
        }
    }

    /// Re-reads the map if it changed on disk.
    pub fn refresh(&mut self) {
        let Some(map) = self.map.as_mut() else { return };
        match map.refresh() {
            Ok(refresh) => {
                debug!(pid = self.pid, ?refresh, "perf map refreshed");
                self.refusal_logged = false;
            }
            Err(MapError::Refused(Refused::NotFound { .. })) => {}
            Err(err) => {
                if !self.refusal_logged {
                    warn!(
                        pid = self.pid,
                        "perf map {} not used: {err}",
                        map.path().display()
                    );
                    self.refusal_logged = true;
                }
            }
        }
    }

    /// Whether to ask the JVM for a fresh map now.
    pub fn wants_dump(&self, reasons: DumpReasons, options: &JitOptions) -> bool {
        if self.ability != DumpAbility::Yes || self.jvm.is_none() || !self.alive {
            return false;
        }
        let since = self.last_dump.map(|t| t.elapsed());
        let at_least = |interval: Duration| since.is_none_or(|s| s + INTERVAL_SLACK >= interval);
        if !at_least(options.min_dump_interval.max(self.backoff.wait())) {
            return false;
        }
        if !reasons.final_pass
            && !at_least(budget_interval(self.last_dump_cost, options.dump_budget))
        {
            return false;
        }
        since.is_none()
            || reasons.final_pass
            || reasons.unresolved > 0
            || (reasons.compiling && at_least(options.churn_dump_interval))
            || at_least(options.max_map_age)
    }

    /// Asks the JVM to rewrite its perf map. Blocking (~0.2 s, ~0.8 s the
    /// first time a JVM starts its attach listener); run in parallel for
    /// several JVMs by the caller. Returns whether it succeeded.
    pub fn dump(&mut self) -> bool {
        let Some(jvm) = self.jvm.as_ref() else {
            return false;
        };
        if self.map_preexisted.is_none() {
            self.map_preexisted = Some(jvm.perf_map_path().exists());
        }
        let started = Instant::now();
        self.last_dump = Some(started);
        match jvm.dump_perf_map() {
            Ok(_) => {
                if self.dumps > 0 {
                    self.last_dump_cost = Some(started.elapsed());
                }
                self.dumps += 1;
                self.backoff.succeeded();
                true
            }
            Err(err) => {
                match self.backoff.failed(&err) {
                    Retry::Gone => {
                        self.alive = false;
                        debug!(pid = self.pid, "JVM exited during attach");
                    }
                    Retry::Later => {
                        debug!(pid = self.pid, "perf map request failed, will retry: {err}");
                    }
                    Retry::Never => {
                        warn!(pid = self.pid, "JVM perf map not refreshed: {err}");
                        self.ability = DumpAbility::No(err.to_string());
                    }
                }
                false
            }
        }
    }

    /// The name of a JIT address in the current map.
    pub fn lookup(&self, addr: u64) -> Option<Arc<str>> {
        self.map
            .as_ref()?
            .lookup(addr)
            .map(|symbol| Arc::from(symbol.name))
    }

    /// Why this JVM's map is not refreshed, if it is not.
    pub fn ability(&self) -> &DumpAbility {
        &self.ability
    }

    /// The map sparkprof caused the JVM to write (it did not exist before
    /// the first request), as sparkprof reaches it, if any.
    pub fn created_map(&self) -> Option<PathBuf> {
        if self.map_preexisted != Some(false) {
            return None;
        }
        self.host_path
            .clone()
            .or_else(|| self.map.as_ref().map(|map| map.path().to_path_buf()))
    }

    /// Removes the map if sparkprof caused it to be written and it did not
    /// exist before. Only a regular file owned by the JVM's user (or root)
    /// is removed, and never through a symlink.
    pub fn remove_created_map(&self) {
        if self.map_preexisted != Some(false) {
            return;
        }
        let Some(map) = self.map.as_ref() else { return };
        let through_proc: PathBuf = map.path().to_path_buf();
        let path = if through_proc.exists() {
            through_proc
        } else {
            match &self.host_path {
                Some(path) => path.clone(),
                None => return,
            }
        };
        match perf_maps::trust::open_trusted(&path, &self.policy) {
            Ok(_) => match std::fs::remove_file(&path) {
                Ok(()) => debug!(pid = self.pid, "removed {}", path.display()),
                Err(err) => debug!(pid = self.pid, "cannot remove {}: {err}", path.display()),
            },
            Err(refused) => debug!(pid = self.pid, "not removing {}: {refused}", path.display()),
        }
    }
}

/// The shortest wait after a dump that took `cost` that keeps dumping
/// within `budget` (a share) of the JVM's time.
fn budget_interval(cost: Option<Duration>, budget: f64) -> Duration {
    match cost {
        Some(cost) if budget > 0.0 => cost.div_f64(budget.min(1.0)),
        _ => Duration::ZERO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dumps_stay_within_their_budget() {
        let cost = Some(Duration::from_millis(200));
        assert_eq!(budget_interval(cost, 0.01), Duration::from_secs(20));
        assert_eq!(budget_interval(cost, 0.5), Duration::from_millis(400));
        assert_eq!(budget_interval(None, 0.01), Duration::ZERO);
        assert_eq!(budget_interval(cost, 0.0), Duration::ZERO);
    }
}
