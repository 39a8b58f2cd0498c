//! Which Java major version a JVM runs, without attaching to it.
//!
//! Callers need this to know whether `Compiler.perfmap` exists (JDK 17+).
//! The cheapest robust source is the JDK's own `release` file: find the
//! mapped `libjvm.so` in `/proc/PID/maps` (`<home>/lib/server/libjvm.so` on
//! JDK 9+, `<home>/jre/lib/amd64/server/libjvm.so` on JDK 8), walk up to the
//! directory with a `release` file, and read `JAVA_VERSION`, all through
//! `/proc/PID/root` so it works for containers. It costs two small reads and
//! no safepoint. If libjvm.so was replaced on disk since the JVM started
//! (`(deleted)` in maps, e.g. a package upgrade), the file on disk no longer
//! describes the running JVM, so we refuse to guess; [`super::Jvm::major_version`]
//! then falls back to asking the JVM (`properties` over the attach socket).

use std::path::{Path, PathBuf};

use crate::discovery::{self, DiscoveryError};
use procfs::process::MMapPath;

/// Why the version could not be read from files.
#[derive(Debug, thiserror::Error)]
pub enum VersionError {
    /// Reading procfs failed.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    /// No `libjvm.so` mapped: not a HotSpot JVM (or not yet loaded).
    #[error("process {pid} has no libjvm.so mapped")]
    NotAJvm {
        /// The PID.
        pid: u32,
    },
    /// libjvm.so is marked deleted: the on-disk JDK is not the running one.
    #[error("process {pid}: libjvm.so was replaced on disk since the JVM started")]
    LibraryReplaced {
        /// The PID.
        pid: u32,
    },
    /// No readable `release` file with a `JAVA_VERSION` line.
    #[error("no JDK release file found above {libjvm}")]
    NoReleaseFile {
        /// The libjvm.so path (inside the process's root).
        libjvm: PathBuf,
    },
}

/// The path of the mapped libjvm.so, as the process sees it (with the
/// kernel's ` (deleted)` if it was replaced on disk since).
pub(crate) fn libjvm_path(pid: u32) -> Result<Option<String>, DiscoveryError> {
    let maps = discovery::process(pid)?
        .maps()
        .map_err(|err| discovery::proc_error(pid, "maps", err))?;
    Ok(maps.into_iter().find_map(|map| match map.pathname {
        MMapPath::Path(path) => {
            let path = path.to_string_lossy().into_owned();
            (path.ends_with("/libjvm.so") || path.ends_with("/libjvm.so (deleted)")).then_some(path)
        }
        _ => None,
    }))
}

/// Reads the JVM's major version (8, 11, 17, 21, ...) from its JDK's
/// `release` file.
pub fn jvm_major_version(pid: u32) -> Result<u32, VersionError> {
    let lib = libjvm_path(pid)?.ok_or(VersionError::NotAJvm { pid })?;
    if lib.ends_with(" (deleted)") {
        return Err(VersionError::LibraryReplaced { pid });
    }
    let root = PathBuf::from(format!("/proc/{pid}/root"));
    let lib_path = Path::new(&lib);
    for dir in lib_path.ancestors().skip(1).take(5) {
        let rel = dir.strip_prefix("/").unwrap_or(dir);
        if let Ok(text) = std::fs::read_to_string(root.join(rel).join("release"))
            && let Some(v) = release_major(&text)
        {
            return Ok(v);
        }
    }
    Err(VersionError::NoReleaseFile {
        libjvm: lib_path.to_owned(),
    })
}

/// `JAVA_VERSION="17.0.15"` in a release file → 17.
pub(crate) fn release_major(text: &str) -> Option<u32> {
    text.lines().find_map(|l| {
        let v = l.strip_prefix("JAVA_VERSION=")?;
        parse_java_version(v.trim().trim_matches('"'))
    })
}

/// A Java version string to its major number: `1.8.0_392` → 8 (the old
/// scheme), `17.0.15` → 17, `21` → 21, `22-ea` → 22.
pub fn parse_java_version(v: &str) -> Option<u32> {
    let mut parts = v.split(|c: char| !c.is_ascii_digit());
    let first: u32 = parts.next()?.parse().ok()?;
    if first == 1 {
        return parts.next()?.parse().ok();
    }
    Some(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(parse_java_version("1.8.0_392"), Some(8));
        assert_eq!(parse_java_version("17.0.15"), Some(17));
        assert_eq!(parse_java_version("21"), Some(21));
        assert_eq!(parse_java_version("22-ea"), Some(22));
        assert_eq!(parse_java_version("abc"), None);
        assert_eq!(
            release_major("IMPLEMENTOR=\"Debian\"\nJAVA_VERSION=\"17.0.15\"\n"),
            Some(17)
        );
        assert_eq!(release_major("JAVA_RUNTIME_VERSION=\"17\"\n"), None);
    }

    #[test]
    fn not_a_jvm() {
        let err = jvm_major_version(std::process::id()).unwrap_err();
        assert!(matches!(err, VersionError::NotAJvm { .. }), "{err}");
    }
}
