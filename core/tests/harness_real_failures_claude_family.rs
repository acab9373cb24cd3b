//! What the real Claude Code and Qwen Code CLIs print when the API fails them, recorded by
//! `scripts/record-harness-fixtures.sh` against the scripted model server (the CLI's own
//! retries cut to one): HTTP 429 with and without `Retry-After`, 529, 503, 500, 401, a request
//! never answered (the CLI's request timeout, or the CLI stopped before it, as a stall timeout
//! stops it), a stream cut mid-answer and an API nothing listens for (Qwen Code: not 503, 500
//! and the timed-out request, which it retries for minutes). Each decodes to its failure kind,
//! so a decoder regression against the real dialects fails without the CLIs.
#![allow(clippy::disallowed_methods)]

mod harness_common;

use agentrun_core::harness::{
    Completion, FailureKind, Harness, HarnessExit, OutcomeStatus, RetryAfter,
};
use harness_common::*;

/// The session id the recording gives every failure scenario.
const SESSION: &str = "00000000-0000-4000-8000-000000000008";

/// The scenario's stream, completed as `agentrun agent` completes it: the failed CLI exits
/// non-zero (Claude Code and Qwen Code exit 1 on a failed turn).
fn decode(prefix: &str, harness: Harness, scenario: &str) -> (Vec<String>, Completion) {
    let (progress, interp) = interpret(
        harness,
        None,
        &fixture(&format!("{prefix}-{scenario}.jsonl")),
    );
    let completion = interp
        .finish(HarnessExit::Failed {
            diagnostic: format!("{harness} exited with code 1"),
        })
        .complete(None);
    // The failure recordings keep no session log (the stream names the failure).
    assert!(
        completion
            .report
            .warnings
            .iter()
            .all(|w| w.contains("session log was not available")),
        "{scenario}: {:?}",
        completion.report.warnings
    );
    (progress, completion)
}

const CLAUDE: &str = "claude/claude-code-2.1.332";

fn claude(scenario: &str) -> (Vec<String>, Completion) {
    decode(CLAUDE, Harness::Claude, scenario)
}

/// Asserts a failed turn of `kind` whose diagnostic contains `cause`.
#[track_caller]
fn failed(c: &Completion, cause: &str, kind: FailureKind) {
    assert_eq!(c.outcome.session_id.as_deref(), Some(SESSION));
    match &c.outcome.status {
        OutcomeStatus::TurnFailed { diagnostic } => {
            assert!(diagnostic.contains(cause), "{diagnostic}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(c.outcome.failure_kind, Some(kind), "{:?}", c.outcome.status);
    if !kind.is_retryable() {
        assert_eq!(c.outcome.retry_after, None);
    }
}

#[test]
fn claude_code_rate_limits_with_and_without_retry_after() {
    // Claude Code calls these turns `subtype: "success"`; they are not.
    let (progress, c) = claude("rate-limited-retry-after");
    failed(&c, "429", FailureKind::RateLimited);
    // It waited out the server's `Retry-After: 1` before its own retry.
    assert!(
        matches!(c.outcome.retry_after, Some(RetryAfter::DelayMs(ms)) if ms >= 1000),
        "{:?}",
        c.outcome.retry_after
    );
    assert!(
        progress
            .iter()
            .any(|p| p.starts_with("rate limited, retry 1/1 in 1.")),
        "{progress:?}"
    );
    let (progress, c) = claude("rate-limited-no-retry-after");
    failed(&c, "429", FailureKind::RateLimited);
    assert!(
        matches!(c.outcome.retry_after, Some(RetryAfter::DelayMs(_))),
        "{:?}",
        c.outcome.retry_after
    );
    assert!(
        progress
            .iter()
            .any(|p| p.starts_with("rate limited, retry 1/1 in ")),
        "{progress:?}"
    );
}

#[test]
fn claude_code_overloads_server_errors_and_bad_keys() {
    for (scenario, cause, kind, retry) in [
        (
            "overloaded-529",
            "529 Overloaded",
            FailureKind::Overloaded,
            "overloaded, retry 1/1",
        ),
        (
            "overloaded-503",
            "503 Service Unavailable",
            FailureKind::Overloaded,
            "overloaded, retry 1/1",
        ),
        (
            "server-error-500",
            "500 Internal server error",
            FailureKind::ServerError,
            "server error 500, retry 1/1",
        ),
        (
            "auth-401",
            "Invalid API key",
            FailureKind::Auth,
            "authentication failed, retry 1/1",
        ),
    ] {
        let (progress, c) = claude(scenario);
        failed(&c, cause, kind);
        assert!(
            progress.iter().any(|p| p.starts_with(retry)),
            "{scenario}: {progress:?}"
        );
        // The API error answered nothing: no model.
        assert!(c.report.models.is_empty(), "{scenario}");
    }
}

#[test]
fn claude_code_unanswered_cut_and_unreachable_requests_are_network_failures() {
    // The cut stream was recorded without retries (Claude Code asks again without streaming
    // on its own).
    for (scenario, cause, retried) in [
        ("no-answer", "Request timed out", true),
        ("disconnect", "ECONNRESET", false),
        ("unreachable", "ECONNREFUSED", true),
    ] {
        let (progress, c) = claude(scenario);
        failed(&c, cause, FailureKind::Network);
        let retry = progress
            .iter()
            .any(|p| p.starts_with("API request failed, retry 1/1"));
        assert_eq!(retry, retried, "{scenario}: {progress:?}");
    }
}

#[test]
fn claude_code_stopped_before_any_answer_is_cut_off() {
    // Stopped while waiting (killed, as a timeout stops it): the init and nothing more.
    let (_, c) = claude("no-answer-stopped");
    assert!(!c.outcome.terminal_seen);
    assert!(matches!(
        c.outcome.status,
        OutcomeStatus::ExecutionFailed { .. }
    ));
    assert_eq!(c.outcome.failure_kind, Some(FailureKind::CutOff));
    // Read back as a recorded stream (no process), the same.
    let (_, interp) = interpret(
        Harness::Claude,
        None,
        &fixture(&format!("{CLAUDE}-no-answer-stopped.jsonl")),
    );
    let c = complete(interp);
    assert!(matches!(c.outcome.status, OutcomeStatus::TurnFailed { .. }));
    assert_eq!(c.outcome.failure_kind, Some(FailureKind::CutOff));
}

const QWEN: &str = "qwen/qwen-code-0.24.4";

fn qwen(scenario: &str) -> (Vec<String>, Completion) {
    decode(QWEN, Harness::Qwen, scenario)
}

#[test]
fn qwen_code_rate_limits_overloads_bad_keys_and_lost_connections() {
    for (scenario, cause, kind) in [
        (
            "rate-limited-retry-after",
            "[API Error: 429",
            FailureKind::RateLimited,
        ),
        (
            "rate-limited-no-retry-after",
            "[API Error: 429",
            FailureKind::RateLimited,
        ),
        (
            "overloaded-529",
            "[API Error: 529 Overloaded]",
            FailureKind::Overloaded,
        ),
        (
            "auth-401",
            "[API Error: 401 invalid x-api-key]",
            FailureKind::Auth,
        ),
        // Cut mid-answer, after its own retries (each cut too).
        ("disconnect", "UND_ERR_SOCKET", FailureKind::Network),
        ("unreachable", "Connection error", FailureKind::Network),
    ] {
        let (_, c) = qwen(scenario);
        failed(&c, cause, kind);
    }
    // Its own retries (cut to one) are progress; they name no status.
    let (progress, _) = qwen("rate-limited-retry-after");
    assert!(
        progress.contains(&"API request failed, retry 1/1 in 1.0 s".to_owned()),
        "{progress:?}"
    );
}

#[test]
fn qwen_code_stopped_before_any_answer_is_cut_off() {
    let (_, c) = qwen("no-answer-stopped");
    assert!(!c.outcome.terminal_seen);
    assert_eq!(c.outcome.failure_kind, Some(FailureKind::CutOff));
}
