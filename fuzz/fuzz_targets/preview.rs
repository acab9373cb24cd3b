//! Fuzzes capture, previews, hints and the recovery property.
//! The body lives in `agentrun_tests::fuzz_bodies` so stable CI replays this corpus too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| agentrun_tests::fuzz_bodies::preview(data));
