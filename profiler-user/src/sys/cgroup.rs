//! A cgroup (v2) a recording is limited to (`--cgroup`): what runs in it
//! or below it is recorded, nothing else. On a YARN or Kubernetes worker
//! an application's containers are cgroups; on a bench host, one of two
//! clusters run side by side.
//!
//! The kernel side needs the cgroup's id (its directory's inode number on
//! cgroup2) and its level (its depth below the hierarchy's root): a sample
//! counts when the current thread's ancestor at that level is it. The
//! daemon side asks the same of a process from `/proc/PID/cgroup`.

use std::{
    io,
    os::unix::fs::MetadataExt as _,
    path::{Component, Path, PathBuf},
};

use thiserror::Error;

#[derive(Debug, Error)]
pub enum CgroupError {
    #[error("no cgroup2 hierarchy is mounted (--cgroup needs one): {0}")]
    NoHierarchy(String),
    #[error("--cgroup {path}: {source}")]
    Unreadable { path: PathBuf, source: io::Error },
    #[error(
        "--cgroup {path} is not a cgroup of the cgroup2 hierarchy mounted at {mount} \
         (a directory under it)"
    )]
    NotACgroup { path: PathBuf, mount: PathBuf },
}

/// The cgroup a recording is limited to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupScope {
    /// As given, for messages.
    pub path: PathBuf,
    /// Its path in the hierarchy as `/proc/PID/cgroup` writes it (`/` for
    /// the root).
    pub in_hierarchy: PathBuf,
    /// The kernel's id of it.
    pub id: u64,
    /// Its depth below the root (the root is 0).
    pub level: u32,
}

impl CgroupScope {
    /// The cgroup at `path`, a directory of the cgroup2 hierarchy (e.g.
    /// `/sys/fs/cgroup/hadoop-yarn`).
    pub fn open(path: &Path) -> Result<Self, CgroupError> {
        let unreadable = |source| CgroupError::Unreadable {
            path: path.to_owned(),
            source,
        };
        let mount = cgroup2_mount()?;
        let real = path.canonicalize().map_err(unreadable)?;
        let metadata = std::fs::metadata(&real).map_err(unreadable)?;
        let not_a_cgroup = || CgroupError::NotACgroup {
            path: path.to_owned(),
            mount: mount.mount_point.clone(),
        };
        let below = real
            .strip_prefix(&mount.mount_point)
            .map_err(|_| not_a_cgroup())?;
        if !metadata.is_dir() || !real.join("cgroup.procs").exists() {
            return Err(not_a_cgroup());
        }
        // The mount's own root may be a cgroup below the hierarchy's root
        // (a bind mount of part of it).
        let in_hierarchy = Path::new(&mount.root).join(below);
        let level = in_hierarchy
            .components()
            .filter(|part| matches!(part, Component::Normal(_)))
            .count() as u32;
        Ok(Self {
            path: path.to_owned(),
            in_hierarchy,
            id: metadata.ino(),
            level,
        })
    }

    /// Whether process `pid` is in the cgroup or below it now (`false`
    /// when it is gone).
    pub fn holds(&self, pid: u32) -> bool {
        procfs::process::Process::new(pid as i32)
            .and_then(|process| process.cgroups())
            .is_ok_and(|groups| {
                groups
                    .into_iter()
                    .any(|group| group.hierarchy == 0 && self.holds_path(&group.pathname))
            })
    }

    /// Whether a cgroup at `pathname` (as `/proc/PID/cgroup` writes it) is
    /// this one or below it.
    fn holds_path(&self, pathname: &str) -> bool {
        Path::new(pathname).starts_with(&self.in_hierarchy)
    }
}

/// The cgroup2 mount (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on a
/// host with both versions).
fn cgroup2_mount() -> Result<procfs::process::MountInfo, CgroupError> {
    let mounts = procfs::process::Process::myself()
        .and_then(|me| me.mountinfo())
        .map_err(|err| CgroupError::NoHierarchy(err.to_string()))?;
    mounts
        .into_iter()
        .find(|mount| mount.fs_type == "cgroup2")
        .ok_or_else(|| CgroupError::NoHierarchy("none in /proc/self/mountinfo".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hierarchys_root_is_level_zero_and_holds_every_process() {
        let mount = cgroup2_mount().expect("this host mounts cgroup2");
        let root = CgroupScope::open(&mount.mount_point).unwrap();
        assert_eq!(
            (root.level, root.in_hierarchy.as_path()),
            (0, Path::new("/"))
        );
        assert!(root.holds(std::process::id()));
        assert!(root.holds(1));
    }

    #[test]
    fn a_cgroup_holds_its_descendants_not_its_namesakes() {
        let scope = CgroupScope {
            path: "/sys/fs/cgroup/yarn".into(),
            in_hierarchy: "/yarn".into(),
            id: 7,
            level: 1,
        };
        assert!(scope.holds_path("/yarn"));
        assert!(scope.holds_path("/yarn/container_1/"));
        assert!(!scope.holds_path("/yarn-other"));
        assert!(!scope.holds_path("/"));
    }

    #[test]
    fn a_directory_outside_the_hierarchy_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let err = CgroupScope::open(dir.path()).unwrap_err();
        assert!(
            matches!(err, CgroupError::NotACgroup { .. }),
            "{err}: {err:?}"
        );
        assert!(err.to_string().contains("not a cgroup"), "{err}");
        let gone = CgroupScope::open(&dir.path().join("gone")).unwrap_err();
        assert!(matches!(gone, CgroupError::Unreadable { .. }), "{gone:?}");
    }
}
