//! Fuzzes the byte scan that decides whether a long JSON line is parsed (the JSON budget of
//! the harness decoders): never panics, and on every input that parses it agrees with the
//! parser's own count of values and depth. The body lives in `agentrun_core::harness::fuzzing`
//! (compiled under `--cfg fuzzing`, and for the stable corpus replay by the core's
//! `fuzz-bodies` feature).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| agentrun_core::harness::fuzzing::json_budget(data));
