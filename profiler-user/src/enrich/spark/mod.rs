//! Spark-aware "who is who": the role and Spark IDs of a process, and the
//! task a thread runs.
//!
//! Concerns, one module each:
//! - [`types`]: [`Role`] and [`SparkProcess`], what the rest of the pipeline
//!   sees.
//! - [`classify`]: a process's role and IDs from its command line,
//!   environment and parent chain ([`classify()`] is pure,
//!   [`classify_pid`] reads /proc).
//! - [`driver`]: a driver's application ID, which is not on its command
//!   line, matched through the executors that connect to it.
//! - [`task_thread`]: the task, stage and task ID in an executor thread's
//!   full name ([`TaskThread`]).
//!
//! Everything here is pure or reads /proc only; nothing attaches to a JVM.
//! Full thread names come from elsewhere (the rename uprobe, or
//! `perf_maps::attach::Jvm::thread_names`).

pub mod classify;
pub mod driver;
pub mod task_thread;
pub mod types;

#[cfg(test)]
mod tests;

pub use classify::{ProcessFacts, classify, classify_pid};
pub use driver::{DriverLink, driver_app_id};
pub use task_thread::TaskThread;
pub use types::{Role, SparkProcess};
