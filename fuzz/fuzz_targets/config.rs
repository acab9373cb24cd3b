//! Fuzzes the configuration file parser (prices, durations, the store setting) on arbitrary
//! text: no panic, only valid prices accepted, durations that print back to themselves. The
//! body lives in `agentrun_tests::machine_fuzz` so stable CI replays this corpus too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| agentrun_tests::machine_fuzz::config(data));
