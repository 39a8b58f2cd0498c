//! Below every stage: the host's sysctls, the daemon's own privileges,
//! what /proc says about a process, and reading a process's memory.
//! Nothing here depends on the pipeline; every stage and command may use it.

pub mod caps;
pub mod cgroup;
pub mod cpu;
pub mod elf;
pub mod exits;
pub mod held;
pub mod memory;
pub mod proc;
pub mod sock_diag;
pub mod sysctl;
pub mod vma_query;
