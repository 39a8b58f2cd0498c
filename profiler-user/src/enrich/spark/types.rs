//! What the Spark-aware enrichment says about a process.

use std::fmt;

/// The part a process plays on a Spark host.
///
/// Every process gets exactly one role; processes that are neither Spark,
/// another JVM nor Python are [`Role::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Runs tasks: `CoarseGrainedExecutorBackend` (standalone, and the
    /// driver's children in `local-cluster` mode), its YARN and Kubernetes
    /// variants.
    Executor,
    /// Runs the application's `main` (`SparkSubmit`, or YARN's
    /// `ApplicationMaster` in cluster mode). In `local[N]` mode it also runs
    /// the tasks.
    Driver,
    /// The standalone cluster manager.
    Master,
    /// A standalone worker daemon, parent of the executors it launched.
    Worker,
    /// `python -m pyspark.daemon`, started by an executor (or a local-mode
    /// driver) to fork Python workers.
    PysparkDaemon,
    /// A Python worker running a task's Python code: a child of the daemon,
    /// or `python -m pyspark.worker` when the daemon is disabled.
    PysparkWorker,
    /// Any other JVM (history server, shuffle service, non-Spark Java).
    OtherJvm,
    /// Any other Python interpreter (e.g. a PySpark driver script).
    Python,
    /// Everything else, and processes that could not be read.
    Other,
}

impl Role {
    /// The role's name in output files and `index.json`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Role::Executor => "executor",
            Role::Driver => "driver",
            Role::Master => "master",
            Role::Worker => "worker",
            Role::PysparkDaemon => "pyspark-daemon",
            Role::PysparkWorker => "pyspark-worker",
            Role::OtherJvm => "jvm",
            Role::Python => "python",
            Role::Other => "other",
        }
    }

    /// Roles whose processes may run Spark tasks (and so carry an executor
    /// ID): the ancestors PySpark processes take their identity from.
    pub fn runs_tasks(&self) -> bool {
        matches!(self, Role::Executor | Role::Driver)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A process's Spark identity.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SparkProcess {
    /// What the process is.
    pub role: Role,
    /// The application it belongs to (`app-20240101120000-0000`,
    /// `application_1700000000000_0001`, `spark-...` on Kubernetes), when
    /// known. A driver's ID is generated at run time and is not on its
    /// command line; see [`super::driver`].
    pub app_id: Option<String>,
    /// The executor ID (`"1"`, ...), or `"driver"` for a driver in local
    /// mode, where tasks run in the driver under that executor ID.
    pub executor_id: Option<String>,
}

impl SparkProcess {
    /// A process with a role and no Spark IDs.
    pub fn with_role(role: Role) -> Self {
        SparkProcess {
            role,
            app_id: None,
            executor_id: None,
        }
    }

    /// A process we know nothing about (not Spark, or gone before it could
    /// be read).
    pub fn other() -> Self {
        Self::with_role(Role::Other)
    }
}
