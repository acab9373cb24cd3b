//! The retry machine on a virtual clock: whatever the failures, the harness's delays and the
//! seed, no wait exceeds the cap, no turn gets more retries than its limit, and a kind that
//! waiting does not cure is never retried.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agentrun_core::harness::{FailureKind, RetryAfter};
use agentrun_core::retry::{MAX_RETRY_WAIT, Retry, RetryEvent, RetryPolicy};
use proptest::prelude::*;

fn kind() -> impl Strategy<Value = Option<FailureKind>> {
    prop_oneof![
        Just(None),
        (0..FailureKind::ALL.len()).prop_map(|i| Some(FailureKind::ALL[i])),
    ]
}

fn retry_after() -> impl Strategy<Value = Option<RetryAfter>> {
    prop_oneof![
        Just(None),
        any::<u64>().prop_map(|ms| Some(RetryAfter::DelayMs(ms))),
        (0u64..10_000_000).prop_map(|ms| Some(RetryAfter::DelayMs(ms))),
        // Around the virtual clock's start, in the past and far in the future.
        (1_700_000_000u64..1_800_000_000).prop_map(|s| Some(RetryAfter::ResetAtUnixSecs(s))),
        any::<u64>().prop_map(|s| Some(RetryAfter::ResetAtUnixSecs(s))),
    ]
}

/// One attempt's failure, and how early (ms) the driver's timer may fire.
fn attempt() -> impl Strategy<Value = (Option<FailureKind>, Option<RetryAfter>, u64, u64)> {
    (kind(), retry_after(), 0u64..3_600_000, 0u64..2_000_000)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn waits_are_capped_retries_bounded_and_only_retryable_kinds_retried(
        max_retries in 0u32..8,
        backoff_ms in 0u64..10_000_000,
        seed in any::<u64>(),
        start in 1_700_000_000_000u64..1_800_000_000_000,
        attempts in proptest::collection::vec(attempt(), 1..24),
    ) {
        let policy = RetryPolicy::new(max_retries, Duration::from_millis(backoff_ms));
        let mut machine = Retry::new(policy, seed);
        let mut now = start;
        let mut retried = 0u32;
        for (kind, after, turn_ms, early_ms) in attempts {
            // The turn (or its retry) runs for a while on the virtual clock, then fails.
            now += turn_ms;
            let at = |ms: u64| UNIX_EPOCH + Duration::from_millis(ms);
            machine.handle_failure(at(now), kind, after).unwrap();
            let mut event = machine.poll_event();
            prop_assert!(machine.poll_event().is_none());
            loop {
                match event {
                    Some(RetryEvent::Wait(wait)) => {
                        prop_assert!(kind.is_some_and(FailureKind::is_retryable));
                        prop_assert_eq!(Some(wait.kind), kind);
                        prop_assert!(wait.until_unix_ms >= now);
                        let waited = Duration::from_millis(wait.until_unix_ms - now);
                        prop_assert!(waited <= MAX_RETRY_WAIT, "waited {:?}", waited);
                        prop_assert_eq!(machine.poll_timeout(), Some(wait.until()));
                        // The timer may fire early: the machine asks for the rest of the
                        // same wait, and the driver sleeps to its end.
                        let early = wait.until_unix_ms.saturating_sub(early_ms).max(now);
                        if early < wait.until_unix_ms {
                            machine.handle_timeout(at(early)).unwrap();
                            let again = machine.poll_event();
                            prop_assert_eq!(again, Some(RetryEvent::Wait(wait)));
                        }
                        now = wait.until_unix_ms;
                        machine.handle_timeout(at(now)).unwrap();
                        event = machine.poll_event();
                    }
                    Some(RetryEvent::Retry { retry }) => {
                        retried += 1;
                        prop_assert_eq!(retry, retried);
                        prop_assert!(retried <= max_retries);
                        prop_assert_eq!(machine.retries(), retried);
                        break;
                    }
                    Some(RetryEvent::GiveUp { retries, .. }) => {
                        prop_assert_eq!(retries, retried);
                        if kind.is_some_and(FailureKind::is_retryable) {
                            prop_assert_eq!(retried, max_retries);
                        }
                        // The driver lets the failure stand and moves on to a new turn.
                        machine.reset();
                        retried = 0;
                        break;
                    }
                    other => prop_assert!(false, "unexpected {:?}", other),
                }
            }
            prop_assert!(machine.poll_event().is_none());
        }
    }
}

#[test]
fn a_persisted_wait_resumes_on_the_same_clock() {
    let start = UNIX_EPOCH + Duration::from_secs(1_764_640_000);
    let mut m = Retry::new(RetryPolicy::default(), 3);
    m.handle_failure(start, Some(FailureKind::Overloaded), None)
        .unwrap();
    let Some(RetryEvent::Wait(wait)) = m.poll_event() else {
        panic!("no wait")
    };
    // Interrupted halfway, resumed from the persisted wait: it ends when it would have.
    let half: SystemTime = start + (wait.until().duration_since(start).unwrap() / 2);
    let mut resumed = Retry::resume(m.policy(), 99, 0, Some(wait));
    assert_eq!(resumed.poll_event(), Some(RetryEvent::Wait(wait)));
    resumed.handle_timeout(half).unwrap();
    assert_eq!(resumed.poll_event(), Some(RetryEvent::Wait(wait)));
    resumed.handle_timeout(wait.until()).unwrap();
    assert_eq!(resumed.poll_event(), Some(RetryEvent::Retry { retry: 1 }));
}
