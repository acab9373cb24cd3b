use super::*;

const T0: u64 = 1_764_640_000; // a Unix second, 2025-12-02T01:46:40Z

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn wait_of(machine: &mut Retry) -> RetryWait {
    match machine.poll_event() {
        Some(RetryEvent::Wait(w)) => w,
        other => panic!("expected a wait, got {other:?}"),
    }
}

#[test]
fn the_harness_delay_is_waited_as_given() {
    let mut m = Retry::new(RetryPolicy::default(), 7);
    m.handle_failure(
        at(T0),
        Some(FailureKind::RateLimited),
        Some(RetryAfter::DelayMs(2_500)),
    )
    .unwrap();
    let w = wait_of(&mut m);
    assert_eq!(w.until_unix_ms, T0 * 1000 + 2_500);
    assert_eq!(w.source, WaitSource::Harness);
    assert_eq!((w.retry, w.max_retries), (1, 5));
    assert_eq!(m.poll_timeout(), Some(w.until()));
}

#[test]
fn a_reset_time_is_waited_for_and_a_past_one_is_not() {
    let mut m = Retry::new(RetryPolicy::default(), 7);
    m.handle_failure(
        at(T0),
        Some(FailureKind::RateLimited),
        Some(RetryAfter::ResetAtUnixSecs(T0 + 90)),
    )
    .unwrap();
    assert_eq!(wait_of(&mut m).until_unix_ms, (T0 + 90) * 1000);
    m.handle_timeout(at(T0 + 90)).unwrap();
    assert_eq!(m.poll_event(), Some(RetryEvent::Retry { retry: 1 }));
    m.handle_failure(
        at(T0 + 100),
        Some(FailureKind::RateLimited),
        Some(RetryAfter::ResetAtUnixSecs(T0)),
    )
    .unwrap();
    assert_eq!(wait_of(&mut m).until_unix_ms, (T0 + 100) * 1000);
}

#[test]
fn a_reset_hours_away_is_capped_at_fifteen_minutes() {
    let mut m = Retry::new(RetryPolicy::default(), 7);
    m.handle_failure(
        at(T0),
        Some(FailureKind::RateLimited),
        Some(RetryAfter::ResetAtUnixSecs(T0 + 5 * 3600)),
    )
    .unwrap();
    assert_eq!(wait_of(&mut m).until_unix_ms, (T0 + 900) * 1000);
}

#[test]
fn the_backoff_doubles_with_at_most_a_fifth_of_jitter() {
    let policy = RetryPolicy::new(6, Duration::from_secs(30));
    let mut m = Retry::new(policy, 12_345);
    let mut now = T0 * 1000;
    for (retry, full) in [
        (1, 30_000u64),
        (2, 60_000),
        (3, 120_000),
        (4, 240_000),
        (5, 480_000),
        (6, 900_000),
    ] {
        m.handle_failure(
            UNIX_EPOCH + Duration::from_millis(now),
            Some(FailureKind::Overloaded),
            None,
        )
        .unwrap();
        let w = wait_of(&mut m);
        let waited = w.until_unix_ms - now;
        assert!(
            waited <= full && waited >= full - full / 5,
            "retry {retry}: {waited}"
        );
        assert_eq!((w.retry, w.source), (retry, WaitSource::Backoff));
        now = w.until_unix_ms;
        m.handle_timeout(UNIX_EPOCH + Duration::from_millis(now))
            .unwrap();
        assert_eq!(m.poll_event(), Some(RetryEvent::Retry { retry }));
    }
}

#[test]
fn the_same_seed_gives_the_same_waits_and_another_seed_others() {
    let waits = |seed| {
        let mut m = Retry::new(RetryPolicy::default(), seed);
        m.handle_failure(at(T0), Some(FailureKind::RateLimited), None)
            .unwrap();
        wait_of(&mut m).until_unix_ms
    };
    assert_eq!(waits(1), waits(1));
    assert!(
        (0..16)
            .map(waits)
            .collect::<std::collections::HashSet<_>>()
            .len()
            > 1
    );
}

#[test]
fn the_retries_run_out_then_the_failure_stands() {
    let mut m = Retry::new(RetryPolicy::new(2, Duration::from_secs(1)), 0);
    for retry in 1..=2 {
        m.handle_failure(at(T0), Some(FailureKind::RateLimited), None)
            .unwrap();
        let w = wait_of(&mut m);
        m.handle_timeout(w.until()).unwrap();
        assert_eq!(m.poll_event(), Some(RetryEvent::Retry { retry }));
    }
    m.handle_failure(at(T0), Some(FailureKind::RateLimited), None)
        .unwrap();
    assert_eq!(
        m.poll_event(),
        Some(RetryEvent::GiveUp {
            kind: Some(FailureKind::RateLimited),
            reason: GiveUpReason::RetriesSpent,
            retries: 2
        })
    );
    m.reset();
    m.handle_failure(at(T0), Some(FailureKind::RateLimited), None)
        .unwrap();
    assert_eq!(wait_of(&mut m).retry, 1);
}

#[test]
fn other_kinds_and_unknown_failures_are_never_retried() {
    for kind in FailureKind::ALL
        .into_iter()
        .filter(|k| !k.is_retryable())
        .map(Some)
        .chain([None])
    {
        let mut m = Retry::new(RetryPolicy::default(), 0);
        m.handle_failure(at(T0), kind, Some(RetryAfter::DelayMs(1)))
            .unwrap();
        assert_eq!(
            m.poll_event(),
            Some(RetryEvent::GiveUp {
                kind,
                reason: GiveUpReason::NotRetryable,
                retries: 0
            })
        );
        assert_eq!(m.poll_timeout(), None);
    }
}

#[test]
fn an_early_wake_waits_for_the_rest() {
    let mut m = Retry::new(RetryPolicy::default(), 0);
    m.handle_failure(
        at(T0),
        Some(FailureKind::RateLimited),
        Some(RetryAfter::DelayMs(10_000)),
    )
    .unwrap();
    let w = wait_of(&mut m);
    m.handle_timeout(at(T0 + 4)).unwrap();
    assert_eq!(wait_of(&mut m), w);
    assert_eq!(m.retries(), 0);
}

#[test]
fn a_resumed_wait_keeps_its_end() {
    let mut m = Retry::new(RetryPolicy::default(), 0);
    m.handle_failure(
        at(T0),
        Some(FailureKind::RateLimited),
        Some(RetryAfter::DelayMs(60_000)),
    )
    .unwrap();
    let w = wait_of(&mut m);
    let mut resumed = Retry::resume(RetryPolicy::default(), 9, 0, Some(w));
    assert_eq!(wait_of(&mut resumed), w);
    resumed.handle_timeout(at(T0 + 60)).unwrap();
    assert_eq!(resumed.poll_event(), Some(RetryEvent::Retry { retry: 1 }));
    assert_eq!(resumed.retries(), 1);
}

#[test]
fn out_of_order_calls_are_errors() {
    let mut m = Retry::new(RetryPolicy::default(), 0);
    assert_eq!(m.handle_timeout(at(T0)), Err(RetryError::NotWaiting));
    m.handle_failure(at(T0), Some(FailureKind::RateLimited), None)
        .unwrap();
    assert_eq!(
        m.handle_failure(at(T0), Some(FailureKind::RateLimited), None),
        Err(RetryError::FailureWhileWaiting)
    );
}

#[test]
fn the_wait_line_names_its_end_and_the_retry() {
    let w = RetryWait {
        kind: FailureKind::RateLimited,
        retry: 2,
        max_retries: 5,
        until_unix_ms: (86_400 * 3 + 3 * 3600 + 12 * 60 + 40) * 1000 + 999,
        source: WaitSource::Harness,
    };
    assert_eq!(
        w.line(),
        "rate limited; waiting until 03:12:40 UTC (retry 2/5)"
    );
}
