//! Shared helpers of the harness scenario tests: fixtures and feeding through
//! `Interpretation` only.
#![allow(dead_code, unreachable_pub)]

use agentrun_core::harness::{Completion, Harness, HarnessExit, Interpretation, RetainedRecord};

/// Reads a fixture under `tests/fixtures/harness/`.
pub fn fixture(path: &str) -> Vec<u8> {
    let full = format!(
        "{}/../tests/fixtures/harness/{path}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&full).unwrap_or_else(|e| panic!("{full}: {e}"))
}

/// Splits a stream into lines (without newlines).
pub fn lines(bytes: &[u8]) -> Vec<&[u8]> {
    let mut v: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    if v.last().is_some_and(|l| l.is_empty()) {
        v.pop();
    }
    v
}

/// Feeds every line and returns all progress lines.
pub fn feed(interp: &mut Interpretation, bytes: &[u8]) -> Vec<String> {
    let mut progress = Vec::new();
    for line in lines(bytes) {
        progress.extend(interp.handle_line(line));
    }
    progress
}

/// Feeds a whole stream through a fresh interpretation; `security` is `Some(requested)` to
/// enable the policy first.
pub fn interpret(
    harness: Harness,
    security: Option<Option<&str>>,
    bytes: &[u8],
) -> (Vec<String>, Interpretation) {
    let mut interp = Interpretation::new(harness);
    if let Some(requested) = security {
        interp.for_security(requested);
    }
    let progress = feed(&mut interp, bytes);
    (progress, interp)
}

/// Completes with a successful exit and no retained record.
pub fn complete(interp: Interpretation) -> Completion {
    interp.finish(HarnessExit::Success).complete(None)
}

/// Completes with a successful exit and the given retained record.
pub fn complete_with(interp: Interpretation, record: Option<RetainedRecord>) -> Completion {
    interp.finish(HarnessExit::Success).complete(record)
}

/// Strings from string slices.
pub fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

/// Only the security progress lines.
pub fn model_lines(progress: &[String]) -> Vec<String> {
    progress
        .iter()
        .filter(|p| p.starts_with("Model: "))
        .cloned()
        .collect()
}
