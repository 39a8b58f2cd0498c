//! Apache Spark for the end-to-end test: pyspark from PyPI (it carries the
//! Spark jars and `bin/spark-class`) in a venv outside the repository.
//!
//! Pinned, idempotent and quick when present: the install is trusted only
//! when the marker written after a successful, verified install names the
//! pinned version and `spark-class` is there; otherwise pip runs (again) in
//! the venv, which it repairs or completes.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};

use crate::run_cmd;

/// The pyspark release the tests run.
pub const PYSPARK: &str = "4.3.0";
/// Where the venv lives unless `SPARKPROF_SPARK_VENV` says otherwise.
pub const DEFAULT_VENV: &str = "/var/tmp/sparkprof-spark/venv";
/// The variable that tells the tests where the venv is.
pub const VENV_VAR: &str = "SPARKPROF_SPARK_VENV";
/// Python that builds the venv when present (pyspark 4.3 needs >= 3.10).
const PREFERRED_PYTHON: &str = "/root/.pyenv/versions/3.11.7/bin/python3";
/// Written into the venv after a verified install.
const MARKER: &str = ".sparkprof-pyspark-version";
/// The py-spy release the Python tests compare against (installed into
/// the same venv).
pub const PY_SPY: &str = "0.4.1";
/// Written into the venv after py-spy installed.
const PY_SPY_MARKER: &str = ".sparkprof-py-spy-version";

/// The venv the tests use.
pub fn venv() -> PathBuf {
    std::env::var_os(VENV_VAR)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_VENV))
}

/// `<venv>/lib/python3.X/site-packages/pyspark`, if pip put it there.
fn spark_home(venv: &Path) -> Option<PathBuf> {
    std::fs::read_dir(venv.join("lib"))
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path().join("site-packages/pyspark"))
        .find(|p| p.join("bin/spark-class").exists())
}

fn ready(venv: &Path) -> bool {
    venv.join("bin/python").exists()
        && spark_home(venv).is_some()
        && std::fs::read_to_string(venv.join(MARKER)).is_ok_and(|v| v.trim() == PYSPARK)
}

/// Installs pyspark [`PYSPARK`] into [`venv`] unless it is there already
/// (a file check, no pip). Returns the venv. About 30 s to a few minutes
/// fresh (some 450 MB of jars), milliseconds when present.
pub fn setup() -> Result<PathBuf> {
    let venv = venv();
    if ready(&venv) {
        return Ok(venv);
    }
    eprintln!(
        "xtask: installing pyspark {PYSPARK} into {} (~450 MB, once)",
        venv.display()
    );
    // A marker from another version or a half-made venv: pip sorts it out,
    // but a venv without its python is rebuilt from scratch.
    let _ = std::fs::remove_file(venv.join(MARKER));
    if !venv.join("bin/python").exists() {
        if venv.exists() {
            std::fs::remove_dir_all(&venv)
                .with_context(|| format!("removing the broken venv {}", venv.display()))?;
        }
        if let Some(parent) = venv.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let python = if Path::new(PREFERRED_PYTHON).exists() {
            PREFERRED_PYTHON
        } else {
            "python3"
        };
        run_cmd(Command::new(python).arg("-m").arg("venv").arg(&venv))
            .context("creating the pyspark venv (needs python3 >= 3.10 with venv)")?;
    }
    run_cmd(
        Command::new(venv.join("bin/python"))
            .args(["-m", "pip", "install", "--quiet", "--no-input"])
            .arg(format!("pyspark=={PYSPARK}")),
    )
    .context("pip install pyspark")?;
    let output = Command::new(venv.join("bin/python"))
        .args(["-c", "import pyspark; print(pyspark.__version__)"])
        .output()
        .context("running the venv's python")?;
    let version = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    if !output.status.success() || version != PYSPARK {
        bail!(
            "pyspark in {} reports {version:?}, expected {PYSPARK}: {}",
            venv.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    if spark_home(&venv).is_none() {
        bail!(
            "pyspark installed but bin/spark-class is missing under {}",
            venv.display()
        );
    }
    std::fs::write(venv.join(MARKER), PYSPARK)?;
    Ok(venv)
}

/// Installs py-spy [`PY_SPY`] into the venv of [`setup`] unless it is there
/// already. Returns the venv (py-spy is `bin/py-spy` in it).
pub fn setup_with_py_spy() -> Result<PathBuf> {
    let venv = setup()?;
    let present = venv.join("bin/py-spy").exists()
        && std::fs::read_to_string(venv.join(PY_SPY_MARKER)).is_ok_and(|v| v.trim() == PY_SPY);
    if present {
        return Ok(venv);
    }
    eprintln!("xtask: installing py-spy {PY_SPY} into {}", venv.display());
    run_cmd(
        Command::new(venv.join("bin/python"))
            .args(["-m", "pip", "install", "--quiet", "--no-input"])
            .arg(format!("py-spy=={PY_SPY}")),
    )
    .context("pip install py-spy")?;
    let output = Command::new(venv.join("bin/py-spy"))
        .arg("--version")
        .output()
        .context("running py-spy")?;
    let version = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() || !version.contains(PY_SPY) {
        bail!(
            "py-spy in {} reports {version:?}, expected {PY_SPY}",
            venv.display()
        );
    }
    std::fs::write(venv.join(PY_SPY_MARKER), PY_SPY)?;
    Ok(venv)
}
