//! Fuzzes the capture machine with random sequences of driver operations: chunks on several
//! streams, write and index-write faults, faults of no stream, display text, undeclared
//! channels, then a streamed or full completion.
//! The body lives in `agentrun_tests::fuzz_bodies` so stable CI replays this corpus too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| agentrun_tests::fuzz_bodies::capture(data));
