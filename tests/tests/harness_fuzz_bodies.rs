//! The harness decoder fuzz bodies (`agentrun_tests::harness_checks`) on every recorded
//! fixture stream and on arbitrary bytes, so their properties are checked on every test run
//! and not only by the fuzzer.

use agentrun_tests::harness_checks;
use proptest::prelude::*;

#[test]
fn fuzz_bodies_replay_every_fixture() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/harness");
    for d in [
        "claude",
        "grok",
        "antigravity",
        "codex",
        "muse",
        "opencode",
        "qwen",
        "pi",
        "gemini",
    ] {
        for entry in std::fs::read_dir(format!("{dir}/{d}")).expect("dir") {
            let bytes = std::fs::read(entry.expect("entry").path()).expect("read");
            for control in [0u8, 1, 3, 0x15] {
                let mut input = vec![control];
                input.extend_from_slice(&bytes);
                harness_checks::claude_bytes(&input);
                harness_checks::grok_bytes(&input);
                harness_checks::agy_bytes(&input);
                harness_checks::codex_bytes(&input);
                harness_checks::muse_bytes(&input);
                harness_checks::opencode_bytes(&input);
                harness_checks::qwen_bytes(&input);
                harness_checks::pi_bytes(&input);
                harness_checks::gemini_bytes(&input);
            }
        }
    }
    let every: Vec<u8> = (0..=255u8).collect();
    for f in [
        harness_checks::claude_events,
        harness_checks::grok_events,
        harness_checks::agy_events,
        harness_checks::codex_events,
        harness_checks::muse_events,
        harness_checks::opencode_events,
        harness_checks::qwen_events,
        harness_checks::pi_events,
        harness_checks::gemini_events,
    ] {
        f(&every);
        f(&[1]);
        f(&[]);
    }
}

proptest! {
    #[test]
    fn fuzz_bodies_hold_on_arbitrary_bytes(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
        harness_checks::arbitrary_bytes(&data);
        harness_checks::plausible_events(&data);
    }
}
