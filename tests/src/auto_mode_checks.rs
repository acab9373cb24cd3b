//! Properties of auto mode: its text parsers (the appended-instruction sanitizer and the
//! verdict parser) and its phase machine over sequences of turn results ([`check_auto_mode`]).
//! Each check panics only when a property is violated.

use std::time::{Duration, UNIX_EPOCH};

use agentrun_core::auto_mode::sanitize::{
    MAX_SANITIZED_BYTES, TRUNCATION_MARKER, contains_injection_pattern, sanitize_instruction,
};
use agentrun_core::auto_mode::{
    Action, AppendedFile, AutoMode, Phase, SessionStatus, Settings, Verdict, VerificationResult,
    parse_verdict,
};
use agentrun_core::turn::TurnOutput;
use arbitrary::Arbitrary;

use crate::fuzz_inputs::{Encode, encode_fields, encode_variant};

/// Invisible characters that must never survive sanitizing (a sample of the removed set; the
/// sanitizer removes more).
const INVISIBLE: [char; 6] = [
    '\u{200B}', '\u{200D}', '\u{202E}', '\u{2066}', '\u{FEFF}', '\u{00AD}',
];

/// The sanitizer's output is bounded, carries the marker exactly when it was cut, holds no
/// control or invisible characters and no injection pattern, and is stable when sanitized
/// again.
pub fn check_sanitizer(input: &str) {
    let out = sanitize_instruction(input);
    let cut = out.ends_with(TRUNCATION_MARKER);
    let body = if cut {
        &out[..out.len() - TRUNCATION_MARKER.len()]
    } else {
        &out[..]
    };
    assert!(
        body.len() <= MAX_SANITIZED_BYTES,
        "sanitized text is {} bytes",
        body.len()
    );
    for c in body.chars() {
        assert!(
            c == '\n' || c == '\t' || !c.is_control(),
            "control character {c:?} survived"
        );
        assert!(
            !INVISIBLE.contains(&c),
            "invisible character {c:?} survived"
        );
    }
    assert!(
        !contains_injection_pattern(&out),
        "an injection pattern survived in {out:?}"
    );
    if !cut {
        assert_eq!(sanitize_instruction(&out), out, "sanitizing is not stable");
    }
}

/// A verdict is only found where its words stand whole in the answer, and spelling it out
/// alone always parses back to it.
pub fn check_verdict(answer: &str) {
    for v in [
        Verdict::Complete,
        Verdict::InProgress,
        Verdict::NeedsAdjustment,
    ] {
        assert_eq!(parse_verdict(v.as_str()), Some(v));
    }
    let Some(verdict) = parse_verdict(answer) else {
        return;
    };
    let words: Vec<String> = answer
        .split(|c: char| !c.is_alphanumeric())
        .map(str::to_uppercase)
        .collect();
    let first = verdict.as_str().split(' ').next().unwrap_or_default();
    assert!(
        words.iter().any(|w| w == first),
        "{verdict:?} found in {answer:?} without the whole word {first}"
    );
}

// ---------------------------------------------------------------------------------------------
// The phase machine over sequences of turn results
// ---------------------------------------------------------------------------------------------

/// A session's settings and the results its turns and verifications get, in order (the steps
/// repeat when the session outlasts them). Decoded with `arbitrary` (the `auto_mode` fuzz
/// target); the property tests build it from generated parts.
#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub struct AutoModeInput {
    /// `max_turns = 3 + v % 9`.
    pub max_turns: u8,
    /// Whether a verification command is configured.
    pub verify: bool,
    /// The first step.
    pub first: StepInput,
    /// The next steps.
    pub more: Vec<StepInput>,
}

/// What one harness turn (or verification) returns.
#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub struct StepInput {
    /// The turn's exit code.
    pub code: CodeInput,
    /// The turn's answer text.
    pub answer: AnswerInput,
    /// Whether the answer comes through the clean result channel rather than the final text.
    pub in_sink: bool,
    /// The verification's exit code, when this step answers a verification.
    pub verification: VerificationInput,
}

/// A turn's exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub enum CodeInput {
    /// 0.
    Success,
    /// 1.
    Failure,
    /// `2 + v % 254`.
    Other(u8),
    /// -1.
    Negative,
    /// Unknown.
    Unknown,
}

/// A turn's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub enum AnswerInput {
    /// `COMPLETE`.
    Complete,
    /// `IN PROGRESS`.
    InProgress,
    /// `NEEDS ADJUSTMENT`.
    NeedsAdjustment,
    /// `INCOMPLETE`.
    Incomplete,
    /// Two verdicts at once.
    Ambiguous,
    /// `not complete`.
    NotComplete,
    /// Nothing.
    Empty,
}

/// A verification's exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub enum VerificationInput {
    /// 0: passed.
    Pass,
    /// 1.
    Fail,
    /// Unknown.
    Unknown,
    /// `2 + v % 198`.
    Code(u8),
}

encode_fields!(AutoModeInput {
    max_turns,
    verify,
    first,
    more
});
encode_fields!(StepInput {
    code,
    answer,
    in_sink,
    verification
});

impl Encode for CodeInput {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Success => encode_variant(0, 5, out),
            Self::Failure => encode_variant(1, 5, out),
            Self::Other(v) => {
                encode_variant(2, 5, out);
                v.encode(out);
            }
            Self::Negative => encode_variant(3, 5, out),
            Self::Unknown => encode_variant(4, 5, out),
        }
    }
}

impl Encode for AnswerInput {
    fn encode(&self, out: &mut Vec<u8>) {
        encode_variant(*self as u32, 7, out);
    }
}

impl Encode for VerificationInput {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Self::Pass => encode_variant(0, 4, out),
            Self::Fail => encode_variant(1, 4, out),
            Self::Unknown => encode_variant(2, 4, out),
            Self::Code(v) => {
                encode_variant(3, 4, out);
                v.encode(out);
            }
        }
    }
}

impl CodeInput {
    fn code(self) -> Option<i32> {
        match self {
            Self::Success => Some(0),
            Self::Failure => Some(1),
            Self::Other(v) => Some(2 + i32::from(v % 254)),
            Self::Negative => Some(-1),
            Self::Unknown => None,
        }
    }
}

impl AnswerInput {
    fn text(self) -> &'static str {
        match self {
            Self::Complete => "COMPLETE",
            Self::InProgress => "IN PROGRESS",
            Self::NeedsAdjustment => "NEEDS ADJUSTMENT",
            Self::Incomplete => "INCOMPLETE",
            Self::Ambiguous => "COMPLETE or NEEDS ADJUSTMENT",
            Self::NotComplete => "not complete",
            Self::Empty => "",
        }
    }
}

impl VerificationInput {
    fn code(self) -> Option<i32> {
        match self {
            Self::Pass => Some(0),
            Self::Fail => Some(1),
            Self::Unknown => None,
            Self::Code(v) => Some(2 + i32::from(v % 198)),
        }
    }
}

/// The phase table, written out independently of the machine: what follows `phase` at
/// `turn` given a turn's exit code and verdict text. `Err`: the session ends, with this status
/// and whether it aborts.
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

/// Drives an auto-mode session through `input` as a driver does (listen, collect appended
/// instructions, run turns and verifications) and checks it against the phase table: it
/// terminates within `max_turns`, every transition follows the table, `abort` is set exactly
/// on required-phase failures, an error exits with the failing turn's code, and completion
/// never happens without a passing verification when one is configured.
pub fn check_auto_mode(input: &AutoModeInput) {
    let max_turns = 3 + u32::from(input.max_turns % 9);
    let verify = input.verify;
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
        max_retries: 0,
        retry_backoff_ms: 30_000,
    };
    let mut now = UNIX_EPOCH;
    let mut m = AutoMode::new("s", settings, now).expect("valid settings");
    let mut steps = std::iter::once(&input.first).chain(&input.more).cycle();
    let mut harness_turns = 0u32;
    let mut last_verification_passed = None;
    let bound = 2 + 3 * (max_turns - 2);
    let mut events = 0;
    while !m.is_closed() {
        events += 1;
        assert!(events < 1000, "does not terminate");
        now += Duration::from_secs(1);
        m.handle_listen(now)
            .expect("listening is accepted while open");
        let mut queue: std::collections::VecDeque<Action> =
            std::iter::from_fn(|| m.poll_action()).collect();
        while let Some(action) = queue.pop_front() {
            match action {
                Action::CollectAppended { .. } => {
                    let files = vec![AppendedFile {
                        name: format!("n{events}"),
                        text: "x".into(),
                    }];
                    m.handle_appended(now, files)
                        .expect("appended files are accepted");
                }
                Action::RunTurn { phase, turn, .. } => {
                    harness_turns += 1;
                    assert!(harness_turns <= bound, "more than {bound} turns");
                    assert!(turn <= max_turns);
                    assert_eq!(phase, m.state().phase);
                    let s = steps.next().expect("the steps repeat");
                    let (code, answer) = (s.code.code(), s.answer.text());
                    let mut out = TurnOutput::from_text(if s.in_sink { "" } else { answer });
                    if s.in_sink {
                        out = out.with_result(answer);
                    }
                    if let Some(c) = code {
                        out = out.with_exit_code(c);
                    }
                    let expected =
                        expected_after_turn(phase, turn, max_turns, code, answer, verify);
                    m.handle_turn_finished(now, &out)
                        .expect("a turn result is accepted");
                    match expected {
                        Ok((p, t)) => {
                            assert_eq!(m.status(), SessionStatus::Running);
                            assert_eq!((m.state().phase, m.state().turn), (p, t));
                        }
                        Err((status, abort)) => {
                            assert!(m.is_closed());
                            assert_eq!(m.status(), status);
                            assert_eq!(m.abort().is_some(), abort);
                            if status == SessionStatus::Error {
                                assert_eq!(m.exit_code(), code.filter(|c| *c != 0).unwrap_or(1));
                            }
                        }
                    }
                }
                Action::RunVerification { .. } => {
                    assert!(verify, "a verification without a command");
                    let s = steps.next().expect("the steps repeat");
                    let turn = m.state().turn;
                    let code = s.verification.code();
                    last_verification_passed = Some(code == Some(0));
                    m.handle_verification(
                        now,
                        VerificationResult {
                            exit_code: code,
                            ..VerificationResult::default()
                        },
                    )
                    .expect("a verification result is accepted");
                    if code == Some(0) {
                        assert_eq!(m.status(), SessionStatus::Completed);
                    } else if turn < max_turns {
                        assert_eq!(
                            (m.state().phase, m.state().turn),
                            (Phase::Execute, turn + 1)
                        );
                    } else {
                        assert_eq!(m.status(), SessionStatus::Stopped);
                    }
                }
                _ => {}
            }
            queue.extend(std::iter::from_fn(|| m.poll_action()));
        }
        assert!(m.state().turn <= max_turns);
    }
    let state = m.state();
    assert_ne!(state.status, SessionStatus::Running);
    match state.status {
        SessionStatus::Completed | SessionStatus::Stopped => {
            assert_eq!(m.exit_code(), 0);
            assert!(m.abort().is_none());
        }
        SessionStatus::Error => assert_ne!(m.exit_code(), 0),
        _ => {}
    }
    if m.abort().is_some() {
        assert!(state.phase.is_required());
        assert_eq!(state.status, SessionStatus::Error);
    }
    if state.status == SessionStatus::Completed {
        if verify {
            assert_eq!(last_verification_passed, Some(true));
            assert_eq!(state.verified, Some(true));
        } else {
            assert_eq!(state.verified, Some(false));
        }
    }
}
