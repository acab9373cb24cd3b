//! Fuzzes the transcript parser, pruning and the compaction retry machine: never panics, call/
//! result pairing intact, every reference resolving to the output it replaced, pruning
//! idempotent, at most one retry. The body lives in `agentrun_tests::fuzz_bodies` so stable CI
//! replays this corpus too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| agentrun_tests::fuzz_bodies::compaction(data));
