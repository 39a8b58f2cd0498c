//! The fake Spark executor (`tests/workloads/spark/CoarseGrainedExecutorBackend.java`):
//! a JVM that looks like an executor to sparkprof (its main class and
//! arguments) and runs a pool of task threads, renamed per task as Spark
//! does, each stage in its own hot method. One harness for the stage tests
//! and the bench's stage-attribution figure.

use std::{
    io::{self, BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Child, ChildStdout, Command, Stdio},
};

use crate::FAKE_EXECUTOR_JVM_FLAGS;

/// The application ID it says it belongs to.
pub const APP_ID: &str = "app-20261122101010-0042";
/// Its executor ID.
pub const EXECUTOR_ID: &str = "7";

/// A running fake executor; killed when dropped.
pub struct FakeExecutor {
    child: Child,
    stdout: BufReader<ChildStdout>,
}

impl FakeExecutor {
    /// Compiles it into `dir` (which must not be under a /tmp that a test
    /// replaces); returns the class path.
    pub fn compile(dir: &Path) -> io::Result<PathBuf> {
        std::fs::create_dir_all(dir)?;
        let source = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("workloads/spark/CoarseGrainedExecutorBackend.java");
        let status = Command::new("javac")
            .arg("-d")
            .arg(dir)
            .arg(&source)
            .status()
            .map_err(|err| {
                io::Error::new(err.kind(), format!("javac (a JDK 17) is needed: {err}"))
            })?;
        if !status.success() {
            return Err(io::Error::other(format!(
                "javac {}: {status}",
                source.display()
            )));
        }
        Ok(dir.to_path_buf())
    }

    /// Starts it (with [`FAKE_EXECUTOR_JVM_FLAGS`] and `extra` JVM
    /// options) for `seconds` of tasks, and waits until its pool runs.
    pub fn start(classes: &Path, seconds: u32, extra: &[String]) -> io::Result<Self> {
        Self::start_as(EXECUTOR_ID, classes, seconds, extra)
    }

    /// [`Self::start`] as executor `executor_id` of [`APP_ID`].
    pub fn start_as(
        executor_id: &str,
        classes: &Path,
        seconds: u32,
        extra: &[String],
    ) -> io::Result<Self> {
        let mut child = Command::new("java")
            .args(FAKE_EXECUTOR_JVM_FLAGS)
            .args(extra)
            .arg("-cp")
            .arg(classes)
            .arg("org.apache.spark.executor.CoarseGrainedExecutorBackend")
            .args([
                "--driver-url",
                "spark://CoarseGrainedScheduler@127.0.0.1:1",
                "--executor-id",
                executor_id,
                "--hostname",
                "127.0.0.1",
                "--cores",
                "2",
                "--app-id",
                APP_ID,
                "--resourceProfileId",
                "0",
                "--seconds",
                &seconds.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|err| {
                io::Error::new(err.kind(), format!("java (a JDK 17) is needed: {err}"))
            })?;
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut executor = Self { child, stdout };
        let line = executor.line()?;
        if line.trim() != "ready" {
            return Err(io::Error::other(format!(
                "the fake executor did not start: {line:?}"
            )));
        }
        Ok(executor)
    }

    /// Its next line of output.
    pub fn line(&mut self) -> io::Result<String> {
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        Ok(line)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for its end; returns how many tasks it ran.
    pub fn wait(mut self) -> io::Result<u64> {
        let line = self.line()?;
        let status = self.child.wait()?;
        if !status.success() {
            return Err(io::Error::other(format!(
                "the fake executor failed: {status}"
            )));
        }
        line.trim()
            .strip_prefix("done ")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| io::Error::other(format!("unexpected end line {line:?}")))
    }

    /// SIGTERM, so that the JVM flushes its logs, then waits.
    pub fn terminate(mut self) -> io::Result<()> {
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for FakeExecutor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
