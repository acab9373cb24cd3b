//! Fuzzes the run lifecycle on a virtual clock with random sequences of driver events (an
//! event enum decoded with `arbitrary`: time passing, output, the exit, the pipes closing,
//! cancellations, what the group holds): one finish reporting what the driver told, signals in
//! order and never to an empty group, the outcome of the first stop cause, and an end once the
//! events stop. The input type and body live in `agentrun_tests` so stable CI replays this
//! corpus too.
#![no_main]

use agentrun_tests::lifecycle_checks::{LifecycleInput, check_lifecycle};

libfuzzer_sys::fuzz_target!(|input: LifecycleInput| check_lifecycle(&input));
