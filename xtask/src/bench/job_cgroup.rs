//! The CPU time a Spark job costs, from a cgroup (v2) that holds the
//! cluster: the Master and Worker, the executors the Worker starts, their
//! Python workers, and each job's driver. A cgroup's `cpu.stat` counts the
//! CPU of every process that was in it, also of those that exited (the
//! executors exit with their application), which no sum over `/proc`
//! could. The bench process joins it only while it starts what the cluster
//! runs (children start in their parent's cgroup) and leaves it before it
//! starts sparkprof, whose own CPU must not count.

use std::{
    fs,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context as _, Result, anyhow, bail};

pub struct JobCgroup {
    dir: PathBuf,
    /// The cgroup the bench process came from, to go back to.
    home: PathBuf,
}

impl JobCgroup {
    /// A new cgroup beside the bench's own, in the cgroup2 hierarchy.
    pub fn create(name: &str) -> Result<Self> {
        let (root, own) = cgroup2_root_and_own()?;
        let home = root.join(own.trim_start_matches('/'));
        let dir = home.join(name);
        if dir.exists() {
            // A leftover of an interrupted bench, empty once its processes
            // are gone.
            fs::remove_dir(&dir)
                .with_context(|| format!("removing the leftover cgroup {}", dir.display()))?;
        }
        fs::create_dir(&dir).with_context(|| format!("creating the cgroup {}", dir.display()))?;
        Ok(Self { dir, home })
    }

    /// Moves the bench process into the cgroup until the guard drops.
    pub fn enter(&self) -> Result<Entered<'_>> {
        move_self(&self.dir)?;
        Ok(Entered(self))
    }

    /// CPU time (user + system) of everything that ran in it so far.
    pub fn usage(&self) -> Result<Duration> {
        let path = self.dir.join("cpu.stat");
        let text =
            fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let usec = text
            .lines()
            .find_map(|line| line.strip_prefix("usage_usec "))
            .ok_or_else(|| anyhow!("{} has no usage_usec", path.display()))?
            .trim()
            .parse()
            .with_context(|| format!("parsing {}", path.display()))?;
        Ok(Duration::from_micros(usec))
    }
}

impl Drop for JobCgroup {
    fn drop(&mut self) {
        // Only empty cgroups can go: after the cluster stopped.
        let _ = fs::remove_dir(&self.dir);
    }
}

pub struct Entered<'a>(&'a JobCgroup);

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        if let Err(err) = move_self(&self.0.home) {
            eprintln!("xtask: bench: could not leave the job's cgroup: {err:#}");
        }
    }
}

fn move_self(dir: &Path) -> Result<()> {
    let procs = dir.join("cgroup.procs");
    fs::write(&procs, std::process::id().to_string())
        .with_context(|| format!("moving the bench into {}", procs.display()))
}

/// Where the cgroup2 hierarchy is mounted (`/sys/fs/cgroup`, or
/// `/sys/fs/cgroup/unified` on a hybrid host), and this process's cgroup
/// in it.
fn cgroup2_root_and_own() -> Result<(PathBuf, String)> {
    let mounts = fs::read_to_string("/proc/self/mounts").context("reading /proc/self/mounts")?;
    let root = mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (_, target, kind) = (fields.next()?, fields.next()?, fields.next()?);
            (kind == "cgroup2").then(|| PathBuf::from(target))
        })
        .next()
        .ok_or_else(|| anyhow!("no cgroup2 hierarchy is mounted: the job's CPU time needs one"))?;
    let own = fs::read_to_string("/proc/self/cgroup").context("reading /proc/self/cgroup")?;
    let Some(own) = own.lines().find_map(|line| line.strip_prefix("0::")) else {
        bail!("/proc/self/cgroup has no cgroup2 line");
    };
    Ok((root, own.to_owned()))
}
