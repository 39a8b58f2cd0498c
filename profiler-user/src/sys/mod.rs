//! Below every stage: the host's sysctls, the daemon's own privileges, and
//! what /proc says about a process.
//! Nothing here depends on the pipeline; every stage and command may use it.

pub mod caps;
pub mod proc;
pub mod sysctl;
