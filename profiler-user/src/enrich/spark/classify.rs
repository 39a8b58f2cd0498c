//! Which Spark process is this? Recognized from /proc alone: the command
//! line, the environment, and the parent chain.
//!
//! Split in two: [`classify`] is a pure function over parsed facts (tested
//! with real command lines), and [`classify_pid`] reads them from /proc. The
//! reader never fails: a process that exits mid-read is classified from what
//! was read, or as [`Role::Other`].
//!
//! A JVM's role is its main class (the first word after the JVM options);
//! its IDs are its own flags (`--app-id`, `--executor-id`), with the
//! Kubernetes environment (`SPARK_APPLICATION_ID`, `SPARK_EXECUTOR_ID`) as
//! fallback. Python processes learn nothing about their task over their
//! command line: the pyspark daemon is `python -m pyspark.daemon`, and it
//! *forks* its workers, which therefore keep the daemon's command line and
//! are told apart only by having the daemon as parent. Both take their IDs
//! from the executor (or local-mode driver) above them, which is why only
//! Python processes need their ancestors read.

use crate::sys::proc;

use super::types::{Role, SparkProcess};

/// How many ancestors [`classify_pid`] reads at most. A forked PySpark
/// worker is two levels below its executor (worker → daemon → JVM); a few
/// more allow for wrappers (shells, `tini`, `setsid`).
pub const MAX_ANCESTORS: usize = 8;

const EXECUTOR_BACKENDS: [&str; 3] = [
    "org.apache.spark.executor.CoarseGrainedExecutorBackend",
    "org.apache.spark.executor.YarnCoarseGrainedExecutorBackend",
    "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend",
];
const SPARK_SUBMIT: &str = "org.apache.spark.deploy.SparkSubmit";
/// What a standalone Worker runs for a driver in `--deploy-mode cluster`.
const DRIVER_WRAPPER: &str = "org.apache.spark.deploy.worker.DriverWrapper";
/// YARN cluster mode: the driver runs inside the application master.
const YARN_APPLICATION_MASTER: &str = "org.apache.spark.deploy.yarn.ApplicationMaster";
const MASTER: &str = "org.apache.spark.deploy.master.Master";
const WORKER: &str = "org.apache.spark.deploy.worker.Worker";

/// The executor ID Spark gives the driver; in local mode tasks run in the
/// driver under this ID.
pub const DRIVER_EXECUTOR_ID: &str = "driver";

/// What /proc says about one process, parsed: the input of [`classify`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessFacts {
    /// The PID.
    pub pid: u32,
    /// The parent's PID (`PPid:` in /proc/PID/status); `None` if unknown or 0.
    pub ppid: Option<u32>,
    /// The command line, one word per argument.
    pub argv: Vec<String>,
    /// The environment at exec (empty if unreadable).
    pub environ: Vec<(String, String)>,
}

impl ProcessFacts {
    /// Reads a process's facts. `None` if it has no command line (a kernel
    /// thread, a zombie, or a process that is gone); a missing environment
    /// or status is left empty.
    pub fn read(pid: u32) -> Option<Self> {
        let argv = proc::cmdline(pid).ok()?;
        if argv.is_empty() {
            return None;
        }
        let environ = proc::environ(pid).unwrap_or_default();
        let ppid = proc::parent(pid).ok().flatten();
        Some(ProcessFacts {
            pid,
            ppid,
            argv,
            environ,
        })
    }

    /// Classifies these facts (see [`classify`]).
    pub fn classify(&self, ancestors: &[SparkProcess]) -> SparkProcess {
        classify(&self.argv, &self.environ, ancestors)
    }
}

/// Classifies the process `pid` from /proc, reading its parent chain (up to
/// [`MAX_ANCESTORS`], not past PID 1) when its role depends on it. Never
/// fails: a process that cannot be read is [`Role::Other`].
pub fn classify_pid(pid: u32) -> SparkProcess {
    let Some(facts) = ProcessFacts::read(pid) else {
        return SparkProcess::other();
    };
    let ancestors = if needs_ancestors(&facts.argv) {
        classify_ancestors(facts.ppid)
    } else {
        Vec::new()
    };
    facts.classify(&ancestors)
}

/// Only Python processes take their role or IDs from their ancestors.
pub fn needs_ancestors(argv: &[String]) -> bool {
    argv.first().is_some_and(|argv0| is_python(argv0))
}

/// Reads and classifies the chain above a process, nearest first. Each
/// ancestor is classified with the chain above *it*, from the top down.
fn classify_ancestors(mut next: Option<u32>) -> Vec<SparkProcess> {
    let mut chain = Vec::new();
    while let Some(pid) = next.filter(|&pid| pid > 1) {
        if chain.len() == MAX_ANCESTORS {
            break;
        }
        let Some(facts) = ProcessFacts::read(pid) else {
            break;
        };
        next = facts.ppid;
        chain.push(facts);
    }
    let mut classified: Vec<SparkProcess> = Vec::with_capacity(chain.len());
    for facts in chain.iter().rev() {
        // `classified` holds the ancestors above `facts`, top first.
        let above: Vec<SparkProcess> = classified.iter().rev().cloned().collect();
        classified.push(facts.classify(&above));
    }
    classified.reverse();
    classified
}

/// Classifies a process from its command line, its environment and its
/// already classified ancestors (nearest first; may be empty or cut short).
pub fn classify(
    argv: &[String],
    environ: &[(String, String)],
    ancestors: &[SparkProcess],
) -> SparkProcess {
    let Some(argv0) = argv.first() else {
        return SparkProcess::other();
    };
    if is_python(argv0) {
        return classify_python(argv, environ, ancestors);
    }
    match JavaCommand::parse(argv) {
        Some(java) => classify_jvm(&java, environ),
        None => SparkProcess::other(),
    }
}

fn classify_jvm(java: &JavaCommand<'_>, environ: &[(String, String)]) -> SparkProcess {
    let main = java.main_class;
    if EXECUTOR_BACKENDS.contains(&main) {
        return SparkProcess {
            role: Role::Executor,
            app_id: flag_value(java.args, "--app-id")
                .or_else(|| env_value(environ, "SPARK_APPLICATION_ID"))
                .map(str::to_owned),
            executor_id: flag_value(java.args, "--executor-id")
                .or_else(|| env_value(environ, "SPARK_EXECUTOR_ID"))
                .map(str::to_owned),
        };
    }
    match main {
        SPARK_SUBMIT => classify_spark_submit(java, environ),
        DRIVER_WRAPPER => SparkProcess {
            role: Role::Driver,
            app_id: system_property(java.jvm_options, "spark.app.id").map(str::to_owned),
            executor_id: None,
        },
        YARN_APPLICATION_MASTER => SparkProcess {
            role: Role::Driver,
            app_id: env_value(environ, "CONTAINER_ID").and_then(yarn_application_id),
            executor_id: None,
        },
        MASTER => SparkProcess::with_role(Role::Master),
        WORKER => SparkProcess::with_role(Role::Worker),
        _ => SparkProcess::with_role(Role::OtherJvm),
    }
}

/// `SparkSubmit` is the driver in client mode. In cluster mode it only
/// submits (the driver runs elsewhere), so it is just another JVM.
fn classify_spark_submit(java: &JavaCommand<'_>, environ: &[(String, String)]) -> SparkProcess {
    let options = SubmitOptions::parse(java.args);
    if options.value("--deploy-mode") == Some("cluster") {
        return SparkProcess::with_role(Role::OtherJvm);
    }
    let conf = |key: &str| {
        options
            .conf(key)
            .or_else(|| system_property(java.jvm_options, key))
    };
    // Spark's own precedence: --master, then spark.master, then $MASTER.
    let master = options
        .value("--master")
        .or_else(|| conf("spark.master"))
        .or_else(|| env_value(environ, "MASTER"));
    SparkProcess {
        role: Role::Driver,
        app_id: conf("spark.app.id")
            .or_else(|| env_value(environ, "SPARK_APPLICATION_ID"))
            .map(str::to_owned),
        executor_id: master
            .filter(|m| is_local_master(m))
            .map(|_| DRIVER_EXECUTOR_ID.to_owned()),
    }
}

/// `local`, `local[4]`, `local[*]`, `local[4,2]`: tasks run in the driver.
/// Not `local-cluster[...]`, which starts separate executor processes.
pub fn is_local_master(master: &str) -> bool {
    master == "local" || master.starts_with("local[")
}

fn classify_python(
    argv: &[String],
    environ: &[(String, String)],
    ancestors: &[SparkProcess],
) -> SparkProcess {
    let module = python_module(argv);
    let forked_by_daemon = ancestors
        .first()
        .is_some_and(|parent| parent.role == Role::PysparkDaemon);
    let role = if forked_by_daemon || module.is_some_and(is_pyspark_worker_module) {
        Role::PysparkWorker
    } else if module == Some("pyspark.daemon") {
        Role::PysparkDaemon
    } else {
        return SparkProcess::with_role(Role::Python);
    };
    match ancestors.iter().find(|a| a.role.runs_tasks()) {
        Some(owner) => SparkProcess {
            role,
            app_id: owner.app_id.clone(),
            executor_id: owner.executor_id.clone(),
        },
        // No executor above (unreadable chain): Kubernetes executors pass
        // their IDs down in the environment.
        None => SparkProcess {
            role,
            app_id: env_value(environ, "SPARK_APPLICATION_ID").map(str::to_owned),
            executor_id: env_value(environ, "SPARK_EXECUTOR_ID").map(str::to_owned),
        },
    }
}

/// `pyspark.worker`, and Spark 4's specialised workers
/// (`pyspark.sql.worker.*`, `...streaming.worker.foreach_batch_worker`).
fn is_pyspark_worker_module(module: &str) -> bool {
    module.starts_with("pyspark.")
        && module
            .split('.')
            .any(|part| part == "worker" || part.ends_with("_worker"))
}

/// `python`, `python3`, `python3.11`, `python3.13t`, as a path or not.
fn is_python(argv0: &str) -> bool {
    let name = basename(argv0);
    name.strip_prefix("python").is_some_and(|version| {
        version
            .trim_end_matches(['t', 'd', 'm'])
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b'.')
    })
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The module a Python command line runs with `-m` (`-m mod`, `-mmod`,
/// or after other flags such as `-u -X perf`), if any.
fn python_module(argv: &[String]) -> Option<&str> {
    let mut words = argv.iter().skip(1).map(String::as_str);
    while let Some(word) = words.next() {
        if word == "--" || word == "-" || !word.starts_with('-') {
            return None; // a script (or stdin) comes first
        }
        if word.starts_with("--") {
            // `--check-hash-based-pycs MODE` is the one long option with a value.
            if word == "--check-hash-based-pycs" {
                words.next();
            }
            continue;
        }
        // Short options may be grouped: `-um pyspark.daemon`, `-Wignore`.
        let flags = &word[1..];
        for (i, flag) in flags.char_indices() {
            let rest = &flags[i + flag.len_utf8()..];
            match flag {
                'm' => {
                    return if rest.is_empty() {
                        words.next()
                    } else {
                        Some(rest)
                    };
                }
                'c' => return None,
                'W' | 'X' => {
                    if rest.is_empty() {
                        words.next();
                    }
                    break;
                }
                _ => {}
            }
        }
    }
    None
}

/// A `java` command line split into its parts.
#[derive(Debug, PartialEq, Eq)]
struct JavaCommand<'a> {
    /// Options before the main class (`-Xmx1g`, `-Dk=v`, `-cp` and its value).
    jvm_options: &'a [String],
    /// The main class (for `-m module/class`, the class).
    main_class: &'a str,
    /// The application's arguments.
    args: &'a [String],
}

/// Launcher options whose value is the next word.
const JAVA_OPTIONS_WITH_VALUE: [&str; 13] = [
    "-cp",
    "-classpath",
    "--class-path",
    "-p",
    "--module-path",
    "--upgrade-module-path",
    "--add-modules",
    "--limit-modules",
    "--add-reads",
    "--add-exports",
    "--add-opens",
    "--patch-module",
    "--enable-native-access",
];

impl<'a> JavaCommand<'a> {
    /// Splits a JVM command line. A command whose `argv[0]` is not a `java`
    /// launcher counts only if it runs a known Spark class after at least
    /// one JVM option (a launcher renamed with `exec -a`); `-jar` commands
    /// have no main class we could know and count as an unnamed JVM.
    fn parse(argv: &'a [String]) -> Option<Self> {
        let launcher = basename(argv.first()?).ends_with("java");
        let mut i = 1;
        while i < argv.len() {
            let word = argv[i].as_str();
            if JAVA_OPTIONS_WITH_VALUE.contains(&word) {
                i += 2;
                continue;
            }
            if word == "-jar" {
                return launcher.then_some(JavaCommand {
                    jvm_options: &argv[1..i],
                    main_class: "",
                    args: argv.get(i + 2..).unwrap_or(&[]),
                });
            }
            if word == "-m" || word == "--module" {
                let module = argv.get(i + 1)?;
                let class = module.split_once('/').map_or("", |(_, class)| class);
                return Self::accept(launcher, argv, i, class, i + 2);
            }
            if word.starts_with('-') || word.starts_with('@') {
                i += 1;
                continue;
            }
            return Self::accept(launcher, argv, i, word, i + 1);
        }
        // Options only (e.g. `java -version`).
        launcher.then_some(JavaCommand {
            jvm_options: &argv[1..],
            main_class: "",
            args: &[],
        })
    }

    fn accept(
        launcher: bool,
        argv: &'a [String],
        options_end: usize,
        main_class: &'a str,
        args_start: usize,
    ) -> Option<Self> {
        let jvm_options = &argv[1..options_end];
        let known_spark_class = EXECUTOR_BACKENDS.contains(&main_class)
            || [
                SPARK_SUBMIT,
                DRIVER_WRAPPER,
                YARN_APPLICATION_MASTER,
                MASTER,
                WORKER,
            ]
            .contains(&main_class);
        (launcher || (known_spark_class && !jvm_options.is_empty())).then_some(JavaCommand {
            jvm_options,
            main_class,
            args: argv.get(args_start..).unwrap_or(&[]),
        })
    }
}

/// `spark-submit`'s options, up to the primary resource (the application
/// jar or script); later words belong to the application.
struct SubmitOptions<'a> {
    pairs: Vec<(&'a str, &'a str)>,
}

/// `spark-submit` options that take no value.
const SUBMIT_SWITCHES: [&str; 7] = [
    "--verbose",
    "-v",
    "--supervise",
    "--help",
    "-h",
    "--usage-error",
    "--version",
];

impl<'a> SubmitOptions<'a> {
    fn parse(args: &'a [String]) -> Self {
        let mut pairs = Vec::new();
        let mut words = args.iter().map(String::as_str);
        while let Some(word) = words.next() {
            if SUBMIT_SWITCHES.contains(&word) {
                continue;
            }
            if !word.starts_with('-') {
                break; // the primary resource
            }
            match word.split_once('=').filter(|_| word.starts_with("--")) {
                Some((name, value)) => pairs.push((name, value)),
                None => match words.next() {
                    Some(value) => pairs.push((word, value)),
                    None => break,
                },
            }
        }
        SubmitOptions { pairs }
    }

    /// The last value given for an option (later ones win, as in Spark).
    fn value(&self, name: &str) -> Option<&'a str> {
        self.pairs
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
    }

    /// A `--conf key=value` (or `-c key=value`) setting.
    fn conf(&self, key: &str) -> Option<&'a str> {
        self.pairs
            .iter()
            .rev()
            .filter(|(n, _)| *n == "--conf" || *n == "-c")
            .find_map(|(_, kv)| kv.split_once('=').filter(|(k, _)| *k == key))
            .map(|(_, v)| v)
    }
}

/// The value of `--flag value` or `--flag=value` (the last one given).
pub fn flag_value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    let mut found = None;
    let mut words = args.iter().map(String::as_str);
    while let Some(word) = words.next() {
        if word == flag {
            found = words.next().or(found);
        } else if let Some(value) = word.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
            found = Some(value);
        }
    }
    found
}

/// A `-Dkey=value` JVM option.
fn system_property<'a>(jvm_options: &'a [String], key: &str) -> Option<&'a str> {
    jvm_options.iter().rev().find_map(|option| {
        option
            .strip_prefix("-D")?
            .strip_prefix(key)?
            .strip_prefix('=')
    })
}

fn env_value<'a>(environ: &'a [(String, String)], key: &str) -> Option<&'a str> {
    environ
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .filter(|v| !v.is_empty())
}

/// YARN's `CONTAINER_ID` (`container_1700000000000_0001_01_000002`, or with
/// an epoch, `container_e17_1700000000000_0001_01_000002`) names the
/// application: `application_1700000000000_0001`.
fn yarn_application_id(container_id: &str) -> Option<String> {
    let rest = container_id.strip_prefix("container_")?;
    let mut parts: Vec<&str> = rest.split('_').collect();
    if parts.first().is_some_and(|p| p.starts_with('e')) {
        parts.remove(0);
    }
    let [cluster, app, _attempt, _container] = parts[..] else {
        return None;
    };
    let numeric = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (numeric(cluster) && numeric(app)).then(|| format!("application_{cluster}_{app}"))
}
