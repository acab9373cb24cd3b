//! Fuzzes the appended-instruction sanitizer with known injection phrases, disguised and
//! embedded in noise (a structured case decoded with `arbitrary`): none may survive.
//! The body lives in `agentrun_tests::fuzz_bodies` so stable CI replays this corpus too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| agentrun_tests::fuzz_bodies::sanitize_phrase(data));
