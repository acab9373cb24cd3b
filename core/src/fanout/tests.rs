use super::*;

fn drain(f: &mut FanOut) -> Vec<Action> {
    std::iter::from_fn(|| f.poll_action()).collect()
}

#[test]
fn at_most_jobs_attempts_run_at_once_and_the_next_starts_when_one_ends() {
    let mut f = FanOut::new(3, 2, Selection::All, false).unwrap();
    assert_eq!(drain(&mut f), [Action::Start(0), Action::Start(1)]);
    f.handle_agent_end(1, AgentEnd::Failed);
    // A failed attempt is discarded at once, before the next one starts.
    assert_eq!(drain(&mut f), [Action::Discard(1), Action::Start(2)]);
    f.handle_agent_end(0, AgentEnd::Failed);
    f.handle_agent_end(2, AgentEnd::Succeeded);
    assert_eq!(drain(&mut f), [Action::Discard(0), Action::Finish]);
    assert_eq!(f.winner(), Some(2));
    // Finish is given once.
    assert_eq!(drain(&mut f), []);
}

#[test]
fn first_verified_stops_the_others_once_one_passes() {
    let mut f = FanOut::new(4, 3, Selection::FirstVerified, true).unwrap();
    assert_eq!(
        drain(&mut f),
        [Action::Start(0), Action::Start(1), Action::Start(2)]
    );
    // A success is verified before it can win (its verification holds its job); a failed
    // verification wins nothing.
    f.handle_agent_end(0, AgentEnd::Succeeded);
    assert_eq!(drain(&mut f), [Action::Verify(0)]);
    f.handle_verification(0, VerifyEnd::Failed);
    assert_eq!(f.winner(), None);
    assert_eq!(drain(&mut f), [Action::Discard(0), Action::Start(3)]);
    f.handle_agent_end(1, AgentEnd::Succeeded);
    assert_eq!(drain(&mut f), [Action::Verify(1)]);
    f.handle_verification(1, VerifyEnd::Passed);
    assert_eq!(f.winner(), Some(1));
    assert_eq!(drain(&mut f), [Action::Stop(2), Action::Stop(3)]);
    f.handle_agent_end(2, AgentEnd::Stopped);
    // A success that raced the stop is kept as it is, unverified, and wins nothing.
    f.handle_agent_end(3, AgentEnd::Succeeded);
    assert_eq!(
        drain(&mut f),
        [Action::Discard(2), Action::Discard(3), Action::Finish]
    );
    assert_eq!(f.status(0), Some(AttemptStatus::Succeeded));
    assert_eq!(f.verified(0), Some(false));
    assert_eq!(f.status(1), Some(AttemptStatus::Succeeded));
    assert_eq!(f.verified(1), Some(true));
    assert_eq!(f.status(2), Some(AttemptStatus::Stopped));
    assert_eq!(f.status(3), Some(AttemptStatus::Succeeded));
    assert_eq!(f.verified(3), None);
    assert_eq!(f.winner(), Some(1));
}

#[test]
fn a_winner_leaves_the_queued_attempts_not_started() {
    let mut f = FanOut::new(3, 1, Selection::FirstVerified, false).unwrap();
    assert_eq!(drain(&mut f), [Action::Start(0)]);
    f.handle_agent_end(0, AgentEnd::Succeeded);
    assert_eq!(drain(&mut f), [Action::Finish]);
    assert_eq!(f.status(1), Some(AttemptStatus::NotStarted));
    assert_eq!(f.status(2), Some(AttemptStatus::NotStarted));
}

#[test]
fn select_all_verifies_every_success_and_stops_nothing() {
    let mut f = FanOut::new(3, 3, Selection::All, true).unwrap();
    drain(&mut f);
    f.handle_agent_end(2, AgentEnd::Succeeded);
    f.handle_agent_end(0, AgentEnd::Succeeded);
    assert_eq!(drain(&mut f), [Action::Verify(2), Action::Verify(0)]);
    f.handle_verification(0, VerifyEnd::Passed);
    f.handle_verification(2, VerifyEnd::Passed);
    assert_eq!(
        drain(&mut f),
        [Action::Discard(2)],
        "attempt 1 still runs: nothing is stopped; attempt 2 passed after the winner"
    );
    f.handle_agent_end(1, AgentEnd::Succeeded);
    assert_eq!(drain(&mut f), [Action::Verify(1)]);
    f.handle_verification(1, VerifyEnd::Failed);
    assert_eq!(drain(&mut f), [Action::Discard(1), Action::Finish]);
    // The first to pass, in the order they ended.
    assert_eq!(f.winner(), Some(0));
    assert_eq!(
        (0..3).map(|n| f.verified(n)).collect::<Vec<_>>(),
        [Some(true), Some(false), Some(true)]
    );
}

#[test]
fn an_interrupt_stops_every_running_attempt_and_records_what_each_reached() {
    let mut f = FanOut::new(4, 3, Selection::FirstVerified, true).unwrap();
    drain(&mut f);
    f.handle_agent_end(0, AgentEnd::Succeeded);
    f.handle_agent_end(1, AgentEnd::Failed);
    assert_eq!(
        drain(&mut f),
        [Action::Verify(0), Action::Discard(1), Action::Start(3)]
    );
    assert_eq!(f.status(0), Some(AttemptStatus::Verifying));
    f.handle_interrupt();
    assert_eq!(
        drain(&mut f),
        [Action::Stop(0), Action::Stop(2), Action::Stop(3)]
    );
    // A second interrupt repeats the stops: the driver kills at once.
    f.handle_interrupt();
    assert_eq!(
        drain(&mut f),
        [Action::Stop(0), Action::Stop(2), Action::Stop(3)]
    );
    f.handle_verification(0, VerifyEnd::Stopped);
    f.handle_agent_end(2, AgentEnd::Stopped);
    f.handle_agent_end(3, AgentEnd::Stopped);
    assert_eq!(
        drain(&mut f),
        [
            Action::Discard(0),
            Action::Discard(2),
            Action::Discard(3),
            Action::Finish
        ]
    );
    assert!(f.interrupted());
    assert_eq!(f.winner(), None);
    assert_eq!(
        (0..4).map(|n| f.status(n).unwrap()).collect::<Vec<_>>(),
        [
            AttemptStatus::Interrupted,
            AttemptStatus::Failed,
            AttemptStatus::Interrupted,
            AttemptStatus::Interrupted
        ]
    );
}

#[test]
fn an_interrupt_before_any_start_leaves_every_attempt_not_started() {
    let mut f = FanOut::new(2, 2, Selection::All, false).unwrap();
    f.handle_interrupt();
    assert_eq!(drain(&mut f), [Action::Finish]);
    assert_eq!(f.status(0), Some(AttemptStatus::NotStarted));
}

#[test]
fn ends_out_of_turn_are_ignored() {
    let mut f = FanOut::new(2, 1, Selection::All, true).unwrap();
    assert_eq!(drain(&mut f), [Action::Start(0)]);
    // Attempt 1 never started, attempt 0 is not verifying, attempt 7 does not exist.
    f.handle_agent_end(1, AgentEnd::Succeeded);
    f.handle_verification(0, VerifyEnd::Passed);
    f.handle_agent_end(7, AgentEnd::Succeeded);
    assert_eq!(f.winner(), None);
    assert_eq!(f.status(1), Some(AttemptStatus::Queued));
    f.handle_agent_end(0, AgentEnd::Error);
    assert_eq!(drain(&mut f), [Action::Discard(0), Action::Start(1)]);
    f.handle_agent_end(1, AgentEnd::Failed);
    assert_eq!(drain(&mut f), [Action::Discard(1), Action::Finish]);
    assert_eq!(f.status(0), Some(AttemptStatus::Error));
}

#[test]
fn setup_errors_are_specific() {
    assert_eq!(
        FanOut::new(0, 1, Selection::All, false).unwrap_err(),
        FanOutError::NoAttempts
    );
    assert_eq!(
        FanOut::new(1, 0, Selection::All, false).unwrap_err(),
        FanOutError::NoJobs
    );
    assert_eq!(
        Selection::from_name("best").unwrap_err(),
        FanOutError::UnknownSelection("best".into())
    );
    assert_eq!(Selection::from_name("all"), Ok(Selection::All));
    assert_eq!(default_jobs(3), 3);
    assert_eq!(default_jobs(20), DEFAULT_MAX_JOBS);
}

#[test]
fn numstat_is_summed_and_a_misread_line_is_refused() {
    let c = Changes::from_numstat("3\t1\tsrc/a.rs\n-\t-\timg.png\n10\t0\tnew file.txt\n").unwrap();
    assert_eq!(
        c,
        Changes {
            files: 3,
            insertions: 13,
            deletions: 1
        }
    );
    assert_eq!(Changes::from_numstat("").unwrap(), Changes::default());
    assert!(Changes::from_numstat("x\t1\ta\n").is_err());
    assert!(Changes::from_numstat("fatal: bad revision\n").is_err());
}

#[test]
fn the_record_has_the_documented_shape() {
    let mut a = AttemptRecord::new("claude", Some("opus".into()));
    a.status = AttemptStatus::NotStarted;
    let record = FanOutRecord::new("f1", vec![a], None);
    let v = serde_json::to_value(&record).unwrap();
    let keys: Vec<&str> = v["attempts"][0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut expected = [
        "harness",
        "model",
        "status",
        "failure_kind",
        "verified",
        "verification",
        "worktree",
        "branch",
        "changes",
        "usage",
        "duration_ms",
        "artifacts",
        "session_id",
    ];
    expected.sort_unstable();
    let mut keys = keys;
    keys.sort_unstable();
    assert_eq!(keys, expected);
    assert_eq!(v["attempts"][0]["status"], "not_started");
    assert_eq!(v["winner"], serde_json::Value::Null);
    let back: FanOutRecord = serde_json::from_value(v).unwrap();
    assert_eq!(back, record);
}
