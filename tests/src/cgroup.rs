//! A cgroup (v2) of its own for what a test or the bench runs: created
//! beside the caller's own cgroup in the cgroup2 hierarchy (or inside
//! another [`Cgroup`]), removed when dropped (once its processes are gone).
//! A cgroup's `cpu.stat` counts the CPU of every process that was in it,
//! also of those that exited, which no sum over `/proc` could; and
//! `sparkprof --cgroup` records what runs in one.

use std::{
    fs, io,
    path::{Path, PathBuf},
    time::Duration,
};

pub struct Cgroup {
    dir: PathBuf,
}

/// An error of `path`, saying which.
fn at(path: &Path, err: io::Error) -> io::Error {
    io::Error::new(err.kind(), format!("{}: {err}", path.display()))
}

impl Cgroup {
    /// A new cgroup beside the caller's own.
    pub fn create(name: &str) -> io::Result<Self> {
        let (root, own) = cgroup2_root_and_own()?;
        Self::create_at(root.join(own.trim_start_matches('/')).join(name))
    }

    /// A new cgroup inside this one.
    pub fn child(&self, name: &str) -> io::Result<Self> {
        Self::create_at(self.dir.join(name))
    }

    fn create_at(dir: PathBuf) -> io::Result<Self> {
        if dir.exists() {
            // A leftover of an interrupted run, empty once its processes
            // are gone.
            fs::remove_dir(&dir).map_err(|err| at(&dir, err))?;
        }
        fs::create_dir(&dir).map_err(|err| at(&dir, err))?;
        Ok(Self { dir })
    }

    /// Its directory (what `sparkprof --cgroup` takes).
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Its `cgroup.procs`: a process that writes `0` to it moves in.
    pub fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// Moves process `pid` (all its threads) into it.
    pub fn add(&self, pid: u32) -> io::Result<()> {
        let procs = self.procs();
        fs::write(&procs, pid.to_string()).map_err(|err| at(&procs, err))
    }

    /// CPU time (user + system) of everything that ran in it so far.
    pub fn usage(&self) -> io::Result<Duration> {
        let path = self.dir.join("cpu.stat");
        let text = fs::read_to_string(&path).map_err(|err| at(&path, err))?;
        let usec = text
            .lines()
            .find_map(|line| line.strip_prefix("usage_usec "))
            .and_then(|usec| usec.trim().parse().ok())
            .ok_or_else(|| at(&path, io::Error::other("no usage_usec")))?;
        Ok(Duration::from_micros(usec))
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Only empty cgroups can go: after their processes.
        let _ = fs::remove_dir(&self.dir);
    }
}

/// Where the cgroup2 hierarchy is mounted (`/sys/fs/cgroup`, or
/// `/sys/fs/cgroup/unified` on a hybrid host), and this process's cgroup
/// in it.
fn cgroup2_root_and_own() -> io::Result<(PathBuf, String)> {
    let mounts = fs::read_to_string("/proc/self/mounts")?;
    let root = mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (_, target, kind) = (fields.next()?, fields.next()?, fields.next()?);
            (kind == "cgroup2").then(|| PathBuf::from(target))
        })
        .next()
        .ok_or_else(|| io::Error::other("no cgroup2 hierarchy is mounted"))?;
    let own = fs::read_to_string("/proc/self/cgroup")?;
    let own = own
        .lines()
        .find_map(|line| line.strip_prefix("0::"))
        .ok_or_else(|| io::Error::other("/proc/self/cgroup has no cgroup2 line"))?;
    Ok((root, own.to_owned()))
}
