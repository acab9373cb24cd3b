//! Fuzzes the capture machine with random sequences of driver operations (an operation enum
//! decoded with `arbitrary`): chunks on several streams, write and index-write faults, faults
//! of no stream, display text, undeclared channels, then a streamed or full completion.
//! The input type and body live in `agentrun_tests` so stable CI replays this corpus too.
#![no_main]

use agentrun_tests::fuzz_inputs::CaptureInput;

libfuzzer_sys::fuzz_target!(|input: CaptureInput| {
    agentrun_tests::fuzz_bodies::capture_input(&input)
});
