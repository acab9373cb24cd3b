//! Property tests of auto mode's sanitizer and verdict parser over text built from the
//! fragments attackers use (patterns, look-alikes, invisible splitters, role markers), so the
//! interesting interleavings come up far more often than from random bytes.

use agentrun_tests::auto_mode_checks::{check_sanitizer, check_verdict};
use proptest::prelude::*;

const FRAGMENTS: [&str; 24] = [
    "ignore",
    "IGNORE",
    "ｉｇｎｏｒｅ",
    " ",
    "\n",
    "\t",
    "all",
    "previous",
    "instructions",
    "\u{200B}",
    "\u{202E}",
    "system",
    ":",
    "## ",
    "<|im_start|>",
    "<|",
    "im_end",
    "|>",
    "[INST]",
    "you are now",
    "COMPLETE",
    "IN PROGRESS",
    "in",
    "é",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn sanitizer_and_verdict_hold_on_fragment_soup(
        parts in proptest::collection::vec(0..FRAGMENTS.len(), 0..40),
        extra in ".{0,20}",
    ) {
        let mut text: String = parts.iter().map(|&i| FRAGMENTS[i]).collect();
        text.push_str(&extra);
        check_sanitizer(&text);
        check_verdict(&text);
    }
}
