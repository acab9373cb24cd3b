//! Fuzzes the auto-mode phase machine with random sequences of turn and verification results
//! (decoded with `arbitrary`), checked against the phase table written out independently: it
//! terminates within its turn bound, every transition follows the table, aborts exactly on
//! required-phase failures, and never completes without a passing verification when one is
//! configured. The input type and body live in `agentrun_tests` so stable CI replays this
//! corpus too.
#![no_main]

use agentrun_tests::auto_mode_checks::{AutoModeInput, check_auto_mode};

libfuzzer_sys::fuzz_target!(|input: AutoModeInput| check_auto_mode(&input));
