//! Context-length failures are reported as their own kind, so a summarizer that is a harness
//! run can trigger the pruned compaction retry; a failure with no known status or wording stays
//! unclassified.

// The shared helpers read fixtures from disk; the tests themselves do no I/O.
#![allow(clippy::disallowed_methods)]

mod harness_common;

use agentrun_core::harness::{FailureKind, Harness, OutcomeStatus};
use harness_common::{complete, interpret};

fn kind(harness: Harness, stream: &str) -> (OutcomeStatus, Option<FailureKind>) {
    let (_, interp) = interpret(harness, None, stream.as_bytes());
    let outcome = complete(interp).outcome;
    (outcome.status, outcome.failure_kind)
}

/// The shape Claude Code 2.1 prints when the API refuses an over-long request: a synthetic
/// assistant message with `error: "invalid_request"`, then an error result.
const CLAUDE_PROMPT_TOO_LONG: &str = r#"{"type":"system","subtype":"init","session_id":"s1","model":"claude-sonnet-4-5"}
{"type":"assistant","message":{"model":"<synthetic>","role":"assistant","content":[{"type":"text","text":"Prompt is too long"}]},"parent_tool_use_id":null,"error":"invalid_request","session_id":"s1"}
{"type":"result","subtype":"success","is_error":true,"api_error_status":400,"terminal_reason":"prompt_too_long","result":"Prompt is too long","num_turns":1,"total_cost_usd":0,"session_id":"s1"}
"#;

#[test]
fn claude_prompt_too_long_is_a_context_length_failure() {
    let (status, kind) = kind(Harness::Claude, CLAUDE_PROMPT_TOO_LONG);
    assert!(
        matches!(status, OutcomeStatus::TurnFailed { diagnostic } if diagnostic == "Prompt is too long")
    );
    assert_eq!(kind, Some(FailureKind::ContextLength));
}

#[test]
fn claude_result_text_alone_classifies_without_terminal_reason() {
    let stream = r#"{"type":"result","subtype":"success","is_error":true,"result":"Prompt is too long: 210000 tokens > 200000 maximum"}"#;
    assert_eq!(
        kind(Harness::Claude, stream).1,
        Some(FailureKind::ContextLength)
    );
}

#[test]
fn other_claude_failures_and_successes_are_not_classified() {
    let rate_limited = r#"{"type":"result","subtype":"success","is_error":true,"result":"API Error: 429 rate limited"}"#;
    let (status, k) = kind(Harness::Claude, rate_limited);
    assert!(matches!(status, OutcomeStatus::TurnFailed { .. }));
    assert_eq!(k, None);
    // Mentioning the phrase in a successful answer is not a failure.
    let success = r#"{"type":"result","subtype":"success","is_error":false,"result":"Prompt is too long, said the user"}"#;
    assert_eq!(
        kind(Harness::Claude, success),
        (OutcomeStatus::Succeeded, None)
    );
    // A later root success clears the earlier context-length failure.
    let recovered = format!(
        "{CLAUDE_PROMPT_TOO_LONG}{}\n",
        r#"{"type":"result","subtype":"success","is_error":false,"result":"done"}"#
    );
    assert_eq!(
        kind(Harness::Claude, &recovered),
        (OutcomeStatus::Succeeded, None)
    );
}

#[test]
fn codex_context_window_turn_failure_is_classified() {
    let stream = r#"{"type":"thread.started","thread_id":"t1"}
{"type":"turn.started"}
{"type":"turn.failed","error":{"message":"Codex ran out of room in the model's context window. Start a new thread or clear earlier history before retrying."}}
"#;
    assert_eq!(
        kind(Harness::Codex, stream).1,
        Some(FailureKind::ContextLength)
    );
    // A plan's usage limit is a rate limit; a failure without a known wording has no kind.
    let usage = r#"{"type":"turn.failed","error":{"message":"You've hit your usage limit."}}"#;
    assert_eq!(
        kind(Harness::Codex, usage).1,
        Some(FailureKind::RateLimited)
    );
    let other = r#"{"type":"turn.failed","error":{"message":"the sandbox broke"}}"#;
    assert_eq!(kind(Harness::Codex, other).1, None);
    // A top-level `error` event is a diagnostic, never a turn failure of any kind.
    let diagnostic = r#"{"type":"error","message":"context window exceeded"}
{"type":"turn.completed","usage":{"input_tokens":1,"output_tokens":1}}"#;
    assert_eq!(
        kind(Harness::Codex, diagnostic),
        (OutcomeStatus::Succeeded, None)
    );
}

#[test]
fn opencode_context_overflow_error_is_classified() {
    let stream = r#"{"type":"error","sessionID":"ses_1","error":{"name":"ContextOverflowError","data":{"message":"prompt is too long"}}}"#;
    let (status, k) = kind(Harness::OpenCode, stream);
    assert!(
        matches!(status, OutcomeStatus::TurnFailed { diagnostic } if diagnostic.starts_with("ContextOverflowError"))
    );
    assert_eq!(k, Some(FailureKind::ContextLength));
    let overloaded = r#"{"type":"error","sessionID":"ses_1","error":{"name":"APIError","data":{"message":"overloaded"}}}"#;
    assert_eq!(
        kind(Harness::OpenCode, overloaded).1,
        Some(FailureKind::Overloaded)
    );
    let other = r#"{"type":"error","sessionID":"ses_1","error":{"name":"UnknownError","data":{"message":"the disk is full"}}}"#;
    assert_eq!(kind(Harness::OpenCode, other).1, None);
}

#[test]
fn failure_kind_is_serialized_only_when_present() {
    let (_, interp) = interpret(Harness::Claude, None, CLAUDE_PROMPT_TOO_LONG.as_bytes());
    let json = serde_json::to_value(complete(interp).outcome).unwrap();
    assert_eq!(json["failure_kind"], "context_length");
    let (_, interp) = interpret(
        Harness::Claude,
        None,
        br#"{"type":"result","subtype":"success","result":"ok"}"#,
    );
    let json = serde_json::to_value(complete(interp).outcome).unwrap();
    assert!(json.get("failure_kind").is_none());
}

#[test]
fn every_kind_serializes_as_its_stable_name_and_only_rate_limits_and_overloads_retry() {
    for kind in FailureKind::ALL {
        let json = serde_json::to_value(kind).unwrap();
        assert_eq!(json, kind.as_str(), "{kind:?}");
        assert_eq!(kind.to_string(), kind.as_str());
        let back: FailureKind = serde_json::from_value(json).unwrap();
        assert_eq!(back, kind);
    }
    let retryable: Vec<_> = FailureKind::ALL
        .into_iter()
        .filter(|k| k.is_retryable())
        .collect();
    assert_eq!(
        retryable,
        [FailureKind::RateLimited, FailureKind::Overloaded]
    );
}
