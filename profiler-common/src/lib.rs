//! The ABI shared by sparkprof's eBPF programs and its userspace daemon.
//!
//! Everything that crosses the kernel/user boundary is defined here, once, as
//! `#[repr(C)]` plain data, so both sides compile the same layout. The kernel
//! side keeps no policy: what to sample, how often and for whom is decided in
//! userspace and handed in through globals and maps named below.
#![cfg_attr(not(test), no_std)]

/// Length of a Linux `comm` (thread name) including the NUL terminator.
pub const COMM_LEN: usize = 16;

/// Key of the in-kernel on-CPU aggregation map.
///
/// One entry counts the samples that share a thread, a thread-name epoch and a
/// (user stack, kernel stack) pair. Keying by thread (not only by process) lets
/// userspace name the thread, and later tag it with Spark stage and task.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SampleKey {
    /// Process ID (`tgid` in kernel terms).
    pub tgid: u32,
    /// Thread ID (`pid` in kernel terms).
    pub tid: u32,
    /// Stack id in the active stack map, or a negative errno (see [`stack_error`]).
    pub user_stack_id: i32,
    /// Stack id in the active stack map, or a negative errno (see [`stack_error`]).
    pub kernel_stack_id: i32,
    /// Per-thread name epoch, bumped by the rename path so a count can be matched
    /// to the name the thread had when it was counted. 0 until a rename is seen.
    pub name_epoch: u32,
    /// Reserved for flags; always 0 today. Kept so the key stays 8-byte aligned.
    pub flags: u32,
    /// The thread's `comm` when it was sampled: names survive the thread's exit.
    pub comm: [u8; COMM_LEN],
}

/// Negative stack ids that the kernel returns from `bpf_get_stackid`.
pub mod stack_error {
    /// No stack of this kind: a sample taken in user mode has no kernel stack,
    /// a kernel thread has no user stack. Normal, not an error.
    pub const EFAULT: i32 = -14;
    /// Hash bucket of the stack map taken by another stack (no `BPF_F_REUSE_STACKID`,
    /// so older ids stay valid): this sample's stack is lost but the sample is counted.
    pub const EEXIST: i32 = -17;
}

/// Indices into the per-CPU `STATS` array.
pub mod stat {
    /// Every time the sampler ran.
    pub const SAMPLES: u32 = 0;
    /// Samples of the idle task (pid 0), which are not aggregated.
    pub const IDLE: u32 = 1;
    /// Samples of processes outside the `--pid` filter.
    pub const FILTERED: u32 = 2;
    /// Samples lost because the count map was full.
    pub const COUNT_MAP_FULL: u32 = 3;
    /// Samples counted without a user stack because of a stack-map collision.
    pub const USER_STACK_LOST: u32 = 4;
    /// Samples counted without a kernel stack because of a stack-map collision.
    pub const KERNEL_STACK_LOST: u32 = 5;
    /// Number of statistics.
    pub const COUNT: u32 = 6;
}

/// Map and global names, shared so neither side spells them twice.
pub mod names {
    /// The perf_event program that takes on-CPU samples.
    pub const PROGRAM_ON_CPU: &str = "sample_on_cpu";
    /// `Array<u32>` of one element: which buffer (0 or 1) the sampler writes.
    pub const ACTIVE_BUFFER: &str = "ACTIVE_BUFFER";
    /// Count maps, one per buffer.
    pub const COUNTS: [&str; 2] = ["COUNTS_0", "COUNTS_1"];
    /// Stack maps, one per buffer.
    pub const STACKS: [&str; 2] = ["STACKS_0", "STACKS_1"];
    /// Per-CPU statistics, indexed by [`crate::stat`].
    pub const STATS: &str = "STATS";
    /// `HashMap<u32, u8>` of process IDs to sample when filtering is on.
    pub const TARGET_TGIDS: &str = "TARGET_TGIDS";
    /// Global `u8`: non-zero when only [`TARGET_TGIDS`] are sampled.
    pub const FILTER_BY_TGID: &str = "FILTER_BY_TGID";
}

/// Default number of entries of each count map.
pub const DEFAULT_COUNT_MAP_ENTRIES: u32 = 65_536;
/// Default number of entries of each stack map (userspace may resize).
pub const DEFAULT_STACK_MAP_ENTRIES: u32 = 16_384;
/// Maximum number of processes in the `--pid` filter.
pub const MAX_TARGET_TGIDS: u32 = 4_096;
/// Depth the stack maps are compiled with (the kernel's default
/// `perf_event_max_stack`); userspace rewrites it before loading.
pub const COMPILED_STACK_DEPTH: u32 = 127;

#[cfg(feature = "user")]
mod user {
    // SAFETY: SampleKey is repr(C), Copy, has no padding (6 x u32 + [u8; 16]) and
    // every bit pattern is valid.
    unsafe impl aya::Pod for super::SampleKey {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_key_has_no_padding() {
        assert_eq!(core::mem::size_of::<SampleKey>(), 6 * 4 + COMM_LEN);
        assert_eq!(core::mem::align_of::<SampleKey>(), 4);
    }
}
