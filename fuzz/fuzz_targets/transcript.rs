//! Fuzzes the transcript document parser: never panics, reading from bytes, from a reader and
//! through a JSON value agree, and what parses is pruned and compacted under fixed summarizer
//! scripts. The body lives in `agentrun_tests::fuzz_bodies` so stable CI replays this corpus
//! too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| agentrun_tests::fuzz_bodies::transcript(data));
