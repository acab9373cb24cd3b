//! Fuzzes the retry machine on a virtual clock with random sequences of failures (any kind, any
//! retry time), timer wake-ups, clock jumps, resets and resumes: one event per call, waits never
//! past the cap, backoff within its jitter, retries one at a time up to the limit, a
//! non-retryable failure never retried. The input type and body live in `agentrun_tests::machine_fuzz` so stable CI
//! replays this corpus too.
#![no_main]

use agentrun_tests::machine_fuzz::{RetryInput, check_retry};

libfuzzer_sys::fuzz_target!(|input: RetryInput| check_retry(&input));
