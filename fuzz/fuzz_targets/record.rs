//! Fuzzes reading a record file: any bytes give a record or an error, never a panic; a record
//! read names a format this version reads and writes back to JSON that reads the same.
//! The body lives in `agentrun_tests::fuzz_bodies` so stable CI replays this corpus too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| agentrun_tests::fuzz_bodies::record(data));
