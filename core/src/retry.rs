//! Riding out rate limits and overloads: the retry machine.
//!
//! A turn that ended with a retryable [`FailureKind`] (a rate limit, an overload) may pass if
//! the caller waits and runs it again. [`Retry`] decides, for one turn, whether to retry and how
//! long to wait first; it never sleeps and never reads a clock or a random source. Like the
//! run lifecycle, it is fed times and tells its driver what to do:
//!
//! 1. [`Retry::handle_failure`] with the time the turn ended, its failure kind and the
//!    harness's [`RetryAfter`] when the stream gave one; then drain [`Retry::poll_event`]:
//!    * [`RetryEvent::Wait`]: wait until [`RetryWait::until_unix_ms`] (also
//!      [`Retry::poll_timeout`]), then call [`Retry::handle_timeout`];
//!    * [`RetryEvent::GiveUp`]: the failure stands (not retryable, or the retries are spent).
//! 2. [`Retry::handle_timeout`] with the time the driver woke: [`RetryEvent::Retry`] when the
//!    wait is over (run the turn again), else a new [`RetryEvent::Wait`] for the rest.
//! 3. A turn that finished without a retryable failure ends the machine's job; a new turn
//!    starts with [`Retry::reset`].
//!
//! How long a wait lasts: the harness's own word when it gave one (its retry delay, or the
//! time its limit resets), else the backoff: [`RetryPolicy::backoff`] for the first retry,
//! doubling for each next one, less a jitter of up to a fifth (so that several sessions
//! limited together do not all come back at the same instant). Every wait is capped at
//! [`MAX_RETRY_WAIT`]; at most [`RetryPolicy::max_retries`] retries are made per turn.
//!
//! The jitter comes from a seed the driver passes in ([`Retry::new`]), mixed with the retry
//! number: the same seed gives the same waits, so tests run on a virtual clock.

use std::collections::VecDeque;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::harness::{FailureKind, RetryAfter};

/// The longest single wait, whatever the harness or the backoff asks for.
pub const MAX_RETRY_WAIT: Duration = Duration::from_secs(15 * 60);

/// The first backoff wait when the harness says nothing about when to come back.
pub const DEFAULT_RETRY_BACKOFF: Duration = Duration::from_secs(30);

/// The retries per turn auto mode makes by default (a single `agent` turn makes none unless
/// asked).
pub const DEFAULT_AUTO_MAX_RETRIES: u32 = 5;

/// How many retries a turn gets and how long the backoff starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[must_use]
pub struct RetryPolicy {
    /// The most retries of one turn (`0`: never retry).
    pub max_retries: u32,
    /// The first backoff wait (doubled for each further retry).
    pub backoff: Duration,
}

impl RetryPolicy {
    /// No retries: the failure stands.
    pub const NEVER: RetryPolicy = RetryPolicy {
        max_retries: 0,
        backoff: DEFAULT_RETRY_BACKOFF,
    };

    /// `max_retries` retries, starting the backoff at `backoff`.
    pub fn new(max_retries: u32, backoff: Duration) -> Self {
        RetryPolicy {
            max_retries,
            backoff,
        }
    }

    /// The backoff wait before retry `retry` (1 for the first), before jitter and the cap:
    /// `backoff × 2^(retry-1)`, saturating.
    #[must_use]
    pub fn backoff_for(&self, retry: u32) -> Duration {
        let factor = 1u32
            .checked_shl(retry.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.backoff.saturating_mul(factor)
    }
}

impl Default for RetryPolicy {
    /// Auto mode's: [`DEFAULT_AUTO_MAX_RETRIES`] retries from [`DEFAULT_RETRY_BACKOFF`].
    fn default() -> Self {
        RetryPolicy::new(DEFAULT_AUTO_MAX_RETRIES, DEFAULT_RETRY_BACKOFF)
    }
}

/// Where a wait's length came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum WaitSource {
    /// The harness said how long (its retry delay, a `Retry-After`) or until when.
    Harness,
    /// agentrun's own backoff.
    Backoff,
}

/// A wait before a retry, as persisted (so that an interrupted wait resumes with the time
/// that remains).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RetryWait {
    /// The failure being ridden out.
    pub kind: FailureKind,
    /// Which retry follows the wait (1 for the first).
    pub retry: u32,
    /// The most retries of the turn.
    pub max_retries: u32,
    /// When the wait ends, in milliseconds since the Unix epoch.
    pub until_unix_ms: u64,
    /// Where its length came from.
    pub source: WaitSource,
}

impl RetryWait {
    /// When the wait ends.
    #[must_use]
    pub fn until(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.until_unix_ms)
    }

    /// The line a person reads: `rate limited; waiting until 03:12:40 UTC (retry 2/5)`.
    #[must_use]
    pub fn line(&self) -> String {
        format!(
            "{}; waiting until {} (retry {}/{})",
            kind_words(self.kind),
            utc_clock(self.until()),
            self.retry,
            self.max_retries
        )
    }
}

/// Why a failure is not retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GiveUpReason {
    /// The failure is not one that waiting cures (or the turn failed without a kind).
    NotRetryable,
    /// The turn has had its retries.
    RetriesSpent,
}

/// What the retry machine tells its driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetryEvent {
    /// Wait until the time it names, then call [`Retry::handle_timeout`].
    Wait(RetryWait),
    /// The wait is over: run the turn again (this is retry `retry` of the turn).
    Retry {
        /// Which retry this is (1 for the first).
        retry: u32,
    },
    /// The failure stands.
    GiveUp {
        /// The turn's failure kind, when it had one.
        kind: Option<FailureKind>,
        /// Why it is not retried.
        reason: GiveUpReason,
        /// How many retries the turn had.
        retries: u32,
    },
}

/// A call the machine was not ready for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RetryError {
    /// A failure was reported while a wait was pending (the turn cannot have run).
    #[error("a turn failure was reported while the retry wait was still pending")]
    FailureWhileWaiting,
    /// A timeout was reported with no wait pending.
    #[error("a retry timeout was reported with no wait pending")]
    NotWaiting,
}

/// The retry machine of one turn; see the module documentation.
#[derive(Debug, Clone)]
pub struct Retry {
    policy: RetryPolicy,
    seed: u64,
    retries: u32,
    wait: Option<RetryWait>,
    events: VecDeque<RetryEvent>,
}

impl Retry {
    /// A machine for a turn that has not failed yet; `seed` is the jitter's source (a random
    /// value from the driver; the same seed gives the same waits).
    pub fn new(policy: RetryPolicy, seed: u64) -> Self {
        Retry {
            policy,
            seed,
            retries: 0,
            wait: None,
            events: VecDeque::new(),
        }
    }

    /// A machine continuing a turn that already had `retries` retries, with `wait` pending
    /// when it was persisted during one (its end is kept: the remaining time is waited).
    pub fn resume(policy: RetryPolicy, seed: u64, retries: u32, wait: Option<RetryWait>) -> Self {
        let mut machine = Retry::new(policy, seed);
        machine.retries = retries;
        if let Some(wait) = wait {
            machine.retries = machine.retries.max(wait.retry.saturating_sub(1));
            machine.wait = Some(wait);
            machine.events.push_back(RetryEvent::Wait(wait));
        }
        machine
    }

    /// The policy.
    pub fn policy(&self) -> RetryPolicy {
        self.policy
    }

    /// The retries the turn has had (a pending wait's retry not counted until it runs).
    #[must_use]
    pub fn retries(&self) -> u32 {
        self.retries
    }

    /// The pending wait, if any.
    #[must_use]
    pub fn wait(&self) -> Option<&RetryWait> {
        self.wait.as_ref()
    }

    /// When the driver must call [`Retry::handle_timeout`]: the end of the pending wait.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<SystemTime> {
        self.wait.as_ref().map(RetryWait::until)
    }

    /// The next event, in order.
    pub fn poll_event(&mut self) -> Option<RetryEvent> {
        self.events.pop_front()
    }

    /// A new turn: no retries yet, no wait.
    pub fn reset(&mut self) {
        self.retries = 0;
        self.wait = None;
        self.events.clear();
    }

    /// The turn (or its last retry) ended at `now` with `kind` (`None`: failed without a
    /// known kind), and the harness said `retry_after` about when to come back.
    ///
    /// # Errors
    /// [`RetryError::FailureWhileWaiting`] when a wait is pending.
    pub fn handle_failure(
        &mut self,
        now: SystemTime,
        kind: Option<FailureKind>,
        retry_after: Option<RetryAfter>,
    ) -> Result<(), RetryError> {
        if self.wait.is_some() {
            return Err(RetryError::FailureWhileWaiting);
        }
        let Some(kind) = kind.filter(|k| k.is_retryable()) else {
            self.events.push_back(RetryEvent::GiveUp {
                kind,
                reason: GiveUpReason::NotRetryable,
                retries: self.retries,
            });
            return Ok(());
        };
        if self.retries >= self.policy.max_retries {
            self.events.push_back(RetryEvent::GiveUp {
                kind: Some(kind),
                reason: GiveUpReason::RetriesSpent,
                retries: self.retries,
            });
            return Ok(());
        }
        let retry = self.retries + 1;
        let now_ms = unix_ms(now);
        let (delay, source) = match retry_after {
            Some(RetryAfter::DelayMs(ms)) => (Duration::from_millis(ms), WaitSource::Harness),
            Some(RetryAfter::ResetAtUnixSecs(secs)) => {
                let reset_ms = secs.saturating_mul(1000);
                (
                    Duration::from_millis(reset_ms.saturating_sub(now_ms)),
                    WaitSource::Harness,
                )
            }
            None => (self.backoff(retry), WaitSource::Backoff),
        };
        let delay = delay.min(MAX_RETRY_WAIT);
        let wait = RetryWait {
            kind,
            retry,
            max_retries: self.policy.max_retries,
            until_unix_ms: now_ms.saturating_add(duration_ms(delay)),
            source,
        };
        self.wait = Some(wait);
        self.events.push_back(RetryEvent::Wait(wait));
        Ok(())
    }

    /// The driver woke at `now` for the pending wait: the retry when the wait is over, else a
    /// new [`RetryEvent::Wait`] for the time that remains (a timer that fired early, a clock
    /// that went back).
    ///
    /// # Errors
    /// [`RetryError::NotWaiting`] when no wait is pending.
    pub fn handle_timeout(&mut self, now: SystemTime) -> Result<(), RetryError> {
        let Some(wait) = self.wait else {
            return Err(RetryError::NotWaiting);
        };
        let now_ms = unix_ms(now);
        // A clock set back must not stretch the wait past the cap from now.
        let cap_end = now_ms.saturating_add(duration_ms(MAX_RETRY_WAIT));
        if now_ms < wait.until_unix_ms {
            let wait = RetryWait {
                until_unix_ms: wait.until_unix_ms.min(cap_end),
                ..wait
            };
            self.wait = Some(wait);
            self.events.push_back(RetryEvent::Wait(wait));
            return Ok(());
        }
        self.wait = None;
        self.retries = wait.retry;
        self.events
            .push_back(RetryEvent::Retry { retry: wait.retry });
        Ok(())
    }

    /// The backoff wait before `retry`: doubled per retry, capped, less a jitter of up to a
    /// fifth drawn from the seed and the retry number.
    fn backoff(&self, retry: u32) -> Duration {
        let full = duration_ms(self.policy.backoff_for(retry).min(MAX_RETRY_WAIT));
        let spread = full / 5;
        let jitter = splitmix64(self.seed ^ u64::from(retry)) % (spread + 1);
        Duration::from_millis(full - jitter)
    }
}

/// Words for a failure kind in a wait line (`rate limited`, `overloaded`).
fn kind_words(kind: FailureKind) -> &'static str {
    match kind {
        FailureKind::RateLimited => "rate limited",
        FailureKind::Overloaded => "overloaded",
        other => other.as_str(),
    }
}

/// `HH:MM:SS UTC`, the time of day a wait ends (a wait is at most 15 minutes, so the day is
/// today or tomorrow and the log line's own timestamp says which).
#[must_use]
pub fn utc_clock(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let rem = secs % 86_400;
    format!(
        "{:02}:{:02}:{:02} UTC",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    )
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, duration_ms)
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// SplitMix64: spreads a seed's bits so that neighbouring retry numbers get unrelated
/// jitters.
fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests;
