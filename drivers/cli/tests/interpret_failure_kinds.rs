//! `agentrun interpret --json` on the real CLIs' recorded failures (Codex, OpenCode, Gemini
//! CLI, pi): the final object's outcome is a failed turn carrying its `failure_kind`, and the
//! API's `retry_after` where the stream passed it on; the human output names the failure.

#[path = "support/sandbox.rs"]
mod sandbox;

use sandbox::{Sandbox, fixture, stdout};
use serde_json::{Value, json};

/// The last JSON object `agentrun interpret --harness HARNESS --json FIXTURE` prints.
fn last_object(harness: &str, fixture_path: &str) -> Value {
    let path = fixture(fixture_path);
    let o = Sandbox::new()
        .cmd(&[
            "interpret",
            "--harness",
            harness,
            "--json",
            path.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let out = stdout(&o);
    let last = out.lines().last().unwrap_or_else(|| {
        panic!(
            "{fixture_path}: no output: {}",
            String::from_utf8_lossy(&o.stderr)
        )
    });
    serde_json::from_str(last).unwrap()
}

#[test]
fn recorded_failures_carry_their_kind_in_the_json_outcome() {
    for (harness, fixture_path, kind, retry_after) in [
        (
            "codex",
            "codex/codex-0.171.0-http-429.jsonl",
            "rate_limited",
            None,
        ),
        (
            "codex",
            "codex/codex-0.171.0-http-503.jsonl",
            "overloaded",
            None,
        ),
        ("codex", "codex/codex-0.171.0-http-401.jsonl", "auth", None),
        (
            "codex",
            "codex/codex-0.171.0-disconnect.jsonl",
            "network",
            None,
        ),
        (
            "opencode",
            "opencode/opencode-1.18.33-http-429-retry-after.jsonl",
            "rate_limited",
            Some(json!({"delay_ms": 1000})),
        ),
        (
            "opencode",
            "opencode/opencode-1.18.33-http-500.jsonl",
            "server_error",
            None,
        ),
        (
            "gemini",
            "gemini/gemini-cli-0.61.0-http-503.jsonl",
            "overloaded",
            None,
        ),
        (
            "gemini",
            "gemini/gemini-cli-0.61.0-http-401.jsonl",
            "auth",
            None,
        ),
        ("pi", "pi/pi-0.73.1-http-429.jsonl", "rate_limited", None),
        ("pi", "pi/pi-0.73.1-http-500.jsonl", "server_error", None),
    ] {
        let last = last_object(harness, fixture_path);
        let outcome = &last["outcome"];
        assert_eq!(
            outcome["status"]["status"], "turn_failed",
            "{fixture_path}: {last:#}"
        );
        assert_eq!(outcome["failure_kind"], kind, "{fixture_path}: {last:#}");
        assert_eq!(
            outcome.get("retry_after").cloned(),
            retry_after,
            "{fixture_path}: {last:#}"
        );
    }
}

#[test]
fn a_success_carries_no_failure_kind() {
    let last = last_object("codex", "codex/codex-0.171.0-text-turn.jsonl");
    assert_eq!(last["outcome"]["status"]["status"], "succeeded", "{last:#}");
    assert!(last["outcome"].get("failure_kind").is_none(), "{last:#}");
}

#[test]
fn harness_retries_are_progress_lines() {
    let path = fixture("pi/pi-0.73.1-http-503.jsonl");
    let o = Sandbox::new()
        .cmd(&["interpret", "--harness", "pi", path.to_str().unwrap()])
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(
        out.lines().any(|l| l == "overloaded, retry 1/2 in 0.5 s"),
        "{out}"
    );
    let path = fixture("codex/codex-0.171.0-http-429-retry-after.jsonl");
    let o = Sandbox::new()
        .cmd(&["interpret", "--harness", "codex", path.to_str().unwrap()])
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(out.lines().any(|l| l == "rate limited, retry 2/2"), "{out}");
}
