//! Fuzzes the stall watch on a virtual clock with random sequences of lines (on time and late) and
//! checks: it fires once, exactly when the timeout passed without a line, and names the last
//! line's event type. The input type and body live in `agentrun_tests::machine_fuzz` so stable CI
//! replays this corpus too.
#![no_main]

use agentrun_tests::machine_fuzz::{StallInput, check_stall};

libfuzzer_sys::fuzz_target!(|input: StallInput| check_stall(&input));
