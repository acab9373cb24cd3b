//! Property: over random sequences of turn exit codes, verdicts and verification results,
//! auto mode terminates within `max_turns`, every transition follows the phase table, `abort`
//! is set exactly on required-phase failures, and completion never happens without a passing
//! verification when one is configured.

use std::time::{Duration, UNIX_EPOCH};

use agentrun_core::auto_mode::{
    Action, AppendedFile, AutoMode, Phase, SessionStatus, Settings, VerificationResult,
};
use agentrun_core::turn::TurnOutput;
use proptest::prelude::*;

#[derive(Debug, Clone)]
struct Step {
    code: Option<i32>,
    answer: &'static str,
    in_sink: bool,
    verification: Option<i32>,
}

fn step() -> impl Strategy<Value = Step> {
    (
        prop_oneof![
            6 => Just(Some(0)),
            1 => Just(Some(1)),
            1 => (2..256i32).prop_map(Some),
            1 => Just(Some(-1)),
            1 => Just(None),
        ],
        prop_oneof![
            Just("COMPLETE"),
            Just("IN PROGRESS"),
            Just("NEEDS ADJUSTMENT"),
            Just("INCOMPLETE"),
            Just("COMPLETE or NEEDS ADJUSTMENT"),
            Just("not complete"),
            Just(""),
        ],
        any::<bool>(),
        prop_oneof![
            Just(Some(0)),
            Just(Some(1)),
            Just(None),
            (2..200i32).prop_map(Some)
        ],
    )
        .prop_map(|(code, answer, in_sink, verification)| Step {
            code,
            answer,
            in_sink,
            verification,
        })
}

/// The phase table, written out independently of the machine: what follows `phase` at
/// `turn` given a turn's exit code and verdict text. `None`: the session ends.
fn expected_after_turn(
    phase: Phase,
    turn: u32,
    max: u32,
    code: Option<i32>,
    answer: &str,
    verify: bool,
) -> Result<(Phase, u32), (SessionStatus, bool)> {
    let failed = code != Some(0);
    let next = |turn: u32| {
        if turn < max {
            Ok((Phase::Execute, turn + 1))
        } else {
            Err((SessionStatus::Stopped, false))
        }
    };
    match phase {
        Phase::Clarify | Phase::Plan | Phase::Adjust if failed => Err((SessionStatus::Error, true)),
        Phase::Clarify => Ok((Phase::Plan, 2)),
        Phase::Plan => Ok((Phase::Execute, 3)),
        Phase::Adjust => next(turn),
        Phase::Execute => Ok((Phase::Evaluate, turn)),
        Phase::Evaluate if failed => Err((SessionStatus::Error, false)),
        Phase::Evaluate => match answer {
            "COMPLETE" if verify => Ok((Phase::Verify, turn)),
            "COMPLETE" => Err((SessionStatus::Completed, false)),
            "NEEDS ADJUSTMENT" if turn < max => Ok((Phase::Adjust, turn)),
            _ => next(turn),
        },
        other => panic!("no turn runs in {other:?}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn auto_mode_follows_the_table(
        max_turns in 3u32..12,
        verify in any::<bool>(),
        steps in proptest::collection::vec(step(), 1..80),
    ) {
        let settings = Settings {
            objective: "objective".into(),
            harness: "claude".into(),
            model: None,
            effort: None,
            harness_args: vec![],
            verify: verify.then(|| "make check".to_owned()),
            workspace: None,
            max_turns,
            result_sink_var: "AGENTRUN_RESULT_SINK".into(),
            harness_resumes: true,
        };
        let mut now = UNIX_EPOCH;
        let mut m = AutoMode::new("s", settings, now).unwrap();
        let mut steps = steps.into_iter().cycle();
        let mut harness_turns = 0u32;
        let mut last_verification_passed = None;
        let bound = 2 + 3 * (max_turns - 2);
        let mut events = 0;
        while !m.is_closed() {
            events += 1;
            prop_assert!(events < 1000, "does not terminate");
            now += Duration::from_secs(1);
            m.handle_listen(now).unwrap();
            let mut pending = Vec::new();
            while let Some(a) = m.poll_action() { pending.push(a); }
            let mut queue = std::collections::VecDeque::from(pending);
            while let Some(action) = queue.pop_front() {
                match action {
                    Action::CollectAppended { .. } => {
                        let files = vec![AppendedFile { name: format!("n{events}"), text: "x".into() }];
                        m.handle_appended(now, files).unwrap();
                    }
                    Action::RunTurn { phase, turn, .. } => {
                        harness_turns += 1;
                        prop_assert!(harness_turns <= bound, "more than {bound} turns");
                        prop_assert!(turn <= max_turns);
                        prop_assert_eq!(phase, m.state().phase);
                        let s = steps.next().unwrap();
                        let mut out = TurnOutput::from_text(if s.in_sink { "" } else { s.answer });
                        if s.in_sink { out = out.with_result(s.answer); }
                        if let Some(c) = s.code { out = out.with_exit_code(c); }
                        let expected = expected_after_turn(phase, turn, max_turns, s.code, s.answer, verify);
                        m.handle_turn_finished(now, &out).unwrap();
                        match expected {
                            Ok((p, t)) => {
                                prop_assert_eq!(m.status(), SessionStatus::Running);
                                prop_assert_eq!((m.state().phase, m.state().turn), (p, t));
                            }
                            Err((status, abort)) => {
                                prop_assert!(m.is_closed());
                                prop_assert_eq!(m.status(), status);
                                prop_assert_eq!(m.abort().is_some(), abort);
                                if status == SessionStatus::Error {
                                    let code = s.code.filter(|c| *c != 0).unwrap_or(1);
                                    prop_assert_eq!(m.exit_code(), code);
                                }
                            }
                        }
                    }
                    Action::RunVerification { .. } => {
                        prop_assert!(verify);
                        let s = steps.next().unwrap();
                        let turn = m.state().turn;
                        last_verification_passed = Some(s.verification == Some(0));
                        m.handle_verification(now, VerificationResult {
                            exit_code: s.verification, ..VerificationResult::default()
                        }).unwrap();
                        if s.verification == Some(0) {
                            prop_assert_eq!(m.status(), SessionStatus::Completed);
                        } else if turn < max_turns {
                            prop_assert_eq!((m.state().phase, m.state().turn), (Phase::Execute, turn + 1));
                        } else {
                            prop_assert_eq!(m.status(), SessionStatus::Stopped);
                        }
                    }
                    _ => {}
                }
                while let Some(a) = m.poll_action() { queue.push_back(a); }
            }
            prop_assert!(m.state().turn <= max_turns);
        }
        let state = m.state();
        prop_assert!(state.status != SessionStatus::Running);
        match state.status {
            SessionStatus::Completed | SessionStatus::Stopped => {
                prop_assert_eq!(m.exit_code(), 0);
                prop_assert!(m.abort().is_none());
            }
            SessionStatus::Error => prop_assert!(m.exit_code() != 0),
            _ => {}
        }
        if m.abort().is_some() {
            prop_assert!(state.phase.is_required());
            prop_assert_eq!(state.status, SessionStatus::Error);
        }
        if state.status == SessionStatus::Completed {
            if verify {
                prop_assert_eq!(last_verification_passed, Some(true));
                prop_assert_eq!(state.verified, Some(true));
            } else {
                prop_assert_eq!(state.verified, Some(false));
            }
        }
    }
}
