//! Auto mode rides out rate limits and overloads: a turn that ends with a retryable failure
//! kind runs again with the same prompt, resuming the same harness session, after a wait that
//! is persisted (and resumed by a continued session); other kinds keep the phase rules.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agentrun_core::auto_mode::{Action, AutoMode, AutoModeState, Phase, SessionStatus, Settings};
use agentrun_core::harness::{FailureKind, RetryAfter};
use agentrun_core::retry::MAX_RETRY_WAIT;
use agentrun_core::turn::TurnOutput;

fn settings(max_retries: u32) -> Settings {
    Settings {
        objective: "Make the tests in ./calc pass".into(),
        harness: "claude".into(),
        model: None,
        effort: None,
        harness_args: vec![],
        verify: None,
        workspace: None,
        max_turns: 5,
        result_sink_var: "AGENTRUN_RESULT_SINK".into(),
        harness_resumes: true,
        max_retries,
        retry_backoff_ms: 30_000,
    }
}

fn t(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(1_800_000_000_000 + ms)
}

fn ms(t: SystemTime) -> u64 {
    u64::try_from(t.duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap() - 1_800_000_000_000
}

fn drain(m: &mut AutoMode) -> Vec<Action> {
    std::iter::from_fn(|| m.poll_action()).collect()
}

fn logs(actions: &[Action]) -> Vec<&str> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Log(l) => Some(l.as_str()),
            _ => None,
        })
        .collect()
}

/// The prompt and resume id of the one turn asked for.
fn turn(actions: &[Action]) -> (String, Option<String>) {
    let turns: Vec<_> = actions
        .iter()
        .filter_map(|a| match a {
            Action::RunTurn { prompt, resume, .. } => Some((prompt.clone(), resume.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(turns.len(), 1, "{actions:?}");
    turns[0].clone()
}

/// The one wait asked for (beside log lines).
fn wait(actions: &[Action]) -> SystemTime {
    let waits: Vec<_> = actions
        .iter()
        .filter(|a| !matches!(a, Action::Log(_)))
        .collect();
    match waits[..] {
        [Action::WaitUntil(until)] => *until,
        _ => panic!("expected one wait, got {actions:?}"),
    }
}

/// Asks for the next turn (collecting no appended instructions) and returns its actions.
fn listen(m: &mut AutoMode, now: SystemTime) -> Vec<Action> {
    m.handle_listen(now).unwrap();
    let mut actions = drain(m);
    if let Some(Action::CollectAppended { .. }) = actions.first() {
        m.handle_appended(now, Vec::new()).unwrap();
        actions = drain(m);
    }
    actions
}

fn ok(text: &str) -> TurnOutput {
    TurnOutput::from_text(text)
        .with_exit_code(0)
        .with_harness_session_id("h-1")
}

fn limited(after: Option<RetryAfter>) -> TurnOutput {
    TurnOutput::from_text("API Error: 429")
        .with_exit_code(1)
        .with_harness_session_id("h-1")
        .with_failure(FailureKind::RateLimited, after)
}

/// Runs Clarify and Plan; returns the machine waiting for the Execute turn's end, and its
/// prompt.
fn at_execute(max_retries: u32) -> (AutoMode, String) {
    let mut m = AutoMode::new("auto-1", settings(max_retries), t(0))
        .unwrap()
        .jitter_seed(42);
    drain(&mut m);
    for text in ["clarified", "the plan"] {
        turn(&listen(&mut m, t(1)));
        m.handle_turn_finished(t(2), &ok(text)).unwrap();
        drain(&mut m);
    }
    let (prompt, resume) = turn(&listen(&mut m, t(3)));
    assert_eq!(resume.as_deref(), Some("h-1"));
    assert_eq!(m.state().phase, Phase::Execute);
    (m, prompt)
}

#[test]
fn an_execute_turn_rate_limited_twice_then_served_runs_on() {
    let (mut m, prompt) = at_execute(5);

    // First limit: the harness said 2 s.
    m.handle_turn_finished(t(10_000), &limited(Some(RetryAfter::DelayMs(2_000))))
        .unwrap();
    let actions = drain(&mut m);
    assert_eq!(actions.last(), Some(&Action::PersistState));
    let state = m.state();
    assert_eq!(state.phase, Phase::Execute, "the phase does not advance");
    let w = state.retry_wait.expect("the wait is persisted");
    assert_eq!(
        (w.retry, w.max_retries, w.until_unix_ms % 1_000_000),
        (1, 5, 12_000)
    );
    let record = state.turns.last().unwrap();
    assert_eq!(record.failure_kind, Some(FailureKind::RateLimited));
    assert_eq!(record.retry, 0);

    // The wait, logged with its end; a wake before its end asks for the rest.
    m.handle_listen(t(10_001)).unwrap();
    let actions = drain(&mut m);
    let lines = logs(&actions);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("rate limited; waiting until ") && l.ends_with("UTC (retry 1/5)")),
        "{lines:?}"
    );
    let until = wait(&actions);
    assert_eq!(ms(until), 12_000);
    m.handle_wait_over(t(11_000)).unwrap();
    assert_eq!(wait(&drain(&mut m)), until);
    m.handle_wait_over(t(12_000)).unwrap();
    let actions = drain(&mut m);
    assert!(
        logs(&actions)
            .iter()
            .any(|l| l.ends_with("retry 1/5 of the execute turn"))
    );
    assert_eq!(turn(&actions), (prompt.clone(), Some("h-1".to_owned())));
    assert!(m.state().retry_wait.is_none());

    // Second limit: no word from the harness, so the backoff of the second retry (30 s doubled,
    // less up to a fifth of jitter).
    m.handle_turn_finished(t(20_000), &limited(None)).unwrap();
    drain(&mut m);
    let until = wait(&listen(&mut m, t(20_001)));
    let waited = ms(until) - 20_000;
    assert!((48_000..=60_000).contains(&waited), "{waited}");
    m.handle_wait_over(until).unwrap();
    let actions = drain(&mut m);
    assert_eq!(
        turn(&actions),
        (prompt, Some("h-1".to_owned())),
        "the same prompt, session"
    );

    // Served: the phase rules go on, the record counts the retries.
    m.handle_turn_finished(t(60_000), &ok("done")).unwrap();
    drain(&mut m);
    let state = m.state();
    assert_eq!(state.phase, Phase::Evaluate);
    assert_eq!(state.retries, 0);
    let records: Vec<_> = state
        .turns
        .iter()
        .map(|r| (r.phase, r.retry, r.failure_kind))
        .collect();
    assert_eq!(
        records[2..],
        [
            (Phase::Execute, 0, Some(FailureKind::RateLimited)),
            (Phase::Execute, 1, Some(FailureKind::RateLimited)),
            (Phase::Execute, 2, None),
        ]
    );
    assert_eq!(state.harness_turns, 5);
}

#[test]
fn spent_retries_leave_the_phase_rules_unchanged() {
    let (mut m, _) = at_execute(1);
    m.handle_turn_finished(t(10_000), &limited(None)).unwrap();
    drain(&mut m);
    let until = wait(&listen(&mut m, t(10_001)));
    m.handle_wait_over(until).unwrap();
    drain(&mut m);
    m.handle_turn_finished(t(50_000), &limited(None)).unwrap();
    let actions = drain(&mut m);
    let lines = logs(&actions);
    assert!(
        lines
            .iter()
            .any(|l| l.ends_with("rate_limited again; giving up after 1 retry")),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("evaluating anyway")),
        "{lines:?}"
    );
    assert_eq!(m.state().phase, Phase::Evaluate);
    assert!(m.state().retry_wait.is_none());
}

#[test]
fn other_failure_kinds_are_not_retried() {
    let mut m = AutoMode::new("auto-1", settings(5), t(0)).unwrap();
    drain(&mut m);
    turn(&listen(&mut m, t(1)));
    let auth = TurnOutput::from_text("bad key")
        .with_exit_code(1)
        .with_failure(FailureKind::Auth, None);
    m.handle_turn_finished(t(2), &auth).unwrap();
    drain(&mut m);
    assert!(m.is_closed());
    assert_eq!(m.status(), SessionStatus::Error);
    assert!(
        m.abort().is_some(),
        "a required phase's failure still aborts"
    );
    assert!(m.state().retry_wait.is_none());
}

#[test]
fn no_retries_configured_keeps_the_failure() {
    let mut m = AutoMode::new("auto-1", settings(0), t(0)).unwrap();
    drain(&mut m);
    turn(&listen(&mut m, t(1)));
    m.handle_turn_finished(t(2), &limited(Some(RetryAfter::DelayMs(1))))
        .unwrap();
    drain(&mut m);
    assert!(m.abort().is_some());
    assert_eq!(m.exit_code(), 1);
}

#[test]
fn a_harness_reset_hours_away_waits_at_most_the_cap() {
    let (mut m, _) = at_execute(5);
    let reset = (1_800_000_000_000 + 10_000) / 1000 + 5 * 3600;
    m.handle_turn_finished(
        t(10_000),
        &limited(Some(RetryAfter::ResetAtUnixSecs(reset))),
    )
    .unwrap();
    drain(&mut m);
    let until = wait(&listen(&mut m, t(10_001)));
    assert_eq!(Duration::from_millis(ms(until) - 10_000), MAX_RETRY_WAIT);
}

#[test]
fn a_session_continued_during_a_wait_waits_for_the_rest_then_retries() {
    let (mut m, prompt) = at_execute(5);
    m.handle_turn_finished(t(10_000), &limited(Some(RetryAfter::DelayMs(60_000))))
        .unwrap();
    drain(&mut m);
    let until = wait(&listen(&mut m, t(10_001)));
    // Interrupted during the wait: the persisted state goes through JSON, as state.json does.
    let json = serde_json::to_string(m.state()).unwrap();
    assert!(json.contains("\"retry_wait\""), "{json}");
    let restored: AutoModeState = serde_json::from_str(&json).unwrap();
    let mut c = AutoMode::resume(restored, t(30_000)).unwrap();
    drain(&mut c);
    c.handle_listen(t(30_001)).unwrap();
    let actions = drain(&mut c);
    let lines = logs(&actions);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("rate limited; waiting until ")),
        "the continued wait is logged: {lines:?}"
    );
    assert_eq!(wait(&actions), until, "the same end, so the remaining time");
    c.handle_wait_over(until).unwrap();
    let (again, resume) = turn(&drain(&mut c));
    assert_eq!((again, resume.as_deref()), (prompt, Some("h-1")));
    assert_eq!(c.state().retries, 1);
}

#[test]
fn a_state_from_before_retries_continues_with_the_defaults() {
    let m = AutoMode::new("auto-1", settings(0), t(0)).unwrap();
    let mut json = serde_json::to_value(m.state()).unwrap();
    let settings = json["settings"].as_object_mut().unwrap();
    settings.remove("max_retries");
    settings.remove("retry_backoff_ms");
    let restored: AutoModeState = serde_json::from_value(json).unwrap();
    assert_eq!(restored.settings.max_retries, 5);
    assert_eq!(restored.settings.retry_backoff_ms, 30_000);
    assert_eq!((restored.retries, restored.retry_wait), (0, None));
}

#[test]
fn a_wait_end_out_of_order_is_an_error() {
    let mut m = AutoMode::new("auto-1", settings(5), t(0)).unwrap();
    assert!(m.handle_wait_over(t(1)).is_err());
}
