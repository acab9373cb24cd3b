//! Property tests of compaction over generated transcripts: pairing intact in every snapshot,
//! the original unchanged after any outcome, every reference resolving to exactly the output
//! it replaced (also where the transcript names artifacts of its own, right or wrong), pruning idempotent, at most one retry, and no pruning after a non-size failure.

use agentrun_tests::compaction_checks::{
    Answer, Script, case_from_bytes, check_machine, check_prune, script_from_bytes,
};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn pruning_keeps_pairing_resolves_references_and_is_idempotent(
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
    ) {
        let (t, store) = case_from_bytes(&bytes);
        check_prune(&t, &store);
    }

    #[test]
    fn the_machine_retries_at_most_once_and_never_changes_the_original(
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
        a in any::<u8>(), b in any::<u8>(), limit in any::<u8>(),
    ) {
        let (t, store) = case_from_bytes(&bytes);
        check_machine(&t, &store, &script_from_bytes(a, b, limit));
    }

    #[test]
    fn a_non_size_failure_never_prunes(
        bytes in proptest::collection::vec(any::<u8>(), 0..600),
        second in any::<u8>(),
    ) {
        // check_machine asserts no retention and a single run for this script.
        let script = Script {
            answers: [Answer::Other, script_from_bytes(second, 0, 0).answers[0]],
            max_input_bytes: None,
            retention_ok: true,
        };
        let (t, store) = case_from_bytes(&bytes);
        check_machine(&t, &store, &script);
    }
}
