//! Spark task-thread names: which task and stage a thread runs.
//!
//! Executors run tasks on a pool of threads that Spark renames at the start
//! of every task, so a name says what the thread is doing *now* and is valid
//! only until the next rename. The kernel keeps only 15 bytes of it
//! (`Executor task l`); the full name comes from the rename uprobe or
//! `Thread.print`. The formats, by Spark version:
//!
//! | name | meaning |
//! |------|---------|
//! | `Executor task launch worker for task 3.0 in stage 12.0 (TID 102)` | 3.1+: partition 3 attempt 0 of stage 12 attempt 0, task ID 102 |
//! | `Executor task launch worker for task 102` | <= 3.0: task ID only, no stage |
//! | `Executor task launch worker-7` | a pool thread that has not run a task yet |
//! | `Executor task idle worker#0` | 4.x: a pool thread between tasks |
//!
//! Names are parsed exactly: any other text, a number that does not fit, a
//! sign, or trailing characters give `None`, so a look-alike name from
//! application code is not mistaken for a task.

/// What a Spark executor's task thread is doing, from its full name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskThread {
    /// Running a task (Spark 3.1+).
    Task {
        /// The partition index within the stage.
        partition: u32,
        /// The task's attempt number for that partition.
        attempt: u32,
        /// The stage ID.
        stage: u32,
        /// The stage's attempt number (non-zero after a fetch failure).
        stage_attempt: u32,
        /// The task ID, unique within the application.
        tid: u64,
    },
    /// Running a task (Spark 3.0 and older: no stage in the name).
    LegacyTask {
        /// The task ID, unique within the application.
        tid: u64,
    },
    /// A pool thread that has not run a task yet (`...launch worker-N`).
    Pool {
        /// The pool's thread counter.
        worker: u64,
    },
    /// A pool thread between tasks (Spark 4.x, `...idle worker#N`).
    Idle {
        /// The pool's thread counter.
        worker: u64,
    },
}

const TASK_PREFIX: &str = "Executor task launch worker for task ";
const POOL_PREFIX: &str = "Executor task launch worker-";
const IDLE_PREFIX: &str = "Executor task idle worker#";

impl TaskThread {
    /// Recognizes a task thread from its full Java name; `None` for any
    /// other thread (and for truncated names such as a bare `comm`).
    pub fn parse(name: &str) -> Option<Self> {
        if let Some(rest) = name.strip_prefix(TASK_PREFIX) {
            return parse_task(rest);
        }
        if let Some(n) = name.strip_prefix(POOL_PREFIX) {
            return Some(TaskThread::Pool {
                worker: parse_number(n)?,
            });
        }
        if let Some(n) = name.strip_prefix(IDLE_PREFIX) {
            return Some(TaskThread::Idle {
                worker: parse_number(n)?,
            });
        }
        None
    }

    /// The stage and stage attempt, when the name has them.
    pub fn stage(&self) -> Option<(u32, u32)> {
        match *self {
            TaskThread::Task {
                stage,
                stage_attempt,
                ..
            } => Some((stage, stage_attempt)),
            _ => None,
        }
    }

    /// The task ID, when the thread runs a task.
    pub fn tid(&self) -> Option<u64> {
        match *self {
            TaskThread::Task { tid, .. } | TaskThread::LegacyTask { tid } => Some(tid),
            TaskThread::Pool { .. } | TaskThread::Idle { .. } => None,
        }
    }

    /// A short label for a flame-graph frame: `task 3.0 TID 102` for a
    /// task, `TID 102` for a legacy task, and `idle` for pool threads
    /// without a task (their counter is left out so that all idle time
    /// merges into one frame).
    pub fn task_label(&self) -> String {
        match *self {
            TaskThread::Task {
                partition,
                attempt,
                tid,
                ..
            } => format!("task {partition}.{attempt} TID {tid}"),
            TaskThread::LegacyTask { tid } => format!("TID {tid}"),
            TaskThread::Pool { .. } | TaskThread::Idle { .. } => "idle".to_owned(),
        }
    }
}

/// After [`TASK_PREFIX`]: `P.A in stage S.SA (TID T)`, or just `T` (<= 3.0).
fn parse_task(rest: &str) -> Option<TaskThread> {
    let Some((task, rest)) = rest.split_once(" in stage ") else {
        return Some(TaskThread::LegacyTask {
            tid: parse_number(rest)?,
        });
    };
    let (partition, attempt) = parse_pair(task)?;
    let (stage, rest) = rest.split_once(" (TID ")?;
    let (stage, stage_attempt) = parse_pair(stage)?;
    let tid = parse_number(rest.strip_suffix(')')?)?;
    Some(TaskThread::Task {
        partition,
        attempt,
        stage,
        stage_attempt,
        tid,
    })
}

/// `X.Y`, both plain decimal numbers.
fn parse_pair(text: &str) -> Option<(u32, u32)> {
    let (a, b) = text.split_once('.')?;
    Some((parse_number(a)?, parse_number(b)?))
}

/// A plain decimal number: ASCII digits only (no sign, no spaces), that
/// fits the type.
fn parse_number<T: std::str::FromStr>(text: &str) -> Option<T> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spark_3_1_and_later_task() {
        let t =
            TaskThread::parse("Executor task launch worker for task 0.0 in stage 12.0 (TID 102)")
                .unwrap();
        assert_eq!(
            t,
            TaskThread::Task {
                partition: 0,
                attempt: 0,
                stage: 12,
                stage_attempt: 0,
                tid: 102
            }
        );
        assert_eq!(t.stage(), Some((12, 0)));
        assert_eq!(t.tid(), Some(102));
        assert_eq!(t.task_label(), "task 0.0 TID 102");

        let t = TaskThread::parse(
            "Executor task launch worker for task 1999.3 in stage 4021.2 (TID 9876543210)",
        )
        .unwrap();
        assert_eq!(
            t,
            TaskThread::Task {
                partition: 1999,
                attempt: 3,
                stage: 4021,
                stage_attempt: 2,
                tid: 9_876_543_210
            }
        );
        assert_eq!(t.task_label(), "task 1999.3 TID 9876543210");
    }

    #[test]
    fn legacy_pool_and_idle() {
        let legacy = TaskThread::parse("Executor task launch worker for task 102").unwrap();
        assert_eq!(legacy, TaskThread::LegacyTask { tid: 102 });
        assert_eq!((legacy.stage(), legacy.tid()), (None, Some(102)));
        assert_eq!(legacy.task_label(), "TID 102");

        let pool = TaskThread::parse("Executor task launch worker-7").unwrap();
        assert_eq!(pool, TaskThread::Pool { worker: 7 });
        assert_eq!((pool.tid(), pool.task_label().as_str()), (None, "idle"));

        let idle = TaskThread::parse("Executor task idle worker#0").unwrap();
        assert_eq!(idle, TaskThread::Idle { worker: 0 });
        assert_eq!(idle.task_label(), "idle");
    }

    #[test]
    fn other_threads_are_not_tasks() {
        for name in [
            "",
            "main",
            "Executor task l",
            "Executor task i",
            "dispatcher-event-loop-0",
            "shuffle-client-4-1",
            "Executor task launch worker",
            "executor task launch worker for task 1",
        ] {
            assert_eq!(TaskThread::parse(name), None, "{name:?}");
        }
    }

    #[test]
    fn hostile_names_are_rejected_without_panicking() {
        let big = "9".repeat(10_000);
        let names = [
            // Truncated at every length.
            "Executor task launch worker for task ",
            "Executor task launch worker for task 1.0",
            "Executor task launch worker for task 1.0 in stage ",
            "Executor task launch worker for task 1.0 in stage 2.0",
            "Executor task launch worker for task 1.0 in stage 2.0 (TID ",
            "Executor task launch worker for task 1.0 in stage 2.0 (TID 5",
            "Executor task launch worker for task 1.0 in stage 2.0 (TID )",
            "Executor task launch worker-",
            "Executor task idle worker#",
            // Trailing junk.
            "Executor task launch worker for task 1.0 in stage 2.0 (TID 5) ",
            "Executor task launch worker for task 1.0 in stage 2.0 (TID 5))",
            "Executor task launch worker for task 1.0 in stage 2.0 (TID 5)x",
            "Executor task launch worker for task 1.0 in stage 2.0.1 (TID 5)",
            "Executor task launch worker for task 102 ",
            "Executor task launch worker-7x",
            "Executor task idle worker#1 (old)",
            // Signs, spaces, missing parts, non-ASCII digits.
            "Executor task launch worker for task +1.0 in stage 2.0 (TID 5)",
            "Executor task launch worker for task -1",
            "Executor task launch worker for task 1. in stage 2.0 (TID 5)",
            "Executor task launch worker for task .0 in stage 2.0 (TID 5)",
            "Executor task launch worker for task 1.0 in stage 2 (TID 5)",
            "Executor task launch worker for task ١.٠ in stage 2.0 (TID 5)",
            "Executor task launch worker- 7",
            // Numbers too large for their field.
            "Executor task launch worker for task 4294967296.0 in stage 2.0 (TID 5)",
            "Executor task launch worker for task 1.0 in stage 2.0 (TID 18446744073709551616)",
        ];
        for name in names {
            assert_eq!(TaskThread::parse(name), None, "{name:?}");
        }
        for name in [
            format!("Executor task launch worker for task {big}"),
            format!(
                "Executor task launch worker for task {big}.{big} in stage {big}.0 (TID {big})"
            ),
            format!("Executor task idle worker#{big}"),
            format!("Executor task launch worker for task 1.0 in stage 2.0 (TID 5){big}"),
        ] {
            assert_eq!(TaskThread::parse(&name), None);
        }
        // The largest values that fit still parse.
        assert_eq!(
            TaskThread::parse(&format!(
                "Executor task launch worker for task {m}.{m} in stage {m}.{m} (TID {t})",
                m = u32::MAX,
                t = u64::MAX
            ))
            .and_then(|t| t.tid()),
            Some(u64::MAX)
        );
    }
}
