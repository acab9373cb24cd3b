//! Fuzzes pruning and the compaction retry machine on generated transcripts (decoded with
//! `arbitrary`): call/result pairing intact, every reference resolving to the output it
//! replaced, pruning idempotent, at most one retry, the original never changed. The input type
//! and body live in `agentrun_tests` so stable CI replays this corpus too.
#![no_main]

use agentrun_tests::compaction_checks::CompactionInput;

libfuzzer_sys::fuzz_target!(|input: CompactionInput| {
    agentrun_tests::fuzz_bodies::compaction_input(&input)
});
