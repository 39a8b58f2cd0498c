//! When to try a JVM again after a failed attach: one policy for every
//! caller (perf-map requests, thread dumps), so that a JVM is never
//! signalled more often, or given up on sooner, by one than by the other.

use std::time::Duration;

use super::AttachError;
use crate::discovery::DiscoveryError;

/// Failed attaches in a row after which a JVM is left alone.
pub const MAX_ATTACH_FAILURES: u32 = 3;

/// What a failed attach says about trying again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// The process is gone: forget it.
    Gone,
    /// Worth another try after [`AttachBackoff::wait`]: the JVM was still
    /// starting or slow, or a call failed.
    Later,
    /// It would fail every time (its options, not a JVM, a planted perf-map
    /// path, a refused command), or it failed [`MAX_ATTACH_FAILURES`] times
    /// in a row: stop asking.
    Never,
}

impl AttachError {
    /// Whether an attach that failed with this error may succeed later.
    pub fn retry(&self) -> Retry {
        match self {
            AttachError::NoSuchProcess { .. }
            | AttachError::ProcessExited { .. }
            | AttachError::Discovery(DiscoveryError::NoSuchProcess { .. }) => Retry::Gone,
            AttachError::StillStarting { .. }
            | AttachError::NoSigquitHandler { .. }
            | AttachError::ListenerTimeout { .. }
            | AttachError::Timeout { .. }
            | AttachError::Os { .. }
            | AttachError::Protocol { .. }
            | AttachError::Discovery(_) => Retry::Later,
            AttachError::NotAJvm { .. }
            | AttachError::ReducedSignals { .. }
            | AttachError::AttachDisabled { .. }
            | AttachError::ReplyTooLarge { .. }
            | AttachError::UnsafePerfMap { .. }
            | AttachError::CommandFailed { .. }
            | AttachError::InvalidArgument(_) => Retry::Never,
        }
    }
}

/// One JVM's failed attaches in a row, under the policy above.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct AttachBackoff {
    failures: u32,
}

impl AttachBackoff {
    /// An attach succeeded: the next one may come at once.
    pub fn succeeded(&mut self) {
        self.failures = 0;
    }

    /// An attach failed with `err`: whether, and so when, to try again.
    pub fn failed(&mut self, err: &AttachError) -> Retry {
        self.failures += 1;
        match err.retry() {
            Retry::Later if self.failures >= MAX_ATTACH_FAILURES => Retry::Never,
            retry => retry,
        }
    }

    /// Failed attaches in a row.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// How long to wait after the last attempt: nothing after a success,
    /// then 2, 4, 8 ... up to 32 s.
    pub fn wait(&self) -> Duration {
        match self.failures {
            0 => Duration::ZERO,
            n => Duration::from_secs(1 << n.min(5)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_failures_are_retried_three_times_and_waited_for() {
        let mut backoff = AttachBackoff::default();
        let slow = AttachError::Timeout {
            pid: 1,
            timeout: Duration::from_secs(1),
        };
        assert_eq!(backoff.failed(&slow), Retry::Later);
        assert_eq!(backoff.wait(), Duration::from_secs(2));
        assert_eq!(backoff.failed(&slow), Retry::Later);
        assert_eq!(backoff.wait(), Duration::from_secs(4));
        assert_eq!(backoff.failed(&slow), Retry::Never);
        backoff.succeeded();
        assert_eq!((backoff.failures(), backoff.wait()), (0, Duration::ZERO));
    }

    #[test]
    fn a_refusing_jvm_is_left_alone_and_a_gone_one_forgotten() {
        let mut backoff = AttachBackoff::default();
        assert_eq!(
            backoff.failed(&AttachError::ReducedSignals { pid: 1 }),
            Retry::Never
        );
        assert_eq!(
            backoff.failed(&AttachError::ProcessExited { pid: 1 }),
            Retry::Gone
        );
    }
}
