//! Fuzzes the fast line scan of the harness decoders against serde_json (a differential
//! target): wherever the scan names a line's type or says it parses, serde_json agrees. The
//! body lives in `agentrun_core::harness::fuzzing` (compiled under `--cfg fuzzing`, and for
//! the stable corpus replay by the core's `fuzz-bodies` feature).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| agentrun_core::harness::fuzzing::line_scan(data));
