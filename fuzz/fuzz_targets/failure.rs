//! Fuzzes the failure classifier and the Retry-After parsers on arbitrary texts, statuses and
//! headers: no panic, a kind stable under ASCII case changes, the documented precedence. The input type and body live in `agentrun_tests::machine_fuzz` so stable CI
//! replays this corpus too.
#![no_main]

use agentrun_tests::machine_fuzz::{FailureInput, check_failure};

libfuzzer_sys::fuzz_target!(|input: FailureInput| check_failure(&input));
