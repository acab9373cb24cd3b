//! Fuzzes the fan-out machine with random ends of attempts and verifications and interrupts: never
//! more than `jobs` running, one winner at most, and every attempt in a final state at the
//! one `Finish`. The input type and body live in `agentrun_tests::machine_fuzz` so stable CI
//! replays this corpus too.
#![no_main]

use agentrun_tests::machine_fuzz::{FanOutInput, check_fanout};

libfuzzer_sys::fuzz_target!(|input: FanOutInput| check_fanout(&input));
