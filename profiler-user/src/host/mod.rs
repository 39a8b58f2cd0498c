//! Facts about the host and the daemon's own privileges: capabilities,
//! sysctls, and the `doctor` report built from them. Used before the
//! pipeline starts; no pipeline stage depends on it.

pub mod caps;
pub mod doctor;
pub mod sysctl;
