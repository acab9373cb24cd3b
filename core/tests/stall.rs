//! The stall watchdog on a virtual clock: every instant is an offset from one origin.

use std::time::{Duration, Instant};

use agentrun_core::stall::{StallWatch, event_type, human};

/// The virtual clock's zero (any instant will do; nothing here sleeps; the sans-IO rule covers
/// the library in core/src, not its tests).
#[allow(clippy::disallowed_methods)]
fn origin() -> Instant {
    Instant::now()
}

const MIN: Duration = Duration::from_secs(60);

#[test]
fn a_turn_without_lines_stalls_at_the_timeout_once() {
    let t0 = origin();
    let mut w = StallWatch::new(Some(MIN), t0);
    assert_eq!(w.poll_timeout(), Some(t0 + MIN));
    assert_eq!(w.handle_timeout(t0 + MIN - Duration::from_millis(1)), None);
    let stall = w.handle_timeout(t0 + MIN).unwrap();
    assert_eq!(stall.silent_for, MIN);
    assert!(!stall.any_event);
    assert!(
        stall.diagnostic().contains("none arrived"),
        "{}",
        stall.diagnostic()
    );
    assert!(w.stalled());
    assert_eq!(w.poll_timeout(), None);
    assert_eq!(w.handle_timeout(t0 + 10 * MIN), None);
}

#[test]
fn each_line_moves_the_deadline_and_names_the_last_event() {
    let t0 = origin();
    let mut w = StallWatch::new(Some(MIN), t0);
    let t1 = t0 + Duration::from_secs(50);
    w.handle_line(t1, br#"{"type":"system","subtype":"init"}"#);
    assert_eq!(w.handle_timeout(t0 + MIN), None);
    assert_eq!(w.poll_timeout(), Some(t1 + MIN));
    let t2 = t1 + Duration::from_secs(30);
    w.handle_line(t2, br#"{"type": "assistant","message":{"#);
    // A late report of an earlier line does not move the deadline back.
    w.handle_line(t1, br#"{"type":"user"}"#);
    assert_eq!(w.poll_timeout(), Some(t2 + MIN));
    let stall = w.handle_timeout(t2 + MIN + Duration::from_secs(5)).unwrap();
    assert_eq!(stall.last_event.as_deref(), Some("assistant"));
    assert_eq!(stall.silent_for, MIN + Duration::from_secs(5));
    let d = stall.diagnostic();
    assert!(
        d.contains("\"assistant\"") && d.contains("1m 5s ago"),
        "{d}"
    );
    assert!(d.contains("stall timeout of 1m 0s"), "{d}");
}

#[test]
fn no_timeout_or_zero_never_stalls() {
    let t0 = origin();
    for timeout in [None, Some(Duration::ZERO)] {
        let mut w = StallWatch::new(timeout, t0);
        assert_eq!(w.poll_timeout(), None);
        assert_eq!(w.handle_timeout(t0 + 1000 * MIN), None);
    }
}

#[test]
fn a_line_without_a_readable_type_is_still_an_event() {
    let t0 = origin();
    let mut w = StallWatch::new(Some(MIN), t0);
    w.handle_line(t0 + MIN / 2, b"not json at all");
    let stall = w.handle_timeout(t0 + 2 * MIN).unwrap();
    assert!(stall.any_event);
    assert_eq!(stall.last_event, None);
    assert!(stall.diagnostic().contains("no readable type"));
}

#[test]
fn event_types_are_read_from_the_head_only_when_plain() {
    assert_eq!(
        event_type(br#"{"type":"item.completed","#).as_deref(),
        Some("item.completed")
    );
    assert_eq!(
        event_type(br#"{"id":1, "type" : "step_start"}"#).as_deref(),
        Some("step_start")
    );
    assert_eq!(event_type(br#"{"type":"a\"b"}"#), None);
    assert_eq!(event_type(br#"{"type":"cut"#), None);
    assert_eq!(event_type(br#"{"type":7}"#), None);
    assert_eq!(event_type(br#"{"type":"has space"}"#), None);
    assert_eq!(event_type(b""), None);
}

#[test]
fn durations_read_as_a_person_writes_them() {
    assert_eq!(human(Duration::from_millis(250)), "250ms");
    assert_eq!(human(Duration::from_millis(4500)), "4.5s");
    assert_eq!(human(Duration::from_secs(120)), "2m 0s");
    assert_eq!(human(Duration::from_secs(3723)), "1h 2m 3s");
}
