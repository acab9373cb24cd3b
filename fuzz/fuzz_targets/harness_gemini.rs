//! Fuzzes the Gemini CLI harness decoder through `Interpretation`: arbitrary bytes split into lines,
//! and arbitrary sequences of plausible events from every dialect. Never panics; observed
//! models never contain an empty name, `<synthetic>` or a duplicate. The bodies live in
//! `agentrun_tests::harness_checks`, combined in `agentrun_tests::fuzz_bodies` so stable CI
//! replays this corpus too.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| agentrun_tests::fuzz_bodies::harness_gemini(data));
