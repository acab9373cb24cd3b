//! Property: over random sequences of turn exit codes, verdicts and verification results,
//! auto mode terminates within `max_turns`, every transition follows the phase table, `abort`
//! is set exactly on required-phase failures, and completion never happens without a passing
//! verification when one is configured (`agentrun_tests::auto_mode_checks::check_auto_mode`,
//! also the body of the `auto_mode` fuzz target).

use agentrun_tests::auto_mode_checks::{
    AnswerInput, AutoModeInput, CodeInput, StepInput, VerificationInput, check_auto_mode,
};
use proptest::prelude::*;

fn step() -> impl Strategy<Value = StepInput> {
    (
        prop_oneof![
            6 => Just(CodeInput::Success),
            1 => Just(CodeInput::Failure),
            1 => any::<u8>().prop_map(CodeInput::Other),
            1 => Just(CodeInput::Negative),
            1 => Just(CodeInput::Unknown),
        ],
        prop_oneof![
            Just(AnswerInput::Complete),
            Just(AnswerInput::InProgress),
            Just(AnswerInput::NeedsAdjustment),
            Just(AnswerInput::Incomplete),
            Just(AnswerInput::Ambiguous),
            Just(AnswerInput::NotComplete),
            Just(AnswerInput::Empty),
        ],
        any::<bool>(),
        prop_oneof![
            Just(VerificationInput::Pass),
            Just(VerificationInput::Fail),
            Just(VerificationInput::Unknown),
            any::<u8>().prop_map(VerificationInput::Code),
        ],
    )
        .prop_map(|(code, answer, in_sink, verification)| StepInput {
            code,
            answer,
            in_sink,
            verification,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn auto_mode_follows_the_table(
        max_turns in 0u8..9,
        verify in any::<bool>(),
        first in step(),
        more in proptest::collection::vec(step(), 0..79),
    ) {
        check_auto_mode(&AutoModeInput { max_turns, verify, first, more });
    }
}
