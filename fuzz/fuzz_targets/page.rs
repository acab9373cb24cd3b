//! Fuzzes line pages, byte ranges, the line index and the binary decoders.
//! The body lives in `agentrun_tests::fuzz_bodies` so stable CI replays this corpus too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| agentrun_tests::fuzz_bodies::page(data));
